/* checkpoint.h — sharded HDF5 checkpoints: one file per rank holding its contiguous range of the
 * flat fp32 master weights and Adam moments (with per-chunk CRC32C), an index file with the
 * metadata and virtual datasets that present the shards as whole vectors; atomic save, load with
 * resharding to any world size / ZeRO stage, and a verified reader for `export` and `info`.
 * Modules: checkpoint_dir.c (the directory lock, run id, resolving `latest`), checkpoint_save.c,
 * checkpoint_read.c (reader and verification), checkpoint_load.c (into the engine),
 * checkpoint_export.c (the master weights as a Hugging Face directory: export, and the 16-bit
 * save beside a checkpoint), checkpoint_manifest.c (the step's manifest), checkpoint_common.c (CRC32C, digests, HDF5 and file helpers, the partition of
 * the saved vectors over data- and tensor-parallel ranks).
 *
 * Layout of a checkpoint directory DIR (format_version 2; 3 with tensor parallelism, below):
 *   DIR/.lock                        held (flock) by the rank 0 of the run that owns DIR; says which
 *   DIR/latest                       "step_00000020\n": the newest complete step directory
 *   DIR/step_00000020/rank_00000.h5  rank r's range [lo_r, hi_r) = [r*shard, (r+1)*shard) ∩ [0, total):
 *                                    datasets master, adam_m, adam_v (fp32, 1-D, contiguous), each with
 *                                    attributes crc32c (uint32 per chunk of checksum_chunk elements)
 *                                    and checksum_chunk; file attributes lo, hi, rank, step, run_id
 *   DIR/step_00000020/index.h5       attributes format, format_version, step, tokens_seen, world_size,
 *                                    zero_stage, total, shard, adam_t, config, n_layer ... n_positions,
 *                                    run_id, shard_crc32c [world_size] (each rank file's digest: ties
 *                                    the shards to this index), metadata_crc32c (covers all of the
 *                                    metadata and group state; see checkpoint_common.h), lineage
 *                                    (below);
 *                                    group state (trainer state); dataset param_table (compound);
 *                                    virtual datasets master, adam_m, adam_v [total] over the rank files
 *                                    and group params/ with one virtual dataset per tensor (HF shape)
 *   DIR/step_00000020/manifest       every file's size and CRC32C (index.h5 whole, each rank file outside
 *                                    its raw data), its own CRC32C last: checked before HDF5 opens any
 *                                    (checkpoint_manifest.c; absent in steps saved before it: a warning)
 *   DIR/step_00000020/hf/            with stage3_gather_16bit_weights_on_model_save: the 16-bit Hugging
 *                                    Face GPT-2 directory of this step (config.json, model.safetensors,
 *                                    tokenizer), written after the checkpoint is complete; not part of it
 *   DIR/.tmp_step_*.RUNID            a save in progress (or a crashed one): ignored, removed by the next
 *                                    run that opens DIR, or by the same run when that save fails
 *   DIR/.tmp_pruned_step_*.RUNID     a step directory keep_last is removing (renamed first, so a run
 *                                    killed meanwhile leaves no torn step directory): the same
 * Tensor parallelism (tp > 1 ranks a group, format_version 3): world rank w = d * tp + t (data-parallel rank
 * d, tensor-parallel rank t) writes rank_w.h5 with its engine's range [lo, hi) of rank t's LOCAL vector
 * (zt_gpt2_param_table_tp's layout, cut by that rank's data-parallel shard) and attributes tp_rank, tp_size.
 * The index keeps presenting WHOLE tensors: param_table is the whole model's, and master/adam_m/adam_v
 * [total] and params/NAME are in the whole layout, mapped (strided hyperslabs for column-split tensors)
 * into the rank files of every tp rank that holds a part (held whole: tp rank 0's files). It adds the
 * attributes tensor_parallel (tp) and tp_shard [tp] (each tp rank's data-parallel shard; shard is
 * tp_shard[0]), and virtual datasets tp_local/T/master, adam_m, adam_v: tp rank T's local vectors, which
 * the reader reads. world_size counts every rank. Whole tensors that every tp rank holds (split WHOLE)
 * are checked bit-identical across the tp group at save (a divergence fails the save, naming the tensor).
 * A checkpoint saved at any tp size loads at any tp size, world size and stage.
 * lineage: the run ids, space-separated, of the run that saved the step and of the runs whose checkpoints
 * it descends from (each resumed from the one after it), newest first, at most ZT_CKPT_LINEAGE_MAX: what
 * keep_last may prune (zt_checkpoint_dir). Not in metadata_crc32c, so that readers older than it still
 * read the index; a reader checks that it starts with run_id and holds run ids only (else it warns and
 * takes run_id alone, as for an index saved before lineages, which only prunes less).
 * Version 1 (no run id, shard digests or metadata checksum) loads into training only with
 * allow_unverified (checkpoint.allow_unverified), with a warning; info and export read it with the warning.
 * A step directory is renamed into place only after every rank's file and the index are fsync'ed, and
 * `latest` is replaced atomically after that, so a crash leaves `latest` on the previous checkpoint. */
