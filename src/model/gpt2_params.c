/* gpt2_params.c — the model's parameter table (gpt2.h), GPT-2's or a Llama-family model's: the Hugging
 * Face names and shapes, in the order of the flat parameter vector; the shape's checks; a tensor-
 * parallel rank's part of it (Megatron's split: column- and row-parallel linears, the vocabulary-
 * parallel embedding) and the row maps between a part and the whole; the segments the engine gathers
 * and reduces by (embedding row blocks, blocks, or their linears' tiles); the init, bit-identical for
 * any thread count; FLOPs per token. Forward and backward are gpt2.c's. */
#include "model/gpt2.h"
#include "model/gpt2_internal.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One tensor: whole shape d0 x d1 (d1 0: 1-D), cut by `split` into this rank's part of tensor parallelism
 * rank r of tp (see zt_tp_split): ROWS take ceil(d0 / tp) rows (wte: the last rank's end in padding rows
 * past the vocabulary, zero and never used, as Megatron pads the vocabulary: every rank's part has the
 * same shape), COLUMNS take `pieces` pieces of width (cols / pieces) / tp. */
static void add_param(zt_param_table *t, const char *name, int d0, int d1, int segment, zt_tp_split split, int pieces,
                      zt_param_init init) {
    zt_param_info *p = &t->params[t->count++];
    p->init = init;
    int r = t->tp_rank, tp = t->tp_size;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = d1 > 0 ? 2 : 1;
    p->full_shape[0] = d0;
    p->full_shape[1] = d1 > 0 ? d1 : 0;
    p->shape[0] = p->full_shape[0];
    p->shape[1] = p->full_shape[1];
    p->split = tp > 1 ? split : ZT_TP_WHOLE;
    p->split_pieces = 1;
    if (p->split == ZT_TP_ROWS) {
        int per = (d0 + tp - 1) / tp;
        p->split_lo = r * per;
        p->shape[0] = per;
    } else if (p->split == ZT_TP_COLUMNS) {
        int *cols = &p->shape[p->ndim - 1], stride = *cols / pieces, width = stride / tp;
        p->split_pieces = pieces;
        p->split_stride = stride;
        p->split_lo = r * width;
        *cols = pieces * width;
    }
    p->numel = (size_t)p->shape[0] * (size_t)(p->ndim == 2 ? p->shape[1] : 1);
    p->offset = t->total;
    p->segment = segment;
    p->decay = p->ndim == 2;
    t->total += p->numel;
}

/* one row's columns between this rank's part and the whole row, in either direction */
static void tp_row(const zt_param_info *p, float *row, float *whole_row, int take) {
    int cols = zt_param_cols(p), pieces = p->split == ZT_TP_COLUMNS ? p->split_pieces : 1, width = cols / pieces;
    for (int k = 0; k < pieces; k++) {
        float *whole = whole_row + (p->split == ZT_TP_COLUMNS ? (size_t)k * p->split_stride + p->split_lo : 0);
        float *mine = row + (size_t)k * width;
        memcpy(take ? mine : whole, take ? whole : mine, (size_t)width * sizeof *row);
    }
}

void zt_tp_take_row(const zt_param_info *p, const float *whole_row, float *row) { tp_row(p, row, (float *)whole_row, 1); }
void zt_tp_put_row(const zt_param_info *p, const float *row, float *whole_row) { tp_row(p, (float *)row, whole_row, 0); }

/* this rank's part p and the same tensor w of the whole table: row by row, in either direction */
void zt_tp_take_vector(const zt_param_table *part, const zt_param_table *whole, const float *whole_vec, float *part_vec) {
    for (int i = 0; i < part->count; i++) {
        const zt_param_info *p = &part->params[i], *w = &whole->params[i];
        int rows = zt_tp_rows_in_whole(p), cols = zt_param_cols(p), wcols = zt_param_cols(w);
        memset(part_vec + p->offset + (size_t)rows * cols, 0, (p->numel - (size_t)rows * cols) * sizeof(float));
        for (int row = 0; row < rows; row++)
            zt_tp_take_row(p, whole_vec + w->offset + (size_t)zt_tp_whole_row(p, row) * wcols,
                           part_vec + p->offset + (size_t)row * cols);
    }
}

