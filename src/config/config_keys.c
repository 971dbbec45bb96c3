/* config_keys.c — every config key, declared once: its dotted name, how it is read (kind, range,
 * names), where it is stored in zt_config, its default and a line of help. From this table come
 * zt_config_defaults, the effective-config YAML (zt_config_effective_text) and the key lookup that
 * the loader (config.c) uses for files and --set alike, with its near-miss suggestions. A new key is
 * one row here (plus its field in config.h and, if it needs one, a cross-key check in
 * config_checks.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_schema.h"

#define INF INFINITY
#define E F_EMIT
/* a key stored in one field / in two fields / read and checked but not stored */
#define KEY(p, k, f, ...) {.path = p, .kind = k, .off = offsetof(zt_config, f), .off2 = ZT_NOF, __VA_ARGS__}
#define KEY2(p, k, f, f2, ...) \
    {.path = p, .kind = k, .off = offsetof(zt_config, f), .off2 = offsetof(zt_config, f2), __VA_ARGS__}
#define NOKEY(p, k, ...) {.path = p, .kind = k, .off = ZT_NOF, .off2 = ZT_NOF, __VA_ARGS__}
#define SEC(p, ...) NOKEY(p, K_SECTION, __VA_ARGS__)
/* DeepSpeed keys: without effect here (note) / for a feature zerotrain does not implement (error) /
 * a feature section that is fine while disabled */
#define NOTE(p) NOKEY(p, K_NOTE, .help = "DeepSpeed's; no effect here")
#define DSKEY(p, ...) NOKEY(p, K_DSKEY, __VA_ARGS__)
#define OFFSEC(p, h) NOKEY(p, K_OFF_SECTION, .hint = h)

static const zt_enumval warmup_types[] = {{"log", 1}, {"linear", 0}, {NULL, 0}};
static const zt_enumval devices[] = {{"auto", ZT_DEVICE_AUTO}, {"cpu", ZT_DEVICE_CPU}, {"cuda", ZT_DEVICE_CUDA},
                                     {"sim", ZT_DEVICE_SIM},   {NULL, 0}};
const zt_enumval zt_sched_types[] = {{"WarmupLR", ZT_SCHED_WARMUP_LR},
                                     {"WarmupDecayLR", ZT_SCHED_WARMUP_DECAY_LR},
                                     {"WarmupCosineLR", ZT_SCHED_WARMUP_COSINE_LR},
                                     {NULL, 0}};
static const zt_enumval opt_types[] = {{"AdamW", 0}, {"Adam", 1}, {NULL, 0}};
static const zt_enumval offload_devs[] = {{"none", ZT_OFFLOAD_NONE}, {"cpu", ZT_OFFLOAD_CPU},
                                          {"nvme", ZT_OFFLOAD_NVME}, {NULL, 0}};
static const zt_enumval grads_places[] = {{"auto", ZT_GRADS_AUTO}, {"device", ZT_GRADS_DEVICE}, {"host", ZT_GRADS_HOST},
                                          {NULL, 0}};
static const zt_enumval accum_dtypes[] = {{"fp32", ZT_ACCUM_FP32}, {"bf16", ZT_ACCUM_BF16}, {"fp16", ZT_ACCUM_FP16},
                                          {NULL, 0}};
static const zt_enumval resume_modes[] = {{"auto", ZT_RESUME_AUTO}, {"never", ZT_RESUME_NEVER}, {NULL, 0}};
static const zt_enumval guard_actions[] = {{"stop", ZT_GUARD_STOP}, {"skip", ZT_GUARD_SKIP}, {"off", ZT_GUARD_OFF}, {"rollback", ZT_GUARD_ROLLBACK},
                                           {NULL, 0}};
static const zt_enumval model_types[] = {{"gpt2", 0}, {"llama", 1}, {"qwen2", 2}, {"mistral", 3}, {NULL, 0}};
static const zt_enumval rope_types[] = {{"none", 0}, {"default", 0}, {"llama3", 1}, {NULL, 0}};
/* names DeepSpeed knows that zerotrain refuses as "not supported" rather than "expected ..." */
static const char *const ds_optimizers[] = {"OneBitAdam", "ZeroOneAdam", "OneBitLamb", "Lamb", "Lion",
                                            "Adagrad", "MuAdam", "MuAdamW", "MuSGD", "CPUAdam", NULL};
static const char *const ds_schedulers[] = {"OneCycle", "LRRangeTest", NULL};

