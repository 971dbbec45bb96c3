/* train_save.c — the trainer's checkpoint saves: blocking, or asynchronous with checkpoint.async_save
 * (io/checkpoint_async.h), at most one in flight; the step boundary that completes it; the one line
 * every save prints and the metrics fields it leaves; what a completed save means to the run (`latest`,
 * the divergence guard's unconfirmed steps, the 16-bit model beside it).
 *
 * Each save prints `save step N: blocked B ms, written W ms` when `latest` names it. B is how long
 * training stood still for it; W how long its files took to write. A blocking save: B = W, the whole
 * save. An asynchronous one: B = the snapshot and start, plus the boundaries that move it on (the
 * gather once every rank's write ended, the agreement once rank 0's thread published it) and any wait
 * for its thread; W = the time from the snapshot until `latest` names it. The next metrics row (the next step's) carries save_step,
 * save_blocked_ms and save_written_ms; a save after the last row (the run's end) is in its line only.
 * The run's last save, a save on a stop signal and the last attempt after a writer failed are blocking
 * (after waiting for the one in flight): the process exits only with its saves complete. */
#include <string.h>

#include "cmd/sample.h"
#include "cmd/train_internal.h"
#include "engine/session.h"
#include "io/checkpoint_async.h"
#include "util/util.h"

static void report(trainer *t, long step, double blocked_s, double written_s) {
    zt_info("save step %ld: blocked %.1f ms, written %.1f ms", step, blocked_s * 1e3, written_s * 1e3);
    t->save_report.step = step;
    t->save_report.blocked_ms = blocked_s * 1e3;
    t->save_report.written_ms = written_s * 1e3;
    t->save_report.pending = 1;
}

/* Collective: STEP's save is complete on every rank (`latest` names it). Good once the next step
 * passes the guard; the 16-bit model goes beside it. */
static int completed(trainer *t, long step, zt_err *err) {
    t->last_saved_step = step;
    if (step > t->good_step) {
        t->unconfirmed = zt_xrealloc(t->unconfirmed, (size_t)(t->n_unconfirmed + 1) * sizeof *t->unconfirmed);
        t->unconfirmed[t->n_unconfirmed++] = step;
    }
    /* DeepSpeed's 16-bit model save, beside the checkpoint: 16 bits as the run computes (fp16 with
     * fp16.enabled, else bf16 — also on the CPU backend, which computes in fp32) */
    if (t->cfg.stage3_gather_16bit_weights_on_model_save)
        return zt_checkpoint_export_16bit(&t->ckdir, step, t->cfg.fp16_enabled ? "F16" : "BF16", zt_default_vocab_dir(),
                                          t->comm, err);
    return 0;
}

/* Collective: waits for the save in flight and completes it. */
static int finish_in_flight(trainer *t, zt_err *err) {
    long step = zt_async_save_step(t->saver);
    double t0 = zt_now(), written = 0, waited = 0;
    int rc = zt_async_save_finish(t->saver, &written, &waited, err);
    double at_boundary = zt_now() - t0;
    if (rc) return -1;
    report(t, step, t->save_begin_s + at_boundary, written);
    return completed(t, step, err);
}

int train_save_boundary(trainer *t, int wait, zt_err *err) {
    if (!zt_async_save_in_flight(t->saver)) return 0;
    if (!wait && !zt_async_save_poll(t->saver)) return 0;
    if (!wait) { /* the next part: after the write the gather (rank 0 publishes beside the steps), then the end */
        long step = zt_async_save_step(t->saver);
        double t0 = zt_now(), written = 0;
        int complete = 0, rc = zt_async_save_advance(t->saver, &complete, &written, err);
        t->save_begin_s += zt_now() - t0;
        if (rc) return -1;
        if (!complete) return 0;
        report(t, step, t->save_begin_s, written);
        return completed(t, step, err);
    }
    if (wait && !zt_async_save_written(t->saver)) /* rank 0's: a stop, a divergence or the run's end waits */
        zt_info("save step %ld: waiting for its write to end", zt_async_save_step(t->saver));
    return finish_in_flight(t, err);
}

int train_save(trainer *t, long step, long samples, int last, zt_err *err) {
    if (train_save_boundary(t, 1, err)) return -1; /* at most one in flight: a save due waits for it */
    zt_train_state st = {0};
    st.step = step;
    st.data_samples = samples;
    st.tokens_seen = samples * (long)t->cfg.seq_len;
    st.loss_scale = t->scaler.scale;
    st.loss_scale_good_steps = (int)t->scaler.good_steps;
    st.hysteresis_left = t->scaler.hysteresis_left;
    zt_state_view *sv = zt_engine_state_view(t->s.engine);
    double t0 = zt_now();
    if (t->cfg.ckpt_async_save && !last) {
        if (!t->saver) t->saver = zt_async_saver_new();
        int rc = zt_async_save_begin(t->saver, &t->ckdir, sv, t->comm, &t->s.shape, &st, t->cfg.effective_text,
                                     t->cfg.keep_last, err);
        t->save_begin_s = zt_now() - t0;
        return rc; /* its line comes when it completes */
    }
    if (zt_checkpoint_save(&t->ckdir, sv, t->comm, &t->s.shape, &st, t->cfg.effective_text, t->cfg.keep_last, err))
        return -1;
    double dt = zt_now() - t0;
    report(t, step, dt, dt);
    return completed(t, step, err);
}

void train_save_metrics(trainer *t, FILE *f) {
    if (!t->save_report.pending) return;
    t->save_report.pending = 0;
    fprintf(f, ", \"save_step\": %ld, \"save_blocked_ms\": %.3f, \"save_written_ms\": %.3f", t->save_report.step,
            t->save_report.blocked_ms, t->save_report.written_ms);
}

void train_save_end(trainer *t) {
    zt_async_saver_free(t->saver);
    t->saver = NULL;
}
