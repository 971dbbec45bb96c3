/* session.c — see session.h */
#include "engine/session.h"
#include "engine/zero_formula.h"

#include <stdlib.h>
#include <string.h>

#include "comm/comm_nccl.h"
#include "io/hf.h"
#include "comm/fail_together.h"
#include "util/clock.h"

const zt_backend *zt_pick_backend(const zt_config *cfg, zt_err *err) {
    if (cfg->device == ZT_DEVICE_CPU) return zt_backend_cpu();
    const char *why = NULL;
    /* GPUs compute in bf16 unless fp16.enabled asks for fp16 (with dynamic loss scaling) */
    zt_dtype dtype = cfg->fp16_enabled ? ZT_F16 : ZT_BF16;
    if (cfg->device == ZT_DEVICE_SIM) {
        const zt_backend *sim = zt_backend_sim(dtype, &why);
        if (!sim) zt_fail(err, "device: sim: %s", why);
        return sim;
    }
    const zt_backend *be = zt_backend_cuda(dtype, &why);
    if (be) return be;
    if (cfg->device == ZT_DEVICE_CUDA) {
        zt_fail(err, "device: cuda requested but unavailable: %s", why ? why : "unknown reason");
        return NULL;
    }
    return zt_backend_cpu();
}

zt_act_ckpt zt_act_ckpt_of(const zt_config *cfg) {
    return (zt_act_ckpt){cfg->ckpt_enabled, cfg->ckpt_number_checkpoints, cfg->ckpt_cpu, cfg->ckpt_partition,
                         cfg->tiled_in_splits};
}

zt_gpt2_shape zt_shape_from_config(const zt_config *cfg) {
    zt_gpt2_shape s = {.n_layer = cfg->n_layer, .n_head = cfg->n_head, .n_embd = cfg->n_embd,
                       .vocab_size = cfg->vocab_size, .n_positions = cfg->n_positions};
    if (cfg->model_type != ZT_MODEL_GPT2) {
        s.model_type = (zt_model_type)cfg->model_type;
        s.n_kv_head = cfg->n_kv_head;
        s.intermediate = cfg->intermediate_size;
        s.untied = !(cfg->tie_word_embeddings > 0); /* null: Hugging Face's default for the family, untied */
        s.qkv_bias = cfg->attention_bias || s.model_type == ZT_MODEL_QWEN2;
        s.o_bias = cfg->attention_bias;
        s.mlp_bias = cfg->mlp_bias;
        s.rope_theta = cfg->rope_theta;
        s.rms_norm_eps = cfg->rms_norm_eps;
        s.sliding_window = cfg->sliding_window;
        if (cfg->rope_type == 1) {
            s.rope_factor = cfg->rope_factor;
            s.rope_low_freq_factor = cfg->rope_low_freq_factor;
            s.rope_high_freq_factor = cfg->rope_high_freq_factor;
            s.rope_original_max = cfg->rope_original_max;
        }
    }
    s.padded_vocab = (int)(((int64_t)cfg->vocab_size + 127) / 128 * 128); /* past INT_MAX: the table refuses the shape */
    return s;
}

void zt_shape_to_config(const zt_gpt2_shape *s, zt_config *cfg) {
    cfg->n_layer = s->n_layer;
    cfg->n_head = s->n_head;
    cfg->n_embd = s->n_embd;
    cfg->vocab_size = s->vocab_size;
    cfg->n_positions = s->n_positions;
    cfg->model_type = (int)s->model_type;
    if (!zt_shape_is_llama(s)) return;
    cfg->n_kv_head = zt_shape_kv_heads(s);
    cfg->intermediate_size = s->intermediate;
    cfg->tie_word_embeddings = !s->untied;
    /* Qwen2's q/k/v biases come with the family; attention_bias is Llama's q/k/v and o_proj together */
    cfg->attention_bias = s->o_bias;
    cfg->mlp_bias = s->mlp_bias;
    cfg->rope_theta = s->rope_theta;
    cfg->rms_norm_eps = s->rms_norm_eps;
    cfg->sliding_window = s->sliding_window;
    cfg->rope_type = s->rope_factor > 0;
    if (s->rope_factor > 0) {
        cfg->rope_factor = s->rope_factor;
        cfg->rope_low_freq_factor = s->rope_low_freq_factor;
        cfg->rope_high_freq_factor = s->rope_high_freq_factor;
        cfg->rope_original_max = s->rope_original_max;
    }
}

