/* bench_ops.c — CPU backend op timings at GPT-2 124M training shapes (B=4 T=64 C=768 NH=12
 * V=50257 padded to 50304), against this machine's FMA peak measured in the same run (a tight loop
 * of the widest FMA the CPU has, on one core and on all threads), and the OpenBLAS SGEMM peak.
 * Runs on the OpenBLAS kernels zerotrain would choose (blas_core.h) and says which, and why.
 * Every number is the median of several runs after a warm-up. Prints a table and an estimated
 * training step time (the sum of the ops one step runs); always exits 0.
 * Also prints the time of the step's other ops (everything but the matmul rows), the part the
 * OpenBLAS core type does not touch, and the Llama family's ops (RMSNorm, rope, grouped-query
 * attention, SwiGLU) at the same shape, outside the step estimate.
 * Usage: [BENCH_CLOCK=cpu] bench_ops [reps [L C NH B T]]   (OMP_NUM_THREADS picks the thread count,
 * like the trainer; the shape defaults to GPT-2 124M at B4 T64; `6 384 6 8 128` is
 * configs/bench_small.yaml's) */
#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/blas_core.h"

static const zt_backend *be;
static int reps = 7;

/* BENCH_CLOCK=cpu times the process's CPU time instead of the wall clock: on a shared machine
 * whose other jobs keep taking the cores away, a one-thread run (OMP_NUM_THREADS=1) then counts
 * only its own work (with more threads it would count their spinning at barriers too) */
