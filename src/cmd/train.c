/* train.c — `zerotrain train CONFIG [--set KEY=VALUE]...`: the training loop. Reads the config,
 * builds the session, and for each step runs the micro-batches of this rank through forward and
 * backward, lets the ZeRO engine reduce, clip and update, and logs the step line and metrics; resumes,
 * saves at intervals and on a stop signal. Whether a step diverged, and what then, is the divergence
 * guard's (train_guard.c). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/blas_core.h"
#include "engine/init_from.h"
#include "io/checkpoint.h"
#include "engine/mem_report.h"
#include "cmd/commands.h"
#include "cmd/help.h"
#include "config/config.h"
#include "io/data.h"
#include "engine/loss_scale.h"
#include "cmd/sample.h"
#include "engine/schedule.h"
#include "engine/config_sizes.h"
#include "engine/session.h"
#include "comm/watchdog.h"
#include "io/monitor.h"
#include "util/test_hooks.h"
#include "comm/fail_together.h"
#include "util/clock.h"
#include "cmd/train_internal.h"

/* Exit status of a run stopped by SIGUSR1/SIGTERM/SIGINT after saving its checkpoint: the Slurm scripts
 * requeue the job on it, and the requeued job resumes from `latest`. */
#define ZT_EXIT_PREEMPTED 99

static volatile sig_atomic_t stop_requested = 0; /* set by the signal handler only */
/* Set while the resume loads its checkpoint: a load stalled on its file system would never reach the
 * step that acts on a stop signal, and there is nothing to save yet (the checkpoint stays as it is),
 * so a stop signal then ends the rank at once, with the preempted status a requeue resumes from. */
static volatile sig_atomic_t loading_checkpoint = 0;
static void on_stop_signal(int sig) {
    if (sig == SIGINT && stop_requested) { /* a second Ctrl-C at a rank run by hand: stop at once */
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
    }
    stop_requested = sig;
    zt_scratch_remove_all(); /* the swap files: open descriptors keep serving the save this asks for */
    if (loading_checkpoint) {
        static const char line[] = "zerotrain: stopped by signal while loading the checkpoint to resume from "
                                   "(nothing to save; it stays as it is)\n";
        ssize_t w = write(2, line, sizeof line - 1);
        (void)w;
        _exit(ZT_EXIT_PREEMPTED);
    }
}

static void install_stop_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR1);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL); /* Ctrl-C at a rank run by hand saves too */
    sigprocmask(SIG_UNBLOCK, &sa.sa_mask, NULL); /* held since main (hold_stop_signals): one that came runs now */
}

/* the usage lines under train's argument error (printed before it: the error line is the caller's) */
static void usage(void) { zt_help_usage(stderr, "train"); }

/* mean validation loss over eval_batches in-order batches, spread round-robin over data-parallel ranks
 * (every rank runs the same number of forwards so stage-3 gathers stay matched; a tensor-parallel group
 * runs its rank's batches together); NaN with *failed set when a batch could not be read */
static double evaluate(trainer *t, int *failed) {
    int B = t->cfg.train_micro_batch_size_per_gpu, T = t->cfg.seq_len;
    int nb = t->cfg.eval_batches, W = t->s.dp_world, r = t->s.dp_rank;
    int rounds = (nb + W - 1) / W;
    double acc[2] = {0, 0};
    for (int k = 0; k < rounds; k++) {
        int batch = k * W + r;
        int real = batch < nb;
        zt_err err = {{0}};
        int rc = zt_dataset_sequential(&t->val, (size_t)(real ? batch : 0) * B * T, B, t->inputs, t->targets, &err);
        if ((*failed = zt_fail_together(t->comm, rc, &err))) return NAN;
        float loss = zt_gpt2_forward(&t->s.model, &t->s.src, t->inputs, t->targets, 0.0f);
        if (real) { acc[0] += loss; acc[1] += 1; }
    }
    t->s.dp_comm->allreduce_host_double(t->s.dp_comm, acc, 2);
    return acc[0] / acc[1];
}

