/* gemm.cu — the CUDA backend's matrix products: matmul forward/backward (cuBLASLt, 16-bit inputs,
 * fp32 accumulation, bias epilogue), the tiled linears' strided gemm / add_bias / bias_grad entries and causal self-attention built from strided-batched GEMMs
 * plus fused softmax kernels.
 *
 * Row-major to column-major: cuBLAS is column-major, and a row-major [r, c] buffer read as
 * column-major is its transpose. So the row-major product C[M,N] = op(A)[M,K] op(B)[K,N] is issued
 * as the column-major product C^T[N,M] = op(B)^T op(A)^T, i.e. with the operands swapped
 * (gemm_rm below); every caller then thinks in row-major only.
 *
 * cuBLASLt plans (descriptors + heuristic algorithm) are cached per shape / leading dimensions /
 * pointer alignment (in classes up to 16 bytes, the most any kernel needs: a tile's or a row block's
 * pointer at another 256-byte offset is the same plan). A full cache evicts its least recently used
 * plan, so a working set that fits never reruns the heuristic (the tiled linears add a few shapes
 * per linear); zt_backend_cuda_plan_stats counts builds and evictions for selftest. When the
 * heuristic finds no algorithm we fall back to
 * cublasGemmStridedBatchedEx (and a separate bias kernel), so odd shapes still work.
 *
 * Attention, naive path (attention.cu's flash kernels are used instead for head sizes 32 and 64;
 * this path is the fallback and what ZT_ATTN=naive selects). qkv rows [B,T,(NH+2NKV)hs] hold q (NH
 * heads) | k (NKV) | v (NKV), query head h using kv head h / G, G = NH / NKV (GPT-2: NKV = NH, 3C):
 *   forward:  permute q,k,v to [B,NH,T,hs] (scratch; with G > 1 each kv head copied for its G query
 *             heads: this fallback pays the repeated K/V the flash path avoids); S = q k^T in fp32
 *             (scratch, processed in chunks of heads to bound memory); att = causal softmax(S /
 *             sqrt(hs)) in fp32, stored 16-bit with zeros above the diagonal; y = att v; un-permute
 *             y into out [B,T,NH hs].
 *   backward: dy = permute(dout); dv = att^T dy; dA = dy v^T in fp32 (chunked scratch);
 *             dS = att * (dA - rowsum(att * dA)) / sqrt(hs) stored 16-bit in datt;
 *             dq = dS k; dk = dS^T q (per query head); scatter dq into dqkv and, per kv head, the sum
 *             of its G query heads' dk, dv in fp32, in head order (overwrite). */
#include "cuda_common.cuh"
#include <cstring>

namespace ZT_CU_NS {

/* ================================================================ cuBLASLt plans */
struct lt_key {
    int opa, opb, m, n, k, lda, ldb, ldc, batch;
    long long sa, sb, sc;
    int ctype, epilogue;
    int align_a, align_b, align_c, align_bias, align_aux;
};
struct lt_plan {
    lt_key key;
    unsigned long long used; /* g_plan_clock at its last use: the eviction order */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    bool have_algo;
};
#define ZT_LT_CACHE 512
static lt_plan g_plans[ZT_LT_CACHE];
static int g_nplans = 0;
static unsigned long long g_plan_clock;
static long g_plan_builds, g_plan_evictions;

void zt_cu_gemm_plan_stats(long *cached, long *built, long *evicted) {
    *cached += g_nplans, *built += g_plan_builds, *evicted += g_plan_evictions;
}

/* the pointer's alignment class: 16 (and more), 8, 4 or 2 bytes */
static int ptr_align(const void *p) {
    uintptr_t u = (uintptr_t)p;
    int a = 16;
    while (a > 2 && (u % (uintptr_t)a) != 0) a >>= 1;
    return a;
}

static void layout_batch(cublasLtMatrixLayout_t l, int batch, long long stride) {
    if (batch <= 1) return;
    int32_t b = batch;
    int64_t s = stride;
    ZT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b));
    ZT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s));
}

