/* calibrate_step.c — calibrate's real step (calibrate_step.h). Owns the step's fixed model, its
 * files (a shard of seeded random tokens, the config, the op table, the run's log) and the reading of
 * the sim's op table into measured-against-priced sums by kind of op.
 *
 * Why a real step: timed loops see a faster machine than a step does. A loop repeats one op on
 * operands that stay in cache, with the other lanes asleep; in a step each op meets operands the
 * previous ops pushed out of cache, beside the copy lanes' and host threads' work. On this machine the
 * loops' prices put the matrix's steps 18-41 % under their wall time. So the loops give each price its
 * shape (the GEMM curves by size, which a step meets at a few sizes only) and the step gives its level.
 *
 * The model is fixed and is none of bench_predict's configs: one layer, n_embd 96, 2 heads, T 32,
 * micro-batch 2, 2 micro-batches a step, ZeRO stage 0, bf16; each measurement is a run of 6 steps less
 * a run of 2 (so the first step's page faults and first touches, and start-up, fall out: they made
 * the step's ops look 30 % dearer than in the matrix's later steps), taken 3 times, each figure the
 * median of the 3. Its LM head is a [64 x 96] x
 * [96 x 50304] GEMM, the shape that carries most of a small GPT-2's step on a CPU. The run is this
 * executable's `train` in a child process (the sim's lanes are threads of this one: a fork could not
 * run them), with ZEROTRAIN_SIM_PROFILE set so each item has a price, ZEROTRAIN_SIM_DRY=0 so it runs,
 * and ZEROTRAIN_SIM_OP_TIMES so each item's lane CPU time is written beside it.
 *
 * With tp T > 1 (`calibrate --tp T`) the step is the same model at tensor_parallel.tp_size T, run as
 * T processes at once (`zerotrain run -n T --tp T`), and every rank's op table is summed: what one
 * rank's ops cost when the node's ranks run together, each on its share of the vocabulary, its heads
 * and its cores. A profile for a tp rank priced from a one-process step over-priced the matrix's tp 2
 * row by 41 %, every kind of op alike: a rank's smaller operands (half the vocabulary's logits and
 * embedding) meet the caches differently from one process's whole ones. */
#define _GNU_SOURCE
#include "cmd/calibrate_step.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/shard.h"

const char *const zt_step_kind_names[STEP_NKINDS] = {"block GEMMs", "LM head forward", "LM head backward",
                                                     "attention", "cross-entropy", "element-wise"};

enum { LAYERS = 1, EMBD = 96, HEADS = 2, SEQ = 32, MICRO = 2, ACCUM = 2, STEPS_SHORT = 2, STEPS_LONG = 6, STEP_RUNS = 3,
       VOCAB = 50257 };
#define SHARD_TOKENS 8192

static int write_shard(const char *shard, zt_err *err) {
    uint16_t *tok = zt_xmalloc(SHARD_TOKENS * sizeof *tok);
    zt_rng rng;
    zt_rng_seed(&rng, 1234);
    for (int i = 0; i < SHARD_TOKENS; i++) tok[i] = (uint16_t)(zt_rng_u64(&rng) % VOCAB);
    int rc = zt_shard_write(shard, tok, SHARD_TOKENS, err);
    free(tok);
    return rc ? -1 : 0;
}

static int write_config(const char *shard, const char *config, int steps, int tp, zt_err *err) {
    FILE *f = fopen(config, "w");
    if (!f) return zt_fail(err, "calibrate: cannot write %s: %s", config, strerror(errno));
    fprintf(f, "# calibrate's real step (cmd/calibrate_step.c)\n"
               "model: {n_layer: %d, n_head: %d, n_embd: %d, vocab_size: %d, n_positions: %d}\n"
               "data: {train: \"%s\", val: null, seq_len: %d}\n"
               "train_batch_size: %d\ntrain_micro_batch_size_per_gpu: %d\ntrain_iters: %d\n"
               "optimizer: {type: AdamW, params: {lr: 1.0e-4}}\nzero_optimization: {stage: 0}\n"
               "device: sim\neval_interval: 0\nsample_interval: 0\nsample_tokens: 0\ncheckpoint: {dir: null}\n"
               "steps_per_print: %d\nseed: 1234\ntensor_parallel: {tp_size: %d}\n",
            LAYERS, HEADS, EMBD, VOCAB, SEQ, shard, SEQ, MICRO * ACCUM, MICRO, steps, steps, tp);
    return fclose(f) ? zt_fail(err, "calibrate: cannot write %s: %s", config, strerror(errno)) : 0;
}

