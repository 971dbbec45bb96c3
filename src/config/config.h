/* config.h — the run configuration: a YAML (or DeepSpeed JSON) file read with libyaml, keys named
 * after DeepSpeed's, strict validation with FILE:LINE:COL errors and near-miss suggestions, and
 * `--set key=value` overrides. Owns zt_config; nothing else parses config text.
 * The module: config_keys.c declares every key once (name, type, default, range, field, help) and
 * derives the defaults and the effective-config text from that table; yaml_read.c reads the YAML of a
 * file or a `--set`; config.c judges each value against the table; config_checks.c runs the checks
 * between keys; config_deepspeed.c holds the DeepSpeed
 * compatibility rules ("auto" values, features not implemented yet, keys accepted without effect). */
#ifndef ZT_CONFIG_H
#define ZT_CONFIG_H

#include "util/util.h"

enum { ZT_SCHED_CONSTANT = 0, ZT_SCHED_WARMUP_LR, ZT_SCHED_WARMUP_DECAY_LR, ZT_SCHED_WARMUP_COSINE_LR };
enum { ZT_DEVICE_AUTO = 0, ZT_DEVICE_CPU, ZT_DEVICE_CUDA, ZT_DEVICE_SIM };
enum { ZT_OFFLOAD_NONE = 0, ZT_OFFLOAD_CPU, ZT_OFFLOAD_NVME };
/* offload_optimizer.gradients: where stages 2-3 at ratio 1 keep the reduced gradient shard */
enum { ZT_GRADS_AUTO = 0, ZT_GRADS_DEVICE, ZT_GRADS_HOST };
/* data_types.grad_accum_dtype; DEFAULT = not given (the backend's compute dtype) */
enum { ZT_ACCUM_DEFAULT = 0, ZT_ACCUM_FP32, ZT_ACCUM_BF16, ZT_ACCUM_FP16 };
enum { ZT_RESUME_AUTO = 0, ZT_RESUME_NEVER, ZT_RESUME_PATH };
enum { ZT_GUARD_STOP = 0, ZT_GUARD_SKIP, ZT_GUARD_OFF, ZT_GUARD_ROLLBACK }; /* divergence_guard.action */

/* a DeepSpeed monitor section (tensorboard, csv_monitor): rank 0 writes into output_path/job_name/ */
typedef struct zt_monitor_config {
    int enabled;
    char *output_path; /* NULL = the current directory (DeepSpeed's "") */
    char *job_name;    /* NULL = straight into output_path; default DeepSpeedJobName */
} zt_monitor_config;