static double now(void) {
    static int clock_id = -1;
    if (clock_id < 0) {
        const char *c = getenv("BENCH_CLOCK");
        clock_id = c && !strcmp(c, "cpu") ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
    }
    struct timespec t;
    clock_gettime(clock_id, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
/* median seconds of `reps` runs of the statement, after one warm-up run */
#define TIME(var, stmt)                                          \
    do {                                                         \
        double ts_[64];                                          \
        stmt;                                                    \
        for (int r_ = 0; r_ < reps; r_++) {                      \
            double t0_ = now();                                  \
            stmt;                                                \
            ts_[r_] = now() - t0_;                               \
        }                                                        \
        qsort(ts_, reps, sizeof(double), cmp_d);                 \
        var = ts_[reps / 2];                                     \
        t_min = ts_[0];                                          \
    } while (0)
static double t_min; /* fastest run of the last TIME(), printed beside the median: the build
                      * machine is shared, and the minimum shows the op undisturbed */

static float *frand(size_t n, float scale) {
    float *p = be->alloc(n * sizeof(float));
    unsigned s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = scale * ((float)(s >> 8) / 16777216.0f - 0.5f);
    }
    return p;
}

static double peak_gflops = 0; /* the best SGEMM of bench_sgemm(0) */
static double fma_peak = 0;    /* the FMA loop on all threads: what every GFLOP/s is a share of */
static double gemm_flops = 0, gemm_sec = 0, gemm_min = 0; /* the step's GEMMs (matmul rows), with their counts */
static void row_flops(const char *op, const char *shape, double sec, double flops, double count) {
    double g = flops / sec / 1e9;
    printf("%-24s %-26s %9.3f ms (min %8.3f)  %7.1f GFLOP/s  %5.1f%% of FMA peak  x%-3.0f\n", op, shape, sec * 1e3,
           t_min * 1e3, g, fma_peak > 0 ? 100 * g / fma_peak : 0.0, count);
    if (!strncmp(op, "matmul", 6)) gemm_flops += flops * count, gemm_sec += sec * count, gemm_min += t_min * count;
}
static void row_bytes(const char *op, const char *shape, double sec, double bytes, double count) {
    printf("%-24s %-26s %9.3f ms (min %8.3f)  %7.1f GB/s                    x%-3.0f\n", op, shape, sec * 1e3, t_min * 1e3,
           bytes / sec / 1e9, count);
}

/* ------------------------------------------------------------------ FMA peak */

/* `chains` independent accumulators a = a*m + c (more than FMA latency x FMA ports, so the loop is
 * bound by throughput alone), all in registers: nothing is loaded or stored. The values converge
 * to c/(1-m) = 0.1, no denormals. Returns one lane, so the loop cannot be dropped. */
#define FMA_LOOP(fn, isa, vec, set1, fma, add, store, chains)                      \
    __attribute__((target(isa))) static float fn(long iters) {                     \
        vec a[chains], m = set1(0.999999f), c = set1(1e-7f);                       \
        for (int k = 0; k < chains; k++) a[k] = set1((float)k);                    \
        for (long i = 0; i < iters; i++) {                                         \
            _Pragma("GCC unroll 32") for (int k = 0; k < chains; k++) a[k] = fma;  \
        }                                                                          \
        for (int k = 1; k < chains; k++) a[0] = add(a[0], a[k]);                   \
        float out[sizeof(vec) / 4];                                                \
        store(out, a[0]);                                                          \
        return out[0];                                                             \
    }
/* AVX-512 has 32 registers, AVX2 16: 24 and 12 chains leave room for m and c */
FMA_LOOP(fma_avx512, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps(a[k], m, c), _mm512_add_ps, _mm512_storeu_ps, 24)
FMA_LOOP(fma_avx2, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps(a[k], m, c), _mm256_add_ps, _mm256_storeu_ps, 12)
FMA_LOOP(muladd_avx, "avx", __m256, _mm256_set1_ps, _mm256_add_ps(_mm256_mul_ps(a[k], m), c), _mm256_add_ps,
         _mm256_storeu_ps, 12)
FMA_LOOP(muladd_sse, "sse2", __m128, _mm_set1_ps, _mm_add_ps(_mm_mul_ps(a[k], m), c), _mm_add_ps, _mm_storeu_ps, 12)

static const struct {
    const char *what;
    float (*loop)(long);
    int flops_per_iter; /* chains x lanes x 2 */
} fma_paths[] = {
    [ZT_SIMD_AVX512] = {"AVX-512 FMA (zmm)", fma_avx512, 24 * 16 * 2},
    [ZT_SIMD_AVX2] = {"AVX2 FMA (ymm)", fma_avx2, 12 * 8 * 2},
    [ZT_SIMD_AVX] = {"AVX mul+add, no FMA on this CPU (ymm)", muladd_avx, 12 * 8 * 2},
    [ZT_SIMD_SSE] = {"SSE mul+add, no FMA on this CPU (xmm)", muladd_sse, 12 * 4 * 2},
};

/* GFLOP/s of the CPU's widest loop on `threads` threads at once (each its own loop), best of 3 */
static double fma_gflops(zt_simd simd, int threads) {
    const long iters = 20 * 1000 * 1000 / (fma_paths[simd].flops_per_iter / 64); /* ~0.1 s a thread */
    double best = 0;
    volatile float sink = 0;
    for (int r = 0; r < 4; r++) { /* the first is a warm-up: the clock settles for the wide units */
        double t0 = now();
#pragma omp parallel num_threads(threads)
        {
            float v = fma_paths[simd].loop(iters);
#pragma omp atomic
            sink += v;
        }
        double g = (double)iters * fma_paths[simd].flops_per_iter * threads / (now() - t0) / 1e9;
        if (r > 0 && g > best) best = g;
    }
    return best;
}

static void bench_fma_peak(void) {
    zt_simd simd = zt_cpu_simd(NULL);
    int threads = omp_get_max_threads();
    double one = fma_gflops(simd, 1);
    fma_peak = fma_gflops(simd, threads);
    printf("FMA peak (%s, tight loop, best of 3): 1 core %.1f GFLOP/s, %d threads %.1f GFLOP/s\n\n",
           fma_paths[simd].what, one, threads, fma_peak);
}

/* ------------------------------------------------------------------ SGEMM peak */

/* C[M,N] = A[M,K] op(B): tb = B stored [N,K] (the tied LM head's shape) */
static double sgemm_blas(int M, int N, int K, int tb, const float *A, const float *B, float *C) {
    double t;
    TIME(t, cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, K, B, tb ? K : N,
                        0.0f, C, N));
    return 2.0 * M * N * K / t / 1e9;
}
static double sgemm_backend(int M, int N, int K, int tb, const float *A, const float *B, float *C) {
    double t;
    TIME(t, be->matmul_forward(C, A, B, NULL, M, K, N, tb, N));
    return 2.0 * M * N * K / t / 1e9;
}
static const int shapes[][4] = {{2048, 2048, 2048, 0}, {256, 2304, 768, 0}, {256, 3072, 768, 0}, {256, 768, 3072, 0},
                                {256, 50257, 768, 1}};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };
