/* kernels.cu — the CUDA backend's non-GEMM ops: dtype conversion, embedding, LayerNorm, GELU,
 * residual/accumulate/scale, fused softmax + cross-entropy (whole and vocabulary-parallel), AdamW and
 * the sum of squares.
 *
 * Numerics: 16-bit tensors (bf16 or fp16, see cuda_common.cuh) are read into fp32, all arithmetic
 * is fp32 (double for sumsq), each output is rounded to 16 bits once (round-to-nearest-even).
 * Per-element formulas come from src/backend/opmath.h.
 *
 * Determinism: every reduction has a fixed order for a given shape (no atomics), so results are
 * bitwise reproducible run to run on the same GPU model: LayerNorm dw/db and matmul dbias use
 * per-block column partials in fp32 and a second pass in fixed order (the split depends on the
 * shape only); embedding backward buckets positions by token with a stable device radix sort (no
 * host round trip) and sums each token's rows in position order; sumsq uses a grid size that
 * depends only on n. Memory-bound kernels use 16-byte accesses when shapes and pointers allow. */
#include "cuda_common.cuh"
#include <cub/device/device_radix_sort.cuh>

namespace ZT_CU_NS {

/* ================================================================ elementwise (16-bit) */
/* out[i] = f(a[i], b[i]); 8 elements per thread with 16-byte accesses when all pointers are
 * 16-byte aligned, scalar otherwise (and for the tail). out may alias a or b. */
template <class F>
__global__ void k_map2(zt16 *out, const zt16 *a, const zt16 *b, size_t n, bool vec, F f) {
    size_t groups = (n + 7) / 8;
    for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (size_t)gridDim.x * blockDim.x) {
        size_t i0 = g * 8;
        if (vec && i0 + 8 <= n) {
            zt16x8 va = *reinterpret_cast<const zt16x8 *>(a + i0);
            zt16x8 vb = *reinterpret_cast<const zt16x8 *>(b + i0);
            zt16x8 vo;
#pragma unroll
            for (int k = 0; k < 8; k++) vo.v[k] = zt_to16(f(zt_f(va.v[k]), zt_f(vb.v[k])));
            *reinterpret_cast<zt16x8 *>(out + i0) = vo;
        } else {
            for (size_t i = i0; i < n && i < i0 + 8; i++) out[i] = zt_to16(f(zt_ld(a + i), zt_ld(b + i)));
        }
    }
}

template <class F>
static void map2(const char *name, void *out, const void *a, const void *b, size_t n, F f) {
    if (!n) return;
    bool vec = zt_aligned16(out) && zt_aligned16(a) && zt_aligned16(b);
    size_t groups = (n + 7) / 8;
    k_map2<<<zt_blocks(groups, 256), 256, 0, g_zt.stream>>>((zt16 *)out, (const zt16 *)a, (const zt16 *)b, n, vec, f);
    ZT_LAUNCH_CHECK(name);
}

struct f_gelu { __device__ float operator()(float x, float) const { return zt_gelu(x); } };
struct f_gelu_bwd { __device__ float operator()(float x, float d) const { return zt_gelu_grad(x) * d; } };
struct f_add { __device__ float operator()(float x, float y) const { return x + y; } };
struct f_scale {
    float s;
    __device__ float operator()(float x, float) const { return x * s; }
};

void zt_cu_gelu_forward(void *out, const void *inp, size_t n) { map2("gelu_forward", out, inp, inp, n, f_gelu()); }
void zt_cu_gelu_backward(void *dinp, const void *inp, const void *dout, size_t n) {
    map2("gelu_backward", dinp, inp, dout, n, f_gelu_bwd());
}
void zt_cu_residual_forward(void *out, const void *a, const void *b, size_t n) {
    map2("residual_forward", out, a, b, n, f_add());
}
void zt_cu_accumulate(void *dst, const void *src, size_t n) { map2("accumulate", dst, dst, src, n, f_add()); }
void zt_cu_scale(void *x, float s, size_t n) { map2("scale", x, x, x, n, f_scale{s}); }

/* ================================================================ conversions */
__global__ void k_to_16(zt16 *dst, const float *src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = zt_to16(src[i]); /* RNE, same as zt_f32_to_bf16_bits / zt_f32_to_f16_bits */
}
__global__ void k_to_f32(float *dst, const zt16 *src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = zt_f(src[i]);
}
void zt_cu_to_compute(void *dst, const float *src, size_t n) {
    if (!n) return;
    k_to_16<<<zt_blocks(n, 256), 256, 0, g_zt.stream>>>((zt16 *)dst, src, n);
    ZT_LAUNCH_CHECK("to_compute");
}
void zt_cu_to_f32(float *dst, const void *src, size_t n) {
    if (!n) return;
    k_to_f32<<<zt_blocks(n, 256), 256, 0, g_zt.stream>>>(dst, (const zt16 *)src, n);
    ZT_LAUNCH_CHECK("to_f32");
}

/* ================================================================ embedding */
/* out[i, :] = wte[tokens[i] - row_lo, :] + wpe[i % T, :] for tokens in [row_lo, row_hi) (without wpe
 * when it is NULL); other tokens get out[i, :] += wpe[i % T, :] (their row came in an earlier block),
 * or nothing. 8 channels per thread when C % 8 == 0 and all pointers are 16-byte aligned (then every
 * row start is too), one channel otherwise. */