int zt_gpt2_param_table(zt_param_table *t, const zt_gpt2_shape *s, zt_err *err) {
    return zt_gpt2_param_table_tp(t, s, 0, 1, err);
}

/* the shape's checks that both families share, and the Llama family's own (a file or a config supplies
 * these numbers: each is judged before anything is sized from it) */
static int check_shape(const zt_gpt2_shape *s, int tp_size, zt_err *err) {
    int L = s->n_layer, C = s->n_embd;
    if (L < 1 || C < 1 || s->n_head < 1 || C % s->n_head || s->vocab_size < 1 || s->n_positions < 1)
        return zt_fail(err, "invalid model shape (n_layer %d, n_head %d, n_embd %d, vocab_size %d, n_positions %d)",
                       L, s->n_head, C, s->vocab_size, s->n_positions);
    int KV = zt_shape_kv_heads(s), I = zt_shape_ffn(s);
    if (zt_shape_is_llama(s)) {
        if (KV < 1 || KV > s->n_head || s->n_head % KV)
            return zt_fail(err, "model.num_key_value_heads %d must divide model.n_head %d (grouped-query attention)",
                           KV, s->n_head);
        if (I < 1) return zt_fail(err, "model.intermediate_size %d must be positive (the SwiGLU MLP's width)", I);
        if (zt_shape_head_dim(s) % 2)
            return zt_fail(err, "head dimension %d (n_embd / n_head) must be even for rotary embeddings",
                           zt_shape_head_dim(s));
    }
    /* every size below is computed in 64 bits from ints a file or a config supplies: the widest
     * tensor, the table's entries, the padded vocabulary and the element count must each fit what the
     * table and the flat vector index with (an absurd shape is refused here, before anything is
     * allocated from it, not wrapped into a huge allocation) */
    double per_block = (double)C * zt_shape_qkv(s) + (double)C * C + (zt_shape_is_llama(s) ? 3.0 : 2.0) * C * I +
                       8.0 * C + 3.0 * I;
    double elems = ((double)s->vocab_size * (s->untied ? 2 : 1) + s->n_positions + 2) * C + (double)L * per_block;
    if ((int64_t)C * 4 > INT_MAX || (int64_t)I * 2 > INT_MAX || (int64_t)L * ZT_MAX_BLOCK_TENSORS + 4 > INT_MAX ||
        (int64_t)s->vocab_size + 127 > INT_MAX || elems > (double)ZT_MAX_PARAMS)
        return zt_fail(err, "model shape n_layer %d, n_embd %d, vocab_size %d, n_positions %d is beyond what zerotrain "
                            "sizes (at most %lld parameters, n_embd at most %d)", L, C, s->vocab_size, s->n_positions,
                       (long long)ZT_MAX_PARAMS, INT_MAX / 4);
    if (tp_size < 1 || s->n_head % tp_size || s->vocab_size < tp_size)
        return zt_fail(err, "tensor_parallel.tp_size %d must divide model.n_head %d (heads are split across tensor-"
                            "parallel ranks)", tp_size, s->n_head);
    if (zt_shape_is_llama(s) && (KV % tp_size || I % tp_size))
        return zt_fail(err, "tensor_parallel.tp_size %d must divide model.num_key_value_heads %d and "
                            "model.intermediate_size %d (key/value heads and MLP rows are split across tensor-"
                            "parallel ranks)", tp_size, KV, I);
    return 0;
}

/* one block's tensors: GPT-2's (Conv1D [in, out]), Megatron's split: c_attn and c_fc column-parallel
 * (their biases with them), c_proj row-parallel (its bias whole: added once, after the all-reduce),
 * LayerNorms whole */
