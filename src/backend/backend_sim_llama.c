/* backend_sim_llama.c — the simulated GPU's ops for the Llama family: grouped-query attention, RMSNorm,
 * the rotary embedding, SwiGLU. As backend_sim_ops.c's (which puts these entries in its tables): each
 * entry checks and translates its pointers on the caller's thread, prices the item on the virtual
 * clock and queues it; run on the stream, the item widens its 16-bit operands to fp32 (sim_operands.c),
 * calls the CPU backend's fp32 op and rounds what it wrote back to bf16 or fp16. Prices: attention's
 * FLOPs as GPT-2's attention with NH heads of HD (the key/value heads' count changes the bytes, not the
 * FLOPs); the rest by the bytes they move, as LayerNorm and the element-wise ops. */
#include <stdlib.h>

#include "backend/sim_clock.h"
#include "backend/sim_internal.h"
#include "util/util.h"

/* ------------------------------------------------------------------ runs (on the stream) */

/* As GPT-2's attention here: att keeps nothing, backward recomputes the probabilities from qkv in fp32
 * (the CPU forward gives them bit for bit) */
static void run_attention_gqa_forward(sim_item *it) {
    OP_BEGIN(it);
    long B = it->i[0], T = it->i[1], NH = it->i[2], NKV = it->i[3], HD = it->i[4], W = (NH + 2 * NKV) * HD;
    float *att = zt_xmalloc(F(B * NH * T * T));
    sim_cpu_math->attention_gqa_forward(sim_w16(&w_, it->p[0], B * T * NH * HD, 1), att,
                                        sim_w16(&w_, it->p[2], B * T * W, 0), (int)B, (int)T, (int)NH, (int)NKV,
                                        (int)HD);
    free(att);
    OP_END();
}
static void run_attention_gqa_backward(sim_item *it) {
    OP_BEGIN(it);
    long B = it->i[0], T = it->i[1], NH = it->i[2], NKV = it->i[3], HD = it->i[4], W = (NH + 2 * NKV) * HD;
    float *att = zt_xmalloc(F(B * NH * T * T)), *datt = zt_xmalloc(F(B * NH * T * T)),
          *out = zt_xmalloc(F(B * T * NH * HD));
    float *qkv = sim_w16(&w_, it->p[3], B * T * W, 0);
    sim_cpu_math->attention_gqa_forward(out, att, qkv, (int)B, (int)T, (int)NH, (int)NKV, (int)HD);
    sim_cpu_math->attention_gqa_backward(sim_w16(&w_, it->p[0], B * T * W, 1), datt,
                                         sim_w16(&w_, it->p[2], B * T * NH * HD, 0), qkv, att, (int)B, (int)T,
                                         (int)NH, (int)NKV, (int)HD);
    free(att);
    free(datt);
    free(out);
    OP_END();
}
static void run_rmsnorm_forward(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], C = it->i[1];
    sim_cpu_math->rmsnorm_forward(sim_w16(&w_, it->p[0], N * C, 1), it->p[1], sim_w16(&w_, it->p[2], N * C, 0),
                                  sim_w16(&w_, it->p[3], C, 0), it->f, (int)N, (int)C);
    OP_END();
}
static void run_rmsnorm_backward(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], C = it->i[1];
    sim_cpu_math->rmsnorm_backward(sim_w16(&w_, it->p[0], N * C, 1), sim_w16(&w_, it->p[1], C, 1),
                                   sim_w16(&w_, it->p[2], N * C, 0), sim_w16(&w_, it->p[3], N * C, 0),
                                   sim_w16(&w_, it->p[4], C, 0), it->p[5], (int)N, (int)C);
    OP_END();
}
/* the whole qkv is widened and rounded back: the value heads come back as they were (a 16-bit value
 * widened and rounded is itself) */
static void run_rope(sim_item *it) {
    OP_BEGIN(it);
    long B = it->i[0], T = it->i[1], NH = it->i[2], NKV = it->i[3], HD = it->i[4], inverse = it->i[5];
    sim_cpu_math->rope(sim_w16(&w_, it->p[0], B * T * (NH + 2 * NKV) * HD, 1), it->p[1], (int)B, (int)T, (int)NH,
                       (int)NKV, (int)HD, (int)inverse);
    OP_END();
}
static void run_swiglu_forward(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], inter = it->i[1];
    sim_cpu_math->swiglu_forward(sim_w16(&w_, it->p[0], N * inter, 1), sim_w16(&w_, it->p[1], N * 2 * inter, 0), (int)N,
                                 (int)inter);
    OP_END();
}
static void run_swiglu_backward(sim_item *it) {
    OP_BEGIN(it);
    long N = it->i[0], inter = it->i[1];
    sim_cpu_math->swiglu_backward(sim_w16(&w_, it->p[0], N * 2 * inter, 1), sim_w16(&w_, it->p[1], N * 2 * inter, 0),
                                  sim_w16(&w_, it->p[2], N * inter, 0), (int)N, (int)inter);
    OP_END();
}

/* ------------------------------------------------------------------ entries (on the caller's thread) */

