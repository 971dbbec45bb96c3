/* estimate.c — `zerotrain estimate CONFIG --ranks N [--tp N] [--device-mem 80GiB] [--host-mem 512GiB]
 * [--nvme-size SIZE] [--ranks-per-node K] [--dtype bf16|fp32] [--ratio R[,R...]]`: the memory each rank needs — device,
 * host and NVMe — for every ZeRO stage with and without optimizer offload and for stage 3's
 * ZeRO-Infinity settings (parameter offload, NVMe), which settings fit, and the Twin-Flow ratios that
 * fit (and, with --ratio, rows for those Twin-Flow ratios) — DeepSpeed's estimate_zero2/zero3 helpers as one command, computed from the same formulas
 * (engine/zero_formula.h) and buffer plans the engine and model use. Host and NVMe sizes are per
 * node, shared by its ranks. With tensor parallelism (--tp, default the config's tp_size) a rank holds
 * its tensor-parallel part (every rank's has the same size: wte is padded) and ZeRO
 * partitions it over the ranks / tp data-parallel ranks.
 * With --hw PROFILE (a hardware profile, configs/hw/) the memories default to the profile's and the
 * config's own setting gets its predicted step time on that machine beside the table (predict.c's
 * dry run: about a second at any size). Only with --hw: a default profile would print a step time for
 * a GPU the reader may not have, where the memory columns already say which device they assume. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/gpt2.h"
#include "engine/init_from.h"
#include "cmd/commands.h"
#include "cmd/help.h"
#include "comm/comm.h"
#include "config/hw_profile.h"
#include "config/config.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "engine/zero_formula.h"

/* the table's unit: GiB, or MiB for a model whose largest figure is under 1 GiB */
typedef struct unit { const char *name; double bytes; } unit;
static double in(unit u, double b) { return b / u.bytes; }


/* one setting: where the optimizer states and the parameters live, and what each place holds per rank */
typedef struct row {
    int stage;
    const char *optimizer, *params; /* "device", "cpu", "nvme"; a Twin-Flow ratio below 1: "cpu r=0.30" */
    double states, device, host, nvme;
} row;

#define MAX_RATIOS 8
static char ratio_names[MAX_RATIOS][16]; /* the optimizer column of the --ratio rows */

/* super_offload's speculation window beside a host part of n elements that already takes `host` of
 * the rank's host memory: 12 B an element for the speculated master, m and v, as many as
 * speculation_window gives or, by default, as the rank's host memory holds beside the rest less the
 * engine's 1 GiB for its other host buffers (twin_speculation_elems counts it the same way) */
static double spec_window_bytes(const zt_config *cfg, double n, double host, double host_per_rank) {
    if (!cfg->offload_super || cfg->offload_delayed_update) return 0;
    double want = 12.0 * n;
    if (cfg->offload_speculation_window > 0) return want < cfg->offload_speculation_window ? want : 12.0 * floor(cfg->offload_speculation_window / 12.0);
    double room = host_per_rank - 1073741824.0 - host;
    room = room > 0 ? 12.0 * floor(room / 12.0) : 0;
    return want < room ? want : room;
}

/* Every stage with and without optimizer offload, and stage 3's ZeRO-Infinity settings; g3 is stage
 * 3's gather buffers as the run will size them (zt_engine_stage3_plan). */