template <bool VEC>
__global__ void k_embedding_fwd(zt16 *out, const int *tokens, const zt16 *wte, int row_lo, int row_hi,
                                const zt16 *wpe, int BT, int T, int C) {
    int W = VEC ? 8 : 1, per_row = C / W;
    size_t total = (size_t)BT * per_row;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int row = (int)(i / per_row), c = (int)(i % per_row) * W;
        int t = row % T, tok = tokens[row];
        bool mine = tok >= row_lo && tok < row_hi;
        if (!mine && !wpe) continue;
        const zt16 *src = mine ? wte + (size_t)(tok - row_lo) * C + c : out + (size_t)row * C + c;
        if (VEC) {
            zt16x8 a = *reinterpret_cast<const zt16x8 *>(src), o = a;
            if (wpe) {
                zt16x8 p = *reinterpret_cast<const zt16x8 *>(wpe + (size_t)t * C + c);
#pragma unroll
                for (int k = 0; k < 8; k++) o.v[k] = zt_to16(zt_f(a.v[k]) + zt_f(p.v[k]));
            }
            *reinterpret_cast<zt16x8 *>(out + (size_t)row * C + c) = o;
        } else {
            out[(size_t)row * C + c] = wpe ? zt_to16(zt_ld(src) + zt_ld(wpe + (size_t)t * C + c)) : *src;
        }
    }
}
void zt_cu_embedding_forward(void *out, const int *tokens, const void *wte, int row_lo, int row_hi, const void *wpe,
                             int B, int T, int C) {
    size_t total = (size_t)B * T * C;
    if (!total) return;
    bool vec = C % 8 == 0 && zt_aligned16(out) && zt_aligned16(wte) && (!wpe || zt_aligned16(wpe));
    if (vec)
        k_embedding_fwd<true><<<zt_blocks(total / 8, 256), 256, 0, g_zt.stream>>>(
            (zt16 *)out, tokens, (const zt16 *)wte, row_lo, row_hi, (const zt16 *)wpe, B * T, T, C);
    else
        k_embedding_fwd<false><<<zt_blocks(total, 256), 256, 0, g_zt.stream>>>(
            (zt16 *)out, tokens, (const zt16 *)wte, row_lo, row_hi, (const zt16 *)wpe, B * T, T, C);
    ZT_LAUNCH_CHECK("embedding_forward");
}

/* dwpe[t,c] += sum_b dout[b,t,c], b in order */
__global__ void k_embedding_bwd_wpe(zt16 *dwpe, const zt16 *dout, int B, int T, int C) {
    size_t total = (size_t)T * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += zt_ld(dout + (size_t)b * T * C + i);
        dwpe[i] = zt_to16(zt_ld(dwpe + i) + s);
    }
}
__global__ void k_iota(int *p, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = i;
}
/* One block per sorted slot i; the block whose slot starts a run of equal tokens sums the run's rows
 * (positions ascending: the radix sort is stable) in fp32 and adds once into dwte. Other blocks exit. */
__global__ void k_embedding_bwd_wte(zt16 *dwte, int row_lo, int row_hi, const zt16 *dout, const int *stok,
                                    const int *spos, int N, int C, bool vec) {
    int i = blockIdx.x;
    int tok = stok[i];
    if ((i > 0 && stok[i - 1] == tok) || tok < row_lo || tok >= row_hi) return;
    int end = i + 1;
    while (end < N && stok[end] == tok) end++;
    zt16 *dst = dwte + (size_t)(tok - row_lo) * C;
    if (vec) {
        for (int c = threadIdx.x * 8; c < C; c += blockDim.x * 8) {
            float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int k = i; k < end; k++) {
                zt16x8 x = *reinterpret_cast<const zt16x8 *>(dout + (size_t)spos[k] * C + c);
#pragma unroll
                for (int e = 0; e < 8; e++) s[e] += zt_f(x.v[e]);
            }
            zt16x8 d = *reinterpret_cast<zt16x8 *>(dst + c);
#pragma unroll
            for (int e = 0; e < 8; e++) d.v[e] = zt_to16(zt_f(d.v[e]) + s[e]);
            *reinterpret_cast<zt16x8 *>(dst + c) = d;
        }
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float s = 0.0f;
            for (int k = i; k < end; k++) s += zt_ld(dout + (size_t)spos[k] * C + c);
            dst[c] = zt_to16(zt_ld(dst + c) + s);
        }
    }
}
void zt_cu_embedding_backward(void *dwte, int row_lo, int row_hi, void *dwpe, const void *dout, const int *tokens,
                              int B, int T, int C) {
    int N = B * T;
    if (N <= 0 || C <= 0) return;
    if (dwpe) {
        size_t total = (size_t)T * C;
        k_embedding_bwd_wpe<<<zt_blocks(total, 256), 256, 0, g_zt.stream>>>((zt16 *)dwpe, (const zt16 *)dout, B, T, C);
        ZT_LAUNCH_CHECK("embedding_backward(dwpe)");
    }
    if (!dwte) return;
    /* bucket positions by token on the device: stable radix sort of (token, position) pairs */
    size_t temp_bytes = 0;
    ZT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const int *)NULL, (int *)NULL, (const int *)NULL,
                                                  (int *)NULL, N, 0, 32, g_zt.stream));
    size_t ints = ((size_t)3 * N + 63) & ~(size_t)63;
    int *buf = (int *)zt_scratch(ZT_SCR_EMB_IDX, ints * sizeof(int) + temp_bytes);
    int *pos_in = buf, *stok = buf + N, *spos = buf + 2 * (size_t)N;
    void *temp = buf + ints;
    k_iota<<<zt_blocks(N, 256), 256, 0, g_zt.stream>>>(pos_in, N);
    ZT_LAUNCH_CHECK("embedding_backward(iota)");
    ZT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, stok, pos_in, spos, N, 0, 32, g_zt.stream));
    ZT_LAUNCH_CHECK("embedding_backward(sort)");
    bool vec = C % 8 == 0 && zt_aligned16(dwte) && zt_aligned16(dout);
    int threads = vec ? (C / 8 >= 128 ? 128 : ((C / 8 + 31) / 32) * 32) : (C >= 256 ? 256 : ((C + 31) / 32) * 32);
    k_embedding_bwd_wte<<<N, threads, 0, g_zt.stream>>>((zt16 *)dwte, row_lo, row_hi, (const zt16 *)dout, stok, spos,
                                                        N, C, vec);
    ZT_LAUNCH_CHECK("embedding_backward(dwte)");
}

