/* attention.cu — fused causal self-attention for the CUDA backend (flash-attention-2 style):
 * tiled over 64 queries x 64 keys, online softmax in fp32, 16-bit tensor cores (mma.sync m16n8k16,
 * fp32 accumulation; the same code serves bf16 and fp16), reading q, k, v straight from the qkv rows.
 * No T x T matrix is ever stored. Head sizes 32 and 64 take this path; anything else (and
 * ZT_ATTN=naive) uses the GEMM + softmax path of gemm.cu.
 *
 * Grouped-query attention (backend.h's attention_gqa_*): qkv rows [B,T,(NH+2NKV)HD] hold q (NH heads)
 * | k (NKV heads) | v (NKV heads); query head h reads kv head h / G, G = NH / NKV, straight from its
 * columns (K/V are never repeated in memory). Multi-head attention (attention_forward/backward, qkv
 * [B,T,3C]) is the case NKV = NH, HD = C / NH: the same kernels, the same addresses, the same
 * arithmetic, so its results are what they were before GQA existed, bit for bit.
 *
 * The `att` buffer of the op table is backend-private scratch here (the engine allocates B*NH*T*T
 * elements for it and only hands it from forward to backward). The flash path stores in it:
 *   lse2[B*NH*T] fp32   per query row, log2 of the softmax denominator in base-2 units:
 *                       lse2 = max_j(s_j) + log2(sum_j 2^(s_j - max)),  s_j = (q.k_j) * scale * log2(e)
 *   o[B*NH*T*hs] 16-bit  a copy of the forward output, head-major, for D = rowsum(dO * O).
 * Backward recomputes P = 2^(s - lse2) tile by tile. It is deterministic (no atomics): one kernel
 * owns a key tile of one kv head and loops over the G query heads sharing it (in order) and, for
 * each, over the query tiles at or after it for dK, dV (the G heads' sums meet in the registers, so
 * dK, dV are rounded once); another owns a query tile and loops over key tiles for dQ (S and dP are
 * computed twice; 7 tile GEMMs instead of 5).
 *
 * Math (per head, scale = 1/sqrt(hs)):  P = softmax(scale Q K^T) (causal), O = P V;
 *   dV = P^T dO;  dP = dO V^T;  D_i = sum_j P_ij dP_ij = dO_i . O_i;  dS = P * (dP - D);
 *   dQ = scale dS K;  dK = scale dS^T Q.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 bf16/f16; g = lane/4, c = lane%4):
 *   A (16x16, row-major): a0 = (g, 2c..2c+1), a1 = (g+8, 2c..), a2 = (g, 2c+8..), a3 = (g+8, 2c+8..)
 *   B (16x8, k x n):      b0 = (k 2c..2c+1, n g), b1 = (k 2c+8.., n g)
 *   C (16x8 fp32):        c0,c1 = (g, 2c..2c+1), c2,c3 = (g+8, 2c..2c+1)
 * Two neighbouring C tiles (columns 0-7, 8-15) hold exactly an A fragment of their 16x16 block, so
 * P and dS go from accumulators to the next mma without shared memory. A B operand whose k runs
 * along a shared-memory row (K in Q K^T) is read with 32-bit loads; one whose k runs down the
 * rows (V in P V) with ldmatrix.trans. Shared rows are padded by 16 bytes (conflict-free). */
#include "cuda_common.cuh"
#include <cstring>

