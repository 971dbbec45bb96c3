/* config_checks.c — the checks between keys, run once after every file key and override is applied
 * and the DeepSpeed rules have filled their "auto" values (zt_config_cross_checks, config_schema.h):
 * the scheduler's type and parameters, divisibility of the model's sizes by heads, tensor-parallel
 * ranks and tiles, lengths against positions, exclusive precisions, Adam's L2 mode. Each error
 * names the position where the key it blames was last set (of two, the one set later). */
#include "config/config_schema.h"

#include <string.h>

/* whichever of a, b was set last (NULL if neither) */
static const char *latest(const zt_loader *L, const char *a, const char *b) {
    int ia = zt_loader_rec_index(L, a), ib = zt_loader_rec_index(L, b);
    if (ia < 0 && ib < 0) return NULL;
    return ia > ib ? a : b;
}

/* offload_optimizer.delayed_update (twin_flow.c says why each combination is refused) */
static int delayed_update_checks(zt_loader *L) {
    const zt_config *c = L->cfg;
    const char *k = "zero_optimization.offload_optimizer.delayed_update";
    if (!c->offload_delayed_update) return 0;
    if (c->offload_super && zt_loader_rec_index(L, "zero_optimization.offload_optimizer.super_offload") >= 0)
        return zt_fail_rec(L, latest(L, k, "zero_optimization.offload_optimizer.super_offload"),
                           "super_offload and delayed_update cannot both be on: the speculative step gives the "
                           "exact results, delayed_update changes them (set one of them false)");
    if (c->offload_device != ZT_OFFLOAD_CPU)
        return zt_fail_rec(L, k, "needs zero_optimization.offload_optimizer.device cpu: only the host part's update "
                                 "is delayed, and not yet through the NVMe swap file");
    if (c->offload_param_device != ZT_OFFLOAD_NONE)
        return zt_fail_rec(L, k, "not supported with zero_optimization.offload_param: the CPU Adam writes the offloaded "
                                 "parameters in place while the next step's forward reads them");
    if (c->tp_size > 1 && c->offload_ratio != 1.0)
        return zt_fail_rec(L, k, "with tensor_parallel.tp_size %d needs offload_optimizer.ratio 1: at ratio %s the "
                                 "delayed parameters would depend on the tensor-parallel split", c->tp_size,
                           c->offload_ratio < 0 ? "auto" : "< 1");
    return 0;
}

/* offload_optimizer.gradients host: the path exists only where the whole optimizer shard is updated in
 * host memory from a gradient shard of its own (engine.c: gradients_path) */
static int gradients_checks(zt_loader *L) {
    const zt_config *c = L->cfg;
    if (c->offload_gradients != ZT_GRADS_HOST) return 0;
    const char *k = "zero_optimization.offload_optimizer.gradients";
    if (c->zero_stage < 2 || c->offload_device != ZT_OFFLOAD_CPU || c->offload_ratio != 1.0 || c->offload_delayed_update)
        return zt_fail_rec(L, k, "host needs zero_optimization.stage 2 or 3 with offload_optimizer.device cpu at ratio 1 "
                                 "(set, not auto) and without delayed_update (it is stage %d, device %s, ratio %s%s)",
                           c->zero_stage, c->offload_device == ZT_OFFLOAD_CPU ? "cpu" : c->offload_device == ZT_OFFLOAD_NVME ? "nvme" : "none",
                           c->offload_ratio < 0 ? "auto" : c->offload_ratio == 1.0 ? "1" : "< 1",
                           c->offload_delayed_update ? ", delayed_update on" : "");
    return 0;
}

