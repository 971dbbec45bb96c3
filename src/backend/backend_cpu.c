/* backend_cpu.c — the CPU backend: fp32 everywhere, OpenBLAS SGEMM for the matrix products,
 * OpenMP for everything else.
 *
 * Threading. Debian's libopenblas0 is the pthreads build: inside an OpenMP region its own
 * thread pool would oversubscribe the cores (and its idle workers spin for a while after every
 * call, stealing cycles from the OpenMP region that follows). So this backend sets OpenBLAS to
 * ONE thread once and does all parallelism with OpenMP: a large SGEMM is cut into column (or row)
 * panels whose boundaries depend on the shape only, each one a single-threaded cblas_sgemm that
 * one thread computes whole (see gemm_plan); attention runs one head per OpenMP thread
 * (grouped-query attention's backward then one key/value head per thread for dK, dV). Measured on
 * the 2-core Zen build machine the split SGEMM is as fast as OpenBLAS's own threading; on a 2-core
 * AVX-512 Xeon (SkylakeX kernels) a few % slower at GPT-2 124M's shapes, the price of bits that do not depend on the thread count (test/bench_ops.c prints both).
 *
 * Determinism. Every op gives bit-identical results run to run, and — because no reduction is
 * ever split across threads — also for any OpenMP thread count:
 *   - SGEMM panels split only M or N, never K, so each output element is one kernel's sum, and
 *     the same call computes it whatever the thread count (gemm_plan);
 *   - column reductions (dbias, LayerNorm dw/db, RMSNorm dw, dwpe, dwte) are parallel over columns, each
 *     column summing its rows in row order;
 *   - row reductions (LayerNorm statistics and its backward's row means, the softmaxes' sums,
 *     forward and backward) run inside one thread, in cpu_kernels.c's fixed order, the same on
 *     every SIMD path; the row maxima with `omp simd reduction(max)` (exact in any order);
 *   - grouped-query attention's dK and dV of a key/value head sum its query heads in order, inside
 *     one thread;
 *   - sumsq sums fixed 4096-element chunks, then the chunk sums in order.
 * Loops use schedule(static) throughout.
 * The Llama family's other ops (RMSNorm, rotary embedding, SwiGLU) are cpu_llama_ops.c's, by the same
 * rules; grouped-query attention is here, GPT-2's attention being its case NKV = NH. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_adam.h"
#include "backend/cpu_kernels.h"
#include "backend/cpu_llama_ops.h"

/* The vector math (GELU and its derivative, the softmaxes' exp row sums and attention's softmax
 * backward, LayerNorm's rows, the sum of squares) is cpu_kernels.c's, at the CPU's widest SIMD; it
 * computes each element the same way on every path, so results do not depend on the thread count
 * or on where a range starts. Element-wise ops hand each OpenMP thread whole VEC_CHUNK-element
 * pieces. */
#define VEC_CHUNK 4096

/* ------------------------------------------------------------------ memory */

static void *cpu_alloc(size_t bytes) {
    size_t sz = (bytes + 63) & ~(size_t)63; /* aligned_alloc wants a multiple of the alignment */
    if (sz == 0) sz = 64;
    void *p = aligned_alloc(64, sz);
    if (p) memset(p, 0, sz);
    return p;
}
static void cpu_free(void *p) { free(p); }
static void cpu_memset_zero(void *p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
}
static void cpu_copy(void *dst, const void *src, size_t bytes, zt_copy_kind kind) {
    (void)kind;
    if (bytes && dst != src) memmove(dst, src, bytes);
}

static void cpu_nothing(void) {}
/* queued work is done when queued: every mark has passed */
static unsigned long long cpu_mark(void) { return 0; }
static void cpu_wait_mark(unsigned long long mark) { (void)mark; }
static void cpu_synchronize(void) {}
static void cpu_mem_info(size_t *free_bytes, size_t *total_bytes) { *free_bytes = *total_bytes = 0; }
static void cpu_bind_thread(void) {} /* every host thread may use host memory and the BLAS */
static void cpu_to_compute(void *dst, const float *src, size_t n) { cpu_copy(dst, src, n * sizeof(float), ZT_D2D); }
static void cpu_to_f32(float *dst, const void *src, size_t n) { cpu_copy(dst, src, n * sizeof(float), ZT_D2D); }

/* ------------------------------------------------------------------ SGEMM */

/* The part [lo, hi) of n items that thread `id` of `nt` owns, in whole blocks of `blk` items
 * (64-byte lines of floats, so neighbouring threads never share a cache line of C). */