/* Device buffers never reach MPI (Debian's Open MPI is not CUDA-aware): a group of one rank needs no
 * comm at all; larger groups use NCCL, or — when NCCL is absent or refuses on any rank (the simulated
 * device, several ranks on one GPU) — collectives staged through host memory. Collective over every
 * rank (comm): color names the group, of group_size ranks, ordered by world rank. */
static zt_comm *open_device_comm(zt_session *s, int color, int group_size, const char *what, zt_err *err) {
    zt_comm *comm = s->comm, *c;
    if (group_size == 1) return zt_comm_device_local(s->be);
    zt_err why = {{0}};
    c = zt_comm_nccl_group(s->be, color, comm->rank, &why);
    if (comm->agree_max(comm, c ? 0 : 1) == 0) return c;
    if (c) c->destroy(c);
    c = zt_comm_staged_group(s->be, color, comm->rank, err);
    if (zt_agree(comm, c ? 0 : -1, err)) {
        if (c) c->destroy(c);
        return NULL;
    }
    zt_info("%s device comm: host-staged over MPI (no NCCL%s%s)", what, why.msg[0] ? ": " : "", why.msg);
    return c;
}

/* The data- and tensor-parallel groups (see zt_session): their host comms, and their device comms
 * where device memory is not host memory. */
static int open_groups(zt_session *s, zt_err *err) {
    zt_comm *comm = s->comm;
    int tp = s->cfg->tp_size > 1 ? s->cfg->tp_size : 1;
    if (comm->world % tp) return zt_fail(err, "tensor_parallel.tp_size %d does not divide the %d ranks", tp, comm->world);
    s->tp_size = tp;
    s->tp_rank = comm->rank % tp;
    s->dp_rank = comm->rank / tp;
    s->dp_world = comm->world / tp;
    s->dp_comm = comm;
    if (tp > 1) {
        s->dp_comm = zt_comm_mpi_group(s->be, s->tp_rank, comm->rank, err);
        s->tp_comm = s->dp_comm ? zt_comm_mpi_group(s->be, s->dp_rank, comm->rank, err) : NULL;
        if (zt_agree(comm, s->dp_comm && s->tp_comm ? 0 : -1, err)) return -1;
    }
    if (s->be->memory_is_host) return 0;
    /* a machine with a device per rank gives each rank its own: two on one would slow both, and
     * NCCL refuses them (the device comms would drop to host staging without saying why) */
    if (zt_comm_check_devices(comm, s->be->device, s->be->device_count, err)) return -1;
    if (!(s->device_comm = open_device_comm(s, s->tp_rank, s->dp_world, "data-parallel", err))) return -1;
    if (tp > 1 && !(s->tp_device_comm = open_device_comm(s, s->dp_rank, tp, "tensor-parallel", err))) return -1;
    /* a stage-3 prefetch or an overlapped reduce-scatter on one may be in flight during a block's
     * all-reduce on the other: they must run in one order (comm_order.c). The same on every rank. */
    return zt_comm_check_order(s->device_comm, s->tp_device_comm, "data-parallel and tensor-parallel", err);
}

static void close_groups(zt_session *s) {
    zt_comm *owned[] = {s->device_comm, s->tp_device_comm, s->tp_comm, s->dp_comm != s->comm ? s->dp_comm : NULL};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        if (owned[i]) owned[i]->destroy(owned[i]);
    s->device_comm = s->tp_device_comm = s->tp_comm = s->dp_comm = NULL;
}

/* GPT-2's init of a range of this rank's table: the engine's source of first values when no weights
 * are given, so no whole fp32 vector is built */
typedef struct gpt2_init {
    const zt_param_table *table;
    const zt_gpt2_shape *shape;
    uint64_t seed;
} gpt2_init;

static void gpt2_init_fill(void *ctx, size_t off, size_t n, float *dst) {
    const gpt2_init *g = ctx;
    zt_gpt2_init_range(g->table, g->shape, g->seed, off, n, dst);
}