/* threaded = 0: the backend's path (OpenMP panels of single-threaded OpenBLAS), which sets the
 * peak; threaded = 1: OpenBLAS's own pthreads, for comparison. That one runs LAST: after a
 * threaded call, the pthreads build of OpenBLAS 0.3.21 leaves a worker busy-waiting even when set
 * back to one thread, which halves the speed of everything that follows on a 2-core machine. */
static void bench_sgemm(int threaded) {
    int nthreads = omp_get_max_threads();
    if (threaded) printf("\nSGEMM with OpenBLAS's own threading (%d threads), GFLOP/s (median of %d):\n", nthreads, reps);
    else printf("SGEMM as the backend runs it (OpenMP panels of 1-thread OpenBLAS, %d threads), GFLOP/s (median of %d):\n",
                nthreads, reps);
    for (int s = 0; s < NSHAPES; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], tb = shapes[s][3];
        float *A = frand((size_t)M * K, 1), *B = frand((size_t)K * N, 1), *C = frand((size_t)M * N, 1);
        double g;
        if (threaded) {
            openblas_set_num_threads(nthreads);
            g = sgemm_blas(M, N, K, tb, A, B, C);
            openblas_set_num_threads(1);
        } else {
            g = sgemm_backend(M, N, K, tb, A, B, C);
            if (g > peak_gflops) peak_gflops = g;
        }
        printf("  M=%-5d N=%-6d K=%-5d %s  %7.1f  = %5.1f%% of FMA peak\n", M, N, K, tb ? "B^T" : "B  ", g,
               fma_peak > 0 ? 100 * g / fma_peak : 0.0);
        be->free(A), be->free(B), be->free(C);
    }
    if (!threaded)
        printf("SGEMM peak (best of the above): %.1f GFLOP/s = %.1f%% of FMA peak\n\n", peak_gflops,
               fma_peak > 0 ? 100 * peak_gflops / fma_peak : 0.0);
}

/* ------------------------------------------------------------------ ops */

