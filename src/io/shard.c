/* shard.c — see shard.h */
#include "io/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t n) { /* -1 on error, else bytes read (short at EOF) */
    char *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got > (1u << 30) ? (1u << 30) : n - got);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (int)(got == n ? 1 : 0);
}

static void put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static int host_is_le(void) {
    uint16_t x = 1;
    uint8_t b;
    memcpy(&b, &x, 1);
    return b == 1;
}

/* fsyncs the directory holding PATH so the rename is durable (best effort). */
static void sync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

int zt_shard_writer_open(zt_shard_writer *w, const char *path, int width, zt_err *err) {
    size_t pl = strlen(path) + 32;
    memset(w, 0, sizeof *w);
    w->fd = -1;
    w->width = width == 4 ? 4 : 2;
    w->tmp = zt_xmalloc(pl);
    snprintf(w->tmp, pl, "%s.tmp.%ld", path, (long)getpid());
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        zt_fail(err, "%s: cannot write (creating %s: %s)", path, w->tmp, strerror(errno));
        free(w->tmp);
        w->tmp = NULL;
        return -1;
    }
    w->path = zt_xstrdup(path);
    uint8_t header[ZT_SHARD_HEADER_BYTES] = {0}; /* the count goes in at commit */
    put_le32(header, w->width == 4 ? ZT_SHARD_MAGIC_U32 : ZT_SHARD_MAGIC);
    put_le32(header + 4, w->width == 4 ? ZT_SHARD_VERSION_U32 : ZT_SHARD_VERSION);
    if (write_all(w->fd, header, sizeof header) != 0) {
        zt_fail(err, "%s: cannot write (%s)", path, strerror(errno));
        zt_shard_writer_abort(w);
        return -1;
    }
    return 0;
}

int zt_shard_writer_append_le(zt_shard_writer *w, const uint8_t *tokens, size_t n, zt_err *err) {
    if (n > (size_t)INT32_MAX - w->n) {
        zt_fail(err, "%s: %zu tokens is more than one shard can hold (%d)", w->path, w->n + n, INT32_MAX);
        zt_shard_writer_abort(w);
        return -1;
    }
    if (write_all(w->fd, tokens, n * (size_t)w->width) != 0) {
        zt_fail(err, "%s: cannot write (%s)", w->path, strerror(errno));
        zt_shard_writer_abort(w);
        return -1;
    }
    w->n += n;
    return 0;
}

int zt_shard_writer_append(zt_shard_writer *w, const uint16_t *tokens, size_t n, zt_err *err) {
    if (host_is_le()) return zt_shard_writer_append_le(w, (const uint8_t *)tokens, n, err);
    uint8_t buf[1 << 16];
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; i < n && k < sizeof buf; i++, k += 2) { buf[k] = (uint8_t)tokens[i]; buf[k + 1] = (uint8_t)(tokens[i] >> 8); }
        if (zt_shard_writer_append_le(w, buf, k / 2, err)) return -1;
    }
    return 0;
}

int zt_shard_writer_commit(zt_shard_writer *w, zt_err *err) {
    uint8_t count[4];
    put_le32(count, (uint32_t)w->n);
    int ok = pwrite(w->fd, count, 4, 8) == 4 && fsync(w->fd) == 0;
    int saved = errno;
    if (close(w->fd) != 0 && ok) { ok = 0; saved = errno; }
    w->fd = -1;
    if (ok && rename(w->tmp, w->path) != 0) { ok = 0; saved = errno; }
    if (!ok) {
        zt_fail(err, "%s: cannot write (%s)", w->path, strerror(saved));
        zt_shard_writer_abort(w);
        return -1;
    }
    sync_parent_dir(w->path);
    free(w->tmp);
    free(w->path);
    w->tmp = w->path = NULL;
    return 0;
}

void zt_shard_writer_abort(zt_shard_writer *w) {
    if (w->fd >= 0) close(w->fd);
    if (w->tmp) unlink(w->tmp);
    free(w->tmp);
    free(w->path);
    w->fd = -1;
    w->tmp = w->path = NULL;
}

int zt_shard_write(const char *path, const uint16_t *tokens, size_t n, zt_err *err) {
    zt_shard_writer w;
    if (n > (size_t)INT32_MAX) return zt_fail(err, "%s: %zu tokens is more than one shard can hold (%d)", path, n, INT32_MAX);
    if (zt_shard_writer_open(&w, path, 2, err) || zt_shard_writer_append(&w, tokens, n, err)) return -1;
    return zt_shard_writer_commit(&w, err);
}

