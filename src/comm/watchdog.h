/* watchdog.h — the hang watchdog: no collective waits forever, and no phase before the first step
 * (start-up, the resume's load) lasts past its bound (zt_watchdog_phase, below).
 *
 * A rank whose peer hangs (SIGSTOP, a host whose packets are silently dropped, a deadlock) would
 * otherwise sit in MPI_Wait forever: MPI notices dead processes, not stopped ones or a silent
 * network. The comm tables bracket every blocking wait with zt_watchdog_enter/leave (main thread
 * only); one watchdog thread per process wakes a few times per timeout and, when a wait has lasted
 * longer than comm_timeout seconds, prints one line
 *   zerotrain: error: rank R (host H): <collective> #N (B bytes) made no progress for Ns (waiting on ...)
 * and takes the whole job down with MPI_Abort (mpirun kills every rank, the stopped one included).
 * R is this rank in the job (MPI_COMM_WORLD) also when the wait is on a group comm (a subset of the
 * ranks, comm.h: zt_comm_mpi_group); the line then says "waiting on the other K ranks of its group
 * of N".
 * A peer that shares this rank's roll (below: its host's ranks) whose stamps are 2 ticks + 1 s late
 * and whose process the kernel shows stopped (SIGSTOP, a debugger) or exited, or cannot show, is a
 * stopped process: a wait on the job then cannot end, and it is reported at once, without waiting
 * out comm_timeout (SIGSTOP: ~3 s, not comm_timeout + 1). Late stamps on a process that runs or
 * sleeps only say it is slow (starved on a loaded machine), and that wait is left to comm_timeout.
 * The hung rank itself cannot print; every rank waiting on it does. The timeout covers one wait,
 * not a step: a long checkpoint save by rank 0 while others wait in a collective counts, so the
 * default is generous (ZT_COMM_TIMEOUT_DEFAULT).
 *
 * Device collectives (NCCL on a GPU stream) return to the host before they run, and their wait()
 * only orders the compute stream, so a collective hung on the GPU would surface later in some
 * unwatched synchronize. A comm with such operations registers a probe instead (zt_watchdog_watch):
 * on every tick the watchdog thread asks it for the oldest operation that has not completed and
 * since when the comm made no progress (cudaEventQuery on its operations' events), and for an
 * asynchronous error (ncclCommGetAsyncError); several device comms (a world one and group ones) are
 * watched side by side. Past comm_timeout, or on such an error, it prints
 *   zerotrain: error: rank R (host H): NCCL <collective> #N (B bytes) made no progress for Ns (on the GPU; ...)
 * lets every watched comm abort itself (ncclCommAbort) and then takes the job down like a host wait. A sticky
 * CUDA error (a kernel faulted, the whole context with it) is the GPU's, not the comm's: the line
 * then reads `rank R (host H): the GPU failed: <CUDA's error> ...` and names no collective.
 * The comm's abort runs on a thread of its own and gets ZT_WATCHDOG_ABORT_WAIT seconds: NCCL's
 * ncclCommAbort raises its abort flags at once, but then tears the communicator down, which waits
 * for the device (behind a collective hung on the GPU: never; NCCL does that teardown blocking even
 * for a nonblocking communicator), so the job is taken down without waiting longer. */
#ifndef ZT_WATCHDOG_H
#define ZT_WATCHDOG_H

#include <stddef.h>

#define ZT_COMM_TIMEOUT_DEFAULT 600.0 /* seconds; NCCL/torch use 10-30 minutes */
#define ZT_WATCHDOG_ABORT_WAIT 5      /* seconds the device comms' aborts may take before MPI_Abort */
#define ZT_WATCHDOG_MAX_WATCHED 8     /* device comms watched at once */

/* Starts (or retunes) the watchdog thread of this process: timeout_s <= 0 turns it off. rank and
 * world are the job's (MPI_COMM_WORLD's, or a dup of it), never a group comm's: they name this rank
 * in every line and index its record in the roll. */
void zt_watchdog_start(double timeout_s, int rank, int world);
/* Blocks SIGCONT in the calling thread: called first thing in a rank's main, before any thread starts,
 * so that every thread but the watchdog's (which unblocks it) inherits the block. A rank that was
 * stopped and continued (SIGSTOP, Slurm's suspend) then knows it at the watchdog's next tick, and
 * counts its waits from its return: it blames no peer for the time it was away, however short. */