namespace ZT_CU_NS {

#define FA_TILE 64    /* queries per block and keys per tile */
#define FA_THREADS 128 /* 4 warps, 16 query (or key) rows each */

/* ================================================================ PTX helpers */
__device__ __forceinline__ uint32_t fa_pack(float lo, float hi) {
    auto v = zt_to16x2(lo, hi); /* .x (low 16 bits) = lo */
    return *reinterpret_cast<uint32_t *>(&v);
}
__device__ __forceinline__ uint32_t fa_ld32(const zt16 *p) { return *reinterpret_cast<const uint32_t *>(p); }

/* c += a b, 16x8x16, 16-bit (bf16 or fp16) in, fp32 accumulate */
__device__ __forceinline__ void fa_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." ZT_PTX_16 "." ZT_PTX_16 ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Four transposed 8x8 16-bit matrices: lane l gives the address of row (l%8) of matrix l/8. */
__device__ __forceinline__ void fa_ldsm_x4_t(uint32_t r[4], const zt16 *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

/* 16-byte global -> shared copy that bypasses registers; src_bytes 0 writes zeros */
__device__ __forceinline__ void fa_cp16(zt16 *smem, const zt16 *gmem, bool valid) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}
__device__ __forceinline__ void fa_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void fa_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

/* ================================================================ tile pieces */
/* rows row0..row0+63 of a [T, HS] matrix with row stride ld into shared [64][HS+8]; rows >= T are 0 */
template <int HS>
__device__ __forceinline__ void fa_load_tile(zt16 *s, const zt16 *g, int row0, int T, size_t ld) {
    constexpr int CH = HS / 8, LDS = HS + 8;
    for (int i = threadIdx.x; i < FA_TILE * CH; i += FA_THREADS) {
        int r = i / CH, c = (i % CH) * 8;
        int t = row0 + r;
        bool ok = t < T;
        fa_cp16(s + r * LDS + c, g + (size_t)(ok ? t : 0) * ld + c, ok);
    }
}

/* A fragments of the 16 x HS block at shared rows r0.. (one per 16-column step) */
template <int HS>
__device__ __forceinline__ void fa_frag_a(uint32_t f[HS / 16][4], const zt16 *s, int r0, int lane) {
    constexpr int LDS = HS + 8;
    int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int ks = 0; ks < HS / 16; ks++) {
        const zt16 *p = s + (r0 + g) * LDS + ks * 16 + 2 * c;
        f[ks][0] = fa_ld32(p);
        f[ks][1] = fa_ld32(p + 8 * LDS);
        f[ks][2] = fa_ld32(p + 8);
        f[ks][3] = fa_ld32(p + 8 * LDS + 8);
    }
}

/* acc[16 x 64] = A[16 x HS] * M^T where M is the shared [64][HS+8] tile (n = its row index):
 * the "q k^T" shape. acc is zeroed first. */
template <int HS>
__device__ __forceinline__ void fa_mm_abt(float acc[8][4], const uint32_t a[HS / 16][4], const zt16 *s, int lane) {
    constexpr int LDS = HS + 8;
    int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int nt = 0; nt < 8; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < HS / 16; ks++)
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            const zt16 *p = s + (nt * 8 + g) * LDS + ks * 16 + 2 * c;
            fa_mma(acc[nt], a[ks], fa_ld32(p), fa_ld32(p + 8));
        }
}

/* acc[16 x HS] += P[16 x 64] * M where P is in accumulator layout (rounded to 16 bits here) and M is
 * the shared [64][HS+8] tile (k = its row index): the "p v" shape. */
template <int HS>
__device__ __forceinline__ void fa_mm_ab(float acc[HS / 8][4], const float p[8][4], const zt16 *s, int lane) {
    constexpr int LDS = HS + 8;
    int mrow = (lane & 7) + ((lane >> 3) & 1) * 8, mcol = (lane >> 4) * 8;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t a[4];
        a[0] = fa_pack(p[2 * kk][0], p[2 * kk][1]);
        a[1] = fa_pack(p[2 * kk][2], p[2 * kk][3]);
        a[2] = fa_pack(p[2 * kk + 1][0], p[2 * kk + 1][1]);
        a[3] = fa_pack(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < HS / 16; dp++) {
            uint32_t b[4];
            fa_ldsm_x4_t(b, s + (kk * 16 + mrow) * LDS + dp * 16 + mcol);
            fa_mma(acc[2 * dp], a, b[0], b[1]);
            fa_mma(acc[2 * dp + 1], a, b[2], b[3]);
        }
    }
}

