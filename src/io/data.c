/* data.c — see data.h */
#include "io/data.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/shard.h"

int zt_dataset_open(zt_dataset *d, const char *pattern, int T, int vocab_size, uint64_t seed, zt_err *err) {
    memset(d, 0, sizeof *d);
    d->perm_epoch = -1;
    d->fd = d->fd_file = -1;
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc != 0) {
        if (rc == GLOB_NOMATCH)
            return zt_fail(err, "%s: no token shard matches (make shards from text with `zerotrain tokenize TEXT -o PREFIX`)",
                           pattern);
        return zt_fail(err, "%s: glob failed", pattern);
    }
    d->paths = zt_xcalloc(g.gl_pathc, sizeof *d->paths);
    d->first = zt_xcalloc(g.gl_pathc + 1, sizeof *d->first);
    d->width = zt_xcalloc(g.gl_pathc, sizeof *d->width);
    for (size_t f = 0; f < g.gl_pathc; f++) {
        size_t n = 0;
        int width = 2;
        if (zt_shard_read_header(g.gl_pathv[f], &n, &width, err)) goto fail;
        d->width[f] = (uint8_t)width;
        d->paths[f] = zt_xstrdup(g.gl_pathv[f]);
        d->n_files++;
        d->n_tokens += n;
        d->first[f + 1] = d->n_tokens;
    }
    globfree(&g);
    if (d->n_tokens < (size_t)T + 1) {
        zt_fail(err, "%s: %zu tokens, fewer than one sequence of seq_len %d + 1", pattern, d->n_tokens, T);
        zt_dataset_close(d);
        return -1;
    }
    d->glob = zt_xstrdup(pattern);
    d->vocab_size = vocab_size;
    d->T = T;
    d->n_windows = (d->n_tokens - 1) / (size_t)T;
    d->seed = seed;
    return 0;
fail:
    globfree(&g);
    zt_dataset_close(d);
    return -1;
}

void zt_dataset_close(zt_dataset *d) {
    if (d->paths && d->fd_file >= 0) close(d->fd); /* a dataset never opened is all zeros: fd 0 is not its */
    for (int f = 0; f < d->n_files; f++) free(d->paths[f]);
    free(d->paths);
    free(d->first);
    free(d->width);
    free(d->scratch);
    free(d->raw);
    free(d->perm);
    free(d->glob);
    memset(d, 0, sizeof *d);
    d->fd = -1;
}

/* the shard holding token `pos` of the concatenation (binary search over first[]) */
static int shard_of(const zt_dataset *d, size_t pos) {
    int lo = 0, hi = d->n_files - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->first[mid] <= pos) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* n tokens of shard f from its token `at` into out, checked against the vocabulary. `advice` tells the
 * kernel how the file is read: POSIX_FADV_RANDOM for training's shuffled windows (no read-ahead
 * around them: a rank reads the pages of its windows only), POSIX_FADV_SEQUENTIAL for in-order
 * batches (a larger read-ahead). */
