/* engine.h — ZeRO: owns the flat parameter, gradient and optimizer-state buffers of one rank,
 * their partition across data-parallel ranks (stages 0-3), the gradient reduction (bucketed,
 * optionally overlapped with backward), parameter gathering for stage 3, the global gradient norm,
 * clipping and the AdamW step, and the byte accounting of all of it.
 *
 * Partition: the flat vector (total elements) is padded to padded_total = world * shard, shard a
 * multiple of ZT_SHARD_ALIGN; rank r owns [r*shard, (r+1)*shard) ∩ [0, total).
 *
 * Twin-Flow (optimizer offload with a ratio R): the optimizer range [opt_lo, opt_hi) is split at
 * split = opt_hi - host_n, host_n = R (opt_hi - opt_lo) with split - opt_lo a multiple of
 * ZT_TWIN_ALIGN. The fp32 master, m and v of [opt_lo, split) stay on the device (e->master, adam_m,
 * adam_v) and are updated by the device Adam; those of [split, opt_hi) live in host memory and are
 * updated by the SIMD CPU Adam, at the same time. The host part is the tail of the range because
 * backward finishes it first and the next forward needs it last. Read and write optimizer state
 * through zt_engine_state_*,
 * which know where each piece lives. */
#ifndef ZT_ENGINE_H
#define ZT_ENGINE_H

#include "model/gpt2.h"
#include "backend/backend.h"
#include "comm/comm.h"
#include "io/state_view.h" /* zt_engine_layout, zt_mem_account, zt_opt_state, zt_state_view */
#include "io/trace.h"
#include "util/util.h"

#define ZT_SHARD_ALIGN 128 /* elements: 512 B in fp32, whole cache lines and 16-byte GPU vectors */
#define ZT_TWIN_ALIGN 64   /* the Twin-Flow split point is a multiple of this many elements from opt_lo */

typedef struct zt_engine_opts {
    int stage;
    int overlap_comm;
    double reduce_bucket_size;                /* elements per reduction (a bucket never spans segments) */
    double stage3_param_persistence_threshold; /* stage 3: segments smaller than this stay gathered */
    float beta1, beta2, eps, weight_decay;
    int decay_all_params;
    int no_bias_correction; /* optimizer.params.bias_correction false: Adam uses m and v as they are */
    /* stage 3 (zero_comm.c); zero: no prefetch, no bound, no reuse */
    double stage3_prefetch_bucket_size; /* elements gathered ahead of use: 0 = no prefetch; else this / the largest
                                           segment segments ahead, at least 1, at most ZT_MAX_PREFETCH */
    double stage3_max_live_parameters;  /* bound on gathered parameter elements on the device; 0 = none; < 0 =
                                           the least working set (DeepSpeed's 0, zt_zero3_live_bound) */
    double stage3_max_reuse_distance;   /* a released segment is used again without a new gather if fewer
                                           elements than this were gathered since its release */
    zt_comm *tp_comm; /* tensor parallelism (table->tp_size > 1): the host comm of the tensor-parallel group, over
                         which the gradient norm is summed; the engine's own comm is the data-parallel group */
} zt_engine_opts;

