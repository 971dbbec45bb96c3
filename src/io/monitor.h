/* monitor.h — DeepSpeed's monitors: the `tensorboard` section writes TensorBoard event files
 * (monitor_tb.c), `csv_monitor` DeepSpeed's one-CSV-file-per-metric layout (monitor_csv.c), both
 * into output_path/job_name/ and both on rank 0 only. Owns the metric tag names: DeepSpeed's
 * (Train/Samples/train_loss, lr, loss_scale, elapsed_time_ms_*) where DeepSpeed has one, ours
 * otherwise, all under Train/Samples/ with the global sample count as the x axis, as DeepSpeed
 * logs them. Every step's records reach the files whole before the next step starts, so a killed
 * run leaves files that read. */
#ifndef ZT_MONITOR_H
#define ZT_MONITOR_H

#include "config/config.h"
#include "io/state_view.h" /* zt_mem_account */
#include "util/util.h"

/* What train.c measured in one optimizer step. NAN = not measured this step (val_loss off eval
 * steps, loss_scale without fp16, the *_ms breakdown without wall_clock_breakdown); a non-finite
 * grad_norm (an overflowing fp16 step) is left out. */
typedef struct zt_step_metrics {
    long samples; /* global training samples consumed after this step: the x axis */
    double loss, lr, grad_norm, val_loss, loss_scale;
    double step_ms, tokens_per_s, comm_ms, forward_ms, backward_ms, optimizer_ms;
    const zt_mem_account *mem; /* this rank's memory by category (NULL: none) */
} zt_step_metrics;

typedef struct zt_monitor zt_monitor;

/* Opens the enabled monitors of cfg (NULL with no error when none is enabled). resume_samples is
 * where a resumed run continues (0 for a fresh run): what the directory holds past that point is
 * from a run that did not reach a checkpoint, and is dropped (TensorBoard: a SessionLog START at
 * that point; CSV: the rows after it). Call on rank 0 only. */
zt_monitor *zt_monitor_open(const zt_config *cfg, long resume_samples, zt_err *err);
/* Writes one step to every open monitor and flushes. Returns 0, or -1 with "FILE: cannot write ...:
 * REASON" in err when a write fails (a full disk): the training loop then stops the run, as for
 * every writer (docs/faults.md). NULL does nothing. */
int zt_monitor_step(zt_monitor *m, const zt_step_metrics *s, zt_err *err);
void zt_monitor_close(zt_monitor *m);

/* output_path/job_name (either may be NULL), created with parents; caller frees */
char *zt_monitor_dir(const zt_monitor_config *mc, zt_err *err);

#endif