static void add_gpt2_block(zt_param_table *t, const zt_gpt2_shape *s, int l) {
    int C = s->n_embd;
    static const char *names[P_PER_BLOCK] = {
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
        "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    const int widths[P_PER_BLOCK][2] = {{C, 0}, {C, 0}, {C, 3 * C}, {3 * C, 0}, {C, C}, {C, 0},
                                        {C, 0}, {C, 0}, {C, 4 * C}, {4 * C, 0}, {4 * C, C}, {C, 0}};
    static const zt_tp_split splits[P_PER_BLOCK] = {ZT_TP_WHOLE, ZT_TP_WHOLE,   ZT_TP_COLUMNS, ZT_TP_COLUMNS,
                                                    ZT_TP_ROWS,  ZT_TP_WHOLE,   ZT_TP_WHOLE,   ZT_TP_WHOLE,
                                                    ZT_TP_COLUMNS, ZT_TP_COLUMNS, ZT_TP_ROWS,  ZT_TP_WHOLE};
    static const zt_param_init inits[P_PER_BLOCK] = {
        ZT_INIT_ONE, ZT_INIT_ZERO, ZT_INIT_NORMAL, ZT_INIT_ZERO, ZT_INIT_RESIDUAL, ZT_INIT_ZERO,
        ZT_INIT_ONE, ZT_INIT_ZERO, ZT_INIT_NORMAL, ZT_INIT_ZERO, ZT_INIT_RESIDUAL, ZT_INIT_ZERO};
    for (int i = 0; i < P_PER_BLOCK; i++) {
        char name[64];
        snprintf(name, sizeof name, "transformer.h.%d.%s", l, names[i]);
        if (l == 0) t->block_role[i] = (signed char)i;
        add_param(t, name, widths[i][0], widths[i][1], l + 1, splits[i], i == P_QKVW || i == P_QKVB ? 3 : 1, inits[i]);
    }
}

/* one Llama-family block: nn.Linear weights [out, in]. Megatron's split in that layout: q/k/v and
 * gate/up split by rows (a rank's heads, key/value heads and MLP rows, each tensor's part contiguous,
 * so q|k|v and gate|up stay one weight on every rank), o_proj and down_proj by columns (row-parallel:
 * partial sums all-reduced, their biases whole and added once), norms whole. Init: Hugging Face's
 * (every linear N(0, 0.02), norm weights 1, biases 0). */
static void add_llama_block(zt_param_table *t, const zt_gpt2_shape *s, int l) {
    int C = s->n_embd, HD = zt_shape_head_dim(s), Q = s->n_head * HD, KV = zt_shape_kv_heads(s) * HD;
    int I = zt_shape_ffn(s), first = t->count;
    struct part { const char *name; int d0, d1, role, present; zt_tp_split split; zt_param_init init; } parts[] = {
        {"input_layernorm.weight", C, 0, P_LN1W, 1, ZT_TP_WHOLE, ZT_INIT_ONE},
        {"self_attn.q_proj.weight", Q, C, P_QKVW, 1, ZT_TP_ROWS, ZT_INIT_NORMAL},
        {"self_attn.k_proj.weight", KV, C, -1, 1, ZT_TP_ROWS, ZT_INIT_NORMAL},
        {"self_attn.v_proj.weight", KV, C, -1, 1, ZT_TP_ROWS, ZT_INIT_NORMAL},
        {"self_attn.q_proj.bias", Q, 0, P_QKVB, s->qkv_bias, ZT_TP_COLUMNS, ZT_INIT_ZERO},
        {"self_attn.k_proj.bias", KV, 0, -1, s->qkv_bias, ZT_TP_COLUMNS, ZT_INIT_ZERO},
        {"self_attn.v_proj.bias", KV, 0, -1, s->qkv_bias, ZT_TP_COLUMNS, ZT_INIT_ZERO},
        {"self_attn.o_proj.weight", C, Q, P_PROJW, 1, ZT_TP_COLUMNS, ZT_INIT_NORMAL},
        {"self_attn.o_proj.bias", C, 0, P_PROJB, s->o_bias, ZT_TP_WHOLE, ZT_INIT_ZERO},
        {"post_attention_layernorm.weight", C, 0, P_LN2W, 1, ZT_TP_WHOLE, ZT_INIT_ONE},
        {"mlp.gate_proj.weight", I, C, P_FCW, 1, ZT_TP_ROWS, ZT_INIT_NORMAL},
        {"mlp.up_proj.weight", I, C, -1, 1, ZT_TP_ROWS, ZT_INIT_NORMAL},
        {"mlp.gate_proj.bias", I, 0, P_FCB, s->mlp_bias, ZT_TP_COLUMNS, ZT_INIT_ZERO},
        {"mlp.up_proj.bias", I, 0, -1, s->mlp_bias, ZT_TP_COLUMNS, ZT_INIT_ZERO},
        {"mlp.down_proj.weight", C, I, P_FCPROJW, 1, ZT_TP_COLUMNS, ZT_INIT_NORMAL},
        {"mlp.down_proj.bias", C, 0, P_FCPROJB, s->mlp_bias, ZT_TP_WHOLE, ZT_INIT_ZERO},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        const struct part *q = &parts[i];
        if (!q->present) continue;
        char name[64];
        snprintf(name, sizeof name, "model.layers.%d.%s", l, q->name);
        if (l == 0 && q->role >= 0) t->block_role[q->role] = (signed char)(t->count - first);
        add_param(t, name, q->d0, q->d1, l + 1, q->split, 1, q->init);
    }
}