/* store a 16 x HS accumulator block, times mul, as 16-bit rows r (< T) of a matrix with row stride ld */
template <int HS>
__device__ __forceinline__ void fa_store(zt16 *dst, size_t ld, const float acc[HS / 8][4], int row0, int T, float mul0,
                                         float mul1, int lane) {
    int g = lane >> 2, c = lane & 3;
    int r0 = row0 + g, r1 = r0 + 8;
#pragma unroll
    for (int dn = 0; dn < HS / 8; dn++) {
        int col = dn * 8 + 2 * c;
        if (r0 < T)
            *reinterpret_cast<uint32_t *>(dst + (size_t)r0 * ld + col) = fa_pack(acc[dn][0] * mul0, acc[dn][1] * mul0);
        if (r1 < T)
            *reinterpret_cast<uint32_t *>(dst + (size_t)r1 * ld + col) = fa_pack(acc[dn][2] * mul1, acc[dn][3] * mul1);
    }
}

/* ================================================================ forward */
/* grid (query tiles, B*NH); the longest (last) query tiles are scheduled first. Query head h of
 * batch row b reads kv head h / (NH / NKV); C = NH * HS is the width of out's rows. */
template <int HS>
__global__ void __launch_bounds__(FA_THREADS) k_flash_fwd(zt16 *out, float *lse2, zt16 *ocopy, const zt16 *qkv, int T,
                                                          int NH, int NKV, float sl2) {
    constexpr int LDS = HS + 8, TS = FA_TILE * LDS;
    __shared__ __align__(16) zt16 sm[5 * TS];
    zt16 *sQ = sm, *sK = sm + TS, *sV = sm + 3 * TS; /* K, V double-buffered */
    int nq = (T + FA_TILE - 1) / FA_TILE;
    int qt = nq - 1 - (int)blockIdx.x;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, kh = h / (NH / NKV);
    int C = NH * HS;
    size_t ld = (size_t)(NH + 2 * NKV) * HS;
    const zt16 *base = qkv + (size_t)b * T * ld + (size_t)h * HS;
    const zt16 *kbase = qkv + (size_t)b * T * ld + (size_t)(NH + kh) * HS, *vbase = kbase + (size_t)NKV * HS;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;

    fa_load_tile<HS>(sQ, base, qt * FA_TILE, T, ld);
    fa_load_tile<HS>(sK, kbase, 0, T, ld);
    fa_load_tile<HS>(sV, vbase, 0, T, ld);
    fa_commit();

    uint32_t qf[HS / 16][4];
    float o[HS / 8][4];
#pragma unroll
    for (int dn = 0; dn < HS / 8; dn++) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    int q0 = qt * FA_TILE + warp * 16 + g, q1 = q0 + 8;

    for (int j = 0; j <= qt; j++) {
        int buf = j & 1;
        if (j < qt) { /* prefetch the next key tile into the other buffer */
            fa_load_tile<HS>(sK + (buf ^ 1) * TS, kbase, (j + 1) * FA_TILE, T, ld);
            fa_load_tile<HS>(sV + (buf ^ 1) * TS, vbase, (j + 1) * FA_TILE, T, ld);
        }
        fa_commit();
        fa_wait<1>();
        __syncthreads();
        if (j == 0) fa_frag_a<HS>(qf, sQ, warp * 16, lane);

        float s[8][4];
        fa_mm_abt<HS>(s, qf, sK + buf * TS, lane);
        /* scale to base-2 units; causal mask on the diagonal tile (it also covers keys >= T) */
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int key = j * FA_TILE + nt * 8 + 2 * c + (e & 1);
                float v = s[nt][e] * sl2;
                if (j == qt && key > (e < 2 ? q0 : q1)) v = -INFINITY;
                s[nt][e] = v;
                if (e < 2) mx0 = fmaxf(mx0, v);
                else mx1 = fmaxf(mx1, v);
            }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        /* a row that has seen only masked scores keeps max -inf: subtract 0 instead (gives 0s) */
        float sub0 = mn0 == -INFINITY ? 0.0f : mn0, sub1 = mn1 == -INFINITY ? 0.0f : mn1;
        float al0 = exp2f(m0 - sub0), al1 = exp2f(m1 - sub1);
        m0 = mn0, m1 = mn1;
        float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            s[nt][0] = exp2f(s[nt][0] - sub0);
            s[nt][1] = exp2f(s[nt][1] - sub0);
            s[nt][2] = exp2f(s[nt][2] - sub1);
            s[nt][3] = exp2f(s[nt][3] - sub1);
            rs0 += s[nt][0] + s[nt][1];
            rs1 += s[nt][2] + s[nt][3];
        }
        l0 = l0 * al0 + rs0; /* per-thread partial sums; the quad's max is shared, so alpha is too */
        l1 = l1 * al1 + rs1;