static void plan_build(lt_plan *p) {
    const lt_key &k = p->key;
    cublasOperation_t opa = (cublasOperation_t)k.opa, opb = (cublasOperation_t)k.opb;
    ZT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)k.epilogue;
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        int32_t bt = ZT_CUDA_R_16;
        ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    if (epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epi == CUBLASLT_EPILOGUE_DGELU) {
        int64_t ld = k.ldc; /* the pre-activation has D's shape and leading dimension */
        ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
    /* stored shapes (before op): A is m x k (or k x m when transposed), B is k x n (or n x k) */
    int ar = opa == CUBLAS_OP_N ? k.m : k.k, ac = opa == CUBLAS_OP_N ? k.k : k.m;
    int br = opb == CUBLAS_OP_N ? k.k : k.n, bc = opb == CUBLAS_OP_N ? k.n : k.k;
    ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, ZT_CUDA_R_16, ar, ac, k.lda));
    ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, ZT_CUDA_R_16, br, bc, k.ldb));
    ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lc, (cudaDataType_t)k.ctype, k.m, k.n, k.ldc));
    layout_batch(p->la, k.batch, k.sa);
    layout_batch(p->lb, k.batch, k.sb);
    layout_batch(p->lc, k.batch, k.sc);

    cublasLtMatmulPreference_t pref;
    ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = g_zt.lt_workspace_size;
    ZT_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    uint32_t al[4] = {(uint32_t)k.align_a, (uint32_t)k.align_b, (uint32_t)k.align_c, (uint32_t)k.align_bias};
    ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4));
    ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4));
    ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4));
    ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], 4));
    cublasLtMatmulHeuristicResult_t heur;
    memset(&heur, 0, sizeof heur);
    int nres = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(g_zt.lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &heur,
                                                      &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    p->have_algo = s == CUBLAS_STATUS_SUCCESS && nres > 0 && heur.state == CUBLAS_STATUS_SUCCESS;
    if (p->have_algo) p->algo = heur.algo;
}

static void plan_destroy(lt_plan *p) {
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatmulDescDestroy(p->desc);
}

void zt_cu_gemm_release(void) {
    for (int i = 0; i < g_nplans; i++) plan_destroy(&g_plans[i]);
    g_nplans = 0;
}

/* GELU fused into the GEMM's epilogue (cuBLASLt computes the same tanh GELU as src/backend/opmath.h) */
enum gelu_mode {
    GELU_NONE = 0,
    GELU_FORWARD,  /* aux = result (+ bias), the pre-activation; D = gelu(aux) */
    GELU_BACKWARD, /* D = gelu'(aux) * result: the GELU's backward applied to an input gradient */
};

/* Column-major D[m,n] (ldc, batch stride sc) = alpha op(A) op(B) + beta D (+ bias[m] per row of D),
 * A and B 16-bit, D 16-bit or fp32 (ctype); with a gelu mode, aux is the 16-bit pre-activation
 * (D's shape and ldc; batch 1, beta 0). */