static void zt_split(int n, int nt, int id, int blk, int *lo, int *hi) {
    int nblk = (n + blk - 1) / blk;
    int per = nblk / nt, extra = nblk % nt;
    int b0 = id * per + (id < extra ? id : extra);
    int b1 = b0 + per + (id < extra ? 1 : 0);
    *lo = b0 * blk < n ? b0 * blk : n;
    *hi = b1 * blk < n ? b1 * blk : n;
}

/* GEMM panels. A large SGEMM is cut into panels along the larger of M and N, each one a
 * single-threaded cblas_sgemm, and the OpenMP threads take whole panels. The panel boundaries
 * follow the shape alone, never the thread count: OpenBLAS's micro-kernels treat a call's edge
 * rows and columns with other code (another FMA order) than its interior, so the bits of an
 * output column depend on where it sits inside its call. With boundaries that moved with the
 * thread count, 1, 2 and 3 threads gave three different answers on an AVX2 Zen; with these, every
 * output element comes out of the same call — same shape, same operands — for any thread count and
 * on any CPU. The count is a power of two (so 1, 2, 4, 8 or 16 threads share the panels evenly),
 * at most GEMM_MAX_PANELS, with at least GEMM_MIN_WIDTH rows or columns a panel, GEMM_MIN_FLOPS
 * of work in each of the first two (so two cores share any GEMM worth splitting) and beyond two
 * GEMM_PANEL_FLOPS a panel: each panel packs the whole of the other operand again, which
 * costs 3-6 % of one core's SGEMM speed per doubling of the count (measured for GPT-2's shapes on
 * the 2-core Zen build machine, and again on an AVX-512 Xeon with the SkylakeX kernels: 8 panels
 * 8-12 % slower than one). 200 MFLOP (1-2 ms of one core) cuts GPT-2 124M's largest linears in 4
 * rather than 8 and the LM head in 16. Widths are whole multiples of 16 floats (64-byte lines of
 * C, so no two threads write one line). */
enum { GEMM_MAX_PANELS = 16, GEMM_MIN_WIDTH = 256, GEMM_ALIGN = 16 };
#define GEMM_PANEL_FLOPS 200e6
#define GEMM_MIN_FLOPS 32e6 /* the least work of each of the first two panels */

typedef struct {
    int split_n;      /* panels are column ranges of C (else row ranges) */
    int width, count; /* panel width along the split dimension, number of panels */
} gemm_panels;

static gemm_panels gemm_plan(int M, int N, int K) {
    gemm_panels p = {.split_n = N >= M};
    int dim = p.split_n ? N : M;
    double flops = 2.0 * M * N * (K > 0 ? K : 1);
    int count = 1;
    while (count * 2 <= GEMM_MAX_PANELS && dim / (count * 2) >= GEMM_MIN_WIDTH &&
           (count == 1 ? flops >= 2 * GEMM_MIN_FLOPS : flops / (count * 2) >= GEMM_PANEL_FLOPS))
        count *= 2;
    int width = (dim + count - 1) / count;
    p.width = (width + GEMM_ALIGN - 1) / GEMM_ALIGN * GEMM_ALIGN;
    p.count = (dim + p.width - 1) / p.width;
    return p;
}

/* Row-major C[M,N] = alpha op(A) op(B) + beta C with op(A) [M,K], op(B) [K,N]; when bias is
 * non-NULL (and beta == 0) C's rows start as bias[N] instead. Panels as above; called outside
 * any parallel region. */
static void gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc, const float *bias) {
    if (M <= 0 || N <= 0) return;
    gemm_panels p = gemm_plan(M, N, K);
    int dim = p.split_n ? N : M, nt = omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(p.count < nt ? p.count : nt)
    for (int panel = 0; panel < p.count; panel++) {
        int lo = panel * p.width, hi = lo + p.width < dim ? lo + p.width : dim;
        int m = p.split_n ? M : hi - lo, n = p.split_n ? hi - lo : N;
        const float *a = A, *b = B;
        float *c = p.split_n ? C + lo : C + (size_t)lo * ldc;
        if (p.split_n) b = tb ? B + (size_t)lo * ldb : B + lo;
        else a = ta ? A + lo : A + (size_t)lo * lda;
        float be = beta;
        if (bias) {
            for (int i = 0; i < m; i++) memcpy(c + (size_t)i * ldc, bias + (p.split_n ? lo : 0), (size_t)n * sizeof(float));
            be = 1.0f;
        }
        if (K > 0)
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, K, alpha, a, lda,
                        b, ldb, be, c, ldc);
        else if (!bias && beta != 1.0f)
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
    }
}

