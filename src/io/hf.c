/* hf.c — Hugging Face GPT-2 directory I/O (see hf.h): a small JSON reader for config.json and the
 * safetensors header, a tensor-at-a-time safetensors reader and writer, fp16/bf16 conversion. */
#define _GNU_SOURCE
#include "io/hf.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "backend/opmath.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "hf.c reads and writes safetensors data in host byte order, which must be little-endian"
#endif

#define HF_MAX_HEADER (100u << 20) /* the safetensors reference implementation's limit */
#define HF_CHUNK 65536             /* elements converted per fread/fwrite for 16-bit dtypes */

/* ---------------------------------------------------------------- fp16 */

/* ---------------------------------------------------------------- JSON */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jv {
    int type;
    int b;            /* J_BOOL */
    double num;       /* J_NUM */
    int is_uint;      /* J_NUM: a non-negative integer literal that fits in u64 (exact in u) */
    uint64_t u;
    char *str;        /* J_STR */
    int n;            /* J_ARR / J_OBJ: items */
    struct jv *items; /* [n] */
    char **keys;      /* J_OBJ: [n] */
} jv;

typedef struct {
    const char *s;
    size_t len, pos;
    int depth;
    char msg[128];
} jparser;

static void jv_free(jv *v) {
    if (v->type == J_STR) free(v->str);
    if (v->type == J_ARR || v->type == J_OBJ) {
        for (int i = 0; i < v->n; i++) {
            jv_free(&v->items[i]);
            if (v->keys) free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
    }
    memset(v, 0, sizeof *v);
}

static int jfail(jparser *p, const char *fmt, ...) {
    if (!p->msg[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->msg, sizeof p->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void jskip(jparser *p) {
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
                               p->s[p->pos] == '\r'))
        p->pos++;
}

static int jhex(jparser *p, unsigned *out) {
    if (p->pos + 4 > p->len) return jfail(p, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return jfail(p, "bad \\u escape");
    }
    *out = v;
    return 0;
}

static int jstring(jparser *p, char **out) {
    p->pos++; /* opening quote */
    size_t cap = 32, n = 0;
    char *buf = zt_xmalloc(cap);
    for (;;) {
        if (p->pos >= p->len) { free(buf); return jfail(p, "unterminated string"); }
        unsigned char c = (unsigned char)p->s[p->pos++];
        if (n + 5 >= cap) { cap *= 2; buf = realloc(buf, cap); if (!buf) { fprintf(stderr, "out of memory\n"); abort(); } }
        if (c == '"') break;
        if (c < 0x20) { free(buf); return jfail(p, "control character in string"); }
        if (c != '\\') { buf[n++] = (char)c; continue; }
        if (p->pos >= p->len) { free(buf); return jfail(p, "unterminated string"); }
        char e = p->s[p->pos++];
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (jhex(p, &cp)) { free(buf); return -1; }
            if (cp >= 0xd800 && cp < 0xdc00 && p->pos + 6 <= p->len && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u') {
                unsigned lo;
                p->pos += 2;
                if (jhex(p, &lo)) { free(buf); return -1; }
                if (lo >= 0xdc00 && lo < 0xe000) cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                else { free(buf); return jfail(p, "bad surrogate pair"); }
            }
            if (cp < 0x80) buf[n++] = (char)cp;
            else if (cp < 0x800) { buf[n++] = (char)(0xc0 | (cp >> 6)); buf[n++] = (char)(0x80 | (cp & 0x3f)); }
            else if (cp < 0x10000) {
                buf[n++] = (char)(0xe0 | (cp >> 12)); buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
                buf[n++] = (char)(0x80 | (cp & 0x3f));
            } else {
                buf[n++] = (char)(0xf0 | (cp >> 18)); buf[n++] = (char)(0x80 | ((cp >> 12) & 0x3f));
                buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3f)); buf[n++] = (char)(0x80 | (cp & 0x3f));
            }
            break;
        }
        default: free(buf); return jfail(p, "bad escape \\%c", e);
        }
    }
    buf[n] = 0;
    *out = buf;
    return 0;
}

