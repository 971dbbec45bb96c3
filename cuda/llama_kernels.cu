/* llama_kernels.cu — the CUDA backend's ops of the Llama family other than attention: RMSNorm
 * forward/backward, the rotary position embedding (in place on q and k), SwiGLU forward/backward;
 * and fill_llama_ops, the op-table entries of these and of grouped-query attention (attention.cu),
 * which kernels.cu's fill_ops calls. Compiled twice, bf16 and fp16, like kernels.cu.
 *
 * Numerics as in kernels.cu: 16-bit tensors are read into fp32, all arithmetic is fp32, each output
 * is rounded to 16 bits once. Row kernels use one warp per row; elementwise kernels take 8 elements
 * per access (16 bytes) when the shape and the pointers allow, one otherwise (the template width W).
 *
 * Determinism: RMSNorm's dw goes through zt_cu_colsum (kernels.cu), LayerNorm's fixed-order column
 * sums with mean taken as 0; every other output element is computed by exactly one thread. */
#include "cuda_common.cuh"

namespace ZT_CU_NS {

/* W consecutive 16-bit elements read or written with one access (W = 8: 16 bytes, W = 1: scalar) */
template <int W>
struct alignas(2 * W) zt16v { zt16 v[W]; };
template <int W>
__device__ __forceinline__ zt16v<W> ld16(const zt16 *p) { return *reinterpret_cast<const zt16v<W> *>(p); }
template <int W>
__device__ __forceinline__ void st16(zt16 *p, const zt16v<W> &x) { *reinterpret_cast<zt16v<W> *>(p) = x; }

/* sigmoid and SiLU in fp32, here until opmath.h has them (the CPU backend's helper is adding
 * silu there; the integrator merges the two into one):
 *   silu(x) = x sigmoid(x),  silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x))) */
__device__ __forceinline__ float llama_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* ================================================================ RMSNorm */
/* one warp per row: rstd = 1 / sqrt(mean(x^2) + eps) in fp32; out = (x rstd) w, rounded once.
 * The row is read twice (the second read comes from L1/L2), so any C works without a register cap. */
template <int W>
__global__ void k_rmsnorm_fwd(zt16 *out, float *rstd, const zt16 *inp, const zt16 *w, float eps, int N, int C) {
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const zt16 *x = inp + (size_t)row * C;
    float ss = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
        zt16v<W> xv = ld16<W>(x + c);
#pragma unroll
        for (int e = 0; e < W; e++) {
            float f = zt_f(xv.v[e]);
            ss += f * f;
        }
    }
    float rs = 1.0f / sqrtf(zt_warp_sum(ss) / (float)C + eps);
    zt16 *o = out + (size_t)row * C;
    for (int c = lane * W; c < C; c += 32 * W) {
        zt16v<W> xv = ld16<W>(x + c), wv = ld16<W>(w + c), ov;
#pragma unroll
        for (int e = 0; e < W; e++) ov.v[e] = zt_to16(zt_f(xv.v[e]) * rs * zt_f(wv.v[e]));
        st16<W>(o + c, ov);
    }
    if (lane == 0 && rstd) rstd[row] = rs;
}

/* one warp per row, with xh = x rstd and dxh = dout w:  dinp += rstd (dxh - xh mean(dxh xh)) */
template <int W>
__global__ void k_rmsnorm_bwd_dx(zt16 *dinp, const zt16 *dout, const zt16 *inp, const zt16 *w, const float *rstd,
                                 int N, int C) {
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const zt16 *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    float rs = rstd[row];
    float sdx = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
        zt16v<W> xv = ld16<W>(x + c), dv = ld16<W>(dy + c), wv = ld16<W>(w + c);
#pragma unroll
        for (int e = 0; e < W; e++) sdx += (zt_f(dv.v[e]) * zt_f(wv.v[e])) * (zt_f(xv.v[e]) * rs);
    }
    float m = zt_warp_sum(sdx) / (float)C;
    zt16 *dx = dinp + (size_t)row * C;
    for (int c = lane * W; c < C; c += 32 * W) {
        zt16v<W> xv = ld16<W>(x + c), dv = ld16<W>(dy + c), wv = ld16<W>(w + c), ov = ld16<W>(dx + c);
#pragma unroll
        for (int e = 0; e < W; e++) {
            float xh = zt_f(xv.v[e]) * rs, dxh = zt_f(dv.v[e]) * zt_f(wv.v[e]);
            ov.v[e] = zt_to16(zt_f(ov.v[e]) + rs * (dxh - xh * m));
        }
        st16<W>(dx + c, ov);
    }
}