static void gemm_cm(bool ta, bool tb, int m, int n, int k, const zt16 *A, int lda, long long sa, const zt16 *B,
                    int ldb, long long sb, void *D, cudaDataType_t ctype, int ldc, long long sc, int batch, float alpha,
                    float beta, const zt16 *bias, gelu_mode gelu = GELU_NONE, zt16 *aux = NULL) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
    if (k <= 0) { /* empty sum: D = beta D (+ bias); never happens in the model, keep it simple */
        zt_cuda_fatal("gemm", "k == 0 is not supported", __FILE__, __LINE__);
    }
    lt_key key;
    memset(&key, 0, sizeof key);
    key.opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    key.opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc, key.batch = batch;
    key.sa = batch > 1 ? sa : 0, key.sb = batch > 1 ? sb : 0, key.sc = batch > 1 ? sc : 0;
    key.ctype = (int)ctype;
    if (gelu != GELU_NONE && (batch != 1 || beta != 0.0f || ctype != ZT_CUDA_R_16 || !aux))
        zt_cuda_fatal("gemm", "a GELU epilogue needs batch 1, beta 0, a 16-bit output and aux", __FILE__, __LINE__);
    if (gelu == GELU_FORWARD) key.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    else if (gelu == GELU_BACKWARD) key.epilogue = CUBLASLT_EPILOGUE_DGELU;
    else key.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (gelu == GELU_BACKWARD && bias) zt_cuda_fatal("gemm", "no bias with the GELU backward epilogue", __FILE__, __LINE__);
    key.align_a = ptr_align(A), key.align_b = ptr_align(B), key.align_c = ptr_align(D);
    key.align_bias = bias ? ptr_align(bias) : 0;
    key.align_aux = aux ? ptr_align(aux) : 0;

    lt_plan *plan = NULL;
    for (int i = 0; i < g_nplans; i++)
        if (memcmp(&g_plans[i].key, &key, sizeof key) == 0) {
            plan = &g_plans[i];
            break;
        }
    if (!plan) {
        if (g_nplans < ZT_LT_CACHE) {
            plan = &g_plans[g_nplans++];
        } else { /* the least recently used makes room (its descriptors are not in use: one stream) */
            plan = &g_plans[0];
            for (int i = 1; i < ZT_LT_CACHE; i++)
                if (g_plans[i].used < plan->used) plan = &g_plans[i];
            plan_destroy(plan);
            g_plan_evictions++;
        }
        plan->key = key;
        plan_build(plan);
        g_plan_builds++;
    }
    plan->used = ++g_plan_clock;

    if (plan->have_algo) {
        if (bias)
            ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                           sizeof bias));
        if (gelu != GELU_NONE)
            ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                           sizeof aux));
        ZT_CUBLAS_CHECK(cublasLtMatmul(g_zt.lt, plan->desc, &alpha, A, plan->la, B, plan->lb, &beta, D, plan->lc, D,
                                       plan->lc, &plan->algo, g_zt.lt_workspace, g_zt.lt_workspace_size, g_zt.stream));
        ZT_LAUNCH_CHECK("cublasLtMatmul");
    } else {
        /* fallback: classic cuBLAS (handles any shape / alignment), bias and GELU by kernels; the
         * forward GEMM then writes the pre-activation into aux (the GELU kernels need ldc == m) */
        if (!g_zt.blas) {
            ZT_CUBLAS_CHECK(cublasCreate(&g_zt.blas));
            ZT_CUBLAS_CHECK(cublasSetStream(g_zt.blas, g_zt.stream));
        }
        if (gelu != GELU_NONE && ldc != m) zt_cuda_fatal("gemm", "GELU fallback needs ldc == m", __FILE__, __LINE__);
        void *out = gelu == GELU_FORWARD ? (void *)aux : D;
        ZT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(g_zt.blas, (cublasOperation_t)key.opa, (cublasOperation_t)key.opb,
                                                   m, n, k, &alpha, A, ZT_CUDA_R_16, lda, sa, B, ZT_CUDA_R_16, ldb, sb,
                                                   &beta, out, ctype, ldc, sc, batch, CUBLAS_COMPUTE_32F,
                                                   CUBLAS_GEMM_DEFAULT));
        ZT_LAUNCH_CHECK("cublasGemmStridedBatchedEx");
        if (bias) {
            if (ctype != ZT_CUDA_R_16 || batch != 1) zt_cuda_fatal("gemm", "bias fallback needs 16-bit output, batch 1", __FILE__, __LINE__);
            /* column-major m x n with ldc == row-major n x m with row stride ldc; bias per column m */
            zt_cu_add_bias((zt16 *)out, bias, n, m, ldc);
        }
        if (gelu == GELU_FORWARD) zt_cu_gelu_forward(D, aux, (size_t)m * n);
        if (gelu == GELU_BACKWARD) zt_cu_gelu_backward(D, aux, D, (size_t)m * n);
    }
}