typedef struct zt_config {
    char *source_path;   /* the file the config was read from */
    char *effective_text; /* the effective config as YAML (for the start banner and checkpoints) */
    char *auto_keys;      /* keys given as "auto" (space-separated dotted names), NULL if none */

    /* model */
    int n_layer, n_head, n_embd, vocab_size, n_positions;
    /* the Llama family (model_type 1 llama, 2 qwen2, 3 mistral; 0 gpt2), Hugging Face's names */
    int model_type, n_kv_head, intermediate_size, tie_word_embeddings; /* tie: -1 the family's */
    int attention_bias, mlp_bias, sliding_window;
    float rope_theta, rms_norm_eps;
    int rope_type, rope_original_max; /* rope_scaling: rope_type 1 llama3 */
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    char *init_from;     /* Hugging Face model.safetensors path or NULL */

    /* data */
    char *train_glob, *val_glob;
    int seq_len;

    /* batch: train_batch_size = micro * accumulation * world_size (0 = not given, derived) */
    long train_batch_size;
    int train_micro_batch_size_per_gpu;
    int gradient_accumulation_steps;
    long train_iters;

    /* optimizer (type AdamW or Adam; Adam with weight_decay is treated as AdamW like DeepSpeed's
     * adam_w_mode default) */
    char *optimizer_type;
    float lr, beta1, beta2, eps, weight_decay;
    int decay_all_params;     /* 0 (default): weight decay on 2-D weights only */
    int bias_correction;      /* 1 (default): divide m and v by 1 - beta^t */

    /* scheduler: DeepSpeed names and parameters */
    int scheduler;
    float warmup_min_lr, warmup_max_lr; /* warmup_max_lr < 0 means "optimizer lr" */
    long warmup_num_steps;
    int warmup_type_log;      /* warmup_type: log (1) | linear (0); DeepSpeed default log */
    long total_num_steps;     /* WarmupDecayLR/WarmupCosineLR; 0 = train_iters */
    float cos_min_ratio, warmup_min_ratio;

    float gradient_clipping;  /* 0 = off */

    /* precision (GPU backends) */
    int bf16_enabled, fp16_enabled;
    float loss_scale;          /* 0 = dynamic */
    int initial_scale_power, loss_scale_window, hysteresis;
    float min_loss_scale;
    int grad_accum_dtype;      /* ZT_ACCUM_*: data_types.grad_accum_dtype */

    /* ZeRO */
    int zero_stage;
    int overlap_comm, contiguous_gradients;
    double reduce_bucket_size, allgather_bucket_size;
    double stage3_prefetch_bucket_size, stage3_param_persistence_threshold;
    int offload_device;        /* ZT_OFFLOAD_* */
    double offload_ratio;      /* [0,1]; < 0 means auto */
    int offload_pin_memory;
    double offload_device_memory; /* bytes budget for ratio auto, 0 = ask the device */
    double offload_host_memory;   /* bytes budget of the host part for ratio auto, 0 = what is available */
    /* ZeRO-3 / ZeRO-Infinity settings: read and range-checked for the NVMe/parameter-offload work;
     * config_deepspeed.c refuses the values that ask for what the engine does not do yet */
    double stage3_max_live_parameters, stage3_max_reuse_distance, sub_group_size;
    int stage3_gather_16bit_weights_on_model_save;
    char *offload_nvme_path;   /* offload_optimizer.nvme_path */
    int offload_buffer_count, offload_pipeline_read, offload_pipeline_write, offload_fast_init;
    int offload_overlap_step;  /* ours: the host part's update finishes during the next step */
    int offload_delayed_update; /* ours: the host part's update of step t lands after step t+1's backward */
    int offload_super;          /* offload_optimizer.super_offload: the speculative step (twin_flow.c) */
    float offload_cpuadam_cores_perc; /* share of the host's cores for the CPU Adam */
    double offload_speculation_window; /* ours: bytes for super_offload's spare states; 0 = auto */
    int offload_delayed_warmup; /* ours: steps updated without delay first */
    int offload_gradients;      /* ours: ZT_GRADS_*: the gradient shard on the device or the host (ratio 1) */
    int offload_param_device;  /* ZT_OFFLOAD_* */
    char *offload_param_nvme_path;
    int offload_param_buffer_count, offload_param_pin_memory;
    double offload_param_buffer_size, offload_param_max_in_cpu;
    int aio_block_size, aio_queue_depth, aio_thread_count, aio_single_submit, aio_overlap_events, aio_use_gds;

    /* activation checkpointing */
    int ckpt_enabled;
    int ckpt_number_checkpoints; /* 0 = every block */
    int tp_size;                 /* tensor_parallel.tp_size: ranks per tensor-parallel group */
    int tiled_in_splits;         /* zero_optimization.tiled_linear.in_splits: row tiles per block linear */
    int tiled_out_splits;        /* zero_optimization.tiled_linear.out_splits: only 1 */
    int ckpt_cpu;                /* cpu_checkpointing: kept block inputs in host memory */
    int ckpt_partition;          /* partition_activations: kept block inputs split across tensor-parallel ranks */

    /* checkpoints */
    char *checkpoint_dir;
    long save_interval;        /* 0 = only at the end / on signal */
    int keep_last;             /* 0 = keep all */
    int resume_mode;
    char *resume_path;
    int ckpt_overwrite;        /* resume: never may start over in a directory holding checkpoints */
    int ckpt_allow_unverified; /* format-version-1 checkpoints (no metadata checksum) may load */
    int ckpt_async_save;       /* saves snapshot to host memory and write on a thread (io/checkpoint_save.h) */

    /* divergence guard (train.c) */
    int guard_action;          /* ZT_GUARD_* */
    double guard_max_loss;     /* a loss above this (nats) is a divergence; 0 = off */
    double guard_loss_spike;   /* a loss above this times the recent mean is a divergence; 0 = off */
    int guard_spike_window;    /* accepted steps in that mean */
    int guard_max_skips;       /* action skip: skipped steps in a row before the run stops */
    int guard_max_rollbacks;   /* action rollback: rollbacks in a run before it stops */
    long guard_rollback_skip;  /* action rollback: global batches skipped past the good checkpoint's; 0 = all consumed since it */

    /* logging */
    long steps_per_print;
    long eval_interval;        /* 0 = never */
    int eval_batches;
    long sample_interval;      /* 0 = never */
    int sample_tokens;
    char *metrics_file;
    int wall_clock_breakdown;
    int memory_breakdown;      /* memory per category with each step line */
    int print_config;          /* the whole effective config at start, not the one-line summary */
    char *trace_file;
    int trace_nvml_ms;         /* 0 = off: the NVML sampler's period (io/trace_nvml.h) */
    zt_monitor_config tensorboard, csv_monitor;

    unsigned long long seed;
    int device;                /* ZT_DEVICE_* */
    double comm_timeout;       /* seconds a collective may wait without progress (watchdog.h); 0 = off */

    /* set by zt_config_load: whether the config (file or --set) gave these explicitly; DeepSpeed's
     * batch rule derives the ones left out (zt_config_check_batch) */
    int micro_batch_given, grad_accum_given;

    /* set by zt_config_load: where each key was set, for errors found after loading (zt_config_fail_key) */
    struct zt_posrec *set_at;
    int n_set_at;
} zt_config;

