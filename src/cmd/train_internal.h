/* train_internal.h — private to `zerotrain train` (train.c, train_guard.c): the trainer's state,
 * what one step produced and the shapes every step has, and the divergence guard's entry points. */
#ifndef ZT_TRAIN_INTERNAL_H
#define ZT_TRAIN_INTERNAL_H

#include <stdio.h>

#include "cmd/commands.h"
#include "config/config.h"
#include "engine/loss_scale.h"
#include "engine/session.h"
#include "io/checkpoint.h"
#include "io/data.h"
#include "io/monitor.h"

typedef struct trainer {
    zt_config cfg;
    zt_comm *comm;
    zt_session s;
    zt_checkpoint_dir ckdir; /* checkpoint.dir, locked for this run (when set) */
    int has_ckdir;
    zt_dataset train, val;
    int has_val;
    int usage_error;       /* setup refused the command line itself: exit 2 */
    int no_data;           /* predict's costed-only run: no token is read, the data is not opened */
    FILE *metrics;
    zt_monitor *monitor;   /* tensorboard / csv_monitor (rank 0; NULL when off) */
    int *inputs, *targets; /* host micro-batch [B*T] */
    long start_step;       /* 0, or the step a resumed run continues after */
    long samples_at_start; /* training-stream samples consumed before start_step */
    zt_loss_scaler scaler; /* fp16 loss scaling (scale 1, never skipping, otherwise) */
    zt_engine_nvme nvme_counted; /* NVMe traffic already put in a step record: each step reports what
                                    came after (the host part's I/O may run on between steps) */
    long last_saved_step;  /* checkpoint.dir/latest as this run left it: its save, or the step resumed there (0 = none) */
    struct zt_async_saver *saver; /* checkpoint.async_save: the save in flight and its staging buffer (train_save.c) */
    double save_begin_s;   /* how long the asynchronous save in flight has blocked so far */
    struct { long step; double blocked_ms, written_ms; int pending; } save_report; /* for the next metrics row */
    /* divergence guard: the accepted steps' recent losses (loss_spike), skips in a row, rollbacks */
    double *recent_loss;
    int n_recent, recent_pos, skips_in_row, rollbacks;
    /* A checkpoint is good once the step after it passed the guard (a step's loss is known only at
     * the next forward, so the checkpoint right after a diverging update looks fine when saved).
     * good_step: the newest good one (the one resumed from counts as good; 0 = none); unconfirmed:
     * the steps this run saved after it, set aside when the guard stops or rolls back the run. */
    long good_step;
    long *unconfirmed;
    int n_unconfirmed;
    const zt_train_observer *observer; /* predict's (NULL for train) */
    /* The metrics line's per-rank traffic without a gather (rank 0, no tensor parallelism:
     * train.c's rank_bytes_known): the engine comm's counts of every rank as the step began, and
     * what each rank moved in the step ([world] each; NULL until the first step needs them) */
    zt_comm_bytes *rank_bytes_before, *rank_bytes_step;
} trainer;

/* What one optimizer step produced: the step line, the metrics file and the monitors read it. */
typedef struct step_record {
    long step;               /* 1-based */
    float lr;
    double loss;             /* mean over the global batch */
    double norm;             /* global gradient norm before clipping (inf/nan on an fp16 overflow) */
    double val_loss;         /* NaN unless evaluated this step */
    double scale_used;       /* fp16 loss scale of this step (1 without fp16) */
    int skipped;             /* no update: an fp16 overflow, or the divergence guard (action skip) */
    int guard;               /* the divergence guard's finding (GUARD_*), agreed by every rank */
    double seconds, forward, backward, optimizer;
    long samples_done;       /* training-stream samples consumed after this step */
    zt_comm_bytes bytes;     /* this rank's communication volume in the step (ZeRO's, over the data-parallel group) */
    zt_comm_bytes tp_bytes;  /* ... and the model's over the tensor-parallel group (zero without one) */
    zt_engine_nvme nvme;     /* this rank's swap-file traffic in the step (ZeRO-Infinity) */
    double link_bytes[2];    /* with a trace: bytes the device copied in the step, host to device and back */
    double device_peak;      /* with a trace: the allocator's most device bytes in use during the step */
    int update_mode;         /* ZT_UPDATE_*: how the host part's update ran (super_offload) */
    int rolled_back;         /* it speculated, and the speculation was rolled back */
} step_record;