/* Row-major C[M,N] = alpha op(A)[M,K] op(B)[K,N] + beta C (+ bias[N] added to every row).
 * A stored [M,K] (or [K,M] when ta) with row stride lda; B stored [K,N] (or [N,K] when tb). */
static void gemm_rm(bool ta, bool tb, int M, int N, int K, const zt16 *A, int lda, long long sa, const zt16 *B,
                    int ldb, long long sb, void *C, cudaDataType_t ctype, int ldc, long long sc, int batch, float alpha,
                    float beta, const zt16 *bias, gelu_mode gelu = GELU_NONE, zt16 *aux = NULL) {
    gemm_cm(tb, ta, N, M, K, B, ldb, sb, A, lda, sa, C, ctype, ldc, sc, batch, alpha, beta, bias, gelu, aux);
}

/* ================================================================ matmul */

/* The tied LM head multiplies by wte [V, C] with V = 50257: an odd GEMM dimension keeps cuBLASLt off
 * its fast tensor-core kernels (measured on an H100: 97 TFLOP/s forward against 600+ for the block
 * GEMMs). So a transposed W whose row count is not a multiple of 8 is cut in two: its first rows, a
 * multiple of 64, in one GEMM on the fast kernels, the last (fewer than 64) in a small second one.
 * Each part reads and writes only its own columns of out and dout, so the op touches columns
 * [0, OC) of their rows and nothing past them: stage 3 runs the head in row blocks, with out at
 * column lo of the logits, where the room left in a row is ld - lo, not ld. (Padding W with zero
 * rows instead would write, and in backward read, up to 63 columns past OC.) */
static int head_rows_fast(int OC, int w_transposed) {
    return w_transposed && OC % 8 != 0 && OC > 64 ? OC / 64 * 64 : OC;
}

void zt_cu_matmul_forward(void *out, const void *inp, const void *w, const void *bias, int N, int C, int OC,
                          int w_transposed, int ldout) {
    /* out[N,OC] = inp[N,C] W; W stored [C,OC] (ld OC) or, transposed, [OC,C] (ld C) */
    const zt16 *X = (const zt16 *)inp, *W = (const zt16 *)w, *b = (const zt16 *)bias;
    int fast = head_rows_fast(OC, w_transposed);
    gemm_rm(false, w_transposed != 0, N, fast, C, X, C, 0, W, w_transposed ? C : OC, 0, out, ZT_CUDA_R_16, ldout, 0, 1,
            1.0f, 0.0f, b);
    if (fast < OC) /* the last rows of the transposed W: out[:, fast:OC) */
        gemm_rm(false, true, N, OC - fast, C, X, C, 0, W + (size_t)fast * C, C, 0, (zt16 *)out + fast, ZT_CUDA_R_16,
                ldout, 0, 1, 1.0f, 0.0f, b ? b + fast : NULL);
}

void zt_cu_matmul_backward(void *dinp, void *dw, void *dbias, const void *dout, const void *inp, const void *w,
                           int N, int C, int OC, int w_transposed, int lddout) {
    const zt16 *dY = (const zt16 *)dout, *X = (const zt16 *)inp, *W = (const zt16 *)w;
    int fast = head_rows_fast(OC, w_transposed), rest = OC - fast;
    if (dinp) {
        /* dinp[N,C] = dout[N,OC] W^T: W stored [C,OC] -> op T; stored [OC,C] -> op N. Cut in two, the
         * small part goes first and the large one accumulates onto it (beta 1, in fp32), so the
         * large part is rounded to 16 bits once, as in one GEMM. */
        float beta = 0.0f;
        if (rest) {
            gemm_rm(false, false, N, C, rest, dY + fast, lddout, 0, W + (size_t)fast * C, C, 0, dinp, ZT_CUDA_R_16, C,
                    0, 1, 1.0f, 0.0f, NULL);
            beta = 1.0f;
        }
        gemm_rm(false, w_transposed == 0, N, C, fast, dY, lddout, 0, W, w_transposed ? C : OC, 0, dinp, ZT_CUDA_R_16, C,
                0, 1, 1.0f, beta, NULL);
    }
    if (dw) {
        if (!w_transposed) { /* dW[C,OC] += inp^T[C,N] dout[N,OC] */
            gemm_rm(true, false, C, OC, N, X, C, 0, dY, lddout, 0, dw, ZT_CUDA_R_16, OC, 0, 1, 1.0f, 1.0f, NULL);
        } else { /* dW[OC,C] += dout^T[OC,N] inp[N,C], rows [0, fast) and [fast, OC) */
            gemm_rm(true, false, fast, C, N, dY, lddout, 0, X, C, 0, dw, ZT_CUDA_R_16, C, 0, 1, 1.0f, 1.0f, NULL);
            if (rest)
                gemm_rm(true, false, rest, C, N, dY + fast, lddout, 0, X, C, 0, (zt16 *)dw + (size_t)fast * C,
                        ZT_CUDA_R_16, C, 0, 1, 1.0f, 1.0f, NULL);
        }
    }
    if (dbias) zt_cu_colsum(NULL, dbias, dY, lddout, NULL, NULL, NULL, N, OC);
}

