/* gpt2.c — the model's forward and backward (see gpt2.h): its blocks with the family's parts (GPT-2's
 * LayerNorm, Conv1D linears, learned positions and GELU; the Llama family's RMSNorm, nn.Linear
 * weights, rotary q/k, grouped-query attention and SwiGLU), the token embedding, the final norm, the
 * LM head (tied to the embedding, or an untied lm_head), the cross-entropy; the activation buffers and
 * checkpointing; the rotary angles. The parameter table and init are gpt2_params.c's.
 *
 * res_0 = wte[tokens] (+ wpe), res_{l+1} = block_l(res_l), lnf = norm(res_L), logits = lnf W_head^T
 * (W_head = wte when tied), loss = mean cross-entropy. GPT-2 block l (pre-LayerNorm, Radford et al. 2019):
 *   ln1  = LN(res_l)                 qkv  = ln1 Wqkv + bqkv          atty = attention(qkv)
 *   res2 = res_l + atty Wproj + bproj ln2  = LN(res2)                fch  = ln2 Wfc + bfc
 *   fchg = gelu(fch)                 res_{l+1} = res2 + fchg Wfcproj + bfcproj
 * Llama-family block l (Touvron et al. 2023), weights [out, in]:
 *   ln1  = RMSNorm(res_l)            qkv  = ln1 [Wq; Wk; Wv]^T (+ b)  q, k rotated by position
 *   atty = gqa_attention(qkv)        res2 = res_l + atty Wo^T (+ bo) ln2  = RMSNorm(res2)
 *   fch  = ln2 [Wgate; Wup]^T (+ b)  fchg = silu(gate) up            res_{l+1} = res2 + fchg Wdown^T (+ b)
 *
 * Tensor parallelism (tp ranks, Megatron-LM's split): in each block q|k|v and the MLP's up-projection
 * are column-parallel (a rank computes its NH/tp heads and its MLP columns), the output and down
 * projections row-parallel: their outputs are partial sums, all-reduced over the group (forward), as
 * are the input gradients of the column-parallel linears (backward) — 4 all-reduces of N*C per block
 * wte (and an untied LM head) is vocabulary-parallel: the lookup is all-reduced
 * before wpe is added, the LM head gives each rank its vocabulary's logits, the cross-entropy combines
 * per-row statistics all-gathered from every rank, and the LM head's input gradient is all-reduced.
 *
 * Activation checkpointing: the block inputs res_0..res_L are always kept. The per-layer
 * activations (ln1, qkv, atty, att, res2, ln2, fch, fchg and the LN statistics) live in
 * `segment_layers` slots; layer l uses slot l % segment_layers. Without checkpointing there is one
 * slot per layer and nothing is recomputed; with it, backward re-runs the forward of a segment's
 * layers from its kept input before differentiating them. Recomputation runs the same ops on the
 * same inputs, so gradients are bit-identical to the run that keeps everything.
 *
 * cpu_checkpointing: only the segment inputs have to outlive the forward pass, so they go to host
 * memory (an asynchronous D2H queued right after the block that reads them) and the device keeps
 * segment_layers + 1 residual buffers, res_l in slot l % (segment_layers + 1) — enough for one
 * segment's recompute and backward. Each segment's input comes back into a device landing buffer
 * while the segment after it runs its backward (an H2D on a side stream, copy_ahead), and from there
 * into its slot before its recompute; the bytes are the same, so are the gradients.
 *
 * partition_activations (tensor parallelism): the segment inputs are the same on every rank of the
 * tensor-parallel group, so each keeps only its 1/tp chunk of each (on the device, or in host memory
 * with cpu_checkpointing) and the group all-gathers the chunks back into the slot before the recompute;
 * the device keeps segment_layers + 1 residual buffers as with cpu_checkpointing. Same bytes, same
 * gradients; the all-gather is one more tensor-parallel collective per segment. */
#include "model/gpt2.h"
#include "model/gpt2_internal.h"
#include "util/test_hooks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- buffers */

/* the tiled forward's fp32 accumulator: the widest linear's output (GPT-2's MLP [N, 4C/tp]) */
static size_t tile_acc_elems(const zt_gpt2 *m) {
    size_t w = ffn_up(m) > qkv_width(m) ? ffn_up(m) : qkv_width(m);
    return (size_t)m->B * m->T * (w > (size_t)m->shape.n_embd ? w : (size_t)m->shape.n_embd);
}

/* the segment inputs leave their residual slots for a store (cpu_checkpointing, partition_activations) */
static int stores_inputs(const zt_gpt2 *m) { return m->cpu_checkpointing || m->partition_activations; }