/* Whether step directory STEP_DIR lies in directory DIR (both resolved: symlinks and ./ alike). */
static int step_is_in(const char *step_dir, const char *dir) {
    char parent[4096], a[PATH_MAX], b[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", step_dir);
    char *slash = strrchr(parent, '/');
    if (slash) *slash = 0;
    else snprintf(parent, sizeof parent, ".");
    return realpath(parent, a) && realpath(dir, b) && !strcmp(a, b);
}

/* resume: auto (from checkpoint.dir/latest when there is one), never, or PATH. Tells the user what
 * differs from the run that saved it. */
static int maybe_resume(trainer *t, zt_err *err) {
    zt_config *cfg = &t->cfg;
    const char *path = cfg->resume_mode == ZT_RESUME_PATH ? cfg->resume_path : cfg->checkpoint_dir;
    if (cfg->resume_mode == ZT_RESUME_NEVER || !path) return 0;
    char step_dir[4096], why[200], phase[4200];
    /* verifying and loading it read every byte: bounded by its size (a stuck file system ends the rank) */
    double bound = zt_checkpoint_read_bound(path, step_dir, sizeof step_dir, why, sizeof why);
    const char *base = strrchr(step_dir, '/');
    snprintf(phase, sizeof phase, "resume load of %s", base ? base + 1 : step_dir[0] ? step_dir : path);
    zt_watchdog_phase(phase, bound, why, 1);
    int found = zt_checkpoint_resolve_verified_shared(t->comm, path, step_dir, sizeof step_dir, err);
    if (found < 0) return -1;
    if (found == 0) {
        if (cfg->resume_mode == ZT_RESUME_PATH) return zt_fail(err, "%s: resume: no checkpoint there", path);
        return 0; /* auto: fresh start */
    }
    zt_train_state st;
    zt_checkpoint_meta meta;
    loading_checkpoint = 1;
    if (zt_test_hook_load_stall(t->comm->rank)) { /* a load that never ends: what a stop signal must still end */
        zt_info("resume: loading %s (stalled by ZEROTRAIN_INJECT_LOAD_STALL; bounded at %g s: %s)", step_dir, bound, why);
        if (stop_requested) _exit(ZT_EXIT_PREEMPTED); /* one that came just before: this load would never end */
        for (;;) pause();
    }
    int loaded = zt_checkpoint_load(step_dir, zt_engine_state_view(t->s.engine), &t->s.shape, t->comm, &st, &meta,
                                    cfg->ckpt_allow_unverified, err);
    loading_checkpoint = 0;
    if (loaded) return -1;
    t->start_step = st.step;
    if (cfg->checkpoint_dir && step_is_in(step_dir, cfg->checkpoint_dir)) t->last_saved_step = t->good_step = st.step;
    if (t->has_ckdir) { /* keep_last may prune the steps of the runs this one continues, not the one resumed */
        t->ckdir.keep_step = t->good_step;
        memcpy(t->ckdir.lineage, meta.lineage, sizeof meta.lineage);
        t->ckdir.n_lineage = meta.n_lineage;
    }
    t->samples_at_start = st.data_samples;
    if (cfg->fp16_enabled && st.loss_scale > 0) {
        t->scaler.scale = st.loss_scale;
        t->scaler.good_steps = st.loss_scale_good_steps;
        t->scaler.hysteresis_left = st.hysteresis_left;
    }
    const char *restarts = getenv("SLURM_RESTART_COUNT");
    zt_info("resumed from %s at step %ld (%ld tokens seen)%s%s%s", step_dir, st.step, st.tokens_seen,
            restarts ? " (SLURM_RESTART_COUNT=" : "", restarts ? restarts : "", restarts ? ")" : "");
    int W = t->comm->world;
    if (meta.world_size != W || meta.zero_stage != cfg->zero_stage || meta.tensor_parallel != t->s.tp_size) {
        char tp_was[40] = "", tp_now[40] = ""; /* named when either run splits tensors */
        if (meta.tensor_parallel > 1 || t->s.tp_size > 1) {
            snprintf(tp_was, sizeof tp_was, " (tensor parallel %d)", meta.tensor_parallel);
            snprintf(tp_now, sizeof tp_now, " (tensor parallel %d)", t->s.tp_size);
        }
        zt_info("resume: resharded from %d rank%s%s at ZeRO stage %d to %d rank%s%s at stage %d", meta.world_size,
                meta.world_size > 1 ? "s" : "", tp_was, meta.zero_stage, W, W > 1 ? "s" : "", tp_now, cfg->zero_stage);
    }
    long gb = (long)cfg->train_micro_batch_size_per_gpu * cfg->gradient_accumulation_steps * t->s.dp_world;
    if (st.step > 0 && st.data_samples != st.step * gb)
        zt_info("resume: global batch is now %ld sequences (the saved run averaged %.1f); the data stream continues "
                "at sample %ld", gb, (double)st.data_samples / st.step, st.data_samples);
    zt_checkpoint_meta_free(&meta);
    if (st.step >= cfg->train_iters)
        zt_info("resume: the checkpoint is at step %ld, train_iters is %ld: nothing left to train", st.step,
                cfg->train_iters);
    return 0;
}

static void format_eta(double seconds, char *buf, size_t cap) {
    if (isnan(seconds)) { /* no timed step yet (the first is warm-up): "-", never a made-up "0s" */
        snprintf(buf, cap, "-");
        return;
    }
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(buf, cap, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    else if (s >= 60) snprintf(buf, cap, "%ldm%02lds", s / 60, s % 60);
    else snprintf(buf, cap, "%lds", s);
}

static step_plan plan_steps(const trainer *t) {
    const zt_config *cfg = &t->cfg;
    step_plan p = {.B = cfg->train_micro_batch_size_per_gpu, .T = cfg->seq_len, .A = cfg->gradient_accumulation_steps};
    p.global_batch = (long)p.B * p.A * t->s.dp_world;
    p.tokens = (double)p.global_batch * p.T;
    p.flops = zt_gpt2_flops_per_token(&t->s.shape, p.T) * p.tokens;
    p.dloss = (float)(1.0 / p.tokens);
    return p;
}

/* The data is read as it is used (io/data.h): a rank that cannot read its batch (a shard cut short
 * or unreadable since the start, a token outside the vocabulary) stops every rank with one line,
 * agreed where every rank reads a batch, before any of it is used; 1 then.
 * Micro-batch a of step `step` into t->inputs/targets: the global batch of step s is samples
 * [s*GB, (s+1)*GB) of the stream; data-parallel rank r takes its B*A contiguous ones, micro-step a the
 * a-th B (the ranks of a tensor-parallel group read the same ones). */
static int load_micro_batch(trainer *t, const step_plan *p, long step, int a) {
    uint64_t base = (uint64_t)t->samples_at_start + (uint64_t)(step - t->start_step) * p->global_batch +
                    (uint64_t)t->s.dp_rank * p->B * p->A + (uint64_t)a * p->B;
    zt_err err = {{0}};
    int rc = 0;
    if (t->no_data) { /* costed only: the ops read no value, so token 0 stands for every token */
        memset(t->inputs, 0, (size_t)p->B * p->T * sizeof *t->inputs);
        memset(t->targets, 0, (size_t)p->B * p->T * sizeof *t->targets);
        return 0;
    }
    for (int b = 0; b < p->B && !rc; b++)
        rc = zt_dataset_sample(&t->train, base + b, t->inputs + b * p->T, t->targets + b * p->T, &err);
    return zt_fail_together(t->comm, rc, &err);
}

/* Whether rank 0 knows every rank's traffic in a step without asking (the metrics line): the engine's
 * comm keeps every rank's counts (comm.h's rank_bytes) and holds the world's ranks in world order, as
 * it does without tensor parallelism (session.c: the data-parallel group is then the world). With
 * tensor parallelism rank 0 sees only its own data-parallel group, and every rank's counts are
 * gathered each step. The same on every rank: the gather is collective. */
static int rank_bytes_known(trainer *t) {
    const zt_comm *c = zt_engine_comm(t->s.engine);
    return t->s.tp_size == 1 && c->rank_bytes && c->world == t->comm->world && !zt_test_hook_gather_comm_bytes();
}

/* One optimizer step: A micro-steps of forward and backward (the engine reduces gradients as they
 * become final), then the engine's step (norm, clipping, AdamW, gathers). 1 when a batch could not
 * be read (on every rank: the run ends). */
static int train_step(trainer *t, const step_plan *p, long step, step_record *rec) {
    const zt_config *cfg = &t->cfg;
    zt_engine *eng = t->s.engine;
    /* timed phases must not overlap queued device work: with a trace too, whose phases are the figures'
     * (scripts/plot --trace); the host then waits for the device at the end of each forward and backward */
    int sync = cfg->wall_clock_breakdown || cfg->trace_file;
    double t0 = zt_clock_now(), loss_sum = 0;
    zt_comm_bytes bytes0 = zt_engine_comm(eng)->bytes, tp_bytes0 = t->s.model.tp ? t->s.model.tp->bytes : bytes0;
    const zt_comm *ec = zt_engine_comm(eng);
    int every_rank = t->metrics && rank_bytes_known(t); /* rank 0 takes every rank's step traffic from its own counts */
    if (every_rank && !t->rank_bytes_before) {
        t->rank_bytes_before = zt_xcalloc((size_t)ec->world, sizeof *t->rank_bytes_before);
        t->rank_bytes_step = zt_xcalloc((size_t)ec->world, sizeof *t->rank_bytes_step);
    }
    if (every_rank) memcpy(t->rank_bytes_before, ec->rank_bytes, (size_t)ec->world * sizeof *ec->rank_bytes);
    memset(rec, 0, sizeof *rec);
    double link0[2];
    zt_engine_link_bytes(eng, link0);
    zt_engine_device_peak(eng); /* the step's peak counts from here */
    rec->step = step + 1;
    rec->lr = zt_lr_at(cfg, step);
    if (zt_test_hook_lr_spike_at(rec->step)) rec->lr *= 1e4f; /* a diverging update, found at the next step */
    rec->val_loss = NAN;
    /* the update as it will be unless the norm is clipped: with super_offload the host part's CPU Adam
     * starts during backward (rolled back at the step if not) */
    zt_engine_plan_step(eng, rec->lr, t->scaler.scale);
    for (int a = 0; a < p->A; a++) {
        zt_engine_begin_micro(eng, a == 0, a == p->A - 1);
        if (load_micro_batch(t, p, step, a)) return 1;
        double ta = zt_clock_now();
        /* fp16: the loss is multiplied by the scale so small gradients survive 16 bits; the engine
         * divides it out of the norm and the update */
        loss_sum += zt_gpt2_forward(&t->s.model, &t->s.src, t->inputs, t->targets,
                                    (float)(p->dloss * t->scaler.scale));
        if (sync) t->s.be->synchronize();
        double tb = zt_clock_now();
        zt_gpt2_backward(&t->s.model, &t->s.src);
        if (sync) t->s.be->synchronize();
        double tc = zt_clock_now();
        zt_engine_phase(eng, "forward", ta, tb);
        zt_engine_phase(eng, "backward", tb, tc);
        rec->forward += tb - ta;
        rec->backward += tc - tb;
    }
    /* the global loss before the update: the divergence guard may skip the update on it */
    double loss_acc[1] = {loss_sum / p->A};
    /* (a tensor-parallel group's ranks have the same loss: the sum runs over the data-parallel group) */
    if (t->s.dp_world > 1) t->s.dp_comm->allreduce_host_double(t->s.dp_comm, loss_acc, 1);
    rec->loss = loss_acc[0] / t->s.dp_world;
    double to = zt_clock_now();
    if (zt_test_hook_overflow_at(rec->step)) zt_engine_inject_overflow(eng);
    rec->scale_used = t->scaler.scale;
    /* the loss comes from one all-reduce, so every rank finds the same (run() agrees on it too) */
    rec->guard = guard_before_step(t, rec->loss);
    if (rec->guard) { /* no update on a diverged loss, whatever the action: a stopped run stays as it was */
        zt_engine_skip_step(eng);
        rec->norm = NAN;
        rec->skipped = 1;
    } else {
        float max_norm = zt_test_hook_clip_at(rec->step) ? 1e-6f : cfg->gradient_clipping; /* a clipped step on demand */
        rec->norm = zt_engine_step_scaled(eng, rec->lr, max_norm, rec->scale_used, &rec->skipped);
        zt_loss_scaler_update(&t->scaler, cfg->fp16_enabled && rec->skipped);
        if (cfg->fp16_enabled && rec->skipped)
            zt_info("step %ld: gradient overflow at loss scale %g, update skipped; loss scale now %g", rec->step,
                    rec->scale_used, t->scaler.scale);
        rec->guard = guard_after_step(t, rec); /* the norm is global: the same on every rank */
    }
    rec->optimizer = zt_clock_now() - to;
    rec->update_mode = zt_engine_timing_of(eng)->update_mode;
    rec->rolled_back = zt_engine_timing_of(eng)->rolled_back;
    t->s.be->synchronize();
    double t_end = zt_clock_now();
    rec->seconds = t_end - t0;
    double link1[2];
    zt_engine_link_bytes(eng, link1);
    rec->link_bytes[0] = link1[0] - link0[0];
    rec->link_bytes[1] = link1[1] - link0[1];
    rec->device_peak = zt_engine_device_peak(eng);
    zt_engine_trace_step(eng, rec->step, t0, t_end, rec->link_bytes, rec->device_peak);
    rec->samples_done = t->samples_at_start + (step + 1 - t->start_step) * p->global_batch;
    rec->bytes = zt_comm_bytes_since(&zt_engine_comm(eng)->bytes, &bytes0);
    if (t->s.model.tp) rec->tp_bytes = zt_comm_bytes_since(&t->s.model.tp->bytes, &tp_bytes0);
    for (int r = 0; every_rank && r < ec->world; r++) /* at the point each rank took its own rec->bytes */
        t->rank_bytes_step[r] = zt_comm_bytes_since(&ec->rank_bytes[r], &t->rank_bytes_before[r]);
    zt_engine_nvme now;
    zt_engine_nvme_stats(eng, &now);
    rec->nvme = (zt_engine_nvme){now.bytes_read - t->nvme_counted.bytes_read,
                                 now.bytes_written - t->nvme_counted.bytes_written,
                                 now.read_seconds - t->nvme_counted.read_seconds,
                                 now.write_seconds - t->nvme_counted.write_seconds,
                                 now.param_pieces - t->nvme_counted.param_pieces,
                                 now.param_read_ahead - t->nvme_counted.param_read_ahead,
                                 now.param_hits - t->nvme_counted.param_hits,
                                 now.param_wait_seconds - t->nvme_counted.param_wait_seconds};
    t->nvme_counted = now;
    return 0;
}

/* The step line (and the breakdown) on rank 0 every steps_per_print steps, the first and the last. */
static void print_step(trainer *t, const step_plan *p, const step_record *rec, double eta) {
    const zt_config *cfg = &t->cfg;
    long steps = cfg->train_iters;
    if (t->comm->rank != 0 || !(rec->step % cfg->steps_per_print == 0 || rec->step == 1 || rec->step == steps))
        return;
    char eta_s[32], val_s[48] = "";
    format_eta(eta, eta_s, sizeof eta_s);
    if (!isnan(rec->val_loss)) snprintf(val_s, sizeof val_s, " | val %.4f", rec->val_loss);
    char mode_s[96] = ""; /* super_offload: how the host part's update ran */
    zt_engine_speculation sp = zt_engine_speculation_counts(t->s.engine);
    if (rec->update_mode == ZT_UPDATE_VALIDATED) snprintf(mode_s, sizeof mode_s, " | update validated first");
    if (rec->update_mode == ZT_UPDATE_SPECULATED)
        snprintf(mode_s, sizeof mode_s, " | update speculated%s (%ld of %ld rolled back)",
                 rec->rolled_back ? ", rolled back" : "", sp.rollbacks, sp.speculated_steps);
    /* costed, not performed (predict): no loss or norm was computed, so none is shown */
    char loss_s[24] = "-", norm_s[24] = "-", flops_s[32];
    if (!zt_clock_costs_only()) {
        snprintf(loss_s, sizeof loss_s, "%.4f", rec->loss);
        snprintf(norm_s, sizeof norm_s, "%.3f", rec->norm);
    }
    double flops = p->flops / rec->seconds; /* a GPU's rate reads in TFLOP/s, a CPU's in GFLOP/s */
    if (flops >= 1e13) snprintf(flops_s, sizeof flops_s, "%6.1f TFLOP/s", flops * 1e-12);
    else snprintf(flops_s, sizeof flops_s, "%6.1f GFLOP/s", flops * 1e-9);
    zt_info("step %5ld/%ld (%3.0f%%) | loss %s%s | lr %.2e | norm %s | %7.1f ms | %8.0f tok/s | %s | eta %s%s",
            rec->step, steps, 100.0 * rec->step / steps, loss_s, val_s, rec->lr, norm_s, rec->seconds * 1e3,
            p->tokens / rec->seconds, flops_s, eta_s, mode_s);
    if (cfg->wall_clock_breakdown) {
        zt_engine_print_timing(t->s.engine);
        zt_comm_bytes_print(&rec->bytes);
        if (rec->nvme.bytes_read + rec->nvme.bytes_written > 0)
            zt_info("      nvme (rank 0): read %.1f MB in %.1f ms, written %.1f MB in %.1f ms (time with I/O in flight)",
                    rec->nvme.bytes_read * 1e-6, rec->nvme.read_seconds * 1e3, rec->nvme.bytes_written * 1e-6,
                    rec->nvme.write_seconds * 1e3);
        if (rec->nvme.param_pieces > 0)
            zt_info("      nvme params (rank 0): %.0f pieces gathered, %.0f of them read ahead, waited %.1f ms for reads",
                    rec->nvme.param_pieces, rec->nvme.param_hits, rec->nvme.param_wait_seconds * 1e3);
    }
    if (cfg->memory_breakdown) zt_mem_report_step(t->s.engine, rec->step, t->s.model.act_bytes);
}

/* One JSON line in metrics_file (rank 0; every rank's bytes from its own counts of them, or gathered
 * for it where it has none: rank_bytes_known) and the monitors.
 * Returns 0, or -1 with the writer's error (a full disk) in err; the caller stops the run. */
static int record_step(trainer *t, const step_plan *p, const step_record *rec, zt_err *err) {
    const zt_config *cfg = &t->cfg;
    const zt_mem_account *mem = zt_engine_memory(t->s.engine);
    double comm_ms = zt_engine_comm_seconds(t->s.engine) * 1e3;
    zt_comm_bytes *gathered = cfg->metrics_file && !rank_bytes_known(t) ? zt_comm_bytes_gather(t->comm, &rec->bytes) : NULL;
    const zt_comm_bytes *bytes_per_rank = gathered ? gathered : t->rank_bytes_step;
    zt_comm_bytes *tp_bytes_per_rank =
        cfg->metrics_file && t->s.tp_size > 1 ? zt_comm_bytes_gather(t->comm, &rec->tp_bytes) : NULL;
    if (t->metrics) {
        char norm_s[32] = "null", loss_s[32] = "null"; /* JSON has no inf or nan: those are null */
        if (isfinite(rec->norm)) snprintf(norm_s, sizeof norm_s, "%.9g", rec->norm);
        if (isfinite(rec->loss)) snprintf(loss_s, sizeof loss_s, "%.9g", rec->loss);
        fprintf(t->metrics, "{\"step\": %ld, \"loss\": %s, \"lr\": %.9g, \"grad_norm\": %s, \"step_ms\": %.3f, "
                            "\"tokens_per_s\": %.1f, \"comm_ms\": %.3f",
                rec->step, loss_s, rec->lr, norm_s, rec->seconds * 1e3, p->tokens / rec->seconds, comm_ms);
        for (int c = 0; c < ZT_MEM_NCAT; c++)
            fprintf(t->metrics, ", \"mem_%s_mib\": %.3f", zt_mem_category_names[c], mem->device[c] / 1048576.0);
        fprintf(t->metrics, ", \"params_peak_mib\": %.3f", mem->params_peak / 1048576.0);
        if (mem->nvme[ZT_MEM_OPTIM] + mem->nvme[ZT_MEM_PARAMS])
            fprintf(t->metrics, ", \"nvme_params_mib\": %.3f, \"nvme_optimizer_mib\": %.3f, \"nvme_read_bytes\": %.0f, "
                                "\"nvme_written_bytes\": %.0f, \"nvme_read_ms\": %.3f, \"nvme_write_ms\": %.3f",
                    mem->nvme[ZT_MEM_PARAMS] / 1048576.0, mem->nvme[ZT_MEM_OPTIM] / 1048576.0, rec->nvme.bytes_read,
                    rec->nvme.bytes_written, rec->nvme.read_seconds * 1e3, rec->nvme.write_seconds * 1e3);
        if (mem->nvme[ZT_MEM_PARAMS]) /* offload_param nvme: the gathers' reads, how many were read ahead */
            fprintf(t->metrics, ", \"nvme_param_pieces\": %.0f, \"nvme_param_read_ahead\": %.0f, "
                                "\"nvme_param_hits\": %.0f, \"nvme_param_wait_ms\": %.3f",
                    rec->nvme.param_pieces, rec->nvme.param_read_ahead, rec->nvme.param_hits,
                    rec->nvme.param_wait_seconds * 1e3);
        if (cfg->zero_stage == 3) /* segments gathered this step, and of them gathered ahead of their use */
            fprintf(t->metrics, ", \"stage3_gathers\": %.0f, \"stage3_gathers_ahead\": %.0f",
                    zt_engine_timing_of(t->s.engine)->stage3_gathers, zt_engine_timing_of(t->s.engine)->stage3_gathers_ahead);
        if (cfg->fp16_enabled) fprintf(t->metrics, ", \"loss_scale\": %g", rec->scale_used);
        if (cfg->fp16_enabled || rec->skipped) fprintf(t->metrics, ", \"skipped\": %d", rec->skipped);
        if (rec->guard) fprintf(t->metrics, ", \"diverged\": \"%s\"", guard_names[rec->guard]);
        if (rec->update_mode != ZT_UPDATE_PLAIN) { /* super_offload: the speculative step's mode and counts */
            zt_engine_speculation sp = zt_engine_speculation_counts(t->s.engine);
            fprintf(t->metrics, ", \"update\": \"%s\", \"rolled_back\": %s, \"speculated_steps\": %ld, "
                                "\"rollbacks\": %ld, \"speculated_elems\": %.0f, \"accepted_elems\": %.0f",
                    rec->update_mode == ZT_UPDATE_SPECULATED ? "speculated" : "validated",
                    rec->rolled_back ? "true" : "false", sp.speculated_steps, sp.rollbacks, sp.kept_elems,
                    sp.accepted_elems);
        }
        if (cfg->wall_clock_breakdown)
            fprintf(t->metrics, ", \"forward_ms\": %.3f, \"backward_ms\": %.3f, \"optimizer_ms\": %.3f",
                    rec->forward * 1e3, rec->backward * 1e3, rec->optimizer * 1e3);
        if (cfg->wall_clock_breakdown && zt_engine_timing_of(t->s.engine)->host_adam > 0) {
            /* Twin-Flow: how long the device sat idle waiting for the host part of the update */
            const zt_engine_timing *tm = zt_engine_timing_of(t->s.engine);
            fprintf(t->metrics, ", \"host_adam_ms\": %.3f, \"device_idle_ms\": %.3f, \"device_idle_pct\": %.2f",
                    tm->host_adam * 1e3, tm->device_idle * 1e3, 100.0 * tm->device_idle / rec->seconds);
        }
        if (zt_engine_trace(t->s.engine)) /* what the trace's figures are checked against (scripts/plot --trace) */
            fprintf(t->metrics, ", \"h2d_bytes\": %.0f, \"d2h_bytes\": %.0f, \"device_peak_bytes\": %.0f",
                    rec->link_bytes[0], rec->link_bytes[1], rec->device_peak);
        zt_comm_bytes_json(t->metrics, "comm", bytes_per_rank, t->comm->world);
        if (tp_bytes_per_rank) zt_comm_bytes_json(t->metrics, "tp_comm", tp_bytes_per_rank, t->comm->world);
        if (!isnan(rec->val_loss)) fprintf(t->metrics, ", \"val_loss\": %.9g", rec->val_loss);
        train_save_metrics(t, t->metrics);
        fprintf(t->metrics, "}\n");
        if (fflush(t->metrics) || ferror(t->metrics)) {
            free(gathered);
            free(tp_bytes_per_rank);
            return zt_fail(err, "%s: cannot write metrics_file: %s", cfg->metrics_file, strerror(errno ? errno : EIO));
        }
    }
    free(gathered);
    free(tp_bytes_per_rank);
    if (t->monitor) {
        int bd = cfg->wall_clock_breakdown;
        zt_step_metrics sm = {
            .samples = rec->samples_done, .loss = rec->loss, .lr = rec->lr, .grad_norm = rec->norm,
            .val_loss = rec->val_loss, .loss_scale = cfg->fp16_enabled ? rec->scale_used : NAN,
            .step_ms = rec->seconds * 1e3, .tokens_per_s = p->tokens / rec->seconds, .comm_ms = comm_ms,
            .forward_ms = bd ? rec->forward * 1e3 : NAN, .backward_ms = bd ? rec->backward * 1e3 : NAN,
            .optimizer_ms = bd ? rec->optimizer * 1e3 : NAN, .mem = mem};
        if (zt_monitor_step(t->monitor, &sm, err)) return -1;
    }
    return zt_trace_check(zt_engine_trace(t->s.engine), err);
}

static int due(long step, long interval) { return interval > 0 && step % interval == 0; }

/* what the ranks agree on after each step (run()): the largest value any rank has */
enum { EVENT_STOP = 1, EVENT_WRITE_FAILED = 2, EVENT_GUARD = 8 /* + GUARD_* */ };

/* A writer failed (WHY, agreed by every rank; a full disk): the one policy for every writer
 * (metrics_file, trace, csv_monitor, tensorboard, checkpoints; docs/faults.md): a last checkpoint
 * attempt, then one error line saying what failed and where the run can resume, and exit 1. */
static int stop_on_write_error(trainer *t, const step_record *rec, zt_err *why) {
    char latest[4200] = "";
    int saved = -1;
    zt_err save_err = {{0}};
    if (t->cfg.checkpoint_dir && t->last_saved_step != rec->step)
        saved = train_save(t, rec->step, rec->samples_done, 1, &save_err);
    train_describe_latest(t, latest, sizeof latest);
    zt_err err = {{0}};
    if (saved == 0) zt_fail(&err, "%s; the run stops after a last checkpoint: %s", why->msg, latest);
    else if (saved < 0 && t->cfg.checkpoint_dir)
        zt_fail(&err, "%s; the run stops; its last checkpoint attempt failed too (%s); %s", why->msg, save_err.msg,
                latest);
    else zt_fail(&err, "%s; the run stops; %s", why->msg, latest);
    if (t->comm->rank == 0) zt_print_error(&err);
    return 1;
}

/* The training loop: step, evaluate, log, record, sample, checkpoint, and stop together on a signal. */
static int run(trainer *t) {
    const zt_config *cfg = &t->cfg;
    step_plan p = plan_steps(t);
    long steps = cfg->train_iters;
    double timed_start = 0; /* ETA: from the end of the first step, which warms up */
    zt_engine_nvme_stats(t->s.engine, &t->nvme_counted); /* start-up and resume I/O are not a step's */
    for (long step = t->start_step; step < steps; step++) {
        step_record rec;
        if (train_step(t, &p, step, &rec)) return 1;
        int last = rec.step == steps;
        int val_failed = 0;
        if (t->has_val && (due(rec.step, cfg->eval_interval) || (last && cfg->eval_interval > 0)))
            rec.val_loss = evaluate(t, &val_failed);
        if (val_failed) return 1;
        if (step == t->start_step) timed_start = zt_clock_now();
        long timed = rec.step - (t->start_step + 1);
        print_step(t, &p, &rec, timed > 0 ? (zt_clock_now() - timed_start) / timed * (steps - rec.step) : NAN);
        zt_err werr = {{0}};
        int wrc = record_step(t, &p, &rec, &werr);
        if (t->observer) {
            const zt_mem_account *mem = zt_engine_memory(t->s.engine);
            zt_step_seen seen = {.step = rec.step, .seconds = rec.seconds, .tokens = p.tokens, .flops = p.flops,
                                 .comm = rec.bytes, .tp_comm = rec.tp_bytes};
            for (int c = 0; c < ZT_MEM_NCAT; c++) seen.device_bytes += (double)mem->device[c], seen.host_bytes += (double)mem->host[c];
            seen.device_bytes += (double)t->s.model.scratch_bytes; /* the model's scratch, which estimate counts too */
            t->observer->step(t->observer->ctx, &seen);
        }
        /* one agreement a step on what happened on any rank, the weightiest first: the divergence
         * guard's finding, a writer's failure, SIGUSR1/SIGTERM. A lesser one left out this step
         * comes back the next (a failed writer stays failed, a signal stays requested). */
        int event = t->comm->agree_max(t->comm, rec.guard ? EVENT_GUARD + rec.guard : wrc ? EVENT_WRITE_FAILED
                                                : stop_requested ? EVENT_STOP : 0);
        rec.guard = event > EVENT_GUARD ? event - EVENT_GUARD : GUARD_OK;
        zt_err serr = {{0}}; /* a save in flight completes here once written (first, for any event) */
        if (train_save_boundary(t, event != 0, &serr)) {
            if (t->comm->rank == 0) zt_print_error(&serr);
            return 1;
        }
        int verdict = guard_verdict(t, &rec); /* before any save: a diverged state is never saved */
        if (verdict == 1) return 1;
        if (verdict == 2) {
            if (guard_roll_back(t, &rec, &p)) return 1;
            step = t->start_step - 1; /* the loop's step++ makes it the good checkpoint's */
            continue;
        }
        if (event == EVENT_WRITE_FAILED) { /* every rank learns the failing rank's message */
            zt_agree(t->comm, wrc, &werr);
            return stop_on_write_error(t, &rec, &werr);
        }
        if (due(rec.step, cfg->sample_interval) && !last) zt_sample_print(&t->s, cfg->sample_tokens, cfg->seed + (uint64_t)step);

        long jump = zt_test_hook_skip_batches_after(rec.step); /* a run that never sees some batches */
        if (jump) t->samples_at_start += jump * p.global_batch;

        /* every rank stops at the same step when any rank got SIGUSR1/SIGTERM */
        int stop = event == EVENT_STOP;
        if (cfg->checkpoint_dir && (due(rec.step, cfg->save_interval) || last || stop)) {
            zt_err err = {{0}};
            if (train_save(t, rec.step, rec.samples_done, last || stop, &err)) {
                if (t->comm->rank == 0) zt_print_error(&err);
                return 1;
            }
        }
        if (stop) {
            if (cfg->checkpoint_dir)
                zt_info("zerotrain: stopped by signal after step %ld, checkpoint saved; exiting with status %d "
                        "(requeue to resume)", rec.step, ZT_EXIT_PREEMPTED);
            else /* the status still says "preempted" to a batch script; the line says what a requeue gets */
                zt_info("zerotrain: stopped by signal after step %ld; nothing saved (no checkpoint.dir), so a requeued "
                        "run starts over; exiting with status %d", rec.step, ZT_EXIT_PREEMPTED);
            return ZT_EXIT_PREEMPTED;
        }
    }
    if (cfg->sample_tokens > 0) zt_sample_print(&t->s, cfg->sample_tokens, cfg->seed);
    return 0;
}

static int setup(trainer *t, int argc, char **argv, zt_err *err) {
    const char *path = NULL;
    char **sets = zt_xcalloc((size_t)argc + 1, sizeof *sets);
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) sets[n_sets++] = argv[++i];
        else if (strncmp(argv[i], "--set=", 6) == 0) sets[n_sets++] = argv[i] + 6;
        else if (argv[i][0] == '-' || path) {
            free(sets);
            usage();
            t->usage_error = 1;
            char why[512];
            zt_help_bad_argument_text("train", argv[i], i + 1 < argc ? argv[i + 1] : NULL, why, sizeof why);
            return zt_fail(err, "%s", why);
        } else path = argv[i];
    }
    if (!path) { free(sets); usage(); t->usage_error = 1; return zt_fail(err, "train: missing CONFIG"); }
    zt_config_free(&t->cfg); /* zt_config_load fills the defaults itself */
    int rc = zt_config_load(&t->cfg, path, sets, n_sets, err);
    free(sets);
    if (rc || zt_config_adopt_init_from(&t->cfg, err)) return -1;
    if (zt_config_check_batch(&t->cfg, t->comm->world, err)) return -1;
    const zt_backend *be = zt_pick_backend(&t->cfg, err); /* the checks `zerotrain config` also runs */
    if (!be || zt_config_check_sizes(&t->cfg, t->comm->world, be, err)) return -1;
    zt_config *cfg = &t->cfg;
    /* predict's costed-only run (the simulated device with ZEROTRAIN_SIM_DRY) reads no token: sizing a
     * run needs no data, so none is opened (one line says so); a run that performs its ops needs it */
    const char *dry = getenv("ZEROTRAIN_SIM_DRY");
    if (cfg->device == ZT_DEVICE_SIM && dry && strcmp(dry, "0") != 0) {
        t->no_data = 1;
        return 0;
    }
    if (!cfg->train_glob) return zt_fail(err, "%s: data.train is required for training", path);
    if (zt_dataset_open(&t->train, cfg->train_glob, cfg->seq_len, cfg->vocab_size, cfg->seed, err)) return -1;
    if (cfg->val_glob) {
        if (zt_dataset_open(&t->val, cfg->val_glob, cfg->seq_len, cfg->vocab_size, cfg->seed, err)) return -1;
        t->has_val = 1;
    }
    return 0;
}