int main(int argc, char **argv) {
    zt_blas_core_choose(argv); /* the kernels `zerotrain train` would run; may re-execute */
    if (argc > 1) reps = atoi(argv[1]);
    if (reps < 1) reps = 1;
    if (reps > 64) reps = 64;
    be = zt_backend_cpu();
    char kernels[512];
    printf("zerotrain CPU backend bench: %d OpenMP threads, %s\n%s\n\n", omp_get_max_threads(),
           openblas_get_config(), zt_blas_core_line(kernels, sizeof kernels));
    bench_fma_peak();
    bench_sgemm(0);

    int L = 12, C = 768, NH = 12, B = 4, T = 64;
    const int V = 50257, Vp = 50304;
    if (argc == 7) L = atoi(argv[2]), C = atoi(argv[3]), NH = atoi(argv[4]), B = atoi(argv[5]), T = atoi(argv[6]);
    if (argc != 2 && argc != 7 && argc != 1) {
        fprintf(stderr, "usage: bench_ops [reps [L C NH B T]]\n");
        return 2;
    }
    if (L < 1 || C < 1 || NH < 1 || C % NH || B < 1 || T < 1 || T > 1024) {
        fprintf(stderr, "bench_ops: shape L%d C%d NH%d B%d T%d: each >= 1, NH divides C, T <= 1024\n", L, C, NH, B, T);
        return 2;
    }
    printf("shape: L%d C%d NH%d B%d T%d V%d\n", L, C, NH, B, T, V);
    const int N = B * T;
    const size_t NC = (size_t)N * C;
    float *wte = frand((size_t)Vp * C, 0.1f), *wpe = frand((size_t)1024 * C, 0.1f), *dwte = frand((size_t)Vp * C, 0);
    float *dwpe = frand((size_t)1024 * C, 0), *x = frand(NC, 1), *y = frand(NC, 1), *dy = frand(NC, 1), *dx = frand(NC, 1);
    float *lw = frand(C, 1), *lb = frand(C, 1), *dlw = frand(C, 0), *dlb = frand(C, 0), *mean = frand(N, 0), *rstd = frand(N, 0);
    float *w = frand((size_t)C * 4 * C, 0.05f), *dw = frand((size_t)C * 4 * C, 0), *bias = frand(4 * C, 0.1f), *dbias = frand(4 * C, 0);
    float *big = frand(4 * NC, 1), *big2 = frand(4 * NC, 1), *dbig = frand(4 * NC, 1);
    float *qkv = frand(3 * NC, 1), *dqkv = frand(3 * NC, 0), *att = frand((size_t)B * NH * T * T, 0);
    float *datt = frand((size_t)B * NH * T * T, 0), *logits = frand((size_t)N * Vp, 4), *losses = frand(N, 0);
    int *tok = malloc(N * sizeof(int)), *tgt = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) tok[i] = (i * 7919) % V, tgt[i] = (i * 104729) % V;

    double t, step = 0, step_min = 0;
    char shape[64];
    printf("%-24s %-26s %12s %15s  %15s  %14s  %s\n", "op", "shape", "median", "", "rate (median)", "", "per step");
