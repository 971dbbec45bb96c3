/* hf_safetensors.c — see hf_safetensors.h */
#define _GNU_SOURCE
#include "io/hf_safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/opmath.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "hf_safetensors.c reads and writes safetensors data in host byte order, which must be little-endian"
#endif

#define ST_MAX_HEADER (100u << 20) /* the safetensors reference implementation's limit */
#define ST_CHUNK 65536             /* elements converted per fread/fwrite for 16-bit dtypes */
#define ST_MAX_NUMEL ((uint64_t)1 << 40)

/* ---------------------------------------------------------------- reading */

static const struct { const char *name; int bytes; int readable; } DTYPES[] = {
    {"F32", 4, 1}, {"BF16", 2, 1}, {"F16", 2, 1}, {"F64", 8, 0},     {"I64", 8, 0},     {"U64", 8, 0},
    {"I32", 4, 0}, {"U32", 4, 0},  {"I16", 2, 0}, {"U16", 2, 0},     {"I8", 1, 0},      {"U8", 1, 0},
    {"BOOL", 1, 0}, {"F8_E4M3", 1, 0}, {"F8_E5M2", 1, 0}};

/* Fills T from the header entry V; checks it against the DATA_SIZE bytes the file holds. */
static int parse_tensor(const zt_st_file *sf, const char *name, const zt_json *v, uint64_t data_size, zt_st_tensor *t,
                        zt_err *err) {
    const char *path = sf->path;
    memset(t, 0, sizeof *t);
    t->name = name;
    const zt_json *dt = zt_json_get(v, "dtype"), *sh = zt_json_get(v, "shape"), *off = zt_json_get(v, "data_offsets");
    if (v->type != ZT_JSON_OBJECT || !dt || dt->type != ZT_JSON_STRING || !sh || sh->type != ZT_JSON_ARRAY || !off ||
        off->type != ZT_JSON_ARRAY || off->n != 2 || !off->items[0].is_uint || !off->items[1].is_uint)
        return zt_fail(err, "%s: bad safetensors header: tensor %s needs \"dtype\", \"shape\" and \"data_offsets\" [begin, end]",
                       path, name);
    t->dtype_name = dt->str;
    for (size_t k = 0; k < sizeof DTYPES / sizeof DTYPES[0]; k++)
        if (strcmp(dt->str, DTYPES[k].name) == 0) {
            t->esize = DTYPES[k].bytes;
            t->readable = DTYPES[k].readable;
        }
    if (!t->esize) return zt_fail(err, "%s: bad safetensors header: tensor %s has unknown dtype \"%.20s\"", path, name, dt->str);
    if (sh->n > 8) return zt_fail(err, "%s: bad safetensors header: tensor %s has %d dimensions", path, name, sh->n);
    t->ndim = sh->n;
    t->numel = 1;
    for (int d = 0; d < sh->n; d++) {
        const zt_json *x = &sh->items[d];
        if (!x->is_uint || x->u > ST_MAX_NUMEL)
            return zt_fail(err, "%s: bad safetensors header: tensor %s has a bad shape", path, name);
        t->shape[d] = (int64_t)x->u;
        t->numel *= x->u;
        if (t->numel > ST_MAX_NUMEL) return zt_fail(err, "%s: bad safetensors header: tensor %s is too large", path, name);
    }
    t->begin = off->items[0].u;
    t->end = off->items[1].u;
    uint64_t bytes = t->numel * (uint64_t)t->esize;
    if (t->begin > t->end || t->end - t->begin != bytes)
        return zt_fail(err, "%s: bad safetensors header: tensor %s has data_offsets [%llu, %llu] but %s %llu elements need %llu bytes",
                       path, name, (unsigned long long)t->begin, (unsigned long long)t->end, dt->str,
                       (unsigned long long)t->numel, (unsigned long long)bytes);
    if (t->end > data_size)
        return zt_fail(err, "%s: truncated: tensor %s ends at data byte %llu but the file holds only %llu data bytes", path,
                       name, (unsigned long long)t->end, (unsigned long long)data_size);
    return 0;
}