int zt_gpt2_param_table_tp(zt_param_table *t, const zt_gpt2_shape *s, int tp_rank, int tp_size, zt_err *err) {
    if (check_shape(s, tp_size, err)) return -1;
    if (tp_rank < 0 || tp_rank >= tp_size) return zt_fail(err, "tensor-parallel rank %d of %d", tp_rank, tp_size);
    int L = s->n_layer, C = s->n_embd, llama = zt_shape_is_llama(s);
    memset(t, 0, sizeof *t);
    t->params = zt_xcalloc((size_t)(3 + ZT_MAX_BLOCK_TENSORS * L + 3), sizeof *t->params);
    t->tp_rank = tp_rank;
    t->tp_size = tp_size;
    t->n_layer = L;
    t->n_segments = L + 2;
    t->n_embed_segments = 1;
    t->tiles = t->block_segments = 1;
    t->segment_lo = zt_xcalloc((size_t)t->n_segments + 1, sizeof *t->segment_lo);
    memset(t->block_role, -1, sizeof t->block_role);
    t->wpe = t->lm_head = -1;
    add_param(t, llama ? "model.embed_tokens.weight" : "transformer.wte.weight", s->vocab_size, C, 0, ZT_TP_ROWS, 1,
              ZT_INIT_NORMAL);
    if (!llama) {
        t->wpe = t->count;
        add_param(t, "transformer.wpe.weight", s->n_positions, C, 0, ZT_TP_WHOLE, 1, ZT_INIT_NORMAL);
    }
    t->embed_rows = t->params[0].shape[0];
    t->vocab_lo = t->params[0].split_lo;
    t->block_first = t->count;
    for (int l = 0; l < L; l++) {
        t->segment_lo[l + 1] = t->total;
        int before = t->count;
        if (llama) add_llama_block(t, s, l);
        else add_gpt2_block(t, s, l);
        t->block_size = t->count - before;
    }
    t->segment_lo[L + 1] = t->total;
    t->final_norm = t->count;
    add_param(t, llama ? "model.norm.weight" : "transformer.ln_f.weight", C, 0, L + 1, ZT_TP_WHOLE, 1, ZT_INIT_ONE);
    if (!llama) add_param(t, "transformer.ln_f.bias", C, 0, L + 1, ZT_TP_WHOLE, 1, ZT_INIT_ZERO);
    if (llama && s->untied) { /* the LM head rides with the final norm, vocabulary-parallel as the embedding */
        t->lm_head = t->count;
        add_param(t, "lm_head.weight", s->vocab_size, C, L + 1, ZT_TP_ROWS, 1, ZT_INIT_NORMAL);
    }
    t->segment_lo[L + 2] = t->total;
    return 0;
}

/* each tensor's first segment, from the bounds */
static void assign_segments(zt_param_table *t) {
    int seg = 0;
    for (int i = 0; i < t->count; i++) {
        while (seg + 1 < t->n_segments && t->segment_lo[seg + 1] <= t->params[i].offset) seg++;
        t->params[i].segment = seg;
    }
}