#pragma unroll
        for (int dn = 0; dn < HS / 8; dn++) {
            o[dn][0] *= al0, o[dn][1] *= al0;
            o[dn][2] *= al1, o[dn][3] *= al1;
        }
        fa_mm_ab<HS>(o, s, sV + buf * TS, lane);
        __syncthreads(); /* everyone is done with buf before it is refilled */
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
    int row0 = qt * FA_TILE + warp * 16;
    fa_store<HS>(out + (size_t)b * T * C + (size_t)h * HS, (size_t)C, o, row0, T, inv0, inv1, lane);
    fa_store<HS>(ocopy + (size_t)bh * T * HS, (size_t)HS, o, row0, T, inv0, inv1, lane);
    if (c == 0) {
        if (q0 < T) lse2[(size_t)bh * T + q0] = m0 + log2f(l0);
        if (q1 < T) lse2[(size_t)bh * T + q1] = m1 + log2f(l1);
    }
}

/* ================================================================ backward */
/* D[bh, t] = sum_d dout[b, t, h*HS + d] * o[bh, t, d]; HS/8 threads per row, 8 elements each */
template <int HS>
__global__ void k_flash_bwd_dot(float *D, const zt16 *dout, const zt16 *ocopy, int B, int T, int NH) {
    constexpr int TPR = HS / 8;
    size_t rows = (size_t)B * NH * T;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t row = tid / TPR;
    int part = (int)(tid % TPR);
    float acc = 0.0f;
    if (row < rows) {
        size_t bh = row / T;
        int t = (int)(row % T), b = (int)(bh / NH), h = (int)(bh % NH);
        zt16x8 x = *reinterpret_cast<const zt16x8 *>(dout + ((size_t)b * T + t) * NH * HS + h * HS + part * 8);
        zt16x8 y = *reinterpret_cast<const zt16x8 *>(ocopy + row * HS + part * 8);
#pragma unroll
        for (int k = 0; k < 8; k++) acc += zt_f(x.v[k]) * zt_f(y.v[k]);
    }
#pragma unroll
    for (int o = TPR / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (row < rows && part == 0) D[row] = acc;
}

/* dK, dV for one key tile of one kv head (grid (key tiles, B*NKV)): loops over the G = NH/NKV query
 * heads that read it, in order, and for each over the query tiles at or after the key tile. The
 * (head, query tile) pairs are one flat sequence `it`, so the double buffering runs across heads. */
template <int HS>
__global__ void __launch_bounds__(FA_THREADS) k_flash_bwd_dkv(zt16 *dqkv, const zt16 *qkv, const zt16 *dout,
                                                              const float *lse2, const float *D, int T, int NH,
                                                              int NKV, float sl2, float scale) {
    constexpr int LDS = HS + 8, TS = FA_TILE * LDS;
    __shared__ __align__(16) zt16 sm[4 * TS];
    __shared__ float sL[FA_TILE], sD[FA_TILE];
    zt16 *sQ = sm, *sdO = sm + 2 * TS; /* each double-buffered: [buf][TS] */
    int nq = (T + FA_TILE - 1) / FA_TILE;
    int kt = blockIdx.x; /* tile 0 has the most work: launched first */
    int G = NH / NKV;
    int bk = blockIdx.y, b = bk / NKV, kh = bk % NKV, h0 = kh * G; /* query heads h0 .. h0+G-1 */
    int C = NH * HS;
    size_t ld = (size_t)(NH + 2 * NKV) * HS;
    const zt16 *row = qkv + (size_t)b * T * ld;
    const zt16 *qbase = row + (size_t)h0 * HS; /* query head h0 + j at qbase + j * HS */
    const zt16 *kbase = row + (size_t)(NH + kh) * HS, *vbase = kbase + (size_t)NKV * HS;
    const zt16 *dbase = dout + (size_t)b * T * C + (size_t)h0 * HS;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;

    /* K and V of this tile go through buffer 1 into registers; head h0's query tile kt goes to buffer 0 */
    fa_load_tile<HS>(sQ + TS, kbase, kt * FA_TILE, T, ld);
    fa_load_tile<HS>(sdO + TS, vbase, kt * FA_TILE, T, ld);
    fa_commit();
    fa_load_tile<HS>(sQ, qbase, kt * FA_TILE, T, ld);
    fa_load_tile<HS>(sdO, dbase, kt * FA_TILE, T, (size_t)C);
    fa_commit();
    fa_wait<1>();
    __syncthreads();
    uint32_t kf[HS / 16][4], vf[HS / 16][4];
    fa_frag_a<HS>(kf, sQ + TS, warp * 16, lane);
    fa_frag_a<HS>(vf, sdO + TS, warp * 16, lane);
    __syncthreads(); /* buffer 1 is free again */

    float dk[HS / 8][4], dv[HS / 8][4];
#pragma unroll
    for (int dn = 0; dn < HS / 8; dn++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[dn][e] = dv[dn][e] = 0.0f;
    int k0 = kt * FA_TILE + warp * 16 + g, k1 = k0 + 8;

    int span = nq - kt, n_it = G * span; /* query tiles per head; (head, tile) pairs */
    for (int it = 0; it < n_it; it++) {
        int buf = it & 1;
        int j = it / span, i = kt + it % span; /* query head h0 + j, query tile i */
        if (it + 1 < n_it) {
            int jn = (it + 1) / span, in = kt + (it + 1) % span;
            fa_load_tile<HS>(sQ + (buf ^ 1) * TS, qbase + (size_t)jn * HS, in * FA_TILE, T, ld);
            fa_load_tile<HS>(sdO + (buf ^ 1) * TS, dbase + (size_t)jn * HS, in * FA_TILE, T, (size_t)C);
        }
        fa_commit();
        size_t bh = (size_t)b * NH + h0 + j;
        if (threadIdx.x < FA_TILE) {
            int q = i * FA_TILE + threadIdx.x;
            sL[threadIdx.x] = q < T ? lse2[bh * T + q] : 0.0f;
            sD[threadIdx.x] = q < T ? D[bh * T + q] : 0.0f;
        }
        fa_wait<1>();
        __syncthreads();
        const zt16 *q_s = sQ + buf * TS, *do_s = sdO + buf * TS;

        /* P^T[key, q] = 2^(s - lse2[q]) for q < T and key <= q, else 0 */
        float p[8][4];
        fa_mm_abt<HS>(p, kf, q_s, lane);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int ql = nt * 8 + 2 * c + (e & 1), q = i * FA_TILE + ql;
                int key = e < 2 ? k0 : k1;
                p[nt][e] = (q < T && key <= q) ? exp2f(p[nt][e] * sl2 - sL[ql]) : 0.0f;
            }
        fa_mm_ab<HS>(dv, p, do_s, lane); /* dV += P^T dO */
        float dp[8][4];
        fa_mm_abt<HS>(dp, vf, do_s, lane); /* dP^T = V dO^T */
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) dp[nt][e] = p[nt][e] * (dp[nt][e] - sD[nt * 8 + 2 * c + (e & 1)]);
        fa_mm_ab<HS>(dk, dp, q_s, lane); /* dK += dS^T Q */
        __syncthreads();
    }
    int row0 = kt * FA_TILE + warp * 16;
    fa_store<HS>(dqkv + (size_t)b * T * ld + (size_t)(NH + kh) * HS, ld, dk, row0, T, scale, scale, lane);
    fa_store<HS>(dqkv + (size_t)b * T * ld + (size_t)(NH + NKV + kh) * HS, ld, dv, row0, T, 1.0f, 1.0f, lane);
}

