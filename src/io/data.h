/* data.h — training and validation batches from llm.c token shards (see shard.h for the file
 * format). A dataset is the concatenation of the shards a glob matches (sorted by name), cut into
 * non-overlapping windows of T+1 tokens; training visits the windows in a seeded random order per
 * epoch, addressed by a global sample index, so a global batch is the same sequences whatever the
 * world size and a resumed run continues exactly where it stopped.
 *
 * Shards of uint16 and uint32 tokens (shard.h) may be mixed. Memory: the tokens stay in the files. Opening checks every shard's header and size; a window is
 * read (pread) when it is used and its tokens are checked against the vocabulary then, so a rank
 * holds only the batch it trains on and reads only the windows it uses, whatever the corpus size.
 * What grows with the corpus is the window order, 4 bytes per window (2 MiB per 1 GiB of tokens
 * at seq_len 1024), and the page cache, which the kernel reclaims. */
#ifndef ZT_DATA_H
#define ZT_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "util/util.h"

typedef struct zt_dataset {
    size_t n_tokens;
    int n_files;
    char **paths;          /* [n_files] */
    size_t *first;         /* [n_files + 1]: index of each shard's first token in the concatenation */
    uint8_t *width;        /* [n_files]: bytes a token in each shard (2: uint16, 4: uint32) */
    int fd, fd_file;       /* the shard open for reading now (fd_file -1: none) */
    int advice;            /* the posix_fadvise given for fd (random or sequential access), -1 none */
    uint32_t *scratch;     /* tokens of the last read */
    uint8_t *raw;          /* their bytes as read */
    size_t scratch_cap;
    int vocab_size;
    char *glob;
    int T;
    size_t n_windows;      /* windows of T+1 tokens starting at multiples of T */
    uint64_t seed;
    long perm_epoch;       /* epoch whose permutation is cached, -1 if none */
    uint32_t *perm;
} zt_dataset;

/* Opens every shard matching glob_pattern and checks its header and size (errors name the file:
 * shard.h). Reads no tokens. */
int zt_dataset_open(zt_dataset *d, const char *glob_pattern, int T, int vocab_size, uint64_t seed, zt_err *err);
void zt_dataset_close(zt_dataset *d);
/* Sample k of the training stream (k counts sequences over all steps and epochs): T inputs and the
 * T targets shifted by one. -1 with err naming the file and position when the read fails (a file
 * shrunk or unreadable since open) or a token is outside the vocabulary. */
int zt_dataset_sample(zt_dataset *d, uint64_t k, int *inputs, int *targets, zt_err *err);
/* In-order batch starting at token p: inputs tok[p : p+B*T], targets tok[p+1 : p+B*T+1], wrapping
 * around at the end. Errors as zt_dataset_sample's. */
int zt_dataset_sequential(zt_dataset *d, size_t p, int B, int *inputs, int *targets, zt_err *err);

#endif
