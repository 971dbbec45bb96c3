/* config_deepspeed.c — the rules that let real DeepSpeed configs load: Hugging Face's "auto"
 * placeholders filled in (and named in one info line), values that ask for what zerotrain does not
 * implement yet refused at their file position, accepted keys without effect on this run named in
 * one note, data_types.grad_accum_dtype checked against the backend, and DeepSpeed's batch
 * rule. Which keys exist, their
 * types and ranges are in config_keys.c; this file only holds the policies that span keys. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_schema.h"

/* whether the latest value of path came from "auto" */
static int latest_is_auto(const zt_loader *L, const char *path) {
    int i = zt_loader_rec_index(L, path);
    return i >= 0 && L->recs[i].is_auto;
}

/* "auto" values that depend on the model, as Hugging Face's Trainer derives them from the hidden
 * size; every other "auto" key already holds its default (config.c) */
static void derive_auto(zt_loader *L) {
    zt_config *c = L->cfg;
    double h = (double)c->n_embd;
    if (latest_is_auto(L, "zero_optimization.reduce_bucket_size")) c->reduce_bucket_size = h * h;
    if (latest_is_auto(L, "zero_optimization.stage3_prefetch_bucket_size"))
        c->stage3_prefetch_bucket_size = floor(0.9 * h * h);
    if (latest_is_auto(L, "zero_optimization.stage3_param_persistence_threshold"))
        c->stage3_param_persistence_threshold = 10.0 * h;
    zt_sb names = {0};
    for (const zt_keydef *d = zt_config_keys; d->kind != K_END; d++)
        if ((d->flags & F_AUTO) && latest_is_auto(L, d->path))
            zt_sb_printf(&names, "%s%s", names.n ? " " : "", d->path);
    free(c->auto_keys);
    c->auto_keys = names.p;
}

/* values for features that zerotrain's engine does not implement yet, and combinations it refuses:
 * refused where they were set */
static int refuse_not_implemented(const zt_loader *L) {
    const zt_config *c = L->cfg;
    if (c->offload_device == ZT_OFFLOAD_NVME && !(c->offload_nvme_path && *c->offload_nvme_path))
        return zt_fail_rec(L, "zero_optimization.offload_optimizer.device",
                           "device nvme needs zero_optimization.offload_optimizer.nvme_path (a directory on the NVMe "
                           "drive for the swap files)");
    if (c->offload_param_device == ZT_OFFLOAD_NVME && !(c->offload_param_nvme_path && *c->offload_param_nvme_path))
        return zt_fail_rec(L, "zero_optimization.offload_param.device",
                           "device nvme needs zero_optimization.offload_param.nvme_path (a directory on the NVMe drive "
                           "for the parameter swap files)");
    if (c->offload_param_device != ZT_OFFLOAD_NONE && c->zero_stage != 3)
        return zt_fail_rec(L, "zero_optimization.offload_param.device",
                           "parameter offload needs zero_optimization.stage 3 (it is %d): only stage 3 partitions "
                           "the parameters", c->zero_stage);
    if (c->aio_use_gds)
        return zt_fail_rec(L, "aio.use_gds", "GPUDirect Storage is not implemented in zerotrain (use false: swaps go "
                                             "through pinned host buffers)");
    return 0;
}

/* whether d's value differs from its default (compared as effective-config text) */
static int differs_from_default(const zt_keydef *d, const zt_config *c) {
    if (d->off == ZT_NOF) return 1;
    zt_config def;
    memset(&def, 0, sizeof def);
    zt_key_set_default(&def, d);
    zt_sb a = {0}, b = {0};
    zt_key_put_value(&a, d, c);
    zt_key_put_value(&b, d, &def);
    int differ = strcmp(a.p, b.p) != 0;
    free(a.p);
    free(b.p);
    zt_config_free(&def);
    return differ;
}

/* one note naming the keys that were set (to other than their default) and checked but do not
 * change this run */
static void note_inert(const zt_loader *L) {
    zt_sb names = {0};
    for (const zt_keydef *d = zt_config_keys; d->kind != K_END; d++)
        if ((d->flags & F_INERT) && zt_loader_rec_index(L, d->path) >= 0 && differs_from_default(d, L->cfg))
            zt_sb_printf(&names, "%s%s", names.n ? ", " : "", d->path);
    if (names.p)
        zt_info("%s: note: read, checked and kept, without effect on this run (ZeRO-Infinity and NVMe tuning, or "
                "already how zerotrain works): %s",
                L->cfg->source_path ? L->cfg->source_path : "--set", names.p);
    free(names.p);
}