static int plan_rows(row *rows, const zt_config *cfg, const zt_param_table *table, const zt_stage3_plan *g3,
                     long ranks, size_t P, size_t K, double acts, double host_acts, const double *ratios, int n_ratios,
                     double device_mem, double host_per_rank, int grads_host[4]) {
    size_t shard = zt_zero_shard(table->total, (int)ranks, ZT_SHARD_ALIGN);
    /* the gradient buffers of stages 2-3: the embeddings', and two of the largest other segment (a block,
     * or a tile of one with tiled linears) */
    zt_segment_sizes sizes = zt_param_table_segment_sizes(table); /* as zero_comm.c allocates them */
    size_t embed3 = g3->embed, largest = g3->largest;
    /* stages 2-3 with the whole optimizer shard on the host (ratio 1, not delayed_update) may send the
     * gradients to the host bucket by bucket: no gradient shard on the device, bucket-sized landing zones
     * instead of a shard-sized one, and the host's staging buffers (zero_comm.c; zero_formula.h). They
     * do where offload_optimizer.gradients says host, or says auto and the device row with the shard
     * does not fit --device-mem (engine.c: gradients_to_host counts the same bytes) */
    size_t landing = zt_zero_landing_elems(cfg->reduce_bucket_size, sizes.any, shard);
    int slots = zt_zero_landing_slots(cfg->overlap_comm);
    double grads_off_device = zt_zero_grads_device_bytes(0, P, shard, landing, slots, (int)ranks) -
                              zt_zero_grads_device_bytes(1, P, shard, landing, slots, (int)ranks);
    double host_staging = zt_zero_grads_host_bytes(P, landing, shard, ZT_SUMSQ_CHUNK);
    int grads_may_go = !cfg->offload_delayed_update && cfg->offload_gradients != ZT_GRADS_DEVICE;
    double param_shard = (double)P * shard, twin_host = (double)ZT_TWIN_HOST_BYTES * shard;
    double opt_staging = zt_nvme_optimizer_staging_bytes(cfg->offload_buffer_count, cfg->sub_group_size, shard);
    double param_staging =
        zt_nvme_param_staging_bytes(cfg->offload_param_buffer_count, embed3 > largest ? embed3 : largest, shard, P);
    int n = 0;
    for (int stage = 0; stage <= 3; stage++) {
        double states = (double)zt_zero_model_state_bytes(stage, P, K, shard, (int)ranks);
        size_t opt_n = stage == 0 ? shard * (size_t)ranks : shard;
        double optim = (double)K * opt_n;
        /* buffers besides model states: stage 2/3 gradient segment buffers, stage >= 1 the
         * reduce-scatter landing zone, stage 3 the gather buffers */
        double buffers = 0;
        if (stage >= 2) buffers += (double)P * (sizes.embed + 2 * sizes.block);
        if (stage >= 1 && ranks > 1) buffers += (double)P * shard;
        if (stage == 3)
            buffers += zt_zero3_gather_bytes(P, embed3, largest, g3->depth);
        double device = states + buffers + acts;
        rows[n++] = (row){stage, "device", "device", states, device, 0, 0};
        if (stage == 0) continue; /* Twin-Flow splits a rank's shard: stages 1-3 */
        /* ratio 1: fp32 master + m + v in host memory, with the transfer buffers; at stages 2-3 the
         * gradients too, bucket by bucket */
        int go = stage >= 2 && grads_may_go &&
                 (cfg->offload_gradients == ZT_GRADS_HOST || device - optim > device_mem); /* the auto of engine.c */
        if (stage >= 2) grads_host[stage] = go;
        double to_host = go ? grads_off_device : 0, staged = go ? host_staging : 0;
        double host = (double)ZT_TWIN_HOST_BYTES * opt_n + staged + host_acts;
        rows[n++] = (row){stage, "cpu", "device", states, device - optim - to_host,
                          host + spec_window_bytes(cfg, (double)opt_n, host, host_per_rank), 0};
        /* --ratio r: the share r of the optimizer shard on the host, 1 - r left on the device */
        for (int k = 0; k < n_ratios; k++) {
            int whole = ratios[k] >= 1;
            double host_k = ratios[k] * ZT_TWIN_HOST_BYTES * (double)opt_n + (whole ? staged : 0) + host_acts;
            rows[n++] = (row){stage, ratio_names[k], "device", states, device - ratios[k] * optim - (whole ? to_host : 0),
                              host_k + spec_window_bytes(cfg, ratios[k] * (double)opt_n, host_k, host_per_rank), 0};
        }
        if (stage < 3) continue; /* parameter offload and NVMe: ZeRO-Infinity, stage 3 */
        /* the parameter shard moves to the host; the device keeps only the gather buffers (and the
         * gradient shard where it fits beside them: the engine decides with the parameters off the device) */
        int go_p = grads_may_go && (cfg->offload_gradients == ZT_GRADS_HOST || device - optim - param_shard > device_mem);
        grads_host[0] = go_p;
        double host_p = twin_host + param_shard + (go_p ? host_staging : 0) + host_acts;
        rows[n++] = (row){3, "cpu", "cpu", states, device - optim - param_shard - (go_p ? grads_off_device : 0),
                          host_p + spec_window_bytes(cfg, (double)shard, host_p, host_per_rank), 0};
        /* optimizer states on NVMe, staged through host buffers; host gradients and 16-bit params */
        rows[n++] = (row){3, "nvme", "device", states, device - optim, opt_staging + 2 * param_shard, optim};
        /* and the parameter shard on NVMe too, read through buffer_count staging buffers; the host still
         * lands the gradients and the updated 16-bit parameters before they are written */
        rows[n++] = (row){3, "nvme", "nvme", states, device - optim - param_shard,
                          opt_staging + 2 * param_shard + param_staging, optim + param_shard};
    }
    for (int i = 0; i < n; i++) /* cpu_checkpointing's kept block inputs (the host-optimizer rows have them) */
        if (!strcmp(rows[i].optimizer, "device") || !strcmp(rows[i].optimizer, "nvme")) rows[i].host += host_acts;
    if (cfg->ckpt_async_save && cfg->checkpoint_dir) /* every row's saves snapshot the shard into host memory */
        for (int i = 0; i < n; i++) rows[i].host += zt_async_save_staging_bytes(shard);
    return n;
}

