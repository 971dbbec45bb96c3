/* test_hf.c — Hugging Face directory I/O (src/io/hf.c): safetensors + config.json round trips,
 * fp16/bf16 conversion on hand-picked values, and the error messages of bad inputs. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "model/gpt2.h"
#include "io/hf.h"
#include "backend/opmath.h"

static char root[256];

static float bits_f(uint32_t u) { union { uint32_t u; float f; } x = {u}; return x.f; }
static uint32_t f_bits(float f) { union { float f; uint32_t u; } x = {f}; return x.u; }

static int read_flat(void *ctx, size_t offset, size_t n, float *out) {
    memcpy(out, (const float *)ctx + offset, n * sizeof *out);
    return 0;
}
static int read_fail(void *ctx, size_t offset, size_t n, float *out) { return offset > 0 ? -1 : read_flat(ctx, offset, n, out); }

static char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", root, name);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    fwrite(data, 1, n, f);
    fclose(f);
}

static void write_text(const char *path, const char *text) { write_bytes(path, text, strlen(text)); }

static int file_exists(const char *path) { struct stat st; return stat(path, &st) == 0; }

/* A safetensors file of F32 tensors with arbitrary NAMES/shapes, written by hand here so the reader
 * is tested against files it did not write (bare names, buffers, lm_head). */
typedef struct { const char *name; int ndim, d0, d1; const float *data; } raw_tensor;
static void write_raw_st(const char *path, const raw_tensor *ts, int n) {
    char header[16384];
    size_t k = 0, off = 0;
    k += (size_t)snprintf(header + k, sizeof header - k, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        size_t numel = (size_t)ts[i].d0 * (ts[i].ndim == 2 ? (size_t)ts[i].d1 : 1);
        if (ts[i].ndim == 2)
            k += (size_t)snprintf(header + k, sizeof header - k, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}",
                                  ts[i].name, ts[i].d0, ts[i].d1, off, off + 4 * numel);
        else
            k += (size_t)snprintf(header + k, sizeof header - k, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}",
                                  ts[i].name, ts[i].d0, off, off + 4 * numel);
        off += 4 * numel;
    }
    k += (size_t)snprintf(header + k, sizeof header - k, "}");
    FILE *f = fopen(path, "wb");
    uint64_t hl = k;
    fwrite(&hl, 8, 1, f);
    fwrite(header, 1, k, f);
    for (int i = 0; i < n; i++) fwrite(ts[i].data, 4, (size_t)ts[i].d0 * (ts[i].ndim == 2 ? (size_t)ts[i].d1 : 1), f);
    fclose(f);
}

static void make_shape(zt_gpt2_shape *s, int L, int H, int C, int V, int P) {
    memset(s, 0, sizeof *s);
    s->n_layer = L; s->n_head = H; s->n_embd = C; s->vocab_size = V; s->n_positions = P;
    s->padded_vocab = (V + 127) / 128 * 128;
}

/* ---------------------------------------------------------------- conversions */

