/* config_sizes.c — see config_sizes.h */
#include "engine/config_sizes.h"

#include <stdio.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/session.h"
#include "engine/zero_formula.h"
#include "model/gpt2.h"

/* The memory one rank computes in, in all: the device's, or the machine's on the CPU backend. */
static double compute_memory(const zt_backend *be) {
    size_t free_bytes = 0, total = 0;
    be->mem_info(&free_bytes, &total);
    if (total > 0) return (double)total;
    return (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
}

static int check_activations(const zt_config *cfg, const zt_gpt2_shape *shape, const zt_backend *be, zt_err *err) {
    int B = cfg->train_micro_batch_size_per_gpu, T = cfg->seq_len;
    size_t e = zt_dtype_size(be->compute_dtype);
    /* a first estimate in double: the exact sizes below are size_t products that a huge batch
     * would overflow */
    double rough = (double)B * T * ((double)shape->n_embd * (shape->n_layer + 2) + shape->padded_vocab) * (double)e;
    double need = rough;
    if (rough < 0x1p60) {
        zt_gpt2 plan;
        if (zt_gpt2_plan(&plan, shape, B, T, zt_act_ckpt_of(cfg), cfg->tp_size, e, err)) return -1;
        need = (double)(plan.act_bytes + plan.scratch_bytes);
    }
    double have = compute_memory(be);
    if (need <= have) return 0;
    /* the micro-batch where the config gave it, else the total it was derived from */
    const char *key = zt_config_was_set(cfg, "train_micro_batch_size_per_gpu") || !zt_config_was_set(cfg, "train_batch_size")
                          ? "train_micro_batch_size_per_gpu"
                          : "train_batch_size";
    char need_s[32], have_s[32];
    return zt_config_fail_key(cfg, key,
                              err, "the activations of a micro-batch of %d x %d tokens need %s per rank, more "
                                   "than the %s of %s memory in all (a smaller micro-batch, gradient "
                                   "accumulation or activation_checkpointing fit)",
                              B, T, zt_format_bytes(need, need_s, sizeof need_s),
                              zt_format_bytes(have, have_s, sizeof have_s), be->name);
}

/* Stage 3 as the session cuts it: the embedding in row blocks where the bound asks for it; under tensor
 * parallelism a rank's part (all are the same shape), partitioned over the world / tp_size
 * data-parallel ranks. */
static int check_stage3(const zt_config *cfg, int world, const zt_gpt2_shape *shape, zt_err *err) {
    zt_param_table table;
    if (zt_gpt2_param_table_tp(&table, shape, 0, cfg->tp_size, err)) return -1;
    zt_param_table_tile_linears(&table, cfg->tiled_in_splits);
    world /= cfg->tp_size;
    zt_engine_opts o = {.stage = 3,
                        .stage3_param_persistence_threshold = cfg->stage3_param_persistence_threshold,
                        .stage3_prefetch_bucket_size = cfg->stage3_prefetch_bucket_size,
                        .stage3_max_live_parameters = zt_zero3_live_bound(cfg->stage3_max_live_parameters)};
    zt_param_table_split_embedding(&table, zt_engine_embedding_rows(&table, &o));
    zt_stage3_plan w = zt_engine_stage3_plan(&table, &o);
    int rc = 0;
    size_t least = w.embed + w.largest + w.residents;
    double bound = o.stage3_max_live_parameters;
    if (bound > 0 && (double)least > bound) {
        char parts[128];
        if (table.n_embed_segments > 1)
            snprintf(parts, sizeof parts, "the largest segment %zu, with the embedding in row blocks of %d rows,",
                     w.largest, table.embed_rows);
        else
            snprintf(parts, sizeof parts, "embeddings %zu + the largest block %zu", w.embed, w.largest);
        rc = zt_config_fail_key(cfg, "zero_optimization.stage3_max_live_parameters", err,
                                "%.0f is below the least stage-3 working set, %zu elements (%s + persistent "
                                "segments %zu)", bound, least, parts, w.residents);
    }
    /* the largest piece of a segment that any rank holds: what one NVMe staging buffer must take */
    if (!rc && cfg->offload_param_device == ZT_OFFLOAD_NVME) {
        size_t shard = zt_zero_shard(table.total, world, ZT_SHARD_ALIGN), piece = 0;
        for (int s = 0; s < table.n_segments; s++) {
            size_t a = table.segment_lo[s], b = table.segment_lo[s + 1];
            for (size_t lo = a / shard * shard; lo < b; lo += shard) {
                size_t x = a > lo ? a : lo, y = b < lo + shard ? b : lo + shard;
                if (y - x > piece) piece = y - x;
            }
        }
        if ((double)piece > cfg->offload_param_buffer_size)
            rc = zt_config_fail_key(cfg, "zero_optimization.offload_param.buffer_size", err,
                                    "%.0f is smaller than the largest piece of a segment a rank holds on %d rank%s, "
                                    "%zu elements (the embeddings' or a block's share of the shard)",
                                    cfg->offload_param_buffer_size, world, world == 1 ? "" : "s", piece);
    }
    zt_param_table_free(&table);
    return rc;
}

int zt_config_check_sizes(const zt_config *cfg, int world, const zt_backend *be, zt_err *err) {
    zt_gpt2_shape shape = zt_shape_from_config(cfg);
    if (check_activations(cfg, &shape, be, err)) return -1;
    if (cfg->zero_stage == 3 && check_stage3(cfg, world, &shape, err)) return -1;
    return 0;
}
