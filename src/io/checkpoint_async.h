/* checkpoint_async.h — asynchronous checkpoint saves (checkpoint.async_save): a save blocks training
 * only to snapshot this rank's state into host memory; a writer thread runs the save's write phase
 * (checkpoint_save.h) from the snapshot while training goes on, and the ranks complete it together at
 * a step boundary. At most one save is in flight. How completion stays deadlock-free across ranks:
 * checkpoint_async.c's opening comment. */
#ifndef ZT_CHECKPOINT_ASYNC_H
#define ZT_CHECKPOINT_ASYNC_H

#include "io/checkpoint.h"

typedef struct zt_async_saver zt_async_saver;

zt_async_saver *zt_async_saver_new(void);
/* Waits for a write still in flight (this rank's thread; no collective) and drops it uncompleted:
 * for a run that ends on an error. Frees the staging buffer. NULL is a no-op. */
void zt_async_saver_free(zt_async_saver *a);

/* Collective; no save in flight. Snapshots SV's range [lo, hi) of master, adam_m and adam_v (read
 * through the view, wherever the state lives: device, host or NVMe swap files) and ST into the
 * staging buffer (12 bytes an element, allocated at the first save and kept), starts the save
 * (zt_checkpoint_save_start) and the writer thread, and returns: training may change the state at
 * once. 0 on every rank, or -1 on every rank with err (no host memory for the buffer, or start's). */
int zt_async_save_begin(zt_async_saver *a, zt_checkpoint_dir *d, const zt_state_view *sv, zt_comm *comm,
                        const zt_gpt2_shape *shape, const zt_train_state *st, const char *config_text,
                        int keep_last, zt_err *err);
int zt_async_save_in_flight(const zt_async_saver *a);
long zt_async_save_step(const zt_async_saver *a); /* the step of the save in flight */
/* Collective, called by every rank at the same step boundary while a save is in flight: 1 when the
 * part running beside the steps (the write, then rank 0's publish) has ended on every rank (then
 * zt_async_save_advance may be called), 0 otherwise. */
int zt_async_save_poll(zt_async_saver *a);
/* Collective, after a poll said 1: the next part. After the write: the gather, and rank 0's publish
 * begins on its thread (*complete 0). After the publish: the save completes (*complete 1, *written_s
 * its seconds from the snapshot until `latest` named it). 0, or -1 on every rank (err; the save is
 * over). */
int zt_async_save_advance(zt_async_saver *a, int *complete, double *written_s, zt_err *err);
/* This rank's write has ended (local: the others' may not have). */
int zt_async_save_written(const zt_async_saver *a);
/* Collective, while a save is in flight: waits for this rank's thread, then completes the save (what
 * is left of gather, publish and finish, here). 0 or -1 on every rank (err). *written_s gets its
 * seconds from the snapshot until `latest` named it, *waited_s how long this call waited for the thread. */
int zt_async_save_finish(zt_async_saver *a, double *written_s, double *waited_s, zt_err *err);
/* Whether this process's writer thread may be inside HDF5 now: a reader must not open HDF5 files. */
int zt_async_save_writing(void);

#endif
