/* gpt2.h — the GPT-2 model: its parameter table (Hugging Face names and shapes, one flat vector),
 * initialisation, and forward/backward over a batch with optional activation checkpointing.
 * The model never owns parameter or gradient memory: it asks a zt_param_source for each
 * segment's pointers, so ZeRO can hand it full buffers (stages 0-2) or gathered blocks (stage 3).
 * Under tensor parallelism (Megatron-LM) a rank's table is its part of the whole one (zt_tp_split)
 * and the model runs its heads, MLP columns and vocabulary rows, with the tensor-parallel group's
 * collectives in between (gpt2.c). The table and init are gpt2_params.c's, forward and backward
 * gpt2.c's. */
#ifndef ZT_GPT2_H
#define ZT_GPT2_H

#include <stddef.h>
#include <stdio.h>
#include "backend/backend.h"
#include "comm/comm.h"
#include "util/util.h"

#define ZT_MAX_PARAMS (1LL << 44) /* parameters a model may have: 17.6 T, far past any run, far below overflow */
#define ZT_BLOCK_ROLES 12 /* the parts a block may have (gpt2_internal.h) */
#define ZT_MAX_TP 64 /* tensor-parallel ranks at most (a node's GPUs, with room) */

/* The architecture's family (Hugging Face's model_type). GPT-2: learned positions, LayerNorm, GELU MLP,
 * biases everywhere, tied embeddings, Conv1D weights [in, out]. The Llama family (llama, qwen2,
 * mistral): rotary positions, RMSNorm, SwiGLU MLP, grouped-query attention, nn.Linear weights
 * [out, in], no biases but where the keys ask (qwen2: q/k/v always), embeddings tied or not. */
typedef enum { ZT_MODEL_GPT2 = 0, ZT_MODEL_LLAMA, ZT_MODEL_QWEN2, ZT_MODEL_MISTRAL } zt_model_type;

typedef struct zt_gpt2_shape {
    int n_layer, n_head, n_embd, vocab_size, n_positions;
    int padded_vocab; /* logits row stride: vocab_size rounded up to 128 (never visible outside) */
    /* the Llama family's parts (all zero for GPT-2: a shape that names only the five fields above is GPT-2's) */
    zt_model_type model_type;
    int n_kv_head;       /* num_key_value_heads (0: n_head) */
    int intermediate;    /* intermediate_size: the SwiGLU MLP's width */
    int untied;          /* tie_word_embeddings false: an lm_head of its own */
    int qkv_bias, o_bias, mlp_bias; /* biases of q/k/v, o_proj, the MLP's three linears */
    float rope_theta, rms_norm_eps;
    /* rope_scaling of rope_type llama3 (rope_factor 0: none) */
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max;
    int sliding_window;  /* mistral's (0: none); seq_len must not pass it */
} zt_gpt2_shape;

static inline int zt_shape_is_llama(const zt_gpt2_shape *s) { return s->model_type != ZT_MODEL_GPT2; }
static inline int zt_shape_kv_heads(const zt_gpt2_shape *s) { return s->n_kv_head > 0 ? s->n_kv_head : s->n_head; }
static inline int zt_shape_head_dim(const zt_gpt2_shape *s) { return s->n_embd / s->n_head; }
/* the MLP's hidden width: 4 C for GPT-2 */
static inline int zt_shape_ffn(const zt_gpt2_shape *s) { return zt_shape_is_llama(s) ? s->intermediate : 4 * s->n_embd; }
/* the q|k|v row width: 3 C for GPT-2 */
static inline int zt_shape_qkv(const zt_gpt2_shape *s) {
    return (s->n_head + 2 * zt_shape_kv_heads(s)) * zt_shape_head_dim(s);
}

/* Tensor parallelism (Megatron-LM's split of GPT-2 over tp ranks): how a rank's tensor is cut from
 * the whole one. A tensor is seen as rows x columns ([in, out] for Conv1D weights, [1, n] for 1-D ones):
 *   WHOLE   every rank holds all of it (LayerNorms, wpe, the row-parallel linears' biases, ln_f);
 *   ROWS    rows [split_lo, split_lo + rows) (attn.c_proj and mlp.c_proj weights: row-parallel;
 *           wte: vocabulary-parallel, rank r holding ids [r ceil(V/tp), ...));
 *   COLUMNS split_pieces pieces of columns / split_pieces each, piece k being whole columns
 *           [k split_stride + split_lo, ...) (c_attn: q, k and v of this rank's heads, 3 pieces;
 *           mlp.c_fc: one piece), for the weight and its bias alike. */
