/* backend_sim_ops.c — the simulated GPU's ops (backend_sim.c has the device: memory space, lanes,
 * copies). Each entry checks and translates its pointers on the caller's thread (sim_dev), gives
 * the item its cost on the hardware profile (sim_clock.h) and queues it on the stream; run there,
 * the item widens its 16-bit arguments to fp32, calls the CPU backend's fp32 op (the math) and rounds
 * what the op wrote back to bf16 or fp16, to nearest-even, as the CUDA kernels keep 16-bit storage
 * and compute in fp32 (sim_operands.c: the widened copies and their price). The per-dtype thunks fill
 * the two op tables, the Llama family's entries being backend_sim_llama.c's; zt_backend_sim opens the
 * device and hands out the table of a dtype. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu_adam.h"
#include "backend/sim_clock.h"
#include "backend/sim_internal.h"
#include "util/util.h"

/* ------------------------------------------------------------------ ops
 * Each entry checks and translates its pointers on the caller's thread, then queues a closure that
 * widens, calls the CPU backend's op and rounds (sim_operands.c: the 16-bit operands). The dtype
 * travels in i[8]. */

static void run_to_compute(sim_item *it) { zt_cpu_from_f32(it->p[0], it->p[1], it->n, (zt_dtype)it->i[8]); }
static void run_to_f32(sim_item *it) { zt_cpu_to_f32(it->p[0], it->p[1], it->n, (zt_dtype)it->i[8]); }

static void run_embedding_forward(sim_item *it) {
    OP_BEGIN(it);
    long B = it->i[2], T = it->i[3], C = it->i[4], lo = it->i[0], hi = it->i[1];
    sim_cpu_math->embedding_forward(sim_w16(&w_, it->p[0], B * T * C, 1), it->p[1], sim_w16(&w_, it->p[2], (hi - lo) * C, 0), (int)lo,
                             (int)hi, sim_w16(&w_, it->p[3], T * C, 0), (int)B, (int)T, (int)C);
    OP_END();
}
static void run_embedding_backward(sim_item *it) {
    OP_BEGIN(it);
    long B = it->i[2], T = it->i[3], C = it->i[4], lo = it->i[0], hi = it->i[1];
    sim_cpu_math->embedding_backward(sim_w16(&w_, it->p[0], (hi - lo) * C, 1), (int)lo, (int)hi, sim_w16(&w_, it->p[1], T * C, 1),
                              sim_w16(&w_, it->p[2], B * T * C, 0), it->p[3], (int)B, (int)T, (int)C);
    OP_END();
}
static void run_layernorm_forward(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], C = it->i[1];
    sim_cpu_math->layernorm_forward(sim_w16(&w_, it->p[0], N * C, 1), it->p[1], it->p[2], sim_w16(&w_, it->p[3], N * C, 0),
                             sim_w16(&w_, it->p[4], C, 0), sim_w16(&w_, it->p[5], C, 0), (int)N, (int)C);
    OP_END();
}
static void run_layernorm_backward(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], C = it->i[1];
    sim_cpu_math->layernorm_backward(sim_w16(&w_, it->p[0], N * C, 1), sim_w16(&w_, it->p[1], C, 1), sim_w16(&w_, it->p[2], C, 1),
                              sim_w16(&w_, it->p[3], N * C, 0), sim_w16(&w_, it->p[4], N * C, 0), sim_w16(&w_, it->p[5], C, 0),
                              it->p[6], it->p[7], (int)N, (int)C);
    OP_END();
}
static void run_matmul_forward(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], C = it->i[1], OC = it->i[2], wt = it->i[3], ld = it->i[4];
    sim_cpu_math->matmul_forward(sim_w16_rows(&w_, it->p[0], N, OC, ld, 1), sim_w16(&w_, it->p[1], N * C, 0),
                          sim_w16(&w_, it->p[2], C * OC, 0), sim_w16(&w_, it->p[3], OC, 0), (int)N, (int)C, (int)OC, (int)wt,
                          (int)ld);
    OP_END();
}
static void run_matmul_backward(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], C = it->i[1], OC = it->i[2], wt = it->i[3], ld = it->i[4];
    sim_cpu_math->matmul_backward(sim_w16(&w_, it->p[0], N * C, 1), sim_w16(&w_, it->p[1], C * OC, 1), sim_w16(&w_, it->p[2], OC, 1),
                           sim_w16(&w_, it->p[3], (N - 1) * ld + OC, 0), sim_w16(&w_, it->p[4], N * C, 0),
                           sim_w16(&w_, it->p[5], C * OC, 0), (int)N, (int)C, (int)OC, (int)wt, (int)ld);
    OP_END();
}
static void run_matmul_forward_gelu(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], C = it->i[1], OC = it->i[2];
    sim_cpu_math->matmul_forward_gelu(sim_w16(&w_, it->p[0], N * OC, 1), sim_w16(&w_, it->p[1], N * OC, 1),
                               sim_w16(&w_, it->p[2], N * C, 0), sim_w16(&w_, it->p[3], C * OC, 0), sim_w16(&w_, it->p[4], OC, 0),
                               (int)N, (int)C, (int)OC);
    OP_END();
}
static void run_matmul_backward_dgelu(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], C = it->i[1], OC = it->i[2];
    sim_cpu_math->matmul_backward_dgelu(sim_w16(&w_, it->p[0], N * C, 1), sim_w16(&w_, it->p[1], C * OC, 1), sim_w16(&w_, it->p[2], OC, 1),
                                 sim_w16(&w_, it->p[3], N * OC, 0), sim_w16(&w_, it->p[4], N * C, 0),
                                 sim_w16(&w_, it->p[5], C * OC, 0), sim_w16(&w_, it->p[6], N * C, 0), (int)N, (int)C, (int)OC);
    OP_END();
}
/* Attention keeps nothing in att (the CUDA flash path keeps its own statistics there): backward
 * recomputes the probabilities from qkv in fp32, which the CPU forward gives bit for bit. */
