/* json.c — see json.h. A recursive-descent parser over a byte buffer that keeps the line and the
 * start of the current line, so every value and every error has a line:column. */
#include "util/json.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 128

typedef struct parser {
    const char *s, *name;
    size_t len, pos;
    size_t line_start; /* byte offset where the current line begins */
    int line, depth;
    zt_err *err;
} parser;

static int col_of(const parser *p, size_t at) { return (int)(at - p->line_start) + 1; }

/* Fails at byte AT (which is on the current line: the parser never looks back past a newline). */
static int fail_at(parser *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(parser *p, size_t at, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return zt_fail(p->err, "%s:%d:%d: %s", p->name, p->line, col_of(p, at), what);
}

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == '\n') {
            p->line++;
            p->line_start = ++p->pos;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            p->pos++;
        } else {
            break;
        }
    }
}

void zt_json_free(zt_json *v) {
    if (v->type == ZT_JSON_STRING) free(v->str);
    if (v->type == ZT_JSON_ARRAY || v->type == ZT_JSON_OBJECT) {
        for (int i = 0; i < v->n; i++) {
            zt_json_free(&v->items[i]);
            if (v->keys) free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
    }
    memset(v, 0, sizeof *v);
}

static int hex4(const char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

/* Length of the valid UTF-8 sequence at S (RFC 3629: no overlong forms, no surrogates), or 0. */
static size_t utf8_len(const unsigned char *s, size_t avail) {
    unsigned c = s[0];
    size_t n = c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
    if (n == 0 || n > avail) return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0) || (c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90))
        return 0;
    return n;
}

static size_t put_utf8(char *out, unsigned cp) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The string at p->pos (its opening quote) into a new buffer; a string's decoded form is never
 * longer than its JSON text. */
static int parse_string(parser *p, char **out, size_t *out_len) {
    size_t start = p->pos++;
    size_t end = p->pos;
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    char *buf = zt_xmalloc((end < p->len ? end : p->len) - start + 1);
    size_t n = 0;
    for (;;) {
        if (p->pos >= p->len) { free(buf); return fail_at(p, start, "unterminated string"); }
        size_t at = p->pos;
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') { p->pos++; break; }
        if (c < 0x20) { free(buf); return fail_at(p, at, "control character in a string (write it as an escape)"); }
        if (c != '\\') {
            size_t k = utf8_len((const unsigned char *)p->s + p->pos, p->len - p->pos);
            if (!k) { free(buf); return fail_at(p, at, "invalid UTF-8 in a string"); }
            memcpy(buf + n, p->s + p->pos, k);
            n += k;
            p->pos += k;
            continue;
        }
        if (p->pos + 1 >= p->len) { free(buf); return fail_at(p, start, "unterminated string"); }
        char e = p->s[p->pos + 1];
        p->pos += 2;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *m = e ? strchr(from, e) : NULL;
        if (m) { buf[n++] = to[m - from]; continue; }
        if (e != 'u') { free(buf); return fail_at(p, at, "bad escape \\%c", (e > 0x20 && e < 0x7f) ? e : '?'); }
        unsigned cp, lo;
        if (p->pos + 4 > p->len || hex4(p->s + p->pos, &cp)) { free(buf); return fail_at(p, at, "bad \\u escape"); }
        p->pos += 4;
        if (cp >= 0xDC00 && cp <= 0xDFFF) { free(buf); return fail_at(p, at, "unpaired low surrogate in a \\u escape"); }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (p->pos + 6 > p->len || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u' || hex4(p->s + p->pos + 2, &lo) ||
                lo < 0xDC00 || lo > 0xDFFF) {
                free(buf);
                return fail_at(p, at, "unpaired high surrogate in a \\u escape");
            }
            p->pos += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        n += put_utf8(buf + n, cp);
    }
    buf[n] = 0;
    *out = buf;
    *out_len = n;
    return 0;
}