/* ------------------------------------------------------------------ embedding */

static void cpu_embedding_forward(void *out_, const int *tokens, const void *wte_, int row_lo, int row_hi,
                                  const void *wpe_, int B, int T, int C) {
    float *out = out_;
    const float *wte = wte_, *wpe = wpe_;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < B * T; i++) {
        int tok = tokens[i];
        const float *p = wpe ? wpe + (size_t)(i % T) * C : NULL;
        float *o = out + (size_t)i * C;
        if (tok >= row_lo && tok < row_hi) {
            const float *e = wte + (size_t)(tok - row_lo) * C;
            if (p) {
#pragma omp simd
                for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
            } else {
                memcpy(o, e, (size_t)C * sizeof *o);
            }
        } else if (p) { /* this token's row came in an earlier block */
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] += p[c];
        }
    }
}

/* Parallel over channel blocks, tokens in order inside each: repeated tokens never race, and
 * each dwte/dwpe element receives its additions in (b,t) order whatever the thread count (and
 * whatever the row blocks). */
static void cpu_embedding_backward(void *dwte_, int row_lo, int row_hi, void *dwpe_, const void *dout_,
                                   const int *tokens, int B, int T, int C) {
    float *dwte = dwte_, *dwpe = dwpe_;
    const float *dout = dout_;
#pragma omp parallel
    {
        int c0, c1;
        zt_split(C, omp_get_num_threads(), omp_get_thread_num(), 16, &c0, &c1);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const float *d = dout + ((size_t)b * T + t) * C;
                int tok = tokens[b * T + t];
                if (dwte && tok >= row_lo && tok < row_hi) {
                    float *w = dwte + (size_t)(tok - row_lo) * C;
#pragma omp simd
                    for (int c = c0; c < c1; c++) w[c] += d[c];
                }
                if (dwpe) {
                    float *p = dwpe + (size_t)t * C;
#pragma omp simd
                    for (int c = c0; c < c1; c++) p[c] += d[c];
                }
            }
    }
}

/* ------------------------------------------------------------------ layernorm */

/* rows in parallel, each one zt_vec_layernorm (fixed-order sums: cpu_kernels.h) */
static void cpu_layernorm_forward(void *out_, float *mean, float *rstd, const void *inp_, const void *w_, const void *b_,
                                  int N, int C) {
    float *out = out_;
    const float *inp = inp_, *w = w_, *bb = b_;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++)
        zt_vec_layernorm(out + (size_t)i * C, mean + i, rstd + i, inp + (size_t)i * C, w, bb, (size_t)C);
}

static void cpu_layernorm_backward(void *dinp_, void *dw_, void *db_, const void *dout_, const void *inp_, const void *w_,
                                   const float *mean, const float *rstd, int N, int C) {
    float *dinp = dinp_, *dw = dw_, *db = db_;
    const float *dout = dout_, *inp = inp_, *w = w_;
#pragma omp parallel
    {
        /* dinp: rows in parallel */
#pragma omp for schedule(static) nowait
        for (int i = 0; i < N; i++) {
            size_t o = (size_t)i * C;
            zt_vec_layernorm_dx(dinp + o, dout + o, inp + o, w, mean[i], rstd[i], (size_t)C);
        }
        /* dw, db: columns in parallel, rows in order */
        int c0, c1;
        zt_split(C, omp_get_num_threads(), omp_get_thread_num(), 16, &c0, &c1);
        for (int i = 0; c1 > c0 && i < N; i++) {
            size_t o = (size_t)i * C + c0;
            zt_vec_layernorm_dwdb(dw + c0, db + c0, dout + o, inp + o, mean[i], rstd[i], (size_t)(c1 - c0));
        }
    }
}

/* ------------------------------------------------------------------ matmul */

static void cpu_matmul_forward(void *out, const void *inp, const void *w, const void *bias, int N, int C, int OC,
                               int w_transposed, int ldout) {
    /* W [C,OC] (lda OC), or stored [OC,C] and used transposed (ldb C) */
    gemm(0, w_transposed, N, OC, C, 1.0f, inp, C, w, w_transposed ? C : OC, 0.0f, out, ldout, bias);
}

