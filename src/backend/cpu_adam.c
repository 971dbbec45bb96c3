/* cpu_adam.c — SIMD host AdamW (see cpu_adam.h).
 *
 * Bit identity. opmath.h's formula is a chain of separately rounded IEEE operations
 *   g' = g*gs;  m' = b1*m + (1-b1)*g';  v' = b2*v + ((1-b2)*g')*g';
 *   p' = p - lr*((m'/bc1) / (sqrt(v'/bc2) + eps) + wd*p)
 * and vector mul/add/div/sqrt round each lane exactly like their scalar forms. GCC's default for
 * GNU C (-ffp-contract=fast) would fuse some mul+add pairs into FMAs, differently in scalar and
 * vector code and depending on -march, so this file is compiled with contraction off: the
 * scalar fallback, the AVX2 and the AVX-512 paths then compute the same roundings in the same
 * order and agree bit for bit (also for denormals: no FTZ/DAZ anywhere). The "fma" target is
 * only needed because AVX2-era CPUs are what the path is for; it is not used for the math.
 *
 * Streaming. The update reads p, g, m, v and writes p, m, v (plus 2 bytes with a copy-out) once
 * each: 28 B/element, 26 when the gradients come as 16-bit (zt_cpu_adamw_g widens them in
 * registers as they are loaded: "on-the-fly casting", no fp32 gradient copy anywhere). Threads take contiguous blocks (schedule(static)) of 4096-element tiles, so
 * each thread streams through its block in order and the hardware prefetchers see simple
 * sequential streams; the math (3 divisions and a sqrt per element) fits under the memory time
 * at 16 lanes. The ragged tail of the last tile goes through the scalar formula. */
#pragma GCC optimize("fp-contract=off")

#include "backend/cpu_adam.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "util/util.h"

#define TILE 4096 /* elements per work item: 112 KiB of traffic, a multiple of every vector width */

typedef struct adam_consts {
    float gs, b1, omb1, b2, omb2, bc1, bc2, lr, eps, wd;
} adam_consts;

static adam_consts consts_of(const zt_adam_step *s) {
    adam_consts c = {s->grad_scale, s->beta1, 1.0f - s->beta1, s->beta2, 1.0f - s->beta2,
                     s->bias_correction1, s->bias_correction2, s->lr, s->eps, s->weight_decay};
    return c;
}

/* ---------------------------------------------------------------- 16-bit conversions */

void zt_cpu_to_f32(float *dst, const void *src, size_t n, zt_dtype dtype) {
    if (dtype == ZT_F32) { memmove(dst, src, n * 4); return; }
    const uint16_t *h = src;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        dst[i] = dtype == ZT_BF16 ? zt_bf16_bits_to_f32(h[i]) : zt_f16_bits_to_f32(h[i]);
}

static inline void store16_scalar(void *out16, zt_dtype dt, size_t i, float x) {
    ((uint16_t *)out16)[i] = dt == ZT_BF16 ? zt_f32_to_bf16_bits(x) : zt_f32_to_f16_bits(x);
}

void zt_cpu_from_f32(void *dst, const float *src, size_t n, zt_dtype dtype) {
    if (dtype == ZT_F32) { memmove(dst, src, n * 4); return; }
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) store16_scalar(dst, dtype, i, src[i]);
}

/* gradient i of g in dtype gd as fp32 (16-bit -> fp32 is exact) */
static inline float grad_at(const void *g, zt_dtype gd, size_t i) {
    if (gd == ZT_F32) return ((const float *)g)[i];
    uint16_t h = ((const uint16_t *)g)[i];
    return gd == ZT_BF16 ? zt_bf16_bits_to_f32(h) : zt_f16_bits_to_f32(h);
}

static inline const void *grad_plus(const void *g, zt_dtype gd, size_t i) {
    return (const char *)g + i * zt_dtype_size(gd);
}

/* ---------------------------------------------------------------- scalar */

/* the state in (p, m, v) and out (po, mo, vo): the same arrays in place, or others (out of place) */
typedef struct adam_io {
    const float *p, *m, *v;
    float *po, *mo, *vo;
} adam_io;

static adam_io io_plus(adam_io io, size_t a) {
    return (adam_io){io.p + a, io.m + a, io.v + a, io.po + a, io.mo + a, io.vo + a};
}