static int jnumber(jparser *p, jv *v) {
    size_t start = p->pos;
    if (p->pos < p->len && p->s[p->pos] == '-') p->pos++;
    size_t digits0 = p->pos;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    if (p->pos == digits0) return jfail(p, "bad number");
    int integer = 1;
    if (p->pos < p->len && p->s[p->pos] == '.') {
        integer = 0;
        p->pos++;
        size_t f0 = p->pos;
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
        if (p->pos == f0) return jfail(p, "bad number");
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        integer = 0;
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        size_t e0 = p->pos;
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
        if (p->pos == e0) return jfail(p, "bad number");
    }
    char tmp[64];
    size_t n = p->pos - start;
    if (n >= sizeof tmp) n = sizeof tmp - 1; /* precision beyond 63 characters is irrelevant here */
    memcpy(tmp, p->s + start, n);
    tmp[n] = 0;
    v->type = J_NUM;
    v->num = strtod(tmp, NULL);
    if (integer && p->s[start] != '-') {
        uint64_t u = 0;
        int ok = 1;
        for (size_t i = start; i < p->pos; i++) {
            unsigned d = (unsigned)(p->s[i] - '0');
            if (u > (UINT64_MAX - d) / 10) { ok = 0; break; }
            u = u * 10 + d;
        }
        v->is_uint = ok;
        v->u = u;
    }
    return 0;
}

static int jvalue(jparser *p, jv *v);

static int jcontainer(jparser *p, jv *v, int obj) {
    char close = obj ? '}' : ']';
    if (++p->depth > 64) return jfail(p, "nesting too deep");
    p->pos++;
    v->type = obj ? J_OBJ : J_ARR;
    int cap = 0;
    jskip(p);
    if (p->pos < p->len && p->s[p->pos] == close) { p->pos++; p->depth--; return 0; }
    for (;;) {
        if (v->n == cap) {
            cap = cap ? 2 * cap : 8;
            v->items = realloc(v->items, (size_t)cap * sizeof *v->items);
            if (obj) v->keys = realloc(v->keys, (size_t)cap * sizeof *v->keys);
            if (!v->items || (obj && !v->keys)) { fprintf(stderr, "out of memory\n"); abort(); }
        }
        jv *item = &v->items[v->n];
        memset(item, 0, sizeof *item);
        if (obj) v->keys[v->n] = NULL;
        v->n++;
        jskip(p);
        if (obj) {
            if (p->pos >= p->len || p->s[p->pos] != '"') return jfail(p, "expected a string key");
            if (jstring(p, &v->keys[v->n - 1])) return -1;
            for (int i = 0; i < v->n - 1; i++)
                if (strcmp(v->keys[i], v->keys[v->n - 1]) == 0) return jfail(p, "duplicate key \"%.60s\"", v->keys[i]);
            jskip(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') return jfail(p, "expected ':'");
            p->pos++;
        }
        if (jvalue(p, item)) return -1;
        jskip(p);
        if (p->pos >= p->len) return jfail(p, "unexpected end");
        if (p->s[p->pos] == ',') { p->pos++; continue; }
        if (p->s[p->pos] == close) { p->pos++; p->depth--; return 0; }
        return jfail(p, "expected ',' or '%c'", close);
    }
}

static int jvalue(jparser *p, jv *v) {
    jskip(p);
    if (p->pos >= p->len) return jfail(p, "unexpected end");
    char c = p->s[p->pos];
    if (c == '{') return jcontainer(p, v, 1);
    if (c == '[') return jcontainer(p, v, 0);
    if (c == '"') { v->type = J_STR; return jstring(p, &v->str); }
    if (c == '-' || (c >= '0' && c <= '9')) return jnumber(p, v);
    static const struct { const char *word; int type, b; } words[] = {{"null", J_NULL, 0}, {"true", J_BOOL, 1}, {"false", J_BOOL, 0}};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i].word);
        if (p->pos + n <= p->len && memcmp(p->s + p->pos, words[i].word, n) == 0) {
            p->pos += n;
            v->type = words[i].type;
            v->b = words[i].b;
            return 0;
        }
    }
    return jfail(p, "unexpected character '%c'", (c >= 0x20 && c < 0x7f) ? c : '?');
}

/* Parses S[0..len) as one JSON value (trailing whitespace allowed). On failure, MSG gets
 * "JSON error at byte K: what" and *v is freed. */
static int json_parse(const char *s, size_t len, jv *v, char *msg, size_t msg_size) {
    jparser p = {.s = s, .len = len};
    memset(v, 0, sizeof *v);
    int rc = jvalue(&p, v);
    if (rc == 0) {
        jskip(&p);
        if (p.pos != p.len) rc = jfail(&p, "trailing characters after the value");
    }
    if (rc) {
        snprintf(msg, msg_size, "JSON error at byte %zu: %s", p.pos, p.msg);
        jv_free(v);
    }
    return rc;
}

