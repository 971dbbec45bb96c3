/* shard.h — llm.c's token shard format: a header of 256 little-endian int32 (header[0] = magic
 * 20240520, header[1] = version 1, header[2] = token count, the rest 0), then the tokens as
 * little-endian uint16. The file is exactly 1024 + 2 * count bytes. */
#ifndef ZT_SHARD_H
#define ZT_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#define ZT_SHARD_MAGIC 20240520
#define ZT_SHARD_VERSION 1
#define ZT_SHARD_HEADER_BYTES 1024

/* Writes a shard atomically: to "PATH.tmp.PID", fsync, then rename to PATH (and fsync the
 * directory). On failure the temp file is removed and nothing appears under PATH. N must be at
 * most INT32_MAX. Returns 0 or -1 with ERR naming PATH. */
int zt_shard_write(const char *path, const uint16_t *tokens, size_t n, zt_err *err);

/* The same written as the tokens come: open, append any number of times, then commit (which
 * writes the count into the header, fsyncs and renames) or abort (which removes the temp file).
 * A failed append or commit has already aborted. At most INT32_MAX tokens in all. */
typedef struct zt_shard_writer {
    char *path, *tmp;
    int fd;
    size_t n; /* tokens appended so far */
} zt_shard_writer;
int zt_shard_writer_open(zt_shard_writer *w, const char *path, zt_err *err);
int zt_shard_writer_append(zt_shard_writer *w, const uint16_t *tokens, size_t n, zt_err *err);
int zt_shard_writer_commit(zt_shard_writer *w, zt_err *err);
void zt_shard_writer_abort(zt_shard_writer *w);

/* Validates PATH's header and size; *n_tokens gets the token count. Errors name the file:
 * "cannot open", "empty file", "not a token shard (magic X, expected 20240520)",
 * "unsupported shard version X", "truncated: header says N tokens (B bytes) but file has M bytes". */
int zt_shard_read_header(const char *path, size_t *n_tokens, zt_err *err);

/* Validates PATH and reads all its tokens into a new array (free() it); NULL with ERR on failure.
 * A shard of 0 tokens gives a non-NULL (1-element) array and *n_tokens = 0. */
uint16_t *zt_shard_load(const char *path, size_t *n_tokens, zt_err *err);

#endif