/* Twin-Flow (zero_optimization.offload_optimizer); all zero = no offload */
typedef struct zt_engine_offload {
    int enabled;          /* device cpu */
    double ratio;         /* [0, 1]; < 0 = auto (calibrated at creation) */
    int pin_memory;       /* transfer buffers from be->host_alloc (pinned on GPUs; the session sets it there) */
    double device_memory; /* bytes: device budget for ratio auto; 0 = what the device has free */
    int host_threads;     /* CPU Adam threads; 0 = OpenMP's default */
    int overlap_step;     /* the host part's update may finish during the next step (exact: what the next
                             step uses waits for it) */
    int delayed_update;   /* the host part's update of step t lands after step t+1's backward, which uses its
                             parameters of step t-1 (ZeRO-Offload's DPU, twin_flow.c); changes results */
    int super_offload;    /* the speculative step (twin_flow.c): the host part's CPU Adam runs during backward
                             as its gradients come down, validated after it (rolled back when clipped); exact */
    double speculation_window; /* bytes of host memory for it (12 B an element); 0 = what host memory holds */
    double cpuadam_share; /* share of the host cores the CPU Adam takes (cpuadam_cores_perc); 0 or 1: all
                             (host_threads, when set, wins) */
    double step_flops;    /* this rank's forward and backward (and recompute) FLOPs a step, and its model's */
    int step_gemm[3];     /* largest GEMM, M x K x N: ratio auto times the device on it to count the overlap
                             of the speculative step (0: not known, not counted) */
    long delayed_warmup;  /* steps (optimizer steps counted from 1) updated without delay first */
    double device_reserve; /* bytes the caller allocates on the device after the engine (activations,
                              backend scratch): ratio auto leaves them free */
    double device_acts;    /* of those, the model's activations and scratch as `estimate` counts them: what
                              gradients auto counts beside the engine's buffers */
    int gradients;         /* stages 2-3 at ratio 1: ZT_GRADS_AUTO, _DEVICE or _HOST (config/config.h): keep
                              the reduced gradient shard on the device, or land it on the host bucket by bucket */
    /* ZeRO-Infinity (engine_infinity.c): the host part's optimizer states on NVMe */
    const char *nvme_path;     /* offload_optimizer.device nvme: directory of the swap file; NULL = host memory */
    double sub_group_size;     /* elements per swapped group of optimizer states */
    int buffer_count;          /* groups' staging buffers in host memory (>= 2: one in use, one read ahead) */
    /* parameter offload (stage 3): the parameter shard in host memory (cpu) or on NVMe */
    int param_device;          /* ZT_PARAM_ON_DEVICE, ZT_PARAM_ON_CPU, ZT_PARAM_ON_NVME */
    int param_pin_memory;
    const char *param_nvme_path;
    double param_buffer_size;  /* nvme: elements a staging buffer may hold (offload_param.buffer_size) */
    int param_buffer_count;    /* nvme: staging buffers (offload_param.buffer_count): one for the piece being
                                  gathered, the others for the next pieces read ahead */
    /* aio section: both swap files' requests */
    size_t aio_block_size;
    int aio_queue_depth, aio_single_submit, aio_overlap_events;
    double host_memory;   /* bytes: host budget of the host part for ratio auto; 0 = the machine's
                             available memory shared among its ranks, less host_reserve */
    double host_reserve;  /* bytes the run takes in host memory after the engine, besides the host
                             part (without a host_memory budget, ratio auto leaves them free) */
} zt_engine_offload;
enum { ZT_PARAM_ON_DEVICE, ZT_PARAM_ON_CPU, ZT_PARAM_ON_NVME };

/* Seconds spent in each part of the current step (reset by zt_engine_begin_micro(first)).
 * forward/backward are filled by the caller through zt_engine_phase. */
typedef struct zt_engine_timing {
    double forward, backward;
    double reduce_scatter;  /* waiting on gradient reductions (stage 0: all-reduce) */
    double grad_norm;       /* sum of squares + its all-reduce */
    double host_adam, device_adam;
    double d2h, h2d;        /* host part: gradients down, updated parameters up */
    double allgather;       /* stages 1-2: updated params; stage 3: waiting on segment gathers */
    double optimizer;       /* wall time of the split update (host and device parts together) */
    double stage3_gathers, stage3_gathers_ahead; /* counts: segments gathered, and of them before their use */
    double host_idle, device_idle; /* within that wall time: CPU Adam lane idle, device side idle;
                                      with overlap_step, device_idle is the time this step waited for
                                      the host part (in the update, or for its parameters later) */
    int update_mode;        /* ZT_UPDATE_*: how the host part's update ran (the speculative step) */
    int rolled_back;        /* speculated, and the speculation was forgotten (clipped, or the step skipped) */
} zt_engine_timing;
enum { ZT_UPDATE_PLAIN, ZT_UPDATE_VALIDATED, ZT_UPDATE_SPECULATED }; /* twin_flow.h's TWIN_MODE_* */

/* The engine is opaque outside src/engine/ (engine_internal.h has it). */
typedef struct zt_engine zt_engine;

/* Stage 3's gather buffers for a segment table, as the engine sizes them (elements): the whole
 * embedding's own buffer (0 when it is in row blocks, which rotate with the rest), the largest
 * rotating segment, the residents (below stage3_param_persistence_threshold) and the prefetch depth
 * (one rotating buffer each, besides the one in use). Also for estimates. */
typedef struct zt_stage3_plan { size_t embed, largest, residents; int depth; } zt_stage3_plan;
zt_stage3_plan zt_engine_stage3_plan(const zt_param_table *table, const zt_engine_opts *opt);

/* Stage 3 with a stage3_max_live_parameters bound that cannot hold the whole tied embedding beside
 * the largest block(s): the vocabulary rows per embedding segment that make it fit
 * (zt_param_table_split_embedding, before zt_engine_open); 0 = keep the embedding one segment. */
int zt_engine_embedding_rows(const zt_param_table *table, const zt_engine_opts *opt);

/* Where the engine's first parameter values come from: fill writes the fp32 values of flat elements
 * [off, off + n) of the table into dst[0 .. n) (GPT-2's init of a range, or imported weights). The
 * engine asks for them chunk by chunk as it fills its device and host parts and swap files, so no
 * whole fp32 vector need exist; it does not ask when the run's clock only costs the work (predict). */