/* ================================================================ LayerNorm */
/* Vectorized path: one warp per row, the row held in registers as zt16x8 chunks (chunk k of lane l
 * is columns (k*32 + l)*8 ...); needs C % 8 == 0, C <= 32*8*ZT_LN_MAXV and 16-byte aligned rows.
 * The scalar kernels below handle everything else. */
#define ZT_LN_MAXV 8
static bool ln_vec_ok(int C, const void *a, const void *b, const void *c, const void *d) {
    return C % 8 == 0 && C <= 256 * ZT_LN_MAXV && zt_aligned16(a) && zt_aligned16(b) && (!c || zt_aligned16(c)) &&
           (!d || zt_aligned16(d));
}

__global__ void k_layernorm_fwd_vec(zt16 *out, float *mean, float *rstd, const zt16 *inp, const zt16 *w, const zt16 *b,
                                    int N, int C) {
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    int nch = C / 8;
    const zt16 *x = inp + (size_t)row * C;
    zt16x8 xv[ZT_LN_MAXV];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < ZT_LN_MAXV; k++) {
        int ch = k * 32 + lane;
        if (ch < nch) {
            xv[k] = *reinterpret_cast<const zt16x8 *>(x + ch * 8);
#pragma unroll
            for (int e = 0; e < 8; e++) s += zt_f(xv[k].v[e]);
        }
    }
    float m = zt_warp_sum(s) / C;
    float v = 0.0f;
#pragma unroll
    for (int k = 0; k < ZT_LN_MAXV; k++)
        if (k * 32 + lane < nch)
#pragma unroll
            for (int e = 0; e < 8; e++) {
                float d = zt_f(xv[k].v[e]) - m;
                v += d * d;
            }
    float rs = zt_rstd(zt_warp_sum(v) / C);
    zt16 *o = out + (size_t)row * C;
#pragma unroll
    for (int k = 0; k < ZT_LN_MAXV; k++) {
        int ch = k * 32 + lane;
        if (ch < nch) {
            zt16x8 wv = *reinterpret_cast<const zt16x8 *>(w + ch * 8), ov;
            zt16x8 bv;
            if (b) bv = *reinterpret_cast<const zt16x8 *>(b + ch * 8);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                float y = (zt_f(xv[k].v[e]) - m) * rs;
                y = y * zt_f(wv.v[e]) + (b ? zt_f(bv.v[e]) : 0.0f);
                ov.v[e] = zt_to16(y);
            }
            *reinterpret_cast<zt16x8 *>(o + ch * 8) = ov;
        }
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = rs;
    }
}

/* scalar fallback: one warp per row, two-pass mean / biased variance in fp32 */
__global__ void k_layernorm_fwd(zt16 *out, float *mean, float *rstd, const zt16 *inp, const zt16 *w, const zt16 *b,
                                int N, int C) {
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const zt16 *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += zt_ld(x + c);
    float m = zt_warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = zt_ld(x + c) - m;
        v += d * d;
    }
    float rs = zt_rstd(zt_warp_sum(v) / C);
    zt16 *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float y = (zt_ld(x + c) - m) * rs;
        y = y * zt_ld(w + c) + (b ? zt_ld(b + c) : 0.0f);
        o[c] = zt_to16(y);
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = rs;
    }
}
void zt_cu_layernorm_forward(void *out, float *mean, float *rstd, const void *inp, const void *w, const void *b,
                             int N, int C) {
    if (N <= 0) return;
    const int warps = 8;
    if (ln_vec_ok(C, out, inp, w, b))
        k_layernorm_fwd_vec<<<(N + warps - 1) / warps, warps * 32, 0, g_zt.stream>>>(
            (zt16 *)out, mean, rstd, (const zt16 *)inp, (const zt16 *)w, (const zt16 *)b, N, C);
    else
        k_layernorm_fwd<<<(N + warps - 1) / warps, warps * 32, 0, g_zt.stream>>>(
            (zt16 *)out, mean, rstd, (const zt16 *)inp, (const zt16 *)w, (const zt16 *)b, N, C);
    ZT_LAUNCH_CHECK("layernorm_forward");
}

/* dinp += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * w; vectorized,
 * the row's x and dout in registers */