static int read_from_shard(zt_dataset *d, int f, size_t at, size_t n, uint32_t *out, int advice, zt_err *err) {
    const char *path = d->paths[f];
    if (d->fd_file != f) {
        if (d->fd_file >= 0) close(d->fd);
        d->fd_file = -1;
        d->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (d->fd < 0) return zt_fail(err, "%s: cannot open: %s", path, strerror(errno));
        d->fd_file = f;
        d->advice = -1;
    }
    if (d->advice != advice) {
        posix_fadvise(d->fd, 0, 0, advice); /* only advice: the reads are correct without it */
        d->advice = advice;
    }
    size_t w = d->width[f], want = n * w, got = 0;
    off_t offset = (off_t)(ZT_SHARD_HEADER_BYTES + at * w);
    uint8_t *raw = d->raw;
    while (got < want) {
        ssize_t r = pread(d->fd, (char *)raw + got, want - got, offset + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return zt_fail(err, "%s: read error at byte %lld: %s", path, (long long)(offset + (off_t)got), strerror(errno));
        if (r == 0) {
            struct stat st;
            long long size = fstat(d->fd, &st) ? -1 : (long long)st.st_size;
            return zt_fail(err, "%s: truncated since it was opened: %lld bytes now, tokens %zu..%zu are bytes %lld..%lld",
                           path, size, at, at + n - 1, (long long)offset, (long long)(offset + (off_t)want) - 1);
        }
        got += (size_t)r;
    }
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = raw + i * w; /* little-endian on disk */
        out[i] = w == 4 ? (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24)
                        : (uint32_t)(b[0] | (b[1] << 8));
        if (out[i] >= (uint32_t)d->vocab_size)
            return zt_fail(err, "%s: token %zu is %u, outside the model's vocabulary (vocab_size %d)", path, at + i,
                           out[i], d->vocab_size);
    }
    return 0;
}

/* tokens [pos, pos + n) of the concatenation, wrapping around at its end, into d->scratch */
static int read_tokens(zt_dataset *d, size_t pos, size_t n, int advice, zt_err *err) {
    if (n > d->scratch_cap) {
        d->scratch = zt_xrealloc(d->scratch, n * sizeof *d->scratch);
        d->raw = zt_xrealloc(d->raw, n * sizeof *d->scratch);
        d->scratch_cap = n;
    }
    for (size_t done = 0; done < n;) {
        pos %= d->n_tokens;
        int f = shard_of(d, pos);
        size_t k = d->first[f + 1] - pos;
        if (k > n - done) k = n - done;
        if (read_from_shard(d, f, pos - d->first[f], k, d->scratch + done, advice, err)) return -1;
        done += k, pos += k;
    }
    return 0;
}

/* Fisher-Yates permutation of the windows, seeded by (seed, epoch) */
static void make_perm(zt_dataset *d, long epoch) {
    if (!d->perm) d->perm = zt_xmalloc(d->n_windows * sizeof *d->perm);
    for (size_t i = 0; i < d->n_windows; i++) d->perm[i] = (uint32_t)i;
    zt_rng rng;
    zt_rng_seed(&rng, d->seed * 0x9e3779b97f4a7c15ull + (uint64_t)epoch + 1);
    for (size_t i = d->n_windows - 1; i > 0; i--) {
        size_t j = (size_t)(zt_rng_u64(&rng) % (i + 1));
        uint32_t t = d->perm[i];
        d->perm[i] = d->perm[j];
        d->perm[j] = t;
    }
    d->perm_epoch = epoch;
}

/* inputs and targets of n positions from the n + 1 tokens in d->scratch */
static void split_inputs_targets(const zt_dataset *d, size_t n, int *inputs, int *targets) {
    for (size_t i = 0; i < n; i++) {
        inputs[i] = (int)d->scratch[i];
        targets[i] = (int)d->scratch[i + 1];
    }
}

int zt_dataset_sample(zt_dataset *d, uint64_t k, int *inputs, int *targets, zt_err *err) {
    long epoch = (long)(k / d->n_windows);
    if (epoch != d->perm_epoch) make_perm(d, epoch);
    size_t start = (size_t)d->perm[k % d->n_windows] * (size_t)d->T;
    if (read_tokens(d, start, (size_t)d->T + 1, POSIX_FADV_RANDOM, err)) return -1;
    split_inputs_targets(d, (size_t)d->T, inputs, targets);
    return 0;
}

int zt_dataset_sequential(zt_dataset *d, size_t p, int B, int *inputs, int *targets, zt_err *err) {
    size_t n = (size_t)B * d->T;
    if (read_tokens(d, p, n + 1, POSIX_FADV_SEQUENTIAL, err)) return -1;
    split_inputs_targets(d, n, inputs, targets);
    return 0;
}
