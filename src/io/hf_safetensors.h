/* hf_safetensors.h — the safetensors file format, read and written one tensor at a time, and the
 * write-to-a-temporary-then-rename helper every file of an exported directory goes through.
 *
 * safetensors: an 8-byte little-endian u64 header length N, N bytes of JSON
 *   {"NAME": {"dtype": "F32"|"BF16"|"F16"|..., "shape": [...], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {...}}
 * then the data buffer; offsets are relative to the buffer start, tensors are row-major and
 * little-endian. Opening a file reads and checks only the header (every tensor's extent must lie
 * inside the file, so a truncated file fails at open, naming it); data is read per tensor, so
 * memory stays bounded by the tensor being read (plus a fixed conversion chunk). */
#ifndef ZT_HF_SAFETENSORS_H
#define ZT_HF_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "util/json.h"
#include "util/util.h"

typedef struct zt_st_tensor {
    const char *name;       /* points into the parsed header */
    const char *dtype_name; /* as written: "F32", "I64", ... */
    int esize;              /* bytes per element of dtype_name */
    int readable;           /* F32, BF16 or F16: zt_st_read_f32 converts it */
    int ndim;
    int64_t shape[8];
    uint64_t numel, begin, end;
} zt_st_tensor;

typedef struct zt_st_file {
    char *path;
    FILE *f;
    zt_json header;
    zt_st_tensor *tensors; /* [count], in header order (without __metadata__) */
    int count;
    off_t data0;           /* file offset of the data buffer */
} zt_st_file;

/* Opens PATH and checks its header: dtypes known, shapes and data_offsets consistent, every tensor
 * inside the file. Errors name PATH (and the tensor, or the header's line:column). */
int zt_st_open(zt_st_file *sf, const char *path, zt_err *err);
void zt_st_close(zt_st_file *sf);
/* The tensor NAME in SF, or NULL. */
const zt_st_tensor *zt_st_find(const zt_st_file *sf, const char *name);
/* Reads T's data as fp32 into OUT (T->numel values); T must be readable. */
int zt_st_read_f32(zt_st_file *sf, const zt_st_tensor *t, float *out, zt_err *err);

/* One tensor to write: its name, shape (ndim 1 or 2) and where its fp32 values come from. */
typedef struct zt_st_entry {
    const char *name;
    int ndim;
    int64_t shape[2];
    size_t numel, offset; /* the values [offset, offset + numel) of the source */
} zt_st_entry;

/* Fetches the source's fp32 values [offset, offset + n) into OUT; returns 0, non-zero on failure. */
typedef int (*zt_st_read_fn)(void *ctx, size_t offset, size_t n, float *out);

/* Writes DIR/NAME: ENTRIES in order, contiguous, as DTYPE "F32", "BF16" or "F16" (round to
 * nearest even), with __metadata__ {"format": "pt"}. Atomic (zt_file_create / zt_file_commit). */
int zt_st_write(const char *dir, const char *name, const zt_st_entry *entries, int count, const char *dtype,
                zt_st_read_fn read, void *ctx, zt_err *err);

/* Atomic files: zt_file_create opens DIR/NAME.tmp.PID for writing; zt_file_commit flushes, fsyncs,
 * closes and renames it to DIR/NAME when OK (else removes it), so a crash never leaves a
 * half-written file. zt_file_write_all writes TEXT[0..LEN) to DIR/NAME that way. */
typedef struct zt_file_tmp {
    FILE *f;
    char *tmp, *final;
    const char *dir;
} zt_file_tmp;
int zt_file_create(zt_file_tmp *t, const char *dir, const char *name, zt_err *err);
int zt_file_commit(zt_file_tmp *t, int ok, zt_err *err);
int zt_file_write_all(const char *dir, const char *name, const char *text, size_t len, zt_err *err);
/* DIR/NAME in a new string */
char *zt_path_join(const char *dir, const char *name);

#endif
