/* predict.c — `zerotrain predict CONFIG --hw PROFILE [--steps K] [--perform] [--trace FILE]
 * [--set KEY=VALUE]...`: the step time a config would have on a GPU machine described by a hardware
 * profile (configs/hw/), from the engine's own schedule. It runs `train` in this process on the
 * simulated GPU with the profile's virtual clock (backend/sim_clock.h): every kernel, copy, wait and
 * host pass the engine makes is costed on the lane it runs on, and the step time is the main
 * thread's virtual time across the step. Nothing here models the step a second time: what predict
 * adds is the run's settings (device sim, K steps, no evaluation, samples or checkpoints) and the
 * report, from the sim's lane statistics.
 * By default the work is costed, not performed (ZEROTRAIN_SIM_DRY): device memory and the host's big
 * buffers are address space only, the device's items and the CPU Adam are not run (util/clock.h:
 * zt_clock_costs_only), and the profile's memories bind instead of this machine's, so models far
 * larger than this machine predict; --perform runs them too, as the real simulated run does (the
 * schedule is the same either way). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "backend/sim_clock.h"
#include "cmd/commands.h"
#include "cmd/help.h"
#include "cmd/predict_ranks.h"
#include "comm/comm.h"
#include "config/config.h"
#include "util/util.h"

#define MAX_STEPS 64


typedef struct seen_step {
    zt_step_seen s;
    zt_sim_stats st; /* the lanes during the step */
} seen_step;

typedef struct predictor {
    seen_step steps[MAX_STEPS];
    int n;
    double host_peak, device_peak; /* the engine's account (what estimate counts), highest */
} predictor;

static void on_step(void *ctx, const zt_step_seen *s) {
    predictor *p = ctx;
    if (s->host_bytes > p->host_peak) p->host_peak = s->host_bytes;
    if (s->device_bytes > p->device_peak) p->device_peak = s->device_bytes;
    if (p->n < MAX_STEPS) {
        p->steps[p->n].s = *s;
        zt_sim_stats_get(&p->steps[p->n].st);
        p->n++;
    }
    zt_sim_stats_reset(); /* the next step's lanes from zero */
}

static double pct(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0; }