int zt_gpt2_plan(zt_gpt2 *m, const zt_gpt2_shape *shape, int B, int T, zt_act_ckpt ckpt, int tp_size, size_t elem_size,
                 zt_err *err) {
    int recompute = ckpt.enabled, number_checkpoints = ckpt.number_checkpoints;
    memset(m, 0, sizeof *m);
    m->shape = *shape;
    m->B = B;
    m->T = T;
    m->elem_size = elem_size;
    m->tp_size = tp_size > 1 ? tp_size : 1;
    /* the logits' row stride: this rank's wte rows (as zt_gpt2_param_table_tp cuts it) rounded up */
    int per = (shape->vocab_size + m->tp_size - 1) / m->tp_size;
    m->logits_stride = m->tp_size > 1 ? (per + 127) / 128 * 128 : shape->padded_vocab;
    int L = shape->n_layer;
    if (T > shape->n_positions) return zt_fail(err, "seq_len %d exceeds model.n_positions %d", T, shape->n_positions);
    if (shape->n_head % m->tp_size)
        return zt_fail(err, "tensor_parallel.tp_size %d must divide model.n_head %d", m->tp_size, shape->n_head);
    if (shape->sliding_window > 0 && T > shape->sliding_window)
        return zt_fail(err, "seq_len %d exceeds model.sliding_window %d (attention over a window is not built: every "
                            "position sees all before it)", T, shape->sliding_window);
    int q = zt_shape_qkv(shape) / m->tp_size, up = 2 * zt_shape_ffn(shape) / m->tp_size; /* nn.Linear: row tiles */
    if (zt_shape_is_llama(shape) && ckpt.tiles > 1 && (q % ckpt.tiles || up % ckpt.tiles || shape->n_embd % ckpt.tiles))
        return zt_fail(err, "zero_optimization.tiled_linear.in_splits %d must divide a rank's rows of each linear "
                            "(q|k|v %d, gate|up %d, o_proj and down_proj %d)", ckpt.tiles, q, up, shape->n_embd);
    m->recompute = recompute;
    int keep = recompute ? (number_checkpoints > 0 ? number_checkpoints : L) : 1;
    m->segment_layers = recompute ? (L + keep - 1) / keep : L;
    m->cpu_checkpointing = recompute && ckpt.cpu;
    m->partition_activations = recompute && ckpt.partition && m->tp_size > 1;
    int stored = stores_inputs(m); /* segment inputs leave their slots */
    m->residual_slots = stored ? m->segment_layers + 1 : L + 1;

    size_t N = (size_t)B * T, C = shape->n_embd, Vp = m->logits_stride;
    slot_layout sl = layout_of(m);
    m->layer_act_elems = sl.total;
    m->scratch_elems = scratch_of(m).total;
    size_t e = elem_size;
    size_t residual_bytes = (size_t)(L + 1) * N * C * e, kept_bytes = (size_t)m->residual_slots * N * C * e;
    size_t slot_bytes = sl.total * e + 4 * N * sizeof(float);
    size_t head_bytes = N * C * e + 2 * N * sizeof(float) + N * Vp * e + N * sizeof(float);
    m->act_bytes_full = residual_bytes + (size_t)L * slot_bytes + head_bytes;
    m->act_bytes_ckpt = residual_bytes + slot_bytes + head_bytes;
    /* the kept segment inputs, whole or one rank's chunk, in host memory or on the device */
    size_t store_bytes = stored ? (size_t)((L + m->segment_layers - 1) / m->segment_layers) * N * C * e /
                                      (m->partition_activations ? (size_t)m->tp_size : 1)
                                : 0;
    m->act_bytes = kept_bytes + (size_t)m->segment_layers * slot_bytes + head_bytes;
    m->act_host_bytes = m->cpu_checkpointing ? store_bytes : 0;
    /* on the device: the chunks, or with cpu_checkpointing the one each comes back into ahead of use */
    m->act_store_bytes = !stored ? 0
                         : m->cpu_checkpointing ? (size_t)N * C * e / (m->partition_activations ? (size_t)m->tp_size : 1)
                                                : store_bytes;
    m->act_bytes += m->act_store_bytes;
    m->scratch_bytes = m->scratch_elems * e + 2 * N * sizeof(int) + (m->tp_size > 1 ? (m->tp_size + 1) * 3 * N * sizeof(float) : 0);
    if (ckpt.tiles > 1) m->scratch_bytes += tile_acc_elems(m) * sizeof(float);
    if (m->tp_size > 1) m->scratch_bytes += (size_t)m->tp_size * Vp * e; /* logits_whole */
    if (zt_shape_is_llama(shape)) m->scratch_bytes += (size_t)T * zt_shape_head_dim(shape) * sizeof(float); /* rope_cs */
    return 0;
}

int zt_gpt2_create(zt_gpt2 *m, const zt_backend *be, const zt_gpt2_shape *shape, const zt_param_table *table,
                   zt_comm *tp, int B, int T, zt_act_ckpt ckpt, zt_err *err) {
    if (zt_gpt2_plan(m, shape, B, T, ckpt, table->tp_size, zt_dtype_size(be->compute_dtype), err)) return -1;
    if (zt_shape_is_llama(shape) && (!be->rmsnorm_forward || !be->rope || !be->swiglu_forward || !be->attention_gqa_forward))
        return zt_fail(err, "the %s backend has no Llama-family ops yet (model.model_type %s)", be->name,
                       zt_model_type_name(shape->model_type));
    m->be = be;
    m->table = table;
    m->tp = table->tp_size > 1 ? tp : NULL;
    m->tp_rank = table->tp_rank;
    m->vocab_lo = table->vocab_lo;
    m->vocab_rows = zt_tp_rows_in_whole(&table->params[0]); /* the logits past it are padding */
    size_t N = (size_t)B * T, C = shape->n_embd, Vp = m->logits_stride, e = m->elem_size;
    slot_layout sl = layout_of(m);
    scratch_layout sc = scratch_of(m);
    size_t residual_bytes = (size_t)m->residual_slots * N * C * e;

    m->tokens = be->alloc(N * sizeof(int));
    m->targets = be->alloc(N * sizeof(int));
    m->residual = be->alloc(residual_bytes);
    m->layer_acts = be->alloc((size_t)m->segment_layers * sl.total * e);
    m->layer_stats = be->alloc((size_t)m->segment_layers * 4 * N * sizeof(float));
    m->lnf = be->alloc(N * C * e);
    m->lnf_stats = be->alloc(2 * N * sizeof(float));
    m->logits = be->alloc(N * Vp * e);
    m->losses = be->alloc(N * sizeof(float));
    m->host_losses = zt_xcalloc(N, sizeof(float));
    m->scratch = be->alloc(sc.total * e);
    if (table->tiles > 1 && !(m->tile_acc = be->alloc(tile_acc_elems(m) * sizeof(float)))) {
        zt_gpt2_destroy(m);
        return zt_fail(err, "out of %s memory for the tiled linears' fp32 accumulator (%.1f MiB)", be->name,
                       (double)(tile_acc_elems(m) * sizeof(float)) / 1048576.0);
    }
    if (zt_shape_is_llama(shape)) { /* the rotary angles' cos and sin, fp32, made once on the host */
        size_t bytes = (size_t)T * zt_shape_head_dim(shape) * sizeof(float);
        float *cs = zt_xmalloc(bytes);
        zt_rope_table(shape, T, cs);
        if ((m->rope_cs = be->alloc(bytes))) be->copy(m->rope_cs, cs, bytes, ZT_H2D);
        free(cs);
    }
    if (m->tp) {
        m->xent_stats = be->alloc(3 * N * sizeof(float));
        m->xent_all = be->alloc((size_t)m->tp_size * 3 * N * sizeof(float));
        m->logits_whole = be->alloc((size_t)m->tp_size * Vp * e);
    }
    if (m->act_store_bytes && !(m->dev_ckpt = be->alloc(m->act_store_bytes))) {
        zt_gpt2_destroy(m);
        return zt_fail(err, "out of %s memory for the partitioned activation checkpoints (%.1f MiB)", be->name,
                       (double)m->act_store_bytes / 1048576.0);
    }
    if (m->act_host_bytes && !(m->host_ckpt = be->host_alloc(m->act_host_bytes))) {
        zt_gpt2_destroy(m);
        return zt_fail(err, "out of host memory for the activation checkpoints (cpu_checkpointing: %.1f MiB)",
                       (double)m->act_host_bytes / 1048576.0);
    }
    if (!m->tokens || !m->targets || !m->residual || !m->layer_acts || !m->layer_stats || !m->lnf ||
        !m->lnf_stats || !m->logits || !m->losses || !m->scratch || (m->tp && (!m->xent_stats || !m->xent_all || !m->logits_whole)) ||
        (zt_shape_is_llama(shape) && !m->rope_cs)) {
        zt_gpt2_destroy(m);
        return zt_fail(err, "out of %s memory for activations (%.1f MiB needed for B=%d T=%d)", be->name,
                       (double)(m->act_bytes + sc.total * e) / 1048576.0, B, T);
    }
    return 0;
}

