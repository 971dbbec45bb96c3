/* kernels.cu — the CUDA backend's non-GEMM ops: dtype conversion, embedding, LayerNorm, GELU,
 * residual/accumulate/scale, fused softmax + cross-entropy, AdamW and the sum of squares.
 *
 * Numerics: bf16 tensors are read into fp32, all arithmetic is fp32 (double for sumsq), each output
 * is rounded to bf16 once (round-to-nearest-even). Per-element formulas come from model/opmath.h.
 *
 * Determinism: every reduction has a fixed order for a given shape (no atomics), so results are
 * bitwise reproducible run to run on the same GPU model: LayerNorm dw/db and matmul dbias use
 * per-block column partials in fp32 and a second pass in fixed order; embedding backward buckets
 * positions by token on the host (one small D2H of the token ids + stream sync per call) and sums
 * each token's rows in position order; sumsq uses a grid size that depends only on n. */
#include "cuda_common.cuh"
#include <algorithm>
#include <vector>

/* ================================================================ elementwise (bf16) */
/* out[i] = f(a[i], b[i]); 8 elements per thread with 16-byte accesses when all pointers are
 * 16-byte aligned, scalar otherwise (and for the tail). out may alias a or b. */
template <class F>
__global__ void k_map2(bf16 *out, const bf16 *a, const bf16 *b, size_t n, bool vec, F f) {
    size_t groups = (n + 7) / 8;
    for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (size_t)gridDim.x * blockDim.x) {
        size_t i0 = g * 8;
        if (vec && i0 + 8 <= n) {
            bf16x8 va = *reinterpret_cast<const bf16x8 *>(a + i0);
            bf16x8 vb = *reinterpret_cast<const bf16x8 *>(b + i0);
            bf16x8 vo;
#pragma unroll
            for (int k = 0; k < 8; k++) vo.v[k] = zt_bf(f(__bfloat162float(va.v[k]), __bfloat162float(vb.v[k])));
            *reinterpret_cast<bf16x8 *>(out + i0) = vo;
        } else {
            for (size_t i = i0; i < n && i < i0 + 8; i++) out[i] = zt_bf(f(zt_ld(a + i), zt_ld(b + i)));
        }
    }
}

template <class F>
static void map2(const char *name, void *out, const void *a, const void *b, size_t n, F f) {
    if (!n) return;
    bool vec = zt_aligned16(out) && zt_aligned16(a) && zt_aligned16(b);
    size_t groups = (n + 7) / 8;
    k_map2<<<zt_blocks(groups, 256), 256, 0, g_zt.stream>>>((bf16 *)out, (const bf16 *)a, (const bf16 *)b, n, vec, f);
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
__global__ void k_to_bf16(bf16 *dst, const float *src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]); /* RNE, same as zt_f32_to_bf16_bits */
}
__global__ void k_to_f32(float *dst, const bf16 *src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}
void zt_cu_to_compute(void *dst, const float *src, size_t n) {
    if (!n) return;
    k_to_bf16<<<zt_blocks(n, 256), 256, 0, g_zt.stream>>>((bf16 *)dst, src, n);
    ZT_LAUNCH_CHECK("to_compute");
}
void zt_cu_to_f32(float *dst, const void *src, size_t n) {
    if (!n) return;
    k_to_f32<<<zt_blocks(n, 256), 256, 0, g_zt.stream>>>(dst, (const bf16 *)src, n);
    ZT_LAUNCH_CHECK("to_f32");
}

/* ================================================================ embedding */
__global__ void k_embedding_fwd(bf16 *out, const int *tokens, const bf16 *wte, const bf16 *wpe, int BT, int T, int C) {
    size_t total = (size_t)BT * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int row = (int)(i / C), c = (int)(i % C);
        int t = row % T;
        int tok = tokens[row];
        out[i] = zt_bf(zt_ld(wte + (size_t)tok * C + c) + zt_ld(wpe + (size_t)t * C + c));
    }
}
void zt_cu_embedding_forward(void *out, const int *tokens, const void *wte, const void *wpe, int B, int T, int C) {
    size_t total = (size_t)B * T * C;
    if (!total) return;
    k_embedding_fwd<<<zt_blocks(total, 256), 256, 0, g_zt.stream>>>((bf16 *)out, tokens, (const bf16 *)wte,
                                                                     (const bf16 *)wpe, B * T, T, C);
    ZT_LAUNCH_CHECK("embedding_forward");
}