/* dbias[o] += sum_i dout[i,o]: 64-column blocks in parallel, rows in order inside a block */
static void colsum_acc(float *dbias, const float *dout, int N, int OC, int ld) {
    int nblk = (OC + 63) / 64;
#pragma omp parallel for schedule(static)
    for (int bk = 0; bk < nblk; bk++) {
        int o0 = bk * 64, n = OC - o0 < 64 ? OC - o0 : 64;
        float acc[64] = {0};
        for (int i = 0; i < N; i++) {
            const float *d = dout + (size_t)i * ld + o0;
#pragma omp simd
            for (int o = 0; o < n; o++) acc[o] += d[o];
        }
        for (int o = 0; o < n; o++) dbias[o0 + o] += acc[o];
    }
}

static void cpu_matmul_backward(void *dinp, void *dw, void *dbias, const void *dout, const void *inp, const void *w, int N,
                                int C, int OC, int w_transposed, int lddout) {
    if (dinp) { /* dinp[N,C] = dout[N,OC] W^T */
        if (w_transposed) gemm(0, 0, N, C, OC, 1.0f, dout, lddout, w, C, 0.0f, dinp, C, NULL);
        else gemm(0, 1, N, C, OC, 1.0f, dout, lddout, w, OC, 0.0f, dinp, C, NULL);
    }
    if (dw) {
        if (w_transposed) gemm(1, 0, OC, C, N, 1.0f, dout, lddout, inp, C, 1.0f, dw, C, NULL); /* dW[OC,C] += dout^T inp */
        else gemm(1, 0, C, OC, N, 1.0f, inp, C, dout, lddout, 1.0f, dw, OC, NULL);            /* dW[C,OC] += inp^T dout */
    }
    if (dbias) colsum_acc(dbias, dout, N, OC, lddout);
}

/* ------------------------------------------------------------------ tiled linears */

static void cpu_gemm(void *c, const void *a, const void *b, int M, int N, int K, int lda, int ldb, int ldc, int ta,
                     int tb, float beta) {
    gemm(ta, tb, M, N, K, 1.0f, a, lda, b, ldb, beta, c, ldc, NULL);
}

static void cpu_add_bias(void *out_, const void *bias_, int N, int OC, int ld) {
    float *out = out_;
    const float *bias = bias_;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *o = out + (size_t)i * ld;
#pragma omp simd
        for (int j = 0; j < OC; j++) o[j] += bias[j];
    }
}

static void cpu_bias_grad(void *dbias, const void *dout, int N, int OC, int ld) { colsum_acc(dbias, dout, N, OC, ld); }

/* fp32 is the compute dtype here: gemm_f32 is gemm, round_bias a copy plus the bias */
static void cpu_gemm_f32(float *c, const void *a, const void *b, int M, int N, int K, int lda, int ldb, int ldc, int ta,
                         int tb, float beta) {
    gemm(ta, tb, M, N, K, 1.0f, a, lda, b, ldb, beta, c, ldc, NULL);
}
static void cpu_round_bias(void *out_, const float *acc, const void *bias_, int N, int OC, int ld) {
    float *out = out_;
    const float *bias = bias_;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++)
        for (int j = 0; j < OC; j++) out[(size_t)i * ld + j] = acc[(size_t)i * OC + j] + (bias ? bias[j] : 0.0f);
}

/* ------------------------------------------------------------------ attention */

/* Grouped-query attention (backend.h): qkv rows of W = (NH + 2 NKV) HD hold q | k | v; query head h
 * reads key/value head h / (NH / NKV). GPT-2's attention is the case NKV = NH, HD = C / NH: the same
 * SGEMM calls on the same pointers, so its bits are those this code gave before it was generalised. */
typedef struct {
    int W, G;        /* qkv's row width; query heads per key/value head */
    size_t k0, v0;   /* offsets of the k and v parts inside a row */
} gqa_layout;
static gqa_layout gqa_layout_of(int NH, int NKV, int HD) {
    return (gqa_layout){(NH + 2 * NKV) * HD, NH / NKV, (size_t)NH * HD, (size_t)(NH + NKV) * HD};
}

/* One (b,h) per OpenMP iteration; each head's SGEMMs run single-threaded, reading q, k and v
 * in place from qkv with row stride W. The full T x T score matrix is computed and the part
 * above the diagonal is then overwritten with exact zeros. */