typedef enum { ZT_TP_WHOLE, ZT_TP_ROWS, ZT_TP_COLUMNS } zt_tp_split;

/* How a tensor starts: N(0, 0.02), the residual projections' N(0, 0.02 / sqrt(2 L)) (GPT-2's), ones
 * (norm weights), zeros (biases). */
typedef enum { ZT_INIT_NORMAL, ZT_INIT_RESIDUAL, ZT_INIT_ONE, ZT_INIT_ZERO } zt_param_init;

/* One named tensor of the flat parameter vector. */
typedef struct zt_param_info {
    char name[64];       /* Hugging Face GPT2LMHeadModel name, e.g. transformer.h.0.attn.c_attn.weight */
    int ndim;
    int shape[2];        /* Conv1D layout: weights are [in, out]; this rank's part under tensor parallelism */
    size_t offset;       /* in elements, into the flat vector */
    size_t numel;
    int segment;         /* its first segment (see zt_param_table) */
    int decay;           /* weight decay applies (2-D weights) */
    int full_shape[2];   /* the whole tensor's shape (= shape unless split) */
    zt_tp_split split;   /* see zt_tp_split */
    int split_lo, split_pieces, split_stride;
    zt_param_init init;  /* how init fills it */
} zt_param_info;

/* a tensor as rows x columns (1-D: one row) */
static inline int zt_param_rows(const zt_param_info *p) { return p->ndim == 2 ? p->shape[0] : 1; }
static inline int zt_param_cols(const zt_param_info *p) { return p->ndim == 2 ? p->shape[1] : p->shape[0]; }
static inline int zt_param_full_cols(const zt_param_info *p) { return p->ndim == 2 ? p->full_shape[1] : p->full_shape[0]; }
/* this rank's rows that are rows of the whole tensor: all of them, but for wte's last tensor-parallel
 * ranks, whose parts end in padding rows past the vocabulary (every rank's part has the same shape, so
 * that the ranks' ZeRO partitions, and so the order of their data-parallel sums, are the same) */
static inline int zt_tp_rows_in_whole(const zt_param_info *p) {
    int rows = zt_param_rows(p);
    if (p->split != ZT_TP_ROWS) return rows;
    int left = p->full_shape[0] - p->split_lo;
    return left < rows ? (left > 0 ? left : 0) : rows;
}
/* the whole tensor's row that this rank's row `row` is part of */
static inline int zt_tp_whole_row(const zt_param_info *p, int row) { return p->split == ZT_TP_ROWS ? p->split_lo + row : row; }
/* this rank's columns of one row, taken from the whole row / put into the whole row */
void zt_tp_take_row(const zt_param_info *p, const float *whole_row, float *row);
void zt_tp_put_row(const zt_param_info *p, const float *row, float *whole_row);

/* Segments are contiguous ranges of the flat vector, in the order forward first uses them:
 * 0..E-1 the embeddings (wte in blocks of embed_rows vocabulary rows, wpe with the last), then K per
 * transformer block (E + l K .. E + l K + K - 1), then the final LayerNorm. K is 1 (a block is one
 * segment) unless the block linears are tiled (zt_param_table_tile_linears). E is 1 (the whole embedding one segment) unless
 * stage 3 must gather the tied embedding in row blocks to keep within stage3_max_live_parameters
 * (zt_param_table_split_embedding). */