/* dwpe[t,c] += sum_b dout[b,t,c], b in order */
__global__ void k_embedding_bwd_wpe(bf16 *dwpe, const bf16 *dout, int B, int T, int C) {
    size_t total = (size_t)T * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += zt_ld(dout + (size_t)b * T * C + i);
        dwpe[i] = zt_bf(zt_ld(dwpe + i) + s);
    }
}
/* one block (x) per distinct token: idx = [seg_start[U+1] | seg_token[U] | pos[N]] */
__global__ void k_embedding_bwd_wte(bf16 *dwte, const bf16 *dout, const int *idx, int U, int C) {
    const int *seg_start = idx, *seg_token = idx + U + 1, *pos = idx + 2 * U + 1;
    int u = blockIdx.x;
    int s0 = seg_start[u], s1 = seg_start[u + 1];
    size_t tok = (size_t)seg_token[u];
    for (int c = blockIdx.y * blockDim.x + threadIdx.x; c < C; c += gridDim.y * blockDim.x) {
        float s = 0.0f;
        for (int k = s0; k < s1; k++) s += zt_ld(dout + (size_t)pos[k] * C + c);
        dwte[tok * C + c] = zt_bf(zt_ld(dwte + tok * C + c) + s);
    }
}
void zt_cu_embedding_backward(void *dwte, void *dwpe, const void *dout, const int *tokens, int B, int T, int C) {
    int N = B * T;
    if (N <= 0 || C <= 0) return;
    if (dwpe) {
        size_t total = (size_t)T * C;
        k_embedding_bwd_wpe<<<zt_blocks(total, 256), 256, 0, g_zt.stream>>>((bf16 *)dwpe, (const bf16 *)dout, B, T, C);
        ZT_LAUNCH_CHECK("embedding_backward(dwpe)");
    }
    if (!dwte) return;
    /* bucket positions by token on the host: sort (token, position) keys */
    int *htok = (int *)zt_host_scratch(ZT_HSCR_TOKENS, (size_t)N * sizeof(int));
    ZT_CUDA_CHECK(cudaMemcpyAsync(htok, tokens, (size_t)N * sizeof(int), cudaMemcpyDeviceToHost, g_zt.stream));
    ZT_CUDA_CHECK(cudaStreamSynchronize(g_zt.stream)); /* also: the previous call's H2D of hidx is done */
    std::vector<uint64_t> keys((size_t)N);
    for (int i = 0; i < N; i++) keys[i] = ((uint64_t)(uint32_t)htok[i] << 32) | (uint32_t)i;
    std::sort(keys.begin(), keys.end());
    int U = 0;
    for (int i = 0; i < N; i++)
        if (i == 0 || (keys[i] >> 32) != (keys[i - 1] >> 32)) U++;
    size_t nidx = (size_t)(2 * U + 1 + N);
    int *hidx = (int *)zt_host_scratch(ZT_HSCR_EMB_IDX, nidx * sizeof(int));
    int *seg_start = hidx, *seg_token = hidx + U + 1, *pos = hidx + 2 * U + 1;
    int u = 0;
    for (int i = 0; i < N; i++) {
        if (i == 0 || (keys[i] >> 32) != (keys[i - 1] >> 32)) {
            seg_start[u] = i;
            seg_token[u] = (int)(keys[i] >> 32);
            u++;
        }
        pos[i] = (int)(keys[i] & 0xffffffffu);
    }
    seg_start[U] = N;
    int *didx = (int *)zt_scratch(ZT_SCR_EMB_IDX, nidx * sizeof(int));
    ZT_CUDA_CHECK(cudaMemcpyAsync(didx, hidx, nidx * sizeof(int), cudaMemcpyHostToDevice, g_zt.stream));
    int threads = C >= 256 ? 256 : ((C + 31) / 32) * 32;
    int ychunks = (C + threads - 1) / threads;
    if (ychunks > 65535) ychunks = 65535;
    dim3 grid((unsigned)U, (unsigned)ychunks);
    k_embedding_bwd_wte<<<grid, threads, 0, g_zt.stream>>>((bf16 *)dwte, (const bf16 *)dout, didx, U, C);
    ZT_LAUNCH_CHECK("embedding_backward(dwte)");
}