void zt_param_table_split_embedding(zt_param_table *t, int rows) {
    int V = t->params[0].shape[0], C = t->params[0].shape[1], old_e = t->n_embed_segments;
    if (rows <= 0 || rows > V) rows = V;
    int E = (V + rows - 1) / rows, rest = t->n_segments - old_e; /* the blocks' and ln_f's segments stay */
    size_t *lo = zt_xcalloc((size_t)(E + rest + 1), sizeof *lo);
    for (int k = 0; k < E; k++) lo[k] = (size_t)k * rows * C; /* the last also holds wpe */
    for (int s = 0; s <= rest; s++) lo[E + s] = t->segment_lo[old_e + s];
    free(t->segment_lo);
    t->segment_lo = lo;
    t->n_embed_segments = E;
    t->embed_rows = rows;
    t->n_segments = E + rest;
    assign_segments(t);
}

void zt_param_table_tile_linears(zt_param_table *t, int tiles) {
    if (tiles <= 1) return;
    int L = t->n_layer, E = t->n_embed_segments, K = 4 * tiles;
    size_t *lo = zt_xcalloc((size_t)(E + L * K + 2), sizeof *lo);
    memcpy(lo, t->segment_lo, (size_t)E * sizeof *lo);
    static const int linears[4] = {P_QKVW, P_PROJW, P_FCW, P_FCPROJW};
    for (int l = 0; l < L; l++) {
        const zt_param_info *p = zt_block_params(t, l);
        for (int j = 0; j < 4; j++) {
            const zt_param_info *w = &p[t->block_role[linears[j]]];
            size_t rows = (size_t)zt_linear_rows(t, p, linears[j]) / (size_t)tiles, cols = (size_t)w->shape[1];
            for (int k = 0; k < tiles; k++) lo[E + l * K + j * tiles + k] = w->offset + (size_t)k * rows * cols;
        }
        lo[E + l * K] = p[t->block_role[P_LN1W]].offset; /* ln_1 rides with c_attn's first tile */
    }
    lo[E + L * K] = t->segment_lo[t->n_segments - 1]; /* ln_f */
    lo[E + L * K + 1] = t->total;
    free(t->segment_lo);
    t->segment_lo = lo;
    t->tiles = tiles;
    t->block_segments = K;
    t->n_segments = E + L * K + 1;
    assign_segments(t);
}

void zt_param_table_free(zt_param_table *t) {
    free(t->params);
    free(t->segment_lo);
    memset(t, 0, sizeof *t);
}

/* GPT-2's init: LayerNorm weights 1, biases 0, other weights N(0, 0.02) (residual projections
 * N(0, 0.02/sqrt(2L))), drawn from one RNG stream over the WHOLE model's tensors in parameter order
 * (2 draws per value). Any element's value is found by jumping the RNG to its draw (zt_rng_jump), so
 * a range of the flat vector is filled on its own, in pieces that threads generate: the result is
 * bit-identical for any range, thread count or tensor-parallel rank. */
enum { ZT_INIT_PIECE = 1 << 20 };

/* values [from, from + n) of a random tensor whose stream starts `draws_before` draws into the RNG */
static void draw_normals(const zt_rng *base, uint64_t draws_before, float sd, size_t from, size_t n, float *dst) {
    long pieces = (long)((n + ZT_INIT_PIECE - 1) / ZT_INIT_PIECE);
#pragma omp parallel for schedule(dynamic, 1) if (pieces > 1)
    for (long c = 0; c < pieces; c++) {
        size_t a = (size_t)c * ZT_INIT_PIECE, b = a + ZT_INIT_PIECE < n ? a + ZT_INIT_PIECE : n;
        zt_rng rng = *base;
        zt_rng_jump(&rng, draws_before + 2 * (uint64_t)(from + a));
        for (size_t k = a; k < b; k++) dst[k] = sd * zt_rng_normal(&rng);
    }
}