__global__ void k_layernorm_bwd_dx_vec(zt16 *dinp, const zt16 *dout, const zt16 *inp, const zt16 *w, const float *mean,
                                       const float *rstd, int N, int C) {
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    int nch = C / 8;
    const zt16 *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    float m = mean[row], rs = rstd[row];
    zt16x8 xv[ZT_LN_MAXV], dv[ZT_LN_MAXV];
    float sd = 0.0f, sdx = 0.0f;
#pragma unroll
    for (int k = 0; k < ZT_LN_MAXV; k++) {
        int ch = k * 32 + lane;
        if (ch < nch) {
            xv[k] = *reinterpret_cast<const zt16x8 *>(x + ch * 8);
            dv[k] = *reinterpret_cast<const zt16x8 *>(dy + ch * 8);
            zt16x8 wv = *reinterpret_cast<const zt16x8 *>(w + ch * 8);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                float xhat = (zt_f(xv[k].v[e]) - m) * rs;
                float dnorm = zt_f(dv[k].v[e]) * zt_f(wv.v[e]);
                sd += dnorm;
                sdx += dnorm * xhat;
            }
        }
    }
    float dnorm_mean = zt_warp_sum(sd) / C;
    float dnorm_xhat_mean = zt_warp_sum(sdx) / C;
    zt16 *dx = dinp + (size_t)row * C;
#pragma unroll
    for (int k = 0; k < ZT_LN_MAXV; k++) {
        int ch = k * 32 + lane;
        if (ch < nch) {
            zt16x8 wv = *reinterpret_cast<const zt16x8 *>(w + ch * 8);
            zt16x8 ov = *reinterpret_cast<const zt16x8 *>(dx + ch * 8);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                float xhat = (zt_f(xv[k].v[e]) - m) * rs;
                float dnorm = zt_f(dv[k].v[e]) * zt_f(wv.v[e]);
                ov.v[e] = zt_to16(zt_f(ov.v[e]) + zt_layernorm_dx(dnorm, xhat, rs, dnorm_mean, dnorm_xhat_mean));
            }
            *reinterpret_cast<zt16x8 *>(dx + ch * 8) = ov;
        }
    }
}
/* scalar fallback, one warp per row */
__global__ void k_layernorm_bwd_dx(zt16 *dinp, const zt16 *dout, const zt16 *inp, const zt16 *w, const float *mean,
                                   const float *rstd, int N, int C) {
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const zt16 *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    float m = mean[row], rs = rstd[row];
    float sd = 0.0f, sdx = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float xhat = (zt_ld(x + c) - m) * rs;
        float dnorm = zt_ld(dy + c) * zt_ld(w + c);
        sd += dnorm;
        sdx += dnorm * xhat;
    }
    float dnorm_mean = zt_warp_sum(sd) / C;
    float dnorm_xhat_mean = zt_warp_sum(sdx) / C;
    zt16 *dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float xhat = (zt_ld(x + c) - m) * rs;
        float dnorm = zt_ld(dy + c) * zt_ld(w + c);
        dx[c] = zt_to16(zt_ld(dx + c) + zt_layernorm_dx(dnorm, xhat, rs, dnorm_mean, dnorm_xhat_mean));
    }
}
void zt_cu_layernorm_backward(void *dinp, void *dw, void *db, const void *dout, const void *inp, const void *w,
                              const float *mean, const float *rstd, int N, int C) {
    if (N <= 0) return;
    if (dinp) {
        const int warps = 8;
        if (ln_vec_ok(C, dinp, dout, inp, w))
            k_layernorm_bwd_dx_vec<<<(N + warps - 1) / warps, warps * 32, 0, g_zt.stream>>>(
                (zt16 *)dinp, (const zt16 *)dout, (const zt16 *)inp, (const zt16 *)w, mean, rstd, N, C);
        else
            k_layernorm_bwd_dx<<<(N + warps - 1) / warps, warps * 32, 0, g_zt.stream>>>(
                (zt16 *)dinp, (const zt16 *)dout, (const zt16 *)inp, (const zt16 *)w, mean, rstd, N, C);
        ZT_LAUNCH_CHECK("layernorm_backward(dinp)");
    }
    if (dw || db)
        zt_cu_colsum(dw, db, (const zt16 *)dout, C, dw ? (const zt16 *)inp : NULL, mean, rstd, N, C);
}

/* ================================================================ column sums (dw, db, dbias) */
/* Stage 1: block (32 x 8 threads) owns 32 column groups of W columns (W = 8 with 16-byte loads,
 * else 1) and the rows i = y*8 + ty (mod nsplit*8); it writes its fp32 column sums to
 * part_b[y][c] (and part_w[y][c] = sum dout * xhat for LayerNorm, RMSNorm). nsplit depends on the shape
 * only, so the summation order (and the result) is the same on every GPU. */