void zt_gpt2_destroy(zt_gpt2 *m) {
    if (!m->be) return;
    void *bufs[] = {m->tokens, m->targets, m->residual, m->layer_acts, m->layer_stats, m->lnf,
                    m->lnf_stats, m->logits, m->losses, m->scratch, m->xent_stats, m->xent_all, m->logits_whole,
                    m->dev_ckpt, m->tile_acc, m->rope_cs};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) m->be->free(bufs[i]);
    if (m->host_ckpt) m->be->host_free(m->host_ckpt);
    free(m->host_losses);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- one block */

/* recv = every tp rank's `count` elements in rank order, this rank's from send (which may be its place in recv) */
static void tp_allgather(zt_gpt2 *m, const void *send, void *recv, size_t count, zt_dtype t) {
    size_t counts[ZT_MAX_TP];
    for (int r = 0; r < m->tp_size; r++) counts[r] = count;
    m->tp->wait(m->tp, m->tp->allgather(m->tp, send, recv, counts, t));
}

/* The kept segment inputs (cpu_checkpointing, partition_activations): res_l, l a multiple of
 * segment_layers, goes into the store after the block that reads it (its slot is reused later) and
 * back into its slot before its segment's recompute. Partitioned, a rank keeps chunk tp_rank of the N*C
 * elements (C divides by tp) and the group all-gathers the chunks in place. In host memory, a segment's
 * input comes back into the device landing buffer (dev_ckpt) ahead of use, on the side stream, while the
 * segment after it runs its backward (ckpt_fetch), and from there into its slot (ckpt_get). */
static size_t ckpt_chunk(const zt_gpt2 *m, size_t *off) {
    size_t n = (size_t)m->B * m->T * m->shape.n_embd, parts = m->partition_activations ? (size_t)m->tp_size : 1;
    *off = m->partition_activations ? (size_t)m->tp_rank * (n / parts) : 0;
    return n / parts;
}

static void *ckpt_kept(const zt_gpt2 *m, int l, size_t chunk) {
    return at(m, m->cpu_checkpointing ? m->host_ckpt : m->dev_ckpt, (size_t)(l / m->segment_layers) * chunk);
}

static void ckpt_put(zt_gpt2 *m, int l) {
    size_t off, chunk = ckpt_chunk(m, &off);
    void *slot = at(m, residual_at(m, l), off);
    if (m->cpu_checkpointing) m->be->copy_async(ckpt_kept(m, l, chunk), slot, chunk * esz(m), ZT_D2H);
    else m->be->copy(ckpt_kept(m, l, chunk), slot, chunk * esz(m), ZT_D2D);
}

static void ckpt_fetch(zt_gpt2 *m, int l) {
    size_t off, chunk = ckpt_chunk(m, &off);
    m->be->copy_ahead(m->dev_ckpt, ckpt_kept(m, l, chunk), chunk * esz(m), ZT_H2D);
}

static void ckpt_get(zt_gpt2 *m, int l) {
    size_t off, chunk = ckpt_chunk(m, &off);
    void *slot = at(m, residual_at(m, l), off);
    if (m->cpu_checkpointing) m->be->wait_ahead(); /* the landing buffer holds it from here on */
    m->be->copy(slot, m->cpu_checkpointing ? m->dev_ckpt : ckpt_kept(m, l, chunk), chunk * esz(m), ZT_D2D);
    if (m->partition_activations) tp_allgather(m, slot, residual_at(m, l), chunk, m->be->compute_dtype);
}

/* ---------------------------------------------------------------- whole model */

/* ---------------------------------------------------------------- one block: the family's parts */
typedef struct { void *p[P_PER_BLOCK]; } block_params;

static block_params block_params_at(const zt_gpt2 *m, int layer, void *segment_base) {
    block_params bp;
    const zt_param_info *first = zt_block_params(m->table, layer);
    size_t lo = m->table->segment_lo[zt_segment_of_block(m->table, layer)];
    for (int i = 0; i < P_PER_BLOCK; i++) {
        int k = m->table->block_role[i];
        bp.p[i] = k >= 0 ? at(m, segment_base, first[k].offset - lo) : NULL;
    }
    return bp;
}

/* The block's parts, chosen by the family (gpt2.h): the norm (LayerNorm, or RMSNorm whose mean slot
 * stays unused and which has no bias), the linears' weight layout (Conv1D [in, out], or nn.Linear
 * [out, in]: w_transposed), rotary positions on q and k, the attention (multi-head, or grouped-query),
 * the MLP (GELU fused into the up-projection, or SwiGLU after it). */

static void norm_forward(const zt_gpt2 *m, void *out, float *mean, float *rstd, const void *in, const void *w,
                         const void *b) {
    int N = m->B * m->T, C = m->shape.n_embd;
    if (llama(m)) m->be->rmsnorm_forward(out, rstd, in, w, m->shape.rms_norm_eps, N, C);
    else m->be->layernorm_forward(out, mean, rstd, in, w, b, N, C);
}

static void norm_backward(const zt_gpt2 *m, void *dinp, void *dw, void *db, const void *dout, const void *in,
                          const void *w, const float *mean, const float *rstd) {
    int N = m->B * m->T, C = m->shape.n_embd;
    if (llama(m)) m->be->rmsnorm_backward(dinp, dw, dout, in, w, rstd, N, C);
    else m->be->layernorm_backward(dinp, dw, db, dout, in, w, mean, rstd, N, C);
}

/* out[N, OC] = in[N, IN] W + bias in the family's weight layout */
static void linear_forward(const zt_gpt2 *m, void *out, const void *in, const void *w, const void *bias, size_t IN,
                           size_t OC) {
    m->be->matmul_forward(out, in, w, bias, m->B * m->T, (int)IN, (int)OC, llama(m), (int)OC);
}

static void linear_backward(const zt_gpt2 *m, void *din, void *dw, void *dbias, const void *dout, const void *in,
                            const void *w, size_t IN, size_t OC) {
    m->be->matmul_backward(din, dw, dbias, dout, in, w, m->B * m->T, (int)IN, (int)OC, llama(m), (int)OC);
}

/* causal self-attention over this rank's heads, q and k rotated first (the rotated qkv is what backward reads) */
static void attention_forward(const zt_gpt2 *m, void *out, void *att, void *qkv) {
    int B = m->B, T = m->T, NHh = m->shape.n_head / m->tp_size;
    if (!llama(m)) {
        m->be->attention_forward(out, att, qkv, B, T, m->shape.n_embd / m->tp_size, NHh);
        return;
    }
    int KVh = zt_shape_kv_heads(&m->shape) / m->tp_size, HD = zt_shape_head_dim(&m->shape);
    m->be->rope(qkv, m->rope_cs, B, T, NHh, KVh, HD, 0);
    m->be->attention_gqa_forward(out, att, qkv, B, T, NHh, KVh, HD);
}

