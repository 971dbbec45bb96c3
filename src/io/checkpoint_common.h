/* checkpoint_common.h — internal to the checkpoint modules (checkpoint_*.c; the public API is
 * checkpoint.h): CRC32C of chunks, HDF5 attribute helpers and error text, paths and directories of
 * a checkpoint directory, the partition of the saved vectors, and the digests that tie a step
 * directory together (format version 2):
 *   shard digest    CRC32C over a rank file's lo, hi, step, run id, checksum_chunk and the crc32c
 *                   arrays of its three datasets; index.h5's shard_crc32c[r] holds rank r's, so a
 *                   rank file from another save (another run, another step) is refused
 *   metadata digest CRC32C over the index's metadata, trainer state, run id, config and shard
 *                   digests, and with tensor parallelism (version 3) tensor_parallel and tp_shard
 *                   (index.h5's metadata_crc32c): an edited step or data position is refused;
 *                   for the Llama family also the model_config attribute's text
 * The model: attribute `model` names the family (gpt2, llama, qwen2, mistral); GPT-2's shape is the
 * five numbers n_layer ... n_positions, the Llama family's is also `model_config`, the config.json
 * text export writes (hf_config.h), read back with the same parser. */
#ifndef ZT_CHECKPOINT_COMMON_H
#define ZT_CHECKPOINT_COMMON_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "io/checkpoint.h"

#define CK_MAX_CHUNKS 4096                 /* per dataset: keeps the crc32c attribute under 16 KiB */
#define CK_STAGE_ELEMS ((size_t)16 << 20)  /* 64 MiB host staging buffer */
#define CK_PATHCAP 4096
#define CK_WHYCAP 512                      /* HDF5 error reasons */

extern const char *const ck_vec_names[3]; /* "master", "adam_m", "adam_v" */

static inline size_t ck_min(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t ck_max(size_t a, size_t b) { return a > b ? a : b; }

/* ---- CRC32C */
void ck_crc_chunks(const float *data, size_t n, size_t C, uint32_t *crc); /* crc[k] of chunk k */
size_t ck_chunk_elems(size_t n);  /* checksum chunk for an n-element dataset */
/* digest of a shard: its identity and the chunk CRCs of its three datasets (host-independent bytes) */
uint32_t ck_shard_digest(size_t lo, size_t hi, long step, const char *run_id, const size_t chunk[3],
                         uint32_t *const crc[3], const size_t nch[3]);
/* "VECTOR of TENSOR (element I)": where flat element `flat` of vector `which` belongs in table t */
void ck_name_element(const zt_param_table *t, int which, size_t flat, char *buf, size_t cap);
/* digest of an index's metadata (format version 2) */
/* keep_last after a save (checkpoint_dir.c): of the complete step directories of this run's lineage, the
 * newest keep_last stay, and KEEP (the step just saved) and cd->keep_step whatever their age; other
 * runs' steps stay and do not count. Rank 0's; failures only warn. */
void ck_prune(zt_checkpoint_dir *cd, const char *keep, int keep_last);
/* the index's model attributes (see above), written / read (into *SHAPE, whose five numbers are set) */
int ck_put_model(hid_t f, const zt_gpt2_shape *shape);
int ck_get_model(hid_t f, const char *path, zt_gpt2_shape *shape, zt_err *err);
uint32_t ck_meta_digest(const zt_checkpoint_meta *m, const zt_train_state *st, const uint32_t *shard_crc);

/* ---- HDF5: errors are reported by us, with the reason HDF5 gives */
typedef struct { H5E_auto2_t fn; void *data; } ck_h5_quiet;
ck_h5_quiet ck_h5_silence(void);
void ck_h5_restore(ck_h5_quiet q);
/* HDF5's reason for the last failure as one line ("No space left on device" when the OS said so),
 * then clears the error stack */
const char *ck_h5_why(char buf[CK_WHYCAP]);
void ck_h5_close(hid_t *id);
hid_t ck_file_access(void);
int ck_put_i64(hid_t obj, const char *name, long long v);
int ck_put_u64(hid_t obj, const char *name, unsigned long long v);
int ck_put_f64(hid_t obj, const char *name, double v);
int ck_put_str(hid_t obj, const char *name, const char *s);
int ck_put_u32s(hid_t obj, const char *name, const uint32_t *v, size_t n);
int ck_put_u64s(hid_t obj, const char *name, const size_t *v, size_t n);
/* readers: 0, -1 when missing or of the wrong kind, -2 when HDF5 cannot read it (damaged file; the
 * reason is left for ck_h5_why) */
int ck_get_i64(hid_t obj, const char *name, long long *v);
int ck_get_u64(hid_t obj, const char *name, unsigned long long *v);
int ck_get_f64(hid_t obj, const char *name, double *v);
int ck_get_str(hid_t obj, const char *name, char **out); /* malloc'ed */
int ck_get_u32s(hid_t obj, const char *name, uint32_t *v, size_t n);
int ck_get_u64s(hid_t obj, const char *name, size_t *v, size_t n);

/* the compound row of dataset param_table */
typedef struct ck_table_row {
    char name[64];
    int32_t ndim, shape[2];
    uint64_t offset, numel;
    int32_t segment, decay;
} ck_table_row;
hid_t ck_table_row_type(void);

/* ---- files and directories */
int ck_path_join(char *out, size_t cap, const char *a, const char *b, zt_err *err);
int ck_is_dir(const char *p);
int ck_is_file(const char *p);
int ck_fsync_path(const char *path, zt_err *err);
int ck_mkdir_p(const char *path, zt_err *err);
int ck_rmtree(const char *path);
long ck_step_of_name(const char *name); /* step_%08ld exactly -> step; else -1 */
typedef struct { long step; char name[256]; } ck_step_entry;
/* complete step directories of DIR (step_%08ld holding index.h5), sorted by step; returns count */
int ck_list_steps(const char *dir, ck_step_entry **out);
void ck_rank_range(size_t total, size_t shard, int r, size_t *lo, size_t *hi);
void ck_rank_file_name(char *buf, size_t cap, int r);

/* ---- the partition of the saved vectors: tp tensor-parallel ranks' local vectors (tp 1: the whole
 * one), each cut into dp data-parallel shards; rank file w holds shard w / tp of tp rank w % tp */
typedef struct ck_partition {
    int tp, dp;
    zt_param_table *tables;     /* [tp]: tp rank t's part (zt_gpt2_param_table_tp) */
    size_t shard[ZT_MAX_TP];
} ck_partition;
/* world ranks over tp (which must divide them), shard[t] for each tp rank; -1 with err when the shape
 * cannot be split so */
int ck_partition_make(ck_partition *p, const zt_gpt2_shape *shape, int world, int tp, const size_t *shard, zt_err *err);
void ck_partition_free(ck_partition *p);
/* the elements [lo, hi) of its tp rank's local vector that rank file `file` holds */
void ck_partition_range(const ck_partition *p, int file, size_t *lo, size_t *hi);

#endif