/* ================================================================ tiled linears */
/* backend.h's gemm: C[M,N] (ldc) = op(A) op(B) + beta C, 16-bit C, fp32 accumulation; the operands
 * may be column slices of wider matrices (their row strides lda/ldb/ldc say so) */
void zt_cu_gemm(void *c, const void *a, const void *b, int M, int N, int K, int lda, int ldb, int ldc, int trans_a,
                int trans_b, float beta) {
    gemm_rm(trans_a != 0, trans_b != 0, M, N, K, (const zt16 *)a, lda, 0, (const zt16 *)b, ldb, 0, c, ZT_CUDA_R_16,
            ldc, 0, 1, 1.0f, beta, NULL);
}
/* backend.h's gemm_f32: the same with C in fp32, the tiled forward's accumulator */
void zt_cu_gemm_f32(float *c, const void *a, const void *b, int M, int N, int K, int lda, int ldb, int ldc, int trans_a,
                    int trans_b, float beta) {
    gemm_rm(trans_a != 0, trans_b != 0, M, N, K, (const zt16 *)a, lda, 0, (const zt16 *)b, ldb, 0, c, CUDA_R_32F, ldc,
            0, 1, 1.0f, beta, NULL);
}
/* backend.h's add_bias and bias_grad: the kernels matmul uses (GEMM fallback bias, deterministic dbias) */
void zt_cu_add_bias_op(void *out, const void *bias, int N, int OC, int ld) {
    zt_cu_add_bias((zt16 *)out, (const zt16 *)bias, N, OC, ld);
}
void zt_cu_bias_grad(void *dbias, const void *dout, int N, int OC, int ld) {
    zt_cu_colsum(NULL, dbias, (const zt16 *)dout, ld, NULL, NULL, NULL, N, OC);
}

/* MLP up-projection with the GELU in cuBLASLt's epilogue: pre = inp W + bias, out = gelu(pre) in
 * one pass over the output instead of a GEMM plus a GELU kernel */
void zt_cu_matmul_forward_gelu(void *out, void *pre, const void *inp, const void *w, const void *bias, int N, int C,
                               int OC) {
    gemm_rm(false, false, N, OC, C, (const zt16 *)inp, C, 0, (const zt16 *)w, OC, 0, out, ZT_CUDA_R_16, OC, 0, 1, 1.0f,
            0.0f, (const zt16 *)bias, GELU_FORWARD, (zt16 *)pre);
}

/* MLP down-projection backward whose input was gelu(pre): dinp = gelu'(pre) * (dout W^T) with the
 * GELU's derivative in the epilogue; dw and dbias as in matmul_backward */