static void cpu_attention_gqa_forward(void *out_, void *att_, const void *qkv_, int B, int T, int NH, int NKV, int HD) {
    float *out = out_, *att = att_;
    const float *qkv = qkv_;
    gqa_layout L = gqa_layout_of(NH, NKV, HD);
    int ldo = NH * HD;
    float scale = 1.0f / sqrtf((float)HD);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH, kvh = h / L.G;
        const float *row0 = qkv + (size_t)b * T * L.W, *q = row0 + h * HD;
        const float *k = row0 + L.k0 + kvh * HD, *v = row0 + L.v0 + kvh * HD;
        float *a = att + (size_t)bh * T * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, scale, q, L.W, k, L.W, 0.0f, a, T);
        for (int t = 0; t < T; t++) { /* causal softmax of row t over j <= t */
            float *row = a + (size_t)t * T, mx = -INFINITY;
#pragma omp simd reduction(max : mx)
            for (int j = 0; j <= t; j++) mx = row[j] > mx ? row[j] : mx;
            float inv = (float)(1.0 / zt_vec_exp_sum(row, row, mx, (size_t)t + 1));
            for (int j = 0; j <= t; j++) row[j] *= inv;
            for (int j = t + 1; j < T; j++) row[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, 1.0f, a, T, v, L.W, 0.0f,
                    out + (size_t)b * T * ldo + h * HD, ldo);
    }
}

/* Two passes. First one (b,h) per iteration: datt = dy V^T, the softmax backward into dpre (kept in
 * datt), dQ = dpre K. Then one (b, key/value head) per iteration: dV = sum_g att_g^T dy_g and
 * dK = sum_g dpre_g^T Q_g over the group's query heads g in order (the first SGEMM writes, the next
 * ones add): no two threads write one dK/dV, and each element's sum has a fixed order. */
static void cpu_attention_gqa_backward(void *dqkv_, void *datt_, const void *dout_, const void *qkv_, const void *att_,
                                       int B, int T, int NH, int NKV, int HD) {
    float *dqkv = dqkv_, *datt = datt_;
    const float *dout = dout_, *qkv = qkv_, *att = att_;
    gqa_layout L = gqa_layout_of(NH, NKV, HD);
    int ldo = NH * HD;
    float scale = 1.0f / sqrtf((float)HD);
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH, kvh = h / L.G;
            size_t r0 = (size_t)b * T * L.W;
            const float *v = qkv + r0 + L.v0 + kvh * HD, *k = qkv + r0 + L.k0 + kvh * HD;
            const float *a = att + (size_t)bh * T * T, *dy = dout + (size_t)b * T * ldo + h * HD;
            float *da = datt + (size_t)bh * T * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, 1.0f, dy, ldo, v, L.W, 0.0f, da, T);
            /* softmax backward, scaled: dpre = att * (datt - sum_j att*datt) * scale (0 above the diagonal) */
            for (int t = 0; t < T; t++) {
                float *dr = da + (size_t)t * T;
                zt_vec_softmax_backward(dr, a + (size_t)t * T, scale, (size_t)t + 1);
                memset(dr + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, 1.0f, da, T, k, L.W, 0.0f,
                        dqkv + r0 + h * HD, L.W);
        }
#pragma omp for schedule(static)
        for (int bk = 0; bk < B * NKV; bk++) {
            int b = bk / NKV, kvh = bk % NKV;
            size_t r0 = (size_t)b * T * L.W;
            float *dk = dqkv + r0 + L.k0 + kvh * HD, *dv = dqkv + r0 + L.v0 + kvh * HD;
            for (int g = 0; g < L.G; g++) {
                int h = kvh * L.G + g;
                size_t bh = (size_t)b * NH + h;
                const float *a = att + bh * T * T, *da = datt + bh * T * T, *q = qkv + r0 + h * HD;
                const float *dy = dout + (size_t)b * T * ldo + h * HD;
                float beta = g ? 1.0f : 0.0f;
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, 1.0f, a, T, dy, ldo, beta, dv, L.W);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, 1.0f, da, T, q, L.W, beta, dk, L.W);
            }
        }
    }
}

/* GPT-2's attention: the grouped-query one with a key/value head per query head */
static void cpu_attention_forward(void *out, void *att, const void *qkv, int B, int T, int C, int NH) {
    cpu_attention_gqa_forward(out, att, qkv, B, T, NH, NH, C / NH);
}
static void cpu_attention_backward(void *dqkv, void *datt, const void *dout, const void *qkv, const void *att, int B,
                                   int T, int C, int NH) {
    cpu_attention_gqa_backward(dqkv, datt, dout, qkv, att, B, T, NH, NH, C / NH);
}

/* ------------------------------------------------------------------ pointwise */

