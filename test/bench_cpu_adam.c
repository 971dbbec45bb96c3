/* bench_cpu_adam.c — host AdamW throughput on 2^26 elements with 2 threads (or argv[1]), against this
 * machine's own limit measured in the same run: one in-place pass that reads four fp32 arrays and
 * writes three of them back (28 B/element: read p, g, m, v; write p, m, v), the traffic AdamW
 * cannot avoid. Prints elements/s of both, the fraction, and the scalar path and the bf16 copy-out
 * for comparison, and the out-of-place update super_offload's speculative lane runs (the same
 * 28 B/element: reads p, m, v, g from one place, writes them to another). Best of 7 runs after a
 * warm-up. Always exits 0. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu_adam.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* the bound: same arrays, same access pattern, trivial math */
static void stream_pass(float *p, float *m, float *v, const float *g, size_t n, int nt) {
#pragma omp parallel for simd schedule(static) num_threads(nt)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        p[i] += gi;
        m[i] += gi;
        v[i] += gi;
    }
}

#define BEST(var, stmt)                                   \
    do {                                                  \
        stmt;                                             \
        var = 1e30;                                       \
        for (int r_ = 0; r_ < 7; r_++) {                  \
            double t0_ = now();                           \
            stmt;                                         \
            double dt_ = now() - t0_;                     \
            if (dt_ < var) var = dt_;                     \
        }                                                 \
    } while (0)

int main(int argc, char **argv) {
    int nt = argc > 1 ? atoi(argv[1]) : 2;
    size_t n = (size_t)1 << 26;
    float *p = aligned_alloc(64, n * 4), *m = aligned_alloc(64, n * 4), *v = aligned_alloc(64, n * 4),
          *g = aligned_alloc(64, n * 4);
    uint16_t *out = aligned_alloc(64, n * 2);
    /* first touch by the threads that will use the pages (contiguous static blocks) */
#pragma omp parallel for schedule(static) num_threads(nt)
    for (size_t i = 0; i < n; i++) {
        p[i] = 0.01f * (float)(i % 1000);
        g[i] = 1e-3f * (float)(i % 77) - 0.03f;
        m[i] = 0.0f;
        v[i] = 0.0f;
        out[i] = 0;
    }
    zt_adam_step s = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f, 1.0f};
    int best = zt_cpu_adam_best_isa();
    double t_bound, t_adam, t_adam16, t_scalar, t_fused, t_twopass, t_spec;
    /* what Twin-Flow's host lane does on GPUs: bf16 gradients in, bf16 parameters out; widened on
     * the fly, or (before) widened in a separate pass over chunks of 2^20 into an fp32 buffer */
    uint16_t *g16 = aligned_alloc(64, n * 2);
    float *g32 = aligned_alloc(64, ((size_t)1 << 20) * 4);
    for (size_t i = 0; i < n; i++) g16[i] = zt_f32_to_bf16_bits(g[i]);
    BEST(t_bound, stream_pass(p, m, v, g, n, nt));
    BEST(t_adam, zt_cpu_adamw_isa(p, m, v, g, n, &s, NULL, ZT_F32, nt, best));
    BEST(t_adam16, zt_cpu_adamw_isa(p, m, v, g, n, &s, out, ZT_BF16, nt, best));
    BEST(t_scalar, zt_cpu_adamw_isa(p, m, v, g, n, &s, NULL, ZT_F32, nt, ZT_ADAM_ISA_SCALAR));
    BEST(t_fused, zt_cpu_adamw_g(p, m, v, g16, ZT_BF16, n, &s, out, ZT_BF16, nt, best));
    float *po = aligned_alloc(64, n * 4), *mo = aligned_alloc(64, n * 4), *vo = aligned_alloc(64, n * 4);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (size_t i = 0; i < n; i++) po[i] = mo[i] = vo[i] = 0.0f;
    BEST(t_spec, zt_cpu_adamw_g_to(p, m, v, po, mo, vo, g16, ZT_BF16, n, &s, out, ZT_BF16, nt, best));
    BEST(t_twopass, for (size_t a = 0; a < n; a += (size_t)1 << 20) {
        zt_cpu_to_f32(g32, g16 + a, (size_t)1 << 20, ZT_BF16);
        zt_cpu_adamw_isa(p + a, m + a, v + a, g32, (size_t)1 << 20, &s, out + a, ZT_BF16, nt, best);
    });
    double e_bound = n / t_bound, e_adam = n / t_adam;
    printf("cpu adam, %zu elements, %d threads, path %s\n", n, nt, zt_cpu_adam_isa_name(best));
    printf("  bound (read p,g,m,v; write p,m,v)  %6.3f G elements/s  (%5.1f GB/s)\n", e_bound * 1e-9, e_bound * 28e-9);
    printf("  adamw %-8s                    %6.3f G elements/s  = %5.1f %% of the bound\n", zt_cpu_adam_isa_name(best),
           e_adam * 1e-9, 100.0 * e_adam / e_bound);
    printf("  adamw %-8s + bf16 copy-out     %6.3f G elements/s  = %5.1f %% of the bound (30 B/element)\n",
           zt_cpu_adam_isa_name(best), n / t_adam16 * 1e-9, 100.0 * t_bound / t_adam16);
    printf("  adamw scalar                      %6.3f G elements/s  = %5.1f %% of the bound\n", n / t_scalar * 1e-9,
           100.0 * t_bound / t_scalar);
    printf("  bf16 grads in, bf16 params out: on the fly %6.3f G elements/s, widening pass first %6.3f G elements/s "
           "(%.2fx; 26 B/element = %5.1f %% of the bound)\n", n / t_fused * 1e-9, n / t_twopass * 1e-9,
           t_twopass / t_fused, 100.0 * (t_bound * 26.0 / 28.0) / t_fused);
    printf("  bf16 grads in, bf16 params out, out of place (super_offload's speculative lane) %6.3f G elements/s "
           "(%.2fx in place; 26 B/element = %5.1f %% of the bound)\n", n / t_spec * 1e-9, t_fused / t_spec,
           100.0 * (t_bound * 26.0 / 28.0) / t_spec);
    free(p); free(m); free(v); free(g); free(out); free(g16); free(g32); free(po); free(mo); free(vo);
    return 0;
}