static int parse_number(parser *p, zt_json *v) {
    size_t start = p->pos;
    const char *s = p->s;
    if (p->pos < p->len && s[p->pos] == '-') p->pos++;
    size_t d0 = p->pos;
    while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9') p->pos++;
    if (p->pos == d0) return fail_at(p, start, "bad number");
    if (p->pos - d0 > 1 && s[d0] == '0') return fail_at(p, start, "bad number (leading zero)");
    int integer = 1;
    if (p->pos < p->len && s[p->pos] == '.') {
        integer = 0;
        size_t f0 = ++p->pos;
        while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9') p->pos++;
        if (p->pos == f0) return fail_at(p, start, "bad number (no digits after '.')");
    }
    if (p->pos < p->len && (s[p->pos] == 'e' || s[p->pos] == 'E')) {
        integer = 0;
        p->pos++;
        if (p->pos < p->len && (s[p->pos] == '+' || s[p->pos] == '-')) p->pos++;
        size_t e0 = p->pos;
        while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9') p->pos++;
        if (p->pos == e0) return fail_at(p, start, "bad number (no digits in the exponent)");
    }
    char tmp[128];
    size_t n = p->pos - start < sizeof tmp - 1 ? p->pos - start : sizeof tmp - 1; /* more digits change nothing */
    memcpy(tmp, s + start, n);
    tmp[n] = 0;
    v->type = ZT_JSON_NUMBER;
    v->number = strtod(tmp, NULL);
    if (integer && s[start] != '-') {
        uint64_t u = 0;
        int ok = 1;
        for (size_t i = start; i < p->pos && ok; i++) {
            unsigned d = (unsigned)(s[i] - '0');
            if (u > (UINT64_MAX - d) / 10) ok = 0;
            else u = u * 10 + d;
        }
        v->is_uint = ok;
        v->u = ok ? u : 0;
    }
    return 0;
}

static int parse_value(parser *p, zt_json *v);

typedef struct { const char *key; int index; } key_ref;

static int key_ref_cmp(const void *a, const void *b) {
    const key_ref *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : x->index - y->index;
}

/* The index of object V's first duplicate key in file order (the later of the two), or -1. */
static int find_duplicate(const zt_json *v) {
    if (v->n <= 16) {
        for (int i = 1; i < v->n; i++)
            for (int j = 0; j < i; j++)
                if (strcmp(v->keys[i], v->keys[j]) == 0) return i;
        return -1;
    }
    key_ref *refs = zt_xmalloc((size_t)v->n * sizeof *refs); /* sorted: O(n log n) for encoder.json's 50257 keys */
    for (int i = 0; i < v->n; i++) refs[i] = (key_ref){v->keys[i], i};
    qsort(refs, (size_t)v->n, sizeof *refs, key_ref_cmp);
    int dup = -1;
    for (int i = 1; i < v->n; i++)
        if (strcmp(refs[i].key, refs[i - 1].key) == 0 && (dup < 0 || refs[i].index < dup)) dup = refs[i].index;
    free(refs);
    return dup;
}