/* rows of C elements take 16-byte accesses when C % 8 == 0 and every row pointer is 16-byte aligned */
static bool rows_vec_ok(int C, const void *a, const void *b, const void *c, const void *d) {
    return C % 8 == 0 && zt_aligned16(a) && zt_aligned16(b) && zt_aligned16(c) && (!d || zt_aligned16(d));
}

void zt_cu_rmsnorm_forward(void *out, float *rstd, const void *inp, const void *w, float eps, int N, int C) {
    if (N <= 0 || C <= 0) return;
    const int warps = 8;
    unsigned grid = (unsigned)((N + warps - 1) / warps);
    if (rows_vec_ok(C, out, inp, w, NULL))
        k_rmsnorm_fwd<8><<<grid, warps * 32, 0, g_zt.stream>>>((zt16 *)out, rstd, (const zt16 *)inp,
                                                               (const zt16 *)w, eps, N, C);
    else
        k_rmsnorm_fwd<1><<<grid, warps * 32, 0, g_zt.stream>>>((zt16 *)out, rstd, (const zt16 *)inp,
                                                               (const zt16 *)w, eps, N, C);
    ZT_LAUNCH_CHECK("rmsnorm_forward");
}

void zt_cu_rmsnorm_backward(void *dinp, void *dw, const void *dout, const void *inp, const void *w, const float *rstd,
                            int N, int C) {
    if (N <= 0 || C <= 0) return;
    if (dinp) {
        const int warps = 8;
        unsigned grid = (unsigned)((N + warps - 1) / warps);
        if (rows_vec_ok(C, dinp, dout, inp, w))
            k_rmsnorm_bwd_dx<8><<<grid, warps * 32, 0, g_zt.stream>>>((zt16 *)dinp, (const zt16 *)dout,
                                                                      (const zt16 *)inp, (const zt16 *)w, rstd, N, C);
        else
            k_rmsnorm_bwd_dx<1><<<grid, warps * 32, 0, g_zt.stream>>>((zt16 *)dinp, (const zt16 *)dout,
                                                                      (const zt16 *)inp, (const zt16 *)w, rstd, N, C);
        ZT_LAUNCH_CHECK("rmsnorm_backward(dinp)");
    }
    /* dw[c] += sum_rows dout[r,c] * inp[r,c] * rstd[r]: LayerNorm's column sums with mean 0 */
    if (dw) zt_cu_colsum(dw, NULL, (const zt16 *)dout, C, (const zt16 *)inp, NULL, rstd, N, C);
}

/* ================================================================ rotary position embedding */
/* In place on the q and k heads of qkv rows [B,T,(NH+2NKV)HD]: the first (NH+NKV) HD columns of each
 * row are NH+NKV heads, v after them is untouched. Per head, pair (x_i, x_{i+HD/2}), i < HD/2, at
 * position t with c = cos_sin[t, i], s = cos_sin[t, HD/2 + i]:
 *   forward  (x_i c - x_{i+HD/2} s,  x_{i+HD/2} c + x_i s);  inverse: s -> -s (the transpose).
 * One thread per W consecutive pairs of one head (W = 8 when HD/2 % 8 == 0 and qkv is 16-byte
 * aligned: every head's halves then start on 16 bytes). Each element is read, rotated in fp32 and
 * rounded once. */
template <int W>
__global__ void k_rope(zt16 *qkv, const float *cos_sin, int B, int T, int NH, int NKV, int HD, float sign) {
    int half = HD / 2, groups = half / W, heads = NH + NKV;
    size_t ld = (size_t)(NH + 2 * NKV) * HD;
    size_t total = (size_t)B * T * heads * groups;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int p = (int)(i % groups) * W;
        size_t r = i / groups;
        int head = (int)(r % heads);
        size_t bt = r / heads;
        int t = (int)(bt % T);
        zt16 *x = qkv + bt * ld + (size_t)head * HD + p;
        const float *cs = cos_sin + (size_t)t * HD + p;
        zt16v<W> a = ld16<W>(x), b = ld16<W>(x + half), ra, rb;
#pragma unroll
        for (int e = 0; e < W; e++) {
            float x1 = zt_f(a.v[e]), x2 = zt_f(b.v[e]), c = cs[e], s = sign * cs[half + e];
            ra.v[e] = zt_to16(x1 * c - x2 * s);
            rb.v[e] = zt_to16(x2 * c + x1 * s);
        }
        st16<W>(x, ra);
        st16<W>(x + half, rb);
    }
}