typedef struct zt_param_table {
    zt_param_info *params;
    int count;
    int tp_rank, tp_size;    /* tensor parallelism: this table is rank tp_rank's part (1: the whole model) */
    int vocab_lo;            /* the first vocabulary id of this rank's wte rows (0 without tensor parallelism) */
    size_t total;            /* elements in the flat vector */
    int n_layer;
    int n_segments;          /* E + L K + 1 */
    int tiles;               /* tiled linears: row tiles of each block linear (1: none) */
    int block_segments;      /* K: segments per block, 1, or 4 tiles when tiled (zt_param_table_tile_linears) */
    int n_embed_segments;    /* E */
    int embed_rows;          /* vocabulary rows per embedding segment (the last may have fewer) */
    size_t *segment_lo;      /* [n_segments + 1]; segment s is [segment_lo[s], segment_lo[s+1]) */
    /* where the parts are, by table index: the learned positions (GPT-2's wpe; -1: rotary), block 0's
     * first tensor and the tensors per block, each block part's place in a block (block_role, -1:
     * absent; gpt2_internal.h names the parts), the final norm's weight, an untied LM head (-1: tied
     * to the token embedding, entry 0) */
    int wpe, block_first, block_size, final_norm, lm_head;
    signed char block_role[ZT_BLOCK_ROLES];
} zt_param_table;

int zt_gpt2_param_table(zt_param_table *table, const zt_gpt2_shape *shape, zt_err *err);
/* Tensor-parallel rank tp_rank's part of the model (tp_size 1: the whole table). Same tensors, names and
 * order as the whole table; shapes, offsets and totals are this rank's. n_head must divide by tp_size. */
int zt_gpt2_param_table_tp(zt_param_table *table, const zt_gpt2_shape *shape, int tp_rank, int tp_size, zt_err *err);
/* This rank's fp32 vector from the whole one (whole table: tp_size 1; padding rows zero). */
void zt_tp_take_vector(const zt_param_table *part, const zt_param_table *whole, const float *whole_vec, float *part_vec);
void zt_param_table_free(zt_param_table *table);
/* Re-cuts the embedding into segments of `rows` vocabulary rows (0 or >= vocab: one segment). The
 * flat vector does not move; only segment numbers and bounds change. */
void zt_param_table_split_embedding(zt_param_table *table, int rows);
/* Tiled linears (zero_optimization.tiled_linear.in_splits): cuts each block into 4 tiles segments, one
 * per row tile of c_attn, attn.c_proj, c_fc and mlp.c_proj weights (rows are contiguous in the flat
 * vector, so nothing moves); the LayerNorms and biases ride with the tile next to them (ln_1 with
 * c_attn's first, c_attn's bias with its last, attn.c_proj's bias and ln_2 with its last, each
 * other bias with its linear's last). tiles must divide every linear's rows (n_embd / tp). Call
 * before zt_param_table_split_embedding. The model then gathers, uses and releases one tile after
 * another (stage 3's working set is a tile, not a block). */
void zt_param_table_tile_linears(zt_param_table *table, int tiles);
/* What stages 2-3 size their gradient buffers by (zero_comm.c allocates them; `estimate` and the
 * engine's choice of gradient path count the same): the embedding segments together, the largest
 * other segment (a block, or a tile of one), and the largest segment of all (a bucket's landing zone). */
typedef struct zt_segment_sizes {
    size_t embed, block, any;
} zt_segment_sizes;
static inline zt_segment_sizes zt_param_table_segment_sizes(const zt_param_table *t) {
    zt_segment_sizes z = {t->segment_lo[t->n_embed_segments] - t->segment_lo[0], 0, 0};
    for (int s = 0; s < t->n_segments; s++) {
        size_t len = t->segment_lo[s + 1] - t->segment_lo[s];
        if (len > z.any) z.any = len;
        if (s >= t->n_embed_segments && len > z.block) z.block = len;
    }
    return z;
}
static inline int zt_segment_of_block(const zt_param_table *t, int layer) {
    return t->n_embed_segments + layer * t->block_segments;
}
static inline int zt_segment_of_lnf(const zt_param_table *t) {
    return t->n_embed_segments + t->n_layer * t->block_segments;
}
/* vocabulary rows [lo, hi) of embedding segment k */
static inline void zt_embed_segment_rows(const zt_param_table *t, int k, int *lo, int *hi) {
    int V = t->params[0].shape[0];
    *lo = k * t->embed_rows;
    *hi = k == t->n_embed_segments - 1 ? V : (k + 1) * t->embed_rows;
}
/* GPT-2 init in fp32: weights N(0, 0.02), residual projections (attn.c_proj, mlp.c_proj weights)
 * N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1. One RNG stream over the flat vector in table
 * order, so the result does not depend on how the vector is later sharded. */