/* the report: the mean over the steps after the first (which starts from an idle machine) */
static void report(const predictor *p, const char *config, const zt_hw_profile *hw, int fp16, int dry,
                   const zt_predict_layout *L) {
    int first = p->n > 1 ? 1 : 0, k = p->n - first;
    double sec = 0, tokens = 0, flops = 0;
    zt_sim_stats m;
    memset(&m, 0, sizeof m);
    zt_comm_bytes dp_bytes, tp_bytes;
    memset(&dp_bytes, 0, sizeof dp_bytes), memset(&tp_bytes, 0, sizeof tp_bytes);
    for (int i = first; i < p->n; i++) {
        const seen_step *q = &p->steps[i];
        sec += q->s.seconds, tokens += q->s.tokens, flops += q->s.flops;
        zt_predict_comm_add(&dp_bytes, &q->s.comm), zt_predict_comm_add(&tp_bytes, &q->s.tp_comm);
        for (int l = 0; l < ZT_SIM_NLANES; l++) m.busy[l] += q->st.busy[l];
        for (int w = 0; w < ZT_WORK_NKIND; w++) m.host_busy[w] += q->st.host_busy[w];
        for (int w = 0; w < ZT_QUEUE_NKIND; w++) m.queue_busy[w] += q->st.queue_busy[w];
        m.compute_wait_host += q->st.compute_wait_host, m.compute_wait_lane += q->st.compute_wait_lane;
        m.bytes_h2d += q->st.bytes_h2d, m.bytes_d2h += q->st.bytes_d2h, m.syncs += q->st.syncs;
        if (q->st.dev_peak > m.dev_peak) m.dev_peak = q->st.dev_peak;
    }
    zt_dtype dt = fp16 ? ZT_F16 : ZT_BF16;
    double step = sec / k, peak = hw->gemm[dt].peak_flops;
    printf("\npredict: %s on %s (%s), %d rank%s, mean of step%s %d-%d of %d (ops %s)\n", config, hw->name, hw->path,
           L->ranks, L->ranks > 1 ? "s" : "", k > 1 ? "s" : "", first + 1, p->n, p->n,
           dry ? "costed, not performed" : "costed and performed");
    printf("  step time           %10.2f ms\n", step * 1e3);
    printf("  tokens/s            %10.0f%s\n", tokens / sec, L->ranks > 1 ? "   (all ranks)" : "");
    flops /= L->ranks; /* per GPU */
    printf("  model TFLOP/s       %10.1f   MFU %.1f %% of the %.0f TFLOP/s %s peak%s\n", flops / sec * 1e-12,
           pct(flops / sec, peak), peak * 1e-12, fp16 ? "fp16" : "bf16", L->ranks > 1 ? ", per GPU" : "");
    printf("  lanes, busy share of the step:\n");
    for (int l = 0; l < ZT_SIM_NLANES; l++) {
        if (l == ZT_SIM_COMM && L->ranks < 2) continue; /* no collectives on one rank */
        printf("    %-20s %6.1f %%", zt_sim_lane_names[l], pct(m.busy[l], sec));
        if (l == ZT_SIM_COMPUTE)
            printf("   idle %.1f %%: waiting for the host %.1f %%, for other lanes %.1f %%", 100 - pct(m.busy[l], sec),
                   pct(m.compute_wait_host, sec), pct(m.compute_wait_lane, sec));
        printf("\n");
    }
    static const char *const work[ZT_WORK_NKIND] = {"host adam", "host copies/casts"};
    for (int w = 0; w < ZT_WORK_NKIND; w++)
        if (m.host_busy[w] > 0) printf("    %-20s %6.1f %%   (thread-seconds over the step)\n", work[w], pct(m.host_busy[w], sec));
    static const char *const queue[ZT_QUEUE_NKIND] = {"nvme read", "nvme write"};
    for (int w = 0; w < ZT_QUEUE_NKIND; w++)
        if (m.queue_busy[w] > 0) printf("    %-20s %6.1f %%\n", queue[w], pct(m.queue_busy[w], sec));
    printf("  PCIe H2D            %10.2f GB/s   (%.1f %% of the %.0f GB/s pinned link)\n", m.bytes_h2d / sec * 1e-9,
           pct(m.bytes_h2d / sec, hw->h2d_pinned), hw->h2d_pinned * 1e-9);
    printf("  PCIe D2H            %10.2f GB/s   (%.1f %% of the %.0f GB/s pinned link)\n", m.bytes_d2h / sec * 1e-9,
           pct(m.bytes_d2h / sec, hw->d2h_pinned), hw->d2h_pinned * 1e-9);
    printf("  host waits on GPU   %10.0f a step (synchronize, blocking copies)\n", m.syncs / k);
    printf("  peak memory         device %.2f GiB of %.0f GiB; host %.2f GiB (the engine's buffers) of %.0f GiB%s\n",
           m.dev_peak / 1073741824.0, hw->dev_memory / 1073741824.0, p->host_peak / 1073741824.0,
           hw->host_memory / 1073741824.0, L->node_ranks > 1 ? " (this rank's share of its node)" : "");
    printf("  memory per rank     device %.2f MiB, host %.2f MiB (the engine's buffers and the model's, as estimate counts them)\n",
           p->device_peak / 1048576.0, p->host_peak / 1048576.0);
    zt_predict_ranks_report(stdout, L, &dp_bytes, &tp_bytes, k);
}

/* trains CONFIG for `steps` steps on the simulated GPU timed by profile hw, the user's settings
 * first and predict's last (they win); p sees every step */
static int run_train(const char *config, const char *hw, char **sets, int nsets, long steps, long tp,
                     const char *trace, int perform, predictor *p) {
    setenv("ZEROTRAIN_SIM_PROFILE", hw, 1);
    if (!perform) setenv("ZEROTRAIN_SIM_DRY", "1", 1);
    char iters[64], tr[1100], tps[64];
    snprintf(iters, sizeof iters, "train_iters=%ld", steps);
    snprintf(tr, sizeof tr, "trace=%s", trace ? trace : "null");
    /* tp 0: the config's own tensor_parallel.tp_size (the last entry is left out) */
    snprintf(tps, sizeof tps, "tensor_parallel.tp_size=%ld", tp);
    const char *ours[] = {"device=sim", iters, "steps_per_print=1", "eval_interval=0", "sample_interval=0",
                          "checkpoint.dir=null", "metrics_file=null", tr, "comm_timeout=0", tps};
    int nours = (int)(sizeof ours / sizeof ours[0]) - (tp > 0 ? 0 : 1);
    char **targv = zt_xcalloc((size_t)(2 + 2 * (nsets + nours) + 1), sizeof *targv);
    int tc = 0;
    targv[tc++] = "train";
    targv[tc++] = (char *)config;
    for (int i = 0; i < nsets; i++) targv[tc++] = "--set", targv[tc++] = sets[i];
    for (int i = 0; i < nours; i++) targv[tc++] = "--set", targv[tc++] = (char *)ours[i];
    zt_train_observer obs = {on_step, p};
    int rc = zt_train_observed(tc, targv, &obs);
    free(targv);
    return rc;
}

