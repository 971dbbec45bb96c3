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
 *   ZEROTRAIN_INJECT_EXTRA_SYNC=1    the model's forward synchronize()s after every block: a needless
 *                                    wait that the virtual clock must see (test/t_predict.py)
 * Nothing else in the program reads ZEROTRAIN_INJECT_*. */
#ifndef ZT_TEST_HOOKS_H
#define ZT_TEST_HOOKS_H

/* 1 when ZEROTRAIN_INJECT_OVERFLOW lists `step` (1-based). */
int zt_test_hook_overflow_at(long step);

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

/* 1 when ZEROTRAIN_INJECT_TP_DIVERGE is `tp_rank`. */
int zt_test_hook_tp_diverge(int tp_rank);

/* 1 when ZEROTRAIN_INJECT_EXTRA_SYNC is set (not "0"). */
int zt_test_hook_extra_sync(void);

#endif