typedef struct zt_engine_init {
    void (*fill)(void *ctx, size_t off, size_t n, float *dst);
    void *ctx;
} zt_engine_init;
/* a source reading a whole fp32 vector of the table's length (imported weights); it must outlive the open */
zt_engine_init zt_engine_init_from_vector(const float *values);

/* Creates the engine: allocates the buffers and initialises parameters from init (every rank passes
 * the same values). off may be NULL (no optimizer offload); ratio auto calibrates here (collective:
 * every rank must call it). NULL with err set on failure. */
zt_engine *zt_engine_open(const zt_backend *be, zt_comm *comm, const zt_param_table *table, const zt_engine_opts *opt,
                          const zt_engine_offload *off, const zt_engine_init *init, zt_err *err);
void zt_engine_close(zt_engine *e);

const zt_engine_layout *zt_engine_layout_of(const zt_engine *e);
const zt_backend *zt_engine_backend(const zt_engine *e);
zt_comm *zt_engine_comm(const zt_engine *e);
const zt_param_table *zt_engine_table(const zt_engine *e);
/* Optimizer steps taken (Adam's t), saved and restored by checkpoints. */
long zt_engine_steps(const zt_engine *e);
void zt_engine_set_steps(zt_engine *e, long t);
/* This rank's compute-dtype parameter buffer: the full padded vector (stages 0-2) or its shard
 * (stage 3); for loaders that fill it in place. */
void *zt_engine_params(zt_engine *e);
/* Whether that buffer is host memory although the backend's is not (offload_param). */
int zt_engine_params_on_host(const zt_engine *e);
/* Writes this rank's compute-dtype parameters of flat elements [flat_off, flat_off + n) from fp32
 * host values, converting where the parameters live (for loaders). */
void zt_engine_params_write_f32(zt_engine *e, size_t flat_off, const float *src, size_t n);
/* Stages 0-1: the full gradient vector of the last backward (compute dtype); NULL at stages 2-3. */
const void *zt_engine_full_grads(const zt_engine *e);
/* Seconds waited on collectives in the current step; the memory accounting. */
double zt_engine_comm_seconds(const zt_engine *e);
const zt_mem_account *zt_engine_memory(const zt_engine *e);
/* The model's activation bytes, counted with the engine's memory (allocated by the model): on the device,
 * and in host memory (cpu_checkpointing's kept block inputs). */
void zt_engine_count_activations(zt_engine *e, size_t device_bytes, size_t host_bytes);

/* Starts a Chrome trace of this rank (trace.h: PATH with ".rankN" inserted); closed by close. While
 * it is open the engine is the backend's device observer (backend.h): every host<->device copy, the
 * compute stream's busy time and device memory in use go to the trace as they happen, and are
 * counted for the two calls below (0 without a trace). */
int zt_engine_open_trace(zt_engine *e, const char *path, zt_err *err);
/* The NVML sampler (io/trace_nvml.h, config key trace_nvml_ms) into the open trace every period_ms;
 * where NVML cannot be loaded or has no GPU, one warning line (node-local rank 0) and the run goes on
 * without it: the sampler only observes, and the engine's own view is in the trace either way. */
void zt_engine_trace_nvml(zt_engine *e, int period_ms);
/* Bytes the device copied since the trace opened: [0] host to device, [1] device to host. */
void zt_engine_link_bytes(zt_engine *e, double out[2]);
/* The allocator's most device bytes in use since the last call (then the count starts again from
 * what is in use now); 0 without a trace or on the CPU backend. */
double zt_engine_device_peak(zt_engine *e);
/* Marks optimizer step `step` as finished, [t0, t1], in the trace with what it moved and its device
 * peak (args), and writes the busy intervals still held: a run killed later keeps the step whole. */
void zt_engine_trace_step(zt_engine *e, long step, double t0, double t1, const double link_bytes[2], double dev_peak);

/* The parameter source the model runs on. */
zt_param_source zt_engine_param_source(zt_engine *e);

/* Before an optimizer step's first micro-step: the learning rate and loss scale its update will use,
 * so that with offload_optimizer.super_offload the host part's update may start during backward,
 * assuming the norm needs no clipping (validated at the step, rolled back when it does). Optional:
 * a step not planned validates first. */
void zt_engine_plan_step(zt_engine *e, float lr, double loss_scale);
/* The speculative step's counts since the engine opened (the last step's own mode is in its timing):
 * steps that speculated and of them those rolled back; this rank's host-part elements updated
 * speculatively before a verdict and of them those accepted (counted once each update's lanes end). */
typedef struct zt_engine_speculation {
    long speculated_steps, rollbacks;
    double kept_elems, accepted_elems;
} zt_engine_speculation;
zt_engine_speculation zt_engine_speculation_counts(const zt_engine *e);
/* Call before each micro-step's forward: first = first micro-step of an optimizer step (zeroes
 * gradients), last = last one (stages 0-1 reduce then). */
