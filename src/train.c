/* train.c — `zerotrain train CONFIG [--set KEY=VALUE]...`: the training loop. Reads the config,
 * builds the session, and for each step runs the micro-batches of this rank through forward and
 * backward, lets the ZeRO engine reduce, clip and update, and logs the step line and metrics. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "commands.h"
#include "config.h"
#include "data.h"
#include "fail_together.h"
#include "loss_scale.h"
#include "sample.h"
#include "schedule.h"
#include "session.h"

typedef struct trainer {
    zt_config cfg;
    zt_comm *comm;
    zt_session s;
    zt_checkpoint_dir ckdir; /* checkpoint.dir, locked for this run (when set) */
    int has_ckdir;
    zt_dataset train, val;
    int has_val;
    FILE *metrics;
    int *inputs, *targets; /* host micro-batch [B*T] */
    long start_step;       /* 0, or the step a resumed run continues after */
    long samples_at_start; /* training-stream samples consumed before start_step */
    zt_loss_scaler scaler; /* fp16 loss scaling (scale 1, never skipping, otherwise) */
} trainer;

/* Exit status of a run stopped by SIGUSR1/SIGTERM after saving its checkpoint: the Slurm scripts
 * requeue the job on it, and the requeued job resumes from `latest`. */
#define ZT_EXIT_PREEMPTED 99

static volatile sig_atomic_t stop_requested = 0; /* set by the signal handler only */
static void on_stop_signal(int sig) { stop_requested = sig; }

static void install_stop_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static void usage(void) {
    fprintf(stderr, "usage: zerotrain train CONFIG [--set KEY=VALUE]...\n");
}

/* mean validation loss over eval_batches in-order batches, spread round-robin over ranks (every
 * rank runs the same number of forwards so stage-3 gathers stay matched) */
static double evaluate(trainer *t) {
    int B = t->cfg.train_micro_batch_size_per_gpu, T = t->cfg.seq_len;
    int nb = t->cfg.eval_batches, W = t->comm->world, r = t->comm->rank;
    int rounds = (nb + W - 1) / W;
    double acc[2] = {0, 0};
    for (int k = 0; k < rounds; k++) {
        int batch = k * W + r;
        int real = batch < nb;
        zt_dataset_sequential(&t->val, (size_t)(real ? batch : 0) * B * T, B, t->inputs, t->targets);
        float loss = zt_gpt2_forward(&t->s.model, &t->s.src, t->inputs, t->targets, 0.0f);
        if (real) { acc[0] += loss; acc[1] += 1; }
    }
    t->comm->allreduce_host_double(t->comm, acc, 2);
    return acc[0] / acc[1];
}

/* Fault injection for tests of the loss scaler: ZEROTRAIN_INJECT_OVERFLOW="3,7" puts an inf into the
 * reduced gradients of those (1-based) steps on every rank, as an fp16 overflow would. */