/* dqkv = d(q|k|v before the rotation) */
static void attention_backward(const zt_gpt2 *m, void *dqkv, void *datt, const void *dout, const void *qkv,
                               const void *att) {
    int B = m->B, T = m->T, NHh = m->shape.n_head / m->tp_size;
    if (!llama(m)) {
        m->be->attention_backward(dqkv, datt, dout, qkv, att, B, T, m->shape.n_embd / m->tp_size, NHh);
        return;
    }
    int KVh = zt_shape_kv_heads(&m->shape) / m->tp_size, HD = zt_shape_head_dim(&m->shape);
    m->be->attention_gqa_backward(dqkv, datt, dout, qkv, att, B, T, NHh, KVh, HD);
    m->be->rope(dqkv, m->rope_cs, B, T, NHh, KVh, HD, 1); /* a rotation's gradient: the inverse rotation */
}

/* the MLP's up-projection and activation: GPT-2 fch = ln2 Wfc + b, fchg = gelu(fch) (fused); SwiGLU
 * fch = ln2 [Wgate; Wup]^T + b (gate | up), fchg = silu(gate) up */
static void mlp_up_forward(const zt_gpt2 *m, void *fchg, void *fch, const void *ln2, const void *w, const void *b) {
    int N = m->B * m->T, C = m->shape.n_embd;
    if (!llama(m)) {
        m->be->matmul_forward_gelu(fchg, fch, ln2, w, b, N, C, (int)ffn_hidden(m));
        return;
    }
    linear_forward(m, fch, ln2, w, b, (size_t)C, ffn_up(m));
    m->be->swiglu_forward(fchg, fch, N, (int)ffn_hidden(m));
}

/* the MLP's backward from dres = d(res_{l+1}) to dsmall = d(ln2) */
static void mlp_backward(const zt_gpt2 *m, const block_params *bp, const block_params *gp, const layer_acts *a,
                         void *dsmall, const void *dres) {
    scratch_layout sc = scratch_of(m);
    void *dbig = at(m, m->scratch, sc.dbig);
    int N = m->B * m->T, C = m->shape.n_embd, H = (int)ffn_hidden(m);
    if (!llama(m)) { /* res_{l+1} = res2 + gelu(ln2 Wfc + bfc) Wfcproj + bfcproj */
        m->be->matmul_backward_dgelu(dbig, gp->p[P_FCPROJW], gp->p[P_FCPROJB], dres, a->fchg, bp->p[P_FCPROJW], a->fch,
                                     N, H, C);
    } else { /* res_{l+1} = res2 + swiglu(ln2 Wgu^T + bgu) Wdown^T + bdown */
        void *dmid = at(m, m->scratch, sc.dmid);
        linear_backward(m, dmid, gp->p[P_FCPROJW], gp->p[P_FCPROJB], dres, a->fchg, bp->p[P_FCPROJW], (size_t)H,
                        (size_t)C);
        m->be->swiglu_backward(dbig, a->fch, dmid, N, H);
    }
    linear_backward(m, dsmall, gp->p[P_FCW], gp->p[P_FCB], dbig, a->ln2, bp->p[P_FCW], (size_t)C, ffn_up(m));
}

/* A rank computes its heads (NH / tp) and its MLP columns: Ch = C / tp. The row-parallel linears'
 * biases are added once, by tp rank 0, into the partial sums. */
static void block_forward(zt_gpt2 *m, int l, const block_params *bp) {
    const zt_backend *be = m->be;
    int N = m->B * m->T, C = m->shape.n_embd, Ch = C / m->tp_size, adds_bias = m->tp_rank == 0;
    layer_acts a = layer_acts_of(m, l);
    void *in = residual_at(m, l), *out = residual_at(m, l + 1);
    norm_forward(m, a.ln1, a.mean1, a.rstd1, in, bp->p[P_LN1W], bp->p[P_LN1B]);
    linear_forward(m, a.qkv, a.ln1, bp->p[P_QKVW], bp->p[P_QKVB], (size_t)C, qkv_width(m));
    attention_forward(m, a.atty, a.att, a.qkv);
    linear_forward(m, a.res2, a.atty, bp->p[P_PROJW], adds_bias ? bp->p[P_PROJB] : NULL, (size_t)Ch, (size_t)C);
    tp_allreduce(m, a.res2, (size_t)N * C);
    be->accumulate(a.res2, in, (size_t)N * C);
    norm_forward(m, a.ln2, a.mean2, a.rstd2, a.res2, bp->p[P_LN2W], bp->p[P_LN2B]);
    mlp_up_forward(m, a.fchg, a.fch, a.ln2, bp->p[P_FCW], bp->p[P_FCB]);
    linear_forward(m, out, a.fchg, bp->p[P_FCPROJW], adds_bias ? bp->p[P_FCPROJB] : NULL, ffn_hidden(m), (size_t)C);
    tp_allreduce(m, out, (size_t)N * C);
    be->accumulate(out, a.res2, (size_t)N * C);
}

/* dres holds d(res_{l+1}) on entry and d(res_l) on return. */
static void block_backward(zt_gpt2 *m, int l, const block_params *bp, const block_params *gp) {
    int N = m->B * m->T, C = m->shape.n_embd, Ch = C / m->tp_size;
    layer_acts a = layer_acts_of(m, l);
    scratch_layout sc = scratch_of(m);
    void *dres = at(m, m->scratch, sc.dres), *dsmall = at(m, m->scratch, sc.dsmall);
    void *dbig = at(m, m->scratch, sc.dbig), *datt = at(m, m->scratch, sc.datt);
    void *in = residual_at(m, l);
    mlp_backward(m, bp, gp, &a, dsmall, dres);
    tp_allreduce(m, dsmall, (size_t)N * C);
    norm_backward(m, dres, gp->p[P_LN2W], gp->p[P_LN2B], dsmall, a.res2, bp->p[P_LN2W], a.mean2, a.rstd2);
    /* attention: res2 = res_l + attention(rope(ln1 Wqkv + bqkv)) Wproj + bproj */
    linear_backward(m, dsmall, gp->p[P_PROJW], gp->p[P_PROJB], dres, a.atty, bp->p[P_PROJW], (size_t)Ch, (size_t)C);
    attention_backward(m, dbig, datt, dsmall, a.qkv, a.att);
    linear_backward(m, dsmall, gp->p[P_QKVW], gp->p[P_QKVB], dbig, a.ln1, bp->p[P_QKVW], (size_t)C, qkv_width(m));
    tp_allreduce(m, dsmall, (size_t)N * C);
    norm_backward(m, dres, gp->p[P_LN1W], gp->p[P_LN1B], dsmall, in, bp->p[P_LN1W], a.mean1, a.rstd1);
}

