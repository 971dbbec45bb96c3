/* cmd_estimate.c — `zerotrain estimate CONFIG --ranks N [--device-mem 80GiB] [--host-mem 512GiB]
 * [--ranks-per-node K] [--dtype bf16|fp32]`: the memory each rank needs for every ZeRO stage with
 * and without optimizer offload, and which settings fit — DeepSpeed's estimate_zero2/zero3 helpers
 * as one command, computed from the same formulas and buffer plans the engine and model use. */
#include <stdlib.h>
#include <string.h>

#include "model/gpt2.h"
#include "cmd/commands.h"
#include "config/config.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "engine/zero_formula.h"

static double gib(double b) { return b / 1073741824.0; }

static void usage(void) {
    fprintf(stderr, "usage: zerotrain estimate CONFIG --ranks N [--device-mem 80GiB] [--host-mem 512GiB] "
                    "[--ranks-per-node K] [--dtype bf16|fp32] [--set KEY=VALUE]...\n");
}

int zt_cmd_estimate(int argc, char **argv) {
    const char *path = NULL;
    long ranks = 0, per_node = 0;
    double device_mem = 80.0 * 1073741824.0, host_mem = 512.0 * 1073741824.0;
    int fp32 = 0;
    char **sets = zt_xcalloc((size_t)argc + 1, sizeof *sets);
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--ranks") && v) ranks = strtol(v, NULL, 10), bad = ranks < 1, i++;
        else if (!strcmp(a, "--ranks-per-node") && v) per_node = strtol(v, NULL, 10), bad = per_node < 1, i++;
        else if (!strcmp(a, "--device-mem") && v) bad = zt_parse_bytes(v, &device_mem), i++;
        else if (!strcmp(a, "--host-mem") && v) bad = zt_parse_bytes(v, &host_mem), i++;
        else if (!strcmp(a, "--dtype") && v) fp32 = !strcmp(v, "fp32"), bad = !fp32 && strcmp(v, "bf16"), i++;
        else if (!strcmp(a, "--set") && v) sets[n_sets++] = argv[++i];
        else if (a[0] != '-' && !path) path = a;
        else bad = 1;
        if (bad) {
            if (v && a[0] == '-' && strcmp(a, "--set"))
                fprintf(stderr, "zerotrain: error: estimate: bad value '%s' for %s\n", v, a);
            else
                fprintf(stderr, "zerotrain: error: estimate: bad argument '%s'\n", a);
            usage();
            free(sets);
            return 2;
        }
    }
    if (!path || ranks < 1) {
        usage();
        free(sets);
        return 2;
    }
    zt_config cfg;
    zt_err err = {{0}};
    int rc = zt_config_load(&cfg, path, sets, n_sets, &err);
    free(sets);
    if (!rc) rc = zt_config_check_batch(&cfg, (int)ranks, &err);
    if (rc) {
        zt_print_error(&err);
        return 1;
    }
    if (per_node < 1) per_node = ranks < 8 ? ranks : 8;
    double host_per_rank = host_mem / (double)per_node;

    zt_gpt2_shape shape = zt_shape_from_config(&cfg);
    zt_param_table table;
    zt_gpt2 plan;
    size_t P = fp32 ? 4 : 2, K = fp32 ? 8 : 12;
    if (zt_gpt2_param_table(&table, &shape, &err) ||
        zt_gpt2_plan(&plan, &shape, cfg.train_micro_batch_size_per_gpu, cfg.seq_len, cfg.ckpt_enabled,
                     cfg.ckpt_number_checkpoints, P, &err)) {
        zt_print_error(&err);
        zt_config_free(&cfg);
        return 1;
    }
    size_t shard = zt_zero_shard(table.total, (int)ranks, ZT_SHARD_ALIGN);
    size_t seg0 = table.segment_lo[1], block = table.segment_lo[2] - table.segment_lo[1];
    double acts = (double)(plan.act_bytes + plan.scratch_bytes);
    printf("zerotrain estimate: %s — GPT-2 L%d H%d C%d V%d, %.2fM parameters, micro-batch %d x T %d, %s "
           "activations %.2f GiB/rank (checkpointing %s)\n",
           path, shape.n_layer, shape.n_head, shape.n_embd, shape.vocab_size, table.total / 1e6,
           cfg.train_micro_batch_size_per_gpu, cfg.seq_len, fp32 ? "fp32" : "bf16", gib(acts),
           cfg.ckpt_enabled ? "on" : "off");
    printf("%ld ranks (%ld per node); device %.1f GiB/rank, host %.1f GiB/rank\n\n", ranks, per_node, gib(device_mem),
           gib(host_per_rank));
    printf("%-6s %-16s %14s %14s %14s  %s\n", "stage", "optimizer", "model states", "device total", "host total", "fits");
    for (int stage = 0; stage <= 3; stage++) {
        for (int offload = 0; offload <= 1; offload++) {
            if (offload && stage == 0) continue; /* Twin-Flow splits a rank's shard: stages 1-3 */
            size_t states = zt_zero_model_state_bytes(stage, P, K, shard, (int)ranks);
            size_t opt_n = stage == 0 ? shard * (size_t)ranks : shard;
            double optim = (double)K * opt_n, host = 0;
            /* buffers besides model states: stage 2/3 gradient segment buffers, stage >= 1 the
             * reduce-scatter landing zone, stage 3 the gather buffers */
            double buffers = 0;
            if (stage >= 2) buffers += (double)P * (seg0 + 2 * block);
            if (stage >= 1 && ranks > 1) buffers += (double)P * shard;
            if (stage == 3) buffers += (double)P * (seg0 + 2 * block);
            double device = (double)states + buffers + acts;
            if (offload) { /* ratio 1: fp32 master + m + v in host memory (12 B; fp32 grads staged too) */
                device -= optim;
                host = (double)(12 + 4) * opt_n;
            }
            int fits = device <= device_mem && host <= host_per_rank;
            printf("%-6d %-16s %11.2f GiB %11.2f GiB %11.2f GiB  %s\n", stage, offload ? "offload cpu" : "on device",
                   gib((double)states), gib(device), gib(host), fits ? "yes" : "no");
        }
    }
    printf("\nmodel states follow the ZeRO paper: stage 0 (2P+K)Ψ, 1 2PΨ+KΨ/N, 2 PΨ+(P+K)Ψ/N, 3 (2P+K)Ψ/N "
           "with P = %zu, K = %zu; \"device total\" adds activations and the engine's gradient/gather buffers.\n", P, K);
    zt_param_table_free(&table);
    zt_config_free(&cfg);
    return 0;
}