static int inject_overflow_at(long step) {
    const char *spec = getenv("ZEROTRAIN_INJECT_OVERFLOW");
    for (const char *p = spec; p && *p;) {
        char *end;
        long s = strtol(p, &end, 10);
        if (end == p) break;
        if (s == step) return 1;
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}

static int save_checkpoint(trainer *t, long step, long samples, zt_err *err) {
    zt_train_state st = {0};
    st.step = step;
    st.data_samples = samples;
    st.tokens_seen = samples * (long)t->cfg.seq_len;
    st.loss_scale = t->scaler.scale;
    st.loss_scale_good_steps = (int)t->scaler.good_steps;
    st.hysteresis_left = t->scaler.hysteresis_left;
    if (zt_checkpoint_save(&t->ckdir, &t->s.engine, &t->s.shape, &st, t->cfg.effective_text, t->cfg.keep_last, err)) {
        if (t->comm->rank == 0) zt_print_error(err);
        return -1;
    }
    return 0;
}

/* resume: auto (from checkpoint.dir/latest when there is one), never, or PATH. Tells the user what
 * differs from the run that saved it. */
static int maybe_resume(trainer *t, zt_err *err) {
    zt_config *cfg = &t->cfg;
    const char *path = cfg->resume_mode == ZT_RESUME_PATH ? cfg->resume_path : cfg->checkpoint_dir;
    if (cfg->resume_mode == ZT_RESUME_NEVER || !path) return 0;
    char step_dir[4096];
    int found = zt_checkpoint_resolve_shared(t->comm, path, step_dir, sizeof step_dir, err);
    if (found < 0) return -1;
    if (found == 0) {
        if (cfg->resume_mode == ZT_RESUME_PATH) return zt_fail(err, "%s: resume: no checkpoint there", path);
        return 0; /* auto: fresh start */
    }
    zt_train_state st;
    zt_checkpoint_meta meta;
    if (zt_checkpoint_load(step_dir, &t->s.engine, &st, &meta, err)) return -1;
    t->start_step = st.step;
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
    if (meta.world_size != W || meta.zero_stage != cfg->zero_stage)
        zt_info("resume: resharded from %d rank%s at ZeRO stage %d to %d rank%s at stage %d", meta.world_size,
                meta.world_size > 1 ? "s" : "", meta.zero_stage, W, W > 1 ? "s" : "", cfg->zero_stage);
    long gb = (long)cfg->train_micro_batch_size_per_gpu * cfg->gradient_accumulation_steps * W;
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
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(buf, cap, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    else if (s >= 60) snprintf(buf, cap, "%ldm%02lds", s / 60, s % 60);
    else snprintf(buf, cap, "%lds", s);
}

static int run(trainer *t) {
    zt_config *cfg = &t->cfg;
    int B = cfg->train_micro_batch_size_per_gpu, T = cfg->seq_len, A = cfg->gradient_accumulation_steps;
    int W = t->comm->world, r = t->comm->rank;
    long steps = cfg->train_iters;
    long global_batch = (long)B * A * W;
    double tokens_per_step = (double)global_batch * T;
    double flops_per_step = zt_gpt2_flops_per_token(&t->s.shape, T) * tokens_per_step;
    float dloss = (float)(1.0 / tokens_per_step);
    double train_start = zt_now();
    long first_timed = 0;

    for (long step = t->start_step; step < steps; step++) {
        double t0 = zt_now();
        float lr = zt_lr_at(cfg, step);
        double loss_sum = 0, t_fwd = 0, t_bwd = 0;
        for (int a = 0; a < A; a++) {
            zt_engine_begin_micro(&t->s.engine, a == 0, a == A - 1);
            /* the global batch of step s is samples [s*GB, (s+1)*GB) of the stream; rank r takes its
             * B*A contiguous ones, micro-step a the a-th B of those */
            uint64_t base = (uint64_t)t->samples_at_start + (uint64_t)(step - t->start_step) * global_batch +
                            (uint64_t)r * B * A + (uint64_t)a * B;
            for (int b = 0; b < B; b++)
                zt_dataset_sample(&t->train, base + b, t->inputs + b * T, t->targets + b * T);
            double ta = zt_now();
            /* fp16: the loss is multiplied by the scale so small gradients survive 16 bits; the engine
             * divides it out of the norm and the update */
            float loss = zt_gpt2_forward(&t->s.model, &t->s.src, t->inputs, t->targets,
                                         (float)(dloss * t->scaler.scale));
            if (cfg->wall_clock_breakdown) t->s.be->synchronize();
            double tb = zt_now();
            zt_gpt2_backward(&t->s.model, &t->s.src);
            if (cfg->wall_clock_breakdown) t->s.be->synchronize();
            double tb2 = zt_now();
            zt_engine_phase(&t->s.engine, "forward", ta, tb);
            zt_engine_phase(&t->s.engine, "backward", tb, tb2);
            t_fwd += tb - ta;
            t_bwd += tb2 - tb;
            loss_sum += loss;
        }
        double tc = zt_now();
        if (inject_overflow_at(step + 1)) {
            zt_engine_finish_reductions(&t->s.engine);
            t->s.be->scale(t->s.engine.grad_shard, INFINITY, 1);
        }
        int skipped = 0;
        double scale_used = t->scaler.scale;
        double norm = zt_engine_step_scaled(&t->s.engine, lr, cfg->gradient_clipping, scale_used, &skipped);
        zt_loss_scaler_update(&t->scaler, skipped);
        if (skipped)
            zt_info("step %ld: gradient overflow at loss scale %g, update skipped; loss scale now %g", step + 1,
                    scale_used, t->scaler.scale);
        double t_opt = zt_now() - tc;
        double loss_acc[1] = {loss_sum / A};
        if (W > 1) t->comm->allreduce_host_double(t->comm, loss_acc, 1);
        double loss = loss_acc[0] / W;
        t->s.be->synchronize();
        double dt = zt_now() - t0;
        if (step == t->start_step + 1) { first_timed = step; train_start = t0; } /* first step warms up */

        int last = step == steps - 1;
        double val_loss = NAN;
        if (t->has_val && cfg->eval_interval > 0 && ((step + 1) % cfg->eval_interval == 0 || last))
            val_loss = evaluate(t);
        if (r == 0 && ((step + 1) % cfg->steps_per_print == 0 || step == 0 || last)) {
            double done = (double)(step + 1) / steps;
            double elapsed = zt_now() - train_start;
            long timed = first_timed ? step + 1 - first_timed : 0;
            double eta = timed > 0 ? elapsed / timed * (steps - step - 1) : 0;
            char eta_s[32];
            format_eta(eta, eta_s, sizeof eta_s);
            char val_s[48] = "";
            if (!isnan(val_loss)) snprintf(val_s, sizeof val_s, " | val %.4f", val_loss);
            zt_info("step %5ld/%ld (%3.0f%%) | loss %.4f%s | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | %6.1f GFLOP/s | eta %s",
                    step + 1, steps, 100.0 * done, loss, val_s, lr, norm, dt * 1e3, tokens_per_step / dt,
                    flops_per_step / dt * 1e-9, eta_s);
        }
        if (r == 0 && cfg->wall_clock_breakdown && ((step + 1) % cfg->steps_per_print == 0 || step == 0 || last))
            zt_engine_print_timing(&t->s.engine);
        if (t->metrics) {
            char norm_s[32] = "null"; /* JSON has no inf: an overflowing step's norm is null */
            if (isfinite(norm)) snprintf(norm_s, sizeof norm_s, "%.9g", norm);
            fprintf(t->metrics, "{\"step\": %ld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %s, \"step_ms\": %.3f, "
                                "\"tokens_per_s\": %.1f, \"comm_ms\": %.3f",
                    step + 1, loss, lr, norm_s, dt * 1e3, tokens_per_step / dt, t->s.engine.comm_seconds * 1e3);
            const zt_mem_account *mem = &t->s.engine.mem;
            for (int c = 0; c < ZT_MEM_NCAT; c++)
                fprintf(t->metrics, ", \"mem_%s_mib\": %.3f", zt_mem_category_names[c], mem->device[c] / 1048576.0);
            fprintf(t->metrics, ", \"params_peak_mib\": %.3f", mem->params_peak / 1048576.0);
            if (cfg->fp16_enabled)
                fprintf(t->metrics, ", \"loss_scale\": %g, \"skipped\": %d", scale_used, skipped);
            if (cfg->wall_clock_breakdown)
                fprintf(t->metrics, ", \"forward_ms\": %.3f, \"backward_ms\": %.3f, \"optimizer_ms\": %.3f",
                        t_fwd * 1e3, t_bwd * 1e3, t_opt * 1e3);
            if (!isnan(val_loss)) fprintf(t->metrics, ", \"val_loss\": %.9g", val_loss);
            fprintf(t->metrics, "}\n");
            fflush(t->metrics);
        }
        if (cfg->sample_interval > 0 && ((step + 1) % cfg->sample_interval == 0) && !last)
            zt_sample_print(&t->s, cfg->sample_tokens, cfg->seed + (uint64_t)step);

        /* every rank stops at the same step when any rank got SIGUSR1/SIGTERM */
        int stop = t->comm->agree_max(t->comm, stop_requested ? 1 : 0);
        long done_samples = t->samples_at_start + (step + 1 - t->start_step) * global_batch;
        int periodic = cfg->save_interval > 0 && (step + 1) % cfg->save_interval == 0;
        if (cfg->checkpoint_dir && (periodic || last || stop)) {
            zt_err err = {{0}};
            if (save_checkpoint(t, step + 1, done_samples, &err)) return 1;
        }
        if (stop) {
            zt_info("zerotrain: stopped by signal after step %ld%s; exiting with status %d (requeue to resume)",
                    step + 1, cfg->checkpoint_dir ? ", checkpoint saved" : "", ZT_EXIT_PREEMPTED);
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
        else if (argv[i][0] == '-' || path) { free(sets); usage(); return zt_fail(err, "train: unexpected argument '%s'", argv[i]); }
        else path = argv[i];
    }
    if (!path) { free(sets); usage(); return zt_fail(err, "train: missing CONFIG"); }
    zt_config_free(&t->cfg); /* zt_config_load fills the defaults itself */
    int rc = zt_config_load(&t->cfg, path, sets, n_sets, err);
    free(sets);
    if (rc) return -1;
    if (zt_config_check_batch(&t->cfg, t->comm->world, err)) return -1;
    zt_config *cfg = &t->cfg;
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
    zt_info("zerotrain: effective config (%s):\n%s", cfg->source_path, cfg->effective_text);
    zt_info("model: GPT-2 L%d H%d C%d V%d (%.2fM parameters), T %d; backend %s, %d rank%s, ZeRO stage %d",
            s->shape.n_layer, s->shape.n_head, s->shape.n_embd, s->shape.vocab_size, s->table.total / 1e6,
            cfg->seq_len, s->be->name, t->comm->world, t->comm->world > 1 ? "s" : "", cfg->zero_stage);
    zt_info("data: %s (%zu tokens, %d file%s)%s%s; global batch %ld sequences = micro %d x accumulation %d x ranks %d",
            cfg->train_glob, t->train.n_tokens, t->train.n_files, t->train.n_files > 1 ? "s" : "",
            t->has_val ? "; val " : "", t->has_val ? cfg->val_glob : "",
            (long)cfg->train_micro_batch_size_per_gpu * cfg->gradient_accumulation_steps * t->comm->world,
            cfg->train_micro_batch_size_per_gpu, cfg->gradient_accumulation_steps, t->comm->world);
    const zt_gpt2 *m = &s->model;
    zt_info("activations: %.1f MiB kept (%s); %.1f MiB without checkpointing, %.1f MiB checkpointing every block",
            m->act_bytes / 1048576.0,
            m->recompute ? "checkpointing: block inputs kept, blocks recomputed in backward" : "all kept",
            m->act_bytes_full / 1048576.0, m->act_bytes_ckpt / 1048576.0);
    zt_engine_print_memory(&s->engine, m->act_bytes);
}

int zt_cmd_train(int argc, char **argv) {
    trainer t;
    memset(&t, 0, sizeof t);
    zt_err err = {{0}};
    zt_config_defaults(&t.cfg);
    t.comm = zt_comm_mpi(NULL, &err);
    zt_log_set_rank(t.comm->rank);
    int rc = setup(&t, argc, argv, &err);
    if (zt_fail_together(t.comm, rc, &err)) goto done_fail;
    /* the checkpoint directory belongs to this run from now on: a second run on it stops here */
    if (t.cfg.checkpoint_dir) {
        if (zt_checkpoint_dir_open(&t.ckdir, t.cfg.checkpoint_dir, t.comm, &err)) {
            if (t.comm->rank == 0) zt_print_error(&err);
            goto done_fail;
        }
        t.has_ckdir = 1;
    }
    rc = zt_session_open(&t.s, &t.cfg, t.comm, NULL, t.cfg.train_micro_batch_size_per_gpu, t.cfg.seq_len, &err);
    if (zt_fail_together(t.comm, rc, &err)) goto done_fail;
    if (t.cfg.trace_file) rc = zt_engine_open_trace(&t.s.engine, t.cfg.trace_file, &err);
    if (zt_fail_together(t.comm, rc, &err)) { zt_session_close(&t.s); goto done_fail; }
    print_banner(&t);
    if (t.cfg.fp16_enabled)
        zt_loss_scaler_init(&t.scaler, t.cfg.loss_scale, t.cfg.initial_scale_power, t.cfg.loss_scale_window,
                            t.cfg.hysteresis, t.cfg.min_loss_scale);
    else
        zt_loss_scaler_off(&t.scaler);
    rc = maybe_resume(&t, &err);
    if (zt_fail_together(t.comm, rc, &err)) goto done_fail;
    if (t.cfg.metrics_file && t.comm->rank == 0) { /* a resumed run appends to its metrics */
        t.metrics = fopen(t.cfg.metrics_file, t.start_step > 0 ? "a" : "w");
        rc = t.metrics ? 0 : zt_fail(&err, "%s: cannot open metrics_file for writing", t.cfg.metrics_file);
    }
    if (zt_fail_together(t.comm, rc, &err)) goto done_fail;
    install_stop_handlers();
    size_t n = (size_t)t.cfg.train_micro_batch_size_per_gpu * t.cfg.seq_len;
    t.inputs = zt_xcalloc(n, sizeof(int));
    t.targets = zt_xcalloc(n, sizeof(int));
    rc = run(&t);
    zt_session_close(&t.s);
    free(t.inputs);
    free(t.targets);
    if (t.metrics) fclose(t.metrics);
    zt_dataset_close(&t.train);
    zt_dataset_close(&t.val);
    zt_config_free(&t.cfg);
    if (t.has_ckdir) zt_checkpoint_dir_close(&t.ckdir);
    t.comm->destroy(t.comm);
    return rc;
done_fail:
    if (t.metrics) fclose(t.metrics);
    if (t.has_ckdir) zt_checkpoint_dir_close(&t.ckdir);
    t.comm->destroy(t.comm);
    return 1;
}