static void print_banner(trainer *t) {
    zt_config *cfg = &t->cfg;
    zt_session *s = &t->s;
    char kernels[512];
    zt_info("%s", zt_blas_core_line(kernels, sizeof kernels));
    int lines = 0; /* ~130 lines before step 1 would hide what matters: one line says where the whole text is */
    for (const char *c = cfg->effective_text; c && *c; c++) lines += *c == '\n';
    if (cfg->print_config) zt_info("zerotrain: effective config (%s):\n%s", cfg->source_path, cfg->effective_text);
    else
        zt_info("zerotrain: config %s (effective config: %d lines; print_config: true prints it here, `zerotrain config` "
                "with the same arguments alone, and every checkpoint keeps it: `zerotrain info`)", cfg->source_path, lines);
    char family[64];
    zt_info("model: %s L%d H%d C%d V%d (%.2fM parameters), T %d; backend %s, %d rank%s, ZeRO stage %d",
            zt_shape_family(&s->shape, family, sizeof family), s->shape.n_layer, s->shape.n_head, s->shape.n_embd, s->shape.vocab_size, s->whole.total / 1e6,
            cfg->seq_len, s->be->name, t->comm->world, t->comm->world > 1 ? "s" : "", cfg->zero_stage);
    if (s->tp_size > 1)
        zt_info("tensor parallel: %d ranks a group (%.2fM parameters a rank), %d data-parallel group%s", s->tp_size,
                s->table.total / 1e6, s->dp_world, s->dp_world > 1 ? "s" : "");
    long global = (long)cfg->train_micro_batch_size_per_gpu * cfg->gradient_accumulation_steps * s->dp_world;
    if (t->no_data)
        zt_info("data: not read (ops costed, not performed: %s is not opened, nor evaluated); global batch %ld "
                "sequences = micro %d x accumulation %d x ranks %d", cfg->train_glob ? cfg->train_glob : "no data.train",
                global, cfg->train_micro_batch_size_per_gpu, cfg->gradient_accumulation_steps, s->dp_world);
    else
        zt_info("data: %s (%zu tokens, %d file%s)%s%s; global batch %ld sequences = micro %d x accumulation %d x ranks %d",
                cfg->train_glob, t->train.n_tokens, t->train.n_files, t->train.n_files > 1 ? "s" : "",
                t->has_val ? "; val " : "", t->has_val ? cfg->val_glob : "", global, cfg->train_micro_batch_size_per_gpu,
                cfg->gradient_accumulation_steps, s->dp_world);
    const zt_gpt2 *m = &s->model;
    zt_info("activations: %.1f MiB kept (%s); %.1f MiB without checkpointing, %.1f MiB checkpointing every block",
            m->act_bytes / 1048576.0,
            m->recompute ? "checkpointing: block inputs kept, blocks recomputed in backward" : "all kept",
            m->act_bytes_full / 1048576.0, m->act_bytes_ckpt / 1048576.0);
    zt_engine_print_memory(s->engine, m->act_bytes);
    const char *bits = cfg->fp16_enabled ? "fp16" : "bf16";
    if (cfg->stage3_gather_16bit_weights_on_model_save && cfg->checkpoint_dir)
        zt_info("16-bit model save: each checkpoint also gets the %s Hugging Face model in %s/step_N/%s", bits,
                cfg->checkpoint_dir, ZT_CKPT_HF_DIR);
    else if (cfg->stage3_gather_16bit_weights_on_model_save)
        zt_info("16-bit model save: asked for, but checkpoint.dir is null, so nothing is saved");
    const zt_engine_layout *lay = &zt_engine_state_view(s->engine)->lay;
    if (cfg->ckpt_async_save && cfg->checkpoint_dir) /* rank 0's shard: the largest, or as large as any */
        zt_info("asynchronous saves: a %.1f MiB host staging buffer per rank holds the snapshot (12 bytes per element "
                "of its shard) from the first save on", 12.0 * (double)(lay->hi - lay->lo) / 1048576.0);
}