/* Out of place, the new state goes where nothing is read: stores that bypass the cache save the read
 * of each destination line a normal store makes first (28 B an element instead of 40). They need the
 * vector's alignment: the elements before the first aligned one go first on the scalar path (the same
 * results), so a tensor piece that starts anywhere streams the rest, where the three destinations are
 * equally misaligned (arrays of one alignment, as the engine's host buffers are). Returns the number
 * of those elements, or SIZE_MAX: in place, or not streamable. */
static size_t stream_head(adam_io io, uintptr_t align) {
    if (io.po == io.p) return SIZE_MAX;
    uintptr_t off = (uintptr_t)io.po & (align - 1);
    if ((((uintptr_t)io.mo ^ (uintptr_t)io.po) | ((uintptr_t)io.vo ^ (uintptr_t)io.po)) & (align - 1) || off % 4)
        return SIZE_MAX;
    return off ? (align - off) / 4 : 0;
}


static void adam_scalar(adam_io io, const void *g, zt_dtype gd, size_t n, const zt_adam_step *s, void *out16,
                        zt_dtype dt) {
    for (size_t i = 0; i < n; i++) {
        float p = io.p[i], m = io.m[i], v = io.v[i];
        zt_adamw_element(&p, &m, &v, grad_at(g, gd, i), s);
        io.po[i] = p, io.mo[i] = m, io.vo[i] = v;
        if (out16) store16_scalar(out16, dt, i, p);
    }
}

/* out of place: the elements before the first aligned destination on the scalar path, the call's
 * arguments moved past them; returns whether the rest may stream its stores (stream_head) */
static int stream_from_aligned(adam_io *io, const void **g, zt_dtype gd, size_t *n, const zt_adam_step *s, void **out16,
                               zt_dtype dt, uintptr_t align) {
    size_t head = stream_head(*io, align);
    if (head == SIZE_MAX) return 0;
    head = head < *n ? head : *n;
    if (head) {
        adam_scalar(*io, *g, gd, head, s, *out16, dt);
        *io = io_plus(*io, head), *g = grad_plus(*g, gd, head), *n -= head;
        if (*out16) *out16 = (uint16_t *)*out16 + head;
    }
    return 1;
}

/* ---------------------------------------------------------------- AVX2 (+FMA, F16C) */

/* 8 gradients as fp32, widened on the fly from 16-bit (bf16: the bits shifted up; fp16: F16C) */
__attribute__((target("avx2,fma,f16c"))) static inline __m256 load_grad8(const void *g, zt_dtype gd, size_t i) {
    if (gd == ZT_F32) return _mm256_loadu_ps((const float *)g + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)g + i));
    if (gd == ZT_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

__attribute__((target("avx2,fma,f16c"))) static void adam_avx2(adam_io io, const void *g, zt_dtype gd, size_t n,
                                                               const zt_adam_step *s, void *out16, zt_dtype dt) {
    adam_consts c = consts_of(s);
    const __m256 gs = _mm256_set1_ps(c.gs), b1 = _mm256_set1_ps(c.b1), omb1 = _mm256_set1_ps(c.omb1),
                 b2 = _mm256_set1_ps(c.b2), omb2 = _mm256_set1_ps(c.omb2), bc1 = _mm256_set1_ps(c.bc1),
                 bc2 = _mm256_set1_ps(c.bc2), lr = _mm256_set1_ps(c.lr), eps = _mm256_set1_ps(c.eps),
                 wd = _mm256_set1_ps(c.wd);
    int stream = stream_from_aligned(&io, &g, gd, &n, s, &out16, dt, 32);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gi = _mm256_mul_ps(load_grad8(g, gd, i), gs);
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(io.m + i)), _mm256_mul_ps(omb1, gi));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(io.v + i)), _mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
        __m256 mhat = _mm256_div_ps(mi, bc1), vhat = _mm256_div_ps(vi, bc2);
        __m256 pi = _mm256_loadu_ps(io.p + i);
        __m256 upd = _mm256_add_ps(_mm256_div_ps(mhat, _mm256_add_ps(_mm256_sqrt_ps(vhat), eps)), _mm256_mul_ps(wd, pi));
        pi = _mm256_sub_ps(pi, _mm256_mul_ps(lr, upd));
        if (stream) {
            _mm256_stream_ps(io.mo + i, mi), _mm256_stream_ps(io.vo + i, vi), _mm256_stream_ps(io.po + i, pi);
        } else {
            _mm256_storeu_ps(io.mo + i, mi), _mm256_storeu_ps(io.vo + i, vi), _mm256_storeu_ps(io.po + i, pi);
        }
        if (!out16) continue;
        __m128i h;
        if (dt == ZT_F16) {
            h = _mm256_cvtps_ph(pi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        } else { /* bf16: add 0x7fff + lsb, keep the high half; NaN -> quiet NaN (opmath.h) */
            __m256i u = _mm256_castps_si256(pi);
            __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
            __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
            __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                               _mm256_set1_epi32(0x7f800000));
            __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
            r = _mm256_blendv_epi8(r, qnan, isnan);
            __m256i packed = _mm256_packus_epi32(r, r); /* lanes 0-3 | 0-3 | 4-7 | 4-7 as 16-bit */
            h = _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
        }
        _mm_storeu_si128((__m128i *)((uint16_t *)out16 + i), h);
    }
    if (stream) _mm_sfence(); /* the streamed stores are weakly ordered: visible before the caller goes on */
    adam_scalar(io_plus(io, i), grad_plus(g, gd, i), gd, n - i, s, out16 ? (uint16_t *)out16 + i : NULL, dt);
}

