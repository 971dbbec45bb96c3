/* checkpoint_save.h — one checkpoint save (layout in checkpoint.h) as three phases, so that its file
 * I/O can run beside training (checkpoint_async.c) while what needs every rank stays on the
 * training thread, at step boundaries:
 *   start     collective: the step's names, the directory is still this run's (zt_checkpoint_dir_check),
 *             rank 0's empty temporary directory, the ranks' agreement on it; then what this rank
 *             writes is fixed: the state view it reads (the engine's, or a snapshot of it)
 *   write     this rank's file only: HDF5 writes, checksums, fsync. No MPI call and no agreement,
 *             so it may run on a thread of its own; nothing else may call HDF5 meanwhile (training
 *             does not: checkpoints are HDF5's only user between saves, checkpoint_async.c)
 *   complete  collective: the ranks agree that every rank wrote its file (and share its digest and
 *             manifest record: gather); rank 0 writes the index and the manifest, renames the step
 *             directory into place and moves `latest` atomically (publish: rank 0's alone, on any
 *             thread); the ranks agree on that, then rank 0 prunes (finish). Any rank's failure (in write or
 *             here) is every rank's -1, with `latest` and the last complete checkpoint untouched.
 * zt_checkpoint_save (checkpoint.h) is the three in a row: a blocking save. */
#ifndef ZT_CHECKPOINT_SAVE_H
#define ZT_CHECKPOINT_SAVE_H

#include "io/checkpoint.h"

typedef struct zt_save_job zt_save_job;

/* Collective. Takes copies of SV (the view write reads: it must stay readable until write ends),
 * SHAPE and ST; D, COMM and CONFIG_TEXT must outlive the job. NULL on every rank with err on failure
 * (nothing written). */
zt_save_job *zt_checkpoint_save_start(zt_checkpoint_dir *d, const zt_state_view *sv, zt_comm *comm,
                                      const zt_gpt2_shape *shape, const zt_train_state *st, const char *config_text,
                                      int keep_last, zt_err *err);
/* This rank's file; its outcome stays in the job for complete. Any thread; no MPI. */
void zt_checkpoint_save_write(zt_save_job *j);
/* Collective, after write on every rank. 0 on every rank once `latest` names the step, or -1 on
 * every rank with the first failing rank's message. Frees the job either way. It is these three: */
int zt_checkpoint_save_complete(zt_save_job *j, zt_err *err);
/* Collective: every rank wrote its file (digests and manifest records shared), 0; else -1 on every
 * rank, the job freed. */
int zt_checkpoint_save_gather(zt_save_job *j, zt_err *err);
/* Rank 0's index, manifest, rename and `latest` (other ranks: nothing), its outcome kept in the job
 * for finish. Any thread; no MPI; HDF5 (the writer thread's rule: nothing else in HDF5 meanwhile). */
void zt_checkpoint_save_publish(zt_save_job *j);
/* Collective, after publish: the ranks agree on rank 0's outcome, rank 0 prunes; 0, or -1 on every
 * rank. Frees the job. */
int zt_checkpoint_save_finish(zt_save_job *j, zt_err *err);
/* This rank alone, for a run that ends without completing (an error elsewhere): frees the job (rank 0
 * removes the temporary directory; a rank killed first leaves it for the next run to remove). */
void zt_checkpoint_save_abandon(zt_save_job *j);

long zt_save_job_step(const zt_save_job *j);
double zt_save_job_written_seconds(const zt_save_job *j); /* how long write took (0 before it ended) */

#endif
