/* backend.h — the op table every compute backend implements (CPU in backend_cpu.c, CUDA in
 * cuda/, the simulated GPU in backend_sim.c). The model, the engine and the commands call only these entries,
 * never a backend directly: no #ifdef for backends outside the backends themselves.
 *
 * Memory: "device" buffers come from alloc() and are only touched through the table; on the
 * CPU backend they are ordinary host memory. Tensors named `void *` are in the backend's
 * compute dtype (fp32 on the CPU, bf16/fp16 on GPUs): parameters as used by forward/backward,
 * activations and gradients. Tensors named `float *` are always fp32 (optimizer master weights
 * and moments, LayerNorm statistics, losses). Layout conventions follow Hugging Face GPT-2
 * (Conv1D: a weight is [in, out], y = x W + b). All tensors are row-major. */
#ifndef ZT_BACKEND_H
#define ZT_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "backend/opmath.h"

typedef enum { ZT_F32 = 0, ZT_BF16 = 1, ZT_F16 = 2 } zt_dtype;
static inline size_t zt_dtype_size(zt_dtype t) { return t == ZT_F32 ? 4 : 2; }

typedef enum { ZT_H2D = 0, ZT_D2H = 1, ZT_D2D = 2 } zt_copy_kind;

typedef struct zt_backend {
    const char *name;        /* "cpu", "cuda", "sim": for messages; test the properties below, not the name */
    zt_dtype compute_dtype;  /* dtype of params/activations/grads in forward and backward */
    int memory_is_host;      /* "device" memory is ordinary host memory (the CPU backend) */
    /* the device this process opened, of the device_count its machine has: the GPU's ordinal, the
     * simulated GPU's of ZEROTRAIN_SIM_DEVICES (zt_node_local_rank() modulo the count); 0 of 0 on the CPU */
    int device, device_count;

    /* ---- memory ---- */
    void *(*alloc)(size_t bytes);                 /* zero-filled device memory, NULL on failure */
    void (*free)(void *ptr);
    void *(*host_alloc)(size_t bytes);            /* zero-filled host memory for transfers (pinned on GPUs) */
    void (*host_free)(void *ptr);
    void (*memset_zero)(void *ptr, size_t bytes);
    /* ordered after all work queued so far; H2D/D2H return once the host buffer may be reused/read */
    void (*copy)(void *dst, const void *src, size_t bytes, zt_copy_kind kind);
    /* H2D or D2H ordered after all work queued so far, like copy(), but returning at once: the copy
     * runs when the device reaches it, so the host buffer must stay unchanged (H2D) or unread (D2H)
     * until the next synchronize() or blocking copy returns; pinned (host_alloc) memory on GPUs keeps
     * it asynchronous. Lets a stage-3 gather of an offloaded parameter piece, or an activation
     * checkpoint going to or from host memory, be queued without draining the device. */
    void (*copy_async)(void *dst, const void *src, size_t bytes, zt_copy_kind kind);
    /* H2D or D2H ordered after the work queued so far, like copy_async, but on a side stream of its own:
     * it runs while the compute work queued after it does. wait_ahead() orders the device work queued
     * after it after every copy_ahead so far (on the device only: it returns at once); until then no
     * device work may touch the copies' buffers. The host may touch a copy_ahead's host buffer only
     * after the next synchronize() returns, which waits for every copy_ahead so far as well. For the
     * activation checkpoints that come back during the previous segment's backward. */
    void (*copy_ahead)(void *dst, const void *src, size_t bytes, zt_copy_kind kind);
    void (*wait_ahead)(void);
    /* H2D or D2H on the backend's own stream for that direction (the CUDA backend has one each), so
     * it runs while compute work (the device part of Twin-Flow's Adam) does and the two directions
     * run at the same time. It is NOT ordered after queued compute work: the caller synchronize()s
     * after the source was last written on the device and keeps the device from touching dst
     * until it returns. Returns once the copy is complete, like copy(); safe from any thread that
     * called bind_thread. */
    void (*transfer)(void *dst, const void *src, size_t bytes, zt_copy_kind kind);
    /* A point in the compute stream's queue (mark: the work queued on it so far, from the thread that
     * queues compute work) and a wait for it from any thread that called bind_thread (wait_mark):
     * returns once the stream has run the work queued before the mark, so a transfer() after it
     * reads what that work wrote, while the stream goes on with what was queued since (synchronize()
     * would wait for that too). Twin-Flow's D2H lane brings each bucket's final gradients down this
     * way while backward goes on. Where queued work is done when queued (the CPU backend) every mark
     * has passed. */
    unsigned long long (*mark)(void);
    void (*wait_mark)(unsigned long long mark);
    /* returns once all work queued so far has run: the compute stream's and every copy_ahead's (not
     * transfer(), which returns complete) */
    void (*synchronize)(void);
    /* Makes the calling thread use this backend's device. Threads start on the default device (a
     * CUDA thread's current device is GPU 0 until it sets one, whichever GPU the backend opened), so
     * every thread other than the one that created the backend calls it first, before any other
     * entry: the Twin-Flow copy lanes, ratio auto's calibration lanes. Optional: a backend whose
     * threads need nothing may leave it NULL (the CPU backend's does nothing); callers go through
     * zt_backend_bind_thread, which checks. */
    void (*bind_thread)(void);
    /* free and total device memory in bytes; 0 and 0 where device memory is host memory (CPU) */
    void (*mem_info)(size_t *free_bytes, size_t *total_bytes);
    /* fp32 <-> compute dtype conversion on the device (identity copy on the CPU backend) */
    void (*to_compute)(void *dst, const float *src, size_t n);
    void (*to_f32)(float *dst, const void *src, size_t n);

    /* ---- model ops (N = B*T rows) ---- */
    /* out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:], over one block of vocabulary rows at a time (stage 3
     * may gather the embedding in row blocks): wte holds rows [row_lo, row_hi) (wte[0] is row row_lo).
     * Tokens in the block: out = wte row (+ wpe[t] if wpe); other tokens: out += wpe[t] if wpe, else
     * untouched. Blocks called in turn, wpe with the last, give the whole-table result exactly. */
    void (*embedding_forward)(void *out, const int *tokens, const void *wte, int row_lo, int row_hi, const void *wpe,
                              int B, int T, int C);
    /* dwte[tokens[b,t] - row_lo,:] += dout[b,t,:] for tokens in [row_lo, row_hi) (if dwte);
     * dwpe[t,:] += sum_b dout[b,t,:] (if dwpe)  (accumulates) */
    void (*embedding_backward)(void *dwte, int row_lo, int row_hi, void *dwpe, const void *dout, const int *tokens,
                               int B, int T, int C);
    /* out = LayerNorm(inp) * w + b; saves per-row mean and rstd for backward */
    void (*layernorm_forward)(void *out, float *mean, float *rstd, const void *inp, const void *w, const void *b, int N, int C);
    /* dinp += ..., dw += ..., db += ...  (all accumulate) */
    void (*layernorm_backward)(void *dinp, void *dw, void *db, const void *dout, const void *inp, const void *w,
                               const float *mean, const float *rstd, int N, int C);
    /* out[N,OC] = inp[N,C] W + bias, W is [C,OC] (Conv1D); with w_transposed, W is stored [OC,C]
     * (the tied LM head uses wte [V,C]). bias may be NULL. ldout is out's row stride (>= OC). The
     * matmuls write (and in backward read) only columns [0, OC) of out's (dout's) rows: out may be a
     * block of columns inside wider rows (stage 3's LM head in row blocks, out at column lo). */
    void (*matmul_forward)(void *out, const void *inp, const void *w, const void *bias, int N, int C, int OC,
                           int w_transposed, int ldout);
    /* dinp = dout W^T (overwrites, skipped if NULL); dw += inp^T dout; dbias += colsum(dout) (if non-NULL) */
    void (*matmul_backward)(void *dinp, void *dw, void *dbias, const void *dout, const void *inp, const void *w,
                            int N, int C, int OC, int w_transposed, int lddout);
    /* the MLP's up-projection with its GELU (W [C,OC], row stride OC): pre = inp W + bias (kept for
     * backward), out = gelu(pre); the CUDA backend fuses the GELU into the GEMM's epilogue */
    void (*matmul_forward_gelu)(void *out, void *pre, const void *inp, const void *w, const void *bias, int N, int C,
                                int OC);
    /* matmul_backward (W [C,OC], not transposed) of a layer whose input was inp = gelu(gelu_pre), with
     * the GELU's backward folded in: dinp = gelu'(gelu_pre) * (dout W^T) (overwrites) */
    void (*matmul_backward_dgelu)(void *dinp, void *dw, void *dbias, const void *dout, const void *inp, const void *w,
                                  const void *gelu_pre, int N, int C, int OC);
    /* causal self-attention. qkv [B,T,3C] (q|k|v, heads of size C/NH), out [B,T,C]. att ([B,NH,T,T]
     * elements) is backend-private scratch handed from forward to backward of the same layer and qkv:
     * the CPU backend keeps the softmax probabilities there, the CUDA flash path keeps the per-row
     * log-sum-exp and a copy of out; callers never read or write it. */
    void (*attention_forward)(void *out, void *att, const void *qkv, int B, int T, int C, int NH);
    /* dqkv overwritten; datt is scratch of att's size (contents undefined afterwards) */
    void (*attention_backward)(void *dqkv, void *datt, const void *dout, const void *qkv, const void *att,
                               int B, int T, int C, int NH);
    /* The Llama family's attention: grouped-query (Ainslie et al. 2023). qkv rows [B,T,(NH+2NKV)HD] hold
     * q (NH heads) | k (NKV heads) | v (NKV heads), each head HD wide; query head h reads key/value head
     * h / (NH / NKV) (NKV divides NH; NKV = NH is multi-head, 1 multi-query), never a repeated copy of
     * K/V. out [B,T,NH HD]; att as attention_forward's ([B,NH,T,T] elements, backend-private). Causal,
     * scale 1/sqrt(HD). With NKV = NH and HD = C/NH it is attention_forward exactly (bit for bit). */
    void (*attention_gqa_forward)(void *out, void *att, const void *qkv, int B, int T, int NH, int NKV, int HD);
    /* dqkv [B,T,(NH+2NKV)HD] overwritten (dk, dv summed over the query heads that share them) */
    void (*attention_gqa_backward)(void *dqkv, void *datt, const void *dout, const void *qkv, const void *att, int B,
                                   int T, int NH, int NKV, int HD);
    /* RMSNorm (Zhang & Sennrich 2019), per row of C, statistics in fp32:
     *   rstd = 1 / sqrt(mean(x^2) + eps),  out = x rstd w   (saves rstd [N] for backward) */
    void (*rmsnorm_forward)(void *out, float *rstd, const void *inp, const void *w, float eps, int N, int C);
    /* with xh = x rstd, dxh = dout w:  dinp += rstd (dxh - xh mean(dxh xh)),  dw += sum_rows dout xh
     * (both accumulate, as layernorm_backward) */
    void (*rmsnorm_backward)(void *dinp, void *dw, const void *dout, const void *inp, const void *w, const float *rstd,
                             int N, int C);
    /* Rotary position embedding (Su et al. 2021, Hugging Face's rotate_half layout), in place on the q and k
     * heads of qkv rows [B,T,(NH+2NKV)HD] (v untouched). cos_sin is fp32 [T, HD] on the device: row t holds
     * cos(t f_i) at i and sin(t f_i) at HD/2 + i, i < HD/2. Per head, pair (x_i, x_{i+HD/2}) at position t:
     *   forward  (x_i c - x_{i+HD/2} s,  x_{i+HD/2} c + x_i s)
     *   inverse  (x_i c + x_{i+HD/2} s,  x_{i+HD/2} c - x_i s)   (the transpose: backward of forward)
     * computed in fp32, rounded once into the compute dtype. */
    void (*rope)(void *qkv, const float *cos_sin, int B, int T, int NH, int NKV, int HD, int inverse);
    /* SwiGLU (Shazeer 2020): inp [N, 2I] holds gate | up per row; out [N, I] = silu(gate) up, silu(x) = x
     * sigmoid(x). I is the parameter `inter` (not `I`: <complex.h>, which cblas.h includes, defines I) */
    void (*swiglu_forward)(void *out, const void *inp, int N, int inter);
    /* dinp [N, 2I] (overwrites): dgate = dout up silu'(gate), dup = dout silu(gate);
     * silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x))) */
    void (*swiglu_backward)(void *dinp, const void *inp, const void *dout, int N, int inter);
    void (*gelu_forward)(void *out, const void *inp, size_t n);
    /* dinp = gelu'(inp) * dout (overwrites; dinp may alias dout) */
    void (*gelu_backward)(void *dinp, const void *inp, const void *dout, size_t n);
    /* out = a + b */
    void (*residual_forward)(void *out, const void *a, const void *b, size_t n);
    /* dst += src */
    void (*accumulate)(void *dst, const void *src, size_t n);
    /* Fused softmax + cross-entropy over the first V of Vp logit columns (padding is never read):
     * losses[i] = -log softmax(logits[i])[targets[i]], and if dlogits != NULL,
     * dlogits[i,:V] = (softmax - onehot) * dloss, dlogits[i, V:Vp] = 0. dlogits may alias logits. */
    void (*softmax_xent)(float *losses, void *dlogits, const void *logits, const int *targets, int N, int V, int Vp,
                         float dloss);
    /* Vocabulary-parallel cross-entropy, part 1 (tensor parallelism): this rank holds logits for global
     * vocabulary ids [vocab_lo, vocab_lo + Vl) in columns [0, Vl) of rows of stride Vp. Per row i, fp32:
     * stats[3i] = max_j logits[i, j], stats[3i+1] = sum_j exp(logits[i, j] - stats[3i]),
     * stats[3i+2] = logits[i, targets[i] - vocab_lo] when the target is this rank's, else 0. */
    void (*xent_partial)(float *stats, const void *logits, const int *targets, int N, int Vl, int Vp, int vocab_lo);
    /* Part 2, once every rank's stats are all-gathered in rank order (stats_all [tp][3N], device memory):
     * M = max_r m_r, S = sum_r s_r exp(m_r - M) (r in rank order, the same arithmetic on every rank),
     * losses[i] = M + log S - sum_r t_r; if dlogits != NULL, dlogits[i, j] = (exp(logits[i, j] - M) / S
     * - [vocab_lo + j == targets[i]]) * dloss for j < Vl and 0 for j in [Vl, Vp). dlogits may alias logits.
     * Unlike softmax_xent, a target that no rank holds is not flagged: its loss is M + log S. */
    void (*xent_parallel)(float *losses, void *dlogits, const void *logits, const int *targets, const float *stats_all,
                          int tp, int N, int Vl, int Vp, int vocab_lo, float dloss);

    /* ---- tiled linears (zero_optimization.tiled_linear): matmul_forward/backward taken apart, for a
     * tile of a weight's rows whose input is a column slice of a wider activation ---- */
    /* row-major C[M,N] (row stride ldc) = op(A) op(B) + beta C. op(A) [M,K] is A stored [M,K] with row
     * stride lda, or with trans_a A^T for A stored [K,M]; op(B) [K,N] likewise (trans_b: B stored
     * [N,K]). beta is 0 (C is only written) or 1 (C accumulates). */
    void (*gemm)(void *c, const void *a, const void *b, int M, int N, int K, int lda, int ldb, int ldc, int trans_a,
                 int trans_b, float beta);
    /* out[i, 0:OC] += bias for the N rows of out (row stride ld) */
    void (*add_bias)(void *out, const void *bias, int N, int OC, int ld);
    /* dbias[0:OC] += the sum of dout's N rows (row stride ld), as matmul_backward's dbias */
    void (*bias_grad)(void *dbias, const void *dout, int N, int OC, int ld);
    /* The tiled forward's single rounding: gemm_f32 is gemm with C in fp32 (row stride ldc), so the
     * tiles' partial products add up in fp32; round_bias then writes out[i, 0:OC] (compute dtype,
     * row stride ld) = acc[i, 0:OC] (fp32, row stride OC) + bias (NULL: none), rounded once, as the
     * untiled matmul_forward rounds its output once. */
    void (*gemm_f32)(float *c, const void *a, const void *b, int M, int N, int K, int lda, int ldb, int ldc,
                     int trans_a, int trans_b, float beta);
    void (*round_bias)(void *out, const float *acc, const void *bias, int N, int OC, int ld);

    /* ---- optimizer and reductions ---- */
    /* AdamW on fp32 master weights; grad in compute dtype; writes params_out (compute dtype, may be
     * NULL or alias master on fp32 backends) */
    void (*adamw)(float *master, float *m, float *v, const void *grad, void *params_out, size_t n,
                  const zt_adam_step *step);
    /* sum of squares of a compute-dtype vector, in double, deterministic for a given n */
    double (*sumsq)(const void *x, size_t n);
    /* x *= s */
    void (*scale)(void *x, float s, size_t n);
} zt_backend;

