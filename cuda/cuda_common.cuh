/* cuda_common.cuh — shared pieces of the CUDA backend (the .cu files in cuda/): error checks, the backend's
 * global state (device, streams, cuBLASLt handle), lazily grown scratch buffers, the 16-bit compute
 * type and 16-byte vector helpers, warp reductions, and the declarations of every op.
 *
 * Conventions: every `void *` tensor is in the 16-bit compute dtype `zt16`, every `float *` is fp32.
 * kernels.cu, gemm.cu, attention.cu and llama_kernels.cu are written once for `zt16` and compiled twice (see the
 * Makefile): with ZT_CU_FP16=0 zt16 is __nv_bfloat16 and their code lives in namespace zt_cu_bf16,
 * with ZT_CU_FP16=1 it is __half in namespace zt_cu_f16. Each namespace's fill_ops() puts its
 * kernels into an op table; backend_cuda.cu (compiled once) owns the device, the streams and
 * memory, shared by both tables. Every op is issued on the compute stream (g_zt.stream); only
 * transfer() uses the two copy streams. All math inside kernels is fp32, the per-element formulas
 * come from src/backend/opmath.h so the CPU backend and the GPU run the same arithmetic. Any CUDA/cuBLAS
 * failure inside an op is fatal: the op table has no error return, so we print "zerotrain: error:
 * CUDA ..." with the call site and exit(1). Set ZT_CUDA_SYNC=1 to synchronize after every op,
 * which pins an asynchronous kernel fault on the op that caused it. */
#ifndef ZT_CUDA_COMMON_CUH
#define ZT_CUDA_COMMON_CUH

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublasLt.h>
#include <cublas_v2.h>

/* backend.h has no extern "C" guard: its C entry points get C linkage from the block below, while
 * opmath.h's inline math (included first, so backend.h's include of it is a no-op) stays C++. */
#include "backend/opmath.h"
extern "C" {
#include "backend/backend.h"
}

/* Extra entry point for the engine's NCCL code: the compute stream as an opaque pointer
 * (a cudaStream_t), NULL before zt_backend_cuda() succeeded. */
extern "C" void *zt_cuda_compute_stream(void);

#ifndef ZT_CU_FP16
#define ZT_CU_FP16 0
#endif