/* dQ for one query tile of one query head (grid (query tiles, B*NH)); loops over the key tiles at or
 * before it, of kv head h / (NH / NKV) */
template <int HS>
__global__ void __launch_bounds__(FA_THREADS) k_flash_bwd_dq(zt16 *dqkv, const zt16 *qkv, const zt16 *dout,
                                                             const float *lse2, const float *D, int T, int NH,
                                                             int NKV, float sl2, float scale) {
    constexpr int LDS = HS + 8, TS = FA_TILE * LDS;
    __shared__ __align__(16) zt16 sm[4 * TS];
    zt16 *sK = sm, *sV = sm + 2 * TS; /* each double-buffered */
    int nq = (T + FA_TILE - 1) / FA_TILE;
    int qt = nq - 1 - (int)blockIdx.x;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, kh = h / (NH / NKV);
    int C = NH * HS;
    size_t ld = (size_t)(NH + 2 * NKV) * HS;
    const zt16 *base = qkv + (size_t)b * T * ld + (size_t)h * HS;
    const zt16 *kbase = qkv + (size_t)b * T * ld + (size_t)(NH + kh) * HS;
    int voff = NKV * HS; /* v's columns after k's (an int offset: one register fewer than a pointer) */
    const zt16 *dbase = dout + (size_t)b * T * C + (size_t)h * HS;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;

    /* Q and dO of this tile go through buffer 1 into registers; key tile 0 goes to buffer 0 */
    fa_load_tile<HS>(sK + TS, base, qt * FA_TILE, T, ld);
    fa_load_tile<HS>(sV + TS, dbase, qt * FA_TILE, T, (size_t)C);
    fa_commit();
    fa_load_tile<HS>(sK, kbase, 0, T, ld);
    fa_load_tile<HS>(sV, kbase + voff, 0, T, ld);
    fa_commit();
    fa_wait<1>();
    __syncthreads();
    uint32_t qf[HS / 16][4], df[HS / 16][4];
    fa_frag_a<HS>(qf, sK + TS, warp * 16, lane);
    fa_frag_a<HS>(df, sV + TS, warp * 16, lane);
    __syncthreads();

    int q0 = qt * FA_TILE + warp * 16 + g, q1 = q0 + 8;
    float L0 = q0 < T ? lse2[(size_t)bh * T + q0] : 0.0f, L1 = q1 < T ? lse2[(size_t)bh * T + q1] : 0.0f;
    float D0 = q0 < T ? D[(size_t)bh * T + q0] : 0.0f, D1 = q1 < T ? D[(size_t)bh * T + q1] : 0.0f;
    float dq[HS / 8][4];
#pragma unroll
    for (int dn = 0; dn < HS / 8; dn++) dq[dn][0] = dq[dn][1] = dq[dn][2] = dq[dn][3] = 0.0f;

    for (int j = 0; j <= qt; j++) {
        int buf = j & 1;
        if (j < qt) {
            fa_load_tile<HS>(sK + (buf ^ 1) * TS, kbase, (j + 1) * FA_TILE, T, ld);
            fa_load_tile<HS>(sV + (buf ^ 1) * TS, kbase + voff, (j + 1) * FA_TILE, T, ld);
        }
        fa_commit();
        fa_wait<1>();
        __syncthreads();
        const zt16 *k_s = sK + buf * TS, *v_s = sV + buf * TS;
        float p[8][4];
        fa_mm_abt<HS>(p, qf, k_s, lane); /* S = Q K^T */
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int key = j * FA_TILE + nt * 8 + 2 * c + (e & 1);
                bool hi = e >= 2;
                bool keep = !(j == qt && key > (hi ? q1 : q0));
                p[nt][e] = keep ? exp2f(p[nt][e] * sl2 - (hi ? L1 : L0)) : 0.0f;
            }
        float dp[8][4];
        fa_mm_abt<HS>(dp, df, v_s, lane); /* dP = dO V^T */
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            dp[nt][0] = p[nt][0] * (dp[nt][0] - D0);
            dp[nt][1] = p[nt][1] * (dp[nt][1] - D0);
            dp[nt][2] = p[nt][2] * (dp[nt][2] - D1);
            dp[nt][3] = p[nt][3] * (dp[nt][3] - D1);
        }
        fa_mm_ab<HS>(dq, dp, k_s, lane); /* dQ += dS K */
        __syncthreads();
    }
    fa_store<HS>(dqkv + (size_t)b * T * ld + (size_t)h * HS, ld, dq, qt * FA_TILE + warp * 16, T, scale, scale, lane);
}