static void cpu_gelu_forward(void *out_, const void *inp_, size_t n) {
    float *out = out_;
    const float *inp = inp_;
    size_t nchunk = (n + VEC_CHUNK - 1) / VEC_CHUNK;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunk; c++) {
        size_t off = c * VEC_CHUNK;
        zt_vec_gelu(out + off, inp + off, n - off < VEC_CHUNK ? n - off : VEC_CHUNK);
    }
}

static void cpu_gelu_backward(void *dinp_, const void *inp_, const void *dout_, size_t n) {
    float *dinp = dinp_;
    const float *inp = inp_, *dout = dout_;
    size_t nchunk = (n + VEC_CHUNK - 1) / VEC_CHUNK;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunk; c++) {
        size_t off = c * VEC_CHUNK;
        zt_vec_gelu_grad(dinp + off, inp + off, dout + off, n - off < VEC_CHUNK ? n - off : VEC_CHUNK);
    }
}

/* the fused MLP ops are their two parts here: the CPU gains nothing from fusing them */
static void cpu_matmul_forward_gelu(void *out, void *pre, const void *inp, const void *w, const void *bias, int N, int C,
                                    int OC) {
    cpu_matmul_forward(pre, inp, w, bias, N, C, OC, 0, OC);
    cpu_gelu_forward(out, pre, (size_t)N * OC);
}
static void cpu_matmul_backward_dgelu(void *dinp, void *dw, void *dbias, const void *dout, const void *inp,
                                      const void *w, const void *gelu_pre, int N, int C, int OC) {
    cpu_matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC, 0, OC);
    cpu_gelu_backward(dinp, gelu_pre, dinp, (size_t)N * C);
}

static void cpu_residual_forward(void *out_, const void *a_, const void *b_, size_t n) {
    float *out = out_;
    const float *a = a_, *b = b_;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void cpu_accumulate(void *dst_, const void *src_, size_t n) {
    float *dst = dst_;
    const float *src = src_;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static void cpu_scale(void *x_, float s, size_t n) {
    float *x = x_;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

/* ------------------------------------------------------------------ softmax + cross-entropy */

/* The row pieces of the cross-entropies. A row's max; its sum_j exp(x_j - shift) in double
 * (zt_vec_exp_sum: a fixed order), the fp32 e_j kept in e when non-NULL (e may alias x); and the
 * gradient from the kept e_j:
 * d_j = (e_j / S - [j == target]) * dloss for j < V (no one-hot term for a target outside [0,V)),
 * 0 for j in [V, Vp). */
/* The row max is NaN when any x_j is: a plain max drops NaN, and a row (or, under tensor
 * parallelism, one rank's part of it) of NaN logits would then look empty (max -inf) and vanish from
 * the loss. A NaN max makes the sum, the loss and the gradient NaN, as they should be. */
static inline float row_max(const float *x, int V) {
    float mx = -INFINITY;
    int nan = 0;
#pragma omp simd reduction(max : mx) reduction(| : nan)
    for (int j = 0; j < V; j++) {
        mx = x[j] > mx ? x[j] : mx;
        nan |= x[j] != x[j];
    }
    return nan ? NAN : mx;
}
static void row_xent_grad(float *d, int V, int Vp, double sum, int tgt, float dloss) {
    float f = (float)(1.0 / sum) * dloss;
#pragma omp simd
    for (int j = 0; j < V; j++) d[j] *= f;
    if (tgt >= 0 && tgt < V) d[tgt] -= dloss;
    for (int j = V; j < Vp; j++) d[j] = 0.0f;
}

/* Per row: max, e_j = exp(x_j - max) (stored in dlogits when wanted), S = sum e_j in double;
 * loss = log S - (x_target - max); dlogits_j = (e_j / S - [j == target]) * dloss. Columns V..Vp-1
 * of logits are never read; of dlogits they are zeroed. A target outside [0,V) gives a NaN loss
 * (and no one-hot term) rather than an out-of-bounds read. */
static void cpu_softmax_xent(float *losses, void *dlogits_, const void *logits_, const int *targets, int N, int V, int Vp,
                             float dloss) {
    float *dlogits = dlogits_;
    const float *logits = logits_;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = logits + (size_t)i * Vp;
        float *d = dlogits ? dlogits + (size_t)i * Vp : NULL; /* may alias x */
        int tgt = targets[i];
        int ok = tgt >= 0 && tgt < V;
        float xt = ok ? x[tgt] : 0.0f;
        float mx = row_max(x, V);
        double sum = zt_vec_exp_sum(d, x, mx, (size_t)V);
        if (d) row_xent_grad(d, V, Vp, sum, tgt, dloss);
        losses[i] = ok ? (float)(log(sum) - ((double)xt - mx)) : NAN;
    }
}

/* Vocabulary-parallel cross-entropy (backend.h). Part 1 is softmax_xent's row max and sum over this
 * rank's Vl columns, the sum rounded to fp32 for the all-gather. Part 2 rescales the ranks' sums to
 * the common max in double, in rank order, then takes the loss and gradient as softmax_xent does.
 * With tp = 1 the results are within an fp32 rounding of softmax_xent's, not bit-identical: the
 * row sum reaches part 2 rounded to fp32, where softmax_xent keeps it in double. */
static void cpu_xent_partial(float *stats, const void *logits_, const int *targets, int N, int Vl, int Vp, int vocab_lo) {
    const float *logits = logits_;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = logits + (size_t)i * Vp;
        int tgt = targets[i] - vocab_lo;
        float mx = row_max(x, Vl);
        stats[3 * (size_t)i] = mx;
        stats[3 * (size_t)i + 1] = (float)zt_vec_exp_sum(NULL, x, mx, (size_t)Vl);
        stats[3 * (size_t)i + 2] = tgt >= 0 && tgt < Vl ? x[tgt] : 0.0f;
    }
}

static void cpu_xent_parallel(float *losses, void *dlogits_, const void *logits_, const int *targets,
                              const float *stats_all, int tp, int N, int Vl, int Vp, int vocab_lo, float dloss) {
    float *dlogits = dlogits_;
    const float *logits = logits_;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float mx = -INFINITY; /* NaN when any rank's is (row_max): never fmaxf, which drops it */
        for (int r = 0; r < tp; r++) {
            float m = stats_all[((size_t)r * N + i) * 3];
            mx = m > mx || m != m ? m : mx;
            if (mx != mx) break;
        }
        double sum = 0.0, xt = 0.0;
        for (int r = 0; r < tp; r++) {
            const float *st = stats_all + ((size_t)r * N + i) * 3;
            if (st[0] != -INFINITY) sum += (double)st[1] * exp((double)st[0] - mx); /* a rank with no columns adds 0 */
            xt += st[2];
        }
        if (dlogits) {
            const float *x = logits + (size_t)i * Vp;
            float *d = dlogits + (size_t)i * Vp; /* may alias x */
            zt_vec_exp_sum(d, x, mx, (size_t)Vl);
            row_xent_grad(d, Vl, Vp, sum, targets[i] - vocab_lo, dloss);
        }
        losses[i] = (float)(log(sum) - (xt - mx));
    }
}