/* ---------------------------------------------------------------- errors */
void zt_cuda_fatal(const char *what, const char *detail, const char *file, int line);
#define ZT_CUDA_CHECK(call)                                                              \
    do {                                                                                 \
        cudaError_t zt_e_ = (call);                                                      \
        if (zt_e_ != cudaSuccess) zt_cuda_fatal(#call, cudaGetErrorString(zt_e_), __FILE__, __LINE__); \
    } while (0)
#define ZT_CUBLAS_CHECK(call)                                                            \
    do {                                                                                 \
        cublasStatus_t zt_s_ = (call);                                                   \
        if (zt_s_ != CUBLAS_STATUS_SUCCESS) zt_cuda_fatal(#call, cublasGetStatusString(zt_s_), __FILE__, __LINE__); \
    } while (0)
/* after every kernel launch: launch errors now, execution errors too when ZT_CUDA_SYNC=1 */
void zt_cuda_after_launch(const char *what, const char *file, int line);
#define ZT_LAUNCH_CHECK(what) zt_cuda_after_launch((what), __FILE__, __LINE__)

/* event_timing.cu: the GPU's own times of its work for the trace, only while an observer is set.
 * zt_cu_timed_compute marks the compute stream after a launch (zt_cuda_after_launch calls it);
 * a copy is bracketed by zt_cu_copy_begin (0 and *ev0 NULL when not tracing) and zt_cu_copy_end on
 * its stream; zt_cu_report_timed hands every finished record to the observer (at synchronize). */
void zt_cu_timed_compute(void);
int zt_cu_copy_begin(cudaStream_t s, cudaEvent_t *ev0);
void zt_cu_copy_end(cudaStream_t s, cudaEvent_t ev0, zt_copy_kind kind, size_t bytes, int stream);
void zt_cu_report_timed(void);

/* ---------------------------------------------------------------- global state */
#define ZT_CU_MARKS 256 /* mark()'s events: a wait on a mark older than this waits for a later point (safe) */
struct zt_cuda_state {
    int device;
    int sm_count;
    cudaStream_t stream;      /* compute: every op */
    cudaStream_t d2h, h2d;    /* transfer(): one stream per direction, non-blocking */
    cudaStream_t ahead;       /* copy_ahead(): after the compute stream's work so far, then on its own */
    cudaEvent_t ahead_from, ahead_done; /* compute -> ahead, ahead -> compute */
    cudaEvent_t marks[ZT_CU_MARKS];     /* mark(): a ring of events on the compute stream (backend_cuda.cu) */
    unsigned long long marks_made;      /* marks handed out so far */
    cublasLtHandle_t lt;
    cublasHandle_t blas;      /* created lazily, only for the GEMM fallback path */
    void *lt_workspace;
    size_t lt_workspace_size;
    int debug_sync;           /* ZT_CUDA_SYNC=1 */
};
extern zt_cuda_state g_zt;

/* Scratch buffers owned by the backend, one per purpose, grown on demand (contents are not kept
 * when they grow). Stream ordering makes reuse across ops safe: every op runs on g_zt.stream. */
enum zt_scratch_slot {
    ZT_SCR_COLSUM = 0,   /* fp32 per-block column partials (layernorm dw/db, matmul dbias) */
    ZT_SCR_REDUCE,       /* sumsq partials + result */
    ZT_SCR_ATT_QKV,      /* attention: q, k, v permuted to [B,NH,T,hs] */
    ZT_SCR_ATT_Y,        /* attention: y / dy [B,NH,T,hs] */
    ZT_SCR_ATT_DQKV,     /* attention backward: dq, dk, dv [B,NH,T,hs] */
    ZT_SCR_ATT_F32,      /* attention: fp32 scores / datt for one chunk of heads */
    ZT_SCR_EMB_IDX,      /* embedding backward: sorted tokens/positions + radix-sort temp */
    ZT_SCR_COUNT
};
void *zt_scratch(zt_scratch_slot slot, size_t bytes);
/* pinned host scratch (sumsq result) */
enum zt_host_slot { ZT_HSCR_RESULT = 0, ZT_HSCR_COUNT };
void *zt_host_scratch(zt_host_slot slot, size_t bytes);

/* ---------------------------------------------------------------- launch helpers */
static inline unsigned zt_blocks(size_t work, unsigned threads, unsigned cap_per_sm = 32) {
    size_t b = (work + threads - 1) / threads;
    size_t cap = (size_t)(g_zt.sm_count > 0 ? g_zt.sm_count : 132) * cap_per_sm;
    if (b > cap) b = cap;
    if (b < 1) b = 1;
    return (unsigned)b;
}
static inline bool zt_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

__device__ __forceinline__ float zt_warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ double zt_warp_sum_d(double x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float zt_warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

/* ---------------------------------------------------------------- the 16-bit compute type */
/* fill_ops of each compilation (kernels.cu): the op-table entries and compute_dtype of that dtype */
namespace zt_cu_bf16 { void fill_ops(zt_backend *b); }
namespace zt_cu_f16 { void fill_ops(zt_backend *b); }
/* and each one's cuBLASLt plan cache figures, added to the totals (gemm.cu) */
namespace zt_cu_bf16 { void zt_cu_gemm_plan_stats(long *cached, long *built, long *evicted); }
namespace zt_cu_f16 { void zt_cu_gemm_plan_stats(long *cached, long *built, long *evicted); }

__device__ __forceinline__ float zt_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float zt_f(__half x) { return __half2float(x); }

#if ZT_CU_FP16
#define ZT_CU_NS zt_cu_f16
typedef __half zt16;
#define ZT_CUDA_R_16 CUDA_R_16F
#define ZT_PTX_16 "f16"            /* operand type of mma.sync */
#define ZT_COMPUTE_DTYPE ZT_F16
/* two floats -> packed 16-bit pair, .x (low half) = lo; round-to-nearest-even like opmath.h */
__device__ __forceinline__ __half2 zt_to16x2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
__device__ __forceinline__ __half zt_to16(float x) { return __float2half_rn(x); }
#else
#define ZT_CU_NS zt_cu_bf16
typedef __nv_bfloat16 zt16;
#define ZT_CUDA_R_16 CUDA_R_16BF
#define ZT_PTX_16 "bf16"
#define ZT_COMPUTE_DTYPE ZT_BF16
__device__ __forceinline__ __nv_bfloat162 zt_to16x2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
__device__ __forceinline__ __nv_bfloat16 zt_to16(float x) { return __float2bfloat16_rn(x); }
#endif

namespace ZT_CU_NS {
__device__ __forceinline__ float zt_ld(const zt16 *p) { return zt_f(*p); }

/* 8 x 16-bit = 16 bytes, loaded/stored with one 128-bit access (llm.c's x128) */
struct alignas(16) zt16x8 { zt16 v[8]; };

/* ---------------------------------------------------------------- ops (see backend.h) */
/* kernels.cu */
void zt_cu_to_compute(void *dst, const float *src, size_t n);
void zt_cu_to_f32(float *dst, const void *src, size_t n);
void zt_cu_embedding_forward(void *out, const int *tokens, const void *wte, int row_lo, int row_hi, const void *wpe,
                             int B, int T, int C);
void zt_cu_embedding_backward(void *dwte, int row_lo, int row_hi, void *dwpe, const void *dout, const int *tokens,
                              int B, int T, int C);
void zt_cu_layernorm_forward(void *out, float *mean, float *rstd, const void *inp, const void *w, const void *b,
                             int N, int C);
void zt_cu_layernorm_backward(void *dinp, void *dw, void *db, const void *dout, const void *inp, const void *w,
                              const float *mean, const float *rstd, int N, int C);
void zt_cu_gelu_forward(void *out, const void *inp, size_t n);
void zt_cu_gelu_backward(void *dinp, const void *inp, const void *dout, size_t n);
void zt_cu_residual_forward(void *out, const void *a, const void *b, size_t n);
void zt_cu_accumulate(void *dst, const void *src, size_t n);
void zt_cu_softmax_xent(float *losses, void *dlogits, const void *logits, const int *targets, int N, int V, int Vp,
                        float dloss);
void zt_cu_xent_partial(float *stats, const void *logits, const int *targets, int N, int Vl, int Vp, int vocab_lo);
void zt_cu_xent_parallel(float *losses, void *dlogits, const void *logits, const int *targets, const float *stats_all,
                         int tp, int N, int Vl, int Vp, int vocab_lo, float dloss);
void zt_cu_adamw(float *master, float *m, float *v, const void *grad, void *params_out, size_t n,
                 const zt_adam_step *step);
double zt_cu_sumsq(const void *x, size_t n);
void zt_cu_scale(void *x, float s, size_t n);
/* deterministic column sums over N rows of a row-major [N, C] 16-bit matrix with row stride ld:
 * db[c] += sum_i dout[i,c] (db may be NULL); with inp/mean/rstd also dw[c] += sum_i dout[i,c] * xhat[i,c],
 * xhat = (inp - mean) rstd, or inp rstd with mean NULL (RMSNorm). */
void zt_cu_colsum(void *dw, void *db, const zt16 *dout, int ld, const zt16 *inp, const float *mean,
                  const float *rstd, int N, int C);
/* out[i, c] += bias[c] for a row-major [N, C] matrix with row stride ld (GEMM fallback path, add_bias) */
void zt_cu_add_bias(zt16 *out, const zt16 *bias, int N, int C, int ld);

/* gemm.cu */
void zt_cu_matmul_forward(void *out, const void *inp, const void *w, const void *bias, int N, int C, int OC,
                          int w_transposed, int ldout);
void zt_cu_matmul_backward(void *dinp, void *dw, void *dbias, const void *dout, const void *inp, const void *w,
                           int N, int C, int OC, int w_transposed, int lddout);
void zt_cu_matmul_forward_gelu(void *out, void *pre, const void *inp, const void *w, const void *bias, int N, int C,
                               int OC);
void zt_cu_matmul_backward_dgelu(void *dinp, void *dw, void *dbias, const void *dout, const void *inp, const void *w,
                                 const void *gelu_pre, int N, int C, int OC);
/* the tiled linears' table entries (backend.h) */
void zt_cu_gemm(void *c, const void *a, const void *b, int M, int N, int K, int lda, int ldb, int ldc, int trans_a,
                int trans_b, float beta);
void zt_cu_add_bias_op(void *out, const void *bias, int N, int OC, int ld);
void zt_cu_gemm_f32(float *c, const void *a, const void *b, int M, int N, int K, int lda, int ldb, int ldc,
                    int trans_a, int trans_b, float beta);
void zt_cu_round_bias(void *out, const float *acc, const void *bias, int N, int OC, int ld);
void zt_cu_bias_grad(void *dbias, const void *dout, int N, int OC, int ld);
/* the GEMM + softmax attention (any head size; att holds the probabilities), grouped-query layout
 * (qkv rows (NH+2NKV)hs wide; NKV = NH is GPT-2's [B,T,3C]) */
void zt_cu_attention_forward_naive(void *out, void *att, const void *qkv, int B, int T, int NH, int NKV, int hs);
void zt_cu_attention_backward_naive(void *dqkv, void *datt, const void *dout, const void *qkv, const void *att,
                                    int B, int T, int NH, int NKV, int hs);
void zt_cu_gemm_release(void);

/* attention.cu: flash attention for head sizes 32/64, else the naive path (att is private scratch);
 * the multi-head entries are the grouped-query ones with NKV = NH, HD = C / NH */
void zt_cu_attention_forward(void *out, void *att, const void *qkv, int B, int T, int C, int NH);
void zt_cu_attention_backward(void *dqkv, void *datt, const void *dout, const void *qkv, const void *att,
                              int B, int T, int C, int NH);
void zt_cu_attention_gqa_forward(void *out, void *att, const void *qkv, int B, int T, int NH, int NKV, int HD);
void zt_cu_attention_gqa_backward(void *dqkv, void *datt, const void *dout, const void *qkv, const void *att, int B,
                                  int T, int NH, int NKV, int HD);

/* llama_kernels.cu: the Llama family's row and elementwise ops (RMSNorm, rotary embedding, SwiGLU),
 * and fill_llama_ops, which fill_ops calls: the table entries of those and of grouped-query attention */
void zt_cu_rmsnorm_forward(void *out, float *rstd, const void *inp, const void *w, float eps, int N, int C);
void zt_cu_rmsnorm_backward(void *dinp, void *dw, const void *dout, const void *inp, const void *w, const float *rstd,
                            int N, int C);
void zt_cu_rope(void *qkv, const float *cos_sin, int B, int T, int NH, int NKV, int HD, int inverse);
void zt_cu_swiglu_forward(void *out, const void *inp, int N, int inter);
void zt_cu_swiglu_backward(void *dinp, const void *inp, const void *dout, int N, int inter);
void fill_llama_ops(zt_backend *b);

} // namespace ZT_CU_NS

#endif