/* elements [a, b) of this rank's part p of a random tensor, into dst */
static void init_random_part(const zt_param_info *p, const zt_rng *base, uint64_t draws_before, float sd, size_t a,
                             size_t b, float *dst) {
    size_t cols = (size_t)zt_param_cols(p);
    if (p->split == ZT_TP_WHOLE) {
        draw_normals(base, draws_before, sd, a, b - a, dst);
    } else if (p->split == ZT_TP_ROWS) { /* whole rows: one contiguous run of the whole tensor, then padding */
        size_t real = (size_t)zt_tp_rows_in_whole(p) * cols, upto = b < real ? b : real;
        if (upto > a) draw_normals(base, draws_before, sd, (size_t)p->split_lo * cols + a, upto - a, dst);
        for (size_t k = upto > a ? upto : a; k < b; k++) dst[k - a] = 0.0f;
    } else { /* columns of each whole row: the whole rows drawn in order, this rank's columns taken */
        size_t wcols = (size_t)zt_param_full_cols(p), r0 = a / cols, r1 = (b - 1) / cols;
        float *whole = zt_xmalloc(wcols * sizeof *whole), *row = zt_xmalloc(cols * sizeof *row);
        zt_rng rng = *base;
        zt_rng_jump(&rng, draws_before + 2 * (uint64_t)(r0 * wcols));
        for (size_t r = r0; r <= r1; r++) {
            for (size_t k = 0; k < wcols; k++) whole[k] = sd * zt_rng_normal(&rng);
            zt_tp_take_row(p, whole, row);
            size_t x = r == r0 ? a - r * cols : 0, y = r == r1 ? b - r * cols : cols;
            memcpy(dst + (r * cols + x - a), row + x, (y - x) * sizeof *row);
        }
        free(whole);
        free(row);
    }
}

void zt_gpt2_init_range(const zt_param_table *t, const zt_gpt2_shape *s, uint64_t seed, size_t off, size_t n,
                        float *dst) {
    zt_rng base;
    zt_rng_seed(&base, seed);
    const float std = 0.02f, residual_std = 0.02f / sqrtf(2.0f * (float)s->n_layer);
    uint64_t draws_before = 0; /* RNG draws used by the whole random tensors before this one */
    for (int i = 0; i < t->count; i++) {
        const zt_param_info *p = &t->params[i];
        int random = p->init == ZT_INIT_NORMAL || p->init == ZT_INIT_RESIDUAL;
        size_t end = off + n, p_end = p->offset + p->numel;
        if (off < p_end && end > p->offset) { /* its elements [a, b) are in the range */
            size_t a = off > p->offset ? off - p->offset : 0, b = (end < p_end ? end : p_end) - p->offset;
            float *x = dst + (p->offset + a - off);
            if (random) {
                float sd = p->init == ZT_INIT_RESIDUAL ? residual_std : std;
                init_random_part(p, &base, draws_before, sd, a, b, x);
            } else {
                for (size_t k = 0; k < b - a; k++) x[k] = p->init == ZT_INIT_ONE ? 1.0f : 0.0f; /* norm weights 1 */
            }
        }
        if (random) draws_before += 2 * (uint64_t)p->full_shape[0] * (uint64_t)(p->ndim == 2 ? p->full_shape[1] : 1);
    }
}

void zt_gpt2_init(const zt_param_table *t, const zt_gpt2_shape *s, float *params, uint64_t seed) {
    zt_gpt2_init_range(t, s, seed, 0, t->total, params);
}

double zt_gpt2_flops_per_token(const zt_gpt2_shape *s, int T) {
    /* 6 FLOPs per parameter per token in the matmuls (2 forward + 4 backward), counting the LM head
     * once (tied or not), plus causal attention: 6 * L * T * C (QK^T and att V, forward + backward,
     * halved for the causal mask is ignored as in the PaLM convention). Per block: q|k|v, the output
     * projection and the MLP (GPT-2: 2 linears of 4 C; SwiGLU: 3 of intermediate_size). */
    double L = s->n_layer, C = s->n_embd, V = s->vocab_size, I = zt_shape_ffn(s);
    double mlp = zt_shape_is_llama(s) ? 3.0 * C * I : 2.0 * C * I;
    double matmul_params = L * ((double)C * zt_shape_qkv(s) + C * C + mlp) + V * C;
    return 6.0 * matmul_params + 6.0 * L * T * C;
}