#ifndef ZT_CHECKPOINT_H
#define ZT_CHECKPOINT_H

#include <stddef.h>
#include <time.h>

#include "model/gpt2.h"
#include "comm/comm.h"
#include "io/state_view.h"
#include "util/util.h"

#define ZT_CKPT_FORMAT "zerotrain-checkpoint"
#define ZT_CKPT_VERSION 2    /* without tensor parallelism */
#define ZT_CKPT_VERSION_TP 3 /* saved with tensor parallelism: older readers refuse it rather than misread it */
/* run ids a lineage keeps: a requeue chain longer than this forgets its oldest runs, so the index
 * stays small however long the chain; their steps were pruned long before unless keep_last is
 * about as large (prune says so when it leaves such steps) */
#define ZT_CKPT_LINEAGE_MAX 64

/* Trainer state saved with the model states (group "state" of index.h5; every field an attribute).
 * The optimizer step count is not here: it is the engine's (the state view's steps), saved and restored with it. */
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
    char run_id[24];               /* of the run that saved it ("" in version 1) */
    int tensor_parallel;           /* its tensor-parallel size (1: none; world_size counts every rank) */
    size_t tp_shard[ZT_MAX_TP];    /* each tensor-parallel rank's data-parallel shard (tp_shard[0] = shard) */
    /* the lineage attribute: lineage[0] is run_id, then the runs it descends from, newest first
     * (a checkpoint saved without one: run_id alone) */
    char lineage[ZT_CKPT_LINEAGE_MAX][24];
    int n_lineage;
} zt_checkpoint_meta;
void zt_checkpoint_meta_free(zt_checkpoint_meta *m);

/* A checkpoint directory owned by this run: one run at a time may save into a directory. */
typedef struct zt_checkpoint_dir {
    char path[4096];
    char run_id[24];   /* 16 hex digits, the same on every rank: names the run's saves */
    int lock_fd;       /* rank 0: the open .lock file whose flock the run holds; -1 elsewhere */
    int dir_fd;        /* rank 0: the directory, flock'ed first where the file system can; -1 otherwise */
    time_t started;    /* when the run took the directory (its holder record's start time) */
    /* keep_last (checkpoint_save.c, prune) counts and removes the steps of this run's lineage: its own
     * and those saved by a run in `lineage`, the lineage of the checkpoint it resumed from (train.c),
     * which its saves record after its own run id. Steps of other runs are never removed, nor counted. */
    char lineage[ZT_CKPT_LINEAGE_MAX][24];
    int n_lineage;           /* 0: a fresh start */
    int prune_any;           /* checkpoint.overwrite: every step directory (the user said so) */
    long keep_step;          /* never pruned: the newest good checkpoint (one the step after it passed the
                                divergence guard; train.c); 0 = none */
    int told_kept_others;    /* rank 0: prune has said once that other runs' steps stay */
} zt_checkpoint_dir;

/* Collective. Creates PATH when missing, takes its lock on rank 0 for as long as the run lives
 * (the kernel drops it when the process dies, so a crashed run never leaves it stuck), records
 * host, pid, run id and start time in PATH/.lock, removes .tmp_* leftovers of dead runs, and shares
 * a fresh run id with every rank. A directory locked by another run is refused, naming that run.
 * Returns 0, or -1 on every rank with the message in err. */
int zt_checkpoint_dir_open(zt_checkpoint_dir *d, const char *path, zt_comm *comm, zt_err *err);
void zt_checkpoint_dir_close(zt_checkpoint_dir *d);
/* Rank 0 (others return 0): D/.lock must still be the file this run locked, with its record.
 * Overwritten, deleted or replaced while this run holds the directory's lock: restored (warning).
 * Replaced where directories cannot be locked, by a file another process holds locked (another run
 * got in): -1 with the new holder in err. zt_checkpoint_save calls it before each save. */
int zt_checkpoint_dir_check(zt_checkpoint_dir *d, zt_err *err);