const zt_keydef zt_config_keys[] = {
    SEC("model"),
    KEY("model.n_layer", K_INT, n_layer, .def = 12, .lo = 1, .hi = INF, .flags = E, .help = "transformer blocks"),
    KEY("model.n_head", K_INT, n_head, .def = 12, .lo = 1, .hi = INF, .flags = E,
        .help = "attention heads; must divide n_embd"),
    KEY("model.n_embd", K_INT, n_embd, .def = 768, .lo = 1, .hi = INF, .flags = E, .help = "embedding width"),
    KEY("model.vocab_size", K_INT, vocab_size, .def = 50257, .lo = 1, .hi = INF, .flags = E,
        .help = "vocabulary size (GPT-2 BPE)"),
    KEY("model.n_positions", K_INT, n_positions, .def = 1024, .lo = 1, .hi = INF, .flags = E,
        .help = "learned position embeddings; >= data.seq_len"),
    KEY("model.init_from", K_STR, init_from, .flags = E,
        .help = "Hugging Face model folder (or its model.safetensors) to start from (fine-tuning): the model keys come from its config.json"),
    KEY("model.model_type", K_ENUM, model_type, .def = 0, .flags = E, .ev = model_types,
        .help = "the architecture: gpt2, or the Llama family (llama, qwen2, mistral: rotary positions, RMSNorm, "
                "SwiGLU, grouped-query attention)"),
    KEY("model.num_key_value_heads", K_INT, n_kv_head, .def = 0, .lo = 0, .hi = INF, .flags = E | F_NULL_DEFAULT,
        .help = "key/value heads (Llama family; must divide n_head: 1 multi-query, n_head multi-head); 0 / null = "
                "n_head"),
    KEY("model.intermediate_size", K_INT, intermediate_size, .def = 0, .lo = 0, .hi = INF, .flags = E,
        .help = "the SwiGLU MLP's width (Llama family; required there)"),
    KEY("model.rope_theta", K_FLOAT, rope_theta, .def = 10000, .lo = 0, .hi = INF, .lo_excl = 1, .flags = E,
        .help = "rotary embeddings' base (Llama family)"),
    KEY("model.rms_norm_eps", K_FLOAT, rms_norm_eps, .def = 1e-6, .lo = 0, .hi = 1, .lo_excl = 1, .flags = E,
        .help = "RMSNorm's epsilon (Llama family)"),
    KEY("model.tie_word_embeddings", K_BOOL, tie_word_embeddings, .def = -1, .flags = E | F_NULL_DEFAULT,
        .def_shown = "null",
        .help = "the LM head is the token embedding (Llama family; null = false, Hugging Face's default; gpt2 is always "
                "tied)"),
    KEY("model.attention_bias", K_BOOL, attention_bias, .def = 0, .flags = E,
        .help = "biases on q, k, v and o_proj (Llama's key; qwen2 has q/k/v biases always)"),
    KEY("model.mlp_bias", K_BOOL, mlp_bias, .def = 0, .flags = E, .help = "biases on the MLP's linears (Llama family)"),
    KEY("model.sliding_window", K_INT, sliding_window, .def = 0, .lo = 0, .hi = INF, .flags = E | F_NULL_DEFAULT,
        .help = "mistral's attention window; data.seq_len must not pass it (0 / null: none)"),
    SEC("model.rope_scaling", .help = "Llama 3's rotary scaling (rope_type llama3)"),
    KEY("model.rope_scaling.rope_type", K_ENUM, rope_type, .def = 0, .flags = E, .ev = rope_types,
        .help = "none, or llama3 (long wavelengths divided by factor, short ones kept, the band between blended)"),
    KEY("model.rope_scaling.factor", K_FLOAT, rope_factor, .def = 8, .lo = 1, .hi = INF, .flags = E,
        .help = "llama3 scaling: the factor"),
    KEY("model.rope_scaling.low_freq_factor", K_FLOAT, rope_low_freq_factor, .def = 1, .lo = 0, .hi = INF,
        .lo_excl = 1, .flags = E, .help = "llama3 scaling: wavelengths past original / low_freq_factor are scaled"),
    KEY("model.rope_scaling.high_freq_factor", K_FLOAT, rope_high_freq_factor, .def = 4, .lo = 0, .hi = INF,
        .lo_excl = 1, .flags = E, .help = "llama3 scaling: wavelengths below original / high_freq_factor are kept"),
    KEY("model.rope_scaling.original_max_position_embeddings", K_INT, rope_original_max, .def = 8192, .lo = 1,
        .hi = INF, .flags = E, .help = "llama3 scaling: the context the model was first trained at"),

    SEC("data"),
    KEY("data.train", K_STR, train_glob, .flags = E, .help = "training token shards (a glob); required by train"),
    KEY("data.val", K_STR, val_glob, .flags = E, .help = "validation token shards (a glob)"),
    KEY("data.seq_len", K_INT, seq_len, .def = 64, .lo = 1, .hi = INF, .flags = E, .help = "tokens per sequence"),

    KEY("train_batch_size", K_LONG, train_batch_size, .def = 0, .lo = 1, .hi = INF, .flags = E | F_AUTO,
        .tag = T_TB, .help = "global batch in sequences per optimizer step (null: derived)"),
    KEY("train_micro_batch_size_per_gpu", K_INT, train_micro_batch_size_per_gpu, .def = 4, .lo = 1, .hi = INF,
        .flags = E | F_AUTO, .tag = T_MICRO, .help = "sequences per rank per forward/backward"),
    KEY("gradient_accumulation_steps", K_INT, gradient_accumulation_steps, .def = 1, .lo = 1, .hi = INF,
        .flags = E | F_AUTO, .tag = T_ACCUM, .help = "micro-batches accumulated per optimizer step"),
    KEY("train_iters", K_LONG, train_iters, .def = 100, .lo = 1, .hi = INF, .flags = E,
        .help = "optimizer steps to train for"),

    SEC("optimizer"),
    KEY("optimizer.type", K_ENUMSTR, optimizer_type, .def_str = "AdamW", .flags = E, .ev = opt_types,
        .ds_names = ds_optimizers, .what = "optimizer", .help = "AdamW or Adam (Adam with weight decay is AdamW)"),
    SEC("optimizer.params"),
    KEY("optimizer.params.lr", K_FLOAT, lr, .def = 6e-4, .lo = 0, .hi = INF, .flags = E | F_AUTO,
        .help = "learning rate (the peak when a scheduler warms up to it)"),
    KEY2("optimizer.params.betas", K_BETAS, beta1, beta2, .def = 0.9, .def2 = 0.95, .lo = 0, .hi = 1,
         .flags = E | F_AUTO, .help = "Adam beta1, beta2, each in [0, 1)"),
    KEY("optimizer.params.eps", K_FLOAT, eps, .def = 1e-8, .lo = 0, .hi = INF, .lo_excl = 1, .flags = E | F_AUTO,
        .help = "Adam epsilon"),
    KEY("optimizer.params.weight_decay", K_FLOAT, weight_decay, .def = 0, .lo = 0, .hi = INF, .flags = E | F_AUTO,
        .help = "decoupled weight decay"),
    KEY("optimizer.params.decay_all_params", K_BOOL, decay_all_params, .def = 0, .flags = E,
        .help = "decay every tensor (default: 2-D weights only)"),
    KEY("optimizer.params.bias_correction", K_BOOL, bias_correction, .def = 1, .flags = E,
        .help = "divide m and v by 1 - beta^t (DeepSpeed's FusedAdam/CPUAdam option)"),
    NOKEY("optimizer.params.adam_w_mode", K_BOOL, .tag = T_ADAM_W_MODE,
          .help = "DeepSpeed's; false with weight_decay > 0 (L2-coupled Adam) is refused"),
    NOKEY("optimizer.params.torch_adam", K_BOOL, .help = "DeepSpeed's; no effect"),
    NOKEY("optimizer.params.amsgrad", K_BOOL, .flags = F_ONLY_FALSE, .hint = "AMSGrad", .help = "only false"),
    DSKEY("optimizer.params.max_grad_norm",
          .hint = "is not an optimizer parameter (DeepSpeed refuses it too); clip with the top-level "
                  "gradient_clipping"),
    DSKEY("optimizer.legacy_fusion"),

    SEC("scheduler", .tag = T_SCHED),
    KEY("scheduler.type", K_ENUM, scheduler, .def = ZT_SCHED_CONSTANT, .flags = E, .tag = T_SCHED_TYPE,
        .ev = zt_sched_types, .ds_names = ds_schedulers, .what = "scheduler", .def_shown = "none (constant lr)",
        .help = "WarmupLR, WarmupDecayLR or WarmupCosineLR; no section = constant lr"),
    SEC("scheduler.params"),
    KEY("scheduler.params.warmup_min_lr", K_FLOAT, warmup_min_lr, .def = 0, .lo = 0, .hi = INF,
        .flags = E | F_AUTO, .tag = T_SCHED_PARAM, .help = "WarmupLR, WarmupDecayLR: rate at step 0"),
    KEY("scheduler.params.warmup_max_lr", K_FLOAT, warmup_max_lr, .def = -1, .lo = 0, .hi = INF,
        .flags = E | F_AUTO, .tag = T_SCHED_PARAM, .help = "rate after warmup", .def_shown = "optimizer.params.lr"),
    KEY("scheduler.params.warmup_num_steps", K_LONG, warmup_num_steps, .def = 1000, .lo = 0, .hi = INF,
        .flags = E | F_AUTO, .tag = T_SCHED_PARAM, .help = "warmup length in optimizer steps"),
    KEY("scheduler.params.warmup_type", K_ENUM, warmup_type_log, .def = 1, .flags = E | F_AUTO,
        .tag = T_SCHED_PARAM, .ev = warmup_types, .help = "warmup curve, log or linear"),
    KEY("scheduler.params.total_num_steps", K_LONG, total_num_steps, .def = 0, .lo = 0, .hi = INF,
        .flags = E | F_AUTO, .tag = T_SCHED_PARAM, .help = "step where the decay ends (0 = train_iters)"),
    KEY("scheduler.params.warmup_min_ratio", K_FLOAT, warmup_min_ratio, .def = 0, .lo = 0, .hi = 1,
        .flags = E | F_AUTO, .tag = T_SCHED_PARAM, .help = "WarmupCosineLR: starting rate / lr"),
    KEY("scheduler.params.cos_min_ratio", K_FLOAT, cos_min_ratio, .def = 0.0001, .lo = 0, .hi = 1,
        .flags = E | F_AUTO, .tag = T_SCHED_PARAM, .help = "WarmupCosineLR: final rate / lr"),
    DSKEY("scheduler.params.last_batch_iteration"),

    KEY("gradient_clipping", K_FLOAT, gradient_clipping, .def = 0, .lo = 0, .hi = INF, .flags = E | F_AUTO,
        .help = "clip the global gradient norm to this; 0 = off"),

    SEC("bf16"),
    KEY("bf16.enabled", K_BOOL, bf16_enabled, .def = 0, .flags = E | F_AUTO,
        .help = "bf16 compute, fp32 master weights (GPU)"),
    NOKEY("bf16.immediate_grad_update", K_BOOL, .flags = F_ONLY_FALSE,
          .hint = "updating weights during backward", .help = "only false"),
    SEC("bfloat16"), /* DeepSpeed's older name for bf16 */
    KEY("bfloat16.enabled", K_BOOL, bf16_enabled, .def = 0, .flags = F_AUTO, .help = "the same as bf16.enabled"),

    SEC("fp16"),
    KEY("fp16.enabled", K_BOOL, fp16_enabled, .def = 0, .flags = E | F_AUTO,
        .help = "fp16 compute with dynamic loss scaling"),
    KEY("fp16.loss_scale", K_FLOAT, loss_scale, .def = 0, .lo = 0, .hi = INF, .flags = E,
        .help = "fixed loss scale; 0 = dynamic"),
    KEY("fp16.initial_scale_power", K_INT, initial_scale_power, .def = 16, .lo = 0, .hi = 63, .flags = E,
        .help = "dynamic scaling starts at 2^this"),
    KEY("fp16.loss_scale_window", K_INT, loss_scale_window, .def = 1000, .lo = 1, .hi = INF, .flags = E,
        .help = "overflow-free steps before the scale doubles"),
    KEY("fp16.hysteresis", K_INT, hysteresis, .def = 2, .lo = 1, .hi = INF, .flags = E,
        .help = "overflows tolerated before the scale halves"),
    KEY("fp16.min_loss_scale", K_FLOAT, min_loss_scale, .def = 1, .lo = 0, .hi = INF, .lo_excl = 1, .flags = E,
        .help = "the scale never drops below this"),
    NOKEY("fp16.consecutive_hysteresis", K_BOOL, .flags = F_ONLY_FALSE,
          .hint = "refilling the hysteresis after every good step", .help = "only false"),
    NOKEY("fp16.auto_cast", K_BOOL, .help = "no effect: inputs are token ids, compute follows fp16.enabled"),
    NOKEY("fp16.fp16_master_weights_and_grads", K_BOOL, .flags = F_ONLY_FALSE,
          .hint = "fp16 master weights; master weights are fp32", .help = "only false"),

    SEC("data_types"),
    KEY("data_types.grad_accum_dtype", K_ENUM, grad_accum_dtype, .def = ZT_ACCUM_DEFAULT, .flags = E | F_NULL_DEFAULT,
        .ev = accum_dtypes, .help = "gradient accumulation dtype; must be what the backend does (null = that)"),

    SEC("zero_optimization"),
    KEY("zero_optimization.stage", K_INT, zero_stage, .def = 0, .lo = 0, .hi = 3, .flags = E,
        .help = "0 replicate; 1 shard optimizer states; 2 also gradients; 3 also parameters"),
    KEY("zero_optimization.overlap_comm", K_BOOL, overlap_comm, .def = 0, .flags = E,
        .help = "overlap gradient reduction with backward"),
    KEY("zero_optimization.contiguous_gradients", K_BOOL, contiguous_gradients, .def = 1, .flags = E,
        .help = "always on; accepted for DeepSpeed compatibility"),
    KEY("zero_optimization.reduce_bucket_size", K_DOUBLE, reduce_bucket_size, .def = 5e8, .lo = 1, .hi = INF,
        .flags = E | F_AUTO, .help = "elements per gradient reduction (auto: n_embd^2)"),
    KEY("zero_optimization.allgather_bucket_size", K_DOUBLE, allgather_bucket_size, .def = 5e8, .lo = 1, .hi = INF,
        .flags = E | F_AUTO, .help = "accepted for DeepSpeed compatibility"),
    KEY("zero_optimization.stage3_prefetch_bucket_size", K_DOUBLE, stage3_prefetch_bucket_size, .def = 5e7, .lo = 0,
        .hi = INF, .flags = E | F_AUTO, .help = "stage 3 prefetch: 0 off, else the next segment ahead (auto: 0.9 n_embd^2)"),
    KEY("zero_optimization.stage3_param_persistence_threshold", K_DOUBLE, stage3_param_persistence_threshold,
        .def = 1e5, .lo = 0, .hi = INF, .flags = E | F_AUTO,
        .help = "stage 3: smaller segments stay gathered (auto: 10 n_embd)"),
    KEY("zero_optimization.stage3_max_live_parameters", K_DOUBLE, stage3_max_live_parameters, .def = 1e9, .lo = 0,
        .hi = INF, .flags = E, .help = "stage 3 bound on gathered parameters on the device (ZeRO-Infinity)"),
    KEY("zero_optimization.stage3_max_reuse_distance", K_DOUBLE, stage3_max_reuse_distance, .def = 1e9, .lo = 0,
        .hi = INF, .flags = E,
        .help = "stage 3: a released segment is reused without a new gather within this many elements"),
    KEY("zero_optimization.sub_group_size", K_DOUBLE, sub_group_size, .def = 1e9, .lo = 0, .hi = INF,
        .flags = E, .help = "elements per swapped group of optimizer states with NVMe offload (ZeRO-Infinity); "
                            "0: the smallest group (DeepSpeed: one tensor per group)"),
    KEY("zero_optimization.stage3_gather_16bit_weights_on_model_save", K_BOOL,
        stage3_gather_16bit_weights_on_model_save, .def = 0, .flags = E | F_AUTO,
        .help = "each checkpoint save also writes the 16-bit Hugging Face model in step_N/hf (any stage)"),
    KEY("zero_optimization.stage3_gather_fp16_weights_on_model_save", K_BOOL,
        stage3_gather_16bit_weights_on_model_save, .def = 0, .flags = F_AUTO,
        .help = "older name of the above"),
    NOKEY("zero_optimization.reduce_scatter", K_BOOL, .help = "DeepSpeed's; always reduce-scatter"),
    NOKEY("zero_optimization.allgather_partitions", K_BOOL, .help = "DeepSpeed's; no effect"),
    NOKEY("zero_optimization.round_robin_gradients", K_BOOL,
          .help = "DeepSpeed's offload copy scheduling; no effect on results"),
    NOKEY("zero_optimization.ignore_unused_parameters", K_BOOL, .help = "GPT-2 has no unused parameters"),
    NOKEY("zero_optimization.elastic_checkpoint", K_BOOL,
          .help = "checkpoints always load on any number of ranks"),
    NOKEY("zero_optimization.load_from_fp32_weights", K_BOOL, .flags = F_ONLY_TRUE,
          .hint = "restoring master weights from 16-bit ones; checkpoints hold fp32 master weights",
          .help = "only true"),
    KEY("zero_optimization.cpu_offload", K_BOOL, offload_device, .def = ZT_OFFLOAD_NONE, .tag = T_CPU_OFFLOAD,
        .help = "DeepSpeed's old name for offload_optimizer.device: cpu"),
    KEY("zero_optimization.cpu_offload_use_pin_memory", K_BOOL, offload_pin_memory, .def = 0,
        .help = "DeepSpeed's old name for offload_optimizer.pin_memory"),
    NOKEY("zero_optimization.cpu_offload_params", K_BOOL, .flags = F_ONLY_FALSE,
          .hint = "use zero_optimization.offload_param.device: cpu", .help = "only false"),
    SEC("zero_optimization.offload_optimizer"),
    KEY("zero_optimization.offload_optimizer.device", K_ENUM, offload_device, .def = ZT_OFFLOAD_NONE, .flags = E,
        .ev = offload_devs, .help = "none, cpu (Twin-Flow) or nvme (ZeRO-Infinity: states in nvme_path)"),
    KEY("zero_optimization.offload_optimizer.ratio", K_RATIO, offload_ratio, .def = 1.0, .lo = 0, .hi = 1,
        .flags = E, .help = "Twin-Flow: share of the optimizer shard in host memory, or auto"),
    KEY("zero_optimization.offload_optimizer.pin_memory", K_BOOL, offload_pin_memory, .def = 0, .flags = E,
        .help = "page-locked host buffers (always on a GPU)"),
    KEY("zero_optimization.offload_optimizer.overlap_step", K_BOOL, offload_overlap_step, .def = 1, .flags = E,
        .help = "ours: the host part's update finishes during the next step's forward (exact)"),
    KEY("zero_optimization.offload_optimizer.super_offload", K_BOOL, offload_super, .def = 1, .flags = E,
        .help = "DeepSpeed's SuperOffload: the host part's CPU Adam starts during backward as each bucket's "
                "gradients come down, validated after (rolled back when clipped or overflowed); exact"),
    KEY("zero_optimization.offload_optimizer.cpuadam_cores_perc", K_FLOAT, offload_cpuadam_cores_perc, .def = 1,
        .lo = 0, .hi = 1, .lo_excl = 1, .flags = E,
        .help = "share of the host's cores the CPU Adam uses (DeepSpeed's default is 0.8; ours all of them)"),
    KEY("zero_optimization.offload_optimizer.speculation_window", K_BYTES, offload_speculation_window, .def = 0,
        .flags = E, .help = "ours: host memory for super_offload's speculated states, 12 B an element; 0 = "
                            "what host memory holds beside the rest"),
    KEY("zero_optimization.offload_optimizer.delayed_update", K_BOOL, offload_delayed_update, .def = 0, .flags = E,
        .help = "ours: the host part's CPU Adam of step t runs during step t+1, whose forward and backward use "
                "its parameters of step t-1 (ZeRO-Offload's DPU; changes results)"),
    KEY("zero_optimization.offload_optimizer.delayed_update_warmup", K_INT, offload_delayed_warmup, .def = 40, .lo = 0,
        .hi = INF, .flags = E, .help = "ours: steps updated without delay before delayed_update starts"),
    KEY("zero_optimization.offload_optimizer.gradients", K_ENUM, offload_gradients, .def = ZT_GRADS_AUTO, .flags = E,
        .ev = grads_places, .help = "ours: stages 2-3 at ratio 1: the gradient shard on the device (fast), or to the "
                                    "host bucket by bucket (less device memory); auto: the device when it fits"),
    KEY("zero_optimization.offload_optimizer.device_memory", K_BYTES, offload_device_memory, .def = 0, .flags = E,
        .help = "device memory budget for ratio auto; 0 = what is free"),
    KEY("zero_optimization.offload_optimizer.host_memory", K_BYTES, offload_host_memory, .def = 0, .flags = E,
        .help = "ours: host memory budget of the offloaded part for ratio auto; 0 = what is available"),
    KEY("zero_optimization.offload_optimizer.nvme_path", K_STR, offload_nvme_path, .flags = E,
        .help = "NVMe directory for the optimizer swap files (ZeRO-Infinity)"),
    KEY("zero_optimization.offload_optimizer.buffer_count", K_INT, offload_buffer_count, .def = 4, .lo = 1,
        .hi = INF, .flags = E, .help = "NVMe staging buffers of sub_group_size elements (3: read, update, write at once)"),
    KEY("zero_optimization.offload_optimizer.pipeline_read", K_BOOL, offload_pipeline_read, .def = 0, .flags = E | F_INERT,
        .help = "NVMe reads always overlap the update"),
    KEY("zero_optimization.offload_optimizer.pipeline_write", K_BOOL, offload_pipeline_write, .def = 0,
        .flags = E | F_INERT, .help = "NVMe writes always overlap the update"),
    NOKEY("zero_optimization.offload_optimizer.pipeline", K_BOOL, .help = "DeepSpeed's old pipeline_read/write"),
    KEY("zero_optimization.offload_optimizer.fast_init", K_BOOL, offload_fast_init, .def = 0, .flags = E,
        .help = "NVMe fast initialisation"),
    SEC("zero_optimization.offload_param"),
    KEY("zero_optimization.offload_param.device", K_ENUM, offload_param_device, .def = ZT_OFFLOAD_NONE, .flags = E,
        .ev = offload_devs, .help = "none, cpu or nvme (stage 3: the parameter shard in host memory or in nvme_path)"),
    KEY("zero_optimization.offload_param.pin_memory", K_BOOL, offload_param_pin_memory, .def = 0, .flags = E,
        .help = "page-locked parameter buffers (always on a GPU)"),
    KEY("zero_optimization.offload_param.nvme_path", K_STR, offload_param_nvme_path, .flags = E,
        .help = "NVMe directory (ZeRO-Infinity)"),
    KEY("zero_optimization.offload_param.buffer_count", K_INT, offload_param_buffer_count, .def = 5, .lo = 1,
        .hi = INF, .flags = E, .help = "nvme: staging buffers; all but one read the next gathers' pieces ahead"),
    KEY("zero_optimization.offload_param.buffer_size", K_DOUBLE, offload_param_buffer_size, .def = 1e8, .lo = 1,
        .hi = INF, .flags = E, .help = "nvme: elements the staging buffer may hold (at least a segment's piece)"),
    KEY("zero_optimization.offload_param.max_in_cpu", K_DOUBLE, offload_param_max_in_cpu, .def = 1e9, .lo = 0,
        .hi = INF, .flags = E | F_INERT, .help = "host memory holds only the staging buffer with NVMe offload"),
    SEC("zero_optimization.tiled_linear"),
    KEY("zero_optimization.tiled_linear.in_splits", K_INT, tiled_in_splits, .def = 1, .lo = 1, .hi = 4096, .flags = E,
        .help = "row tiles of each block linear, gathered and used one after another (stage 3's working set is a tile)"),
    KEY("zero_optimization.tiled_linear.out_splits", K_INT, tiled_out_splits, .def = 1, .lo = 1, .hi = INF,
        .help = "only 1: tiles are row ranges of the weights (contiguous in the flat vector)"),
    DSKEY("zero_optimization.zero_hpz_partition_size"), DSKEY("zero_optimization.zero_quantized_weights"),
    DSKEY("zero_optimization.zero_quantized_nontrainable_weights"), DSKEY("zero_optimization.zero_quantized_gradients"),
    DSKEY("zero_optimization.mics_shard_size"), DSKEY("zero_optimization.mics_hierarchical_params_gather"),
    DSKEY("zero_optimization.memory_efficient_linear"), DSKEY("zero_optimization.pipeline_loading_checkpoint"),
    DSKEY("zero_optimization.override_module_apply"), DSKEY("zero_optimization.stage3_module_granularity_threshold"),
    DSKEY("zero_optimization.use_multi_rank_bucket_allreduce"), DSKEY("zero_optimization.legacy_stage1"),
    DSKEY("zero_optimization.log_trace_cache_warnings"), DSKEY("zero_optimization.zeropp_loco_param"),
    DSKEY("zero_optimization.use_all_reduce_for_fetch_params"),

    SEC("aio"), /* DeepSpeed's async I/O for NVMe offload (ZeRO-Infinity) */
    KEY("aio.block_size", K_INT, aio_block_size, .def = 1048576, .lo = 1, .hi = INF, .flags = E,
        .help = "bytes per NVMe request"),
    KEY("aio.queue_depth", K_INT, aio_queue_depth, .def = 8, .lo = 1, .hi = INF, .flags = E,
        .help = "NVMe requests in flight"),
    KEY("aio.thread_count", K_INT, aio_thread_count, .def = 1, .lo = 1, .hi = INF, .flags = E | F_INERT,
        .help = "NVMe I/O threads (one io_uring per swap file serves them all)"),
    KEY("aio.single_submit", K_BOOL, aio_single_submit, .def = 0, .flags = E,
        .help = "submit requests one at a time"),
    KEY("aio.overlap_events", K_BOOL, aio_overlap_events, .def = 1, .flags = E,
        .help = "overlap submission and completion"),
    KEY("aio.use_gds", K_BOOL, aio_use_gds, .def = 0, .flags = E, .help = "GPUDirect Storage: only false"),

    SEC("tensor_parallel"), /* Megatron-style; ranks laid out tensor-parallel inner (a group on one node) */
    KEY("tensor_parallel.tp_size", K_INT, tp_size, .def = 1, .lo = 1, .hi = 64, .flags = E,
        .help = "ranks that split each block (heads, MLP columns, vocabulary); must divide n_head and the ranks"),
    KEY("tensor_parallel.autotp_size", K_INT, tp_size, .def = 1, .lo = 1, .hi = 64,
        .help = "DeepSpeed's name for tp_size"),

    SEC("activation_checkpointing", .tag = T_ACT),
    KEY("activation_checkpointing.enabled", K_BOOL, ckpt_enabled, .def = 0, .flags = E, .tag = T_ACT_ENABLED,
        .help = "recompute blocks in backward"),
    KEY("activation_checkpointing.partition_activations", K_BOOL, ckpt_partition, .def = 0, .flags = E,
        .help = "each tensor-parallel rank keeps 1/tp of each checkpointed block input (all-gathered to recompute)"),
    KEY("activation_checkpointing.cpu_checkpointing", K_BOOL, ckpt_cpu, .def = 0, .flags = E,
        .help = "keep the checkpointed block inputs in host memory (pinned on GPUs)"),
    NOKEY("activation_checkpointing.contiguous_memory_optimization", K_BOOL,
          .help = "DeepSpeed's; no effect: the kept inputs are always one contiguous buffer"),
    KEY("activation_checkpointing.number_checkpoints", K_INT, ckpt_number_checkpoints, .def = 0, .lo = 0, .hi = INF,
        .flags = E | F_NULL_DEFAULT, .help = "block inputs kept; 0 / null = every block"),
    NOKEY("activation_checkpointing.synchronize_checkpoint_boundary", K_BOOL, .help = "DeepSpeed's; no effect"),
    NOKEY("activation_checkpointing.profile", K_BOOL, .help = "DeepSpeed's; no effect"),

    SEC("checkpoint"),
    KEY("checkpoint.dir", K_STR, checkpoint_dir, .flags = E, .help = "checkpoint directory; null = none"),
    KEY("checkpoint.save_interval", K_LONG, save_interval, .def = 0, .lo = 0, .hi = INF, .flags = E,
        .help = "save every this many steps; 0 = at the end and on a signal"),
    KEY("checkpoint.keep_last", K_INT, keep_last, .def = 0, .lo = 0, .hi = INF, .flags = E,
        .help = "keep this many newest; 0 = all"),
    KEY2("checkpoint.resume", K_RESUME, resume_mode, resume_path, .def = ZT_RESUME_AUTO, .flags = E,
         .ev = resume_modes, .help = "auto, never or a step directory"),
    KEY("checkpoint.overwrite", K_BOOL, ckpt_overwrite, .def = 0, .flags = E,
        .help = "resume: never may start over in a directory that holds checkpoints (and replace them)"),
    KEY("checkpoint.allow_unverified", K_BOOL, ckpt_allow_unverified, .def = 0, .flags = E,
        .help = "load format-version-1 checkpoints, whose metadata carries no checksum"),
    KEY("checkpoint.async_save", K_BOOL, ckpt_async_save, .def = 0, .flags = E,
        .help = "a save blocks training only to copy this rank's master weights and Adam moments into host memory "
                "(12 bytes per element of its shard, held while the write lasts); a writer thread writes the files "
                "beside the next steps, and `latest` moves at the first step boundary after every rank has written "
                "(PyTorch's async_save)"),
    DSKEY("checkpoint.tag_validation"), DSKEY("checkpoint.load_universal"),
    DSKEY("checkpoint.use_node_local_storage"), DSKEY("checkpoint.parallel_write"),

    SEC("divergence_guard"),
    KEY("divergence_guard.action", K_ENUM, guard_action, .def = ZT_GUARD_STOP, .flags = E, .ev = guard_actions,
        .help = "on a non-finite loss or norm, a loss over max_loss or a spike: stop, skip the update, rollback "
                "(reload the newest good checkpoint, skip the batches since it), or off"),
    KEY("divergence_guard.max_loss", K_DOUBLE, guard_max_loss, .def = 100, .lo = 0, .hi = INF, .flags = E,
        .help = "a loss above this many nats diverged (uniform guessing is ln(vocab_size), 10.8); 0 = off"),
    KEY("divergence_guard.loss_spike", K_DOUBLE, guard_loss_spike, .def = 0, .lo = 0, .hi = INF, .flags = E,
        .help = "a loss above this (> 1) times the mean of the last loss_spike_window steps diverged; 0 = off"),
    KEY("divergence_guard.loss_spike_window", K_INT, guard_spike_window, .def = 20, .lo = 1, .hi = INF, .flags = E,
        .help = "steps in the mean the loss spike is measured against"),
    KEY("divergence_guard.max_skips", K_INT, guard_max_skips, .def = 10, .lo = 1, .hi = INF, .flags = E,
        .help = "action skip: steps skipped in a row before the run stops"),
    KEY("divergence_guard.max_rollbacks", K_INT, guard_max_rollbacks, .def = 3, .lo = 1, .hi = INF, .flags = E,
        .help = "action rollback: rollbacks in one run before it stops"),
    KEY("divergence_guard.rollback_skip_batches", K_LONG, guard_rollback_skip, .def = 0, .lo = 0, .hi = INF, .flags = E,
        .help = "action rollback: global batches skipped past the good checkpoint's; 0 = every one consumed since it"),

    KEY("steps_per_print", K_LONG, steps_per_print, .def = 10, .lo = 1, .hi = INF, .flags = E,
        .help = "a step line every this many steps"),
    KEY("eval_interval", K_LONG, eval_interval, .def = 0, .lo = 0, .hi = INF, .flags = E,
        .help = "validation every this many steps; 0 = never"),
    KEY("eval_batches", K_INT, eval_batches, .def = 10, .lo = 1, .hi = INF, .flags = E,
        .help = "micro-batches per validation"),
    KEY("sample_interval", K_LONG, sample_interval, .def = 0, .lo = 0, .hi = INF, .flags = E,
        .help = "a sample every this many steps; 0 = never"),
    KEY("sample_tokens", K_INT, sample_tokens, .def = 64, .lo = 0, .hi = INF, .flags = E,
        .help = "tokens sampled at the end"),
    KEY("metrics_file", K_STR, metrics_file, .flags = E, .help = "JSON-lines metrics, one object per step"),
    KEY("wall_clock_breakdown", K_BOOL, wall_clock_breakdown, .def = 0, .flags = E,
        .help = "per-step times of each phase"),
    KEY("memory_breakdown", K_BOOL, memory_breakdown, .def = 0, .flags = E,
        .help = "memory per category with each step line"),
    KEY("print_config", K_BOOL, print_config, .def = 0, .flags = E,
        .help = "print the whole effective config at start (default: one line; `zerotrain config` prints it)"),
    KEY("trace", K_STR, trace_file, .flags = E, .help = "Chrome trace per rank"),
    KEY("trace_nvml_ms", K_INT, trace_nvml_ms, .def = 0, .lo = 0, .hi = 3600000, .flags = E,
        .help = "NVML samples into the trace every this many ms; 0 = off"),
    SEC("tensorboard"),
    KEY("tensorboard.enabled", K_BOOL, tensorboard.enabled, .def = 0, .flags = E, .help = "TensorBoard event files"),
    KEY("tensorboard.output_path", K_STR, tensorboard.output_path, .flags = E,
        .help = "folder of the event files; null = the current directory"),
    KEY("tensorboard.job_name", K_STR, tensorboard.job_name, .def_str = "DeepSpeedJobName", .flags = E,
        .help = "subfolder of output_path"),
    SEC("csv_monitor"),
    KEY("csv_monitor.enabled", K_BOOL, csv_monitor.enabled, .def = 0, .flags = E, .help = "DeepSpeed's CSV files"),
    KEY("csv_monitor.output_path", K_STR, csv_monitor.output_path, .flags = E,
        .help = "folder of the CSV files; null = the current directory"),
    KEY("csv_monitor.job_name", K_STR, csv_monitor.job_name, .def_str = "DeepSpeedJobName", .flags = E,
        .help = "subfolder of output_path"),
    NOKEY("wandb", K_NOTE, .hint = "wandb is not supported (no network for it here); use tensorboard or csv_monitor"),
    KEY("comm_timeout", K_DOUBLE, comm_timeout, .def = 600, .lo = 0, .hi = INF, .flags = E,
        .help = "seconds a collective may wait without progress before the watchdog ends the job; 0 = off"),
    KEY("seed", K_U64, seed, .def = 1337, .lo = 0, .hi = INF, .flags = E, .help = "seed for init, data, sampling"),
    KEY("device", K_ENUM, device, .def = ZT_DEVICE_AUTO, .flags = E, .ev = devices,
        .help = "auto, cpu, cuda, or sim (the simulated GPU, a test device: bf16, fp16 with fp16.enabled)"),

    /* DeepSpeed keys accepted and ignored, with a note */
    NOTE("prescale_gradients"), NOTE("gradient_predivide_factor"), NOTE("zero_allow_untested_optimizer"),
    NOTE("communication_data_type"), NOTE("dump_state"), NOTE("flops_profiler"), 
    NOTE("comms_logger"), NOTE("zero_force_ds_cpu_optimizer"),
    NOTE("steps_per_print_fn"),
    /* not DeepSpeed keys, but found in real DeepSpeed configs, which DeepSpeed ignores */
    NOTE("cuda_visible_devices"),
    /* DeepSpeed feature sections: fine while disabled */
    OFFSEC("amp", "NVIDIA Apex mixed precision is not implemented; use bf16 or fp16"),
    OFFSEC("curriculum_learning", "curriculum learning is not implemented"),
    OFFSEC("data_efficiency", "data efficiency (curriculum, random-LTD) is not implemented"),
    OFFSEC("progressive_layer_drop", "progressive layer drop is not implemented"),
    OFFSEC("eigenvalue", "eigenvalue computation is not implemented"),
    OFFSEC("quantize_training", "quantized training is not implemented"),
    OFFSEC("autotuning", "autotuning is not implemented"),
    OFFSEC("elasticity", "elastic training is not implemented"),
    OFFSEC("nebula", "Nebula checkpointing is not implemented"),
    OFFSEC("hybrid_engine", "the RLHF hybrid engine is not implemented"),
    NOKEY("sparse_gradients", K_BOOL, .flags = F_ONLY_FALSE, .hint = "sparse embedding gradients",
          .help = "only false"),
    NOKEY("disable_allgather", K_BOOL, .flags = F_ONLY_FALSE, .help = "only false"),
    NOKEY("fp32_allreduce", K_BOOL, .flags = F_ONLY_FALSE, .hint = "fp32 gradient all-reduce under bf16/fp16",
          .help = "only false"),
    /* DeepSpeed features zerotrain does not implement */
    DSKEY("sparse_attention"), DSKEY("pipeline"), DSKEY("compression_training"),
    DSKEY("load_universal_checkpoint"), DSKEY("use_node_local_storage"), DSKEY("graph_harvesting"),
    DSKEY("compile"), DSKEY("weight_quantization"), DSKEY("dataloader_drop_last"),
    DSKEY("seq_parallel_communication_data_type"), DSKEY("timers"),
    {.kind = K_END},
};

