/* test_cpu_adam.c — the SIMD host AdamW (src/backend/cpu_adam.c): every path (scalar, AVX2, AVX-512 as far
 * as this CPU runs them) against opmath.h's zt_adamw_element bit for bit, and against the formula
 * in double; random inputs with zero and denormal gradients and denormal params, sizes that are
 * not multiples of any vector width or tile, weight decay on and off, 1 and 2 threads, and the
 * fused bf16/fp16 copy-out against opmath.h's round-to-nearest-even conversions; also Adam without
 * bias correction (m and v used as they are) against its formula (the fp16 one
 * checked here against F16C, and exhaustively on all binary16 values); and 16-bit gradients read on
 * the fly against widening them first; the out-of-place update (zt_cpu_adamw_g_to, Twin-Flow's
 * speculation) against the in-place one, its inputs left untouched. */
#pragma GCC optimize("fp-contract=off") /* the reference formula with the same roundings as cpu_adam.c */

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "backend/cpu_adam.h"

static uint64_t rng = 88172645463325252ull;
static float urand(void) { /* [-1, 1) */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

typedef struct state { float *p, *m, *v, *g; uint16_t *out; } state;

/* zeroed, 64-byte aligned (as the engine's host buffers are: the out-of-place path streams its stores
 * there), one element to spare (a shifted view is misaligned) */
static void *zeroed(size_t n, size_t esize) {
    size_t bytes = ((n + 1) * esize + 63) / 64 * 64;
    void *p = aligned_alloc(64, bytes);
    memset(p, 0, bytes);
    return p;
}
static state make(size_t n) {
    state s = {zeroed(n, 4), zeroed(n, 4), zeroed(n, 4), zeroed(n, 4), zeroed(n, 2)};
    for (size_t i = 0; i < n; i++) {
        s.p[i] = urand();
        s.g[i] = 0.1f * urand();
        if (i % 7 == 0) s.g[i] = 0.0f;                 /* zero gradients */
        if (i % 11 == 3) s.g[i] = 1e-40f * urand();    /* denormal gradients */
        if (i % 13 == 5) s.p[i] = 3e-39f;              /* denormal params */
        if (i % 17 == 2) s.p[i] = 70000.0f * urand();  /* beyond fp16 range: inf in the copy-out */
    }
    return s;
}
static state clone(state a, size_t n) {
    state s = make(n);
    memcpy(s.p, a.p, n * 4); memcpy(s.m, a.m, n * 4); memcpy(s.v, a.v, n * 4); memcpy(s.g, a.g, n * 4);
    return s;
}
static void drop(state s) { free(s.p); free(s.m); free(s.v); free(s.g); free(s.out); }
static int same(const float *a, const float *b, size_t n) { return n == 0 || memcmp(a, b, n * 4) == 0; }

/* the step the engine builds; bias correction off (optimizer.params.bias_correction false) passes 1 */
static zt_adam_step step_at(int t, float wd, int bias_correction) {
    float b1 = 0.9f, b2 = 0.95f;
    zt_adam_step s = {1e-3f, b1, b2, 1e-8f, wd, bias_correction ? 1.0f - powf(b1, (float)t) : 1.0f,
                      bias_correction ? 1.0f - powf(b2, (float)t) : 1.0f, 0.5f};
    return s;
}

/* 3 steps of every path against zt_adamw_element and the double formula (with bias correction, or
 * without: then the formula uses m and v as they are) */
static void test_paths_bc(size_t n, float wd, zt_dtype out_dt, int bc) {
    char name[200];
    const char *dtn = out_dt == ZT_BF16 ? "bf16" : out_dt == ZT_F16 ? "fp16" : "none";
    state ref = make(n);
    double *pd = calloc(n + 1, 8), *md = calloc(n + 1, 8), *vd = calloc(n + 1, 8);
    for (size_t i = 0; i < n; i++) pd[i] = ref.p[i];
    state paths[6]; int isas[6], np = 0;
    for (int isa = 0; isa <= zt_cpu_adam_best_isa(); isa++)
        for (int th = 1; th <= 2; th++) {
            if (isa == 0 && th == 2) continue;
            paths[np] = clone(ref, n);
            isas[np++] = isa * 2 + th - 1;
        }
    for (int t = 1; t <= 3; t++) {
        zt_adam_step s = step_at(t, wd, bc);
        for (size_t i = 0; i < n; i++) {
            zt_adamw_element(&ref.p[i], &ref.m[i], &ref.v[i], ref.g[i], &s);
            double gi = (double)ref.g[i] * s.grad_scale; /* PyTorch AdamW in double */
            md[i] = (double)s.beta1 * md[i] + (1 - (double)s.beta1) * gi;
            vd[i] = (double)s.beta2 * vd[i] + (1 - (double)s.beta2) * gi * gi;
            double mh = bc ? md[i] / s.bias_correction1 : md[i], vh = bc ? vd[i] / s.bias_correction2 : vd[i];
            pd[i] -= (double)s.lr * (mh / (sqrt(vh) + s.eps) + (double)s.weight_decay * pd[i]);
        }
        for (int k = 0; k < np; k++)
            zt_cpu_adamw_isa(paths[k].p, paths[k].m, paths[k].v, paths[k].g, n, &s, out_dt == ZT_F32 ? NULL : paths[k].out,
                             out_dt, isas[k] % 2 + 1, isas[k] / 2);
    }
    for (int k = 0; k < np; k++) {
        int isa = isas[k] / 2, th = isas[k] % 2 + 1;
        snprintf(name, sizeof name, "adam %s %d thread%s n=%zu wd=%g out=%s%s bit-identical to zt_adamw_element",
                 zt_cpu_adam_isa_name(isa), th, th > 1 ? "s" : "", n, wd, dtn, bc ? "" : " no-bias-correction");
        size_t bad = n;
        for (size_t i = 0; i < n && bad == n; i++)
            if (memcmp(&paths[k].p[i], &ref.p[i], 4) || memcmp(&paths[k].m[i], &ref.m[i], 4) ||
                memcmp(&paths[k].v[i], &ref.v[i], 4))
                bad = i;
        CHECK(bad == n && same(paths[k].p, ref.p, n), name, "element %zu: p %.9g vs %.9g, m %.9g vs %.9g", bad,
              bad < n ? paths[k].p[bad] : 0, bad < n ? ref.p[bad] : 0, bad < n ? paths[k].m[bad] : 0,
              bad < n ? ref.m[bad] : 0);
        if (out_dt != ZT_F32) {
            size_t badc = n;
            for (size_t i = 0; i < n && badc == n; i++) {
                uint16_t want = out_dt == ZT_BF16 ? zt_f32_to_bf16_bits(ref.p[i]) : zt_f32_to_f16_bits(ref.p[i]);
                if (paths[k].out[i] != want) badc = i;
            }
            snprintf(name, sizeof name, "adam %s %d thread%s n=%zu wd=%g %s copy-out rounds to nearest even",
                     zt_cpu_adam_isa_name(isa), th, th > 1 ? "s" : "", n, wd, dtn);
            CHECK(badc == n, name, "element %zu: %04x for %.9g", badc, badc < n ? paths[k].out[badc] : 0,
                  badc < n ? ref.p[badc] : 0);
        }
        drop(paths[k]);
    }
    /* fp32 against double: ~10 roundings; relative error floored at lr*1e-3 (params), 1e-30 (moments) */
    double errp = 0, errm = 0, errv = 0;
    for (size_t i = 0; i < n; i++) {
        errp = fmax(errp, fabs(ref.p[i] - pd[i]) / fmax(fabs(pd[i]), 1e-6));
        errm = fmax(errm, fabs(ref.m[i] - md[i]) / fmax(fabs(md[i]), 1e-30));
        errv = fmax(errv, fabs(ref.v[i] - vd[i]) / fmax(fabs(vd[i]), 1e-30));
    }
    snprintf(name, sizeof name, "adam n=%zu wd=%g%s matches the formula in double (rel 1e-5)", n, wd,
             bc ? "" : " no-bias-correction");
    CHECK(errp <= 1e-5 && errm <= 1e-5 && errv <= 1e-5, name, "relative error p %.3g m %.3g v %.3g", errp, errm, errv);
    free(pd); free(md); free(vd);
    drop(ref);
}

static void test_paths(size_t n, float wd, zt_dtype out_dt) { test_paths_bc(n, wd, out_dt, 1); }

__attribute__((target("f16c"))) static uint16_t f16c_convert(float f) {
    return (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set1_ps(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 0);
}

static void test_f16(void) {
    /* every binary16 value converts to fp32 and back to itself (NaNs stay NaNs) */
    size_t bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = zt_f16_bits_to_f32((uint16_t)h);
        uint16_t back = zt_f32_to_f16_bits(f);
        int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (nan ? !isnan(f) || (back & 0x7c00) != 0x7c00 || !(back & 0x3ff) : back != h) bad++;
    }
    CHECK(bad == 0, "fp16: all 65536 values round-trip through fp32", "%zu differ", bad);
    if (!__builtin_cpu_supports("f16c")) return;
    /* fp32 -> fp16 rounding against the hardware: random bit patterns, ties, subnormals, overflow */
    bad = 0;
    uint32_t first = 0;
    for (uint32_t k = 0; k < 2000000; k++) {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        uint32_t u = (uint32_t)(rng >> 32);
        if (k % 4 == 1) u = (u & 0x80000000u) | (0x33000000u + (u % 0x14800000u)); /* 2^-25 .. 2^16 */
        if (k % 4 == 2) u = (u & 0xffffe000u) | 0x1000u;                            /* exact ties */
        float f; memcpy(&f, &u, 4);
        if (isnan(f)) continue;
        if (zt_f32_to_f16_bits(f) != f16c_convert(f) && !bad++) first = u;
    }
    CHECK(bad == 0, "fp16: software fp32->fp16 equals F16C on 2M values (ties, subnormals, overflow)",
          "%zu differ, first 0x%08x", bad, first);
}

/* On-the-fly casting: 16-bit gradients read by zt_cpu_adamw_g give exactly what widening them
 * first and calling the fp32 path gives, on every path this CPU runs (bf16 widening is a shift; fp16
 * through F16C or the scalar conversion), including zero, denormal, inf and NaN gradients. */
static void test_grad16(size_t n, zt_dtype gd) {
    char name[200];
    const char *gn = gd == ZT_BF16 ? "bf16" : "fp16";
    state ref = make(n);
    uint16_t *g16 = calloc(n + 1, 2);
    for (size_t i = 0; i < n; i++) {
        float x = 50.0f * ref.g[i];
        if (i % 97 == 1) x = INFINITY;
        if (i % 101 == 2) x = NAN;
        if (i % 103 == 3) x = 1e-6f * urand(); /* fp16 subnormal */
        g16[i] = gd == ZT_BF16 ? zt_f32_to_bf16_bits(x) : zt_f32_to_f16_bits(x);
    }
    zt_cpu_to_f32(ref.g, g16, n, gd); /* the two-pass reference: widen, then the fp32 path */
    for (int isa = 0; isa <= zt_cpu_adam_best_isa(); isa++) {
        state a = clone(ref, n), b = clone(ref, n);
        for (int t = 1; t <= 2; t++) {
            zt_adam_step s = step_at(t, 0.1f, 1);
            zt_cpu_adamw_isa(a.p, a.m, a.v, a.g, n, &s, a.out, ZT_BF16, 2, isa);
            zt_cpu_adamw_g(b.p, b.m, b.v, g16, gd, n, &s, b.out, ZT_BF16, 2, isa);
        }
        snprintf(name, sizeof name, "adam %s n=%zu %s gradients read on the fly equal widening first",
                 zt_cpu_adam_isa_name(isa), n, gn);
        CHECK(!memcmp(a.p, b.p, n * 4) && !memcmp(a.m, b.m, n * 4) && !memcmp(a.v, b.v, n * 4) &&
                  !memcmp(a.out, b.out, n * 2), name, "p, m, v or the copy-out differ");
        drop(a);
        drop(b);
    }
    free(g16);
    drop(ref);
}

/* Out of place: the state written to other arrays is the in-place update's bit for bit on every path,
 * the copy-out too, and the arrays it read are unchanged (the speculative update's rollback is to
 * drop what it wrote, twin_flow.c). */
static void test_out_of_place(size_t n, zt_dtype gd, int shift) {
    char name[200];
    state ref = make(n);
    uint16_t *g16 = calloc(n + 1, 2);
    for (size_t i = 0; i < n; i++) g16[i] = zt_f32_to_bf16_bits(30.0f * ref.g[i]);
    const void *g = gd == ZT_F32 ? (const void *)ref.g : g16;
    for (int isa = 0; isa <= zt_cpu_adam_best_isa(); isa++) {
        state a = clone(ref, n), b = clone(ref, n), o = make(n);
        for (int t = 1; t <= 2; t++) { /* two steps: the second starts from a state with m, v set */
            zt_adam_step s = step_at(t, 0.1f, 1);
            zt_cpu_adamw_g(a.p, a.m, a.v, g, gd, n, &s, a.out, ZT_BF16, 2, isa);
            state before = clone(b, n);
            /* shift: the destinations one element off the alignment (ordinary stores, not streamed) */
            zt_cpu_adamw_g_to(b.p, b.m, b.v, o.p + shift, o.m + shift, o.v + shift, g, gd, n, &s, o.out, ZT_BF16, 2, isa);
            if (shift) memmove(o.p, o.p + 1, n * 4), memmove(o.m, o.m + 1, n * 4), memmove(o.v, o.v + 1, n * 4);
            snprintf(name, sizeof name, "adam %s n=%zu %s gradients step %d out of place%s leaves its inputs as they were",
                     zt_cpu_adam_isa_name(isa), n, gd == ZT_F32 ? "fp32" : "bf16", t, shift ? " (misaligned)" : "");
            CHECK(same(b.p, before.p, n) && same(b.m, before.m, n) && same(b.v, before.v, n), name, "an input changed");
            drop(before);
            memcpy(b.p, o.p, n * 4), memcpy(b.m, o.m, n * 4), memcpy(b.v, o.v, n * 4); /* the accepted step */
        }
        snprintf(name, sizeof name, "adam %s n=%zu %s gradients out of place%s equals in place", zt_cpu_adam_isa_name(isa),
                 n, gd == ZT_F32 ? "fp32" : "bf16", shift ? " (misaligned)" : "");
        CHECK(same(a.p, b.p, n) && same(a.m, b.m, n) && same(a.v, b.v, n) && (n == 0 || !memcmp(a.out, o.out, n * 2)),
              name, "p, m, v or the copy-out differ");
        drop(a), drop(b), drop(o);
    }
    free(g16);
    drop(ref);
}

int main(void) {
    printf("# cpu adam: best path on this CPU: %s\n", zt_cpu_adam_isa_name(zt_cpu_adam_best_isa()));
    size_t sizes[] = {0, 1, 7, 15, 17, 31, 4095, 4097, 3 * 4096 + 13};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (int wd = 0; wd < 2; wd++) test_paths(sizes[k], wd ? 0.1f : 0.0f, ZT_F32);
    test_paths(4097 + 5, 0.1f, ZT_BF16);
    test_paths(4097 + 5, 0.0f, ZT_F16);
    test_paths(33, 0.1f, ZT_F16);
    /* optimizer.params.bias_correction false */
    test_paths_bc(4097 + 5, 0.1f, ZT_F32, 0);
    test_paths_bc(33, 0.0f, ZT_BF16, 0);
    test_f16();
    test_grad16(4097 + 5, ZT_BF16);
    test_grad16(4097 + 5, ZT_F16);
    test_grad16(23, ZT_F16);
    test_out_of_place(4097 + 5, ZT_F32, 0);
    test_out_of_place(3 * 4096 + 13, ZT_BF16, 0);
    test_out_of_place(3 * 4096 + 13, ZT_BF16, 1);
    test_out_of_place(9, ZT_BF16, 0);
    return zt_check_exit();
}