/* A run never replaces, prunes or moves `latest` away from checkpoints it does not continue:
 * checkpoint.resume: never, or a path outside checkpoint.dir, in a checkpoint.dir that holds
 * checkpoints is refused, naming the newest, unless checkpoint.overwrite says so. Collective; 0, or
 * -1 on every rank with the message printed once. */
static int refuse_foreign_checkpoints(trainer *t, zt_err *err) {
    const zt_config *cfg = &t->cfg;
    if (cfg->resume_mode == ZT_RESUME_AUTO || cfg->ckpt_overwrite) return 0;
    char newest[4096], resumed[4096];
    int found = zt_checkpoint_resolve_shared(t->comm, cfg->checkpoint_dir, newest, sizeof newest, err);
    int elsewhere = 0; /* resume: PATH names a checkpoint outside checkpoint.dir */
    if (found > 0 && cfg->resume_mode == ZT_RESUME_PATH) {
        int r = zt_checkpoint_resolve_shared(t->comm, cfg->resume_path, resumed, sizeof resumed, err);
        if (r < 0) found = -1;
        elsewhere = r > 0 && t->comm->agree_max(t->comm, t->comm->rank == 0 && !step_is_in(resumed, cfg->checkpoint_dir));
        if (r >= 0 && !elsewhere) return 0; /* continuing (or rolling back) this directory's own run */
    }
    if (found > 0) {
        const char *slash = strrchr(newest, '/');
        zt_fail(err, "%s: checkpoint.resume is %s, but the directory holds checkpoints of another run (newest %s), "
                     "which this run would replace, prune and move `latest` from: resume them (checkpoint.resume: auto), "
                     "use a new checkpoint.dir, or start over here with --set checkpoint.overwrite=true",
                cfg->checkpoint_dir, elsewhere ? "a checkpoint outside it" : "never", slash ? slash + 1 : newest);
    }
    if (found == 0) return 0;
    if (t->comm->rank == 0) zt_print_error(err);
    return -1;
}