#define ZT_COLSUM_TY 8
template <bool LN, int W>
__global__ void k_colsum_partial(float *part_w, float *part_b, const zt16 *dout, int ld, const zt16 *inp,
                                 const float *mean, const float *rstd, int N, int C) {
    __shared__ float sw[ZT_COLSUM_TY][32 * W + 1], sb[ZT_COLSUM_TY][32 * W + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int c0 = (blockIdx.x * 32 + tx) * W;
    float aw[W], ab[W];
#pragma unroll
    for (int e = 0; e < W; e++) aw[e] = ab[e] = 0.0f;
    if (c0 < C) {
        for (int i = blockIdx.y * ZT_COLSUM_TY + ty; i < N; i += gridDim.y * ZT_COLSUM_TY) {
            if (W == 8) {
                zt16x8 d = *reinterpret_cast<const zt16x8 *>(dout + (size_t)i * ld + c0);
                zt16x8 x;
                float m = 0.0f, rs = 0.0f;
                if (LN) x = *reinterpret_cast<const zt16x8 *>(inp + (size_t)i * C + c0), m = mean ? mean[i] : 0.0f, rs = rstd[i];
#pragma unroll
                for (int e = 0; e < W; e++) {
                    float dd = zt_f(d.v[e]);
                    ab[e] += dd;
                    if (LN) aw[e] += dd * ((zt_f(x.v[e]) - m) * rs);
                }
            } else {
                float dd = zt_ld(dout + (size_t)i * ld + c0);
                ab[0] += dd;
                if (LN) aw[0] += dd * ((zt_ld(inp + (size_t)i * C + c0) - (mean ? mean[i] : 0.0f)) * rstd[i]);
            }
        }
    }
#pragma unroll
    for (int e = 0; e < W; e++) sw[ty][tx * W + e] = aw[e], sb[ty][tx * W + e] = ab[e];
    __syncthreads();
    /* 256 threads finalize up to 32*W columns of the block, summing the 8 row groups in order */
    int t = ty * 32 + tx;
    for (int cc = t; cc < 32 * W; cc += 32 * ZT_COLSUM_TY) {
        int c = blockIdx.x * 32 * W + cc;
        if (c >= C) continue;
        float tw = 0.0f, tb = 0.0f;
        for (int k = 0; k < ZT_COLSUM_TY; k++) tw += sw[k][cc], tb += sb[k][cc];
        part_b[(size_t)blockIdx.y * C + c] = tb;
        if (LN) part_w[(size_t)blockIdx.y * C + c] = tw;
    }
}
/* Stage 2: one thread per column sums the nsplit partials in order and adds into the 16-bit grads */
__global__ void k_colsum_final(zt16 *dw, zt16 *db, const float *part_w, const float *part_b, int nsplit, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float tw = 0.0f, tb = 0.0f;
    for (int k = 0; k < nsplit; k++) {
        if (dw) tw += part_w[(size_t)k * C + c];
        tb += part_b[(size_t)k * C + c];
    }
    if (dw) dw[c] = zt_to16(zt_ld(dw + c) + tw);
    if (db) db[c] = zt_to16(zt_ld(db + c) + tb);
}
void zt_cu_colsum(void *dw, void *db, const zt16 *dout, int ld, const zt16 *inp, const float *mean, const float *rstd,
                  int N, int C) {
    if (N <= 0 || C <= 0 || (!dw && !db)) return;
    bool ln = dw != NULL && inp != NULL;
    bool vec = C % 8 == 0 && ld % 8 == 0 && zt_aligned16(dout) && (!ln || zt_aligned16(inp));
    int nsplit = (N + 63) / 64; /* 8 rows per thread */
    if (nsplit > 256) nsplit = 256;
    if (nsplit < 1) nsplit = 1;
    float *part = (float *)zt_scratch(ZT_SCR_COLSUM, (size_t)2 * nsplit * C * sizeof(float));
    float *part_w = part, *part_b = part + (size_t)nsplit * C;
    int W = vec ? 8 : 1;
    dim3 block(32, ZT_COLSUM_TY), grid((unsigned)((C + 32 * W - 1) / (32 * W)), (unsigned)nsplit);
    if (vec) {
        if (ln)
            k_colsum_partial<true, 8><<<grid, block, 0, g_zt.stream>>>(part_w, part_b, dout, ld, inp, mean, rstd, N, C);
        else
            k_colsum_partial<false, 8><<<grid, block, 0, g_zt.stream>>>(part_w, part_b, dout, ld, NULL, NULL, NULL, N, C);
    } else {
        if (ln)
            k_colsum_partial<true, 1><<<grid, block, 0, g_zt.stream>>>(part_w, part_b, dout, ld, inp, mean, rstd, N, C);
        else
            k_colsum_partial<false, 1><<<grid, block, 0, g_zt.stream>>>(part_w, part_b, dout, ld, NULL, NULL, NULL, N, C);
    }
    ZT_LAUNCH_CHECK("colsum(partial)");
    k_colsum_final<<<(C + 255) / 256, 256, 0, g_zt.stream>>>(ln ? (zt16 *)dw : NULL, (zt16 *)db, part_w, part_b,
                                                              nsplit, C);
    ZT_LAUNCH_CHECK("colsum(final)");
}

__global__ void k_add_bias(zt16 *out, const zt16 *bias, int N, int C, int ld) {
    size_t total = (size_t)N * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / C, c = i % C;
        zt16 *p = out + r * ld + c;
        *p = zt_to16(zt_ld(p) + zt_ld(bias + c));
    }
}
void zt_cu_add_bias(zt16 *out, const zt16 *bias, int N, int C, int ld) {
    size_t total = (size_t)N * C;
    if (!total) return;
    k_add_bias<<<zt_blocks(total, 256), 256, 0, g_zt.stream>>>(out, bias, N, C, ld);
    ZT_LAUNCH_CHECK("add_bias");
}