int zt_config_deepspeed_finish(zt_loader *L) {
    derive_auto(L);
    if (refuse_not_implemented(L)) return -1;
    note_inert(L);
    return 0;
}

void zt_config_log_auto(const zt_config *c) {
    if (!c->auto_keys) return;
    zt_sb line = {0};
    const char *p = c->auto_keys;
    while (*p) {
        const char *end = strchr(p, ' ');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char path[128];
        snprintf(path, sizeof path, "%.*s", (int)n, p);
        const zt_keydef *d = zt_key_find(path);
        if (d && d->off != ZT_NOF) {
            zt_sb_printf(&line, "%s%s = ", line.n ? ", " : "", path);
            zt_key_put_value(&line, d, c);
        }
        p += n;
        while (*p == ' ') p++;
    }
    if (line.p) zt_info("config: \"auto\" filled in: %s", line.p);
    free(line.p);
}

int zt_config_check_grad_accum(const zt_config *c, const char *backend, const char *compute_dtype, zt_err *err) {
    static const char *const names[] = {"", "fp32", "bf16", "fp16"};
    if (c->grad_accum_dtype == ZT_ACCUM_DEFAULT || !strcmp(names[c->grad_accum_dtype], compute_dtype)) return 0;
    return zt_fail(err,
                   "data_types.grad_accum_dtype: %s is not implemented yet on the %s backend, which accumulates "
                   "gradients in %s (set %s or leave the key out)",
                   names[c->grad_accum_dtype], backend, compute_dtype, compute_dtype);
}

int zt_config_check_batch(zt_config *c, int world_size, zt_err *err) {
    if (world_size < 1) return zt_fail(err, "world size %d: expected >= 1", world_size);
    if (world_size % c->tp_size)
        return zt_fail(err, "tensor_parallel.tp_size %d does not divide the %d ranks (each tensor-parallel group is "
                            "tp_size consecutive ranks)", c->tp_size, world_size);
    world_size /= c->tp_size; /* DeepSpeed's batch rule counts data-parallel ranks */
    long ws = world_size, tb = c->train_batch_size;
    long mb = c->train_micro_batch_size_per_gpu, ga = c->gradient_accumulation_steps;
    int mb_given = c->micro_batch_given, ga_given = c->grad_accum_given;
    if (tb > 0) {
        if (mb_given && !ga_given) {
            if (tb % (mb * ws) != 0)
                return zt_fail(err,
                               "train_batch_size %ld is not divisible by train_micro_batch_size_per_gpu %ld * "
                               "world size %ld (= %ld), so gradient_accumulation_steps cannot be derived",
                               tb, mb, ws, mb * ws);
            ga = tb / (mb * ws);
        } else if (!mb_given && ga_given) {
            if (tb % (ga * ws) != 0)
                return zt_fail(err,
                               "train_batch_size %ld is not divisible by gradient_accumulation_steps %ld * "
                               "world size %ld (= %ld), so train_micro_batch_size_per_gpu cannot be derived",
                               tb, ga, ws, ga * ws);
            mb = tb / (ga * ws);
        } else if (!mb_given && !ga_given) {
            ga = 1;
            if (tb % ws != 0)
                return zt_fail(err,
                               "train_batch_size %ld is not divisible by world size %ld, so "
                               "train_micro_batch_size_per_gpu cannot be derived",
                               tb, ws);
            mb = tb / ws;
        }
        if (mb * ga * ws != tb)
            return zt_fail(err,
                           "train_batch_size %ld != train_micro_batch_size_per_gpu %ld * "
                           "gradient_accumulation_steps %ld * world size %ld (= %ld)",
                           tb, mb, ga, ws, mb * ga * ws);
    } else {
        tb = mb * ga * ws;
    }
    if (mb > INT_MAX || ga > INT_MAX) return zt_fail(err, "derived batch sizes are out of range");
    c->train_batch_size = tb;
    c->train_micro_batch_size_per_gpu = (int)mb;
    c->gradient_accumulation_steps = (int)ga;
    c->micro_batch_given = 1;
    c->grad_accum_given = 1;
    free(c->effective_text);
    c->effective_text = zt_config_effective_text(c);
    zt_config_log_auto(c);
    return 0;
}