void zt_cu_matmul_backward_dgelu(void *dinp, void *dw, void *dbias, const void *dout, const void *inp, const void *w,
                                 const void *gelu_pre, int N, int C, int OC) {
    gemm_rm(false, true, N, C, OC, (const zt16 *)dout, OC, 0, (const zt16 *)w, OC, 0, dinp, ZT_CUDA_R_16, C, 0, 1,
            1.0f, 0.0f, NULL, GELU_BACKWARD, (zt16 *)gelu_pre);
    zt_cu_matmul_backward(NULL, dw, dbias, dout, inp, w, N, C, OC, 0, OC);
}

/* ================================================================ attention kernels */
/* qkv [B,T,(NH+2NKV)hs] -> q,k,v [B,NH,T,hs] (query head h's k, v: kv head h / (NH/NKV)); one
 * thread per (b,h,t,d) */
__global__ void k_permute_qkv(zt16 *q, zt16 *k, zt16 *v, const zt16 *qkv, int B, int T, int NH, int NKV, int hs) {
    size_t total = (size_t)B * NH * T * hs;
    size_t ld = (size_t)(NH + 2 * NKV) * hs;
    int G = NH / NKV;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(i % hs);
        size_t r = i / hs;
        int t = (int)(r % T);
        r /= T;
        int h = (int)(r % NH);
        int b = (int)(r / NH);
        const zt16 *row = qkv + ((size_t)b * T + t) * ld;
        size_t kc = (size_t)(NH + h / G) * hs + d;
        q[i] = row[(size_t)h * hs + d];
        k[i] = row[kc];
        v[i] = row[kc + (size_t)NKV * hs];
    }
}
/* dq,dk,dv [B,NH,T,hs] -> dqkv [B,T,(NH+2NKV)hs]; one thread per element of dqkv (covers every
 * element). A kv head's dk (dv) is the sum of its G query heads' in fp32, in head order, rounded once
 * (the first term starts the sum: with G = 1 it is the one value, bit for bit). */
__global__ void k_unpermute_dqkv(zt16 *dqkv, const zt16 *dq, const zt16 *dk, const zt16 *dv, int B, int T, int NH,
                                 int NKV, int hs) {
    int W = (NH + 2 * NKV) * hs, G = NH / NKV;
    size_t total = (size_t)B * T * W;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int col = (int)(i % W);
        size_t bt = i / W;
        int t = (int)(bt % T), b = (int)(bt / T);
        int head = col / hs, d = col % hs;
        if (head < NH) {
            dqkv[i] = dq[(((size_t)b * NH + head) * T + t) * hs + d];
            continue;
        }
        const zt16 *s = head < NH + NKV ? dk : dv;
        int kh = head < NH + NKV ? head - NH : head - NH - NKV;
        size_t stride = (size_t)T * hs, src = (((size_t)b * NH + (size_t)kh * G) * T + t) * hs + d;
        if (G == 1) {
            dqkv[i] = s[src];
            continue;
        }
        float acc = zt_ld(s + src);
        for (int j = 1; j < G; j++) acc += zt_ld(s + src + j * stride);
        dqkv[i] = zt_to16(acc);
    }
}
/* [B,NH,T,hs] <-> [B,T,C]: dir 0: y -> out (un-permute), dir 1: out -> y (permute) */
__global__ void k_permute_heads(zt16 *bnth, zt16 *btc, int B, int T, int NH, int hs, int to_btc) {
    int C = NH * hs;
    size_t total = (size_t)B * T * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int c = (int)(i % C);
        size_t bt = i / C;
        int t = (int)(bt % T), b = (int)(bt / T);
        int h = c / hs, d = c % hs;
        size_t j = (((size_t)b * NH + h) * T + t) * hs + d;
        if (to_btc) btc[i] = bnth[j];
        else bnth[j] = btc[i];
    }
}
/* causal softmax, one warp per row of one head: att[t, j] = softmax_j<=t(scale * S[t, j]), 0 for j > t */
__global__ void k_attn_softmax(zt16 *att, const float *S, int rows, int T, float scale) {
    int lane = threadIdx.x & 31;
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= rows) return;
    int t = r % T;
    const float *s = S + (size_t)r * T;
    zt16 *a = att + (size_t)r * T;
    float m = -INFINITY;
    for (int j = lane; j <= t; j += 32) m = fmaxf(m, s[j] * scale);
    m = zt_warp_max(m);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += 32) sum += expf(s[j] * scale - m);
    float inv = 1.0f / zt_warp_sum(sum);
    for (int j = lane; j < T; j += 32) a[j] = zt_to16(j <= t ? expf(s[j] * scale - m) * inv : 0.0f);
}
/* softmax backward, one warp per row: dS[t,j] = scale * att[t,j] * (dA[t,j] - sum_k<=t att[t,k] dA[t,k]) */
__global__ void k_attn_softmax_bwd(zt16 *dS, const zt16 *att, const float *dA, int rows, int T, float scale) {
    int lane = threadIdx.x & 31;
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= rows) return;
    int t = r % T;
    const zt16 *a = att + (size_t)r * T;
    const float *g = dA + (size_t)r * T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += 32) dot += zt_ld(a + j) * g[j];
    dot = zt_warp_sum(dot);
    zt16 *o = dS + (size_t)r * T;
    for (int j = lane; j < T; j += 32) o[j] = zt_to16(j <= t ? scale * zt_ld(a + j) * (g[j] - dot) : 0.0f);
}