static void run_attention_forward(sim_item *it) {
    OP_BEGIN(it);
    long B = it->i[0], T = it->i[1], C = it->i[2], NH = it->i[3];
    float *att = zt_xmalloc(F(B * NH * T * T));
    sim_cpu_math->attention_forward(sim_w16(&w_, it->p[0], B * T * C, 1), att, sim_w16(&w_, it->p[2], B * T * 3 * C, 0), (int)B,
                             (int)T, (int)C, (int)NH);
    free(att);
    OP_END();
}
static void run_attention_backward(sim_item *it) {
    OP_BEGIN(it);
    long B = it->i[0], T = it->i[1], C = it->i[2], NH = it->i[3];
    float *att = zt_xmalloc(F(B * NH * T * T)), *datt = zt_xmalloc(F(B * NH * T * T)),
          *out = zt_xmalloc(F(B * T * C));
    float *qkv = sim_w16(&w_, it->p[3], B * T * 3 * C, 0);
    sim_cpu_math->attention_forward(out, att, qkv, (int)B, (int)T, (int)C, (int)NH);
    sim_cpu_math->attention_backward(sim_w16(&w_, it->p[0], B * T * 3 * C, 1), datt, sim_w16(&w_, it->p[2], B * T * C, 0), qkv, att,
                              (int)B, (int)T, (int)C, (int)NH);
    free(att);
    free(datt);
    free(out);
    OP_END();
}
static void run_gelu_forward(sim_item *it) {
    OP_BEGIN(it);
    sim_cpu_math->gelu_forward(sim_w16(&w_, it->p[0], it->n, 1), sim_w16(&w_, it->p[1], it->n, 0), it->n);
    OP_END();
}
static void run_gelu_backward(sim_item *it) {
    OP_BEGIN(it);
    sim_cpu_math->gelu_backward(sim_w16(&w_, it->p[0], it->n, 1), sim_w16(&w_, it->p[1], it->n, 0), sim_w16(&w_, it->p[2], it->n, 0),
                         it->n);
    OP_END();
}
static void run_residual_forward(sim_item *it) {
    OP_BEGIN(it);
    sim_cpu_math->residual_forward(sim_w16(&w_, it->p[0], it->n, 1), sim_w16(&w_, it->p[1], it->n, 0), sim_w16(&w_, it->p[2], it->n, 0),
                            it->n);
    OP_END();
}
static void run_accumulate(sim_item *it) {
    OP_BEGIN(it);
    sim_cpu_math->accumulate(sim_w16(&w_, it->p[0], it->n, 1), sim_w16(&w_, it->p[1], it->n, 0), it->n);
    OP_END();
}
static void run_scale(sim_item *it) {
    OP_BEGIN(it);
    sim_cpu_math->scale(sim_w16(&w_, it->p[0], it->n, 1), it->f, it->n);
    OP_END();
}
static void run_softmax_xent(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], V = it->i[1], Vp = it->i[2];
    float *logits = sim_w16(&w_, it->p[2], N * Vp, 0);
    sim_cpu_math->softmax_xent(it->p[0], sim_w16(&w_, it->p[1], N * Vp, 1), logits, it->p[3], (int)N, (int)V, (int)Vp, it->f);
    OP_END();
}
static void run_xent_partial(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], Vl = it->i[1], Vp = it->i[2], lo = it->i[3];
    sim_cpu_math->xent_partial(it->p[0], sim_w16(&w_, it->p[1], N * Vp, 0), it->p[2], (int)N, (int)Vl, (int)Vp, (int)lo);
    OP_END();
}
static void run_xent_parallel(sim_item *it) {
    OP_BEGIN(it);
    long tp = it->i[0], N = it->i[1], Vl = it->i[2], Vp = it->i[3], lo = it->i[4];
    float *logits = sim_w16(&w_, it->p[2], N * Vp, 0);
    sim_cpu_math->xent_parallel(it->p[0], sim_w16(&w_, it->p[1], N * Vp, 1), logits, it->p[3], it->p[4], (int)tp, (int)N, (int)Vl,
                         (int)Vp, (int)lo, it->f);
    OP_END();
}
/* the tiled linears: every matrix is a strided slice, see sim_w16_rows; c in compute dtype (c16), or the
 * tiled forward's fp32 accumulator, used as it is (never rounded here) */