/* ---------------------------------------------------------------- AVX-512F */

__attribute__((target("avx512f"))) static inline __m512 load_grad16(const void *g, zt_dtype gd, size_t i) {
    if (gd == ZT_F32) return _mm512_loadu_ps((const float *)g + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)g + i));
    if (gd == ZT_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

__attribute__((target("avx512f"))) static void adam_avx512(adam_io io, const void *g, zt_dtype gd, size_t n,
                                                            const zt_adam_step *s, void *out16, zt_dtype dt) {
    adam_consts c = consts_of(s);
    const __m512 gs = _mm512_set1_ps(c.gs), b1 = _mm512_set1_ps(c.b1), omb1 = _mm512_set1_ps(c.omb1),
                 b2 = _mm512_set1_ps(c.b2), omb2 = _mm512_set1_ps(c.omb2), bc1 = _mm512_set1_ps(c.bc1),
                 bc2 = _mm512_set1_ps(c.bc2), lr = _mm512_set1_ps(c.lr), eps = _mm512_set1_ps(c.eps),
                 wd = _mm512_set1_ps(c.wd);
    int stream = stream_from_aligned(&io, &g, gd, &n, s, &out16, dt, 64);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 gi = _mm512_mul_ps(load_grad16(g, gd, i), gs);
        __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(io.m + i)), _mm512_mul_ps(omb1, gi));
        __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(io.v + i)), _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
        __m512 mhat = _mm512_div_ps(mi, bc1), vhat = _mm512_div_ps(vi, bc2);
        __m512 pi = _mm512_loadu_ps(io.p + i);
        __m512 upd = _mm512_add_ps(_mm512_div_ps(mhat, _mm512_add_ps(_mm512_sqrt_ps(vhat), eps)), _mm512_mul_ps(wd, pi));
        pi = _mm512_sub_ps(pi, _mm512_mul_ps(lr, upd));
        if (stream) {
            _mm512_stream_ps(io.mo + i, mi), _mm512_stream_ps(io.vo + i, vi), _mm512_stream_ps(io.po + i, pi);
        } else {
            _mm512_storeu_ps(io.mo + i, mi), _mm512_storeu_ps(io.vo + i, vi), _mm512_storeu_ps(io.po + i, pi);
        }
        if (!out16) continue;
        __m256i h;
        if (dt == ZT_F16) {
            h = _mm512_cvtps_ph(pi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        } else {
            __m512i u = _mm512_castps_si512(pi);
            __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
            __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
            __mmask16 isnan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                      _mm512_set1_epi32(0x7f800000));
            r = _mm512_mask_or_epi32(r, isnan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
            h = _mm512_cvtepi32_epi16(r);
        }
        _mm256_storeu_si256((__m256i *)((uint16_t *)out16 + i), h);
    }
    if (stream) _mm_sfence();
    adam_scalar(io_plus(io, i), grad_plus(g, gd, i), gd, n - i, s, out16 ? (uint16_t *)out16 + i : NULL, dt);
}

/* ---------------------------------------------------------------- dispatch */