/* ================================================================ dispatch */
/* byte offset of the o copy inside att (after the lse2 floats, 256-aligned) */
static size_t fa_ocopy_offset(int B, int NH, int T) { return ((size_t)B * NH * T * sizeof(float) + 255) & ~(size_t)255; }

static int fa_mode = -1; /* -1 unknown, 0 naive forced (ZT_ATTN=naive), 1 flash allowed */

/* The flash path is taken for head sizes 32 and 64 when att is large enough to hold lse2 and the
 * o copy (T >= hs + 2 or so) and qkv/att are 16-byte aligned. Forward and backward ask with the
 * same (qkv, att, shape), so they always agree on the meaning of att. */
static bool fa_usable(const void *att, const void *qkv, int B, int T, int NH, int hs) {
    if (fa_mode < 0) {
        const char *e = getenv("ZT_ATTN");
        fa_mode = (e && !strcmp(e, "naive")) ? 0 : 1;
    }
    if (!fa_mode) return false;
    if (hs != 32 && hs != 64) return false;
    size_t need = fa_ocopy_offset(B, NH, T) + (size_t)B * NH * T * hs * sizeof(zt16);
    size_t have = (size_t)B * NH * T * T * sizeof(zt16);
    return need <= have && zt_aligned16(att) && zt_aligned16(qkv);
}