static void test_f16_hand(void) {
    struct { float f; uint16_t h; const char *what; } cases[] = {
        {1.0f, 0x3c00, "one"},
        {-2.0f, 0xc000, "minus two"},
        {0.0f, 0x0000, "zero"},
        {-0.0f, 0x8000, "negative zero"},
        {65504.0f, 0x7bff, "largest finite"},
        {65519.0f, 0x7bff, "below the overflow tie"},
        {65520.0f, 0x7c00, "overflow tie goes to inf"},
        {1e9f, 0x7c00, "overflow"},
        {INFINITY, 0x7c00, "inf"},
        {-INFINITY, 0xfc00, "-inf"},
        {1.0f + 0x1p-11f, 0x3c00, "tie rounds down to even"},
        {1.0f + 3 * 0x1p-11f, 0x3c02, "tie rounds up to even"},
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01, "just above a tie rounds up"},
        {0x1p-14f, 0x0400, "smallest normal"},
        {0x1p-24f, 0x0001, "smallest subnormal"},
        {-0x1p-24f, 0x8001, "negative smallest subnormal"},
        {0x1p-25f, 0x0000, "half the smallest subnormal ties to zero"},
        {0x1.000002p-25f, 0x0001, "just above half the smallest subnormal"},
        {3 * 0x1p-25f, 0x0002, "subnormal tie 1.5 rounds to 2"},
        {5 * 0x1p-25f, 0x0002, "subnormal tie 2.5 rounds to 2"},
        {1023.5f * 0x1p-24f, 0x0400, "largest subnormal tie rounds into the normals"},
        {1023.0f * 0x1p-24f, 0x03ff, "largest subnormal"},
        {1e-10f, 0x0000, "underflow"},
        {bits_f(0x00000001u), 0x0000, "fp32 subnormal"},
        {0.1f, 0x2e66, "0.1"},
        {3.14159265f, 0x4248, "pi"},
    };
    int bad = 0;
    char msg[256] = "";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = zt_f32_to_f16_bits(cases[i].f);
        if (h != cases[i].h && !bad++)
            snprintf(msg, sizeof msg, "%s: %a -> 0x%04x, expected 0x%04x", cases[i].what, cases[i].f, h, cases[i].h);
    }
    CHECK(!bad, "f16 encode hand values (ties, inf, subnormals)", "%d wrong, first %s", bad, msg);
    uint16_t hn = zt_f32_to_f16_bits(NAN), hn2 = zt_f32_to_f16_bits(bits_f(0x7f800001u));
    CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) && (hn2 & 0x7c00) == 0x7c00 && (hn2 & 0x3ff), "f16 encode nan stays nan",
          "nan -> 0x%04x, signalling nan -> 0x%04x", hn, hn2);

    CHECK(zt_f16_bits_to_f32(0x0001) == 0x1p-24f && zt_f16_bits_to_f32(0x03ff) == 1023.0f * 0x1p-24f &&
              zt_f16_bits_to_f32(0x0400) == 0x1p-14f && zt_f16_bits_to_f32(0x7bff) == 65504.0f &&
              zt_f16_bits_to_f32(0x3c00) == 1.0f && f_bits(zt_f16_bits_to_f32(0x8000)) == 0x80000000u &&
              zt_f16_bits_to_f32(0xfc00) == -INFINITY && isnan(zt_f16_bits_to_f32(0x7e00)),
          "f16 decode hand values", "wrong");

    /* every non-NaN half survives decode -> encode */
    int mism = 0, first = -1;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;
        if (zt_f32_to_f16_bits(zt_f16_bits_to_f32((uint16_t)h)) != h && !mism++) first = (int)h;
    }
    CHECK(!mism, "f16 all 63k finite/inf halves round trip", "%d mismatches, first 0x%04x", mism, first);

#ifdef __FLT16_MAX__
    /* against the compiler's own float -> _Float16 conversion (IEEE round to nearest even) on many fp32s */
    zt_rng rng;
    zt_rng_seed(&rng, 7);
    int diff = 0;
    uint32_t first_u = 0;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)zt_rng_u64(&rng);
        if (i & 1) u = (u & 0x807fffffu) | ((uint32_t)(98 + (u >> 23) % 50) << 23); /* concentrate on half's range */
        float f = bits_f(u);
        if (isnan(f)) continue;
        _Float16 ref = (_Float16)f;
        uint16_t rb;
        memcpy(&rb, &ref, 2);
        if (rb != zt_f32_to_f16_bits(f) && !diff++) first_u = u;
    }
    CHECK(!diff, "f16 encode agrees with the compiler's _Float16 on 2M fp32 values", "%d differ, first 0x%08x", diff,
          first_u);
#endif
}