int zt_config_cross_checks(zt_loader *L) {
    zt_config *c = L->cfg;
    if (zt_config_deepspeed_finish(L)) return -1;

    if (L->sched_seen && !L->sched_type_given)
        return zt_fail_rec(L, "scheduler", "type is required (WarmupLR, WarmupDecayLR or WarmupCosineLR)");
    if (c->scheduler != ZT_SCHED_CONSTANT) {
        const char *const *ok = zt_sched_params_of(c->scheduler);
        const char *pre = "scheduler.params.";
        for (int i = 0; i < L->nrec; i++) {
            if (strncmp(L->recs[i].path, pre, strlen(pre)) != 0) continue;
            const char *name = L->recs[i].path + strlen(pre);
            int found = 0;
            for (int j = 0; ok[j]; j++) found |= !strcmp(ok[j], name);
            if (!found) {
                char list[256] = "";
                for (int j = 0; ok[j]; j++) {
                    size_t len = strlen(list);
                    snprintf(list + len, sizeof list - len, "%s%s", j ? ", " : "", ok[j]);
                }
                return zt_fail(L->err, "%s: not a parameter of %s (it takes %s)", L->recs[i].where,
                               zt_enum_name(zt_sched_types, c->scheduler), list);
            }
        }
        if (c->warmup_max_lr < 0) c->warmup_max_lr = c->lr;
        /* a decay that ends before its warm-up does: the rate would sit at the floor from then on */
        int decays = c->scheduler == ZT_SCHED_WARMUP_DECAY_LR || c->scheduler == ZT_SCHED_WARMUP_COSINE_LR;
        if (decays && c->total_num_steps > 0 && c->total_num_steps < c->warmup_num_steps)
            return zt_fail_rec(L, latest(L, "scheduler.params.total_num_steps", "scheduler.params.warmup_num_steps"),
                               "total_num_steps %ld is below warmup_num_steps %ld: %s would end its decay before the "
                               "warm-up ends and keep the floor rate for the rest of the run", c->total_num_steps,
                               c->warmup_num_steps, zt_enum_name(zt_sched_types, c->scheduler));
    }

    if (L->act_seen && !L->act_enabled_given) c->ckpt_enabled = 1;

    if (c->n_embd % c->n_head != 0) {
        const char *k = latest(L, "model.n_embd", "model.n_head");
        if (k && !strcmp(k, "model.n_head"))
            return zt_fail_rec(L, k, "expected a divisor of model.n_embd (%d), got %d", c->n_embd, c->n_head);
        return zt_fail_rec(L, "model.n_embd", "expected a multiple of model.n_head (%d), got %d", c->n_head,
                           c->n_embd);
    }
    if (c->n_head % c->tp_size != 0) {
        const char *k = latest(L, "tensor_parallel.tp_size", "tensor_parallel.autotp_size");
        return zt_fail_rec(L, k ? k : "tensor_parallel.tp_size",
                           "expected a divisor of model.n_head (%d): heads are split across tensor-parallel ranks, got %d",
                           c->n_head, c->tp_size);
    }
    if (c->tiled_out_splits != 1)
        return zt_fail_rec(L, "zero_optimization.tiled_linear.out_splits",
                           "only 1 is implemented: tiles are row ranges of the weights (in_splits), which lie contiguous in "
                           "the flat parameter vector; got %d", c->tiled_out_splits);
    if (c->tiled_in_splits > 1 && (c->n_embd / c->tp_size) % c->tiled_in_splits != 0)
        return zt_fail_rec(L, "zero_optimization.tiled_linear.in_splits",
                           "expected a divisor of the rows of every block linear, n_embd / tensor_parallel.tp_size = %d; "
                           "got %d", c->n_embd / c->tp_size, c->tiled_in_splits);
    if ((c->vocab_size + c->tp_size - 1) / c->tp_size * (c->tp_size - 1) >= c->vocab_size)
        return zt_fail_rec(L, "tensor_parallel.tp_size", "too many ranks for model.vocab_size %d: a rank would hold no "
                                                          "vocabulary rows", c->vocab_size);
    if (c->seq_len > c->n_positions) {
        const char *k = latest(L, "data.seq_len", "model.n_positions");
        if (k && !strcmp(k, "model.n_positions"))
            return zt_fail_rec(L, k, "expected >= data.seq_len (%d), got %d", c->seq_len, c->n_positions);
        return zt_fail_rec(L, "data.seq_len", "expected <= model.n_positions (%d), got %d", c->n_positions,
                           c->seq_len);
    }
    if (c->ckpt_number_checkpoints > c->n_layer) {
        const char *k = latest(L, "activation_checkpointing.number_checkpoints", "model.n_layer");
        if (k && !strcmp(k, "model.n_layer"))
            return zt_fail_rec(L, k, "expected >= activation_checkpointing.number_checkpoints (%d), got %d",
                            c->ckpt_number_checkpoints, c->n_layer);
        return zt_fail_rec(L, "activation_checkpointing.number_checkpoints",
                        "expected an integer in [0, model.n_layer = %d], got %d", c->n_layer,
                        c->ckpt_number_checkpoints);
    }
    if (c->bf16_enabled && c->fp16_enabled) {
        const char *k = latest(L, "bf16.enabled", "fp16.enabled");
        return zt_fail_rec(L, k ? k : "fp16.enabled", "bf16 and fp16 cannot both be enabled");
    }
    if (delayed_update_checks(L)) return -1;
    if (gradients_checks(L)) return -1;
    if (!L->adam_w_mode && c->weight_decay > 0 && !strcmp(c->optimizer_type, "Adam")) {
        const char *k = latest(L, "optimizer.params.adam_w_mode", "optimizer.params.weight_decay");
        return zt_fail_rec(L, k ? k : "optimizer.params.adam_w_mode",
                        "adam_w_mode false with weight_decay %g asks for L2-coupled Adam, which zerotrain does "
                        "not support (use adam_w_mode true or type AdamW for decoupled weight decay, or "
                        "weight_decay 0)", (double)c->weight_decay);
    }
    return 0;
}