/* the head counts every entry needs: NH, NKV, HD positive and NKV dividing NH */
static void gqa_check_heads(const char *op, int NH, int NKV, int HD) {
    if (NH <= 0 || NKV <= 0 || HD <= 0 || NH % NKV)
        zt_cuda_fatal(op, "heads: NH, NKV, HD must be positive and NKV must divide NH", __FILE__, __LINE__);
}

template <int HS>
static void fa_forward(void *out, void *att, const void *qkv, int B, int T, int NH, int NKV) {
    float *lse2 = (float *)att;
    zt16 *ocopy = (zt16 *)((char *)att + fa_ocopy_offset(B, NH, T));
    float sl2 = (1.0f / sqrtf((float)HS)) * 1.4426950408889634f;
    dim3 grid((unsigned)((T + FA_TILE - 1) / FA_TILE), (unsigned)(B * NH));
    k_flash_fwd<HS><<<grid, FA_THREADS, 0, g_zt.stream>>>((zt16 *)out, lse2, ocopy, (const zt16 *)qkv, T, NH, NKV,
                                                          sl2);
    ZT_LAUNCH_CHECK("attention_forward(flash)");
}

template <int HS>
static void fa_backward(void *dqkv, void *datt, const void *dout, const void *qkv, const void *att, int B, int T,
                        int NH, int NKV) {
    const float *lse2 = (const float *)att;
    const zt16 *ocopy = (const zt16 *)((const char *)att + fa_ocopy_offset(B, NH, T));
    float *D = (float *)datt; /* B*NH*T floats: fits in datt (B*NH*T*T 16-bit) since fa_usable held */
    float scale = 1.0f / sqrtf((float)HS), sl2 = scale * 1.4426950408889634f;
    size_t threads = (size_t)B * NH * T * (HS / 8);
    k_flash_bwd_dot<HS><<<(unsigned)((threads + 255) / 256), 256, 0, g_zt.stream>>>(D, (const zt16 *)dout, ocopy, B,
                                                                                    T, NH);
    ZT_LAUNCH_CHECK("attention_backward(flash D)");
    unsigned tiles = (unsigned)((T + FA_TILE - 1) / FA_TILE);
    k_flash_bwd_dkv<HS><<<dim3(tiles, (unsigned)(B * NKV)), FA_THREADS, 0, g_zt.stream>>>(
        (zt16 *)dqkv, (const zt16 *)qkv, (const zt16 *)dout, lse2, D, T, NH, NKV, sl2, scale);
    ZT_LAUNCH_CHECK("attention_backward(flash dk dv)");
    k_flash_bwd_dq<HS><<<dim3(tiles, (unsigned)(B * NH)), FA_THREADS, 0, g_zt.stream>>>(
        (zt16 *)dqkv, (const zt16 *)qkv, (const zt16 *)dout, lse2, D, T, NH, NKV, sl2, scale);
    ZT_LAUNCH_CHECK("attention_backward(flash dq)");
}