static void run_gemm_widened(sim_item *it, int c16) {
    OP_BEGIN(it);
    long M = it->i[0], N = it->i[1], K = it->i[2], lda = it->i[3], ldb = it->i[4], ldc = it->i[5], ta = it->i[6],
         tb = it->i[7];
    float *a = sim_w16_rows(&w_, it->p[1], ta ? K : M, ta ? M : K, lda, 0);
    float *b = sim_w16_rows(&w_, it->p[2], tb ? N : K, tb ? K : N, ldb, 0);
    float *c = c16 ? sim_w16_rows(&w_, it->p[0], M, N, ldc, 1) : it->p[0];
    sim_cpu_math->gemm(c, a, b, (int)M, (int)N, (int)K, (int)lda, (int)ldb, (int)ldc, (int)ta, (int)tb, it->f);
    OP_END();
}
static void run_gemm(sim_item *it) { run_gemm_widened(it, 1); }
static void run_gemm_f32(sim_item *it) { run_gemm_widened(it, 0); }
static void run_round_bias(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], OC = it->i[1], ld = it->i[2];
    sim_cpu_math->round_bias(sim_w16_rows(&w_, it->p[0], N, OC, ld, 1), it->p[1], sim_w16(&w_, it->p[2], OC, 0), (int)N, (int)OC,
                      (int)ld);
    OP_END();
}
static void run_add_bias(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], OC = it->i[1], ld = it->i[2];
    sim_cpu_math->add_bias(sim_w16_rows(&w_, it->p[1], N, OC, ld, 1), sim_w16(&w_, it->p[0], OC, 0), (int)N, (int)OC, (int)ld);
    OP_END();
}
static void run_bias_grad(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], OC = it->i[1], ld = it->i[2];
    sim_cpu_math->bias_grad(sim_w16(&w_, it->p[0], OC, 1), sim_w16_rows(&w_, it->p[1], N, OC, ld, 0), (int)N, (int)OC, (int)ld);
    OP_END();
}
static void run_adamw(sim_item *it) {
    zt_dtype dt = (zt_dtype)it->i[8];
    zt_cpu_adamw_g(it->p[0], it->p[1], it->p[2], it->p[3], dt, it->n, &it->step, it->p[4], dt, 0, ZT_ADAM_ISA_BEST);
}
static void run_sumsq(sim_item *it) {
    OP_BEGIN(it);
    it->result = sim_cpu_math->sumsq(sim_w16(&w_, it->p[0], it->n, 0), it->n);
    OP_END();
}

/* the virtual clock's price of an item (sim_clock.h): a GEMM [M,K] x [K,N] added to it */
static void gemm_cost(sim_item *it, zt_dtype dt, double M, double N, double K) {
    it->cost += sim_cost_gemm(dt, M, N, K);
    it->flops += 2.0 * M * N * K;
}
/* The entries. Shapes go to i[], pointers through sim_dev() with the extent the op reads or writes. */
/* fp32 <-> compute dtype: dst_bytes and src_bytes are the extents on each side */
static void q_convert(zt_dtype dt, sim_fn run, const char *op, void *dst, size_t dst_bytes, const void *src,
                      size_t src_bytes, size_t n) {
    sim_item *it = sim_op_item(run, dt, op);
    sim_operand(it, 0, AS_IS, dst, dst_bytes, op, "dst");
    sim_operand(it, 1, AS_IS, src, src_bytes, op, "src");
    it->n = n;
    it->cost = sim_cost_bytes((double)(dst_bytes + src_bytes));
    sim_enqueue(it);
}

/* The entries take the dtype from the table through a per-dtype thunk (SIM_THUNKS below); they are
 * written once against `dt`. */