static const jv *jget(const jv *obj, const char *key) {
    if (obj->type != J_OBJ) return NULL;
    for (int i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}

/* ---------------------------------------------------------------- small file helpers */

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = zt_xmalloc(n);
    size_t dl = strlen(dir);
    snprintf(s, n, "%s%s%s", dir, (dl && dir[dl - 1] == '/') ? "" : "/", name);
    return s;
}

static int is_regular(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int zt_hf_probe(const char *dir) {
    char *a = path_join(dir, "model.safetensors"), *b = path_join(dir, "config.json");
    int ok = is_regular(a) && is_regular(b);
    free(a);
    free(b);
    return ok;
}

/* ---------------------------------------------------------------- config.json */

static int config_int(const jv *root, const char *key, int *out, int required, const char *path, zt_err *err) {
    const jv *v = jget(root, key);
    if (!v || v->type == J_NULL) {
        if (required) return zt_fail(err, "%s: missing \"%s\" (a GPT-2 config.json has it)", path, key);
        return 1;
    }
    if (v->type != J_NUM || !v->is_uint || v->u < 1 || v->u > INT_MAX)
        return zt_fail(err, "%s: \"%s\" must be a positive integer", path, key);
    *out = (int)v->u;
    return 0;
}

int zt_hf_read_config(const char *dir, zt_gpt2_shape *shape, zt_err *err) {
    char *path = path_join(dir, "config.json");
    size_t len;
    zt_err ferr;
    char *text = zt_read_file(path, &len, &ferr);
    if (!text) {
        zt_fail(err, "%s", ferr.msg);
        free(path);
        return -1;
    }
    jv root;
    char msg[256];
    int rc = -1;
    if (json_parse(text, len, &root, msg, sizeof msg)) {
        zt_fail(err, "%s: not a valid config.json: %s", path, msg);
        goto out_text;
    }
    if (root.type != J_OBJ) {
        zt_fail(err, "%s: not a config.json (the top level is not a JSON object)", path);
        goto out;
    }
    const jv *mt = jget(&root, "model_type");
    if (mt && (mt->type != J_STR || strcmp(mt->str, "gpt2") != 0)) {
        zt_fail(err, "%s: model_type is %s%s%s, zerotrain reads GPT-2 (\"gpt2\") models", path,
                mt->type == J_STR ? "\"" : "", mt->type == J_STR ? mt->str : "not a string", mt->type == J_STR ? "\"" : "");
        goto out;
    }
    zt_gpt2_shape s;
    memset(&s, 0, sizeof s);
    if (config_int(&root, "n_layer", &s.n_layer, 1, path, err) < 0 ||
        config_int(&root, "n_head", &s.n_head, 1, path, err) < 0 ||
        config_int(&root, "n_embd", &s.n_embd, 1, path, err) < 0 ||
        config_int(&root, "vocab_size", &s.vocab_size, 1, path, err) < 0)
        goto out;
    int r = config_int(&root, "n_positions", &s.n_positions, 0, path, err);
    if (r < 0) goto out;
    if (r == 1) {
        r = config_int(&root, "n_ctx", &s.n_positions, 0, path, err);
        if (r < 0) goto out;
        if (r == 1) {
            zt_fail(err, "%s: missing \"n_positions\" (or \"n_ctx\")", path);
            goto out;
        }
    }
    if (s.n_embd % s.n_head) {
        zt_fail(err, "%s: n_embd %d is not a multiple of n_head %d", path, s.n_embd, s.n_head);
        goto out;
    }
    const jv *act = jget(&root, "activation_function");
    if (act && !(act->type == J_STR && (strcmp(act->str, "gelu_new") == 0 || strcmp(act->str, "gelu_pytorch_tanh") == 0))) {
        zt_fail(err, "%s: activation_function is %s%s%s, zerotrain implements only \"gelu_new\" (GELU, tanh approximation)",
                path, act->type == J_STR ? "\"" : "", act->type == J_STR ? act->str : "not a string",
                act->type == J_STR ? "\"" : "");
        goto out;
    }
    const jv *eps = jget(&root, "layer_norm_epsilon");
    if (eps && !(eps->type == J_NUM && fabs(eps->num - 1e-5) <= 1e-12)) {
        zt_fail(err, "%s: layer_norm_epsilon is %g, zerotrain implements only 1e-05", path,
                eps->type == J_NUM ? eps->num : NAN);
        goto out;
    }
    const jv *inner = jget(&root, "n_inner");
    if (inner && inner->type != J_NULL &&
        !(inner->type == J_NUM && inner->is_uint && inner->u == 4 * (uint64_t)s.n_embd)) {
        zt_fail(err, "%s: n_inner must be null or 4 * n_embd (%d), zerotrain's MLP is 4x wide", path, 4 * s.n_embd);
        goto out;
    }
    const jv *inv = jget(&root, "scale_attn_by_inverse_layer_idx");
    if (inv && inv->type == J_BOOL && inv->b) {
        zt_fail(err, "%s: scale_attn_by_inverse_layer_idx true is not implemented by zerotrain", path);
        goto out;
    }
    const jv *sc = jget(&root, "scale_attn_weights");
    if (sc && sc->type == J_BOOL && !sc->b) {
        zt_fail(err, "%s: scale_attn_weights false is not implemented by zerotrain", path);
        goto out;
    }
    const jv *tie = jget(&root, "tie_word_embeddings");
    if (tie && tie->type == J_BOOL && !tie->b) {
        zt_fail(err, "%s: tie_word_embeddings false is not supported (zerotrain ties the LM head to wte)", path);
        goto out;
    }
    s.padded_vocab = (s.vocab_size + 127) / 128 * 128;
    *shape = s;
    rc = 0;
out:
    jv_free(&root);
out_text:
    free(text);
    free(path);
    return rc;
}

/* ---------------------------------------------------------------- safetensors reading */

typedef struct {
    const char *name; /* points into the header's keys */
    int dtype;        /* element bytes: 4 F32, 2 BF16 / F16; 0 unsupported */
    int f16;          /* F16 (else BF16 when dtype == 2) */
    const char *dtype_name;
    int ndim;
    int64_t shape[8];
    uint64_t begin, end;
    int used;
} st_tensor;

static void shape_str(char *buf, size_t n, const int64_t *shape, int ndim) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < ndim && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int is_ignored_buffer(const char *name) {
    return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}

/* Reads tensor T's data (at file position DATA0 + begin) into OUT as fp32. */
static int read_tensor_data(FILE *f, const char *path, off_t data0, const st_tensor *t, float *out, size_t numel,
                            zt_err *err) {
    if (fseeko(f, data0 + (off_t)t->begin, SEEK_SET) != 0)
        return zt_fail(err, "%s: cannot seek to tensor %s: %s", path, t->name, strerror(errno));
    if (t->dtype == 4) {
        if (fread(out, 4, numel, f) != numel)
            return zt_fail(err, "%s: truncated: cannot read tensor %s", path, t->name);
        return 0;
    }
    uint16_t *chunk = zt_xmalloc(HF_CHUNK * sizeof *chunk);
    for (size_t i = 0; i < numel; i += HF_CHUNK) {
        size_t n = numel - i < HF_CHUNK ? numel - i : HF_CHUNK;
        if (fread(chunk, 2, n, f) != n) {
            free(chunk);
            return zt_fail(err, "%s: truncated: cannot read tensor %s", path, t->name);
        }
        if (t->f16)
            for (size_t k = 0; k < n; k++) out[i + k] = zt_f16_bits_to_f32(chunk[k]);
        else
            for (size_t k = 0; k < n; k++) out[i + k] = zt_bf16_bits_to_f32(chunk[k]);
    }
    free(chunk);
    return 0;
}

/* Fills TS[0..*count) from the parsed header ROOT; validates dtype/shape/offsets against DATA_SIZE. */
static int parse_tensors(const jv *root, const char *path, uint64_t data_size, st_tensor *ts, int *count, zt_err *err) {
    int n = 0;
    for (int i = 0; i < root->n; i++) {
        const char *name = root->keys[i];
        if (strcmp(name, "__metadata__") == 0) continue;
        const jv *v = &root->items[i];
        st_tensor *t = &ts[n++];
        memset(t, 0, sizeof *t);
        t->name = name;
        if (v->type != J_OBJ) return zt_fail(err, "%s: bad safetensors header: entry %s is not an object", path, name);
        const jv *dt = jget(v, "dtype"), *sh = jget(v, "shape"), *off = jget(v, "data_offsets");
        if (!dt || dt->type != J_STR || !sh || sh->type != J_ARR || !off || off->type != J_ARR || off->n != 2 ||
            off->items[0].type != J_NUM || !off->items[0].is_uint || off->items[1].type != J_NUM || !off->items[1].is_uint)
            return zt_fail(err, "%s: bad safetensors header: tensor %s needs \"dtype\", \"shape\" and \"data_offsets\" [begin, end]",
                           path, name);
        t->dtype_name = dt->str;
        uint64_t esize;
        if (strcmp(dt->str, "F32") == 0) t->dtype = 4;
        else if (strcmp(dt->str, "BF16") == 0) t->dtype = 2;
        else if (strcmp(dt->str, "F16") == 0) { t->dtype = 2; t->f16 = 1; }
        static const struct { const char *name; int bytes; } others[] = {
            {"F64", 8}, {"I64", 8}, {"U64", 8}, {"I32", 4}, {"U32", 4}, {"I16", 2}, {"U16", 2}, {"I8", 1}, {"U8", 1},
            {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
        esize = (uint64_t)t->dtype;
        for (size_t k = 0; !esize && k < sizeof others / sizeof others[0]; k++)
            if (strcmp(dt->str, others[k].name) == 0) esize = (uint64_t)others[k].bytes;
        if (!esize) return zt_fail(err, "%s: bad safetensors header: tensor %s has unknown dtype \"%.20s\"", path, name, dt->str);
        if (sh->n > 8) return zt_fail(err, "%s: bad safetensors header: tensor %s has %d dimensions", path, name, sh->n);
        t->ndim = sh->n;
        uint64_t numel = 1;
        for (int d = 0; d < sh->n; d++) {
            const jv *x = &sh->items[d];
            if (x->type != J_NUM || !x->is_uint || x->u > ((uint64_t)1 << 40))
                return zt_fail(err, "%s: bad safetensors header: tensor %s has a bad shape", path, name);
            t->shape[d] = (int64_t)x->u;
            numel *= x->u;
            if (numel > ((uint64_t)1 << 40)) return zt_fail(err, "%s: bad safetensors header: tensor %s is too large", path, name);
        }
        t->begin = off->items[0].u;
        t->end = off->items[1].u;
        if (t->begin > t->end || t->end - t->begin != numel * esize)
            return zt_fail(err, "%s: bad safetensors header: tensor %s has data_offsets [%llu, %llu] but %s %llu elements need %llu bytes",
                           path, name, (unsigned long long)t->begin, (unsigned long long)t->end, dt->str,
                           (unsigned long long)numel, (unsigned long long)(numel * esize));
        if (t->end > data_size)
            return zt_fail(err, "%s: truncated: tensor %s ends at data byte %llu but the file holds only %llu data bytes",
                           path, name, (unsigned long long)t->end, (unsigned long long)data_size);
    }
    *count = n;
    return 0;
}

static st_tensor *find_tensor(st_tensor *ts, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(ts[i].name, name) == 0) return &ts[i];
    return NULL;
}

/* Does T have exactly the table parameter P's shape? */
static int shape_matches(const st_tensor *t, const zt_param_info *p) {
    if (t->ndim != p->ndim) return 0;
    for (int d = 0; d < p->ndim; d++)
        if (t->shape[d] != p->shape[d]) return 0;
    return 1;
}

static void param_shape_str(char *buf, size_t n, const zt_param_info *p) {
    int64_t s[2] = {p->shape[0], p->shape[1]};
    shape_str(buf, n, s, p->ndim);
}

int zt_hf_load(const char *path_in, const zt_param_table *table, float *flat, zt_err *err) {
    char *path = is_dir(path_in) ? path_join(path_in, "model.safetensors") : zt_xstrdup(path_in);
    FILE *f = fopen(path, "rb");
    if (!f) {
        zt_fail(err, "%s: cannot open: %s", path, strerror(errno));
        free(path);
        return -1;
    }
    int rc = -1;
    char *header = NULL;
    st_tensor *ts = NULL;
    jv root;
    memset(&root, 0, sizeof root);
    off_t size;
    if (fseeko(f, 0, SEEK_END) != 0 || (size = ftello(f)) < 0 || fseeko(f, 0, SEEK_SET) != 0) {
        zt_fail(err, "%s: cannot seek: %s", path, strerror(errno));
        goto out;
    }
    unsigned char lenbuf[8];
    if (size < 8 || fread(lenbuf, 1, 8, f) != 8) {
        zt_fail(err, "%s: not a safetensors file (%lld bytes, shorter than the 8-byte header length)", path, (long long)size);
        goto out;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lenbuf[i];
    if (hlen < 2 || hlen > HF_MAX_HEADER || hlen > (uint64_t)size - 8) {
        zt_fail(err, "%s: not a safetensors file (header length %llu, file size %lld bytes)%s", path,
                (unsigned long long)hlen, (long long)size, hlen <= HF_MAX_HEADER && hlen > (uint64_t)size - 8 ? ", or truncated" : "");
        goto out;
    }
    header = zt_xmalloc(hlen + 1);
    if (fread(header, 1, hlen, f) != hlen) {
        zt_fail(err, "%s: truncated: cannot read the %llu-byte header", path, (unsigned long long)hlen);
        goto out;
    }
    header[hlen] = 0;
    char msg[256];
    if (header[0] != '{') {
        zt_fail(err, "%s: not a safetensors file (the header does not start with '{')", path);
        goto out;
    }
    if (json_parse(header, hlen, &root, msg, sizeof msg)) {
        zt_fail(err, "%s: bad safetensors header: %s", path, msg);
        goto out;
    }
    if (root.type != J_OBJ) {
        zt_fail(err, "%s: bad safetensors header: not a JSON object", path);
        goto out;
    }
    uint64_t data_size = (uint64_t)size - 8 - hlen;
    off_t data0 = (off_t)(8 + hlen);
    ts = zt_xcalloc((size_t)root.n + 1, sizeof *ts);
    int nt = 0;
    if (parse_tensors(&root, path, data_size, ts, &nt, err)) goto out;

    const zt_param_info *wte = NULL;
    for (int i = 0; i < table->count; i++)
        if (ends_with(table->params[i].name, "wte.weight")) wte = &table->params[i];
    st_tensor *lm_head = find_tensor(ts, nt, "lm_head.weight");
    if (lm_head) {
        lm_head->used = 1;
        if (wte && !shape_matches(lm_head, wte)) {
            char a[96], b[96];
            shape_str(a, sizeof a, lm_head->shape, lm_head->ndim);
            param_shape_str(b, sizeof b, wte);
            zt_fail(err, "%s: tensor lm_head.weight has shape %s, but zerotrain ties it to wte, which the config makes %s", path, a, b);
            goto out;
        }
    }
    for (int i = 0; i < table->count; i++) {
        const zt_param_info *p = &table->params[i];
        const char *bare = strncmp(p->name, "transformer.", 12) == 0 ? p->name + 12 : p->name;
        st_tensor *a = find_tensor(ts, nt, p->name), *b = find_tensor(ts, nt, bare), *t = a ? a : b;
        if (a && b && a != b) {
            zt_fail(err, "%s: tensor %s appears twice (as %s and %s)", path, p->name, a->name, b->name);
            goto out;
        }
        if (!t && p == wte && lm_head) t = lm_head; /* a checkpoint that stores only the tied head */
        if (!t) {
            zt_fail(err, "%s: missing tensor %s (the config needs it, shape %s)", path, p->name,
                    (param_shape_str(msg, sizeof msg, p), msg));
            goto out;
        }
        t->used = 1;
        if (!shape_matches(t, p)) {
            char a2[96], b2[96];
            shape_str(a2, sizeof a2, t->shape, t->ndim);
            param_shape_str(b2, sizeof b2, p);
            zt_fail(err, "%s: tensor %s has shape %s, the config needs %s", path, t->name, a2, b2);
            goto out;
        }
        if (t->dtype == 0) {
            zt_fail(err, "%s: tensor %s has dtype %s, zerotrain reads F32, BF16 and F16", path, t->name, t->dtype_name);
            goto out;
        }
        if (read_tensor_data(f, path, data0, t, flat + p->offset, p->numel, err)) goto out;
    }
    for (int i = 0; i < nt; i++) {
        if (ts[i].used || is_ignored_buffer(ts[i].name)) continue;
        zt_fail(err, "%s: unexpected tensor %s (not a parameter of the GPT-2 the config describes: n_layer %d)", path,
                ts[i].name, table->n_segments - 2);
        goto out;
    }
    rc = 0;
out:
    jv_free(&root);
    free(ts);
    free(header);
    fclose(f);
    free(path);
    return rc;
}

/* ---------------------------------------------------------------- writing */

typedef struct { char *s; size_t n, cap; } sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (b->s && (size_t)k < b->cap - b->n) { b->n += (size_t)k; return; }
        b->cap = (b->cap + (size_t)k + 1) * 2;
        b->s = realloc(b->s, b->cap);
        if (!b->s) { fprintf(stderr, "out of memory\n"); abort(); }
    }
}

static int mkdir_p(const char *dir, zt_err *err) {
    char *p = zt_xstrdup(dir);
    for (char *q = p + 1; ; q++) {
        if (*q == '/' || *q == 0) {
            char c = *q;
            *q = 0;
            if (mkdir(p, 0777) != 0 && errno != EEXIST) {
                zt_fail(err, "%s: cannot create directory: %s", p, strerror(errno));
                free(p);
                return -1;
            }
            *q = c;
            if (!c) break;
        }
    }
    free(p);
    if (!is_dir(dir)) return zt_fail(err, "%s: not a directory", dir);
    return 0;
}

static void fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Opens DIR/NAME.tmp.PID for writing; *tmp and *final get the two paths. */
static FILE *open_tmp(const char *dir, const char *name, char **tmp, char **final, zt_err *err) {
    *final = path_join(dir, name);
    size_t n = strlen(*final) + 32;
    *tmp = zt_xmalloc(n);
    snprintf(*tmp, n, "%s.tmp.%d", *final, (int)getpid());
    FILE *f = fopen(*tmp, "wb");
    if (!f) zt_fail(err, "%s: cannot create: %s", *tmp, strerror(errno));
    return f;
}

/* Flushes, fsyncs, closes F and renames TMP to FINAL; on failure removes TMP. Frees both paths. */
static int commit_tmp(FILE *f, char *tmp, char *final, const char *dir, int ok, zt_err *err) {
    int rc = ok ? 0 : -1;
    if (rc == 0 && (fflush(f) != 0 || fsync(fileno(f)) != 0)) rc = zt_fail(err, "%s: write error: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && rc == 0) rc = zt_fail(err, "%s: write error: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, final) != 0) rc = zt_fail(err, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    if (rc) unlink(tmp);
    else fsync_dir(dir);
    free(tmp);
    free(final);
    return rc;
}

static int write_config(const char *dir, const zt_gpt2_shape *s, const char *torch_dtype, zt_err *err) {
    int eos = s->vocab_size > 50256 ? 50256 : s->vocab_size - 1; /* GPT-2's <|endoftext|>; in range for small vocabs */
    sbuf b = {0};
    sb_printf(&b,
              "{\n"
              "  \"activation_function\": \"gelu_new\",\n"
              "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
              "  \"attn_pdrop\": 0.0,\n"
              "  \"bos_token_id\": %d,\n"
              "  \"embd_pdrop\": 0.0,\n"
              "  \"eos_token_id\": %d,\n"
              "  \"initializer_range\": 0.02,\n"
              "  \"layer_norm_epsilon\": 1e-05,\n"
              "  \"model_type\": \"gpt2\",\n"
              "  \"n_ctx\": %d,\n"
              "  \"n_embd\": %d,\n"
              "  \"n_head\": %d,\n"
              "  \"n_inner\": null,\n"
              "  \"n_layer\": %d,\n"
              "  \"n_positions\": %d,\n"
              "  \"reorder_and_upcast_attn\": false,\n"
              "  \"resid_pdrop\": 0.0,\n"
              "  \"scale_attn_by_inverse_layer_idx\": false,\n"
              "  \"scale_attn_weights\": true,\n"
              "  \"summary_activation\": null,\n"
              "  \"summary_first_dropout\": 0.0,\n"
              "  \"summary_proj_to_labels\": true,\n"
              "  \"summary_type\": \"cls_index\",\n"
              "  \"summary_use_proj\": true,\n"
              "  \"tie_word_embeddings\": true,\n"
              "  \"torch_dtype\": \"%s\",\n"
              "  \"use_cache\": true,\n"
              "  \"vocab_size\": %d\n"
              "}\n",
              eos, eos, s->n_positions, s->n_embd, s->n_head, s->n_layer, s->n_positions, torch_dtype, s->vocab_size);
    char *tmp, *final;
    FILE *f = open_tmp(dir, "config.json", &tmp, &final, err);
    if (!f) {
        free(tmp);
        free(final);
        free(b.s);
        return -1;
    }
    int ok = fwrite(b.s, 1, b.n, f) == b.n;
    if (!ok) zt_fail(err, "%s: write error: %s", tmp, strerror(errno));
    free(b.s);
    return commit_tmp(f, tmp, final, dir, ok, err);
}

int zt_hf_save(const char *dir, const zt_param_table *table, const zt_gpt2_shape *shape, zt_hf_read_fn read_tensor,
               void *ctx, const char *dtype, zt_err *err) {
    int esize, f16 = 0;
    const char *torch_dtype;
    if (strcmp(dtype, "F32") == 0) { esize = 4; torch_dtype = "float32"; }
    else if (strcmp(dtype, "BF16") == 0) { esize = 2; torch_dtype = "bfloat16"; }
    else if (strcmp(dtype, "F16") == 0) { esize = 2; f16 = 1; torch_dtype = "float16"; }
    else return zt_fail(err, "unsupported safetensors dtype \"%s\" (F32, BF16 or F16)", dtype);
    if (mkdir_p(dir, err)) return -1;

    /* header: tensors in table order, contiguous; padded with spaces to a multiple of 8 bytes */
    sbuf h = {0};
    sb_printf(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
    size_t off = 0, max_numel = 0;
    for (int i = 0; i < table->count; i++) {
        const zt_param_info *p = &table->params[i];
        if (p->ndim == 2) sb_printf(&h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%d,%d],", p->name, dtype, p->shape[0], p->shape[1]);
        else sb_printf(&h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%d],", p->name, dtype, p->shape[0]);
        sb_printf(&h, "\"data_offsets\":[%zu,%zu]}", off, off + p->numel * (size_t)esize);
        off += p->numel * (size_t)esize;
        if (p->numel > max_numel) max_numel = p->numel;
    }
    sb_printf(&h, "}");
    while (h.n % 8) sb_printf(&h, " ");

    char *tmp, *final;
    FILE *f = open_tmp(dir, "model.safetensors", &tmp, &final, err);
    if (!f) {
        free(tmp);
        free(final);
        free(h.s);
        return -1;
    }
    int ok = 1;
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    if (fwrite(lenbuf, 1, 8, f) != 8 || fwrite(h.s, 1, h.n, f) != h.n) ok = 0;
    free(h.s);
    float *buf = zt_xmalloc((max_numel ? max_numel : 1) * sizeof *buf);
    uint16_t *chunk = esize == 2 ? zt_xmalloc(HF_CHUNK * sizeof *chunk) : NULL;
    for (int i = 0; ok && i < table->count; i++) {
        const zt_param_info *p = &table->params[i];
        if (read_tensor(ctx, p->offset, p->numel, buf) != 0) {
            zt_fail(err, "%s: cannot fetch tensor %s to save it", final, p->name);
            ok = -1;
            break;
        }
        if (esize == 4) {
            if (fwrite(buf, 4, p->numel, f) != p->numel) ok = 0;
            continue;
        }
        for (size_t k = 0; ok && k < p->numel; k += HF_CHUNK) {
            size_t n = p->numel - k < HF_CHUNK ? p->numel - k : HF_CHUNK;
            for (size_t j = 0; j < n; j++) chunk[j] = f16 ? zt_f32_to_f16_bits(buf[k + j]) : zt_f32_to_bf16_bits(buf[k + j]);
            if (fwrite(chunk, 2, n, f) != n) ok = 0;
        }
    }
    free(buf);
    free(chunk);
    if (ok == 0) zt_fail(err, "%s: write error: %s", tmp, strerror(errno));
    if (commit_tmp(f, tmp, final, dir, ok == 1, err)) return -1;
    return write_config(dir, shape, torch_dtype, err);
}

int zt_hf_init_from(const char *path, const zt_gpt2_shape *shape, const zt_param_table *table, float *out,
                    zt_err *err) {
    /* PATH is model.safetensors (its config.json beside it) or the directory holding both */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    size_t n = strlen(dir);
    if (n > 12 && !strcmp(dir + n - 12, ".safetensors")) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, sizeof dir, ".");
    }
    zt_gpt2_shape theirs;
    if (zt_hf_read_config(dir, &theirs, err)) return -1;
    if (theirs.n_layer != shape->n_layer || theirs.n_head != shape->n_head || theirs.n_embd != shape->n_embd ||
        theirs.vocab_size != shape->vocab_size || theirs.n_positions < shape->n_positions)
        return zt_fail(err, "%s/config.json: model.init_from is GPT-2 L%d H%d C%d V%d P%d, the config asks for "
                            "L%d H%d C%d V%d P%d", dir, theirs.n_layer, theirs.n_head, theirs.n_embd,
                       theirs.vocab_size, theirs.n_positions, shape->n_layer, shape->n_head, shape->n_embd,
                       shape->vocab_size, shape->n_positions);
    if (theirs.n_positions != shape->n_positions)
        return zt_fail(err, "%s/config.json: n_positions %d differs from model.n_positions %d (wpe shapes must match)",
                       dir, theirs.n_positions, shape->n_positions);
    return zt_hf_load(path, table, out, err);
}
