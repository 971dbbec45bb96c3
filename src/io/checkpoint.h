/* checkpoint.h — sharded HDF5 checkpoints: one file per rank holding its contiguous range of the
 * flat fp32 master weights and Adam moments (with per-chunk CRC32C), an index file with the
 * metadata and virtual datasets that present the shards as whole vectors; atomic save, load with
 * resharding to any world size / ZeRO stage, and a verified reader for `export` and `info`.
 *
 * Layout of a checkpoint directory DIR (format_version 1):
 *   DIR/latest                       "step_00000020\n": the newest complete step directory
 *   DIR/step_00000020/rank_00000.h5  rank r's range [lo_r, hi_r) = [r*shard, (r+1)*shard) ∩ [0, total):
 *                                    datasets master, adam_m, adam_v (fp32, 1-D, contiguous), each with
 *                                    attributes crc32c (uint32 per chunk of checksum_chunk elements)
 *                                    and checksum_chunk; file attributes lo, hi, rank, step
 *   DIR/step_00000020/index.h5       attributes format, format_version, step, tokens_seen, world_size,
 *                                    zero_stage, total, shard, adam_t, config, n_layer ... n_positions;
 *                                    group state (trainer state); dataset param_table (compound);
 *                                    virtual datasets master, adam_m, adam_v [total] over the rank files
 *                                    and group params/ with one virtual dataset per tensor (HF shape)
 *   DIR/.tmp_step_*                  a save in progress (or a crashed one): ignored, removed by the next save
 * A step directory is renamed into place only after every rank's file and the index are fsync'ed, and
 * `latest` is replaced atomically after that, so a crash leaves `latest` on the previous checkpoint. */
#ifndef ZT_CHECKPOINT_H
#define ZT_CHECKPOINT_H

#include <stddef.h>

#include "model/gpt2.h"
#include "engine/engine.h"
#include "util/util.h"

#define ZT_CKPT_FORMAT "zerotrain-checkpoint"
#define ZT_CKPT_VERSION 1

/* Trainer state saved with the model states (group "state" of index.h5; every field an attribute).
 * The optimizer step count is not here: it is the engine's (e->adam_t), saved and restored with it. */
typedef struct zt_train_state {
    long step;                     /* optimizer steps completed (the step directory's number) */
    long tokens_seen;
    long data_samples;             /* samples consumed from the training stream */
    unsigned long long rng_state;
    double loss_scale;             /* fp16 dynamic loss scaler (1 when unused) */
    int loss_scale_good_steps;
    int hysteresis_left;
} zt_train_state;

/* What a checkpoint says about itself (filled by load and by the reader). */
typedef struct zt_checkpoint_meta {
    int format_version;
    long step, tokens_seen, adam_t;
    int world_size, zero_stage;    /* of the run that saved it */
    size_t total, shard;
    zt_gpt2_shape shape;
    char *config_text;             /* the saving run's effective config (malloc'ed; meta_free frees it) */
} zt_checkpoint_meta;
void zt_checkpoint_meta_free(zt_checkpoint_meta *m);

/* Collective. Saves the engine's model states and ST as DIR/step_%08ld (st->step), creating DIR
 * when missing, updates DIR/latest, then removes the oldest complete step directories beyond
 * keep_last (0 = keep all; never the new one) and leftover .tmp_* directories. Every rank writes
 * its own file (DIR must be on a file system all ranks share). Returns 0 on every rank, or -1 on
 * every rank with the first failing rank's message in err. */
int zt_checkpoint_save(const char *dir, zt_engine *e, const zt_gpt2_shape *shape, const zt_train_state *st,
                       const char *config_text, int keep_last, zt_err *err);

/* Finds the step directory PATH names: a step directory (holds index.h5; PATH/index.h5 itself is
 * accepted too) or a checkpoint directory (its `latest`; without one, its newest complete step
 * directory). Returns 1 with the directory in step_dir, 0 when PATH does not exist or holds no
 * checkpoint yet (a fresh start for resume: auto), -1 on errors (latest names a missing directory,
 * PATH is not a directory ...). Not collective: every rank may call it. */
int zt_checkpoint_resolve(const char *path, char *step_dir, size_t cap, zt_err *err);

/* Collective. Loads STEP_DIR into the engine, whatever world size and stage saved it: each rank
 * reads only the ranges it now holds (master/m/v of [opt_lo, opt_hi); parameters of [0, total) at
 * stages 0-2, of its shard at stage 3) through index.h5's virtual datasets, verifying the CRC32C
 * of every chunk it reads. Sets e->adam_t, fills ST and META (either may be NULL; meta's
 * config_text must be freed with zt_checkpoint_meta_free). Errors name the file: not a zerotrain
 * checkpoint, other format version, a different model (tensor names/shapes/offsets), missing
 * shard, truncated or unreadable file, checksum mismatch. Returns 0, or -1 on every rank. */
int zt_checkpoint_load(const char *step_dir, zt_engine *e, zt_train_state *st, zt_checkpoint_meta *meta,
                       zt_err *err);

/* ---- reading a checkpoint outside training (export, info): one process, bounded memory ---- */

typedef struct zt_checkpoint_reader zt_checkpoint_reader;
typedef enum { ZT_CKPT_MASTER = 0, ZT_CKPT_ADAM_M = 1, ZT_CKPT_ADAM_V = 2 } zt_ckpt_vector;

/* Opens STEP_DIR/index.h5 and validates it (format, version, parameter table against the saved
 * model shape, every rank file present). NULL on failure. */
zt_checkpoint_reader *zt_checkpoint_open(const char *step_dir, zt_err *err);
void zt_checkpoint_close(zt_checkpoint_reader *r);
const zt_checkpoint_meta *zt_checkpoint_reader_meta(const zt_checkpoint_reader *r);
const zt_param_table *zt_checkpoint_reader_table(const zt_checkpoint_reader *r);
/* the train state saved in group "state" */
void zt_checkpoint_reader_state(const zt_checkpoint_reader *r, zt_train_state *st);
/* Reads flat elements [offset, offset + n) of vector V into host OUT, checksum-verified. */
int zt_checkpoint_read(zt_checkpoint_reader *r, zt_ckpt_vector v, size_t offset, size_t n, float *out, zt_err *err);
/* Bytes of rank file `rank` (0 if unreadable). */
size_t zt_checkpoint_file_bytes(const zt_checkpoint_reader *r, int rank);
/* Reads every rank file in full and checks every chunk's CRC32C (and each file's lo/hi/step).
 * Returns 0, or -1 with the first problem in err. */
int zt_checkpoint_verify(zt_checkpoint_reader *r, zt_err *err);

/* CRC32C (Castagnoli) of n bytes, continuing from crc (0 to start). Exposed for tests. */
uint32_t zt_crc32c(uint32_t crc, const void *data, size_t n);

#endif