void zt_gpt2_init(const zt_param_table *table, const zt_gpt2_shape *shape, float *params, uint64_t seed);
/* The same values for flat elements [off, off + n) of the table only (a tensor-parallel rank's table:
 * its part of the whole model's values), into dst[0 .. n): what the engine fills its parts from,
 * chunk by chunk, so that no whole fp32 vector is ever built. */
void zt_gpt2_init_range(const zt_param_table *table, const zt_gpt2_shape *shape, uint64_t seed, size_t off, size_t n,
                        float *dst);

/* Where the model gets its parameters and puts its gradients, segment by segment. */
typedef struct zt_param_source {
    void *ctx;
    /* compute-dtype parameters of segment s, valid until release(s) */
    void *(*acquire)(void *ctx, int segment);
    void (*release)(void *ctx, int segment);
    /* compute-dtype gradient buffer of segment s; backward accumulates into it */
    void *(*grads)(void *ctx, int segment);
    /* backward has finished segment s for this micro-batch (its gradients are final) */
    void (*grads_done)(void *ctx, int segment);
    /* forward is about to use segment s soon (stage 3 prefetch); may be NULL */
    void (*prefetch)(void *ctx, int segment);
} zt_param_source;

/* Activation checkpointing (DeepSpeed's activation_checkpointing section): enabled recomputes each
 * segment's blocks in backward from its kept input; number_checkpoints segment inputs are kept (0:
 * every block's); cpu keeps them in host memory (pinned on GPUs) instead of on the device; partition
 * keeps 1/tp of each on each tensor-parallel rank (no effect without tensor parallelism). */
typedef struct zt_act_ckpt {
    int enabled, number_checkpoints, cpu, partition;
    int tiles; /* tiled linears' in_splits: > 1 adds the tiled forward's fp32 accumulator to the scratch */
} zt_act_ckpt;

/* Activation memory and scratch for one micro-batch shape [B, T]. */
typedef struct zt_gpt2 {
    const zt_backend *be;
    zt_gpt2_shape shape;
    const zt_param_table *table;
    int B, T;
    int recompute;          /* activation checkpointing on */
    int segment_layers;     /* layers per checkpoint segment (all L when off) */
    int cpu_checkpointing;  /* segment inputs kept in host memory (recompute on) */
    int partition_activations; /* segment inputs kept as 1/tp chunks (recompute on, tp_size > 1) */
    int residual_slots;     /* residual buffers on the device: L + 1, or segment_layers + 1 with cpu_checkpointing */
    size_t act_host_bytes;  /* host bytes of the kept segment inputs with cpu_checkpointing (pinned) */
    size_t act_store_bytes; /* device bytes of dev_ckpt (part of act_bytes) */
    size_t act_bytes;       /* device bytes of activations kept (with the setting in use) */
    size_t act_bytes_full;  /* ... and what keeping everything would take */
    size_t act_bytes_ckpt;  /* ... and what checkpointing every block would take */
    size_t scratch_bytes;   /* gradient scratch and token buffers, besides act_bytes */
    size_t elem_size;       /* bytes of the compute dtype */
    /* tensor parallelism (tp_size 1: none): this rank's heads, MLP columns and vocabulary rows */
    int tp_size, tp_rank;
    zt_comm *tp;            /* the tensor-parallel group's comm on the model's buffers (NULL: tp_size 1) */
    int vocab_lo, vocab_rows; /* this rank's vocabulary ids [vocab_lo, vocab_lo + vocab_rows) */
    int logits_stride;      /* row stride of logits: vocab_rows rounded up to 128 */

    /* device buffers */
    int *tokens, *targets;  /* [B*T] */
    void *residual;         /* [residual_slots][N*C]: block inputs (and the final block output); res_l in slot
                               l % residual_slots */
    void *host_ckpt;        /* [segments][N*C / parts] host: each segment's input or its chunk (cpu_checkpointing) */
    void *dev_ckpt;         /* device: [segments][N*C / tp] the chunks (partition_activations alone), or with
                               cpu_checkpointing [N*C / parts] the landing buffer of the input coming back */
    void *layer_acts;       /* [segment_layers] x per-layer activations, see gpt2.c */
    size_t layer_act_elems; /* compute-dtype elements per layer slot */
    float *layer_stats;     /* [segment_layers][4 * N]: ln1 mean/rstd, ln2 mean/rstd */
    void *lnf;              /* [N*C] */
    float *lnf_stats;       /* [2*N] */
    void *logits;           /* [N * logits_stride], dlogits in place after backward starts */
    float *xent_stats, *xent_all; /* tensor parallelism: [3N] this rank's cross-entropy row statistics, [tp][3N] all */
    void *logits_whole;     /* tensor parallelism: [tp][logits_stride] one row's logits from every tp rank */
    float *losses;          /* [N] per-token losses (device) */
    float *host_losses;     /* [N] host copy */
    void *scratch;          /* gradient scratch, see gpt2.c */
    float *tile_acc;        /* tiled linears: the forward's fp32 sum of the tiles [N, 4C/tp] (NULL untiled) */
    float *rope_cs;         /* the Llama family: rotary cos | sin per position, fp32 [T, head_dim] (zt_rope_table) */
    size_t scratch_elems;
} zt_gpt2;