/* Fills defaults (from the key table in config_keys.c). */
void zt_config_defaults(zt_config *cfg);
/* Loads PATH (YAML or JSON; NULL = defaults only), then applies overrides ("key.sub=value", YAML scalar or flow syntax).
 * Unknown keys, wrong types and out-of-range values fail with "FILE:LINE:COL: ..." (overrides use
 * "--set KEY: ..."). Cross-key checks that need the world size are in zt_config_check_batch.
 * Starts from zt_config_defaults itself (do not call both without zt_config_free in between); on
 * failure everything is freed. Fills effective_text (YAML that loads back to the same config). */
int zt_config_load(zt_config *cfg, const char *path, char *const *overrides, int n_overrides, zt_err *err);
/* Each override alone, as zt_config_load applies it (KEY=VALUE, a known key, its value's type and
 * range), without the file or the cross-key checks: for `run`, which must refuse a bad --set before
 * it starts any rank (and must not read the config itself: it may be a pipe the ranks read). A
 * `KEY=null` of an unknown key passes (it may remove a key the file has). 0, or -1 with the line. */
int zt_config_check_overrides(char *const *overrides, int n_overrides, zt_err *err);
/* An error about key `path` found after loading (a size, a memory limit): "FILE:LINE:COL: path: MSG"
 * at the place the key was last set, "--set KEY: MSG" for an override, "FILE: path: MSG" for a key
 * left at its default. Returns -1. */
int zt_config_fail_key(const zt_config *cfg, const char *path, zt_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Regenerates effective_text after a caller changed fields (the model section model.init_from gives). */
void zt_config_refresh_text(zt_config *cfg);
/* whether the file or an override set key `path` */
int zt_config_was_set(const zt_config *cfg, const char *path);
/* DeepSpeed's batch rule: train_batch_size == micro * accumulation * world_size, deriving the one
 * left out; names all three numbers when it fails. On success all three are set, both "given"
 * flags are set and effective_text is regenerated with the derived values. Logs one info line
 * naming the keys that were "auto" and what they became. */
int zt_config_check_batch(zt_config *cfg, int world_size, zt_err *err);
/* data_types.grad_accum_dtype against the backend that will run: only the dtype the backend
 * accumulates gradients in (its compute dtype: "fp32", "bf16", "fp16") is accepted. */
int zt_config_check_grad_accum(const zt_config *cfg, const char *backend, const char *compute_dtype, zt_err *err);
/* The key reference (every key: dotted name, type, default, help; MARKDOWN: a table that also says
 * what each accepts, docs/configuration.md's), from config_keys.c's table. */
void zt_config_print_keys(FILE *f, int markdown);
/* ZT_DEVICE_* for a `device` value ("auto", "cpu", "cuda", "sim"), -1 for anything else; for the
 * commands that take --device */
int zt_config_device_named(const char *name);
/* Frees every string and sets the pointers to NULL (safe to call twice). */
void zt_config_free(zt_config *cfg);

#endif
