/* checkpoint_internal_read.h — the reader's internals, shared by checkpoint_read.c (which owns
 * them) and checkpoint_load.c (which reads ranges into the engine). */
#ifndef ZT_CHECKPOINT_INTERNAL_READ_H
#define ZT_CHECKPOINT_INTERNAL_READ_H

#include "io/checkpoint_common.h"
#include "io/checkpoint_manifest.h"

typedef struct ck_src_info {
    int loaded;
    size_t lo, hi;
    size_t chunk[3];
    uint32_t *crc[3];
} ck_src_info;

struct zt_checkpoint_reader {
    char dir[CK_PATHCAP - 64]; /* room for "/rank_NNNNN.h5" in CK_PATHCAP */
    char index_path[CK_PATHCAP];
    hid_t index;
    hid_t vds[ZT_MAX_TP][3];    /* tp rank t's local vectors (tp 1: the whole ones, master/adam_m/adam_v) */
    zt_checkpoint_meta meta;
    zt_train_state state;
    zt_param_table table;       /* the whole model's */
    ck_partition part;          /* the saved vectors' partition (tp ranks' tables, shards) */
    float *rows, *part_rows;    /* tensor parallelism: whole rows assembled from the tp ranks' rows */
    ck_src_info *src;           /* [meta.world_size] */
    uint32_t *shard_crc;        /* [meta.world_size] the index's shard digests (version 2) */
    ck_file_record *files;      /* [n_files] the manifest's records of the rank files (NULL: saved before manifests) */
    int n_files;
    const zt_backend *stage_be; /* allocator of stage (NULL: malloc) */
    float *stage;
    size_t stage_cap;           /* elements */
    int allow_unverified;       /* format version 1 opens (with a warning) instead of being refused */
};

/* where verified data goes: elements of [a, b) are either read straight into direct (host memory;
 * direct[0] is element a), or handed to sink in pieces of at most the staging size */
typedef int (*ck_sink_fn)(void *ctx, size_t global_off, const float *host, size_t n);
typedef struct { float *direct; ck_sink_fn sink; void *ctx; } ck_target;

/* opens an HDF5 file read-only; MISSING is the message (with the path as %s) when it does not exist */
hid_t ck_open_h5(const char *path, zt_err *err, const char *missing);
/* opens and validates STEP_DIR; staging buffers come from stage_be->host_alloc (NULL: malloc);
 * format version 1 (nothing ties its metadata or shards together) is refused unless
 * allow_unverified */
zt_checkpoint_reader *ck_reader_open(const char *step_dir, const zt_backend *stage_be, int allow_unverified,
                                     zt_err *err);
/* Reads elements [a, b) of vector v of tp rank tp_rank's local vector (tp 1: the whole vector),
 * verifying the CRC of every chunk it touches. Whole chunks inside [a, b) go straight into t->direct
 * when there is one; the rest is staged. */
int ck_read_range(zt_checkpoint_reader *r, int tp_rank, int v, size_t a, size_t b, const ck_target *t, zt_err *err);
/* Reads elements [a, b) of vector v in the whole model's layout into out (tensor parallelism: each
 * tensor's rows assembled from every tp rank's rows, a bounded number of rows at a time). */
int ck_read_whole(zt_checkpoint_reader *r, int v, size_t a, size_t b, float *out, zt_err *err);
/* hands host elements [off, off + n) of the range that starts at a to t */
int ck_deliver(const ck_target *t, size_t a, size_t off, const float *host, size_t n);
/* rows of whole tensors the tensor-parallel paths assemble at a time: at most this many elements */
#define CK_ROWS_ELEMS ((size_t)1 << 20)

#endif