/* parameters each scheduler type takes (DeepSpeed's names) */
static const char *const sched_params_warmup[] = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps",
                                                  "warmup_type", NULL};
static const char *const sched_params_decay[] = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps",
                                                 "warmup_type", "total_num_steps", NULL};
static const char *const sched_params_cosine[] = {"total_num_steps", "warmup_min_ratio", "warmup_num_steps",
                                                  "cos_min_ratio", "warmup_type", NULL};

const char *const *zt_sched_params_of(int type) {
    switch (type) {
    case ZT_SCHED_WARMUP_LR: return sched_params_warmup;
    case ZT_SCHED_WARMUP_DECAY_LR: return sched_params_decay;
    case ZT_SCHED_WARMUP_COSINE_LR: return sched_params_cosine;
    default: return NULL;
    }
}

const zt_keydef *zt_key_find(const char *path) {
    for (const zt_keydef *d = zt_config_keys; d->kind != K_END; d++)
        if (!strcmp(d->path, path)) return d;
    return NULL;
}

const char *zt_key_leaf(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

int zt_key_is_child(const char *path, const char *parent) {
    size_t n = strlen(parent);
    if (n == 0) return strchr(path, '.') == NULL;
    return !strncmp(path, parent, n) && path[n] == '.' && !strchr(path + n + 1, '.');
}

const char *zt_enum_name(const zt_enumval *ev, int value) {
    for (; ev->name; ev++)
        if (ev->value == value) return ev->name;
    return "?";
}

/* ------------------------------------------------------------------------------------------ */
/* defaults                                                                                    */

static void *field(const zt_config *cfg, size_t off) { return (char *)cfg + off; }

void zt_key_set_default(zt_config *cfg, const zt_keydef *d) {
    if (d->off == ZT_NOF) return;
    void *f = field(cfg, d->off);
    switch (d->kind) {
    case K_INT: case K_BOOL: case K_ENUM: *(int *)f = (int)d->def; break;
    case K_LONG: *(long *)f = (long)d->def; break;
    case K_U64: *(unsigned long long *)f = (unsigned long long)d->def; break;
    case K_FLOAT: *(float *)f = (float)d->def; break;
    case K_DOUBLE: case K_RATIO: case K_BYTES: *(double *)f = d->def; break;
    case K_STR: case K_ENUMSTR:
        free(*(char **)f);
        *(char **)f = d->def_str ? zt_xstrdup(d->def_str) : NULL;
        break;
    case K_BETAS:
        *(float *)f = (float)d->def;
        *(float *)field(cfg, d->off2) = (float)d->def2;
        break;
    case K_RESUME:
        *(int *)f = (int)d->def;
        free(*(char **)field(cfg, d->off2));
        *(char **)field(cfg, d->off2) = NULL;
        break;
    default: break;
    }
}

void zt_config_defaults(zt_config *c) {
    memset(c, 0, sizeof *c);
    /* aliases (bfloat16.enabled, cpu_offload ...) come after the key they share a field with and
     * carry the same default, so the order does not matter */
    for (const zt_keydef *d = zt_config_keys; d->kind != K_END; d++) zt_key_set_default(c, d);
}

void zt_config_free(zt_config *c) {
    free(c->source_path);
    free(c->effective_text);
    free(c->auto_keys);
    free(c->set_at);
    c->set_at = NULL;
    c->source_path = c->effective_text = c->auto_keys = NULL;
    for (const zt_keydef *d = zt_config_keys; d->kind != K_END; d++) {
        if (d->off == ZT_NOF) continue;
        size_t off = d->kind == K_RESUME ? d->off2 : d->off;
        if (d->kind != K_STR && d->kind != K_ENUMSTR && d->kind != K_RESUME) continue;
        char **slot = field(c, off);
        free(*slot);
        *slot = NULL;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* effective text                                                                              */

static void put_float(zt_sb *b, float v) {
    char buf[48];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    zt_sb_printf(b, "%s", buf);
}

static void put_double(zt_sb *b, double v) {
    char buf[48];
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, sizeof buf, "%.0f", v);
    } else {
        for (int p = 1; p <= 17; p++) {
            snprintf(buf, sizeof buf, "%.*g", p, v);
            if (strtod(buf, NULL) == v) break;
        }
    }
    zt_sb_printf(b, "%s", buf);
}

static void put_str(zt_sb *b, const char *s) {
    if (!s) {
        zt_sb_printf(b, "null");
        return;
    }
    zt_sb_printf(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') zt_sb_printf(b, "\\%c", *p);
        else if (*p == '\n') zt_sb_printf(b, "\\n");
        else if (*p == '\t') zt_sb_printf(b, "\\t");
        else if (*p < 0x20 || *p == 0x7f) zt_sb_printf(b, "\\x%02x", *p);
        else zt_sb_printf(b, "%c", *p);
    }
    zt_sb_printf(b, "\"");
}

void zt_key_put_value(zt_sb *b, const zt_keydef *d, const zt_config *c) {
    const void *f = field(c, d->off);
    switch (d->tag) { /* the batch sizes: null while they are still to be derived */
    case T_TB:
        if (c->train_batch_size > 0) zt_sb_printf(b, "%ld", c->train_batch_size);
        else zt_sb_printf(b, "null");
        return;
    case T_MICRO: /* when train_batch_size is given, an unset micro/accumulation stays unset */
    case T_ACCUM: {
        int given = d->tag == T_MICRO ? c->micro_batch_given : c->grad_accum_given;
        if (given || c->train_batch_size <= 0) zt_sb_printf(b, "%d", *(const int *)f);
        else zt_sb_printf(b, "null");
        return;
    }
    default: break;
    }
    switch (d->kind) {
    case K_INT: zt_sb_printf(b, "%d", *(const int *)f); break;
    case K_BOOL:
        if ((d->flags & F_NULL_DEFAULT) && *(const int *)f == (int)d->def) zt_sb_printf(b, "null");
        else zt_sb_printf(b, "%s", *(const int *)f ? "true" : "false");
        break;
    case K_LONG: zt_sb_printf(b, "%ld", *(const long *)f); break;
    case K_U64: zt_sb_printf(b, "%llu", *(const unsigned long long *)f); break;
    case K_FLOAT: put_float(b, *(const float *)f); break;
    case K_DOUBLE: case K_BYTES: put_double(b, *(const double *)f); break;
    case K_RATIO:
        if (*(const double *)f < 0) zt_sb_printf(b, "auto");
        else put_double(b, *(const double *)f);
        break;
    case K_STR: put_str(b, *(char *const *)f); break;
    case K_ENUMSTR: zt_sb_printf(b, "%s", *(char *const *)f); break;
    case K_ENUM:
        if ((d->flags & F_NULL_DEFAULT) && *(const int *)f == (int)d->def) zt_sb_printf(b, "null");
        else zt_sb_printf(b, "%s", zt_enum_name(d->ev, *(const int *)f));
        break;
    case K_BETAS:
        zt_sb_printf(b, "[");
        put_float(b, *(const float *)f);
        zt_sb_printf(b, ", ");
        put_float(b, *(const float *)field(c, d->off2));
        zt_sb_printf(b, "]");
        break;
    case K_RESUME:
        if (*(const int *)f == ZT_RESUME_PATH) put_str(b, *(char *const *)field(c, d->off2));
        else zt_sb_printf(b, "%s", zt_enum_name(d->ev, *(const int *)f));
        break;
    default: zt_sb_printf(b, "null"); break;
    }
}

/* whether d is left out of this config's effective text */
static int skipped(const zt_keydef *d, const zt_config *c) {
    if (!(d->flags & F_EMIT)) return 1;
    if (!strncmp(d->path, "scheduler.", 10) && c->scheduler == ZT_SCHED_CONSTANT) return 1;
    if (d->tag == T_SCHED_PARAM) {
        for (const char *const *p = zt_sched_params_of(c->scheduler); *p; p++)
            if (!strcmp(*p, zt_key_leaf(d->path))) return 0;
        return 1;
    }
    return 0;
}

char *zt_config_effective_text(const zt_config *c) {
    zt_sb b = {0};
    if (c->source_path) zt_sb_printf(&b, "# zerotrain effective config (from %s)\n", c->source_path);
    else zt_sb_printf(&b, "# zerotrain effective config\n");
    char open[256] = ""; /* the section path whose header was written last */
    for (const zt_keydef *d = zt_config_keys; d->kind != K_END; d++) {
        if (d->tag == T_SCHED && c->scheduler == ZT_SCHED_CONSTANT) {
            zt_sb_printf(&b, "# scheduler: none (constant lr)\n");
            open[0] = '\0';
            continue;
        }
        if (d->kind == K_SECTION || skipped(d, c)) continue;
        /* write the headers of the sections between the open one and this key's parent */
        const char *leaf = zt_key_leaf(d->path);
        size_t parent_len = leaf > d->path ? (size_t)(leaf - d->path - 1) : 0;
        size_t common = 0; /* length of the whole components that open and the parent share */
        for (size_t i = 0;;) {
            size_t j = i, k = i;
            while (open[j] && open[j] != '.') j++;
            while (k < parent_len && d->path[k] != '.') k++;
            if (j == i || k == i || j != k || strncmp(open + i, d->path + i, j - i)) break;
            common = j;
            if (!open[j] || k == parent_len) break;
            i = j + 1;
        }
        if (common != parent_len || strlen(open) != parent_len) {
            int depth = 0;
            for (size_t i = 0; i < common; i++) depth += d->path[i] == '.';
            if (common) depth++;
            for (size_t start = common ? common + 1 : 0; start < parent_len;) {
                size_t end = start;
                while (end < parent_len && d->path[end] != '.') end++;
                zt_sb_printf(&b, "%*s%.*s:\n", 2 * depth, "", (int)(end - start), d->path + start);
                depth++;
                start = end + 1;
            }
            snprintf(open, sizeof open, "%.*s", (int)parent_len, d->path);
        }
        int depth = 0;
        for (const char *p = d->path; *p; p++) depth += *p == '.';
        zt_sb_printf(&b, "%*s%s: ", 2 * depth, "", leaf);
        zt_key_put_value(&b, d, c);
        zt_sb_printf(&b, "\n");
    }
    return b.p;
}

/* ------------------------------------------------------------------------------------------ */
/* the reference                                                                               */

static const char *kind_name(const zt_keydef *d) {
    switch (d->kind) {
    case K_INT: case K_LONG: case K_U64: return "int";
    case K_FLOAT: case K_DOUBLE: return "number";
    case K_BOOL: return d->flags & F_ONLY_FALSE ? "bool (only false)" : d->flags & F_ONLY_TRUE ? "bool (only true)" : "bool";
    case K_STR: return "string";
    case K_ENUM: case K_ENUMSTR: return "name";
    case K_BETAS: return "[number, number]";
    case K_RATIO: return "number or auto";
    case K_BYTES: return "bytes";
    case K_RESUME: return "auto, never or path";
    case K_OFF_SECTION: return "section (enabled: false only)";
    case K_NOTE: return "any (ignored, with a note)";
    case K_DSKEY: return "refused";
    default: return "";
    }
}

/* what a key accepts beyond its type: "[lo, hi]", ">= lo", the names of an enum */
static void key_range(const zt_keydef *d, char *buf, size_t cap) {
    buf[0] = '\0';
    if (d->kind == K_ENUM || d->kind == K_ENUMSTR) {
        if (d->ev) zt_enum_list(d->ev, buf, cap);
    } else if ((d->kind == K_INT || d->kind == K_LONG || d->kind == K_U64 || d->kind == K_FLOAT || d->kind == K_DOUBLE) &&
               (d->lo != 0 || d->hi != 0)) {
        if (isinf(d->hi)) snprintf(buf, cap, "%s %g", d->lo_excl ? ">" : ">=", d->lo);
        else snprintf(buf, cap, "%s%g, %g]", d->lo_excl ? "(" : "[", d->lo, d->hi);
    } else if (d->kind == K_DSKEY || d->kind == K_OFF_SECTION || (d->flags & (F_ONLY_FALSE | F_ONLY_TRUE))) {
        snprintf(buf, cap, "%s", d->hint ? d->hint : "");
    }
}

/* S as a Markdown table cell: '|' escaped */
static void md_cell(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputc('\\', f);
        fputc(*s, f);
    }
}

