/* test_hooks.h — the fault injections tests use to reach failure paths that cannot be caused from
 * outside on the CPU backend, all in one place and all read from the environment:
 *   ZEROTRAIN_INJECT_OVERFLOW="3,7"  an fp16 gradient overflow (an inf in the reduced gradients) at
 *                                    those 1-based steps, on every rank (test/t_loss_scale.py;
 *                                    without fp16 a non-finite gradient norm for the divergence
 *                                    guard, test/t_guard.py)
 *   ZEROTRAIN_INJECT_NO_PREALLOC=1   NVMe swap files are not preallocated, so several ranks whose
 *                                    swaps each passed the free-space check can fill a small file
 *                                    system together during steps (test/t_infinity.py's ENOSPC case)
 *   ZEROTRAIN_INJECT_NCCL_HANG=N     the N-th NCCL collective of the process (1-based) waits on its
 *                                    GPU stream behind a kernel that spins (for 120 s at most): a
 *                                    collective hung on the device (`zerotrain selftest`'s watchdog check)
 *   ZEROTRAIN_INJECT_SKIP_SYNC=1     Twin-Flow starts its D2H lane without the synchronize() that
 *                                    orders it after backward's gradients: the bug the simulated
 *                                    device's jitter must turn into a wrong loss (test/t_sim.py)
 *   ZEROTRAIN_INJECT_STOP_AFTER_INIT=R   rank R stops itself (SIGSTOP) as MPI_Init returns, before the
 *                                    first collective: the watchdog, on ZEROTRAIN_MPI_TIMEOUT until the
 *                                    config is read, must end the others (test/t_launch_bounds.py)
 *   ZEROTRAIN_INJECT_STOP_IN_FINALIZE=R  rank R stops itself (SIGSTOP) on its way into MPI_Finalize: a
 *                                    rank that stops answering at the end (test/t_launch_bounds.py)
 *   ZEROTRAIN_INJECT_TP_DIVERGE=T    tensor-parallel rank T's master copy of transformer.ln_f.bias (a tensor
 *                                    every tp rank holds whole) has one bit flipped as it is saved: the
 *                                    divergence the save's guard must refuse (test/t_tp_checkpoint.py)
 *   ZEROTRAIN_INJECT_BLAS_FALLBACK=1 OPENBLAS_CORETYPE counts as OpenBLAS's own choice, not the user's:
 *                                    with OPENBLAS_CORETYPE=Prescott the process starts on a real
 *                                    fallback on any CPU, which zt_blas_core_choose must replace
 *                                    (test/t_blas_core.py)
 *   ZEROTRAIN_INJECT_OWN_COMM_ORDER=1  every host-staged group comm claims a device queue of its own, as
 *                                    each NCCL comm's stream of its own once did: the two device comms
 *                                    of a tensor-parallel run that the session must refuse
 *                                    (test/t_tensor_parallel.py)
 *   ZEROTRAIN_INJECT_LOCAL_RANK_FROM_ENV=1  the node-local rank is read from the launcher's variables
 *                                    only, as the GPU was once chosen: with none set, every rank of a
 *                                    node opens device 0, which the session must refuse where the node
 *                                    has a device per rank (test/t_sim.py, ZEROTRAIN_SIM_DEVICES)
 *   ZEROTRAIN_INJECT_NCCL_VERSION=N  NCCL reports version N (ncclGetVersion's code, 20900 = 2.9.0): an
 *                                    NCCL without bfloat16, which must count as absent (a GPU check)
 *   ZEROTRAIN_INJECT_NO_DIR_LOCK=1   a checkpoint directory is not flock'ed itself, as on NFS: the
 *                                    .lock file alone holds it (test/t_checkpoint_faults.py)
 *   ZEROTRAIN_INJECT_LR_SPIKE=S      the learning rate of step S (1-based) times 1e4, once a process (not
 *                                    again after a rollback): an update that diverges, seen by the
 *                                    guard only at the next step's loss (test/t_guard.py)
 *   ZEROTRAIN_INJECT_SKIP_BATCHES=S:K  after step S the data stream jumps K global batches: the run that
 *                                    never saw the batches a rollback skips (test/t_guard.py)
 *   ZEROTRAIN_INJECT_EXTRA_SYNC=1    the model's forward synchronize()s after every block: a needless
 *                                    wait that the virtual clock must see (test/t_predict.py)
 *   ZEROTRAIN_INJECT_SERIAL_LANES=1  a needless wait that serializes lanes which overlap: each step's
 *                                    first micro-batch drains the device and waits for the last update's
 *                                    host lanes (overlap_step's CPU Adam and H2D) before its forward
 *                                    (test/t_predict.py, test/bench_predict.py)
 *   ZEROTRAIN_INJECT_LAUNCH_BLOCKING=1  the simulated GPU waits for every op queued on its compute lane
 *                                    before the host goes on, as CUDA_LAUNCH_BLOCKING=1 does on a GPU: a
 *                                    needless synchronize per op, which costs a handoff each
 *                                    (test/bench_predict.py, test/t_predict.py)
 *   ZEROTRAIN_INJECT_GATHER_COMM_BYTES=1  the metrics line's per-rank traffic is gathered from the ranks
 *                                    every step, as under tensor parallelism, also without it: what rank 0
 *                                    counts of every rank itself must equal it (test/t_comm_bytes.py)
 *   ZEROTRAIN_INJECT_CLIP="3,5"      gradient_clipping is 1e-6 at those 1-based steps: a norm that is
 *                                    clipped on chosen steps only, so the speculative step rolls back
 *                                    there and is accepted elsewhere (test/t_super_offload.py)
 *   ZEROTRAIN_INJECT_SPECULATE=always|never  the speculative step speculates on every planned step, or
 *                                    never, whatever the last steps' norms say (the policy's choice
 *                                    otherwise); always also holds the verdict until the speculation has
 *                                    done its whole window: a rollback of everything at every clipped step
 *                                    (test/t_super_offload.py)
 *   ZEROTRAIN_INJECT_SKIP_ROLLBACK=1 a speculation the step rejects is kept as if accepted, as a rollback
 *                                    that skipped its restore would: the bug the exactness tests must
 *                                    turn into other losses (test/t_super_offload.py)
 *   ZEROTRAIN_INJECT_SAVE_NAN=R      data-parallel rank R's saved master copy has a NaN as its first element,
 *                                    put in after the save's finite-state check and checksummed, as a
 *                                    broken writer would: what every load must refuse (test/t_checkpoint_fuzz.py)
 *   ZEROTRAIN_INJECT_LOAD_STALL=1    a resume's checkpoint load never ends (as one stuck on its file system):
 *                                    a stop signal must still end the rank (test/t_checkpoint_fuzz.py), and
 *                                    so must the load's bound, ZEROTRAIN_LOAD_TIMEOUT; `zerotrain info`
 *                                    never ends either: run --restarts' health check must; =rank:R stalls
 *                                    rank R's load alone, while the others wait on it (test/t_load_bounds.py)
 *   ZEROTRAIN_INJECT_ASYNC_HOLD=S:PATH  the asynchronous write of step S's checkpoint (checkpoint.async_save), on
 *                                    every rank, creates PATH.rankR (R the world rank: the write is in
 *                                    flight) and then waits until PATH exists before writing anything: a
 *                                    test kills or stops a rank mid-write, waiting on files, not clocks
 *                                    (test/t_async_save.py)
 * Nothing else in the program reads ZEROTRAIN_INJECT_*. */