/* Rank 0: the divergence guard's verdict on this run's unconfirmed checkpoints (saved after the
 * newest good one, train.c): each D/step_N of STEPS becomes D/unconfirmed_step_N (kept for a look,
 * never resumed from, listed or pruned), and `latest` names step GOOD (GOOD 0: `latest` is removed).
 * 0, or -1 with the reason in err. */
int zt_checkpoint_set_aside(const zt_checkpoint_dir *cd, const long *steps, int n, long good, zt_err *err);

/* Collective over COMM, every rank of the job (the engine's comm is its data-parallel group; with
 * tensor parallelism, world rank w must be data-parallel rank w / tp, tensor-parallel rank w % tp).
 * Saves the model states of SV (the engine's state view, zt_engine_state_view) and ST as D/step_%08ld (st->step), updates D/latest,
 * then prunes: of the complete step directories of this run's lineage (zt_checkpoint_dir) the newest
 * keep_last stay (0 = keep all), and the new one and d->keep_step stay whatever their age; another
 * run's steps stay too (said once, as an info line, when more than keep_last remain). A non-finite value in
 * the state fails the save like a write error (nothing published, `latest` unmoved). Every rank
 * writes its own file (D must be on a file system
 * all ranks share). The ranks agree on the outcome three times: after rank 0's temporary directory,
 * after the rank files (with their digests), and after rank 0's index, rename and latest (each done
 * only when the one before succeeded): returns 0 on every rank, or -1 on every rank
 * with the first failing rank's message in err, `latest` left on the previous checkpoint. Starts
 * with zt_checkpoint_dir_check. */
int zt_checkpoint_save(zt_checkpoint_dir *d, zt_state_view *sv, zt_comm *comm, const zt_gpt2_shape *shape,
                       const zt_train_state *st, const char *config_text, int keep_last, zt_err *err);

/* Finds the step directory PATH names: a step directory (holds index.h5; PATH/index.h5 itself is
 * accepted too) or a checkpoint directory (its `latest`, which must name a step_NNNNNNNN
 * directory; without one, its newest complete step directory). Returns 1 with the directory in
 * step_dir, 0 when PATH does not exist or holds no checkpoint yet (a fresh start for resume:
 * auto), -1 on errors (latest names a missing directory, PATH is not a directory ...). One
 * process; zt_checkpoint_resolve_shared is the collective form (rank 0 resolves for every rank, so
 * ranks that see different file system caches still agree). */
int zt_checkpoint_resolve(const char *path, char *step_dir, size_t cap, zt_err *err);
int zt_checkpoint_resolve_shared(zt_comm *comm, const char *path, char *step_dir, size_t cap, zt_err *err);
/* zt_checkpoint_resolve_shared for resume: where PATH is a checkpoint directory and the step it names
 * fails its manifest (a damaged file: checkpoint_manifest.c), the newest older step directory whose
 * files verify, with one warning naming the damaged one; -1 when none does. A step directory named
 * directly is taken as it is (its load reports the damage). */
int zt_checkpoint_resolve_verified_shared(zt_comm *comm, const char *path, char *step_dir, size_t cap, zt_err *err);

/* How long reading the checkpoint PATH names (zt_checkpoint_resolve's step directory, into step_dir;
 * "" when none) may take, in seconds: ZT_CKPT_READ_FLOOR plus its files' bytes at ZT_CKPT_READ_RATE,
 * a rate one reader on a busy shared file system still makes. A healthy resume or `zerotrain info`
 * stays far inside it; one stuck on its file system passes it. ZEROTRAIN_LOAD_TIMEOUT=S sets S
 * seconds instead (0: unbounded). `why` gets where the bound comes from, for the line ("1.50 GiB at
 * 20 MB/s + 120 s floor; ZEROTRAIN_LOAD_TIMEOUT sets it"). Reads `latest` and directory entries only. */
#define ZT_CKPT_READ_RATE 20e6   /* bytes/s */
#define ZT_CKPT_READ_FLOOR 120.0 /* seconds: start-up, HDF5's opens, a cold metadata server */
double zt_checkpoint_read_bound(const char *path, char *step_dir, size_t cap, char *why, size_t why_cap);