void sim_q_attention_gqa_forward(zt_dtype dt, void *out, void *att, const void *qkv, int B, int T, int NH, int NKV,
                                 int HD) {
    const char *op = "attention_gqa_forward";
    sim_item *it = sim_op_item(run_attention_gqa_forward, dt, op);
    size_t BT = (size_t)B * T;
    sim_operand(it, 0, OUT16, out, E(BT * NH * HD), op, "out");
    sim_operand(it, 1, AS_IS, att, E((size_t)B * NH * T * T), op, "att");
    sim_operand(it, 2, IN16, qkv, E(BT * (NH + 2 * NKV) * HD), op, "qkv");
    it->i[0] = B, it->i[1] = T, it->i[2] = NH, it->i[3] = NKV, it->i[4] = HD;
    sim_attention_cost(it, dt, B, T, (double)NH * HD, 1.0);
    sim_enqueue(it);
}
void sim_q_attention_gqa_backward(zt_dtype dt, void *dqkv, void *datt, const void *dout, const void *qkv,
                                  const void *att, int B, int T, int NH, int NKV, int HD) {
    const char *op = "attention_gqa_backward";
    sim_item *it = sim_op_item(run_attention_gqa_backward, dt, op);
    size_t BT = (size_t)B * T, W = (size_t)(NH + 2 * NKV) * HD;
    sim_operand(it, 0, OUT16, dqkv, E(BT * W), op, "dqkv");
    sim_operand(it, 1, AS_IS, datt, E((size_t)B * NH * T * T), op, "datt");
    sim_operand(it, 2, IN16, dout, E(BT * NH * HD), op, "dout");
    sim_operand(it, 3, IN16, qkv, E(BT * W), op, "qkv");
    sim_operand(it, 4, AS_IS, att, E((size_t)B * NH * T * T), op, "att");
    it->i[0] = B, it->i[1] = T, it->i[2] = NH, it->i[3] = NKV, it->i[4] = HD;
    sim_attention_cost(it, dt, B, T, (double)NH * HD, 2.5);
    sim_enqueue(it);
}
void sim_q_rmsnorm_forward(zt_dtype dt, void *out, float *rstd, const void *inp, const void *w, float eps, int N,
                           int C) {
    const char *op = "rmsnorm_forward";
    sim_item *it = sim_op_item(run_rmsnorm_forward, dt, op);
    size_t NC = (size_t)N * C;
    sim_operand(it, 0, OUT16, out, E(NC), op, "out");
    sim_operand(it, 1, AS_IS, rstd, F(N), op, "rstd");
    sim_operand(it, 2, IN16, inp, E(NC), op, "inp");
    sim_operand(it, 3, IN16, w, E(C), op, "w");
    it->i[0] = N, it->i[1] = C;
    it->f = eps;
    it->cost = sim_cost_bytes(2.0 * E(NC)); /* inp in, out out: layernorm_forward's */
    sim_enqueue(it);
}
void sim_q_rmsnorm_backward(zt_dtype dt, void *dinp, void *dw, const void *dout, const void *inp, const void *w,
                            const float *rstd, int N, int C) {
    const char *op = "rmsnorm_backward";
    sim_item *it = sim_op_item(run_rmsnorm_backward, dt, op);
    size_t NC = (size_t)N * C;
    sim_operand(it, 0, OUT16, dinp, E(NC), op, "dinp");
    sim_operand(it, 1, OUT16, dw, E(C), op, "dw");
    sim_operand(it, 2, IN16, dout, E(NC), op, "dout");
    sim_operand(it, 3, IN16, inp, E(NC), op, "inp");
    sim_operand(it, 4, IN16, w, E(C), op, "w");
    sim_operand(it, 5, AS_IS, rstd, F(N), op, "rstd");
    it->i[0] = N, it->i[1] = C;
    it->cost = sim_cost_bytes(4.0 * E(NC)); /* dout, inp in, dinp read and written: layernorm_backward's */
    sim_enqueue(it);
}
void sim_q_rope(zt_dtype dt, void *qkv, const float *cos_sin, int B, int T, int NH, int NKV, int HD, int inverse) {
    const char *op = "rope";
    sim_item *it = sim_op_item(run_rope, dt, op);
    size_t BT = (size_t)B * T;
    sim_operand(it, 0, OUT16, qkv, E(BT * (NH + 2 * NKV) * HD), op, "qkv");
    sim_operand(it, 1, AS_IS, cos_sin, F((size_t)T * HD), op, "cos_sin");
    it->i[0] = B, it->i[1] = T, it->i[2] = NH, it->i[3] = NKV, it->i[4] = HD, it->i[5] = inverse;
    /* the q and k heads read and written, the table read */
    it->cost = sim_cost_bytes(2.0 * E(BT * (NH + NKV) * HD) + F((size_t)T * HD));
    sim_enqueue(it);
}
void sim_q_swiglu_forward(zt_dtype dt, void *out, const void *inp, int N, int inter) {
    const char *op = "swiglu_forward";
    sim_item *it = sim_op_item(run_swiglu_forward, dt, op);
    size_t NI = (size_t)N * inter;
    sim_operand(it, 0, OUT16, out, E(NI), op, "out");
    sim_operand(it, 1, IN16, inp, E(2 * NI), op, "inp");
    it->i[0] = N, it->i[1] = inter;
    it->cost = sim_cost_bytes(3.0 * E(NI)); /* gate and up in, out out */
    sim_enqueue(it);
}
void sim_q_swiglu_backward(zt_dtype dt, void *dinp, const void *inp, const void *dout, int N, int inter) {
    const char *op = "swiglu_backward";
    sim_item *it = sim_op_item(run_swiglu_backward, dt, op);
    size_t NI = (size_t)N * inter;
    sim_operand(it, 0, OUT16, dinp, E(2 * NI), op, "dinp");
    sim_operand(it, 1, IN16, inp, E(2 * NI), op, "inp");
    sim_operand(it, 2, IN16, dout, E(NI), op, "dout");
    it->i[0] = N, it->i[1] = inter;
    it->cost = sim_cost_bytes(5.0 * E(NI)); /* gate, up and dout in, dgate and dup out */
    sim_enqueue(it);
}