/* ---- what the device (and the host Adam beside it) does, as it happens (for the trace, io/trace.h) ----
 * A backend reports its work to the process's one observer (the engine sets it when it opens a
 * trace; NULL otherwise, and then a backend pays one pointer load per item): each host<->device
 * copy where it ran (its stream, its start and end), the busy intervals of the compute stream,
 * and device memory in use after each alloc and free. Callbacks come from the backend's own
 * threads (the simulated GPU's lanes) and must be thread-safe. The CPU backend reports nothing:
 * it has no link and no device memory of its own. */
enum { ZT_STREAM_COMPUTE, ZT_STREAM_H2D, ZT_STREAM_D2H, ZT_STREAM_AHEAD, ZT_STREAM_COUNT };
typedef struct zt_device_observer {
    void *ctx;
    /* a copy of `bytes` (kind ZT_H2D or ZT_D2H) ran on `stream` from t0 to t1 (zt_now() seconds) */
    void (*transfer)(void *ctx, zt_copy_kind kind, size_t bytes, int stream, double t0, double t1);
    /* the compute stream ran an op (not a copy) from t0 to t1 */
    void (*compute)(void *ctx, double t0, double t1);
    /* device bytes in use (the allocator's count) after an alloc or free at time t */
    void (*memory)(void *ctx, size_t in_use, double t);
    /* host Adam thread `thread` (OpenMP's number) worked from t0 to t1 (cpu_adam.h's report_threads) */
    void (*host_adam)(void *ctx, int thread, double t0, double t1);
    /* an NVMe swap request (io/swap.h) of `bytes`, a write when `write`, was in flight from its issue at
     * t0 to its completion at t1 (the run's clock, util/clock.h): reported by the swap, not a backend */
    void (*nvme)(void *ctx, int write, size_t bytes, double t0, double t1);
} zt_device_observer;
/* Sets (or with NULL clears) the process's observer; obs must outlive its use. */
void zt_device_observe(const zt_device_observer *obs);
/* The observer now, or NULL: what backends call before reporting. */
const zt_device_observer *zt_device_observer_now(void);
/* Work a device learns the times of only after the fact (the CUDA backend reads CUDA events once
 * its streams have passed them): each item is handed over with zt_device_defer as soon as its times
 * are known, and zt_device_report_deferred, called where the host has waited for the device anyway
 * (synchronize), gives them to the observer in start order. Items deferred with no observer set, or
 * still held when it changes, are reported to the observer of the time of the report, or dropped. */