/* this executable's `train config` (tp > 1: `run -n tp --tp tp config`, tp ranks at once), its output into
 * log, the environment as the brief above says */
static int run_step(const char *config, int tp, const char *profile, const char *ops, const char *log, zt_err *err) {
    pid_t pid = fork();
    if (pid < 0) return zt_fail(err, "calibrate: fork: %s", strerror(errno));
    if (pid == 0) {
        FILE *out = freopen(log, "w", stdout);
        if (!out || dup2(fileno(stdout), 2) < 0) _exit(126);
        setenv("ZEROTRAIN_SIM_PROFILE", profile, 1);
        setenv("ZEROTRAIN_SIM_DRY", "0", 1);
        setenv("ZEROTRAIN_SIM_OP_TIMES", ops, 1);
        char ranks[16];
        snprintf(ranks, sizeof ranks, "%d", tp);
        char *one[] = {"zerotrain", "train", (char *)config, NULL};
        char *several[] = {"zerotrain", "run", "-n", ranks, "--tp", ranks, (char *)config, NULL};
        execv("/proc/self/exe", tp > 1 ? several : one);
        fprintf(stderr, "exec /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    /* the last error line a rank printed (mpirun's own lines follow it), else the last line */
    char last[256] = "", line[256];
    int error_seen = 0;
    FILE *f = fopen(log, "r");
    while (f && fgets(line, sizeof line, f)) {
        int is_error = strstr(line, "error:") != NULL;
        if (line[0] != '\n' && (is_error || !error_seen)) memcpy(last, line, sizeof last);
        error_seen |= is_error;
    }
    if (f) fclose(f);
    last[strcspn(last, "\n")] = 0;
    return zt_fail(err, "calibrate: the real step (train %s) failed: %s", config, last[0] ? last : "no output");
}

/* the kind of op a compute-lane row is, by its name and its FLOPs a item; -1: none to price */
static int kind_of(const char *name, double flops_per_item, double math_price, double min_item_s) {
    static const char *const gemms[] = {"matmul_forward", "matmul_backward", "matmul_forward_gelu",
                                        "matmul_backward_dgelu", "gemm", "gemm_f32"};
    /* the LM head's GEMMs have the vocabulary (or a segment of it, 1024 rows or more) along one side;
     * the blocks' longest side is 4 n_embd */
    double vocab_long = 2.0 * SEQ * MICRO * EMBD * 1024;
    for (size_t i = 0; i < sizeof gemms / sizeof gemms[0]; i++)
        if (!strcmp(name, gemms[i])) {
            if (flops_per_item < vocab_long) return STEP_GEMM_SQUARE;
            return strstr(name, "backward") ? STEP_LM_BACKWARD : STEP_LM_FORWARD;
        }
    if (!strncmp(name, "attention_", 10)) return STEP_ATTENTION;
    if (!strcmp(name, "softmax_xent") || !strncmp(name, "xent_", 5)) return STEP_XENT;
    return flops_per_item == 0 && math_price > min_item_s ? STEP_ELEMENTWISE : -1;
}

/* one rank's op table, added into *out */
static int read_ops(const char *path, double min_item_s, zt_step_prices *out, zt_err *err) {
    FILE *f = fopen(path, "r");
    if (!f) return zt_fail(err, "calibrate: the real step wrote no op table %s: %s", path, strerror(errno));
    char line[512];
    int lineno = 0, rows = 0;
    while (fgets(line, sizeof line, f)) {
        if (++lineno == 1) continue; /* the header */
        char lane[32], name[64];
        double n, price, operand, flops, widened, rounded, wall, cpu, widen_cpu, round_cpu;
        if (sscanf(line, "%31[^\t]\t%63[^\t]\t%lf\t%lf\t%lf\t%lf\t%lf\t%lf\t%lf\t%lf\t%lf\t%lf", lane, name, &n, &price,
                   &operand, &flops, &widened, &rounded, &wall, &cpu, &widen_cpu, &round_cpu) != 12) {
            fclose(f);
            return zt_fail(err, "%s:%d: not a row of the sim's op table", path, lineno);
        }
        if (strcmp(lane, "compute") || n < 1) continue;
        out->widened += widened, out->rounded += rounded;
        out->widen_cpu += 1e-3 * widen_cpu, out->round_cpu += 1e-3 * round_cpu;
        double math_price = 1e-3 * (price - operand);
        int k = kind_of(name, flops / n, math_price, min_item_s);
        if (k < 0) continue;
        out->priced[k] += n * math_price;
        out->measured[k] += 1e-3 * (cpu - widen_cpu - round_cpu);
        rows++;
    }
    fclose(f);
    if (!rows || out->widen_cpu <= 0 || out->round_cpu <= 0)
        return zt_fail(err, "calibrate: %s: the real step's op table has no priced compute ops", path);
    for (int k = 0; k < STEP_NKINDS; k++)
        if (out->priced[k] <= 0 || out->measured[k] <= 0)
            return zt_fail(err, "calibrate: %s: the real step met no %s", path, zt_step_kind_names[k]);
    return 0;
}

/* rank r's op table: ops itself for rank 0, ops.r for the others (sim_clock.h) */
static void rank_ops(char *path, size_t cap, const char *ops, int r) {
    if (r) snprintf(path, cap, "%s.%d", ops, r);
    else snprintf(path, cap, "%s", ops);
}

static double median3(double a, double b, double c) { return fmax(fmin(a, b), fmin(fmax(a, b), c)); }

/* long less short, kind by kind: the steps the long run has beyond the short one */
static void subtract(zt_step_prices *lng, const zt_step_prices *shrt) {
    for (int k = 0; k < STEP_NKINDS; k++) lng->measured[k] -= shrt->measured[k], lng->priced[k] -= shrt->priced[k];
    lng->widened -= shrt->widened, lng->widen_cpu -= shrt->widen_cpu;
    lng->rounded -= shrt->rounded, lng->round_cpu -= shrt->round_cpu;
}

/* one run of `steps` into *out: every rank's ops summed */
static int step_run(const char *shard, const char *config, int steps, int tp, const char *profile, const char *ops,
                    const char *log, double min_item_s, zt_step_prices *out, zt_err *err) {
    int rc = write_config(shard, config, steps, tp, err);
    if (!rc) rc = run_step(config, tp, profile, ops, log, err);
    char path[4200];
    for (int r = 0; r < tp; r++) {
        rank_ops(path, sizeof path, ops, r);
        if (!rc) rc = read_ops(path, min_item_s, out, err);
        unlink(path);
    }
    return rc;
}

int zt_calibrate_step(const char *profile, const char *dir, double min_item_s, int tp, zt_step_prices *out, zt_err *err) {
    char shard[4096], config[4096], ops[4096], log[4096];
    int pid = (int)getpid();
    snprintf(shard, sizeof shard, "%s/zerotrain-calibrate.%d.bin", dir, pid);
    snprintf(config, sizeof config, "%s/zerotrain-calibrate.%d.step.yaml", dir, pid);
    snprintf(ops, sizeof ops, "%s/zerotrain-calibrate.%d.ops.tsv", dir, pid);
    snprintf(log, sizeof log, "%s/zerotrain-calibrate.%d.log", dir, pid);
    /* STEP_RUNS pairs, each figure the median of theirs: one slow moment on a shared machine does not set it */
    zt_step_prices run[STEP_RUNS];
    memset(run, 0, sizeof run);
    int rc = write_shard(shard, err);
    for (int r = 0; r < STEP_RUNS && !rc; r++) {
        zt_step_prices shrt;
        memset(&shrt, 0, sizeof shrt);
        rc = step_run(shard, config, STEPS_SHORT, tp, profile, ops, log, min_item_s, &shrt, err);
        if (!rc) rc = step_run(shard, config, STEPS_LONG, tp, profile, ops, log, min_item_s, &run[r], err);
        if (!rc) subtract(&run[r], &shrt);
        for (int k = 0; k < STEP_NKINDS && !rc; k++)
            if (run[r].priced[k] <= 0 || run[r].measured[k] <= 0)
                rc = zt_fail(err, "calibrate: the real step's %d steps took no more %s than its %d (a machine too busy "
                                  "to measure)", STEPS_LONG, zt_step_kind_names[k], STEPS_SHORT);
    }
    unlink(shard), unlink(config), unlink(log);
    if (rc) return rc;
    *out = run[0]; /* the bytes and prices are the same in every run */
    out->steps = STEPS_LONG - STEPS_SHORT, out->runs = STEP_RUNS, out->layers = LAYERS, out->n_embd = EMBD,
    out->seq_len = SEQ, out->micro_batch = MICRO, out->tp = tp;
    for (int k = 0; k < STEP_NKINDS; k++) out->measured[k] = median3(run[0].measured[k], run[1].measured[k], run[2].measured[k]);
    out->widen_cpu = median3(run[0].widen_cpu, run[1].widen_cpu, run[2].widen_cpu);
    out->round_cpu = median3(run[0].round_cpu, run[1].round_cpu, run[2].round_cpu);
    return 0;
}