/* ================================================================ LayerNorm */
/* one warp per row: two-pass mean / biased variance in fp32, y = (x - mean) * rstd * w + b */
__global__ void k_layernorm_fwd(bf16 *out, float *mean, float *rstd, const bf16 *inp, const bf16 *w, const bf16 *b,
                                int N, int C) {
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const bf16 *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += zt_ld(x + c);
    float m = zt_warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = zt_ld(x + c) - m;
        v += d * d;
    }
    float rs = zt_rstd(zt_warp_sum(v) / C);
    bf16 *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float y = (zt_ld(x + c) - m) * rs;
        y = y * zt_ld(w + c) + (b ? zt_ld(b + c) : 0.0f);
        o[c] = zt_bf(y);
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
    k_layernorm_fwd<<<(N + warps - 1) / warps, warps * 32, 0, g_zt.stream>>>(
        (bf16 *)out, mean, rstd, (const bf16 *)inp, (const bf16 *)w, (const bf16 *)b, N, C);
    ZT_LAUNCH_CHECK("layernorm_forward");
}

/* one warp per row: dinp += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * w */
__global__ void k_layernorm_bwd_dx(bf16 *dinp, const bf16 *dout, const bf16 *inp, const bf16 *w, const float *mean,
                                   const float *rstd, int N, int C) {
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const bf16 *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
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
    bf16 *dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float xhat = (zt_ld(x + c) - m) * rs;
        float dnorm = zt_ld(dy + c) * zt_ld(w + c);
        dx[c] = zt_bf(zt_ld(dx + c) + zt_layernorm_dx(dnorm, xhat, rs, dnorm_mean, dnorm_xhat_mean));
    }
}
void zt_cu_layernorm_backward(void *dinp, void *dw, void *db, const void *dout, const void *inp, const void *w,
                              const float *mean, const float *rstd, int N, int C) {
    if (N <= 0) return;
    if (dinp) {
        const int warps = 8;
        k_layernorm_bwd_dx<<<(N + warps - 1) / warps, warps * 32, 0, g_zt.stream>>>(
            (bf16 *)dinp, (const bf16 *)dout, (const bf16 *)inp, (const bf16 *)w, mean, rstd, N, C);
        ZT_LAUNCH_CHECK("layernorm_backward(dinp)");
    }
    if (dw || db)
        zt_cu_colsum(dw, db, (const bf16 *)dout, C, dw ? (const bf16 *)inp : NULL, mean, rstd, N, C);
}

/* ================================================================ column sums (dw, db, dbias) */
/* Stage 1: block (32 x 8 threads) owns 32 columns and the rows i = y*8 + ty (mod nsplit*8); it
 * writes its fp32 column sums to part_b[y][c] (and part_w[y][c] = sum dout * xhat when LN). */