void zt_engine_begin_micro(zt_engine *e, int first, int last);
/* After the last micro-step's backward: waits for reductions, computes the global gradient norm,
 * clips to max_norm (0 = off) and takes the AdamW step with learning rate lr; stages 1-2 then
 * all-gather the updated parameters. Returns the global gradient norm before clipping. */
double zt_engine_step(zt_engine *e, float lr, float max_norm);
/* Waits for the gradient reductions in flight (the step does it too); after it grad_shard is final. */
void zt_engine_finish_reductions(zt_engine *e);
/* The same for gradients of a loss multiplied by loss_scale (fp16 loss scaling): the norm returned
 * and clipped is that of the unscaled gradients; a non-finite norm (overflow) skips the update
 * (*skipped = 1, nothing changes, the norm is returned). */
double zt_engine_step_scaled(zt_engine *e, float lr, float max_norm, double loss_scale, int *skipped);

/* Ends an optimizer step without an update (the divergence guard skips it): waits for the
 * reductions and the last update's host part as the step would; parameters and optimizer states
 * stay as they were. */
void zt_engine_skip_step(zt_engine *e);
/* on: the step computes the global norm before any update starts on every path (not only with loss
 * scaling), and a non-finite norm skips the update as an fp16 overflow does. Costs the overlap of
 * the first host transfers with the norm (Twin-Flow). */
void zt_engine_set_skip_nonfinite(zt_engine *e, int on);
/* The rank's trace (NULL without one): train.c checks it for write errors after each step. */
zt_trace *zt_engine_trace(zt_engine *e);

/* Test hook (util/test_hooks.h): puts an inf into this rank's reduced gradients, as an fp16
 * overflow would, so that the next step_scaled skips. Call after the last micro-step. */
void zt_engine_inject_overflow(zt_engine *e);

/* Copies the full fp32 parameter vector to host (gathering shards when sharded): for export/eval. */
void zt_engine_gather_params(zt_engine *e, float *out_f32);
/* Expected model-state bytes per rank from the ZeRO formulas for this backend (see engine.c). */
size_t zt_engine_model_state_formula(const zt_engine *e);
size_t zt_engine_model_state_bytes(const zt_engine *e);
/* This rank's NVMe swap traffic since the start (all 0 without): bytes, and seconds with a read or a
 * write in flight (the swap's throughput is bytes over those seconds). */
typedef struct zt_engine_nvme {
    double bytes_read, bytes_written, read_seconds, write_seconds;
    /* offload_param nvme: pieces fetched for gathers, reads issued ahead of their gather, fetches
     * that found their piece read ahead, and seconds the gathers waited for their reads */
    double param_pieces, param_read_ahead, param_hits, param_wait_seconds;
} zt_engine_nvme;
void zt_engine_nvme_stats(const zt_engine *e, zt_engine_nvme *out);
/* Prints device and host bytes per category and the Twin-Flow split. */
void zt_engine_print_memory(const zt_engine *e, size_t act_bytes);

/* Optimizer state of [opt_lo + off, opt_lo + off + n) wherever it lives (host part, device part or
 * both), through an fp32 host buffer. On fp32 backends writing the master also writes the
 * parameters (they alias, or are copied to the device params). */
void zt_engine_state_read(zt_engine *e, zt_opt_state which, size_t off, size_t n, float *host_out);
void zt_engine_state_write(zt_engine *e, zt_opt_state which, size_t off, size_t n, const float *host_in);
/* The buffer that holds optimizer state element off (as above) and the n_out elements after it in
 * the same buffer; *host_memory says whether it is host memory (the Twin-Flow host part, or a
 * backend whose device memory is host memory) or device memory of e->be. For readers and writers
 * that can work in place (checkpoints). */
float *zt_engine_state_span(zt_engine *e, zt_opt_state which, size_t off, size_t *n_out, int *host_memory);

/* The engine's model states as checkpoints see them (io/state_view.h): waits for the host part's
 * pending update, then fills the engine's one view (its step count and parameter buffer as they are
 * now) and returns it; valid until the engine closes, its facts until the next step. */
zt_state_view *zt_engine_state_view(zt_engine *e);

/* Records a caller's phase (forward, backward, ...) [t0, t1] (zt_now() seconds) in the trace and, for
 * "forward"/"backward", in e->timing. */
void zt_engine_phase(zt_engine *e, const char *name, double t0, double t1);
/* The last step's timing. */
const zt_engine_timing *zt_engine_timing_of(const zt_engine *e);
/* One line with e->timing of the last step (ms), via zt_info. */
void zt_engine_print_timing(const zt_engine *e);

#endif