/* table is this rank's part (zt_gpt2_param_table_tp); with table->tp_size > 1, tp is the tensor-parallel
 * group's comm over the backend's buffers (the model's all-reduces and its cross-entropy's all-gather). */
int zt_gpt2_create(zt_gpt2 *m, const zt_backend *be, const zt_gpt2_shape *shape, const zt_param_table *table,
                   zt_comm *tp, int B, int T, zt_act_ckpt ckpt, zt_err *err);
void zt_gpt2_destroy(zt_gpt2 *m);
/* Fills only the shape and byte counts of create (no backend, nothing allocated): for estimates. */
int zt_gpt2_plan(zt_gpt2 *m, const zt_gpt2_shape *shape, int B, int T, zt_act_ckpt ckpt, int tp_size, size_t elem_size,
                 zt_err *err);

/* Forward over host tokens [B*T] (and targets, or NULL for logits only). Returns the mean loss over
 * the B*T positions (0 when targets is NULL). With dloss != 0 (d total loss / d token loss: 1 / tokens
 * in the global batch for a mean loss) the fused softmax/cross-entropy also leaves d(loss)/d(logits)
 * in m->logits, ready for zt_gpt2_backward; otherwise m->logits holds the logits. */
float zt_gpt2_forward(zt_gpt2 *m, const zt_param_source *src, const int *tokens, const int *targets, float dloss);
/* Backward of the last forward (which must have had dloss != 0). Accumulates into src->grads(). */
void zt_gpt2_backward(zt_gpt2 *m, const zt_param_source *src);
/* The whole vocabulary's logits of row `row` of the last forward (targets NULL), as fp32 on the host
 * (out: vocab_size floats). Under tensor parallelism each rank holds only its vocabulary's logits, so
 * this is collective over the tp group: every tp rank must call it, and all get the same row. */
void zt_gpt2_logits_row(zt_gpt2 *m, int row, float *out);

/* Hugging Face's model_type of a family: "gpt2", "llama", "qwen2", "mistral" */
static inline const char *zt_model_type_name(zt_model_type t) {
    static const char *const names[] = {"gpt2", "llama", "qwen2", "mistral"};
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}
/* the family as banners name it: "GPT-2", or e.g. "llama KV8 I8192" (key/value heads, MLP width) */
static inline const char *zt_shape_family(const zt_gpt2_shape *s, char *buf, size_t cap) {
    if (!zt_shape_is_llama(s)) snprintf(buf, cap, "GPT-2");
    else snprintf(buf, cap, "%s KV%d I%d", zt_model_type_name(s->model_type), zt_shape_kv_heads(s), s->intermediate);
    return buf;
}
/* The rotary angles for positions 0..T-1, fp32 [T, head_dim]: row t holds cos(t f_i) at i and sin(t f_i)
 * at head_dim/2 + i, f_i = rope_theta^(-2i / head_dim) (fp32, as Hugging Face computes them), with
 * Llama 3's rope_scaling when rope_factor > 0 (long wavelengths divided by the factor, short ones kept,
 * the band between blended). */
void zt_rope_table(const zt_gpt2_shape *shape, int T, float *cos_sin);

/* FLOPs of one training step's forward+backward per token (6N + attention), PaLM appendix B style */
double zt_gpt2_flops_per_token(const zt_gpt2_shape *shape, int T);

#endif
