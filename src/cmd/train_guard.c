/* train_guard.c — the divergence guard of `zerotrain train` (divergence_guard.*): whether a step
 * diverged (a loss or gradient norm not finite, a loss over max_loss or a spike over the recent
 * mean), and what then: skip the update, stop the run, or roll back to the newest good checkpoint
 * and go on past the batches that led there. It keeps which checkpoints are good (the step after
 * them passed) and sets aside the ones that are not when it stops or rolls back. The loop that
 * asks it is train.c's; the shared state is train_internal.h's trainer. */
#include <math.h>
#include <string.h>

#include "cmd/train_internal.h"
#include "comm/fail_together.h"

const char *const guard_names[] = {"", "loss", "grad_norm", "max_loss", "loss_spike"};

static double recent_mean(const trainer *t) {
    double sum = 0;
    for (int i = 0; i < t->n_recent; i++) sum += t->recent_loss[i];
    return sum / t->n_recent;
}

/* Before the update: a non-finite loss (fp16 leaves it to the overflow check), a loss over
 * max_loss, or a spike. */
int guard_before_step(const trainer *t, double loss) {
    const zt_config *cfg = &t->cfg;
    if (cfg->guard_action == ZT_GUARD_OFF) return GUARD_OK;
    if (!isfinite(loss)) return cfg->fp16_enabled ? GUARD_OK : GUARD_LOSS;
    if (cfg->guard_max_loss > 0 && loss > cfg->guard_max_loss) return GUARD_MAX_LOSS;
    if (cfg->guard_loss_spike > 0 && t->n_recent > 0 &&
        loss > cfg->guard_loss_spike * recent_mean(t))
        return GUARD_SPIKE;
    return GUARD_OK;
}

/* After the update: a non-finite norm (without fp16), or with fp16 a non-finite loss in a step the
 * scaler did not skip. */
int guard_after_step(const trainer *t, const step_record *rec) {
    const zt_config *cfg = &t->cfg;
    if (cfg->guard_action == ZT_GUARD_OFF) return GUARD_OK;
    if (!cfg->fp16_enabled && !isfinite(rec->norm)) return GUARD_NORM;
    if (cfg->fp16_enabled && !rec->skipped && !isfinite(rec->loss)) return GUARD_LOSS;
    return GUARD_OK;
}

static void remember_loss(trainer *t, double loss) {
    if (!t->recent_loss) return;
    t->recent_loss[t->recent_pos] = loss;
    t->recent_pos = (t->recent_pos + 1) % t->cfg.guard_spike_window;
    if (t->n_recent < t->cfg.guard_spike_window) t->n_recent++;
}

/* what the guard found, for the log line: "loss is nan", "gradient norm is inf (loss 3.2)", ... */
static void guard_finding(const trainer *t, const step_record *rec, char *buf, size_t cap) {
    if (rec->guard == GUARD_LOSS) snprintf(buf, cap, "loss is %g", rec->loss);
    else if (rec->guard == GUARD_NORM) snprintf(buf, cap, "gradient norm is %g (loss %g)", rec->norm, rec->loss);
    else if (rec->guard == GUARD_MAX_LOSS)
        snprintf(buf, cap, "loss %g is over divergence_guard.max_loss %g", rec->loss, t->cfg.guard_max_loss);
    else snprintf(buf, cap, "loss %g is over divergence_guard.loss_spike %g x the mean %g of the last %d steps", rec->loss,
                  t->cfg.guard_loss_spike, recent_mean(t), t->n_recent);
}

/* A step passed the guard: the checkpoint saved before it holds weights whose loss was fine, so it
 * is good, and keep_last may no longer remove it (the newest good one is never pruned). */
static void confirm_checkpoints(trainer *t, const step_record *rec) {
    if (t->last_saved_step <= t->good_step || t->last_saved_step >= rec->step) return;
    t->good_step = t->last_saved_step;
    t->n_unconfirmed = 0; /* all of them were saved at or before it */
    if (t->has_ckdir) t->ckdir.keep_step = t->good_step;
}

/* The guard stops or rolls back the run: the checkpoints saved after the newest good one become
 * unconfirmed_step_N and `latest` names the good one (rank 0; collective agreement). 0, or -1 with
 * the reason in err on every rank. */
static int set_aside_unconfirmed(trainer *t, char *what_done, size_t cap, zt_err *err) {
    what_done[0] = 0;
    if (!t->has_ckdir || t->n_unconfirmed == 0) return 0;
    int rc = t->comm->rank == 0 ? zt_checkpoint_set_aside(&t->ckdir, t->unconfirmed, t->n_unconfirmed, t->good_step, err) : 0;
    if (zt_agree(t->comm, rc, err)) return -1;
    if (t->n_unconfirmed == 1)
        snprintf(what_done, cap, " (step_%08ld, saved after it but not confirmed by a good step, is now unconfirmed_step_%08ld)",
                 t->unconfirmed[0], t->unconfirmed[0]);
    else
        snprintf(what_done, cap, " (%d checkpoints saved after it but not confirmed by a good step, step_%08ld to "
                                 "step_%08ld, are now unconfirmed_step_N)", t->n_unconfirmed, t->unconfirmed[0],
                 t->unconfirmed[t->n_unconfirmed - 1]);
    t->last_saved_step = t->good_step;
    t->n_unconfirmed = 0;
    return 0;
}