/* out[r, c] (row stride ld) = acc[r, c] (row stride C) + bias[c], one rounding: the tiled forward's end */
__global__ void k_round_bias(zt16 *out, const float *acc, const zt16 *bias, int N, int C, int ld) {
    size_t total = (size_t)N * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / C, c = i % C;
        out[r * ld + c] = zt_to16(acc[i] + (bias ? zt_ld(bias + c) : 0.0f));
    }
}
void zt_cu_round_bias(void *out, const float *acc, const void *bias, int N, int OC, int ld) {
    size_t total = (size_t)N * OC;
    if (!total) return;
    k_round_bias<<<zt_blocks(total, 256), 256, 0, g_zt.stream>>>((zt16 *)out, acc, (const zt16 *)bias, N, OC, ld);
    ZT_LAUNCH_CHECK("round_bias");
}

/* ================================================================ softmax + cross-entropy */
/* One block per row. xent_row_stats: the row's online max/sum in fp32 (one read). With VEC
 * (Vp % 8 == 0, 16-byte aligned rows) each thread handles 8 consecutive columns per step with one
 * 16-byte load and merges them into its running (max, sum) with a single rescale. xent_row_grad:
 * the gradient pass (which re-reads the row, mostly from L2). In-place safe: each element is read
 * and then written by the same thread, after the row's reductions. softmax_xent: a target outside
 * [0,V) gives a NaN loss and no one-hot term (as the CPU backend does). NaN logits give a NaN loss:
 * every max here is xent_max, never fmaxf (which drops NaN), so a NaN max cannot look like an empty
 * part's -inf and vanish from the sum. */
#define ZT_XENT_THREADS 512
/* max(a, b), NaN when either is */
__device__ __forceinline__ float xent_max(float a, float b) {
    return a != a || b != b ? __int_as_float(0x7fc00000) : fmaxf(a, b);
}
__device__ __forceinline__ void xent_merge(float &m, float &s, float m2, float s2) {
    float M = xent_max(m, m2);
    float a = (m == -INFINITY) ? 0.0f : s * expf(m - M);
    float b = (m2 == -INFINITY) ? 0.0f : s2 * expf(m2 - M);
    m = M;
    s = a + b;
}
/* the block's row x[0, V): every thread gets M = max_j x_j and S = sum_j exp(x_j - M); once per block */
template <bool VEC>
__device__ __forceinline__ void xent_row_stats(const zt16 *x, int V, float &M, float &S) {
    __shared__ float sm[32], ss[32];
    float m = -INFINITY, s = 0.0f;
    if (VEC) {
        for (int j = threadIdx.x * 8; j < V; j += blockDim.x * 8) {
            zt16x8 v = *reinterpret_cast<const zt16x8 *>(x + j);
            float f[8], lm = -INFINITY;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                f[e] = j + e < V ? zt_f(v.v[e]) : -INFINITY;
                lm = xent_max(lm, f[e]);
            }
            float ls = 0.0f;
#pragma unroll
            for (int e = 0; e < 8; e++) ls += j + e < V ? expf(f[e] - lm) : 0.0f;
            xent_merge(m, s, lm, ls);
        }
    } else {
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            float v = zt_ld(x + j);
            if (v > m || v != v) { /* a NaN becomes the max: s and every later term NaN */
                s = s * expf(m - v) + 1.0f; /* m = -inf first time: expf(-inf) = 0 */
                m = v;
            } else {
                s += expf(v - m);
            }
        }
    }
    /* combine (m, s) pairs: warp, then block */
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        xent_merge(m, s, m2, s2);
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nwarps = blockDim.x / 32;
    if (lane == 0) {
        sm[warp] = m;
        ss[warp] = s;
    }
    __syncthreads();
    M = -INFINITY;
    for (int k = 0; k < nwarps; k++) M = xent_max(M, sm[k]);
    S = 0.0f;
    for (int k = 0; k < nwarps; k++)
        if (sm[k] != -INFINITY) S += ss[k] * expf(sm[k] - M);
}
/* dx[j] = (exp(x_j - M) * invS - [j == tgt]) * dloss for j < V, 0 for j in [V, Vp) */
template <bool VEC>
__device__ __forceinline__ void xent_row_grad(zt16 *dx, const zt16 *x, int V, int Vp, int tgt, float M, float invS,
                                              float dloss) {
    if (VEC) {
        for (int j = threadIdx.x * 8; j < Vp; j += blockDim.x * 8) {
            zt16x8 v, o;
            if (j < V) v = *reinterpret_cast<const zt16x8 *>(x + j);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                float g = 0.0f;
                if (j + e < V) {
                    float p = expf(zt_f(v.v[e]) - M) * invS;
                    g = (p - (j + e == tgt ? 1.0f : 0.0f)) * dloss;
                }
                o.v[e] = zt_to16(g);
            }
            *reinterpret_cast<zt16x8 *>(dx + j) = o;
        }
    } else {
        for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
            float g = 0.0f;
            if (j < V) {
                float p = expf(zt_ld(x + j) - M) * invS;
                g = (p - (j == tgt ? 1.0f : 0.0f)) * dloss;
            }
            dx[j] = zt_to16(g);
        }
    }
}
template <bool VEC>
__global__ void __launch_bounds__(ZT_XENT_THREADS) k_softmax_xent(float *losses, zt16 *dlogits, const zt16 *logits,
                                                                  const int *targets, int V, int Vp, float dloss) {
    int row = blockIdx.x;
    const zt16 *x = logits + (size_t)row * Vp;
    int tgt = targets[row];
    bool valid = tgt >= 0 && tgt < V;
    /* read before xent_row_stats' barrier: after it, other threads may overwrite x (in place) */
    float target_logit = threadIdx.x == 0 && valid ? zt_ld(x + tgt) : 0.0f;
    float M, S;
    xent_row_stats<VEC>(x, V, M, S);
    float logS = logf(S);
    if (threadIdx.x == 0) losses[row] = valid ? (logS + M - target_logit) : NAN;
    if (!dlogits) return;
    xent_row_grad<VEC>(dlogits + (size_t)row * Vp, x, V, Vp, tgt, M, 1.0f / S, dloss);
}
void zt_cu_softmax_xent(float *losses, void *dlogits, const void *logits, const int *targets, int N, int V, int Vp,
                        float dloss) {
    if (N <= 0) return;
    bool vec = Vp % 8 == 0 && zt_aligned16(logits) && (!dlogits || zt_aligned16(dlogits));
    if (vec)
        k_softmax_xent<true><<<N, ZT_XENT_THREADS, 0, g_zt.stream>>>(losses, (zt16 *)dlogits, (const zt16 *)logits,
                                                                     targets, V, Vp, dloss);
    else
        k_softmax_xent<false><<<N, ZT_XENT_THREADS, 0, g_zt.stream>>>(losses, (zt16 *)dlogits, (const zt16 *)logits,
                                                                      targets, V, Vp, dloss);
    ZT_LAUNCH_CHECK("softmax_xent");
}