/* Collective over COMM (every rank of the job). Loads STEP_DIR into SV (the engine's state view), whatever world size,
 * stage and tensor-parallel size saved it: each rank reads only the ranges it now holds (master/m/v of
 * [opt_lo, opt_hi); parameters of [0, total) at stages 0-2, of its shard at stage 3) of its local vector
 * (the engine's table: a tensor-parallel part, or the whole model), verifying the CRC32C of every chunk
 * it reads: straight from the saved tp rank's files when the tensor-parallel size is the same, else
 * from the whole rows its tensors' parts come from. SHAPE is the current model's (the saved whole
 * table must be its whole table). Sets the view's step count, fills ST and META (either may be NULL;
 * meta's config_text must be freed with zt_checkpoint_meta_free). Errors name the file: not a
 * zerotrain checkpoint, other format version, a different model (tensor names/shapes/offsets),
 * missing shard, truncated or unreadable file, checksum mismatch. Returns 0, or -1 on every rank. */
int zt_checkpoint_load(const char *step_dir, zt_state_view *sv, const zt_gpt2_shape *shape, zt_comm *comm,
                       zt_train_state *st, zt_checkpoint_meta *meta, int allow_unverified, zt_err *err);

/* ---- reading a checkpoint outside training (export, info): one process, bounded memory ---- */

typedef struct zt_checkpoint_reader zt_checkpoint_reader;
typedef enum { ZT_CKPT_MASTER = 0, ZT_CKPT_ADAM_M = 1, ZT_CKPT_ADAM_V = 2 } zt_ckpt_vector;

/* Opens STEP_DIR/index.h5 and validates it (its manifest record first, then format, version,
 * parameter table against the saved model shape, every rank file present). Each rank file is checked
 * against the manifest before HDF5 opens it, and every value read must be finite. NULL on failure. */
zt_checkpoint_reader *zt_checkpoint_open(const char *step_dir, zt_err *err);
void zt_checkpoint_close(zt_checkpoint_reader *r);
const zt_checkpoint_meta *zt_checkpoint_reader_meta(const zt_checkpoint_reader *r);
const zt_param_table *zt_checkpoint_reader_table(const zt_checkpoint_reader *r);
/* the train state saved in group "state" */
void zt_checkpoint_reader_state(const zt_checkpoint_reader *r, zt_train_state *st);
/* Reads flat elements [offset, offset + n) of vector V, in the whole model's layout (a tensor-parallel
 * checkpoint's tensors assembled from every tp rank's files), into host OUT, checksum-verified. */
int zt_checkpoint_read(zt_checkpoint_reader *r, zt_ckpt_vector v, size_t offset, size_t n, float *out, zt_err *err);
/* Bytes of rank file `rank` (world rank; 0 if unreadable). */
size_t zt_checkpoint_file_bytes(const zt_checkpoint_reader *r, int rank);
/* Reads every rank file in full and checks every chunk's CRC32C (and each file's lo/hi/step, run
 * id and digest against the index).
 * Returns 0, or -1 with the first problem in err. */
int zt_checkpoint_verify(zt_checkpoint_reader *r, zt_err *err);

/* ---- the model as a Hugging Face GPT-2 directory (checkpoint_export.c) ---- */

/* Writes R's master weights into OUT (created when missing) as a Hugging Face GPT-2 directory:
 * model.safetensors in DTYPE ("F32", "BF16" or "F16", rounded to nearest even), config.json (its
 * torch_dtype says which), generation_config.json (zt_hf_save), then the tokenizer from VOCAB_DIR
 * (zt_hf_save_tokenizer). One tensor at a time: memory stays bounded by the largest tensor.
 * Returns 0 (WHY_NOT set when the tokenizer could not be written: the weights are), or -1 with ERR. */
int zt_checkpoint_export_hf(zt_checkpoint_reader *r, const char *out, const char *dtype, const char *vocab_dir,
                            zt_err *why_not, zt_err *err);

/* The 16-bit model saved beside a checkpoint: D/step_N/hf */
#define ZT_CKPT_HF_DIR "hf"

/* Collective; after zt_checkpoint_save of STEP has succeeded on every rank. The 16-bit save of
 * zero_optimization.stage3_gather_16bit_weights_on_model_save: rank 0 reads D/step_%08ld back,
 * tensor by tensor, and writes zt_checkpoint_export_hf's directory in DTYPE into
 * D/step_%08ld/.hf.tmp, renamed to D/step_%08ld/hf once complete (and removed on failure, so an hf
 * directory is always whole). The checkpoint files are only read: a failed export leaves the
 * checkpoint (and `latest`) complete and resumable. Returns 0 on every rank, or -1 on every rank
 * with rank 0's message in err. */
int zt_checkpoint_export_16bit(const zt_checkpoint_dir *d, long step, const char *dtype, const char *vocab_dir,
                               zt_comm *comm, zt_err *err);

/* the checksums' CRC32C (zt_crc32c) is util/crc32c.h's */
#include "util/crc32c.h"

#endif