static void test_bf16_hand(void) {
    struct { uint32_t f; uint16_t h; const char *what; } cases[] = {
        {0x3f800000u, 0x3f80, "one"},
        {0x3f808000u, 0x3f80, "tie rounds down to even"},
        {0x3f818000u, 0x3f82, "tie rounds up to even"},
        {0x3f808001u, 0x3f81, "just above a tie"},
        {0x7f800000u, 0x7f80, "inf"},
        {0xff800000u, 0xff80, "-inf"},
        {0x7f7fffffu, 0x7f80, "fp32 max rounds to inf"},
        {0x00000001u, 0x0000, "smallest fp32 subnormal"},
        {0x80000000u, 0x8000, "negative zero"},
    };
    int bad = 0;
    char msg[256] = "";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = zt_f32_to_bf16_bits(bits_f(cases[i].f));
        if (h != cases[i].h && !bad++)
            snprintf(msg, sizeof msg, "%s: 0x%08x -> 0x%04x, expected 0x%04x", cases[i].what, cases[i].f, h, cases[i].h);
    }
    uint16_t hn = zt_f32_to_bf16_bits(bits_f(0x7f800001u));
    CHECK(!bad && (hn & 0x7f80) == 0x7f80 && (hn & 0x7f), "bf16 encode hand values (ties, inf, nan)", "%d wrong, first %s; nan -> 0x%04x",
          bad, msg, hn);
}

/* ---------------------------------------------------------------- round trips */

static float *random_flat(const zt_param_table *t, uint64_t seed) {
    float *x = malloc(t->total * sizeof *x);
    zt_rng rng;
    zt_rng_seed(&rng, seed);
    for (size_t i = 0; i < t->total; i++) x[i] = zt_rng_normal(&rng) * (i % 7 == 0 ? 1e-3f : 1.0f);
    /* special values F32 must carry bit-exactly */
    x[0] = -0.0f; x[1] = bits_f(0x00000003u); x[2] = 3.0e38f; x[3] = 1e-30f;
    return x;
}