int zt_session_open(zt_session *s, const zt_config *cfg, zt_comm *comm, const float *init_f32, int B, int T,
                    zt_err *err) {
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->comm = comm;
    s->be = zt_pick_backend(cfg, err);
    if (!s->be) return -1;
    static const char *const dtype_names[] = {[ZT_F32] = "fp32", [ZT_BF16] = "bf16", [ZT_F16] = "fp16"};
    if (zt_config_check_grad_accum(cfg, s->be->name, dtype_names[s->be->compute_dtype], err)) return -1;
    s->shape = zt_shape_from_config(cfg);
    int gpu = s->be->compute_dtype != ZT_F32;
    if (open_groups(s, err) || zt_gpt2_param_table(&s->whole, &s->shape, err) ||
        zt_gpt2_param_table_tp(&s->table, &s->shape, s->tp_rank, s->tp_size, err)) {
        zt_session_close(s);
        return -1;
    }
    /* the model's activation and scratch sizes, known before any memory is taken: ratio auto keeps
     * room for them (plus 2 GiB for cuBLASLt's workspace and the CUDA backend's own scratch) */
    zt_gpt2 plan;
    if (zt_gpt2_plan(&plan, &s->shape, B, T, zt_act_ckpt_of(cfg), s->tp_size, zt_dtype_size(s->be->compute_dtype),
                     err)) {
        zt_session_close(s);
        return -1;
    }
    double reserve = (double)(plan.act_bytes + plan.scratch_bytes) + (gpu ? 2.0 * 1073741824.0 : 0.0);
    float *init = NULL;
    if (!init_f32 && cfg->init_from) { /* fine-tuning a Hugging Face GPT-2: its whole vector */
        /* address space only when the run's clock only costs the work (predict): nothing reads it then */
        init = zt_clock_costs_only() ? zt_clock_bulk_alloc(s->whole.total * sizeof(float))
                                     : zt_xmalloc(s->whole.total * sizeof(float)); /* filled below: no zeroing */
        if (!init) {
            zt_session_close(s);
            return zt_fail(err, "out of host memory for the %zu-element init vector", s->whole.total);
        }
        if (zt_hf_init_from(cfg->init_from, &s->shape, &s->whole, init, err)) {
            zt_clock_bulk_free(init);
            zt_session_close(s);
            return -1;
        }
        init_f32 = init;
    }
    float *part = NULL; /* this rank's part of the whole vector under tensor parallelism */
    if (init_f32 && s->tp_size > 1) {
        part = zt_xmalloc(s->table.total * sizeof(float));
        zt_tp_take_vector(&s->table, &s->whole, init_f32, part);
        init_f32 = part;
    }
    zt_engine_opts eo = {cfg->zero_stage, cfg->overlap_comm, cfg->reduce_bucket_size,
                         cfg->stage3_param_persistence_threshold, cfg->beta1, cfg->beta2, cfg->eps,
                         cfg->weight_decay, cfg->decay_all_params, !cfg->bias_correction,
                         cfg->stage3_prefetch_bucket_size, zt_zero3_live_bound(cfg->stage3_max_live_parameters),
                         cfg->stage3_max_reuse_distance, s->tp_comm};
    /* host memory the run takes after the engine, kept free by ratio auto when host_memory is not set:
     * the activations and scratch where device memory is host memory, and 1 GiB for checkpoint
     * staging (64 MiB), MPI and the runtimes (the data, and imported weights, are in use already) */
    double host_reserve = (gpu ? 0.0 : (double)(plan.act_bytes + plan.scratch_bytes)) + 1073741824.0;
    if (cfg->ckpt_async_save && cfg->checkpoint_dir) /* the asynchronous saves' snapshot of the shard */
        host_reserve += zt_async_save_staging_bytes(zt_zero_shard(s->table.total, s->dp_world, ZT_SHARD_ALIGN));
    zt_param_table_tile_linears(&s->table, cfg->tiled_in_splits);
    zt_param_table_split_embedding(&s->table, zt_engine_embedding_rows(&s->table, &eo));
    /* On a GPU the offload buffers are pinned whatever pin_memory says: copy_async, copy_ahead and
     * transfer from pageable memory are staged by the driver and may wait for the device, so a stage-3
     * prefetch would drain the compute stream and Twin-Flow's D2H and H2D lose their overlap. The
     * simulated GPU stops such a copy (backend_sim.c); pin_memory keeps its meaning on the CPU. */
    int pin = !s->be->memory_is_host;
    zt_engine_offload off = {.enabled = cfg->offload_device != ZT_OFFLOAD_NONE, .ratio = cfg->offload_ratio,
                             .pin_memory = cfg->offload_pin_memory || pin, .device_memory = cfg->offload_device_memory,
                             .device_reserve = reserve, .device_acts = (double)(plan.act_bytes + plan.scratch_bytes),
                             .gradients = cfg->offload_gradients, .overlap_step = cfg->offload_overlap_step,
                             .delayed_update = cfg->offload_delayed_update, .delayed_warmup = cfg->offload_delayed_warmup,
                             .super_offload = cfg->offload_super, .speculation_window = cfg->offload_speculation_window,
                             .cpuadam_share = cfg->offload_cpuadam_cores_perc,
                             /* the step's compute, which the speculative step overlaps the CPU Adam with
                              * (ratio auto counts it): 6 FLOPs a parameter a token, 8 with recompute */
                             .step_flops = zt_gpt2_flops_per_token(&s->shape, T) * (double)B * T *
                                           cfg->gradient_accumulation_steps * (zt_act_ckpt_of(cfg).enabled ? 8.0 / 6.0 : 1.0) /
                                           s->tp_size,
                             .step_gemm = {B * T, s->shape.n_embd, 4 * s->shape.n_embd / s->tp_size},
                             .host_memory = cfg->offload_host_memory, .host_reserve = host_reserve};
    if (cfg->offload_device == ZT_OFFLOAD_NVME) {
        off.nvme_path = cfg->offload_nvme_path;
        off.sub_group_size = cfg->sub_group_size;
        off.buffer_count = cfg->offload_buffer_count;
    }
    off.param_device = cfg->offload_param_device == ZT_OFFLOAD_CPU    ? ZT_PARAM_ON_CPU
                       : cfg->offload_param_device == ZT_OFFLOAD_NVME ? ZT_PARAM_ON_NVME
                                                                      : ZT_PARAM_ON_DEVICE;
    off.param_pin_memory = cfg->offload_param_pin_memory || pin;
    off.param_nvme_path = cfg->offload_param_nvme_path;
    off.param_buffer_size = cfg->offload_param_buffer_size;
    off.param_buffer_count = cfg->offload_param_buffer_count;
    off.aio_block_size = (size_t)cfg->aio_block_size;
    off.aio_queue_depth = cfg->aio_queue_depth;
    off.aio_single_submit = cfg->aio_single_submit;
    off.aio_overlap_events = cfg->aio_overlap_events;
    gpt2_init model_init = {&s->table, &s->shape, cfg->seed};
    zt_engine_init first = init_f32 ? zt_engine_init_from_vector(init_f32) : (zt_engine_init){gpt2_init_fill, &model_init};
    s->engine = zt_engine_open(s->be, s->device_comm ? s->device_comm : s->dp_comm, &s->table, &eo, &off, &first, err);
    zt_clock_bulk_free(init);
    free(part);
    if (!s->engine) {
        zt_session_close(s);
        return -1;
    }
    s->src = zt_engine_param_source(s->engine);
    zt_comm *tp = s->tp_device_comm ? s->tp_device_comm : s->tp_comm;
    if (zt_gpt2_create(&s->model, s->be, &s->shape, &s->table, tp, B, T, zt_act_ckpt_of(cfg), err)) {
        zt_session_close(s);
        return -1;
    }
    zt_engine_count_activations(s->engine, s->model.act_bytes, s->model.act_host_bytes);
    return 0;
}

void zt_session_close(zt_session *s) {
    zt_gpt2_destroy(&s->model);
    if (s->engine) zt_engine_close(s->engine);
    s->engine = NULL;
    zt_param_table_free(&s->table);
    zt_param_table_free(&s->whole);
    close_groups(s);
}