typedef struct zt_device_item {
    int is_copy;        /* 1: a copy of `bytes` (kind ZT_H2D or ZT_D2H) on `stream`; 0: compute stream busy */
    zt_copy_kind kind;
    size_t bytes;
    int stream;
    double t0, t1;      /* zt_now() seconds */
} zt_device_item;
void zt_device_defer(const zt_device_item *item);
/* one item to obs now (what zt_device_report_deferred does with each) */
void zt_device_report(const zt_device_observer *obs, const zt_device_item *item);
void zt_device_report_deferred(void);

/* be->bind_thread() where the backend has one: the first call of a thread that uses the table */
static inline void zt_backend_bind_thread(const zt_backend *be) {
    if (be->bind_thread) be->bind_thread();
}

/* This process's rank among the job's ranks on its machine, from 0: MPI_Comm_split_type
 * (MPI_COMM_TYPE_SHARED) once zt_mpi_init has run, else the launcher's variables
 * (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID, LOCAL_RANK), else 0. The GPU a rank
 * opens (the CUDA backend, the simulated one with ZEROTRAIN_SIM_DEVICES) is this modulo the count.
 * node_rank.c; comm/comm_mpi.c, which knows MPI, sets MPI's numbering after MPI_Init. */
int zt_node_local_rank(void);
void zt_node_local_rank_set(int rank);