#define ADD(sec, count) step += (sec) * (count), step_min += t_min * (count)

    snprintf(shape, sizeof shape, "B%d T%d C%d", B, T, C);
    TIME(t, be->embedding_forward(x, tok, wte, 0, V, wpe, B, T, C));
    row_bytes("embedding_forward", shape, t, 3.0 * NC * 4, 1), ADD(t, 1);
    TIME(t, be->embedding_backward(dwte, 0, V, dwpe, dy, tok, B, T, C));
    row_bytes("embedding_backward", shape, t, 5.0 * NC * 4, 1), ADD(t, 1);

    snprintf(shape, sizeof shape, "N%d C%d", N, C);
    TIME(t, be->layernorm_forward(y, mean, rstd, x, lw, lb, N, C));
    row_bytes("layernorm_forward", shape, t, 2.0 * NC * 4, 2 * L + 1), ADD(t, 2 * L + 1);
    TIME(t, be->layernorm_backward(dx, dlw, dlb, dy, x, lw, mean, rstd, N, C));
    row_bytes("layernorm_backward", shape, t, 4.0 * NC * 4, 2 * L + 1), ADD(t, 2 * L + 1);

    struct { const char *name; int c, oc; } mm[] = {{"qkv", C, 3 * C}, {"attn proj", C, C}, {"fc", C, 4 * C}, {"fc proj", 4 * C, C}};
    for (int k = 0; k < 4; k++) {
        char name[64];
        float *in = mm[k].c == C ? x : big, *out = mm[k].oc == C ? y : big2;
        snprintf(shape, sizeof shape, "N%d C%d OC%d", N, mm[k].c, mm[k].oc);
        double fl = 2.0 * N * mm[k].c * mm[k].oc;
        snprintf(name, sizeof name, "matmul_fwd %s", mm[k].name);
        TIME(t, be->matmul_forward(out, in, w, bias, N, mm[k].c, mm[k].oc, 0, mm[k].oc));
        row_flops(name, shape, t, fl, L), ADD(t, L);
        snprintf(name, sizeof name, "matmul_bwd %s", mm[k].name);
        TIME(t, be->matmul_backward(mm[k].c == C ? dx : dbig, dw, dbias, out, in, w, N, mm[k].c, mm[k].oc, 0, mm[k].oc));
        row_flops(name, shape, t, 2 * fl, L), ADD(t, L);
    }
    snprintf(shape, sizeof shape, "N%d C%d V%d Vp%d", N, C, V, Vp);
    TIME(t, be->matmul_forward(logits, x, wte, NULL, N, C, V, 1, Vp));
    row_flops("matmul_fwd lm_head (w^T)", shape, t, 2.0 * N * C * V, 1), ADD(t, 1);
    TIME(t, be->matmul_backward(dx, dwte, NULL, logits, x, wte, N, C, V, 1, Vp));
    row_flops("matmul_bwd lm_head (w^T)", shape, t, 4.0 * N * C * V, 1), ADD(t, 1);

    snprintf(shape, sizeof shape, "B%d T%d C%d NH%d", B, T, C, NH);
    double afl = 2.0 * 2 * B * NH * (double)T * T * (C / NH); /* QK^T and att V, full T x T */
    TIME(t, be->attention_forward(y, att, qkv, B, T, C, NH));
    row_flops("attention_forward", shape, t, afl, L), ADD(t, L);
    TIME(t, be->attention_backward(dqkv, datt, dy, qkv, att, B, T, C, NH));
    row_flops("attention_backward", shape, t, 2 * afl, L), ADD(t, L);

    snprintf(shape, sizeof shape, "n=%zu", 4 * NC);
    TIME(t, be->gelu_forward(big2, big, 4 * NC));
    row_bytes("gelu_forward", shape, t, 2.0 * 4 * NC * 4, L), ADD(t, L);
    TIME(t, be->gelu_backward(dbig, big, dbig, 4 * NC));
    row_bytes("gelu_backward", shape, t, 3.0 * 4 * NC * 4, L), ADD(t, L);
    snprintf(shape, sizeof shape, "n=%zu", NC);
    TIME(t, be->residual_forward(y, x, dy, NC));
    row_bytes("residual_forward", shape, t, 3.0 * NC * 4, 0);
    TIME(t, be->accumulate(y, x, NC));
    row_bytes("accumulate", shape, t, 3.0 * NC * 4, 2 * L), ADD(t, 2 * L);

    snprintf(shape, sizeof shape, "N%d V%d Vp%d", N, V, Vp);
    float *dl = frand((size_t)N * Vp, 0);
    TIME(t, be->softmax_xent(losses, dl, logits, tgt, N, V, Vp, 1.0f / N));
    row_bytes("softmax_xent", shape, t, 2.0 * N * Vp * 4, 1), ADD(t, 1);

    /* the optimizer over the model's parameter count (GPT-2 124M: 124439808; fp32 master = params on the CPU) */
    size_t np = (size_t)V * C + (size_t)1024 * C + (size_t)L * (12 * (size_t)C * C + 13 * (size_t)C) + 2 * (size_t)C;
    float *p = frand(np, 0.1f), *m = frand(np, 0), *v = frand(np, 0), *g = frand(np, 0.01f);
    snprintf(shape, sizeof shape, "n=%zu", np);
    int reps_save = reps;
    reps = reps < 3 ? reps : 3;
    TIME(t, be->sumsq(g, np));
    row_bytes("sumsq", shape, t, 4.0 * np, 1), ADD(t, 1);
    TIME(t, be->scale(g, 1.0f, np));
    row_bytes("scale", shape, t, 8.0 * np, 0);
    zt_adam_step st = {6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f, 1.0f};
    TIME(t, be->adamw(p, m, v, g, p, np, &st));
    row_bytes("adamw", shape, t, 7.0 * 4 * np, 1), ADD(t, 1);
    reps = reps_save;

    /* the Llama family's ops at the same B, T, C, NH (x0: not in GPT-2's step estimate below): grouped
     * query attention with NKV = NH / 4 (or / 3, / 2) key/value heads, SwiGLU over Llama's width 8C/3
     * rounded up to 256 */
    int NKV = NH % 4 == 0 ? NH / 4 : NH % 3 == 0 ? NH / 3 : NH % 2 == 0 ? NH / 2 : NH, HD = C / NH;
    int FF = (8 * C / 3 + 255) / 256 * 256;
    float *gu = frand((size_t)N * 2 * FF, 2), *dgu = frand((size_t)N * 2 * FF, 0), *sw = frand((size_t)N * FF, 1);
    float *cs = frand((size_t)T * HD, 1);
    printf("\nthe Llama family's ops (not in the step estimate)\n");
    snprintf(shape, sizeof shape, "N%d C%d", N, C);
    TIME(t, be->rmsnorm_forward(y, rstd, x, lw, 1e-5f, N, C));
    row_bytes("rmsnorm_forward", shape, t, 2.0 * NC * 4, 0);
    TIME(t, be->rmsnorm_backward(dx, dlw, dy, x, lw, rstd, N, C));
    row_bytes("rmsnorm_backward", shape, t, 4.0 * NC * 4, 0);
    snprintf(shape, sizeof shape, "B%d T%d NH%d NKV%d HD%d", B, T, NH, NKV, HD);
    TIME(t, be->rope(qkv, cs, B, T, NH, NKV, HD, 0));
    row_bytes("rope", shape, t, 2.0 * N * (NH + NKV) * HD * 4 + (double)T * HD * 4, 0);
    TIME(t, be->attention_gqa_forward(y, att, qkv, B, T, NH, NKV, HD));
    row_flops("attention_gqa_forward", shape, t, afl, 0);
    TIME(t, be->attention_gqa_backward(dqkv, datt, dy, qkv, att, B, T, NH, NKV, HD));
    row_flops("attention_gqa_backward", shape, t, 2 * afl, 0);
    snprintf(shape, sizeof shape, "N%d I%d", N, FF);
    TIME(t, be->swiglu_forward(sw, gu, N, FF));
    row_bytes("swiglu_forward", shape, t, 3.0 * N * FF * 4, 0);
    TIME(t, be->swiglu_backward(dgu, gu, sw, N, FF));
    row_bytes("swiglu_backward", shape, t, 5.0 * N * FF * 4, 0);

    printf("\nestimated training step (the ops above x their count per step): %.3f s with median times, %.3f s with minimum times\n",
           step, step_min);
    printf("the step's other ops (not the matmul rows): %.3f s with median times, %.3f s with minimum times\n",
           step - gemm_sec, step_min - gemm_min);
    double model_flops = 6.0 * N * (12.0 * L * C * C + (double)V * C) + 3.0 * L * afl;
    printf("model FLOPs per step ~ %.1f GFLOP -> %.1f GFLOP/s = %.0f%% of SGEMM peak = %.1f%% of FMA peak\n",
           model_flops / 1e9, model_flops / step / 1e9, 100 * model_flops / step / 1e9 / peak_gflops,
           100 * model_flops / step / 1e9 / fma_peak);
    printf("GEMMs of the step (the matmul rows x their counts): %.1f GFLOP in %.3f s = %.1f GFLOP/s = %.1f%% of FMA peak\n",
           gemm_flops / 1e9, gemm_sec, gemm_flops / gemm_sec / 1e9, 100 * gemm_flops / gemm_sec / 1e9 / fma_peak);
    bench_sgemm(1);
    return 0;
}