static int by_offsets(const void *a, const void *b) {
    const zt_st_tensor *x = *(const zt_st_tensor *const *)a, *y = *(const zt_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* The tensors' byte ranges must tile the data buffer exactly, as the format's specification and the
 * reference library (InvalidOffset) require: in offset order each begins where the one before ends,
 * the first at 0, the last ends at the buffer's end. Overlapping or aliased ranges (two names on one
 * set of bytes: an edit of one would change the other), holes and bytes past the last tensor are
 * refused, naming the tensor. */
static int check_layout(const zt_st_file *sf, uint64_t data_size, zt_err *err) {
    const zt_st_tensor **order = zt_xcalloc((size_t)sf->count + 1, sizeof *order);
    for (int i = 0; i < sf->count; i++) order[i] = &sf->tensors[i];
    qsort(order, (size_t)sf->count, sizeof *order, by_offsets);
    uint64_t at = 0;
    int rc = 0;
    const zt_st_tensor *prev = NULL;
    for (int i = 0; i < sf->count && !rc; i++) {
        const zt_st_tensor *t = order[i];
        if (t->begin < at)
            rc = zt_fail(err, "%s: bad safetensors header: tensor %s has data_offsets [%llu, %llu], which overlap tensor %s's "
                              "[%llu, %llu] (each tensor needs bytes of its own)", sf->path, t->name,
                         (unsigned long long)t->begin, (unsigned long long)t->end, prev->name,
                         (unsigned long long)prev->begin, (unsigned long long)prev->end);
        else if (t->begin > at)
            rc = zt_fail(err, "%s: bad safetensors header: data bytes [%llu, %llu) before tensor %s belong to no tensor (a hole "
                              "in the data buffer)", sf->path, (unsigned long long)at, (unsigned long long)t->begin, t->name);
        at = t->end;
        prev = t;
    }
    if (!rc && at != data_size)
        rc = zt_fail(err, "%s: bad safetensors header: the data buffer holds %llu bytes but the tensors cover %llu%s%s "
                          "(bytes past the last tensor)", sf->path, (unsigned long long)data_size, (unsigned long long)at,
                     prev ? ", up to the end of tensor " : "", prev ? prev->name : "");
    free(order);
    return rc;
}

int zt_st_open(zt_st_file *sf, const char *path, zt_err *err) {
    memset(sf, 0, sizeof *sf);
    sf->path = zt_xstrdup(path);
    sf->f = fopen(path, "rb");
    if (!sf->f) {
        zt_fail(err, "%s: cannot open: %s", path, strerror(errno));
        zt_st_close(sf);
        return -1;
    }
    char *header = NULL;
    off_t size;
    if (fseeko(sf->f, 0, SEEK_END) != 0 || (size = ftello(sf->f)) < 0 || fseeko(sf->f, 0, SEEK_SET) != 0) {
        zt_fail(err, "%s: cannot seek: %s", path, strerror(errno));
        goto fail;
    }
    unsigned char lenbuf[8];
    if (size < 8 || fread(lenbuf, 1, 8, sf->f) != 8) {
        zt_fail(err, "%s: not a safetensors file (%lld bytes, shorter than the 8-byte header length)", path, (long long)size);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lenbuf[i];
    if (hlen < 2 || hlen > ST_MAX_HEADER || hlen > (uint64_t)size - 8) {
        zt_fail(err, "%s: not a safetensors file (header length %llu, file size %lld bytes)%s", path, (unsigned long long)hlen,
                (long long)size, hlen <= ST_MAX_HEADER && hlen > (uint64_t)size - 8 ? ", or truncated" : "");
        goto fail;
    }
    header = zt_xmalloc(hlen + 1);
    if (fread(header, 1, hlen, sf->f) != hlen) {
        zt_fail(err, "%s: truncated: cannot read the %llu-byte header", path, (unsigned long long)hlen);
        goto fail;
    }
    header[hlen] = 0;
    if (header[0] != '{') {
        zt_fail(err, "%s: not a safetensors file (the header does not start with '{')", path);
        goto fail;
    }
    if (zt_json_parse(header, hlen, path, &sf->header, err)) {
        size_t n = strlen(err->msg);
        snprintf(err->msg + n, sizeof err->msg - n, " (in the safetensors header, which starts at byte 8)");
        goto fail;
    }
    if (sf->header.type != ZT_JSON_OBJECT) {
        zt_fail(err, "%s: bad safetensors header: not a JSON object", path);
        goto fail;
    }
    free(header);
    header = NULL;
    uint64_t data_size = (uint64_t)size - 8 - hlen;
    sf->data0 = (off_t)(8 + hlen);
    sf->tensors = zt_xcalloc((size_t)sf->header.n + 1, sizeof *sf->tensors);
    for (int i = 0; i < sf->header.n; i++) {
        if (strcmp(sf->header.keys[i], "__metadata__") == 0) continue;
        if (parse_tensor(sf, sf->header.keys[i], &sf->header.items[i], data_size, &sf->tensors[sf->count], err)) goto fail;
        sf->count++;
    }
    if (check_layout(sf, data_size, err)) goto fail;
    return 0;
fail:
    free(header);
    zt_st_close(sf);
    return -1;
}

void zt_st_close(zt_st_file *sf) {
    if (sf->f) fclose(sf->f);
    zt_json_free(&sf->header);
    free(sf->tensors);
    free(sf->path);
    memset(sf, 0, sizeof *sf);
}

const zt_st_tensor *zt_st_find(const zt_st_file *sf, const char *name) {
    for (int i = 0; i < sf->count; i++)
        if (strcmp(sf->tensors[i].name, name) == 0) return &sf->tensors[i];
    return NULL;
}

int zt_st_read_f32(zt_st_file *sf, const zt_st_tensor *t, float *out, zt_err *err) {
    const char *path = sf->path;
    if (fseeko(sf->f, sf->data0 + (off_t)t->begin, SEEK_SET) != 0)
        return zt_fail(err, "%s: cannot seek to tensor %s: %s", path, t->name, strerror(errno));
    size_t numel = (size_t)t->numel;
    if (t->esize == 4) {
        if (fread(out, 4, numel, sf->f) != numel) return zt_fail(err, "%s: truncated: cannot read tensor %s", path, t->name);
        return 0;
    }
    int f16 = strcmp(t->dtype_name, "F16") == 0;
    uint16_t *chunk = zt_xmalloc(ST_CHUNK * sizeof *chunk);
    for (size_t i = 0; i < numel; i += ST_CHUNK) {
        size_t n = numel - i < ST_CHUNK ? numel - i : ST_CHUNK;
        if (fread(chunk, 2, n, sf->f) != n) {
            free(chunk);
            return zt_fail(err, "%s: truncated: cannot read tensor %s", path, t->name);
        }
        for (size_t k = 0; k < n; k++) out[i + k] = f16 ? zt_f16_bits_to_f32(chunk[k]) : zt_bf16_bits_to_f32(chunk[k]);
    }
    free(chunk);
    return 0;
}

/* ---------------------------------------------------------------- atomic files */

char *zt_path_join(const char *dir, const char *name) {
    size_t dl = strlen(dir), n = dl + strlen(name) + 2;
    char *s = zt_xmalloc(n);
    snprintf(s, n, "%s%s%s", dir, (dl && dir[dl - 1] == '/') ? "" : "/", name);
    return s;
}

int zt_file_create(zt_file_tmp *t, const char *dir, const char *name, zt_err *err) {
    t->dir = dir;
    t->final = zt_path_join(dir, name);
    size_t n = strlen(t->final) + 32;
    t->tmp = zt_xmalloc(n);
    snprintf(t->tmp, n, "%s.tmp.%d", t->final, (int)getpid());
    t->f = fopen(t->tmp, "wb");
    if (t->f) return 0;
    zt_fail(err, "%s: cannot create: %s", t->tmp, strerror(errno));
    free(t->tmp);
    free(t->final);
    memset(t, 0, sizeof *t);
    return -1;
}

int zt_file_commit(zt_file_tmp *t, int ok, zt_err *err) {
    int rc = ok ? 0 : -1;
    if (rc == 0 && (fflush(t->f) != 0 || fsync(fileno(t->f)) != 0))
        rc = zt_fail(err, "%s: write error: %s", t->tmp, strerror(errno));
    if (fclose(t->f) != 0 && rc == 0) rc = zt_fail(err, "%s: write error: %s", t->tmp, strerror(errno));
    if (rc == 0 && rename(t->tmp, t->final) != 0)
        rc = zt_fail(err, "%s: cannot rename to %s: %s", t->tmp, t->final, strerror(errno));
    if (rc) {
        unlink(t->tmp);
    } else {
        int fd = open(t->dir, O_RDONLY | O_DIRECTORY); /* make the rename itself durable */
        if (fd >= 0) {
            fsync(fd);
            close(fd);
        }
    }
    free(t->tmp);
    free(t->final);
    memset(t, 0, sizeof *t);
    return rc;
}

int zt_file_write_all(const char *dir, const char *name, const char *text, size_t len, zt_err *err) {
    zt_file_tmp t;
    if (zt_file_create(&t, dir, name, err)) return -1;
    int ok = fwrite(text, 1, len, t.f) == len;
    if (!ok) zt_fail(err, "%s: write error: %s", t.tmp, strerror(errno));
    return zt_file_commit(&t, ok, err);
}

/* ---------------------------------------------------------------- writing */

int zt_st_write(const char *dir, const char *name, const zt_st_entry *entries, int count, const char *dtype,
                zt_st_read_fn read, void *ctx, zt_err *err) {
    int esize = strcmp(dtype, "F32") == 0 ? 4 : (strcmp(dtype, "BF16") == 0 || strcmp(dtype, "F16") == 0) ? 2 : 0;
    int f16 = strcmp(dtype, "F16") == 0;
    if (!esize) return zt_fail(err, "unsupported safetensors dtype \"%s\" (F32, BF16 or F16)", dtype);
    /* header: tensors in order, contiguous; padded with spaces to a multiple of 8 bytes */
    zt_sb h = {0};
    zt_sb_printf(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
    size_t off = 0, max_numel = 1;
    for (int i = 0; i < count; i++) {
        const zt_st_entry *e = &entries[i];
        zt_sb_printf(&h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld", e->name, dtype, (long long)e->shape[0]);
        if (e->ndim == 2) zt_sb_printf(&h, ",%lld", (long long)e->shape[1]);
        zt_sb_printf(&h, "],\"data_offsets\":[%zu,%zu]}", off, off + e->numel * (size_t)esize);
        off += e->numel * (size_t)esize;
        if (e->numel > max_numel) max_numel = e->numel;
    }
    zt_sb_printf(&h, "}");
    while (h.n % 8) zt_sb_printf(&h, " ");

    zt_file_tmp t;
    if (zt_file_create(&t, dir, name, err)) {
        free(h.p);
        return -1;
    }
    int ok = 1; /* 1 fine, 0 write error, -1 source error (already reported) */
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    if (fwrite(lenbuf, 1, 8, t.f) != 8 || fwrite(h.p, 1, h.n, t.f) != h.n) ok = 0;
    free(h.p);
    float *buf = zt_xmalloc(max_numel * sizeof *buf);
    uint16_t *chunk = esize == 2 ? zt_xmalloc(ST_CHUNK * sizeof *chunk) : NULL;
    for (int i = 0; ok == 1 && i < count; i++) {
        const zt_st_entry *e = &entries[i];
        if (read(ctx, e->offset, e->numel, buf) != 0) {
            zt_fail(err, "%s: cannot fetch tensor %s to save it", t.final, e->name);
            ok = -1;
            break;
        }
        if (esize == 4) {
            if (fwrite(buf, 4, e->numel, t.f) != e->numel) ok = 0;
            continue;
        }
        for (size_t k = 0; ok == 1 && k < e->numel; k += ST_CHUNK) {
            size_t n = e->numel - k < ST_CHUNK ? e->numel - k : ST_CHUNK;
            for (size_t j = 0; j < n; j++) chunk[j] = f16 ? zt_f32_to_f16_bits(buf[k + j]) : zt_f32_to_bf16_bits(buf[k + j]);
            for (size_t j = 0; j < n && ok == 1; j++) /* a weight past the 16-bit range would load as inf */
                if ((chunk[j] & 0x7fffu) >= (f16 ? 0x7c00u : 0x7f80u)) {
                    zt_fail(err, "%s: tensor %s element %zu is %g, which %s cannot hold (its largest is %s): save as %s",
                            t.final, e->name, k + j, (double)buf[k + j], dtype, f16 ? "65504" : "3.39e38",
                            f16 ? "bf16 or fp32" : "fp32");
                    ok = -1;
                }
            if (ok == 1 && fwrite(chunk, 2, n, t.f) != n) ok = 0;
        }
    }
    free(buf);
    free(chunk);
    if (ok == 0) zt_fail(err, "%s: write error: %s", t.tmp, strerror(errno));
    return zt_file_commit(&t, ok == 1, err);
}