static void q_embedding_forward(zt_dtype dt, void *out, const int *tokens, const void *wte, int lo, int hi,
                                const void *wpe, int B, int T, int C) {
    const char *op = "embedding_forward";
    sim_item *it = sim_op_item(run_embedding_forward, dt, "embedding_forward");
    size_t BT = (size_t)B * T;
    sim_operand(it, 0, OUT16, out, E(BT * C), op, "out");
    sim_operand(it, 1, AS_IS, tokens, BT * sizeof(int), op, "tokens");
    sim_operand(it, 2, IN16, wte, E((size_t)(hi - lo) * C), op, "wte");
    sim_operand(it, 3, IN16, wpe, E((size_t)T * C), op, "wpe");
    it->i[0] = lo, it->i[1] = hi, it->i[2] = B, it->i[3] = T, it->i[4] = C;
    it->cost = sim_cost_bytes(3.0 * E(BT * C));
    sim_enqueue(it);
}
static void q_embedding_backward(zt_dtype dt, void *dwte, int lo, int hi, void *dwpe, const void *dout,
                                 const int *tokens, int B, int T, int C) {
    const char *op = "embedding_backward";
    sim_item *it = sim_op_item(run_embedding_backward, dt, "embedding_backward");
    size_t BT = (size_t)B * T;
    sim_operand(it, 0, OUT16, dwte, E((size_t)(hi - lo) * C), op, "dwte");
    sim_operand(it, 1, OUT16, dwpe, E((size_t)T * C), op, "dwpe");
    sim_operand(it, 2, IN16, dout, E(BT * C), op, "dout");
    sim_operand(it, 3, AS_IS, tokens, BT * sizeof(int), op, "tokens");
    it->i[0] = lo, it->i[1] = hi, it->i[2] = B, it->i[3] = T, it->i[4] = C;
    it->cost = sim_cost_bytes(3.0 * E(BT * C) + (dwpe ? 2.0 * E((size_t)T * C) : 0));
    sim_enqueue(it);
}
static void q_layernorm_forward(zt_dtype dt, void *out, float *mean, float *rstd, const void *inp, const void *w,
                                const void *b, int N, int C) {
    const char *op = "layernorm_forward";
    sim_item *it = sim_op_item(run_layernorm_forward, dt, "layernorm_forward");
    size_t NC = (size_t)N * C;
    sim_operand(it, 0, OUT16, out, E(NC), op, "out");
    sim_operand(it, 1, AS_IS, mean, F(N), op, "mean");
    sim_operand(it, 2, AS_IS, rstd, F(N), op, "rstd");
    sim_operand(it, 3, IN16, inp, E(NC), op, "inp");
    sim_operand(it, 4, IN16, w, E(C), op, "w");
    sim_operand(it, 5, IN16, b, E(C), op, "b");
    it->i[0] = N, it->i[1] = C;
    it->cost = sim_cost_bytes(2.0 * E(NC));
    sim_enqueue(it);
}
static void q_layernorm_backward(zt_dtype dt, void *dinp, void *dw, void *db, const void *dout, const void *inp,
                                 const void *w, const float *mean, const float *rstd, int N, int C) {
    const char *op = "layernorm_backward";
    sim_item *it = sim_op_item(run_layernorm_backward, dt, "layernorm_backward");
    size_t NC = (size_t)N * C;
    sim_operand(it, 0, OUT16, dinp, E(NC), op, "dinp");
    sim_operand(it, 1, OUT16, dw, E(C), op, "dw");
    sim_operand(it, 2, OUT16, db, E(C), op, "db");
    sim_operand(it, 3, IN16, dout, E(NC), op, "dout");
    sim_operand(it, 4, IN16, inp, E(NC), op, "inp");
    sim_operand(it, 5, IN16, w, E(C), op, "w");
    sim_operand(it, 6, AS_IS, mean, F(N), op, "mean");
    sim_operand(it, 7, AS_IS, rstd, F(N), op, "rstd");
    it->i[0] = N, it->i[1] = C;
    it->cost = sim_cost_bytes(4.0 * E(NC));
    sim_enqueue(it);
}
static void q_matmul_forward(zt_dtype dt, void *out, const void *inp, const void *w, const void *bias, int N, int C,
                             int OC, int wt, int ld) {
    const char *op = "matmul_forward";
    sim_item *it = sim_op_item(run_matmul_forward, dt, "matmul_forward");
    sim_operand(it, 0, OUT16, out, E(sim_span(N, OC, ld)), op, "out");
    sim_operand(it, 1, IN16, inp, E((size_t)N * C), op, "inp");
    sim_operand(it, 2, IN16, w, E((size_t)C * OC), op, "w");
    sim_operand(it, 3, IN16, bias, E(OC), op, "bias");
    it->i[0] = N, it->i[1] = C, it->i[2] = OC, it->i[3] = wt, it->i[4] = ld;
    gemm_cost(it, dt, N, OC, C);
    sim_enqueue(it);
}
static void q_matmul_backward(zt_dtype dt, void *dinp, void *dw, void *dbias, const void *dout, const void *inp,
                              const void *w, int N, int C, int OC, int wt, int ld) {
    const char *op = "matmul_backward";
    sim_item *it = sim_op_item(run_matmul_backward, dt, "matmul_backward");
    sim_operand(it, 0, OUT16, dinp, E((size_t)N * C), op, "dinp");
    sim_operand(it, 1, OUT16, dw, E((size_t)C * OC), op, "dw");
    sim_operand(it, 2, OUT16, dbias, E(OC), op, "dbias");
    sim_operand(it, 3, IN16, dout, E((size_t)(N - 1) * ld + OC), op, "dout");
    sim_operand(it, 4, IN16, inp, E((size_t)N * C), op, "inp");
    sim_operand(it, 5, IN16, w, E((size_t)C * OC), op, "w");
    it->i[0] = N, it->i[1] = C, it->i[2] = OC, it->i[3] = wt, it->i[4] = ld;
    if (dinp) gemm_cost(it, dt, N, C, OC);
    /* dW in the orientation the math runs it: dW [OC, C] = dout^T inp when w is stored transposed
     * (the LM head's wte: the long dimension along C's rows, which a CPU's BLAS runs at its own rate) */
    if (wt) gemm_cost(it, dt, OC, C, N);
    else gemm_cost(it, dt, C, OC, N);
    if (dbias) it->cost += sim_cost_bytes(E((size_t)N * OC));
    sim_enqueue(it);
}
static void q_matmul_forward_gelu(zt_dtype dt, void *out, void *pre, const void *inp, const void *w, const void *bias,
                                  int N, int C, int OC) {
    const char *op = "matmul_forward_gelu";
    sim_item *it = sim_op_item(run_matmul_forward_gelu, dt, "matmul_forward_gelu");
    sim_operand(it, 0, OUT16, out, E((size_t)N * OC), op, "out");
    sim_operand(it, 1, OUT16, pre, E((size_t)N * OC), op, "pre");
    sim_operand(it, 2, IN16, inp, E((size_t)N * C), op, "inp");
    sim_operand(it, 3, IN16, w, E((size_t)C * OC), op, "w");
    sim_operand(it, 4, IN16, bias, E(OC), op, "bias");
    it->i[0] = N, it->i[1] = C, it->i[2] = OC;
    gemm_cost(it, dt, N, OC, C);
    it->cost += sim_cost_bytes(E((size_t)N * OC)); /* the epilogue writes pre as well */
    sim_enqueue(it);
}
static void q_matmul_backward_dgelu(zt_dtype dt, void *dinp, void *dw, void *dbias, const void *dout, const void *inp,
                                    const void *w, const void *gelu_pre, int N, int C, int OC) {
    const char *op = "matmul_backward_dgelu";
    sim_item *it = sim_op_item(run_matmul_backward_dgelu, dt, "matmul_backward_dgelu");
    sim_operand(it, 0, OUT16, dinp, E((size_t)N * C), op, "dinp");
    sim_operand(it, 1, OUT16, dw, E((size_t)C * OC), op, "dw");
    sim_operand(it, 2, OUT16, dbias, E(OC), op, "dbias");
    sim_operand(it, 3, IN16, dout, E((size_t)N * OC), op, "dout");
    sim_operand(it, 4, IN16, inp, E((size_t)N * C), op, "inp");
    sim_operand(it, 5, IN16, w, E((size_t)C * OC), op, "w");
    sim_operand(it, 6, IN16, gelu_pre, E((size_t)N * C), op, "gelu_pre");
    it->i[0] = N, it->i[1] = C, it->i[2] = OC;
    gemm_cost(it, dt, N, C, OC);
    gemm_cost(it, dt, C, OC, N);
    it->cost += sim_cost_bytes(2.0 * E((size_t)N * C) + (dbias ? E((size_t)N * OC) : 0));
    sim_enqueue(it);
}
static void q_attention_forward(zt_dtype dt, void *out, void *att, const void *qkv, int B, int T, int C, int NH) {
    const char *op = "attention_forward";
    sim_item *it = sim_op_item(run_attention_forward, dt, "attention_forward");
    sim_operand(it, 0, OUT16, out, E((size_t)B * T * C), op, "out");
    sim_operand(it, 1, AS_IS, att, E((size_t)B * NH * T * T), op, "att");
    sim_operand(it, 2, IN16, qkv, E((size_t)B * T * 3 * C), op, "qkv");
    it->i[0] = B, it->i[1] = T, it->i[2] = C, it->i[3] = NH;
    sim_attention_cost(it, dt, B, T, C, 1.0);
    sim_enqueue(it);
}
static void q_attention_backward(zt_dtype dt, void *dqkv, void *datt, const void *dout, const void *qkv,
                                 const void *att, int B, int T, int C, int NH) {
    const char *op = "attention_backward";
    sim_item *it = sim_op_item(run_attention_backward, dt, "attention_backward");
    sim_operand(it, 0, OUT16, dqkv, E((size_t)B * T * 3 * C), op, "dqkv");
    sim_operand(it, 1, AS_IS, datt, E((size_t)B * NH * T * T), op, "datt");
    sim_operand(it, 2, IN16, dout, E((size_t)B * T * C), op, "dout");
    sim_operand(it, 3, IN16, qkv, E((size_t)B * T * 3 * C), op, "qkv");
    sim_operand(it, 4, AS_IS, att, E((size_t)B * NH * T * T), op, "att");
    it->i[0] = B, it->i[1] = T, it->i[2] = C, it->i[3] = NH;
    sim_attention_cost(it, dt, B, T, C, 2.5);
    sim_enqueue(it);
}
/* pointwise ops over n elements with up to three tensors */
static void q_pointwise(zt_dtype dt, sim_fn run, const char *op, const void *a, const void *b, const void *c, size_t n,
                        float f) {
    sim_item *it = sim_op_item(run, dt, op);
    sim_operand(it, 0, OUT16, a, E(n), op, "arg 1");
    sim_operand(it, 1, IN16, b, E(n), op, "arg 2");
    sim_operand(it, 2, IN16, c, E(n), op, "arg 3");
    it->n = n;
    it->f = f;
    it->cost = sim_cost_bytes((double)E(n) * ((a != NULL) + (b != NULL) + (c != NULL) + 1));
    sim_enqueue(it);
}
static void q_softmax_xent(zt_dtype dt, float *losses, void *dlogits, const void *logits, const int *targets, int N,
                           int V, int Vp, float dloss) {
    const char *op = "softmax_xent";
    sim_item *it = sim_op_item(run_softmax_xent, dt, "softmax_xent");
    sim_operand(it, 0, AS_IS, losses, F(N), op, "losses");
    sim_operand(it, 1, OUT16, dlogits, E((size_t)N * Vp), op, "dlogits");
    sim_operand(it, 2, IN16, logits, E((size_t)N * Vp), op, "logits");
    sim_operand(it, 3, AS_IS, targets, (size_t)N * sizeof(int), op, "targets");
    it->i[0] = N, it->i[1] = V, it->i[2] = Vp;
    it->f = dloss;
    it->cost = sim_cost_xent(2.0 * E((size_t)N * Vp));
    sim_enqueue(it);
}
static void q_xent_partial(zt_dtype dt, float *stats, const void *logits, const int *targets, int N, int Vl, int Vp,
                           int vocab_lo) {
    const char *op = "xent_partial";
    sim_item *it = sim_op_item(run_xent_partial, dt, "xent_partial");
    sim_operand(it, 0, AS_IS, stats, F(3 * (size_t)N), op, "stats");
    sim_operand(it, 1, IN16, logits, E((size_t)N * Vp), op, "logits");
    sim_operand(it, 2, AS_IS, targets, (size_t)N * sizeof(int), op, "targets");
    it->i[0] = N, it->i[1] = Vl, it->i[2] = Vp, it->i[3] = vocab_lo;
    it->cost = sim_cost_xent((double)E((size_t)N * Vp));
    sim_enqueue(it);
}
static void q_xent_parallel(zt_dtype dt, float *losses, void *dlogits, const void *logits, const int *targets,
                            const float *stats_all, int tp, int N, int Vl, int Vp, int vocab_lo, float dloss) {
    const char *op = "xent_parallel";
    sim_item *it = sim_op_item(run_xent_parallel, dt, "xent_parallel");
    sim_operand(it, 0, AS_IS, losses, F(N), op, "losses");
    sim_operand(it, 1, OUT16, dlogits, E((size_t)N * Vp), op, "dlogits");
    sim_operand(it, 2, IN16, logits, E((size_t)N * Vp), op, "logits");
    sim_operand(it, 3, AS_IS, targets, (size_t)N * sizeof(int), op, "targets");
    sim_operand(it, 4, AS_IS, stats_all, F(3 * (size_t)tp * N), op, "stats_all");
    it->i[0] = tp, it->i[1] = N, it->i[2] = Vl, it->i[3] = Vp, it->i[4] = vocab_lo;
    it->f = dloss;
    it->cost = sim_cost_xent(2.0 * E((size_t)N * Vp));
    sim_enqueue(it);
}
/* gemm and gemm_f32: C = op(A) op(B) (+ beta C), C in compute dtype or fp32 (c_elem bytes) */
static void q_gemm_into(sim_fn run, const char *op, zt_dtype dt, void *c, size_t c_elem, const void *a, const void *b,
                        int M, int N, int K, int lda, int ldb, int ldc, int ta, int tb, float beta) {
    sim_item *it = sim_op_item(run, dt, op);
    sim_operand(it, 0, c_elem == sizeof(float) ? AS_IS : OUT16, c, c_elem * sim_span(M, N, ldc), op, "c");
    sim_operand(it, 1, IN16, a, E(ta ? sim_span(K, M, lda) : sim_span(M, K, lda)), op, "a");
    sim_operand(it, 2, IN16, b, E(tb ? sim_span(N, K, ldb) : sim_span(K, N, ldb)), op, "b");
    it->i[0] = M, it->i[1] = N, it->i[2] = K, it->i[3] = lda, it->i[4] = ldb, it->i[5] = ldc, it->i[6] = ta,
    it->i[7] = tb;
    it->f = beta;
    gemm_cost(it, dt, M, N, K);
    sim_enqueue(it);
}
static void q_gemm(zt_dtype dt, void *c, const void *a, const void *b, int M, int N, int K, int lda, int ldb, int ldc,
                   int ta, int tb, float beta) {
    q_gemm_into(run_gemm, "gemm", dt, c, zt_dtype_size(dt), a, b, M, N, K, lda, ldb, ldc, ta, tb, beta);
}
static void q_gemm_f32(zt_dtype dt, float *c, const void *a, const void *b, int M, int N, int K, int lda, int ldb,
                       int ldc, int ta, int tb, float beta) {
    q_gemm_into(run_gemm_f32, "gemm_f32", dt, c, sizeof(float), a, b, M, N, K, lda, ldb, ldc, ta, tb, beta);
}
static void q_round_bias(zt_dtype dt, void *out, const float *acc, const void *bias, int N, int OC, int ld) {
    const char *op = "round_bias";
    sim_item *it = sim_op_item(run_round_bias, dt, op);
    sim_operand(it, 0, OUT16, out, E(sim_span(N, OC, ld)), op, "out");
    sim_operand(it, 1, AS_IS, acc, F((size_t)N * OC), op, "acc");
    sim_operand(it, 2, IN16, bias, E(OC), op, "bias");
    it->i[0] = N, it->i[1] = OC, it->i[2] = ld;
    it->cost = sim_cost_bytes((double)N * OC * 4.0 + E(sim_span(N, OC, ld))); /* the fp32 sums in, the output out */
    sim_enqueue(it);
}
/* add_bias and bias_grad: the same shapes, a bias [OC] (p[0]) and a strided [N, OC] slice (p[1]) */
static void q_bias(zt_dtype dt, sim_fn run, const char *op, const void *bias, const void *rows, int N, int OC, int ld,
                   const char *bias_arg, const char *rows_arg) {
    sim_item *it = sim_op_item(run, dt, op);
    sim_operand(it, 0, run == run_bias_grad ? OUT16 : IN16, bias, E(OC), op, bias_arg);
    sim_operand(it, 1, run == run_add_bias ? OUT16 : IN16, rows, E(sim_span(N, OC, ld)), op, rows_arg);
    it->i[0] = N, it->i[1] = OC, it->i[2] = ld;
    it->cost = sim_cost_bytes(2.0 * E(sim_span(N, OC, ld)));
    sim_enqueue(it);
}
static void q_adamw(zt_dtype dt, float *master, float *m, float *v, const void *grad, void *params_out, size_t n,
                    const zt_adam_step *step) {
    const char *op = "adamw";
    sim_item *it = sim_op_item(run_adamw, dt, "adamw");
    sim_operand(it, 0, AS_IS, master, F(n), op, "master");
    sim_operand(it, 1, AS_IS, m, F(n), op, "m");
    sim_operand(it, 2, AS_IS, v, F(n), op, "v");
    sim_operand(it, 3, AS_IS, grad, E(n), op, "grad");
    sim_operand(it, 4, AS_IS, params_out, E(n), op, "params_out");
    it->n = n;
    it->step = *step;
    it->cost = sim_cost_bytes((double)n * (24 + 2 * zt_dtype_size(dt))); /* read and write master, m, v; grad in, params out */
    sim_enqueue(it);
}
static double q_sumsq(zt_dtype dt, const void *x, size_t n) {
    sim_item *it = sim_op_item(run_sumsq, dt, "sumsq");
    sim_operand(it, 0, IN16, x, E(n), "sumsq", "x");
    it->n = n;
    it->cost = sim_cost_bytes((double)E(n));
    sim_stream_run_and_wait(it); /* returns a host value: waits for the stream, as the CUDA sumsq */
    double r = it->result;
    free(it);
    return r;
}