/* ---------------------------------------------------------------- one block, tile by tile */

/* Tiled linears (zt_param_table_tile_linears): y = x W + b over W's row tiles, y = sum_k x[:, I_k] W[I_k, :],
 * each tile a segment gathered, used and released in turn; backward dW[I_k] += x[:, I_k]^T dy and
 * dx[:, I_k] = dy W[I_k]^T tile by tile, db once. The tile sums change the order of fp32 additions
 * (equal to the whole-block GEMMs within rounding, not bit for bit). */
typedef struct {
    zt_gpt2 *m;
    const zt_param_source *src;
    const zt_param_info *p; /* the block's first tensor */
    int seg0, tiles;        /* the block's first segment; tiles per linear */
    int seg;                /* the segment held now */
    void *base, *gbase;     /* its parameters (and gradients, in backward) */
} tile_walk;

enum { TL_QKV, TL_PROJ, TL_FC, TL_FCPROJ };
static const int tile_weight[4] = {P_QKVW, P_PROJW, P_FCW, P_FCPROJW};

/* holds segment `seg` (releasing the one before; backward: finishing its gradients too) */
static void tile_hold(tile_walk *w, int seg, int backward, int prefetch) {
    if (w->seg == seg) return;
    const zt_param_source *src = w->src;
    if (w->seg >= 0) {
        src->release(src->ctx, w->seg);
        if (backward) src->grads_done(src->ctx, w->seg);
    }
    w->seg = seg;
    if (seg < 0) return;
    w->base = src->acquire(src->ctx, seg);
    if (prefetch && src->prefetch) src->prefetch(src->ctx, backward ? seg - 1 : seg + 1);
    w->gbase = backward ? src->grads(src->ctx, seg) : NULL;
}

/* the block's part `role` (or element `skip` into it) in the held segment's parameters / gradients;
 * NULL for a part the family lacks */
static void *tile_param(const tile_walk *w, int role, size_t skip, int grads) {
    int i = role >= 0 ? w->m->table->block_role[role] : -1;
    size_t lo = w->m->table->segment_lo[w->seg];
    return i < 0 ? NULL : at(w->m, grads ? w->gbase : w->base, w->p[i].offset + skip - lo);
}

/* linear j's tile k: holds its segment; *rows = its rows, returns its offset in the weight (elements) */
static size_t tile_at(tile_walk *w, int j, int k, int backward, int prefetch, int *rows) {
    const zt_param_info *wt = &w->p[w->m->table->block_role[tile_weight[j]]];
    *rows = zt_linear_rows(w->m->table, w->p, tile_weight[j]) / w->tiles;
    tile_hold(w, w->seg0 + j * w->tiles + k, backward, prefetch);
    return (size_t)k * *rows * wt->shape[1];
}

/* linear j's input and output widths: Conv1D's rows are its input, nn.Linear's (fused) rows its output */
static void tile_dims(const tile_walk *w, int j, int *IN, int *OC) {
    int rows = zt_linear_rows(w->m->table, w->p, tile_weight[j]);
    int cols = w->p[w->m->table->block_role[tile_weight[j]]].shape[1];
    *IN = llama(w->m) ? cols : rows;
    *OC = llama(w->m) ? rows : cols;
}

/* out[N, OC] = in[N, IN] W + bias over W's row tiles; bias_index < 0: none (tp ranks but the first).
 * Conv1D W [IN, OC]: tile k is inputs I_k, out = sum_k in[:, I_k] W_k; nn.Linear W [OC, IN]: tile k is
 * outputs O_k, out[:, O_k] = in W_k^T. The products land in fp32 (m->tile_acc) and the output is rounded
 * once with the bias, as the untiled matmul_forward rounds it: accumulating into the 16-bit output
 * would round it once per tile and once more for the bias. */
static void tiled_linear_forward(tile_walk *w, int j, void *out, const void *in, int bias_index, int prefetch) {
    zt_gpt2 *m = w->m;
    int N = m->B * m->T, IN, OC, rows;
    tile_dims(w, j, &IN, &OC);
    for (int k = 0; k < w->tiles; k++) {
        size_t off = tile_at(w, j, k, 0, prefetch, &rows);
        const void *wk = tile_param(w, tile_weight[j], off, 0);
        if (llama(m)) m->be->gemm_f32(m->tile_acc + (size_t)k * rows, in, wk, N, rows, IN, IN, IN, OC, 0, 1, 0.0f);
        else m->be->gemm_f32(m->tile_acc, at(m, in, (size_t)k * rows), wk, N, OC, rows, IN, OC, OC, 0, 0, k ? 1.0f : 0.0f);
    }
    /* the bias rides with the last tile, still held */
    m->be->round_bias(out, m->tile_acc, bias_index >= 0 ? tile_param(w, bias_index, 0, 0) : NULL, N, OC, OC);
}

/* dW += in^T dout and din = dout W^T over the tiles, last first (the gradients of each tile's segment
 * are final when it is let go); dbias += colsum(dout) while the last tile (which holds the bias) is held.
 * nn.Linear's tile k: dW_k += dout[:, O_k]^T in, din += dout[:, O_k] W_k. The first tile stays held on
 * return (c_attn's holds ln_1). */
static void tiled_linear_backward(tile_walk *w, int j, void *din, const void *dout, const void *in, int bias_index,
                                  int prefetch) {
    zt_gpt2 *m = w->m;
    int N = m->B * m->T, IN, OC, rows;
    tile_dims(w, j, &IN, &OC);
    for (int k = w->tiles - 1; k >= 0; k--) {
        size_t off = tile_at(w, j, k, 1, prefetch || k > 0, &rows);
        void *db = k == w->tiles - 1 ? tile_param(w, bias_index, 0, 1) : NULL;
        void *dw = tile_param(w, tile_weight[j], off, 1), *wk = tile_param(w, tile_weight[j], off, 0);
        if (db) m->be->bias_grad(db, dout, N, OC, OC);
        if (llama(m)) {
            const void *dk = at(m, dout, (size_t)k * rows);
            m->be->gemm(dw, dk, in, rows, IN, N, OC, IN, IN, 1, 0, 1.0f);
            m->be->gemm(din, dk, wk, N, IN, rows, OC, IN, IN, 0, 0, k == w->tiles - 1 ? 0.0f : 1.0f);
            continue;
        }
        m->be->gemm(dw, at(m, in, (size_t)k * rows), dout, rows, OC, N, IN, OC, OC, 1, 0, 1.0f);
        m->be->gemm(at(m, din, (size_t)k * rows), dout, wk, N, rows, OC, OC, OC, IN, 0, 1, 0.0f);
    }
}