/* ------------------------------------------------------------------ optimizer, reductions */

/* the SIMD host AdamW of cpu_adam.c (the same roundings as zt_adamw_element, bit for bit) */
static void cpu_adamw(float *master, float *m, float *v, const void *grad_, void *params_out_, size_t n,
                      const zt_adam_step *step) {
    float *out = params_out_;
    zt_cpu_adamw(master, m, v, grad_, n, step, NULL, ZT_F32, 0);
    if (out && out != master) memcpy(out, master, n * sizeof(float));
}

/* Fixed 4096-element chunks, each summed by zt_vec_sumsq (16 interleaved double accumulators
 * combined in a fixed order); then the chunk sums in chunk order. The result depends only on x and n.
 * Values in a 16-bit dtype are widened a chunk at a time (exact): the simulated GPU's sumsq, which
 * widens the whole vector first and calls cpu_sumsq, gets the same sum. */
#define SUMSQ_CHUNK ZT_SUMSQ_CHUNK
double zt_cpu_sumsq_g(const void *x, size_t n, zt_dtype dtype) {
    size_t nchunk = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK, E = zt_dtype_size(dtype);
    double total = 0.0;
    enum { BATCH = 1024 }; /* chunk sums computed a batch at a time into a stack buffer */
    double part[BATCH];
    for (size_t c0 = 0; c0 < nchunk; c0 += BATCH) {
        size_t nb = nchunk - c0 < BATCH ? nchunk - c0 : BATCH;
#pragma omp parallel for schedule(static) if (nb > 1)
        for (size_t c = 0; c < nb; c++) {
            size_t off = (c0 + c) * SUMSQ_CHUNK, len = n - off < SUMSQ_CHUNK ? n - off : SUMSQ_CHUNK;
            const char *chunk = (const char *)x + off * E;
            float wide[SUMSQ_CHUNK];
            if (dtype != ZT_F32) zt_cpu_to_f32(wide, chunk, len, dtype);
            part[c] = zt_vec_sumsq(dtype == ZT_F32 ? (const float *)chunk : wide, len);
        }
        for (size_t c = 0; c < nb; c++) total += part[c];
    }
    return total;
}