/* a key's default as shown: the marker's meaning where it has one, "-" where there is none */
static char *shown_default(const zt_keydef *d, const zt_config *def) {
    if (d->def_shown) return zt_xstrdup(d->def_shown);
    zt_sb b = {0};
    if (d->off != ZT_NOF) zt_key_put_value(&b, d, def);
    return b.p ? b.p : zt_xstrdup("-");
}

void zt_config_print_keys(FILE *f, int markdown) {
    zt_config def;
    zt_config_defaults(&def);
    if (markdown) fprintf(f, "| key | type | default | accepts | meaning |\n|---|---|---|---|---|\n");
    for (const zt_keydef *d = zt_config_keys; d->kind != K_END; d++) {
        if (d->kind == K_SECTION) continue;
        char *shown = shown_default(d, &def), range[256];
        key_range(d, range, sizeof range);
        const char *help = d->help ? d->help : "", *aut = d->flags & F_AUTO ? " [\"auto\" accepted]" : "";
        if (markdown) {
            const char *cells[5] = {d->path, kind_name(d), shown, range, help};
            for (int k = 0; k < 5; k++) {
                fputs(k == 0 || k == 2 ? "| `" : "| ", f);
                md_cell(f, cells[k]);
                fputs(k == 0 || k == 2 ? "` " : " ", f);
            }
            fprintf(f, "%s|\n", aut);
        } else
            fprintf(f, "%-58s %-22s %-12s %s%s\n", d->path, kind_name(d), shown, help, aut);
        free(shown);
    }
    zt_config_free(&def);
}

int zt_config_device_named(const char *name) {
    for (const zt_enumval *v = devices; v->name; v++)
        if (!strcmp(v->name, name)) return v->value;
    return -1;
}

/* a near-miss among the keys directly under section `parent` ("" = top level) */
void zt_key_suggest(const char *word, const char *parent, char *out, size_t cap) {
    const char *cands[128];
    int n = 0;
    for (const zt_keydef *d = zt_config_keys; d->kind != K_END && n < 128; d++)
        if (d->kind != K_DSKEY && zt_key_is_child(d->path, parent)) cands[n++] = zt_key_leaf(d->path);
    zt_suggest(word, cands, n, out, cap);
}

void zt_enum_suggest(const char *word, const zt_enumval *ev, char *out, size_t cap) {
    const char *cands[16];
    int n = 0;
    for (; ev->name && n < 16; ev++) cands[n++] = ev->name;
    zt_suggest(word, cands, n, out, cap);
}

/* "a, b or c" */
void zt_enum_list(const zt_enumval *ev, char *out, size_t cap) {
    int n = 0;
    while (ev[n].name) n++;
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s", i == 0 ? "" : (i == n - 1 ? " or " : ", "), ev[i].name);
    }
}