void zt_cu_rope(void *qkv, const float *cos_sin, int B, int T, int NH, int NKV, int HD, int inverse) {
    if (B <= 0 || T <= 0) return;
    if (NH <= 0 || NKV <= 0 || HD <= 0 || HD % 2)
        zt_cuda_fatal("rope", "NH, NKV must be positive and HD positive and even", __FILE__, __LINE__);
    float sign = inverse ? -1.0f : 1.0f;
    bool vec = (HD / 2) % 8 == 0 && zt_aligned16(qkv);
    size_t pairs = (size_t)B * T * (NH + NKV) * (HD / 2), work = vec ? pairs / 8 : pairs;
    if (vec)
        k_rope<8><<<zt_blocks(work, 256), 256, 0, g_zt.stream>>>((zt16 *)qkv, cos_sin, B, T, NH, NKV, HD, sign);
    else
        k_rope<1><<<zt_blocks(work, 256), 256, 0, g_zt.stream>>>((zt16 *)qkv, cos_sin, B, T, NH, NKV, HD, sign);
    ZT_LAUNCH_CHECK("rope");
}

/* ================================================================ SwiGLU */
/* inp rows [N, 2 inter] hold gate | up; one thread per W consecutive columns j of one row (W = 8 when
 * inter % 8 == 0 and the pointers are 16-byte aligned).
 *   forward:  out[r, j] = silu(gate) up
 *   backward: dgate = dout up silu'(gate), dup = dout silu(gate)  (dinp [N, 2 inter], overwritten) */
template <int W, bool BWD>
__global__ void k_swiglu(zt16 *dst, const zt16 *inp, const zt16 *dout, int N, int inter) {
    int groups = inter / W;
    size_t total = (size_t)N * groups;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / groups;
        int j = (int)(i % groups) * W;
        const zt16 *gate = inp + r * 2 * inter + j, *up = gate + inter;
        zt16v<W> gv = ld16<W>(gate), uv = ld16<W>(up);
        if (!BWD) {
            zt16v<W> ov;
#pragma unroll
            for (int e = 0; e < W; e++) {
                float g = zt_f(gv.v[e]);
                ov.v[e] = zt_to16(g * llama_sigmoid(g) * zt_f(uv.v[e]));
            }
            st16<W>(dst + r * inter + j, ov);
        } else {
            zt16v<W> dv = ld16<W>(dout + r * inter + j), dg, du;
#pragma unroll
            for (int e = 0; e < W; e++) {
                float g = zt_f(gv.v[e]), u = zt_f(uv.v[e]), d = zt_f(dv.v[e]);
                float sg = llama_sigmoid(g);
                dg.v[e] = zt_to16(d * u * (sg * (1.0f + g * (1.0f - sg))));
                du.v[e] = zt_to16(d * (g * sg));
            }
            st16<W>(dst + r * 2 * inter + j, dg);
            st16<W>(dst + r * 2 * inter + inter + j, du);
        }
    }
}

template <bool BWD>
static void swiglu(const char *name, void *dst, const void *inp, const void *dout, int N, int inter) {
    if (N <= 0 || inter <= 0) return;
    bool vec = inter % 8 == 0 && zt_aligned16(dst) && zt_aligned16(inp) && (!dout || zt_aligned16(dout));
    size_t work = (size_t)N * (vec ? inter / 8 : inter);
    if (vec)
        k_swiglu<8, BWD><<<zt_blocks(work, 256), 256, 0, g_zt.stream>>>((zt16 *)dst, (const zt16 *)inp,
                                                                        (const zt16 *)dout, N, inter);
    else
        k_swiglu<1, BWD><<<zt_blocks(work, 256), 256, 0, g_zt.stream>>>((zt16 *)dst, (const zt16 *)inp,
                                                                        (const zt16 *)dout, N, inter);
    ZT_LAUNCH_CHECK(name);
}
void zt_cu_swiglu_forward(void *out, const void *inp, int N, int inter) {
    swiglu<false>("swiglu_forward", out, inp, NULL, N, inter);
}
void zt_cu_swiglu_backward(void *dinp, const void *inp, const void *dout, int N, int inter) {
    swiglu<true>("swiglu_backward", dinp, inp, dout, N, inter);
}

/* ================================================================ op table */
void fill_llama_ops(zt_backend *b) {
    b->attention_gqa_forward = zt_cu_attention_gqa_forward;
    b->attention_gqa_backward = zt_cu_attention_gqa_backward;
    b->rmsnorm_forward = zt_cu_rmsnorm_forward;
    b->rmsnorm_backward = zt_cu_rmsnorm_backward;
    b->rope = zt_cu_rope;
    b->swiglu_forward = zt_cu_swiglu_forward;
    b->swiglu_backward = zt_cu_swiglu_backward;
}

} // namespace ZT_CU_NS
