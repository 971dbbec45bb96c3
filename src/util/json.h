/* json.h — the project's one JSON reader (RFC 8259): parses a text into a tree of values, each
 * carrying the line and column where it starts, so that every file read as JSON (a Hugging Face
 * config.json, a safetensors header, model.safetensors.index.json, the tokenizer's encoder.json)
 * reports bad input as "FILE:LINE:COL: what". Duplicate keys in an object are an error. Strings are
 * decoded to UTF-8 (\uXXXX escapes and surrogate pairs included); a "\u0000" escape is accepted in
 * values (str_len counts it) and rejected in keys, which are plain C strings. */
#ifndef ZT_JSON_H
#define ZT_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

typedef enum { ZT_JSON_NULL, ZT_JSON_BOOL, ZT_JSON_NUMBER, ZT_JSON_STRING, ZT_JSON_ARRAY, ZT_JSON_OBJECT } zt_json_type;

typedef struct zt_json {
    zt_json_type type;
    int line, col;         /* where this value starts: 1-based line, 1-based byte column */
    int key_line, key_col; /* a member of an object: where its key starts (else 0) */
    int boolean;           /* ZT_JSON_BOOL */
    double number;         /* ZT_JSON_NUMBER */
    int is_uint;           /* ZT_JSON_NUMBER: a non-negative integer literal that fits in 64 bits, exact in u */
    uint64_t u;
    char *str;             /* ZT_JSON_STRING: NUL-terminated UTF-8 */
    size_t str_len;
    int n;                 /* ZT_JSON_ARRAY / ZT_JSON_OBJECT: number of items */
    struct zt_json *items; /* [n] */
    char **keys;           /* ZT_JSON_OBJECT: [n], in file order */
} zt_json;

/* Parses TEXT[0..LEN) as one JSON value (whitespace around it allowed) into *OUT. On failure fills
 * ERR with "NAME:LINE:COL: what" (NAME is the file, or whatever names the text) and leaves *OUT
 * empty (zt_json_free on it is harmless). */
int zt_json_parse(const char *text, size_t len, const char *name, zt_json *out, zt_err *err);
/* Reads and parses the file PATH (at most ZT_READ_FILE_MAX bytes); errors name PATH. */
int zt_json_read_file(const char *path, zt_json *out, zt_err *err);
/* The same, refusing a file of more than MAX bytes (zt_read_file_max: one line naming PATH). */
int zt_json_read_file_max(const char *path, size_t max, zt_json *out, zt_err *err);
void zt_json_free(zt_json *v);

/* The member KEY of object OBJ, or NULL (also when OBJ is not an object). */
const zt_json *zt_json_get(const zt_json *obj, const char *key);
/* The name of a type for messages: "null", "a boolean", "a number", "a string", "an array", "an object". */
const char *zt_json_type_name(zt_json_type t);

#endif
