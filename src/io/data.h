/* data.h — training and validation batches from llm.c token shards (see shard.h for the file
 * format). A dataset is the concatenation of the shards a glob matches (sorted by name), cut into
 * non-overlapping windows of T+1 tokens; training visits the windows in a seeded random order per
 * epoch, addressed by a global sample index, so a global batch is the same sequences whatever the
 * world size and a resumed run continues exactly where it stopped. */
#ifndef ZT_DATA_H
#define ZT_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "util/util.h"

typedef struct zt_dataset {
    uint16_t *tokens;
    size_t n_tokens;
    int n_files;
    char *glob;
    int T;
    size_t n_windows;      /* windows of T+1 tokens starting at multiples of T */
    uint64_t seed;
    long perm_epoch;       /* epoch whose permutation is cached, -1 if none */
    uint32_t *perm;
} zt_dataset;

/* Opens every shard matching glob_pattern; tokens >= vocab_size are an error naming the file and
 * token position. */
int zt_dataset_open(zt_dataset *d, const char *glob_pattern, int T, int vocab_size, uint64_t seed, zt_err *err);
void zt_dataset_close(zt_dataset *d);
/* Sample k of the training stream (k counts sequences over all steps and epochs): T inputs and the
 * T targets shifted by one. */
void zt_dataset_sample(zt_dataset *d, uint64_t k, int *inputs, int *targets);
/* In-order batch starting at token p: inputs tok[p : p+B*T], targets tok[p+1 : p+B*T+1], wrapping
 * around at the end. */
void zt_dataset_sequential(const zt_dataset *d, size_t p, int B, int *inputs, int *targets);

#endif