#ifndef ZT_TEST_HOOKS_H
#define ZT_TEST_HOOKS_H

/* 1 when ZEROTRAIN_INJECT_OVERFLOW lists `step` (1-based). */
int zt_test_hook_overflow_at(long step);

/* 1 when ZEROTRAIN_INJECT_CLIP lists `step` (1-based). */
int zt_test_hook_clip_at(long step);

/* ZEROTRAIN_INJECT_SPECULATE: 1 "always", 0 "never", -1 unset (the policy decides). */
int zt_test_hook_speculate(void);

/* 1 when ZEROTRAIN_INJECT_SKIP_ROLLBACK is set (not "0"); read once. */
int zt_test_hook_skip_rollback(void);

/* 1 when ZEROTRAIN_INJECT_NO_PREALLOC is set (not "0"). */
int zt_test_hook_no_prealloc(void);

/* 1 when ZEROTRAIN_INJECT_NCCL_HANG is `seq` (1-based). */
int zt_test_hook_nccl_hang_at(long seq);

/* 1 when ZEROTRAIN_INJECT_SKIP_SYNC is set (not "0"). */
int zt_test_hook_skip_sync(void);

/* 1 when ZEROTRAIN_INJECT_STOP_AFTER_INIT is `rank`. */
int zt_test_hook_stop_after_init(int rank);

/* 1 when ZEROTRAIN_INJECT_STOP_IN_FINALIZE is `rank`. */
int zt_test_hook_stop_in_finalize(int rank);

/* 1 when ZEROTRAIN_INJECT_LOAD_STALL is set (not "0"), or is "rank:R" with R `rank`. */
int zt_test_hook_load_stall(int rank);

/* ZEROTRAIN_INJECT_ASYNC_HOLD's PATH when its step is `step`, else NULL (a pointer into the environment). */
const char *zt_test_hook_async_hold(long step);

/* 1 when ZEROTRAIN_INJECT_SAVE_NAN is `rank`. */
int zt_test_hook_save_nan(int rank);

/* 1 when ZEROTRAIN_INJECT_TP_DIVERGE is `tp_rank`. */
int zt_test_hook_tp_diverge(int tp_rank);

/* 1 when ZEROTRAIN_INJECT_BLAS_FALLBACK is set (not "0"). */
int zt_test_hook_blas_fallback(void);

/* 1 when ZEROTRAIN_INJECT_OWN_COMM_ORDER is set (not "0"). */
int zt_test_hook_own_comm_order(void);

/* 1 when ZEROTRAIN_INJECT_LOCAL_RANK_FROM_ENV is set (not "0"). */
int zt_test_hook_local_rank_from_env(void);

/* ZEROTRAIN_INJECT_NCCL_VERSION's number, or `version` when it is not set. */
int zt_test_hook_nccl_version(int version);

/* 1 when ZEROTRAIN_INJECT_NO_DIR_LOCK is set (not "0"). */
int zt_test_hook_no_dir_lock(void);

/* 1 when ZEROTRAIN_INJECT_LR_SPIKE is `step`, the first time it is asked in the process. */
int zt_test_hook_lr_spike_at(long step);

/* K when ZEROTRAIN_INJECT_SKIP_BATCHES is "step:K"; else 0. */
long zt_test_hook_skip_batches_after(long step);

/* 1 when ZEROTRAIN_INJECT_EXTRA_SYNC is set (not "0"). */
int zt_test_hook_extra_sync(void);

/* 1 when ZEROTRAIN_INJECT_LAUNCH_BLOCKING is set (not "0"). */
int zt_test_hook_launch_blocking(void);

/* 1 when ZEROTRAIN_INJECT_SERIAL_LANES is set (not "0"). */
int zt_test_hook_serial_lanes(void);

/* 1 when ZEROTRAIN_INJECT_GATHER_COMM_BYTES is set (not "0"). */
int zt_test_hook_gather_comm_bytes(void);

#endif