/* The backends compiled into this binary. zt_backend_cuda(dtype) returns the CUDA backend computing
 * in dtype (ZT_BF16 or ZT_F16; both tables share one device, its streams and its memory), or NULL
 * when built without CUDA or when no usable GPU is present (with the reason in *why). */
const zt_backend *zt_backend_cpu(void);
/* The CPU backend's sum of squares and dst += src on host values in dtype (F32, BF16, F16), as the
 * simulated GPU computes them in its memory (widened, fp32 math, rounded to nearest even; the
 * sumsq's fixed chunks and order): bit for bit the device's results, for gradients landed in host
 * memory (the engine's stage 2-3 offload at ratio 1). */
double zt_cpu_sumsq_g(const void *x, size_t n, zt_dtype dtype);
#define ZT_SUMSQ_CHUNK 4096 /* zt_cpu_sumsq_g's fixed chunk (the CPU backend's and the simulated GPU's sumsq) */
void zt_cpu_accumulate_g(void *dst, const void *src, size_t n, zt_dtype dtype);
/* the same into a dst taken as zero, neither zeroed nor read first (bit for bit the add into zeros) */
void zt_cpu_accumulate_into_zero_g(void *dst, const void *src, size_t n, zt_dtype dtype);
const zt_backend *zt_backend_cuda(zt_dtype dtype, const char **why);
/* The CUDA backend's cuBLASLt plan cache, both dtypes together: plans cached now, heuristic runs so
 * far (one per plan unless the cache evicted it) and evictions. All 0 without CUDA. */
void zt_backend_cuda_plan_stats(long *cached, long *built, long *evicted);
/* ./zerotrain only (backend_cuda_loader.c, which loads cuda/ as a library when first asked): the
 * library's entry point `name` (one whose presence the load checked), or NULL with the reason in
 * *why when the library is not loaded. comm_nccl_loader.c reaches NCCL's comm through it. */
void *zt_cuda_library_symbol(const char *name, const char **why);
/* The simulated GPU (backend_sim.c, `device: sim`): a test device on the CPU with its own memory
 * space, 16-bit compute in dtype (ZT_BF16 or ZT_F16) and asynchronous lanes; NULL with the reason in
 * *why when ZEROTRAIN_SIM_MEM is unreadable. Always compiled in. */
const zt_backend *zt_backend_sim(zt_dtype dtype, const char **why);

#endif