int zt_cpu_adam_best_isa(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return ZT_ADAM_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        return ZT_ADAM_ISA_AVX2;
    return ZT_ADAM_ISA_SCALAR;
}

const char *zt_cpu_adam_isa_name(int isa) {
    return isa == ZT_ADAM_ISA_AVX512 ? "avx512" : isa == ZT_ADAM_ISA_AVX2 ? "avx2" : "scalar";
}

typedef void (*adam_fn)(adam_io, const void *, zt_dtype, size_t, const zt_adam_step *, void *, zt_dtype);

static __thread int t_report_threads; /* zt_cpu_adam_report_threads, per calling thread */

void zt_cpu_adam_report_threads(int on) { t_report_threads = on; }

/* tile t of n elements */
static inline void adam_tile(adam_fn fn, adam_io io, const void *g, zt_dtype g_dtype, size_t n, size_t t,
                             const zt_adam_step *s, void *out16, zt_dtype out_dtype) {
    size_t a = t * TILE, k = n - a < TILE ? n - a : TILE;
    fn(io_plus(io, a), grad_plus(g, g_dtype, a), g_dtype, k, s, out16 ? (uint16_t *)out16 + a : NULL, out_dtype);
}

static void adamw_io(adam_io io, const void *g, zt_dtype g_dtype, size_t n, const zt_adam_step *s, void *out16,
                     zt_dtype out_dtype, int nthreads, int isa) {
    int best = zt_cpu_adam_best_isa();
    if (isa < 0 || isa > best) isa = best;
    adam_fn fn = isa == ZT_ADAM_ISA_AVX512 ? adam_avx512 : isa == ZT_ADAM_ISA_AVX2 ? adam_avx2 : adam_scalar;
    if (out_dtype != ZT_BF16 && out_dtype != ZT_F16) out16 = NULL;
    size_t tiles = (n + TILE - 1) / TILE;
    int nt = nthreads > 0 ? nthreads : omp_get_max_threads();
    if ((size_t)nt > tiles) nt = tiles ? (int)tiles : 1;
    const zt_device_observer *obs = t_report_threads ? zt_device_observer_now() : NULL;
    if (obs && obs->host_adam) { /* the same tiles on the same threads (static schedule), each thread timed */
#pragma omp parallel num_threads(nt) if (nt > 1)
        {
            double t0 = zt_now();
#pragma omp for schedule(static) nowait
            for (size_t t = 0; t < tiles; t++) adam_tile(fn, io, g, g_dtype, n, t, s, out16, out_dtype);
            obs->host_adam(obs->ctx, omp_get_thread_num(), t0, zt_now());
        }
        return;
    }
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (size_t t = 0; t < tiles; t++) adam_tile(fn, io, g, g_dtype, n, t, s, out16, out_dtype);
}

void zt_cpu_adamw_g(float *p, float *m, float *v, const void *g, zt_dtype g_dtype, size_t n, const zt_adam_step *s,
                    void *out16, zt_dtype out_dtype, int nthreads, int isa) {
    adamw_io((adam_io){p, m, v, p, m, v}, g, g_dtype, n, s, out16, out_dtype, nthreads, isa);
}

void zt_cpu_adamw_g_to(const float *p, const float *m, const float *v, float *p_out, float *m_out, float *v_out,
                       const void *g, zt_dtype g_dtype, size_t n, const zt_adam_step *s, void *out16,
                       zt_dtype out_dtype, int nthreads, int isa) {
    adamw_io((adam_io){p, m, v, p_out, m_out, v_out}, g, g_dtype, n, s, out16, out_dtype, nthreads, isa);
}

void zt_cpu_adamw_isa(float *p, float *m, float *v, const float *g, size_t n, const zt_adam_step *s, void *out16,
                      zt_dtype out_dtype, int nthreads, int isa) {
    zt_cpu_adamw_g(p, m, v, g, ZT_F32, n, s, out16, out_dtype, nthreads, isa);
}

void zt_cpu_adamw(float *p, float *m, float *v, const float *g, size_t n, const zt_adam_step *s, void *out16,
                  zt_dtype out_dtype, int nthreads) {
    zt_cpu_adamw_g(p, m, v, g, ZT_F32, n, s, out16, out_dtype, nthreads, ZT_ADAM_ISA_BEST);
}