static double cpu_sumsq(const void *x, size_t n) { return zt_cpu_sumsq_g(x, n, ZT_F32); }

/* dst[i] += src[i] in dtype: widened, added in fp32, rounded to nearest even (fp32: cpu_accumulate's
 * add), a 4096-element chunk at a time. With dst_zero, dst is taken as +0 and not read: each element
 * is +0 + src[i] by the same instructions, so the result is bit for bit the add into a zeroed dst
 * (-0 comes out +0, a NaN is quieted as the add quiets it) without zeroing or reading dst. */
static void accumulate_g(void *dst, const void *src, size_t n, zt_dtype dtype, int dst_zero) {
    if (dtype == ZT_F32 && !dst_zero) {
        cpu_accumulate(dst, src, n);
        return;
    }
    size_t nchunk = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK, E = zt_dtype_size(dtype);
#pragma omp parallel for schedule(static) if (nchunk > 1)
    for (size_t c = 0; c < nchunk; c++) {
        size_t off = c * SUMSQ_CHUNK, len = n - off < SUMSQ_CHUNK ? n - off : SUMSQ_CHUNK;
        float a[SUMSQ_CHUNK], b[SUMSQ_CHUNK];
        if (dst_zero) memset(a, 0, len * sizeof *a);
        else zt_cpu_to_f32(a, (const char *)dst + off * E, len, dtype);
        zt_cpu_to_f32(b, (const char *)src + off * E, len, dtype);
        for (size_t i = 0; i < len; i++) a[i] += b[i];
        zt_cpu_from_f32((char *)dst + off * E, a, len, dtype);
    }
}

void zt_cpu_accumulate_g(void *dst, const void *src, size_t n, zt_dtype dtype) { accumulate_g(dst, src, n, dtype, 0); }
void zt_cpu_accumulate_into_zero_g(void *dst, const void *src, size_t n, zt_dtype dtype) {
    accumulate_g(dst, src, n, dtype, 1);
}

/* ------------------------------------------------------------------ the table */

static const zt_backend cpu_backend = {
    .name = "cpu",
    .compute_dtype = ZT_F32,
    .memory_is_host = 1,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .memset_zero = cpu_memset_zero,
    .copy = cpu_copy,
    .copy_async = cpu_copy,
    .copy_ahead = cpu_copy, /* host memory: done when it returns, nothing to wait for */
    .wait_ahead = cpu_nothing,
    .mark = cpu_mark,
    .wait_mark = cpu_wait_mark,
    .transfer = cpu_copy,
    .synchronize = cpu_synchronize,
    .bind_thread = cpu_bind_thread,
    .mem_info = cpu_mem_info,
    .to_compute = cpu_to_compute,
    .to_f32 = cpu_to_f32,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .matmul_forward_gelu = cpu_matmul_forward_gelu,
    .matmul_backward_dgelu = cpu_matmul_backward_dgelu,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .attention_gqa_forward = cpu_attention_gqa_forward,
    .attention_gqa_backward = cpu_attention_gqa_backward,
    .rmsnorm_forward = zt_cpu_rmsnorm_forward,
    .rmsnorm_backward = zt_cpu_rmsnorm_backward,
    .rope = zt_cpu_rope,
    .swiglu_forward = zt_cpu_swiglu_forward,
    .swiglu_backward = zt_cpu_swiglu_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .residual_forward = cpu_residual_forward,
    .accumulate = cpu_accumulate,
    .softmax_xent = cpu_softmax_xent,
    .gemm = cpu_gemm,
    .add_bias = cpu_add_bias,
    .gemm_f32 = cpu_gemm_f32,
    .round_bias = cpu_round_bias,
    .bias_grad = cpu_bias_grad,
    .xent_partial = cpu_xent_partial,
    .xent_parallel = cpu_xent_parallel,
    .adamw = cpu_adamw,
    .sumsq = cpu_sumsq,
    .scale = cpu_scale,
};

const zt_backend *zt_backend_cpu(void) {
    /* all parallelism is OpenMP's (see the top of this file); idempotent */
    openblas_set_num_threads(1);
    return &cpu_backend;
}