/* The watchdog's roll (watchdog.h), so a hang line names a stopped rank: one file name for the job,
 * rank 0's (collective; ZEROTRAIN_ROLL_TAG, set by `run --restarts`, names it instead). A host's roll holds its own ranks: a rank on another host that stops is
 * waited on, not named. */
static void open_roll(trainer *t) {
    if (t->comm->world < 2 || t->cfg.comm_timeout <= 0) return;
    char tag[96] = {0}, host[64] = {0};
    if (t->comm->rank == 0) {
        gethostname(host, sizeof host - 1);
        for (char *c = host; *c; c++)
            if (*c == '/') *c = '_';
        snprintf(tag, sizeof tag, "%s-%ld", host, (long)getpid());
        /* `run --restarts` names the roll, so that it can remove it when rank 0 was killed */
        const char *given = getenv("ZEROTRAIN_ROLL_TAG");
        if (given && *given && !strchr(given, '/')) snprintf(tag, sizeof tag, "%s", given);
    }
    t->comm->wait(t->comm, t->comm->broadcast(t->comm, tag, sizeof tag, 0));
    tag[sizeof tag - 1] = 0;
    zt_watchdog_roll(tag);
}

int zt_cmd_train(int argc, char **argv) { return zt_train_observed(argc, argv, NULL); }

