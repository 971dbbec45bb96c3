/* gpt2_internal.h — private to the model (gpt2.c, gpt2_params.c): the order of one block's tensors
 * in the parameter table, which the table lays out (gpt2_params.c) and forward and backward read
 * (gpt2.c), and the activation buffers' layout forward and backward share. A block's first tensor is
 * table entry block_first + block_size * layer (zt_block_params). */
#ifndef ZT_GPT2_INTERNAL_H
#define ZT_GPT2_INTERNAL_H

#include "model/gpt2.h"

/* The parts of one block. GPT-2's tensors are these, in this order. A Llama-family block has the same
 * parts under Hugging Face's names (table->block_role says where each is in the block, -1 absent):
 * P_LN1W input_layernorm, P_QKVW q_proj's weight followed at once by k_proj's and v_proj's (so the
 * three are one [(NH + 2 NKV) HD, C] weight), P_QKVB their biases likewise, P_PROJW/B o_proj, P_LN2W
 * post_attention_layernorm, P_FCW gate_proj's weight followed by up_proj's (one [2 I, C] weight, gate
 * then up), P_FCB their biases, P_FCPROJW/B down_proj; no norm biases. */
enum {
    P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_PROJW, P_PROJB, P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB,
    P_PER_BLOCK
};
enum { ZT_MAX_BLOCK_TENSORS = 16 }; /* a Llama block with every bias */
_Static_assert(P_PER_BLOCK == ZT_BLOCK_ROLES, "gpt2.h sizes the role map");

/* block `layer`'s first tensor in the table */
static inline const zt_param_info *zt_block_params(const zt_param_table *t, int layer) {
    return &t->params[t->block_first + t->block_size * layer];
}

/* the rows of block linear `role`'s weight as one GEMM sees it, in the table's layout: the Llama family
 * (rotary: no wpe) holds q|k|v and gate|up as one weight of their tensors' rows together */
static inline int zt_linear_rows(const zt_param_table *t, const zt_param_info *block, int role) {
    const zt_param_info *w = &block[t->block_role[role]];
    int fused = t->wpe < 0 ? (role == P_QKVW ? 3 : role == P_FCW ? 2 : 1) : 1, rows = 0;
    for (int i = 0; i < fused; i++) rows += w[i].shape[0];
    return rows;
}

/* ---- the activation buffers' layout and the tensor-parallel sum ---- */

static inline int llama(const zt_gpt2 *m) { return zt_shape_is_llama(&m->shape); }

static inline size_t esz(const zt_gpt2 *m) { return m->elem_size; }
static inline void *at(const zt_gpt2 *m, const void *base, size_t elems) { return (char *)base + elems * esz(m); }


/* offsets of one layer slot's activations, in compute-dtype elements */
typedef struct { size_t ln1, qkv, atty, att, res2, ln2, fch, fchg, total; } slot_layout;

/* a rank's widths (tensor parallelism: its heads and MLP columns): the q|k|v rows (3 C / tp for GPT-2),
 * the MLP's up-projection output (GPT-2: 4 C / tp before the GELU; SwiGLU: gate|up, 2 I / tp) and the
 * MLP's hidden activation (4 C / tp; SwiGLU: I / tp) */
static inline size_t qkv_width(const zt_gpt2 *m) { return (size_t)zt_shape_qkv(&m->shape) / m->tp_size; }
static inline size_t ffn_hidden(const zt_gpt2 *m) { return (size_t)zt_shape_ffn(&m->shape) / m->tp_size; }
static inline size_t ffn_up(const zt_gpt2 *m) { return (zt_shape_is_llama(&m->shape) ? 2 : 1) * ffn_hidden(m); }

/* With tensor parallelism a rank's attention and MLP activations are its heads' and its columns'
 * (Ch = C / tp wide); norm outputs and residuals are whole. */
static inline slot_layout layout_of(const zt_gpt2 *m) {
    size_t N = (size_t)m->B * m->T, C = m->shape.n_embd, Ch = C / m->tp_size;
    size_t att = (size_t)m->B * (m->shape.n_head / m->tp_size) * m->T * m->T;
    slot_layout s;
    s.ln1 = 0;
    s.qkv = s.ln1 + N * C;
    s.atty = s.qkv + N * qkv_width(m);
    s.att = s.atty + N * Ch;
    s.res2 = s.att + att;
    s.ln2 = s.res2 + N * C;
    s.fch = s.ln2 + N * C;
    s.fchg = s.fch + N * ffn_up(m);
    s.total = s.fchg + N * ffn_hidden(m);
    return s;
}

/* gradient scratch: dres [NC] | dsmall [NC] | dbig [the widest of NC, the up-projection's and q|k|v's] |
 * datt [B NH/tp T T] | dmid (SwiGLU: the hidden activation's gradient [N I/tp]; GPT-2 folds it into its
 * GELU backward: none) */
typedef struct { size_t dres, dsmall, dbig, datt, dmid, total; } scratch_layout;

static inline scratch_layout scratch_of(const zt_gpt2 *m) {
    size_t N = (size_t)m->B * m->T, C = m->shape.n_embd, big = N * ffn_up(m);
    if (N * qkv_width(m) > big) big = N * qkv_width(m);
    scratch_layout s;
    s.dres = 0;
    s.dsmall = N * C;
    s.dbig = 2 * N * C;
    s.datt = s.dbig + (big > N * C ? big : N * C);
    s.dmid = s.datt + (size_t)m->B * (m->shape.n_head / m->tp_size) * m->T * m->T;
    s.total = s.dmid + (zt_shape_is_llama(&m->shape) ? N * ffn_hidden(m) : 0);
    return s;
}


typedef struct { void *ln1, *qkv, *atty, *att, *res2, *ln2, *fch, *fchg; float *mean1, *rstd1, *mean2, *rstd2; } layer_acts;

static inline layer_acts layer_acts_of(const zt_gpt2 *m, int layer) {
    int slot = layer % m->segment_layers;
    slot_layout sl = layout_of(m);
    void *base = at(m, m->layer_acts, (size_t)slot * sl.total);
    size_t N = (size_t)m->B * m->T;
    float *stats = m->layer_stats + (size_t)slot * 4 * N;
    layer_acts a = {at(m, base, sl.ln1), at(m, base, sl.qkv), at(m, base, sl.atty), at(m, base, sl.att),
                    at(m, base, sl.res2), at(m, base, sl.ln2), at(m, base, sl.fch), at(m, base, sl.fchg),
                    stats, stats + N, stats + 2 * N, stats + 3 * N};
    return a;
}

static inline void *residual_at(const zt_gpt2 *m, int l) {
    return at(m, m->residual, (size_t)(l % m->residual_slots) * m->B * m->T * m->shape.n_embd);
}

/* Tensor parallelism's one collective: the tp ranks' partial sums of a whole [N, C] activation (Megatron's g
 * after a row-parallel linear in forward, f after a column-parallel linear's input gradient in backward).
 * Every rank gets the same bits, so what is computed from the result (LayerNorms, residuals, the
 * replicated parameters' gradients) stays identical across the group. */
static inline void tp_allreduce(zt_gpt2 *m, void *buf, size_t count) {
    if (m->tp) m->tp->wait(m->tp, m->tp->allreduce_sum(m->tp, buf, count, m->be->compute_dtype));
}


/* segment s's parameters, asking for the next one ahead */
static inline void *acquire(const zt_param_source *src, int segment) {
    void *p = src->acquire(src->ctx, segment);
    if (src->prefetch) src->prefetch(src->ctx, segment + 1);
    return p;
}



#endif