/* heads per chunk for the fp32 T x T scratch: at most ~256 MiB, at least one head */
static int att_chunk(int BH, int T) {
    size_t per = (size_t)T * T * sizeof(float);
    size_t cap = (size_t)256 << 20;
    size_t n = cap / per;
    if (n < 1) n = 1;
    if (n > (size_t)BH) n = (size_t)BH;
    return (int)n;
}

void zt_cu_attention_forward_naive(void *out, void *att, const void *qkv, int B, int T, int NH, int NKV, int hs) {
    if (B <= 0 || T <= 0) return;
    int BH = B * NH;
    size_t nqkv = (size_t)B * T * NH * hs; /* elements of each of q, k, v (k, v repeated per query head) */
    zt16 *q = (zt16 *)zt_scratch(ZT_SCR_ATT_QKV, 3 * nqkv * sizeof(zt16));
    zt16 *k = q + nqkv, *v = k + nqkv;
    zt16 *y = (zt16 *)zt_scratch(ZT_SCR_ATT_Y, nqkv * sizeof(zt16));
    zt16 *A = (zt16 *)att;
    k_permute_qkv<<<zt_blocks(nqkv, 256), 256, 0, g_zt.stream>>>(q, k, v, (const zt16 *)qkv, B, T, NH, NKV, hs);
    ZT_LAUNCH_CHECK("attention_forward(permute)");
    float scale = 1.0f / sqrtf((float)hs);
    long long sqk = (long long)T * hs, stt = (long long)T * T;
    int chunk = att_chunk(BH, T);
    float *S = (float *)zt_scratch(ZT_SCR_ATT_F32, (size_t)chunk * T * T * sizeof(float));
    for (int h0 = 0; h0 < BH; h0 += chunk) {
        int nb = BH - h0 < chunk ? BH - h0 : chunk;
        /* S[T,T] = q[T,hs] k[T,hs]^T, fp32 out */
        gemm_rm(false, true, T, T, hs, q + (size_t)h0 * sqk, hs, sqk, k + (size_t)h0 * sqk, hs, sqk, S, CUDA_R_32F, T,
                stt, nb, 1.0f, 0.0f, NULL);
        int rows = nb * T;
        k_attn_softmax<<<(rows + 7) / 8, 256, 0, g_zt.stream>>>(A + (size_t)h0 * stt, S, rows, T, scale);
        ZT_LAUNCH_CHECK("attention_forward(softmax)");
    }
    /* y[T,hs] = att[T,T] v[T,hs] */
    gemm_rm(false, false, T, hs, T, A, T, stt, v, hs, sqk, y, ZT_CUDA_R_16, hs, sqk, BH, 1.0f, 0.0f, NULL);
    k_permute_heads<<<zt_blocks(nqkv, 256), 256, 0, g_zt.stream>>>(y, (zt16 *)out, B, T, NH, hs, 1);
    ZT_LAUNCH_CHECK("attention_forward(unpermute)");
}