/* Vocabulary-parallel cross-entropy (backend.h), one block per row like softmax_xent: part 1 is its
 * row statistics over this rank's Vl columns; part 2 combines the tp ranks' statistics in rank order
 * (every thread the same few fp32 operations: no shared memory, no barrier), then its gradient pass. */
template <bool VEC>
__global__ void __launch_bounds__(ZT_XENT_THREADS) k_xent_partial(float *stats, const zt16 *logits, const int *targets,
                                                                  int Vl, int Vp, int vocab_lo) {
    int row = blockIdx.x;
    const zt16 *x = logits + (size_t)row * Vp;
    float M, S;
    xent_row_stats<VEC>(x, Vl, M, S);
    if (threadIdx.x == 0) {
        int tgt = targets[row] - vocab_lo;
        stats[3 * (size_t)row] = M;
        stats[3 * (size_t)row + 1] = S;
        stats[3 * (size_t)row + 2] = tgt >= 0 && tgt < Vl ? zt_ld(x + tgt) : 0.0f;
    }
}
template <bool VEC>
__global__ void __launch_bounds__(ZT_XENT_THREADS) k_xent_parallel(float *losses, zt16 *dlogits, const zt16 *logits,
                                                                   const int *targets, const float *stats_all, int tp,
                                                                   int N, int Vl, int Vp, int vocab_lo, float dloss) {
    int row = blockIdx.x;
    float M = -INFINITY;
    for (int r = 0; r < tp; r++) M = xent_max(M, stats_all[((size_t)r * N + row) * 3]);
    float S = 0.0f, target_logit = 0.0f;
    for (int r = 0; r < tp; r++) {
        const float *st = stats_all + ((size_t)r * N + row) * 3;
        if (st[0] != -INFINITY) S += st[1] * expf(st[0] - M); /* a rank with no columns adds 0 */
        target_logit += st[2];
    }
    float logS = logf(S);
    if (threadIdx.x == 0) losses[row] = logS + M - target_logit;
    if (!dlogits) return;
    const zt16 *x = logits + (size_t)row * Vp;
    xent_row_grad<VEC>(dlogits + (size_t)row * Vp, x, Vl, Vp, targets[row] - vocab_lo, M, 1.0f / S, dloss);
}
void zt_cu_xent_partial(float *stats, const void *logits, const int *targets, int N, int Vl, int Vp, int vocab_lo) {
    if (N <= 0) return;
    if (Vp % 8 == 0 && zt_aligned16(logits))
        k_xent_partial<true><<<N, ZT_XENT_THREADS, 0, g_zt.stream>>>(stats, (const zt16 *)logits, targets, Vl, Vp,
                                                                     vocab_lo);
    else
        k_xent_partial<false><<<N, ZT_XENT_THREADS, 0, g_zt.stream>>>(stats, (const zt16 *)logits, targets, Vl, Vp,
                                                                      vocab_lo);
    ZT_LAUNCH_CHECK("xent_partial");
}
void zt_cu_xent_parallel(float *losses, void *dlogits, const void *logits, const int *targets, const float *stats_all,
                         int tp, int N, int Vl, int Vp, int vocab_lo, float dloss) {
    if (N <= 0) return;
    bool vec = Vp % 8 == 0 && zt_aligned16(logits) && (!dlogits || zt_aligned16(dlogits));
    if (vec)
        k_xent_parallel<true><<<N, ZT_XENT_THREADS, 0, g_zt.stream>>>(losses, (zt16 *)dlogits, (const zt16 *)logits,
                                                                      targets, stats_all, tp, N, Vl, Vp, vocab_lo, dloss);
    else
        k_xent_parallel<false><<<N, ZT_XENT_THREADS, 0, g_zt.stream>>>(losses, (zt16 *)dlogits, (const zt16 *)logits,
                                                                       targets, stats_all, tp, N, Vl, Vp, vocab_lo,
                                                                       dloss);
    ZT_LAUNCH_CHECK("xent_parallel");
}