void zt_cu_attention_gqa_forward(void *out, void *att, const void *qkv, int B, int T, int NH, int NKV, int HD) {
    if (B <= 0 || T <= 0) return;
    gqa_check_heads("attention_forward", NH, NKV, HD);
    if (!fa_usable(att, qkv, B, T, NH, HD)) {
        zt_cu_attention_forward_naive(out, att, qkv, B, T, NH, NKV, HD);
        return;
    }
    if (!zt_aligned16(out)) zt_cuda_fatal("attention_forward", "out must be 16-byte aligned", __FILE__, __LINE__);
    if (HD == 64) fa_forward<64>(out, att, qkv, B, T, NH, NKV);
    else fa_forward<32>(out, att, qkv, B, T, NH, NKV);
}

void zt_cu_attention_gqa_backward(void *dqkv, void *datt, const void *dout, const void *qkv, const void *att, int B,
                                  int T, int NH, int NKV, int HD) {
    if (B <= 0 || T <= 0) return;
    gqa_check_heads("attention_backward", NH, NKV, HD);
    if (!fa_usable(att, qkv, B, T, NH, HD)) {
        zt_cu_attention_backward_naive(dqkv, datt, dout, qkv, att, B, T, NH, NKV, HD);
        return;
    }
    if (!zt_aligned16(dqkv) || !zt_aligned16(dout) || !zt_aligned16(datt))
        zt_cuda_fatal("attention_backward", "dqkv, dout and datt must be 16-byte aligned", __FILE__, __LINE__);
    if (HD == 64) fa_backward<64>(dqkv, datt, dout, qkv, att, B, T, NH, NKV);
    else fa_backward<32>(dqkv, datt, dout, qkv, att, B, T, NH, NKV);
}

/* multi-head attention: qkv [B,T,3C] is the GQA layout with NKV = NH heads of C / NH */
void zt_cu_attention_forward(void *out, void *att, const void *qkv, int B, int T, int C, int NH) {
    if (B <= 0 || T <= 0) return;
    if (NH <= 0 || C % NH) zt_cuda_fatal("attention_forward", "C must be a multiple of NH", __FILE__, __LINE__);
    zt_cu_attention_gqa_forward(out, att, qkv, B, T, NH, NH, C / NH);
}

void zt_cu_attention_backward(void *dqkv, void *datt, const void *dout, const void *qkv, const void *att, int B, int T,
                              int C, int NH) {
    if (B <= 0 || T <= 0) return;
    if (NH <= 0 || C % NH) zt_cuda_fatal("attention_backward", "C must be a multiple of NH", __FILE__, __LINE__);
    zt_cu_attention_gqa_backward(dqkv, datt, dout, qkv, att, B, T, NH, NH, C / NH);
}

} // namespace ZT_CU_NS