/* the mean over the steps after the first (which starts from an idle machine) */
static void mean_step(const predictor *p, zt_prediction *out) {
    int first = p->n > 1 ? 1 : 0;
    double sec = 0, tokens = 0, flops = 0;
    for (int i = first; i < p->n; i++) sec += p->steps[i].s.seconds, tokens += p->steps[i].s.tokens, flops += p->steps[i].s.flops;
    out->steps = p->n - first;
    out->step_s = out->steps > 0 ? sec / out->steps : 0;
    out->tokens_per_s = sec > 0 ? tokens / sec : 0;
    out->flops_per_s = sec > 0 ? flops / sec : 0;
}

int zt_predict_step(const char *config, const char *hw, char **sets, int nsets, int quiet, zt_prediction *out) {
    memset(out, 0, sizeof *out);
    predictor *p = zt_xcalloc(1, sizeof *p);
    /* train's own lines are predict's to show; with quiet, its errors too (the caller says what failed) */
    int nfd = quiet ? 2 : 1, saved[2] = {-1, -1}, null = open("/dev/null", O_WRONLY);
    fflush(stdout), fflush(stderr);
    for (int fd = 1; fd <= nfd && null >= 0; fd++) saved[fd - 1] = dup(fd), dup2(null, fd);
    int rc = run_train(config, hw, sets, nsets, 3, 0, NULL, 0, p);
    fflush(stdout), fflush(stderr);
    for (int fd = 1; fd <= nfd; fd++)
        if (saved[fd - 1] >= 0) dup2(saved[fd - 1], fd), close(saved[fd - 1]);
    if (null >= 0) close(null);
    if (rc == 0 && p->n > 0) mean_step(p, out);
    free(p);
    return rc ? rc : out->steps > 0 ? 0 : 1;
}

int zt_cmd_predict(int argc, char **argv) {
    const char *config = NULL, *hw = NULL, *trace = NULL;
    long steps = 3, ranks = 1, tp = 0; /* tp 0: the config's tensor_parallel.tp_size */
    char *end;
    int perform = 0;
    char **sets = zt_xcalloc((size_t)argc + 1, sizeof *sets);
    int nsets = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--hw") && i + 1 < argc) hw = argv[++i];
        else if (!strcmp(a, "--steps") && i + 1 < argc) steps = strtol(argv[++i], NULL, 10);
        else if (!strcmp(a, "--ranks") && i + 1 < argc) ranks = strtol(argv[++i], &end, 10), ranks = *end ? -1 : ranks;
        else if (!strcmp(a, "--tp") && i + 1 < argc) tp = strtol(argv[++i], &end, 10), tp = *end || tp < 1 ? -1 : tp;
        else if (!strcmp(a, "--trace") && i + 1 < argc) trace = argv[++i];
        else if (!strcmp(a, "--perform")) perform = 1;
        else if (!strcmp(a, "--set") && i + 1 < argc) sets[nsets++] = argv[++i];
        else if (a[0] != '-' && !config) config = a;
        else {
            free(sets);
            return zt_help_bad_argument("predict", a, i + 1 < argc ? argv[i + 1] : NULL);
        }
    }
    if (!config || !hw || steps < 1 || steps > MAX_STEPS) {
        free(sets);
        if (config && hw) {
            fprintf(stderr, "zerotrain: error: predict: --steps must be 1 to %d\n", MAX_STEPS);
            return 2;
        }
        return zt_help_missing("predict", !config ? "CONFIG" : "--hw PROFILE");
    }
    if (zt_mpi_world_size() != 1) {
        fprintf(stderr, "zerotrain: error: predict: runs as one process (it stands for the --ranks N ranks itself), "
                        "not under mpirun\n");
        free(sets);
        return 2;
    }
    /* the config as the user gave it, for its dtype (and to refuse a bad one before anything starts) */
    zt_config cfg;
    zt_err err = {{0}};
    if (zt_config_load(&cfg, config, sets, nsets, &err)) {
        zt_print_error(&err);
        free(sets);
        return 1;
    }
    int fp16 = cfg.fp16_enabled;
    if (!tp) tp = cfg.tp_size > 1 ? cfg.tp_size : 1;
    zt_config_free(&cfg);
    zt_hw_profile prof; /* read here first, so that a bad profile is named as predict's */
    if (zt_hw_profile_load(&prof, hw, &err)) {
        zt_err e2;
        zt_fail(&e2, "predict --hw: %s", err.msg);
        zt_print_error(&e2);
        free(sets);
        return 1;
    }

    zt_predict_layout layout;
    if (zt_predict_layout_install(&layout, ranks, tp, perform, &prof, &err)) {
        zt_print_error(&err);
        free(sets);
        return 2;
    }
    predictor *p = zt_xcalloc(1, sizeof *p);
    int rc = run_train(config, hw, sets, nsets, steps, tp, trace, perform, p);
    if (rc == 0 && zt_sim_profile() && p->n > 0) report(p, config, zt_sim_profile(), fp16, !perform, &layout);
    free(p);
    free(sets);
    return rc;
}