int zt_train_observed(int argc, char **argv, const zt_train_observer *obs) {
    trainer t;
    memset(&t, 0, sizeof t);
    t.observer = obs;
    zt_err err = {{0}};
    zt_config_defaults(&t.cfg);
    /* the collectives before the config is read are watched too, on start-up's timeout */
    zt_watchdog_start(zt_mpi_phase_timeout(), zt_mpi_world_rank(), zt_mpi_world_size());
    t.comm = zt_comm_mpi(NULL, &err);
    zt_log_set_rank(t.comm->rank);
    install_stop_handlers(); /* a signal during start-up stops after the first step, with a save */
    /* every phase before the first step is bounded on each rank, also on a rank alone (watchdog.h) */
    zt_watchdog_phase("start-up (reading the config, opening the data)", zt_mpi_phase_timeout(), "ZEROTRAIN_MPI_TIMEOUT", 0);
    int rc = setup(&t, argc, argv, &err);
    if (zt_fail_together(t.comm, rc, &err)) goto done_fail;
    zt_watchdog_start(t.cfg.comm_timeout, t.comm->rank, t.comm->world);
    zt_watchdog_phase("start-up (the checkpoint directory, the session: memory, device, comms)",
                      zt_watchdog_startup_timeout(), "ZEROTRAIN_STARTUP_TIMEOUT", 0);
    /* the checkpoint directory belongs to this run from now on: a second run on it stops here */
    if (t.cfg.checkpoint_dir) {
        if (zt_checkpoint_dir_open(&t.ckdir, t.cfg.checkpoint_dir, t.comm, &err)) {
            if (t.comm->rank == 0) zt_print_error(&err);
            goto done_fail;
        }
        t.has_ckdir = 1;
        t.ckdir.prune_any = t.cfg.ckpt_overwrite;
        if (refuse_foreign_checkpoints(&t, &err)) goto done_fail;
    }
    open_roll(&t);
    rc = zt_session_open(&t.s, &t.cfg, t.comm, NULL, t.cfg.train_micro_batch_size_per_gpu, t.cfg.seq_len, &err);
    if (zt_fail_together(t.comm, rc, &err)) {
        if (rc == 0) zt_session_close(&t.s); /* another rank failed: this one's swap files go too */
        goto done_fail;
    }
    if (t.cfg.trace_file) rc = zt_engine_open_trace(t.s.engine, t.cfg.trace_file, &err);
    if (t.cfg.trace_file && !rc) zt_engine_trace_nvml(t.s.engine, t.cfg.trace_nvml_ms);
    if (zt_fail_together(t.comm, rc, &err)) { zt_session_close(&t.s); goto done_fail; }
    zt_engine_set_skip_nonfinite(t.s.engine, t.cfg.guard_action == ZT_GUARD_SKIP || t.cfg.guard_action == ZT_GUARD_ROLLBACK);
    if (t.cfg.guard_loss_spike > 0) t.recent_loss = zt_xcalloc((size_t)t.cfg.guard_spike_window, sizeof(double));
    print_banner(&t);
    if (t.cfg.fp16_enabled)
        zt_loss_scaler_init(&t.scaler, t.cfg.loss_scale, t.cfg.initial_scale_power, t.cfg.loss_scale_window,
                            t.cfg.hysteresis, t.cfg.min_loss_scale);
    else
        zt_loss_scaler_off(&t.scaler);
    rc = maybe_resume(&t, &err);
    if (zt_fail_together(t.comm, rc, &err)) goto done_fail;
    zt_watchdog_phase("start-up (the metrics and monitor files)", zt_watchdog_startup_timeout(), "ZEROTRAIN_STARTUP_TIMEOUT", 0);
    if (t.cfg.metrics_file && t.comm->rank == 0) { /* a resumed run appends to its metrics */
        long cut = 0; /* after the last whole line: a run stopped by a full disk may have left half a record */
        rc = zt_mkdir_parent(t.cfg.metrics_file, &err);
        if (!rc && t.start_step > 0) rc = zt_cut_torn_line(t.cfg.metrics_file, &cut, &err);
        if (cut) zt_warn("%s: ended inside a record (an earlier run stopped while writing it); the torn record is cut "
                         "(%ld bytes) and this run appends after the last whole one", t.cfg.metrics_file, cut);
        if (!rc) t.metrics = fopen(t.cfg.metrics_file, t.start_step > 0 ? "a" : "w");
        if (!rc && !t.metrics) rc = zt_fail(&err, "%s: cannot open metrics_file for writing: %s", t.cfg.metrics_file, strerror(errno));
    }
    if (rc == 0 && t.comm->rank == 0) {
        t.monitor = zt_monitor_open(&t.cfg, t.samples_at_start, &err);
        if (!t.monitor && (t.cfg.tensorboard.enabled || t.cfg.csv_monitor.enabled)) rc = -1;
    }
    if (zt_fail_together(t.comm, rc, &err)) goto done_fail;
    size_t n = (size_t)t.cfg.train_micro_batch_size_per_gpu * t.cfg.seq_len;
    t.inputs = zt_xcalloc(n, sizeof(int));
    t.targets = zt_xcalloc(n, sizeof(int));
    zt_watchdog_phase(NULL, 0, NULL, 0); /* the steps' collectives are comm_timeout's */
    rc = run(&t);
    train_save_end(&t); /* its writer reads the engine's table */
    zt_session_close(&t.s);
    free(t.recent_loss);
    free(t.unconfirmed);
    free(t.rank_bytes_before);
    free(t.rank_bytes_step);
    free(t.inputs);
    free(t.targets);
    if (t.metrics) fclose(t.metrics);
    zt_monitor_close(t.monitor);
    zt_dataset_close(&t.train);
    zt_dataset_close(&t.val);
    zt_config_free(&t.cfg);
    if (t.has_ckdir) zt_checkpoint_dir_close(&t.ckdir);
    t.comm->destroy(t.comm);
    return rc;
done_fail:
    if (t.metrics) fclose(t.metrics);
    zt_monitor_close(t.monitor);
    if (t.has_ckdir) zt_checkpoint_dir_close(&t.ckdir);
    t.comm->destroy(t.comm);
    return t.usage_error ? 2 : 1; /* a command line it cannot read exits 2, as every command's does */
}