static tile_walk tile_walk_of(zt_gpt2 *m, const zt_param_source *src, int l) {
    tile_walk w = {m, src, zt_block_params(m->table, l), zt_segment_of_block(m->table, l), m->table->tiles,
                   -1, NULL, NULL};
    return w;
}

/* block_forward, tile by tile; prefetch: ask for the next segment ahead (not while recomputing) */
static void tiled_block_forward(zt_gpt2 *m, const zt_param_source *src, int l, int prefetch) {
    const zt_backend *be = m->be;
    int N = m->B * m->T, C = m->shape.n_embd, adds_bias = m->tp_rank == 0, rows;
    layer_acts a = layer_acts_of(m, l);
    void *in = residual_at(m, l), *out = residual_at(m, l + 1);
    tile_walk w = tile_walk_of(m, src, l);
    tile_at(&w, TL_QKV, 0, 0, prefetch, &rows); /* ln_1 rides with c_attn's first tile */
    norm_forward(m, a.ln1, a.mean1, a.rstd1, in, tile_param(&w, P_LN1W, 0, 0), tile_param(&w, P_LN1B, 0, 0));
    tiled_linear_forward(&w, TL_QKV, a.qkv, a.ln1, P_QKVB, prefetch);
    attention_forward(m, a.atty, a.att, a.qkv);
    tiled_linear_forward(&w, TL_PROJ, a.res2, a.atty, adds_bias ? P_PROJB : -1, prefetch);
    tp_allreduce(m, a.res2, (size_t)N * C);
    be->accumulate(a.res2, in, (size_t)N * C);
    /* ln_2 rides with attn.c_proj's last tile, still held */
    norm_forward(m, a.ln2, a.mean2, a.rstd2, a.res2, tile_param(&w, P_LN2W, 0, 0), tile_param(&w, P_LN2B, 0, 0));
    tiled_linear_forward(&w, TL_FC, a.fch, a.ln2, P_FCB, prefetch);
    if (llama(m)) be->swiglu_forward(a.fchg, a.fch, N, (int)ffn_hidden(m));
    else be->gelu_forward(a.fchg, a.fch, (size_t)N * ffn_hidden(m));
    tiled_linear_forward(&w, TL_FCPROJ, out, a.fchg, adds_bias ? P_FCPROJB : -1, prefetch);
    tp_allreduce(m, out, (size_t)N * C);
    be->accumulate(out, a.res2, (size_t)N * C);
    tile_hold(&w, -1, 0, 0);
}

/* block_backward, tile by tile, segments in descending order; prefetch_past: the block before this
 * one comes next in backward (its last segment may be asked for ahead) */
static void tiled_block_backward(zt_gpt2 *m, const zt_param_source *src, int l, int prefetch_past) {
    const zt_backend *be = m->be;
    int N = m->B * m->T, C = m->shape.n_embd, rows;
    layer_acts a = layer_acts_of(m, l);
    scratch_layout sc = scratch_of(m);
    void *dres = at(m, m->scratch, sc.dres), *dsmall = at(m, m->scratch, sc.dsmall);
    void *dbig = at(m, m->scratch, sc.dbig), *datt = at(m, m->scratch, sc.datt);
    tile_walk w = tile_walk_of(m, src, l);
    /* MLP: the down projection's input gradient through the GELU, then the up projection's */
    void *dact = llama(m) ? at(m, m->scratch, sc.dmid) : dbig; /* d(fchg) */
    tiled_linear_backward(&w, TL_FCPROJ, dact, dres, a.fchg, P_FCPROJB, 1);
    if (llama(m)) be->swiglu_backward(dbig, a.fch, dact, N, (int)ffn_hidden(m));
    else be->gelu_backward(dbig, a.fch, dbig, (size_t)N * ffn_hidden(m));
    tiled_linear_backward(&w, TL_FC, dsmall, dbig, a.ln2, P_FCB, 1);
    tp_allreduce(m, dsmall, (size_t)N * C);
    tile_at(&w, TL_PROJ, w.tiles - 1, 1, 1, &rows); /* ln_2 rides with attn.c_proj's last tile */
    norm_backward(m, dres, tile_param(&w, P_LN2W, 0, 1), tile_param(&w, P_LN2B, 0, 1), dsmall, a.res2,
                  tile_param(&w, P_LN2W, 0, 0), a.mean2, a.rstd2);
    /* attention */
    tiled_linear_backward(&w, TL_PROJ, dsmall, dres, a.atty, P_PROJB, 1);
    attention_backward(m, dbig, datt, dsmall, a.qkv, a.att);
    tiled_linear_backward(&w, TL_QKV, dsmall, dbig, a.ln1, P_QKVB, prefetch_past);
    tp_allreduce(m, dsmall, (size_t)N * C);
    /* ln_1 rides with c_attn's first tile, still held */
    norm_backward(m, dres, tile_param(&w, P_LN1W, 0, 1), tile_param(&w, P_LN1B, 0, 1), dsmall, residual_at(m, l),
                  tile_param(&w, P_LN1W, 0, 0), a.mean1, a.rstd1);
    tile_hold(&w, -1, 1, 0);
}

/* block l's forward: the block one segment, or tile by tile; prefetch as acquire() does */
static void run_block_forward(zt_gpt2 *m, const zt_param_source *src, int l, int prefetch) {
    if (m->table->tiles > 1) {
        tiled_block_forward(m, src, l, prefetch);
        return;
    }
    int s = zt_segment_of_block(m->table, l);
    block_params bp = block_params_at(m, l, prefetch ? acquire(src, s) : src->acquire(src->ctx, s));
    block_forward(m, l, &bp);
    src->release(src->ctx, s);
}

/* block l's backward; prefetch_past: block l-1's (last) segment may be asked for ahead */
static void run_block_backward(zt_gpt2 *m, const zt_param_source *src, int l, int prefetch_past) {
    if (m->table->tiles > 1) {
        tiled_block_backward(m, src, l, prefetch_past);
        return;
    }
    int s = zt_segment_of_block(m->table, l);
    block_params bp = block_params_at(m, l, src->acquire(src->ctx, s));
    if (src->prefetch && prefetch_past) src->prefetch(src->ctx, s - 1); /* block l-1, next in backward */
    block_params gp = block_params_at(m, l, src->grads(src->ctx, s));
    block_backward(m, l, &bp, &gp);
    src->release(src->ctx, s);
    src->grads_done(src->ctx, s);
}

