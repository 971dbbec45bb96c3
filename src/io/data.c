/* data.c — see data.h */
#include "io/data.h"

#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "io/shard.h"

int zt_dataset_open(zt_dataset *d, const char *pattern, int T, int vocab_size, uint64_t seed, zt_err *err) {
    memset(d, 0, sizeof *d);
    d->perm_epoch = -1;
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc != 0) {
        if (rc == GLOB_NOMATCH) return zt_fail(err, "%s: no token shard matches", pattern);
        return zt_fail(err, "%s: glob failed", pattern);
    }
    for (size_t f = 0; f < g.gl_pathc; f++) {
        size_t n = 0;
        uint16_t *tok = zt_shard_load(g.gl_pathv[f], &n, err);
        if (!tok) goto fail;
        for (size_t i = 0; i < n; i++)
            if (tok[i] >= vocab_size) {
                zt_fail(err, "%s: token %zu is %u, outside the model's vocabulary (vocab_size %d)", g.gl_pathv[f], i,
                        tok[i], vocab_size);
                free(tok);
                goto fail;
            }
        uint16_t *all = realloc(d->tokens, (d->n_tokens + n) * sizeof *all);
        if (!all) { free(tok); zt_fail(err, "out of host memory loading %s", g.gl_pathv[f]); goto fail; }
        memcpy(all + d->n_tokens, tok, n * sizeof *all);
        d->tokens = all;
        d->n_tokens += n;
        free(tok);
        d->n_files++;
    }
    globfree(&g);
    if (d->n_tokens < (size_t)T + 1) {
        zt_fail(err, "%s: %zu tokens, fewer than one sequence of seq_len %d + 1", pattern, d->n_tokens, T);
        zt_dataset_close(d);
        return -1;
    }
    d->glob = zt_xstrdup(pattern);
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
    free(d->tokens);
    free(d->perm);
    free(d->glob);
    memset(d, 0, sizeof *d);
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

void zt_dataset_sample(zt_dataset *d, uint64_t k, int *inputs, int *targets) {
    long epoch = (long)(k / d->n_windows);
    if (epoch != d->perm_epoch) make_perm(d, epoch);
    size_t start = (size_t)d->perm[k % d->n_windows] * (size_t)d->T;
    for (int t = 0; t < d->T; t++) {
        inputs[t] = d->tokens[start + t];
        targets[t] = d->tokens[start + t + 1];
    }
}

void zt_dataset_sequential(const zt_dataset *d, size_t p, int B, int *inputs, int *targets) {
    size_t n = (size_t)B * d->T;
    for (size_t i = 0; i < n; i++) {
        inputs[i] = d->tokens[(p + i) % d->n_tokens];
        targets[i] = d->tokens[(p + i + 1) % d->n_tokens];
    }
}