void zt_watchdog_hold_continue(void);
/* Stops the thread (at exit; safe without start), and closes the roll. */
void zt_watchdog_stop(void);
/* The roll: after zt_watchdog_start, every rank names the same file /dev/shm/.zerotrain-roll-TAG (a
 * host's ranks share it). Each watchdog tick stamps this rank's record there (with its pid); a hang
 * line then also names each peer whose stamps stopped: `; rank K (host H) stopped answering Ns ago
 * (last seen waiting in all-reduce)` for a stopped process (above; its watchdog thread stops with
 * it), `; rank K (host H) has not answered for Ns but is not stopped (state S, last seen ...)` for
 * one the kernel shows running or sleeping. Rank 0 removes
 * the file at the end, every rank on its exit paths (util.h: zt_scratch_register). */
void zt_watchdog_roll(const char *tag);
/* A phase before the first step (start-up, the resume's load) begins: `what` names it in the line
 * ("resume load of step_00000040"; copied), limit_s bounds it (<= 0: unbounded). Past limit_s this
 * rank ends the job with one line
 *   zerotrain: error: rank R (host H): <what> did not finish in Ss (<why>); aborting the job
 * (`why` says where the bound comes from; copied). A phase is no collective: a rank stuck in its own
 * file read ends itself, also alone (the thread then starts on one rank too), not only through the
 * peers that wait on it. With bounds_waits, a collective wait within the phase is bounded by its
 * limit where that is longer than comm_timeout (the resume's load: a peer still reading its part of
 * a big checkpoint is no hang). A phase ends where the next begins; what == NULL ends the last one
 * (before the first step). */
void zt_watchdog_phase(const char *what, double limit_s, const char *why, int bounds_waits);
/* Seconds start-up may take once the config is read (the checkpoint directory, the session's memory,
 * device and comms): ZEROTRAIN_STARTUP_TIMEOUT (default ZT_STARTUP_TIMEOUT_DEFAULT, as `run
 * --restarts` waits for the ranks' banner; 0: unbounded). */
#define ZT_STARTUP_TIMEOUT_DEFAULT 600.0
double zt_watchdog_startup_timeout(void);

/* A blocking wait on collective `what` (a string literal) of `bytes` over a comm of `ranks` ranks
 * (the job's or a group's) begins / ends. Not nested. */
void zt_watchdog_enter(const char *what, size_t bytes, int ranks);
void zt_watchdog_leave(void);

/* What a probe reports about a device comm (see above). */
typedef struct zt_watchdog_op {
    const char *what; /* "NCCL allreduce" (a string literal) */
    long seq;         /* the operation's number on its comm, from 1 */
    size_t bytes;
    double since;     /* zt_now() of its enqueue or of the comm's last progress, whichever is later */
    char error[256];  /* the error, when probe returns -1 or -2 */
} zt_watchdog_op;
typedef struct zt_watchdog_probe {
    /* From the watchdog thread: 0 when every operation has completed; 1 with *op the oldest one
     * that has not; -1 with op->error set: the comm failed (op names the oldest pending operation,
     * if any); -2 with op->error set: the device failed (a sticky CUDA error: the faulting kernel
     * may be any of the process's, so no operation is blamed). */
    int (*probe)(void *ctx, zt_watchdog_op *op);
    /* before the job is taken down, on a thread of its own (every watched comm's, one after the
     * other): waited for ZT_WATCHDOG_ABORT_WAIT s in all */
    void (*abort)(void *ctx);
    void *ctx;
    int ranks; /* the comm's, for the line (0: the job's) */
} zt_watchdog_probe;
/* Watches a device comm (up to ZT_WATCHDOG_MAX_WATCHED side by side, each by its ctx; *p is
 * copied). Starts the watchdog thread when a timeout is set, also on a single rank. Unwatch before
 * the comm goes away: once it returns, the watchdog no longer calls its probe. */
void zt_watchdog_watch(const zt_watchdog_probe *p);
void zt_watchdog_unwatch(void *ctx);
/* The probes' last answer, for tests: 0 all done, 1 pending on some comm (2: not asked yet, or not
 * watching); *asked (if not NULL): how many times the watchdog has called a probe so far. */
int zt_watchdog_last_probe(long *asked);

#endif