static void test_round_trips(void) {
    zt_gpt2_shape s;
    make_shape(&s, 2, 2, 8, 11, 6);
    zt_param_table t;
    zt_err err;
    if (zt_gpt2_param_table(&t, &s, &err)) { CHECK(0, "param table", "%s", err.msg); return; }
    float *x = random_flat(&t, 1), *y = malloc(t.total * sizeof *y);
    const char *dir = tmp_path("f32/sub");

    int rc = zt_hf_save(dir, &t, &s, read_flat, x, "F32", &err);
    CHECK(rc == 0, "save F32 (creating nested dirs)", "%s", err.msg);
    CHECK(zt_hf_probe(dir) == 1 && zt_hf_probe(root) == 0, "probe", "probe(dir) %d probe(root) %d", zt_hf_probe(dir), zt_hf_probe(root));
    char tmpname[600];
    snprintf(tmpname, sizeof tmpname, "%s/model.safetensors.tmp.%d", dir, (int)getpid());
    CHECK(!file_exists(tmpname), "save leaves no temp file", "%s exists", tmpname);
    memset(y, 0x55, t.total * sizeof *y);
    rc = zt_hf_load(dir, &t, y, &err);
    CHECK(rc == 0 && memcmp(x, y, t.total * sizeof *x) == 0, "F32 save -> load is bit-exact (dir path)", "rc %d %s", rc,
          rc ? err.msg : "values differ");
    char file[600];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    memset(y, 0, t.total * sizeof *y);
    rc = zt_hf_load(file, &t, y, &err);
    CHECK(rc == 0 && memcmp(x, y, t.total * sizeof *x) == 0, "F32 load from the .safetensors file path", "rc %d %s", rc,
          rc ? err.msg : "values differ");

    /* header is 8-byte aligned, named with the transformer. prefix, and has the pt metadata */
    FILE *f = fopen(file, "rb");
    uint64_t hl = 0;
    if (fread(&hl, 8, 1, f) != 1) hl = 0;
    char *hdr = calloc(hl + 1, 1);
    if (fread(hdr, 1, hl, f) != hl) hdr[0] = 0;
    fclose(f);
    CHECK(hl % 8 == 0 && strstr(hdr, "\"transformer.h.1.mlp.c_proj.weight\":{\"dtype\":\"F32\",\"shape\":[32,8]") &&
              strstr(hdr, "\"__metadata__\":{\"format\":\"pt\"}") && !strstr(hdr, "lm_head"),
          "safetensors header layout", "header (%llu bytes): %.300s", (unsigned long long)hl, hdr);
    free(hdr);

    zt_gpt2_shape s2;
    rc = zt_hf_read_config(dir, &s2, &err);
    CHECK(rc == 0 && s2.n_layer == 2 && s2.n_head == 2 && s2.n_embd == 8 && s2.vocab_size == 11 && s2.n_positions == 6 &&
              s2.padded_vocab == 128,
          "config.json round trip", "rc %d %s (L%d H%d C%d V%d P%d Vp%d)", rc, rc ? err.msg : "", s2.n_layer, s2.n_head,
          s2.n_embd, s2.vocab_size, s2.n_positions, s2.padded_vocab);

    /* BF16 and F16: what loads is exactly the rounded value */
    const char *dtypes[2] = {"BF16", "F16"};
    for (int d = 0; d < 2; d++) {
        char name[64], sub[64];
        snprintf(sub, sizeof sub, "%s", dtypes[d]);
        rc = zt_hf_save(tmp_path(sub), &t, &s, read_flat, x, dtypes[d], &err);
        if (d == 1) { /* x[2] = 3e38 is past fp16's range: refused, naming the element; then a value it holds */
            CHECK(rc != 0 && strstr(err.msg, "tensor transformer.wte.weight element 2 is 3e+38, which F16 cannot hold"),
                  "F16 save refuses a weight past its range", "rc %d msg '%s'", rc, err.msg);
            x[2] = 65504.0f;
            rc = zt_hf_save(tmp_path(sub), &t, &s, read_flat, x, dtypes[d], &err);
        }
        memset(y, 0, t.total * sizeof *y);
        if (rc == 0) rc = zt_hf_load(tmp_path(sub), &t, y, &err);
        size_t bad = 0, first = 0;
        for (size_t i = 0; rc == 0 && i < t.total; i++) {
            float want = d == 0 ? zt_bf16_bits_to_f32(zt_f32_to_bf16_bits(x[i])) : zt_f16_bits_to_f32(zt_f32_to_f16_bits(x[i]));
            if (f_bits(want) != f_bits(y[i]) && !bad++) first = i;
        }
        snprintf(name, sizeof name, "%s save -> load gives the rounded values", dtypes[d]);
        CHECK(rc == 0 && bad == 0, name, "rc %d %s; %zu differ, first at %zu", rc, rc ? err.msg : "", bad, first);
        x[2] = 3.0e38f;
    }

    /* a failing read_tensor callback: an error, and the previous model stays intact */
    rc = zt_hf_save(dir, &t, &s, read_fail, x, "F32", &err);
    memset(y, 0, t.total * sizeof *y);
    int rc2 = zt_hf_load(dir, &t, y, NULL);
    CHECK(rc != 0 && strstr(err.msg, "transformer.wpe.weight") && !file_exists(tmpname) && rc2 == 0 &&
              memcmp(x, y, t.total * sizeof *x) == 0,
          "save with a failing fetch keeps the old model", "rc %d msg '%s' reload %d", rc, err.msg, rc2);
    rc = zt_hf_save(dir, &t, &s, read_flat, x, "F64", &err);
    CHECK(rc != 0 && strstr(err.msg, "F64"), "save rejects an unknown dtype", "rc %d msg '%s'", rc, err.msg);

    /* files written by someone else: bare names, attention buffers, a tied lm_head */
    {
        raw_tensor raw[64];
        int n = 0;
        char names[64][64];
        static float mask[16];
        for (int i = 0; i < t.count; i++) {
            const zt_param_info *p = &t.params[i];
            snprintf(names[n], 64, "%s", p->name + (i % 2 ? 12 : 0)); /* every other one without the prefix */
            raw[n] = (raw_tensor){names[n], p->ndim, p->shape[0], p->shape[1], x + p->offset};
            n++;
        }
        raw[n++] = (raw_tensor){"h.0.attn.bias", 2, 4, 4, mask};
        raw[n++] = (raw_tensor){"transformer.h.1.attn.masked_bias", 1, 1, 0, mask};
        raw[n++] = (raw_tensor){"lm_head.weight", 2, 11, 8, x};
        write_raw_st(tmp_path("foreign.safetensors"), raw, n);
        memset(y, 0, t.total * sizeof *y);
        rc = zt_hf_load(tmp_path("foreign.safetensors"), &t, y, &err);
        CHECK(rc == 0 && memcmp(x, y, t.total * sizeof *x) == 0, "load bare names, ignore attn.bias buffers and tied lm_head",
              "rc %d %s", rc, rc ? err.msg : "values differ");

        raw[n - 1].d0 = 12;
        write_raw_st(tmp_path("lmhead.safetensors"), raw, n);
        rc = zt_hf_load(tmp_path("lmhead.safetensors"), &t, y, &err);
        CHECK(rc != 0 && strstr(err.msg, "lm_head.weight") && strstr(err.msg, "[12, 8]") && strstr(err.msg, "lmhead.safetensors"),
              "error: lm_head.weight with a shape other than wte's", "rc %d msg '%s'", rc, err.msg);

        /* wte absent, only the tied head present */
        raw[n - 1].d0 = 11;
        raw[0] = raw[n - 1];
        write_raw_st(tmp_path("headonly.safetensors"), raw, n - 1);
        memset(y, 0, t.total * sizeof *y);
        rc = zt_hf_load(tmp_path("headonly.safetensors"), &t, y, &err);
        CHECK(rc == 0 && memcmp(x, y, t.total * sizeof *x) == 0, "load wte from lm_head.weight when only the head is stored",
              "rc %d %s", rc, rc ? err.msg : "values differ");

        raw[0] = (raw_tensor){"transformer.wte.weight", 2, 11, 8, x};
        raw[1] = (raw_tensor){"transformer.wte.weight", 2, 11, 8, x}; /* duplicate key in the JSON */
        write_raw_st(tmp_path("dup.safetensors"), raw, n);
        rc = zt_hf_load(tmp_path("dup.safetensors"), &t, y, &err);
        CHECK(rc != 0 && strstr(err.msg, "duplicate") && strstr(err.msg, "dup.safetensors"), "error: duplicate tensor name",
              "rc %d msg '%s'", rc, err.msg);
    }
    free(x);
    free(y);
    zt_param_table_free(&t);
}