/* After a step: 0 to go on, 2 to roll back (action rollback, a good checkpoint to go back to), or 1
 * with the one error line printed (the run stops before any save). A skipped step is one warning
 * line. A stopped run leaves `latest` on the newest good checkpoint (set_aside_unconfirmed). */
int guard_verdict(trainer *t, const step_record *rec) {
    const zt_config *cfg = &t->cfg;
    if (!rec->guard) {
        if (!rec->skipped) remember_loss(t, rec->loss);
        t->skips_in_row = 0;
        confirm_checkpoints(t, rec);
        return 0;
    }
    char what[200], latest[4200], aside[200];
    guard_finding(t, rec, what, sizeof what);
    t->skips_in_row++;
    if (cfg->guard_action == ZT_GUARD_SKIP && t->skips_in_row < cfg->guard_max_skips) {
        if (t->comm->rank == 0)
            zt_warn("step %ld: %s: update skipped by the divergence guard (%d in a row, the run stops at %d)",
                    rec->step, what, t->skips_in_row, cfg->guard_max_skips);
        return 0;
    }
    int can_roll_back = t->has_ckdir && t->good_step > 0 && t->rollbacks < cfg->guard_max_rollbacks;
    if (cfg->guard_action == ZT_GUARD_ROLLBACK && can_roll_back) return 2;
    zt_err err = {{0}};
    if (set_aside_unconfirmed(t, aside, sizeof aside, &err)) {
        if (t->comm->rank == 0) zt_print_error(&err);
        return 1;
    }
    train_describe_latest(t, latest, sizeof latest);
    size_t used = strlen(latest);
    snprintf(latest + used, sizeof latest - used, "%s%s", t->good_step > 0 ? ", the newest good checkpoint" : "", aside);
    if (cfg->guard_action == ZT_GUARD_SKIP)
        zt_fail(&err, "step %ld: %s: %d steps in a row skipped by the divergence guard (divergence_guard.max_skips), "
                      "the run stops; %s", rec->step, what, t->skips_in_row, latest);
    else if (cfg->guard_action == ZT_GUARD_ROLLBACK)
        zt_fail(&err, "step %ld: %s: the divergence guard cannot roll back (%s), the run stops; %s", rec->step, what,
                !t->has_ckdir ? "checkpoint.dir is null" : t->good_step == 0 ? "no good checkpoint yet"
                                                                            : "divergence_guard.max_rollbacks reached",
                latest);
    else
        zt_fail(&err, "step %ld: %s: the divergence guard stops the run (divergence_guard.action: stop) before saving "
                      "it; %s", rec->step, what, latest);
    if (t->comm->rank == 0) zt_print_error(&err);
    return 1;
}

/* action rollback: the newest good checkpoint is loaded again, the checkpoints after it are set
 * aside, and training goes on after it on the data stream past the batches consumed since it (or
 * divergence_guard.rollback_skip_batches batches past its own), as large runs restart before a loss
 * spike and skip the batches that led to it. The loss-spike window starts over. 0, or 1 with the
 * one error line printed on every rank's behalf. */
int guard_roll_back(trainer *t, const step_record *rec, const step_plan *p) {
    const zt_config *cfg = &t->cfg;
    char what[200], aside[200], step_dir[4096];
    guard_finding(t, rec, what, sizeof what);
    zt_err err = {{0}};
    zt_train_state st;
    zt_checkpoint_meta meta;
    int rc = set_aside_unconfirmed(t, aside, sizeof aside, &err);
    if (!rc && (size_t)snprintf(step_dir, sizeof step_dir, "%s/step_%08ld", t->ckdir.path, t->good_step) >= sizeof step_dir)
        rc = zt_fail(&err, "%s: path too long", t->ckdir.path);
    if (!rc) {
        rc = zt_checkpoint_load(step_dir, zt_engine_state_view(t->s.engine), &t->s.shape, t->comm, &st, &meta, cfg->ckpt_allow_unverified, &err);
        if (!rc) zt_checkpoint_meta_free(&meta);
    }
    if (zt_fail_together(t->comm, rc, &err)) {
        char e2[sizeof err.msg];
        snprintf(e2, sizeof e2, "%s", err.msg);
        zt_fail(&err, "step %ld: %s: the divergence guard's rollback failed: %s", rec->step, what, e2);
        if (t->comm->rank == 0) zt_print_error(&err);
        return 1;
    }
    t->rollbacks++;
    long from = cfg->guard_rollback_skip > 0 ? st.data_samples + cfg->guard_rollback_skip * p->global_batch : rec->samples_done;
    if (t->comm->rank == 0)
        zt_warn("step %ld: %s: the divergence guard rolls back to step_%08ld, the newest good checkpoint%s (rollback %d of "
                "at most %d); %ld batches skipped, training goes on at step %ld from sample %ld",
                rec->step, what, t->good_step, aside, t->rollbacks, cfg->guard_max_rollbacks,
                (from - st.data_samples) / p->global_batch, st.step + 1, from);
    t->start_step = st.step;
    t->samples_at_start = from;
    t->last_saved_step = t->good_step = st.step;
    if (cfg->fp16_enabled && st.loss_scale > 0) {
        t->scaler.scale = st.loss_scale;
        t->scaler.good_steps = st.loss_scale_good_steps;
        t->scaler.hysteresis_left = st.hysteresis_left;
    }
    t->n_recent = t->recent_pos = t->skips_in_row = 0;
    return 0;
}