/* ================================================================ AdamW */
__global__ void k_adamw(float *master, float *m, float *v, const zt16 *grad, zt16 *params_out, size_t n,
                        zt_adam_step step) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float p = master[i], mi = m[i], vi = v[i];
        zt_adamw_element(&p, &mi, &vi, zt_f(grad[i]), &step);
        master[i] = p;
        m[i] = mi;
        v[i] = vi;
        if (params_out) params_out[i] = zt_to16(p);
    }
}
void zt_cu_adamw(float *master, float *m, float *v, const void *grad, void *params_out, size_t n,
                 const zt_adam_step *step) {
    if (!n) return;
    k_adamw<<<zt_blocks(n, 256), 256, 0, g_zt.stream>>>(master, m, v, (const zt16 *)grad, (zt16 *)params_out, n, *step);
    ZT_LAUNCH_CHECK("adamw");
}

/* ================================================================ sum of squares */
#define ZT_SUMSQ_THREADS 256
#define ZT_SUMSQ_MAX_BLOCKS 1024
__global__ void k_sumsq_partial(double *partial, const zt16 *x, size_t n) {
    __shared__ double sh[ZT_SUMSQ_THREADS / 32];
    double acc = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double v = (double)zt_f(x[i]);
        acc += v * v;
    }
    acc = zt_warp_sum_d(acc);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int k = 0; k < ZT_SUMSQ_THREADS / 32; k++) t += sh[k];
        partial[blockIdx.x] = t;
    }
}
__global__ void k_sumsq_final(double *out, const double *partial, int nb) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        double t = 0.0;
        for (int k = 0; k < nb; k++) t += partial[k];
        *out = t;
    }
}
double zt_cu_sumsq(const void *x, size_t n) {
    if (!n) return 0.0;
    /* the grid depends only on n (not on the GPU), so the summation order is fixed for a given n */
    size_t nb = (n + ZT_SUMSQ_THREADS - 1) / ZT_SUMSQ_THREADS;
    if (nb > ZT_SUMSQ_MAX_BLOCKS) nb = ZT_SUMSQ_MAX_BLOCKS;
    double *d = (double *)zt_scratch(ZT_SCR_REDUCE, (ZT_SUMSQ_MAX_BLOCKS + 1) * sizeof(double));
    k_sumsq_partial<<<(unsigned)nb, ZT_SUMSQ_THREADS, 0, g_zt.stream>>>(d, (const zt16 *)x, n);
    ZT_LAUNCH_CHECK("sumsq(partial)");
    k_sumsq_final<<<1, 32, 0, g_zt.stream>>>(d + ZT_SUMSQ_MAX_BLOCKS, d, (int)nb);
    ZT_LAUNCH_CHECK("sumsq(final)");
    double *h = (double *)zt_host_scratch(ZT_HSCR_RESULT, sizeof(double));
    ZT_CUDA_CHECK(cudaMemcpyAsync(h, d + ZT_SUMSQ_MAX_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost, g_zt.stream));
    ZT_CUDA_CHECK(cudaStreamSynchronize(g_zt.stream));
    return *h;
}

/* ================================================================ op table */
/* the compute-dtype half of the op table: everything but memory, copies and synchronisation,
 * which backend_cuda.cu fills once for both dtypes */
void fill_ops(zt_backend *b) {
    b->compute_dtype = ZT_COMPUTE_DTYPE;
    b->to_compute = zt_cu_to_compute;
    b->to_f32 = zt_cu_to_f32;
    b->embedding_forward = zt_cu_embedding_forward;
    b->embedding_backward = zt_cu_embedding_backward;
    b->layernorm_forward = zt_cu_layernorm_forward;
    b->layernorm_backward = zt_cu_layernorm_backward;
    b->matmul_forward = zt_cu_matmul_forward;
    b->matmul_backward = zt_cu_matmul_backward;
    b->matmul_forward_gelu = zt_cu_matmul_forward_gelu;
    b->matmul_backward_dgelu = zt_cu_matmul_backward_dgelu;
    b->attention_forward = zt_cu_attention_forward;
    b->attention_backward = zt_cu_attention_backward;
    b->gelu_forward = zt_cu_gelu_forward;
    b->gelu_backward = zt_cu_gelu_backward;
    b->residual_forward = zt_cu_residual_forward;
    b->accumulate = zt_cu_accumulate;
    b->softmax_xent = zt_cu_softmax_xent;
    b->gemm = zt_cu_gemm;
    b->add_bias = zt_cu_add_bias_op;
    b->gemm_f32 = zt_cu_gemm_f32;
    b->round_bias = zt_cu_round_bias;
    b->bias_grad = zt_cu_bias_grad;
    b->xent_partial = zt_cu_xent_partial;
    b->xent_parallel = zt_cu_xent_parallel;
    b->adamw = zt_cu_adamw;
    b->sumsq = zt_cu_sumsq;
    b->scale = zt_cu_scale;
    fill_llama_ops(b); /* RMSNorm, rotary embedding, SwiGLU, grouped-query attention (llama_kernels.cu) */
}

} // namespace ZT_CU_NS