/* The Twin-Flow ratios (offload_optimizer cpu) that fit device and host, for stages 1-3. */
static void print_ratio_windows(const row *rows, int n, size_t K, size_t shard, double device_mem, double host_mem,
                                unit u) {
    printf("\nTwin-Flow ratios that fit (offload_optimizer cpu, ratio r: the share r of the optimizer shard in host\n"
           "memory at %d B per element, 1 - r on the device at K = %zu B): [r_min, r_max], r_min from device memory,\n"
           "r_max from host memory\n", ZT_TWIN_HOST_BYTES, K);
    for (int i = 0; i < n; i++) {
        if (rows[i].stage == 0 || strcmp(rows[i].optimizer, "device") != 0) continue;
        zt_twin_window w = zt_twin_ratio_window(rows[i].device, K, ZT_TWIN_HOST_BYTES, shard, device_mem, host_mem);
        if (w.fits)
            printf("  stage %d: [%.3f, %.3f]\n", rows[i].stage, w.r_min, w.r_max);
        else if (w.short_on_device && rows[i + 1].device <= device_mem && rows[i + 1].host <= host_mem)
            printf("  stage %d: ratio 1 only: below it the device is %.2f %s short; at 1 the gradients leave the device "
                   "too (the \"cpu\" row)\n", rows[i].stage, in(u, w.short_bytes), u.name);
        else if (w.short_on_device)
            printf("  stage %d: none: the device is %.2f %s short even at ratio 1\n", rows[i].stage, in(u, w.short_bytes),
                   u.name);
        else
            printf("  stage %d: none: the device needs r >= %.3f, the host takes r <= %.3f (%.2f %s short at r = %.3f)\n",
                   rows[i].stage, w.r_min, w.r_max, in(u, w.short_bytes), u.name, w.r_min);
    }
}

/* --hw: the config's own setting predicted on the profile (one rank so far: `predict --ranks` is to come).
 * With the optimizer on the host (Twin-Flow), also the ratios of the window that fits, so the fastest
 * shows beside `ratio: auto`'s choice: auto balances the host part's pipeline against the device Adam
 * (twin_ratio.c), which the engine can measure when it opens; the step around the update (forward,
 * backward, overlap_step's carry into the next step) is not known then, and only the model sees it. */