/* per-dtype thunks: the table entries have no dtype argument */
#define SIM_THUNKS(SFX, DTYPE)                                                                                         \
    static void to_compute_##SFX(void *d, const float *s, size_t n) {                                                  \
        q_convert(DTYPE, run_to_compute, "to_compute", d, n * zt_dtype_size(DTYPE), s, n * sizeof(float), n);          \
    }                                                                                                                  \
    static void to_f32_##SFX(float *d, const void *s, size_t n) {                                                      \
        q_convert(DTYPE, run_to_f32, "to_f32", d, n * sizeof(float), s, n * zt_dtype_size(DTYPE), n);                  \
    }                                                                                                                  \
    static void embedding_forward_##SFX(void *o, const int *t, const void *w, int lo, int hi, const void *p, int B,    \
                                        int T, int C) { q_embedding_forward(DTYPE, o, t, w, lo, hi, p, B, T, C); }    \
    static void embedding_backward_##SFX(void *dw, int lo, int hi, void *dp, const void *d, const int *t, int B,       \
                                         int T, int C) { q_embedding_backward(DTYPE, dw, lo, hi, dp, d, t, B, T, C); } \
    static void layernorm_forward_##SFX(void *o, float *m, float *r, const void *i, const void *w, const void *b,      \
                                        int N, int C) { q_layernorm_forward(DTYPE, o, m, r, i, w, b, N, C); }         \
    static void layernorm_backward_##SFX(void *di, void *dw, void *db, const void *d, const void *i, const void *w,    \
                                         const float *m, const float *r, int N, int C) {                              \
        q_layernorm_backward(DTYPE, di, dw, db, d, i, w, m, r, N, C);                                                  \
    }                                                                                                                  \
    static void matmul_forward_##SFX(void *o, const void *i, const void *w, const void *b, int N, int C, int OC,       \
                                     int wt, int ld) { q_matmul_forward(DTYPE, o, i, w, b, N, C, OC, wt, ld); }       \
    static void matmul_backward_##SFX(void *di, void *dw, void *db, const void *d, const void *i, const void *w,       \
                                      int N, int C, int OC, int wt, int ld) {                                         \
        q_matmul_backward(DTYPE, di, dw, db, d, i, w, N, C, OC, wt, ld);                                               \
    }                                                                                                                  \
    static void matmul_forward_gelu_##SFX(void *o, void *p, const void *i, const void *w, const void *b, int N, int C, \
                                          int OC) { q_matmul_forward_gelu(DTYPE, o, p, i, w, b, N, C, OC); }          \
    static void matmul_backward_dgelu_##SFX(void *di, void *dw, void *db, const void *d, const void *i, const void *w, \
                                            const void *g, int N, int C, int OC) {                                    \
        q_matmul_backward_dgelu(DTYPE, di, dw, db, d, i, w, g, N, C, OC);                                              \
    }                                                                                                                  \
    static void attention_forward_##SFX(void *o, void *a, const void *q, int B, int T, int C, int NH) {                \
        q_attention_forward(DTYPE, o, a, q, B, T, C, NH);                                                              \
    }                                                                                                                  \
    static void attention_backward_##SFX(void *dq, void *da, const void *d, const void *q, const void *a, int B,       \
                                         int T, int C, int NH) { q_attention_backward(DTYPE, dq, da, d, q, a, B, T, C, NH); } \
    static void attention_gqa_forward_##SFX(void *o, void *a, const void *q, int B, int T, int NH, int NKV, int HD) {  \
        sim_q_attention_gqa_forward(DTYPE, o, a, q, B, T, NH, NKV, HD);                                                \
    }                                                                                                                  \
    static void attention_gqa_backward_##SFX(void *dq, void *da, const void *d, const void *q, const void *a, int B,   \
                                             int T, int NH, int NKV, int HD) {                                         \
        sim_q_attention_gqa_backward(DTYPE, dq, da, d, q, a, B, T, NH, NKV, HD);                                       \
    }                                                                                                                  \
    static void rmsnorm_forward_##SFX(void *o, float *r, const void *i, const void *w, float eps, int N, int C) {      \
        sim_q_rmsnorm_forward(DTYPE, o, r, i, w, eps, N, C);                                                           \
    }                                                                                                                  \
    static void rmsnorm_backward_##SFX(void *di, void *dw, const void *d, const void *i, const void *w,                \
                                       const float *r, int N, int C) {                                                 \
        sim_q_rmsnorm_backward(DTYPE, di, dw, d, i, w, r, N, C);                                                       \
    }                                                                                                                  \
    static void rope_##SFX(void *q, const float *cs, int B, int T, int NH, int NKV, int HD, int inv) {                 \
        sim_q_rope(DTYPE, q, cs, B, T, NH, NKV, HD, inv);                                                              \
    }                                                                                                                  \
    static void swiglu_forward_##SFX(void *o, const void *i, int N, int n) { sim_q_swiglu_forward(DTYPE, o, i, N, n); }\
    static void swiglu_backward_##SFX(void *di, const void *i, const void *d, int N, int n) {                          \
        sim_q_swiglu_backward(DTYPE, di, i, d, N, n);                                                                  \
    }                                                                                                                  \
    static void gelu_forward_##SFX(void *o, const void *i, size_t n) {                                                 \
        q_pointwise(DTYPE, run_gelu_forward, "gelu_forward", o, i, NULL, n, 0);                                        \
    }                                                                                                                  \
    static void gelu_backward_##SFX(void *di, const void *i, const void *d, size_t n) {                                \
        q_pointwise(DTYPE, run_gelu_backward, "gelu_backward", di, i, d, n, 0);                                        \
    }                                                                                                                  \
    static void residual_forward_##SFX(void *o, const void *a, const void *b, size_t n) {                              \
        q_pointwise(DTYPE, run_residual_forward, "residual_forward", o, a, b, n, 0);                                   \
    }                                                                                                                  \
    static void accumulate_##SFX(void *d, const void *s, size_t n) {                                                   \
        q_pointwise(DTYPE, run_accumulate, "accumulate", d, s, NULL, n, 0);                                            \
    }                                                                                                                  \
    static void scale_##SFX(void *x, float s, size_t n) { q_pointwise(DTYPE, run_scale, "scale", x, NULL, NULL, n, s); } \
    static void softmax_xent_##SFX(float *l, void *dl, const void *lg, const int *t, int N, int V, int Vp, float d) {  \
        q_softmax_xent(DTYPE, l, dl, lg, t, N, V, Vp, d);                                                              \
    }                                                                                                                  \
    static void xent_partial_##SFX(float *st, const void *lg, const int *t, int N, int Vl, int Vp, int lo) {          \
        q_xent_partial(DTYPE, st, lg, t, N, Vl, Vp, lo);                                                               \
    }                                                                                                                  \
    static void xent_parallel_##SFX(float *l, void *dl, const void *lg, const int *t, const float *st, int tp, int N,  \
                                    int Vl, int Vp, int lo, float d) {                                                \
        q_xent_parallel(DTYPE, l, dl, lg, t, st, tp, N, Vl, Vp, lo, d);                                                \
    }                                                                                                                  \
    static void adamw_##SFX(float *p, float *m, float *v, const void *g, void *o, size_t n, const zt_adam_step *s) {   \
        q_adamw(DTYPE, p, m, v, g, o, n, s);                                                                           \
    }                                                                                                                  \
    static void gemm_##SFX(void *c, const void *a, const void *b, int M, int N, int K, int lda, int ldb, int ldc,     \
                           int ta, int tb, float beta) { q_gemm(DTYPE, c, a, b, M, N, K, lda, ldb, ldc, ta, tb, beta); } \
    static void add_bias_##SFX(void *o, const void *b, int N, int OC, int ld) {                                        \
        q_bias(DTYPE, run_add_bias, "add_bias", b, o, N, OC, ld, "bias", "out");                                       \
    }                                                                                                                  \
    static void bias_grad_##SFX(void *db, const void *d, int N, int OC, int ld) {                                      \
        q_bias(DTYPE, run_bias_grad, "bias_grad", db, d, N, OC, ld, "dbias", "dout");                                  \
    }                                                                                                                  \
    static void gemm_f32_##SFX(float *c, const void *a, const void *b, int M, int N, int K, int lda, int ldb, int ldc, \
                               int ta, int tb, float beta) {                                                         \
        q_gemm_f32(DTYPE, c, a, b, M, N, K, lda, ldb, ldc, ta, tb, beta);                                              \
    }                                                                                                                  \
    static void round_bias_##SFX(void *o, const float *acc, const void *b, int N, int OC, int ld) {                    \
        q_round_bias(DTYPE, o, acc, b, N, OC, ld);                                                                     \
    }                                                                                                                  \
    static double sumsq_##SFX(const void *x, size_t n) { return q_sumsq(DTYPE, x, n); }                                \
    static zt_backend sim_##SFX = { /* device, device_count: set by zt_backend_sim */                                \
        .name = "sim", .compute_dtype = DTYPE, .memory_is_host = 0,                                                    \
        .alloc = sim_alloc, .free = sim_free, .host_alloc = sim_host_alloc, .host_free = sim_host_free,                \
        .memset_zero = sim_memset_zero, .copy = sim_copy, .copy_async = sim_copy_async,                                 \
        .copy_ahead = sim_copy_ahead, .wait_ahead = sim_wait_ahead,                                                    \
        .transfer = sim_transfer, .mark = sim_mark, .wait_mark = sim_wait_mark,                                        \
        .synchronize = sim_synchronize, .bind_thread = sim_bind_thread,                                                \
        .mem_info = sim_mem_info, .to_compute = to_compute_##SFX, .to_f32 = to_f32_##SFX,                              \
        .embedding_forward = embedding_forward_##SFX, .embedding_backward = embedding_backward_##SFX,                  \
        .layernorm_forward = layernorm_forward_##SFX, .layernorm_backward = layernorm_backward_##SFX,                  \
        .matmul_forward = matmul_forward_##SFX, .matmul_backward = matmul_backward_##SFX,                              \
        .matmul_forward_gelu = matmul_forward_gelu_##SFX, .matmul_backward_dgelu = matmul_backward_dgelu_##SFX,        \
        .attention_forward = attention_forward_##SFX, .attention_backward = attention_backward_##SFX,                  \
        .attention_gqa_forward = attention_gqa_forward_##SFX, .attention_gqa_backward = attention_gqa_backward_##SFX,  \
        .rmsnorm_forward = rmsnorm_forward_##SFX, .rmsnorm_backward = rmsnorm_backward_##SFX, .rope = rope_##SFX,      \
        .swiglu_forward = swiglu_forward_##SFX, .swiglu_backward = swiglu_backward_##SFX,                              \
        .gelu_forward = gelu_forward_##SFX, .gelu_backward = gelu_backward_##SFX,                                      \
        .residual_forward = residual_forward_##SFX, .accumulate = accumulate_##SFX,                                    \
        .softmax_xent = softmax_xent_##SFX, .xent_partial = xent_partial_##SFX, .xent_parallel = xent_parallel_##SFX,  \
        .gemm = gemm_##SFX, .add_bias = add_bias_##SFX, .bias_grad = bias_grad_##SFX,                                  \
        .gemm_f32 = gemm_f32_##SFX, .round_bias = round_bias_##SFX,                                                    \
        .adamw = adamw_##SFX, .sumsq = sumsq_##SFX, .scale = scale_##SFX,                                              \
    };
SIM_THUNKS(bf16, ZT_BF16)
SIM_THUNKS(f16, ZT_F16)

static pthread_once_t g_ops_once = PTHREAD_ONCE_INIT;
static void sim_ops_start(void) { sim_cpu_math = zt_backend_cpu(); }

/* The backend: the device opened (backend_sim.c), then the op table of the dtype on it */
const zt_backend *zt_backend_sim(zt_dtype dtype, const char **why) {
    int device = 0, device_count = 0;
    const char *fault = sim_device_open(&device, &device_count);
    if (why) *why = fault;
    if (fault) return NULL;
    pthread_once(&g_ops_once, sim_ops_start);
    zt_backend *table = dtype == ZT_F16 ? &sim_f16 : &sim_bf16;
    table->device = device;
    table->device_count = device_count;
    return table;
}