/* ---------------------------------------------------------------- errors */

static int names_file(const zt_err *e, const char *path) { return strstr(e->msg, path) != NULL; }

static void test_errors(void) {
    zt_gpt2_shape s, s_wide, s_deep;
    make_shape(&s, 1, 2, 8, 11, 6);
    make_shape(&s_wide, 1, 2, 16, 11, 6);
    make_shape(&s_deep, 2, 2, 8, 11, 6);
    zt_param_table t, t_wide, t_deep;
    zt_err err;
    zt_gpt2_param_table(&t, &s, &err);
    zt_gpt2_param_table(&t_wide, &s_wide, &err);
    zt_gpt2_param_table(&t_deep, &s_deep, &err);
    float *x = random_flat(&t_deep, 3), *y = malloc(t_deep.total * 4 + t_wide.total * 4);
    const char *dir = tmp_path("err");
    zt_hf_save(dir, &t, &s, read_flat, x, "F32", &err);
    char file[600];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);

    int rc = zt_hf_load(tmp_path("nowhere"), &t, y, &err);
    CHECK(rc != 0 && names_file(&err, tmp_path("nowhere")) && strstr(err.msg, "cannot open"),
          "error: missing file names it", "msg '%s'", err.msg);

    rc = zt_hf_load(dir, &t_wide, y, &err);
    CHECK(rc != 0 && names_file(&err, file) &&
              strstr(err.msg, "tensor transformer.wte.weight has shape [11, 8], the config needs [11, 16]"),
          "error: wrong shape names file, tensor and both shapes", "msg '%s'", err.msg);

    rc = zt_hf_load(dir, &t_deep, y, &err);
    CHECK(rc != 0 && names_file(&err, file) && strstr(err.msg, "missing tensor transformer.h.1.ln_1.weight"),
          "error: missing tensor", "msg '%s'", err.msg);

    const char *deep = tmp_path("deep");
    zt_hf_save(deep, &t_deep, &s_deep, read_flat, x, "F32", &err);
    rc = zt_hf_load(deep, &t, y, &err);
    CHECK(rc != 0 && names_file(&err, deep) && strstr(err.msg, "unexpected tensor transformer.h.1.ln_1.weight"),
          "error: extra tensor (config has fewer layers)", "msg '%s'", err.msg);

    /* truncated: drop the last bytes of the data, then cut into the header */
    FILE *f = fopen(file, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *bytes = malloc((size_t)size);
    if (fread(bytes, 1, (size_t)size, f) != (size_t)size) size = 0;
    fclose(f);
    const char *tr = tmp_path("trunc.safetensors");
    write_bytes(tr, bytes, (size_t)size - 3);
    rc = zt_hf_load(tr, &t, y, &err);
    CHECK(rc != 0 && names_file(&err, tr) && strstr(err.msg, "truncated") && strstr(err.msg, "transformer.ln_f.bias"),
          "error: truncated data names file and tensor", "msg '%s'", err.msg);
    write_bytes(tr, bytes, 40);
    rc = zt_hf_load(tr, &t, y, &err);
    CHECK(rc != 0 && names_file(&err, tr) && strstr(err.msg, "truncated"), "error: truncated header", "msg '%s'", err.msg);
    write_bytes(tr, bytes, 5);
    rc = zt_hf_load(tr, &t, y, &err);
    CHECK(rc != 0 && names_file(&err, tr), "error: 5-byte file", "msg '%s'", err.msg);
    write_bytes(tr, bytes, 0);
    rc = zt_hf_load(tr, &t, y, &err);
    CHECK(rc != 0 && names_file(&err, tr), "error: empty file", "msg '%s'", err.msg);

    /* bad JSON in the header (same length, one brace broken) */
    uint64_t hl;
    memcpy(&hl, bytes, 8);
    const char *bj = tmp_path("badjson.safetensors");
    char *copy = malloc((size_t)size);
    memcpy(copy, bytes, (size_t)size);
    char *colon = memchr(copy + 8, ':', (size_t)hl);
    if (colon) *colon = ';';
    write_bytes(bj, copy, (size_t)size);
    rc = zt_hf_load(bj, &t, y, &err);
    char want[700];
    snprintf(want, sizeof want, "%s:1:%d: expected ':'", bj, (int)(colon - (copy + 8)) + 1); /* line:col within the header */
    CHECK(rc != 0 && strstr(err.msg, want) && strstr(err.msg, "safetensors header"), "error: bad JSON header names file:line:col",
          "want '%s', msg '%s'", want, err.msg);
    /* valid JSON, wrong data_offsets */
    memcpy(copy, bytes, (size_t)size);
    char *dof = strstr(copy + 8, "\"data_offsets\":[0,");
    if (dof) dof[16] = '4';
    write_bytes(bj, copy, (size_t)size);
    rc = zt_hf_load(bj, &t, y, &err);
    CHECK(rc != 0 && names_file(&err, bj) && strstr(err.msg, "data_offsets") && strstr(err.msg, "transformer.wte.weight"),
          "error: data_offsets inconsistent with the shape", "msg '%s'", err.msg);
    free(copy);
    free(bytes);

    /* foreign file: random bytes, and a text file */
    unsigned char junk[4096];
    zt_rng rng;
    zt_rng_seed(&rng, 99);
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)zt_rng_u64(&rng);
    const char *fj = tmp_path("random.bin");
    write_bytes(fj, junk, sizeof junk);
    rc = zt_hf_load(fj, &t, y, &err);
    CHECK(rc != 0 && names_file(&err, fj) && strstr(err.msg, "not a safetensors file"), "error: random bytes", "msg '%s'", err.msg);
    const char *ft = tmp_path("text.txt");
    write_text(ft, "hello, this is not a model at all, just text........................");
    rc = zt_hf_load(ft, &t, y, &err);
    CHECK(rc != 0 && names_file(&err, ft) && strstr(err.msg, "not a safetensors file"), "error: text file", "msg '%s'", err.msg);

    /* config.json problems */
    const char *cdir = tmp_path("cfg");
    mkdir(cdir, 0777);
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/config.json", cdir);
    zt_gpt2_shape got;
    rc = zt_hf_read_config(cdir, &got, &err);
    CHECK(rc != 0 && names_file(&err, cfg), "config error: missing config.json", "msg '%s'", err.msg);
    write_text(cfg, "{\"n_layer\": 3, \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 50257, \"n_ctx\": 128}");
    rc = zt_hf_read_config(cdir, &got, &err);
    CHECK(rc == 0 && got.n_layer == 3 && got.n_positions == 128 && got.padded_vocab == 50304, "config: n_ctx when n_positions is absent",
          "rc %d %s Vp %d", rc, rc ? err.msg : "", got.padded_vocab);
    write_text(cfg, "{\"n_layer\": 3, \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 50257, \"n_positions\": 128, "
                    "\"activation_function\": \"relu\"}");
    rc = zt_hf_read_config(cdir, &got, &err);
    CHECK(rc != 0 && names_file(&err, cfg) && strstr(err.msg, "activation_function") && strstr(err.msg, "relu"),
          "config error: activation_function", "msg '%s'", err.msg);
    write_text(cfg, "{\"n_layer\": 3, \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 50257, \"n_positions\": 128, "
                    "\"layer_norm_epsilon\": 1e-6}");
    rc = zt_hf_read_config(cdir, &got, &err);
    CHECK(rc != 0 && names_file(&err, cfg) && strstr(err.msg, "layer_norm_epsilon"), "config error: layer_norm_epsilon",
          "msg '%s'", err.msg);
    write_text(cfg, "{\"n_layer\": 3, \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 50257}");
    rc = zt_hf_read_config(cdir, &got, &err);
    CHECK(rc != 0 && names_file(&err, cfg) && strstr(err.msg, "n_positions"), "config error: no n_positions/n_ctx", "msg '%s'", err.msg);
    write_text(cfg, "{\"n_layer\": 3, \"n_head\": 5, \"n_embd\": 64, \"vocab_size\": 50257, \"n_positions\": 1}");
    rc = zt_hf_read_config(cdir, &got, &err);
    CHECK(rc != 0 && names_file(&err, cfg) && strstr(err.msg, "n_head"), "config error: n_embd not a multiple of n_head",
          "msg '%s'", err.msg);
    write_text(cfg, "{\"n_layer\": 3, \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 50257, \"n_positions\": 128,");
    rc = zt_hf_read_config(cdir, &got, &err);
    char want_cfg[700];
    snprintf(want_cfg, sizeof want_cfg, "%s:1:83: unexpected end of input", cfg);
    CHECK(rc != 0 && strstr(err.msg, want_cfg), "config error: bad JSON names file:line:col", "msg '%s'", err.msg);
    write_text(cfg, "{\"n_layer\": 3,\n \"n_head\": 4.5, \"n_embd\": 64, \"vocab_size\": 9, \"n_positions\": 8}");
    rc = zt_hf_read_config(cdir, &got, &err);
    snprintf(want_cfg, sizeof want_cfg, "%s:2:12: \"n_head\" must be a positive integer", cfg);
    CHECK(rc != 0 && strstr(err.msg, want_cfg), "config error: a bad value names file:line:col", "msg '%s'", err.msg);
    write_text(cfg, "{\"model_type\": \"llama\", \"n_layer\": 3, \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 9, \"n_positions\": 8}");
    rc = zt_hf_read_config(cdir, &got, &err);
    CHECK(rc != 0 && names_file(&err, cfg) && strstr(err.msg, "llama"), "config error: model_type", "msg '%s'", err.msg);
    write_text(cfg, "{\"n_layer\": -3, \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 9, \"n_positions\": 8}");
    rc = zt_hf_read_config(cdir, &got, &err);
    CHECK(rc != 0 && names_file(&err, cfg) && strstr(err.msg, "n_layer"), "config error: negative n_layer", "msg '%s'", err.msg);

    free(x);
    free(y);
    zt_param_table_free(&t);
    zt_param_table_free(&t_wide);
    zt_param_table_free(&t_deep);
}

int main(void) {
    snprintf(root, sizeof root, "%s/zt_test_hf.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(root)) { perror("mkdtemp"); return 2; }
    test_f16_hand();
    test_bf16_hand();
    test_round_trips();
    test_errors();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (zt_check_exit() == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return zt_check_exit();
}
