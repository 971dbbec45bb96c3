/* cpu_llama_ops.c — the CPU backend's ops for the Llama family other than attention (grouped-query
 * attention is backend_cpu.c's, GPT-2's attention being its case of one key/value head per query
 * head): RMSNorm forward and backward, the rotary embedding, SwiGLU forward and backward. OpenMP over
 * rows (or pieces of rows), each row's math cpu_kernels.c's vector code at the CPU's widest SIMD.
 *
 * Determinism, as backend_cpu.c's: RMSNorm's row sums run inside one thread in cpu_kernels.c's fixed
 * order; its dw is parallel over 64-column blocks, each column summing its rows in row order; the
 * rotary embedding and SwiGLU are element-wise. No result depends on the thread count. */
#include "backend/cpu_llama_ops.h"

#include <stddef.h>

#include "backend/cpu_kernels.h"

/* rows in parallel, each one zt_vec_rmsnorm */
void zt_cpu_rmsnorm_forward(void *out_, float *rstd, const void *inp_, const void *w_, float eps, int N, int C) {
    float *out = out_;
    const float *inp = inp_, *w = w_;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) zt_vec_rmsnorm(out + (size_t)i * C, rstd + i, inp + (size_t)i * C, w, eps, (size_t)C);
}

enum { DW_BLOCK = 64 }; /* dw's columns a block: 256 bytes, so no two threads write one cache line */

void zt_cpu_rmsnorm_backward(void *dinp_, void *dw_, const void *dout_, const void *inp_, const void *w_,
                             const float *rstd, int N, int C) {
    float *dinp = dinp_, *dw = dw_;
    const float *dout = dout_, *inp = inp_, *w = w_;
    int nblk = (C + DW_BLOCK - 1) / DW_BLOCK;
#pragma omp parallel
    {
        /* dinp: rows in parallel */
#pragma omp for schedule(static) nowait
        for (int i = 0; i < N; i++) {
            size_t o = (size_t)i * C;
            zt_vec_rmsnorm_dx(dinp + o, dout + o, inp + o, w, rstd[i], (size_t)C);
        }
        /* dw: column blocks in parallel, rows in order inside each */
#pragma omp for schedule(static)
        for (int bk = 0; bk < nblk; bk++) {
            int c0 = bk * DW_BLOCK, n = C - c0 < DW_BLOCK ? C - c0 : DW_BLOCK;
            for (int i = 0; i < N; i++) {
                size_t o = (size_t)i * C + c0;
                zt_vec_rmsnorm_dw(dw + c0, dout + o, inp + o, rstd[i], (size_t)n);
            }
        }
    }
}

/* (b,t) rows in parallel; in each, the NH query heads and the NKV key heads that follow them, each
 * rotated by row t of cos_sin (cos at [0, HD/2), sin at [HD/2, HD)); the value heads are not touched */
void zt_cpu_rope(void *qkv_, const float *cos_sin, int B, int T, int NH, int NKV, int HD, int inverse) {
    float *qkv = qkv_;
    int W = (NH + 2 * NKV) * HD, half = HD / 2;
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float *cs = cos_sin + (size_t)(bt % T) * HD;
        float *row = qkv + (size_t)bt * W;
        for (int h = 0; h < NH + NKV; h++) zt_vec_rope(row + (size_t)h * HD, cs, cs + half, inverse, (size_t)half);
    }
}

/* SwiGLU: rows cut into pieces of at most PIECE elements, the pieces in parallel (element-wise: any
 * split gives the same bits), so a few long rows still use every thread */
enum { PIECE = 4096 };

void zt_cpu_swiglu_forward(void *out_, const void *inp_, int N, int inter) {
    float *out = out_;
    const float *inp = inp_;
    int per_row = (inter + PIECE - 1) / PIECE;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)N * per_row; p++) {
        long i = p / per_row, lo = p % per_row * PIECE, n = inter - lo < PIECE ? inter - lo : PIECE;
        const float *gate = inp + (size_t)i * 2 * inter + lo;
        zt_vec_swiglu(out + (size_t)i * inter + lo, gate, gate + inter, (size_t)n);
    }
}

void zt_cpu_swiglu_backward(void *dinp_, const void *inp_, const void *dout_, int N, int inter) {
    float *dinp = dinp_;
    const float *inp = inp_, *dout = dout_;
    int per_row = (inter + PIECE - 1) / PIECE;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)N * per_row; p++) {
        long i = p / per_row, lo = p % per_row * PIECE, n = inter - lo < PIECE ? inter - lo : PIECE;
        size_t g = (size_t)i * 2 * inter + lo;
        zt_vec_swiglu_grad(dinp + g, dinp + g + inter, inp + g, inp + g + inter, dout + (size_t)i * inter + lo,
                           (size_t)n);
    }
}