#define SWEEP 6
static int predict_ratio(const char *path, const char *hw, char **sets, int n_sets, double ratio, zt_prediction *pr) {
    char set[96];
    if (ratio < 0) snprintf(set, sizeof set, "zero_optimization.offload_optimizer.ratio=auto");
    else snprintf(set, sizeof set, "zero_optimization.offload_optimizer.ratio=%.3f", ratio);
    char **all = zt_xcalloc((size_t)n_sets + 2, sizeof *all);
    memcpy(all, sets, (size_t)n_sets * sizeof *all);
    all[n_sets] = set;
    int rc = zt_predict_step(path, hw, all, n_sets + 1, 1, pr);
    free(all);
    return rc;
}

static int print_step_time(const char *path, const char *hw, const zt_hw_profile *prof, char **sets, int n_sets,
                           long ranks, const zt_twin_window *twin) {
    if (ranks != 1) {
        printf("\npredicted step time on %s: estimate prices one rank; for %ld ranks: zerotrain predict %s --hw %s "
               "--ranks %ld\n", prof->name, ranks, path, hw, ranks);
        return 0;
    }
    zt_err err = {{0}};
    int argc = 0;
    char **argv = NULL;
    if (zt_mpi_init(&argc, &argv, &err)) { /* the prediction runs the engine, which opens a comm */
        zt_print_error(&err);
        return 1;
    }
    zt_prediction pr;
    int rc = zt_predict_step(path, hw, sets, n_sets, 0, &pr);
    if (rc == 0)
        printf("\npredicted on %s (%s), the config's own setting (the row of its stage and offload above): %.2f ms a "
               "step, %.0f tokens/s, %.1f model TFLOP/s (`zerotrain predict` shows the lanes)\n",
               prof->name, prof->path, pr.step_s * 1e3, pr.tokens_per_s, pr.flops_per_s * 1e-12);
    else
        printf("\npredicted on %s (%s): the config's own setting does not run there (the error above)\n", prof->name,
               prof->path);
    rc = 0;
    if (twin && twin->fits) {
        printf("Twin-Flow ratios in the window that fits [%.3f, %.3f], predicted:\n", twin->r_min, twin->r_max);
        double best = 0, best_r = -1, auto_s = 0;
        for (int k = -1; k < SWEEP; k++) { /* k = -1: ratio auto */
            double x = (double)k / (SWEEP - 1); /* squared: denser near r_min, where the fast ratios are */
            double r = k < 0 ? -1 : twin->r_min + (twin->r_max - twin->r_min) * x * x;
            char label[16] = "auto";
            if (k >= 0) snprintf(label, sizeof label, "%.3f", r);
            if (predict_ratio(path, hw, sets, n_sets, r, &pr)) {
                printf("  ratio %-6s does not run (`zerotrain predict` with this ratio says why: the engine's own "
                       "bounds are tighter than this table's)\n", label);
                continue;
            }
            if (k < 0) auto_s = pr.step_s;
            else if (best_r < 0 || pr.step_s < best) best = pr.step_s, best_r = r;
            printf("  ratio %-6s %10.2f ms  %6.1f TFLOP/s\n", label, pr.step_s * 1e3, pr.flops_per_s * 1e-12);
        }
        if (best_r >= 0 && auto_s > 0)
            printf("  fastest of these: ratio %.3f, %.2f ms; auto's choice is %+.1f %% from it\n", best_r, best * 1e3,
                   100 * (auto_s - best) / best);
    }
    zt_mpi_finalize();
    return rc ? 1 : 0;
}

/* --ratio 0.3 or 0.25,0.5: Twin-Flow ratios in (0, 1) to size besides ratio 1 (at most MAX_RATIOS) */
static int parse_ratios(const char *text, double *ratios, int *n) {
    for (const char *p = text;;) {
        char *end;
        double r = strtod(p, &end);
        if (end == p || !(r > 0 && r < 1) || *n == MAX_RATIOS) return 1;
        snprintf(ratio_names[*n], sizeof ratio_names[*n], "cpu r=%.2f", r);
        ratios[(*n)++] = r;
        if (*end == '\0') return 0;
        if (*end != ',') return 1;
        p = end + 1;
    }
}