void zt_cu_attention_backward_naive(void *dqkv, void *datt, const void *dout, const void *qkv, const void *att,
                                    int B, int T, int NH, int NKV, int hs) {
    if (B <= 0 || T <= 0) return;
    int BH = B * NH;
    size_t nqkv = (size_t)B * T * NH * hs;
    zt16 *q = (zt16 *)zt_scratch(ZT_SCR_ATT_QKV, 3 * nqkv * sizeof(zt16));
    zt16 *k = q + nqkv, *v = k + nqkv;
    zt16 *dy = (zt16 *)zt_scratch(ZT_SCR_ATT_Y, nqkv * sizeof(zt16));
    zt16 *dq = (zt16 *)zt_scratch(ZT_SCR_ATT_DQKV, 3 * nqkv * sizeof(zt16));
    zt16 *dk = dq + nqkv, *dv = dk + nqkv;
    const zt16 *A = (const zt16 *)att;
    zt16 *dS = (zt16 *)datt;
    k_permute_qkv<<<zt_blocks(nqkv, 256), 256, 0, g_zt.stream>>>(q, k, v, (const zt16 *)qkv, B, T, NH, NKV, hs);
    ZT_LAUNCH_CHECK("attention_backward(permute qkv)");
    k_permute_heads<<<zt_blocks(nqkv, 256), 256, 0, g_zt.stream>>>(dy, (zt16 *)dout, B, T, NH, hs, 0);
    ZT_LAUNCH_CHECK("attention_backward(permute dout)");
    float scale = 1.0f / sqrtf((float)hs);
    long long sqk = (long long)T * hs, stt = (long long)T * T;
    /* dv[T,hs] = att^T[T,T] dy[T,hs] */
    gemm_rm(true, false, T, hs, T, A, T, stt, dy, hs, sqk, dv, ZT_CUDA_R_16, hs, sqk, BH, 1.0f, 0.0f, NULL);
    int chunk = att_chunk(BH, T);
    float *dA = (float *)zt_scratch(ZT_SCR_ATT_F32, (size_t)chunk * T * T * sizeof(float));
    for (int h0 = 0; h0 < BH; h0 += chunk) {
        int nb = BH - h0 < chunk ? BH - h0 : chunk;
        /* dA[T,T] = dy[T,hs] v[T,hs]^T, fp32 out */
        gemm_rm(false, true, T, T, hs, dy + (size_t)h0 * sqk, hs, sqk, v + (size_t)h0 * sqk, hs, sqk, dA, CUDA_R_32F,
                T, stt, nb, 1.0f, 0.0f, NULL);
        int rows = nb * T;
        k_attn_softmax_bwd<<<(rows + 7) / 8, 256, 0, g_zt.stream>>>(dS + (size_t)h0 * stt, A + (size_t)h0 * stt, dA,
                                                                     rows, T, scale);
        ZT_LAUNCH_CHECK("attention_backward(softmax)");
    }
    /* dq[T,hs] = dS[T,T] k[T,hs];  dk[T,hs] = dS^T[T,T] q[T,hs] */
    gemm_rm(false, false, T, hs, T, dS, T, stt, k, hs, sqk, dq, ZT_CUDA_R_16, hs, sqk, BH, 1.0f, 0.0f, NULL);
    gemm_rm(true, false, T, hs, T, dS, T, stt, q, hs, sqk, dk, ZT_CUDA_R_16, hs, sqk, BH, 1.0f, 0.0f, NULL);
    size_t ndqkv = (size_t)B * T * (NH + 2 * NKV) * hs;
    k_unpermute_dqkv<<<zt_blocks(ndqkv, 256), 256, 0, g_zt.stream>>>((zt16 *)dqkv, dq, dk, dv, B, T, NH, NKV, hs);
    ZT_LAUNCH_CHECK("attention_backward(unpermute)");
}

} // namespace ZT_CU_NS
