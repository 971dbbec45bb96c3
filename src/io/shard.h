/* shard.h — llm.c's token shard formats: a header of 256 little-endian int32 (header[0] = magic,
 * header[1] = version, header[2] = token count, the rest 0), then the tokens, little-endian:
 *   magic 20240520, version 1: uint16 tokens (GPT-2's; vocabularies of up to 65536 tokens);
 *   magic 20240801, version 7: uint32 tokens (llm.c's Llama 3 shards; larger vocabularies).
 * The file is exactly 1024 + width * count bytes (width 2 or 4). */
#ifndef ZT_SHARD_H
#define ZT_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#define ZT_SHARD_MAGIC 20240520
#define ZT_SHARD_VERSION 1
#define ZT_SHARD_MAGIC_U32 20240801
#define ZT_SHARD_VERSION_U32 7
#define ZT_SHARD_HEADER_BYTES 1024

/* Writes a uint16 shard atomically: to "PATH.tmp.PID", fsync, then rename to PATH (and fsync the
 * directory). On failure the temp file is removed and nothing appears under PATH. N must be at
 * most INT32_MAX. Returns 0 or -1 with ERR naming PATH. */
int zt_shard_write(const char *path, const uint16_t *tokens, size_t n, zt_err *err);

/* The same written as the tokens come: open (WIDTH 2: uint16 tokens, 4: uint32), append any number
 * of times, then commit (which writes the count into the header, fsyncs and renames) or abort
 * (which removes the temp file). A failed append or commit has already aborted. At most INT32_MAX
 * tokens in all. */
typedef struct zt_shard_writer {
    char *path, *tmp;
    int fd;
    int width; /* bytes a token */
    size_t n;  /* tokens appended so far */
} zt_shard_writer;
int zt_shard_writer_open(zt_shard_writer *w, const char *path, int width, zt_err *err);
/* N tokens of a width-2 shard. */
int zt_shard_writer_append(zt_shard_writer *w, const uint16_t *tokens, size_t n, zt_err *err);
/* N tokens already in the file's form: little-endian, w->width bytes each. */
int zt_shard_writer_append_le(zt_shard_writer *w, const uint8_t *tokens, size_t n, zt_err *err);
int zt_shard_writer_commit(zt_shard_writer *w, zt_err *err);
void zt_shard_writer_abort(zt_shard_writer *w);

/* Validates PATH's header and size; *n_tokens gets the token count, *width (when not NULL) the
 * bytes a token (2 or 4). Errors name the file: "cannot open", "empty file", "not a token shard
 * (magic X, expected 20240520 ...)", "unsupported shard version X", "truncated: header says N
 * tokens (B bytes) but file has M bytes". */
int zt_shard_read_header(const char *path, size_t *n_tokens, int *width, zt_err *err);

/* Validates PATH (a uint16 shard) and reads all its tokens into a new array (free() it); NULL with
 * ERR on failure. A shard of 0 tokens gives a non-NULL (1-element) array and *n_tokens = 0. */
uint16_t *zt_shard_load(const char *path, size_t *n_tokens, zt_err *err);

#endif