#define ZT_COLSUM_TY 8
template <bool LN>
__global__ void k_colsum_partial(float *part_w, float *part_b, const bf16 *dout, int ld, const bf16 *inp,
                                 const float *mean, const float *rstd, int N, int C) {
    __shared__ float sw[ZT_COLSUM_TY][33], sb[ZT_COLSUM_TY][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int c = blockIdx.x * 32 + tx;
    float aw = 0.0f, ab = 0.0f;
    if (c < C) {
        for (int i = blockIdx.y * ZT_COLSUM_TY + ty; i < N; i += gridDim.y * ZT_COLSUM_TY) {
            float d = zt_ld(dout + (size_t)i * ld + c);
            ab += d;
            if (LN) aw += d * ((zt_ld(inp + (size_t)i * C + c) - mean[i]) * rstd[i]);
        }
    }
    sw[ty][tx] = aw;
    sb[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int k = 0; k < ZT_COLSUM_TY; k++) {
            tw += sw[k][tx];
            tb += sb[k][tx];
        }
        part_b[(size_t)blockIdx.y * C + c] = tb;
        if (LN) part_w[(size_t)blockIdx.y * C + c] = tw;
    }
}
/* Stage 2: one thread per column sums the nsplit partials in order and adds into the bf16 grads */
__global__ void k_colsum_final(bf16 *dw, bf16 *db, const float *part_w, const float *part_b, int nsplit, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float tw = 0.0f, tb = 0.0f;
    for (int k = 0; k < nsplit; k++) {
        if (dw) tw += part_w[(size_t)k * C + c];
        tb += part_b[(size_t)k * C + c];
    }
    if (dw) dw[c] = zt_bf(zt_ld(dw + c) + tw);
    if (db) db[c] = zt_bf(zt_ld(db + c) + tb);
}
void zt_cu_colsum(void *dw, void *db, const bf16 *dout, int ld, const bf16 *inp, const float *mean, const float *rstd,
                  int N, int C) {
    if (N <= 0 || C <= 0 || (!dw && !db)) return;
    bool ln = dw != NULL && inp != NULL;
    int nsplit = (N + 127) / 128; /* ~16 rows per thread */
    if (nsplit > 128) nsplit = 128;
    if (nsplit < 1) nsplit = 1;
    float *part = (float *)zt_scratch(ZT_SCR_COLSUM, (size_t)2 * nsplit * C * sizeof(float));
    float *part_w = part, *part_b = part + (size_t)nsplit * C;
    dim3 block(32, ZT_COLSUM_TY), grid((unsigned)((C + 31) / 32), (unsigned)nsplit);
    if (ln)
        k_colsum_partial<true><<<grid, block, 0, g_zt.stream>>>(part_w, part_b, dout, ld, inp, mean, rstd, N, C);
    else
        k_colsum_partial<false><<<grid, block, 0, g_zt.stream>>>(part_w, part_b, dout, ld, NULL, NULL, NULL, N, C);
    ZT_LAUNCH_CHECK("colsum(partial)");
    k_colsum_final<<<(C + 255) / 256, 256, 0, g_zt.stream>>>(ln ? (bf16 *)dw : NULL, (bf16 *)db, part_w, part_b,
                                                              nsplit, C);
    ZT_LAUNCH_CHECK("colsum(final)");
}

__global__ void k_add_bias(bf16 *out, const bf16 *bias, int N, int C, int ld) {
    size_t total = (size_t)N * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / C, c = i % C;
        bf16 *p = out + r * ld + c;
        *p = zt_bf(zt_ld(p) + zt_ld(bias + c));
    }
}
void zt_cu_add_bias(bf16 *out, const bf16 *bias, int N, int C, int ld) {
    size_t total = (size_t)N * C;
    if (!total) return;
    k_add_bias<<<zt_blocks(total, 256), 256, 0, g_zt.stream>>>(out, bias, N, C, ld);
    ZT_LAUNCH_CHECK("add_bias");
}

/* ================================================================ softmax + cross-entropy */
/* one block per row; online max/sum in fp32 (one read), then the gradient pass. In-place safe:
 * each element is read and then written by the same thread, after the row's reductions.
 * A target outside [0,V) gives a NaN loss and no one-hot term (as the CPU backend does). */