/* Opens and validates; returns the fd positioned after the header, or -1. */
static int open_checked(const char *path, size_t *n_tokens, int *width, zt_err *err) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return zt_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        zt_fail(err, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        zt_fail(err, "%s: not a regular file (expected a token shard)", path);
        goto fail;
    }
    size_t size = (size_t)st.st_size;
    if (size == 0) {
        zt_fail(err, "%s: empty file (expected a token shard)", path);
        goto fail;
    }
    uint8_t header[ZT_SHARD_HEADER_BYTES];
    size_t have = size < sizeof header ? size : sizeof header;
    if (read_all(fd, header, have) != 1) {
        zt_fail(err, "%s: read error: %s", path, strerror(errno));
        goto fail;
    }
    uint32_t magic = have < 4 ? 0 : get_le32(header);
    if (have < 4 || (magic != ZT_SHARD_MAGIC && magic != ZT_SHARD_MAGIC_U32)) {
        if (have < 4) zt_fail(err, "%s: not a token shard (%zu bytes, too short for a header)", path, size);
        else
            zt_fail(err, "%s: not a token shard (magic %d, expected %d, or %d for uint32 tokens)", path, (int32_t)magic,
                    ZT_SHARD_MAGIC, ZT_SHARD_MAGIC_U32);
        goto fail;
    }
    if (have < sizeof header) {
        zt_fail(err, "%s: truncated: the header is %d bytes but file has %zu bytes", path, ZT_SHARD_HEADER_BYTES, size);
        goto fail;
    }
    int32_t version = (int32_t)get_le32(header + 4), count = (int32_t)get_le32(header + 8);
    int w = magic == ZT_SHARD_MAGIC_U32 ? 4 : 2, want_version = w == 4 ? ZT_SHARD_VERSION_U32 : ZT_SHARD_VERSION;
    if (version != want_version) {
        zt_fail(err, "%s: unsupported shard version %d (expected %d: %s tokens)", path, version, want_version,
                w == 4 ? "uint32" : "uint16");
        goto fail;
    }
    if (count < 0) {
        zt_fail(err, "%s: bad token count %d in header", path, count);
        goto fail;
    }
    size_t want = ZT_SHARD_HEADER_BYTES + (size_t)w * (size_t)count;
    if (size < want) {
        zt_fail(err, "%s: truncated: header says %d tokens (%zu bytes) but file has %zu bytes", path, count, want, size);
        goto fail;
    }
    if (size > want) {
        zt_fail(err, "%s: header says %d tokens (%zu bytes) but file has %zu bytes (trailing data)", path, count, want, size);
        goto fail;
    }
    *n_tokens = (size_t)count;
    *width = w;
    return fd;
fail:
    close(fd);
    return -1;
}

int zt_shard_read_header(const char *path, size_t *n_tokens, int *width, zt_err *err) {
    size_t n;
    int w;
    int fd = open_checked(path, &n, &w, err);
    if (fd < 0) return -1;
    close(fd);
    *n_tokens = n;
    if (width) *width = w;
    return 0;
}

uint16_t *zt_shard_load(const char *path, size_t *n_tokens, zt_err *err) {
    size_t n;
    int w;
    int fd = open_checked(path, &n, &w, err);
    if (fd < 0) return NULL;
    if (w != 2) {
        zt_fail(err, "%s: holds uint32 tokens (expected a uint16 shard)", path);
        close(fd);
        return NULL;
    }
    uint16_t *tokens = zt_xmalloc((n ? n : 1) * sizeof *tokens);
    int r = read_all(fd, tokens, n * sizeof *tokens);
    if (r != 1) {
        zt_fail(err, "%s: %s", path, r < 0 ? strerror(errno) : "file shrank while reading");
        close(fd);
        free(tokens);
        return NULL;
    }
    close(fd);
    if (!host_is_le()) {
        for (size_t i = 0; i < n; i++) {
            uint8_t *b = (uint8_t *)&tokens[i];
            tokens[i] = (uint16_t)(b[0] | (b[1] << 8));
        }
    }
    *n_tokens = n;
    return tokens;
}