/* Shapes of every step, fixed for the run. */
typedef struct step_plan {
    int B, T, A;             /* micro-batch, sequence length, accumulation steps */
    long global_batch;       /* sequences per optimizer step, all ranks */
    double tokens, flops;    /* per optimizer step */
    float dloss;             /* d(mean loss)/d(token loss): 1 / tokens, rounded to float once */
} step_plan;

/* The divergence guard (train_guard.c).
 * A step diverged when its loss (the mean over the global batch, the same on every rank) or its
 * global gradient norm is not finite, when its loss is above divergence_guard.max_loss nats (a
 * model far worse than uniform guessing), or, with loss_spike F > 0, when its loss is above F times
 * the mean of up to loss_spike_window accepted steps before it in this run. With fp16 a non-finite
 * gradient norm is the loss scaler's overflow (skipped as before, not a divergence). Action stop
 * ends the run before the step is saved; skip drops the step's update and goes on, and stops after
 * max_skips skipped steps in a row. */
enum { GUARD_OK = 0, GUARD_LOSS, GUARD_NORM, GUARD_MAX_LOSS, GUARD_SPIKE };
extern const char *const guard_names[]; /* by finding, as the metrics' "diverged" writes it */

/* the finding before the update (the step's loss) and after it (its norm; fp16's unskipped loss) */
int guard_before_step(const trainer *t, double loss);
int guard_after_step(const trainer *t, const step_record *rec);
/* after a step: 0 go on, 2 roll back, 1 stop (its one error line printed) */
int guard_verdict(trainer *t, const step_record *rec);
/* action rollback: back to the newest good checkpoint; 0, or 1 with the error line printed */
int guard_roll_back(trainer *t, const step_record *rec, const step_plan *p);

/* Checkpoint saves (train_save.c). Collective, every rank at the same step. train_save: saves STEP
 * (samples: the data position after it), waiting first for a save in flight; asynchronous with
 * checkpoint.async_save unless LAST (the run's end, a stop, a last attempt: blocking). 0, or -1 with
 * err on every rank. train_save_boundary: at each step boundary, completes a save in flight whose
 * write ended on every rank (WAIT: waits for it). train_save_metrics: the last save's fields for the
 * metrics row (rank 0). train_save_end: drops a save still in flight uncompleted (a run ending on an
 * error; `latest` stays), before the engine closes. */
int train_save(trainer *t, long step, long samples, int last, zt_err *err);
int train_save_boundary(trainer *t, int wait, zt_err *err);
void train_save_metrics(trainer *t, FILE *f);
void train_save_end(trainer *t);

/* "DIR/latest is step_N" / "no checkpoint yet" / "no checkpoint.dir": where a stopped run resumes,
 * for the loop's and the guard's stop lines. Here, read from the trainer's state alone, so that the
 * guard (below the loop in train.c) does not call back into the loop. */
static inline void train_describe_latest(const trainer *t, char *buf, size_t cap) {
    if (!t->cfg.checkpoint_dir) snprintf(buf, cap, "no checkpoint.dir is set, nothing was saved");
    else if (t->last_saved_step > 0)
        snprintf(buf, cap, "%s/latest is step_%08ld", t->cfg.checkpoint_dir, t->last_saved_step);
    else snprintf(buf, cap, "no checkpoint of this run in %s yet", t->cfg.checkpoint_dir);
}

#endif