static int parse_container(parser *p, zt_json *v, int object) {
    char close = object ? '}' : ']';
    size_t open_at = p->pos;
    if (++p->depth > JSON_MAX_DEPTH) return fail_at(p, open_at, "nesting deeper than %d", JSON_MAX_DEPTH);
    p->pos++;
    v->type = object ? ZT_JSON_OBJECT : ZT_JSON_ARRAY;
    int cap = 0;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        p->depth--;
        return 0;
    }
    for (;;) {
        if (v->n == cap) {
            cap = cap ? 2 * cap : 8;
            v->items = zt_xrealloc(v->items, (size_t)cap * sizeof *v->items);
            if (object) v->keys = zt_xrealloc(v->keys, (size_t)cap * sizeof *v->keys);
        }
        zt_json *item = &v->items[v->n];
        memset(item, 0, sizeof *item);
        if (object) v->keys[v->n] = NULL;
        v->n++;
        skip_ws(p);
        if (object) {
            if (p->pos >= p->len) return fail_at(p, p->pos, "unexpected end of input (expected a string key)");
            if (p->s[p->pos] != '"') return fail_at(p, p->pos, "expected a string key");
            item->key_line = p->line;
            item->key_col = col_of(p, p->pos);
            size_t key_at = p->pos, klen;
            if (parse_string(p, &v->keys[v->n - 1], &klen)) return -1;
            if (strlen(v->keys[v->n - 1]) != klen) return fail_at(p, key_at, "a key holds a NUL character (\\u0000)");
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') return fail_at(p, p->pos, "expected ':' after the key");
            p->pos++;
        }
        if (parse_value(p, item)) return -1;
        skip_ws(p);
        if (p->pos >= p->len) return fail_at(p, p->pos, "unexpected end of input (expected ',' or '%c')", close);
        if (p->s[p->pos] == ',') { p->pos++; continue; }
        if (p->s[p->pos] == close) break;
        return fail_at(p, p->pos, "expected ',' or '%c'", close);
    }
    p->pos++;
    p->depth--;
    int dup = object ? find_duplicate(v) : -1;
    if (dup >= 0)
        return zt_fail(p->err, "%s:%d:%d: duplicate key \"%.80s\"", p->name, v->items[dup].key_line, v->items[dup].key_col,
                       v->keys[dup]);
    return 0;
}

static int parse_value(parser *p, zt_json *v) {
    skip_ws(p);
    v->line = p->line;
    v->col = col_of(p, p->pos);
    if (p->pos >= p->len) return fail_at(p, p->pos, "unexpected end of input (expected a value)");
    char c = p->s[p->pos];
    if (c == '{' || c == '[') return parse_container(p, v, c == '{');
    if (c == '"') {
        v->type = ZT_JSON_STRING;
        return parse_string(p, &v->str, &v->str_len);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
    static const struct { const char *word; zt_json_type type; int b; } words[] = {
        {"null", ZT_JSON_NULL, 0}, {"true", ZT_JSON_BOOL, 1}, {"false", ZT_JSON_BOOL, 0}};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i].word);
        if (p->pos + n <= p->len && memcmp(p->s + p->pos, words[i].word, n) == 0) {
            p->pos += n;
            v->type = words[i].type;
            v->boolean = words[i].b;
            return 0;
        }
    }
    if (c >= 0x20 && c < 0x7f) return fail_at(p, p->pos, "unexpected character '%c'", c);
    return fail_at(p, p->pos, "unexpected byte 0x%02X", (unsigned)(unsigned char)c);
}

int zt_json_parse(const char *text, size_t len, const char *name, zt_json *out, zt_err *err) {
    parser p = {.s = text, .name = name, .len = len, .line = 1, .err = err};
    memset(out, 0, sizeof *out);
    int rc = parse_value(&p, out);
    if (rc == 0) {
        skip_ws(&p);
        if (p.pos != p.len) rc = fail_at(&p, p.pos, "unexpected data after the JSON value");
    }
    if (rc) zt_json_free(out);
    return rc;
}

int zt_json_read_file(const char *path, zt_json *out, zt_err *err) { return zt_json_read_file_max(path, ZT_READ_FILE_MAX, out, err); }

int zt_json_read_file_max(const char *path, size_t max, zt_json *out, zt_err *err) {
    size_t len;
    memset(out, 0, sizeof *out);
    char *text = zt_read_file_max(path, max, &len, err);
    if (!text) return -1;
    int rc = zt_json_parse(text, len, path, out, err);
    free(text);
    return rc;
}

const zt_json *zt_json_get(const zt_json *obj, const char *key) {
    if (!obj || obj->type != ZT_JSON_OBJECT) return NULL;
    for (int i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}

const char *zt_json_type_name(zt_json_type t) {
    static const char *names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return (unsigned)t < 6 ? names[t] : "?";
}