/* The tied embedding, segment by segment (one segment unless stage 3 cuts it in row blocks; see
 * gpt2.h): the token lookup, and the LM head logits[:, lo:hi) = lnf wte[lo:hi]^T per block. */
/* Vocabulary-parallel (tensor parallelism): a rank looks up the tokens of its own vocabulary rows (ids
 * from m->vocab_lo), zeros for the rest, the tp ranks' lookups are summed, then wpe is added. */
static void embedding_forward(zt_gpt2 *m, const zt_param_source *src) {
    const zt_param_table *t = m->table;
    int E = t->n_embed_segments, B = m->B, T = m->T, C = m->shape.n_embd;
    void *res0 = residual_at(m, 0);
    if (m->tp) m->be->memset_zero(res0, (size_t)B * T * C * esz(m));
    for (int k = 0; k < E; k++) {
        int lo, hi;
        zt_embed_segment_rows(t, k, &lo, &hi);
        void *seg = acquire(src, k);
        /* wpe rides with the last segment, added last (rotary positions: none) */
        void *wpe = k == E - 1 && t->wpe >= 0 ? at(m, seg, t->params[t->wpe].offset - t->segment_lo[k]) : NULL;
        lo += m->vocab_lo, hi += m->vocab_lo;
        m->be->embedding_forward(res0, m->tokens, seg, lo, hi, m->tp ? NULL : wpe, B, T, C);
        if (k == E - 1 && m->tp) {
            tp_allreduce(m, res0, (size_t)B * T * C);
            if (wpe) m->be->embedding_forward(res0, m->tokens, NULL, 0, 0, wpe, B, T, C); /* no rows: adds wpe */
        }
        src->release(src->ctx, k);
    }
}

static void lm_head_forward(zt_gpt2 *m, const zt_param_source *src) {
    int E = m->table->n_embed_segments, N = m->B * m->T, C = m->shape.n_embd, Vp = m->logits_stride;
    for (int k = 0; k < E; k++) {
        int lo, hi;
        zt_embed_segment_rows(m->table, k, &lo, &hi);
        void *wte = src->acquire(src->ctx, k);
        if (src->prefetch && k + 1 < E) src->prefetch(src->ctx, k + 1);
        m->be->matmul_forward(at(m, m->logits, (size_t)lo), m->lnf, wte, NULL, N, C, hi - lo, 1, Vp);
        src->release(src->ctx, k);
    }
}

/* dlnf (into dlnf) = sum over blocks of dlogits[:, lo:hi) wte[lo:hi], last block first (the one
 * forward left gathered), then over the tp ranks' vocabulary parts; dwte[lo:hi) += dlogits[:, lo:hi)^T
 * lnf. tmp: N*C scratch. */
static void lm_head_backward(zt_gpt2 *m, const zt_param_source *src, void *dlnf, void *tmp) {
    int E = m->table->n_embed_segments, N = m->B * m->T, C = m->shape.n_embd, Vp = m->logits_stride;
    for (int k = E - 1; k >= 0; k--) {
        int lo, hi;
        zt_embed_segment_rows(m->table, k, &lo, &hi);
        void *wte = src->acquire(src->ctx, k);
        if (src->prefetch && k > 0) src->prefetch(src->ctx, k - 1);
        void *gwte = src->grads(src->ctx, k);
        m->be->matmul_backward(k == E - 1 ? dlnf : tmp, gwte, NULL, at(m, m->logits, (size_t)lo), m->lnf, wte, N, C,
                               hi - lo, 1, Vp);
        if (k != E - 1) m->be->accumulate(dlnf, tmp, (size_t)N * C);
        src->release(src->ctx, k);
    }
    tp_allreduce(m, dlnf, (size_t)N * C);
}

/* the token lookup's gradients (no parameters needed), then every embedding segment is final */
static void embedding_backward(zt_gpt2 *m, const zt_param_source *src, const void *dres) {
    const zt_param_table *t = m->table;
    int E = t->n_embed_segments;
    for (int k = E - 1; k >= 0; k--) {
        int lo, hi;
        zt_embed_segment_rows(t, k, &lo, &hi);
        void *g = src->grads(src->ctx, k);
        void *gwpe = k == E - 1 && t->wpe >= 0 ? at(m, g, t->params[t->wpe].offset - t->segment_lo[k]) : NULL;
        m->be->embedding_backward(g, lo + m->vocab_lo, hi + m->vocab_lo, gwpe, dres, m->tokens, m->B, m->T, m->shape.n_embd);
        src->grads_done(src->ctx, k);
    }
}

/* the untied LM head's weight (or its gradient) in the final norm's segment `base`; NULL: tied */
static void *untied_head(const zt_gpt2 *m, void *base) {
    const zt_param_table *t = m->table;
    if (t->lm_head < 0) return NULL;
    return at(m, base, t->params[t->lm_head].offset - t->segment_lo[zt_segment_of_lnf(t)]);
}

/* Cross-entropy over the logits. Vocabulary-parallel under tensor parallelism: each rank's row
 * statistics (max, sum of exponentials, target logit) are all-gathered, 3N floats a rank, and every
 * rank combines them in rank order; the logits are never gathered whole. */
static void xent(zt_gpt2 *m, float dloss) {
    const zt_backend *be = m->be;
    int N = m->B * m->T, Vp = m->logits_stride;
    void *dlogits = dloss != 0.0f ? m->logits : NULL;
    if (!m->tp) {
        be->softmax_xent(m->losses, dlogits, m->logits, m->targets, N, m->shape.vocab_size, Vp, dloss);
        return;
    }
    be->xent_partial(m->xent_stats, m->logits, m->targets, N, m->vocab_rows, Vp, m->vocab_lo);
    tp_allgather(m, m->xent_stats, m->xent_all, 3 * (size_t)N, ZT_F32);
    be->xent_parallel(m->losses, dlogits, m->logits, m->targets, m->xent_all, m->tp_size, N, m->vocab_rows, Vp,
                      m->vocab_lo, dloss);
}