#define ZT_XENT_THREADS 512
__global__ void __launch_bounds__(ZT_XENT_THREADS) k_softmax_xent(float *losses, bf16 *dlogits, const bf16 *logits,
                                                                  const int *targets, int V, int Vp, float dloss) {
    __shared__ float sm[32], ss[32];
    __shared__ float s_target_logit;
    int row = blockIdx.x;
    const bf16 *x = logits + (size_t)row * Vp;
    int tgt = targets[row];
    bool valid = tgt >= 0 && tgt < V;
    if (threadIdx.x == 0) s_target_logit = valid ? zt_ld(x + tgt) : 0.0f;
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float v = zt_ld(x + j);
        if (v > m) {
            s = s * expf(m - v) + 1.0f; /* m = -inf first time: expf(-inf) = 0 */
            m = v;
        } else {
            s += expf(v - m);
        }
    }
    /* combine (m, s) pairs: warp, then block */
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        float M = fmaxf(m, m2);
        float a = (m == -INFINITY) ? 0.0f : s * expf(m - M);
        float b = (m2 == -INFINITY) ? 0.0f : s2 * expf(m2 - M);
        m = M;
        s = a + b;
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nwarps = blockDim.x / 32;
    if (lane == 0) {
        sm[warp] = m;
        ss[warp] = s;
    }
    __syncthreads();
    float M = -INFINITY;
    for (int k = 0; k < nwarps; k++) M = fmaxf(M, sm[k]);
    float S = 0.0f;
    for (int k = 0; k < nwarps; k++)
        if (sm[k] != -INFINITY) S += ss[k] * expf(sm[k] - M);
    float logS = logf(S);
    if (threadIdx.x == 0) losses[row] = valid ? (logS + M - s_target_logit) : NAN;
    if (!dlogits) return;
    bf16 *dx = dlogits + (size_t)row * Vp;
    float invS = 1.0f / S;
    for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
        float g = 0.0f;
        if (j < V) {
            float p = expf(zt_ld(x + j) - M) * invS;
            g = (p - (j == tgt ? 1.0f : 0.0f)) * dloss;
        }
        dx[j] = zt_bf(g);
    }
}
void zt_cu_softmax_xent(float *losses, void *dlogits, const void *logits, const int *targets, int N, int V, int Vp,
                        float dloss) {
    if (N <= 0) return;
    k_softmax_xent<<<N, ZT_XENT_THREADS, 0, g_zt.stream>>>(losses, (bf16 *)dlogits, (const bf16 *)logits, targets, V,
                                                           Vp, dloss);
    ZT_LAUNCH_CHECK("softmax_xent");
}

/* ================================================================ AdamW */
__global__ void k_adamw(float *master, float *m, float *v, const bf16 *grad, bf16 *params_out, size_t n,
                        zt_adam_step step) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float p = master[i], mi = m[i], vi = v[i];
        zt_adamw_element(&p, &mi, &vi, __bfloat162float(grad[i]), &step);
        master[i] = p;
        m[i] = mi;
        v[i] = vi;
        if (params_out) params_out[i] = __float2bfloat16_rn(p);
    }
}
void zt_cu_adamw(float *master, float *m, float *v, const void *grad, void *params_out, size_t n,
                 const zt_adam_step *step) {
    if (!n) return;
    k_adamw<<<zt_blocks(n, 256), 256, 0, g_zt.stream>>>(master, m, v, (const bf16 *)grad, (bf16 *)params_out, n, *step);
    ZT_LAUNCH_CHECK("adamw");
}

/* ================================================================ sum of squares */
#define ZT_SUMSQ_THREADS 256
#define ZT_SUMSQ_MAX_BLOCKS 1024
__global__ void k_sumsq_partial(double *partial, const bf16 *x, size_t n) {
    __shared__ double sh[ZT_SUMSQ_THREADS / 32];
    double acc = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double v = (double)__bfloat162float(x[i]);
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
    k_sumsq_partial<<<(unsigned)nb, ZT_SUMSQ_THREADS, 0, g_zt.stream>>>(d, (const bf16 *)x, n);
    ZT_LAUNCH_CHECK("sumsq(partial)");
    k_sumsq_final<<<1, 32, 0, g_zt.stream>>>(d + ZT_SUMSQ_MAX_BLOCKS, d, (int)nb);
    ZT_LAUNCH_CHECK("sumsq(final)");
    double *h = (double *)zt_host_scratch(ZT_HSCR_RESULT, sizeof(double));
    ZT_CUDA_CHECK(cudaMemcpyAsync(h, d + ZT_SUMSQ_MAX_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost, g_zt.stream));
    ZT_CUDA_CHECK(cudaStreamSynchronize(g_zt.stream));
    return *h;
}