int zt_cmd_estimate(int argc, char **argv) {
    const char *path = NULL;
    long ranks = 0, per_node = 0, tp = 0;
    double device_mem = 80.0 * 1073741824.0, host_mem = 512.0 * 1073741824.0, nvme_size = -1; /* < 0: no limit */
    int fp32 = 0, n_ratios = 0;
    double ratios[MAX_RATIOS];
    const char *hw = NULL;
    int device_mem_given = 0, host_mem_given = 0;
    char **sets = zt_xcalloc((size_t)argc + 1, sizeof *sets);
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--ranks") && v) ranks = strtol(v, NULL, 10), bad = ranks < 1, i++;
        else if (!strcmp(a, "--tp") && v) tp = strtol(v, NULL, 10), bad = tp < 1 || tp > 64, i++;
        else if (!strcmp(a, "--ranks-per-node") && v) per_node = strtol(v, NULL, 10), bad = per_node < 1, i++;
        else if (!strcmp(a, "--device-mem") && v) bad = zt_parse_bytes(v, &device_mem), device_mem_given = 1, i++;
        else if (!strcmp(a, "--host-mem") && v) bad = zt_parse_bytes(v, &host_mem), host_mem_given = 1, i++;
        else if (!strcmp(a, "--hw") && v) hw = v, i++;
        else if (!strcmp(a, "--nvme-size") && v) bad = zt_parse_bytes(v, &nvme_size), i++;
        else if (!strcmp(a, "--dtype") && v) fp32 = !strcmp(v, "fp32"), bad = !fp32 && strcmp(v, "bf16"), i++;
        else if (!strcmp(a, "--ratio") && v) bad = parse_ratios(v, ratios, &n_ratios), i++;
        else if (!strcmp(a, "--set") && v) sets[n_sets++] = argv[++i];
        else if (a[0] != '-' && !path) path = a;
        else bad = 1;
        if (bad) {
            free(sets);
            return zt_help_bad_argument("estimate", a, v);
        }
    }
    if (!path || ranks < 1) {
        free(sets);
        return zt_help_missing("estimate", !path ? "CONFIG" : "--ranks N");
    }
    zt_config cfg;
    zt_err err = {{0}};
    zt_hw_profile prof;
    if (hw && zt_hw_profile_load(&prof, hw, &err)) {
        zt_print_error(&err);
        free(sets);
        return 1;
    }
    if (hw && !device_mem_given) device_mem = prof.dev_memory;
    if (hw && !host_mem_given) host_mem = prof.host_memory;
    int rc = zt_config_load(&cfg, path, sets, n_sets, &err);
    if (!rc && tp > 0) cfg.tp_size = (int)tp;
    tp = cfg.tp_size;
    if (!rc) rc = zt_config_adopt_init_from(&cfg, &err);
    if (!rc) rc = zt_config_check_batch(&cfg, (int)ranks, &err);
    if (rc) {
        zt_print_error(&err);
        free(sets);
        return 1;
    }
    if (per_node < 1) per_node = ranks < 8 ? ranks : 8;
    double host_per_rank = host_mem / (double)per_node, nvme_per_rank = nvme_size / (double)per_node;

    zt_gpt2_shape shape = zt_shape_from_config(&cfg);
    zt_param_table table;
    zt_gpt2 plan;
    size_t P = fp32 ? 4 : 2, K = fp32 ? 8 : 12;
    long dp = ranks / tp; /* ZeRO's N */
    if (zt_gpt2_param_table_tp(&table, &shape, 0, (int)tp, &err) ||
        zt_gpt2_plan(&plan, &shape, cfg.train_micro_batch_size_per_gpu, cfg.seq_len, zt_act_ckpt_of(&cfg), (int)tp, P,
                     &err)) {
        zt_print_error(&err);
        zt_config_free(&cfg);
        free(sets);
        return 1;
    }
    zt_param_table_tile_linears(&table, cfg.tiled_in_splits);
    double acts = (double)(plan.act_bytes + plan.scratch_bytes), biggest = 0;
    zt_param_table whole;
    zt_gpt2_param_table(&whole, &shape, &err);
    double whole_total = (double)whole.total;
    zt_param_table_free(&whole);
    /* stage 3's gather buffers: the table cut as the run will cut it (the embedding in row blocks where
     * stage3_max_live_parameters asks for it; then it has no buffer of its own) */
    zt_param_table table3;
    zt_gpt2_param_table_tp(&table3, &shape, 0, (int)tp, &err);
    zt_param_table_tile_linears(&table3, cfg.tiled_in_splits);
    zt_engine_opts o3 = {.stage = 3, .stage3_param_persistence_threshold = cfg.stage3_param_persistence_threshold,
                         .stage3_prefetch_bucket_size = cfg.stage3_prefetch_bucket_size,
                         .stage3_max_live_parameters = zt_zero3_live_bound(cfg.stage3_max_live_parameters)};
    zt_param_table_split_embedding(&table3, zt_engine_embedding_rows(&table3, &o3));
    zt_stage3_plan g3 = zt_engine_stage3_plan(&table3, &o3);
    zt_param_table_free(&table3);
    row rows[16 + 3 * MAX_RATIOS];
    int grads_host[4] = {0}; /* [2], [3]: stage 2-3 ratio 1 sends the gradients to the host; [0]: stage 3, params cpu */
    int n = plan_rows(rows, &cfg, &table, &g3, dp, P, K, acts, (double)plan.act_host_bytes, ratios, n_ratios, device_mem,
                      host_per_rank, grads_host);
    for (int i = 0; i < n; i++) biggest = rows[i].device > biggest ? rows[i].device : biggest;
    unit u = biggest >= 1073741824.0 ? (unit){"GiB", 1073741824.0} : (unit){"MiB", 1048576.0};
    char family[64];
    zt_shape_family(&shape, family, sizeof family);
    printf("zerotrain estimate: %s — %s L%d H%d C%d V%d, %.2fM parameters (%zu), micro-batch %d x T %d, %s "
           "activations %.2f %s/rank (checkpointing %s)\n",
           path, family, shape.n_layer, shape.n_head, shape.n_embd, shape.vocab_size, whole_total / 1e6, (size_t)whole_total,
           cfg.train_micro_batch_size_per_gpu, cfg.seq_len, fp32 ? "fp32" : "bf16", in(u, acts), u.name,
           cfg.ckpt_enabled ? "on" : "off");
    char nvme_s[64] = "not limited (--nvme-size)";
    if (nvme_size >= 0) snprintf(nvme_s, sizeof nvme_s, "%.1f %s/rank", in(u, nvme_per_rank), u.name);
    printf("%ld ranks (%ld per node); device %.1f %s/rank, host %.1f %s/rank, NVMe %s\n", ranks, per_node,
           in(u, device_mem), u.name, in(u, host_per_rank), u.name, nvme_s);
    if (cfg.ckpt_async_save && cfg.checkpoint_dir)
        printf("checkpoint.async_save: %.2f %s/rank of host staging for the snapshot (12 B per element of the shard), "
               "in every row's host total\n",
               in(u, zt_async_save_staging_bytes(zt_zero_shard(table.total, (int)dp, ZT_SHARD_ALIGN))), u.name);
    if (tp > 1)
        printf("tensor parallel %ld: %.2fM parameters a rank (Ψ below), ZeRO over %ld data-parallel rank%s (N below)\n",
               tp, table.total / 1e6, dp, dp > 1 ? "s" : "");
    printf("\n");
    printf("%-6s %-10s %-8s %16s %16s %16s %16s  %s\n", "stage", "optimizer", "params", "model states", "device total",
           "host total", "NVMe", "fits");
    for (int i = 0; i < n; i++) {
        const row *r = &rows[i];
        int fits = r->device <= device_mem && r->host <= host_per_rank && (nvme_size < 0 || r->nvme <= nvme_per_rank);
        printf("%-6d %-10s %-8s %12.2f %s %12.2f %s %12.2f %s %12.2f %s  %s\n", r->stage, r->optimizer, r->params,
               in(u, r->states), u.name, in(u, r->device), u.name, in(u, r->host), u.name, in(u, r->nvme), u.name,
               fits ? "yes" : "no");
    }
    size_t shard = zt_zero_shard(table.total, (int)dp, ZT_SHARD_ALIGN);
    print_ratio_windows(rows, n, K, shard, device_mem, host_per_rank, u);
    /* the window of the config's own stage, when its optimizer is on the host: predict's ratio sweep */
    zt_twin_window twin = {0};
    int twin_ok = 0;
    for (int i = 0; i < n && cfg.offload_device == ZT_OFFLOAD_CPU; i++)
        if (rows[i].stage == cfg.zero_stage && cfg.zero_stage > 0 && !strcmp(rows[i].optimizer, "device") && !twin_ok)
            twin = zt_twin_ratio_window(rows[i].device, K, ZT_TWIN_HOST_BYTES, shard, device_mem, host_per_rank),
            twin_ok = 1;
    printf("\nmodel states follow the ZeRO paper: stage 0 (2P+K)Ψ, 1 2PΨ+KΨ/N, 2 PΨ+(P+K)Ψ/N, 3 (2P+K)Ψ/N with P = %zu,\n"
           "K = %zu; \"device total\" adds activations and the engine's gradient/gather buffers. Offload, ratio 1\n"
           "(optimizer \"cpu r=R\", from --ratio: the share R of KΨ/N on the host, 1 - R on the device):\n"
           "  optimizer cpu:  KΨ/N moves to the host (%d B per element there, with the transfer buffers)\n"
           "                  At stages 2-3 the gradient shard PΨ/N stays on the device where it fits (fastest);\n"
           "                  where not, the gradients go to the host bucket by bucket: the device keeps, on\n"
           "                  several ranks, bucket-sized landing zones (not PΨ/N); the host two staging buffers of\n"
           "                  one bucket's piece and 12 B per 4096 elements for the norm's chunk sums\n"
           "                  (offload_optimizer.gradients; not with delayed_update)\n"
           "                  With super_offload (the default), + 12 B per host-part element for the speculated\n"
           "                  states, as many as host memory holds beside the rest (less 1 GiB) or\n"
           "                  offload_optimizer.speculation_window gives; the window shrinks to fit, so it never\n"
           "                  makes a row not fit\n"
           "  params cpu:     the parameter shard PΨ/N too; the device keeps stage 3's gather buffers (embeddings\n"
           "                  + 2 x the largest block) and the gradient buffers\n"
           "  optimizer nvme: KΨ/N on NVMe; the host keeps min(offload_optimizer.buffer_count (%d), groups) groups of\n"
           "                  min(sub_group_size, Ψ/N) x 12 B, and gradients and 16-bit parameters, PΨ/N each\n"
           "  params nvme:    PΨ/N on NVMe too; the host keeps offload_param.buffer_count (%d) staging buffers of\n"
           "                  the largest segment's piece x P (one gathered, the next read ahead) instead of the parameters\n",
           P, K, ZT_TWIN_HOST_BYTES, cfg.offload_buffer_count, cfg.offload_param_buffer_count);
    if (!cfg.offload_delayed_update) {
        static const char *const where[] = {"the shard on the device", "to the host bucket by bucket"};
        printf("gradients at ratio 1 (offload_optimizer.gradients %s, at %.1f %s of device memory): stage 2 %s; "
               "stage 3 %s, with the parameters on the host %s\n",
               cfg.offload_gradients == ZT_GRADS_AUTO ? "auto" : cfg.offload_gradients == ZT_GRADS_HOST ? "host" : "device",
               in(u, device_mem), u.name, where[grads_host[2]], where[grads_host[3]], where[grads_host[0]]);
    }
    zt_param_table_free(&table);
    zt_config_free(&cfg);
    rc = hw ? print_step_time(path, hw, &prof, sets, n_sets, ranks, twin_ok ? &twin : NULL) : 0;
    free(sets);
    return rc;
}