float zt_gpt2_forward(zt_gpt2 *m, const zt_param_source *src, const int *tokens, const int *targets, float dloss) {
    const zt_backend *be = m->be;
    int B = m->B, T = m->T, C = m->shape.n_embd, L = m->shape.n_layer, N = B * T;
    int LNF = zt_segment_of_lnf(m->table);
    be->copy(m->tokens, tokens, (size_t)N * sizeof(int), ZT_H2D);
    if (targets) be->copy(m->targets, targets, (size_t)N * sizeof(int), ZT_H2D);

    embedding_forward(m, src);
    for (int l = 0; l < L; l++) {
        run_block_forward(m, src, l, 1);
        if (stores_inputs(m) && l % m->segment_layers == 0) ckpt_put(m, l); /* after its reader */
        if (zt_test_hook_extra_sync()) be->synchronize(); /* a needless wait: test/t_predict.py */
    }
    void *lnf = acquire(src, LNF);
    norm_forward(m, m->lnf, m->lnf_stats, m->lnf_stats + N, residual_at(m, L), lnf, llama(m) ? NULL : at(m, lnf, C));
    void *head = untied_head(m, lnf);
    if (head) /* the untied LM head rides with the final norm */
        be->matmul_forward(m->logits, m->lnf, head, NULL, N, C, m->table->params[m->table->lm_head].shape[0], 1,
                           m->logits_stride);
    src->release(src->ctx, LNF);
    if (!head) lm_head_forward(m, src);
    if (!targets) return 0.0f;

    /* with dloss != 0 the fused kernel also leaves d(loss)/d(logits) in place of the logits */
    xent(m, dloss);
    be->copy(m->host_losses, m->losses, (size_t)N * sizeof(float), ZT_D2H);
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += m->host_losses[i];
    return (float)(sum / N);
}

/* logits fp32 on the host from `n` compute-dtype elements on the device */
static void logits_to_host(const zt_gpt2 *m, const void *src, size_t n, float *out) {
    const zt_backend *be = m->be;
    if (be->compute_dtype == ZT_F32) {
        be->copy(out, src, n * 4, ZT_D2H);
        return;
    }
    unsigned short *tmp = zt_xmalloc(n * 2);
    be->copy(tmp, src, n * 2, ZT_D2H);
    for (size_t i = 0; i < n; i++) out[i] = zt_bf16_bits_to_f32(tmp[i]);
    free(tmp);
}

void zt_gpt2_logits_row(zt_gpt2 *m, int row, float *out) {
    int V = m->shape.vocab_size, stride = m->logits_stride;
    const char *mine = (const char *)m->logits + (size_t)row * stride * m->elem_size;
    if (!m->tp) {
        logits_to_host(m, mine, (size_t)V, out);
        return;
    }
    /* every tp rank's part has the same row stride (ceil(V / tp) rows rounded up), so one all-gather of
     * whole strides; rank r's ids start at r ceil(V / tp), and the last ranks' parts end in padding */
    int tp = m->tp_size, per = (V + tp - 1) / tp;
    tp_allgather(m, mine, m->logits_whole, (size_t)stride, m->be->compute_dtype);
    float *host = zt_xmalloc((size_t)tp * stride * sizeof *host);
    logits_to_host(m, m->logits_whole, (size_t)tp * stride, host);
    for (int r = 0; r < tp; r++) {
        int lo = r * per, rows = V - lo < per ? V - lo : per;
        if (rows > 0) memcpy(out + lo, host + (size_t)r * stride, (size_t)rows * sizeof *out);
    }
    free(host);
}

void zt_gpt2_backward(zt_gpt2 *m, const zt_param_source *src) {
    const zt_backend *be = m->be;
    int B = m->B, T = m->T, C = m->shape.n_embd, L = m->shape.n_layer, N = B * T, LNF = zt_segment_of_lnf(m->table);
    scratch_layout sc = scratch_of(m);
    void *dres = at(m, m->scratch, sc.dres), *dsmall = at(m, m->scratch, sc.dsmall);

    /* LM head: logits = lnf wte^T (tied) or lnf W_head^T; m->logits holds dlogits from the forward */
    if (m->table->lm_head < 0) lm_head_backward(m, src, dsmall, at(m, m->scratch, sc.dbig));
    void *lnf = src->acquire(src->ctx, LNF);
    void *glnf = src->grads(src->ctx, LNF);
    void *head = untied_head(m, lnf);
    if (head) {
        be->matmul_backward(dsmall, untied_head(m, glnf), NULL, m->logits, m->lnf, head, N, C,
                            m->table->params[m->table->lm_head].shape[0], 1, m->logits_stride);
        tp_allreduce(m, dsmall, (size_t)N * C);
    }
    be->memset_zero(dres, (size_t)N * C * esz(m));
    norm_backward(m, dres, glnf, llama(m) ? NULL : at(m, glnf, C), dsmall, residual_at(m, L), lnf, m->lnf_stats,
                  m->lnf_stats + N);
    src->release(src->ctx, LNF);
    src->grads_done(src->ctx, LNF);

    for (int seg_end = L; seg_end > 0;) {
        int seg_start = ((seg_end - 1) / m->segment_layers) * m->segment_layers;
        if (m->cpu_checkpointing && seg_end == L) ckpt_fetch(m, seg_start); /* the first: nothing to hide it behind */
        if (stores_inputs(m)) ckpt_get(m, seg_start); /* its input back into its slot */
        if (m->recompute) /* re-run the segment's forward from its kept input */
            for (int l = seg_start; l < seg_end; l++) run_block_forward(m, src, l, 0);
        if (m->cpu_checkpointing && seg_start > 0) /* the segment before comes back during this one's backward */
            ckpt_fetch(m, (seg_start - 1) / m->segment_layers * m->segment_layers);
        for (int l = seg_end - 1; l >= seg_start; l--) run_block_backward(m, src, l, l > seg_start);
        seg_end = seg_start;
    }
    embedding_backward(m, src, dres);
}

/* f_i = theta^(-2i/HD) in fp32, as torch computes 1 / theta ** (arange(0, HD, 2).float() / HD); Llama 3's
 * scaling (rope_type llama3) works on the wavelength 2 pi / f_i against the original context P0:
 * wavelengths past P0 / low_freq_factor are divided by factor, those below P0 / high_freq_factor kept,
 * between them s = (P0 / wavelength - low) / (high - low) blends f (1 - s) f / factor + s f. */
void zt_rope_table(const zt_gpt2_shape *s, int T, float *cs) {
    int HD = zt_shape_head_dim(s), half = HD / 2;
    float *f = zt_xmalloc((size_t)half * sizeof *f);
    for (int i = 0; i < half; i++) {
        f[i] = 1.0f / powf(s->rope_theta, (float)(2 * i) / (float)HD);
        if (s->rope_factor > 0) {
            double P0 = s->rope_original_max, lo = s->rope_low_freq_factor, hi = s->rope_high_freq_factor;
            double wavelength = 2.0 * M_PI / f[i], fi = f[i];
            if (wavelength > P0 / lo) fi = fi / s->rope_factor;
            else if (wavelength >= P0 / hi) {
                double sm = (P0 / wavelength - lo) / (hi - lo);
                fi = (1.0 - sm) * fi / s->rope_factor + sm * fi;
            }
            f[i] = (float)fi;
        }
    }
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            float angle = (float)t * f[i]; /* fp32, as Hugging Face's position x frequency product */
            cs[(size_t)t * HD + i] = cosf(angle);
            cs[(size_t)t * HD + half + i] = sinf(angle);
        }
    free(f);
}
