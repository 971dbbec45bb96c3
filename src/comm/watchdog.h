/* watchdog.h — the hang watchdog: no collective waits forever.
 *
 * A rank whose peer hangs (SIGSTOP, a host whose packets are silently dropped, a deadlock) would
 * otherwise sit in MPI_Wait forever: MPI notices dead processes, not stopped ones or a silent
 * network. The comm tables bracket every blocking wait with zt_watchdog_enter/leave (main thread
 * only); one watchdog thread per process wakes a few times per timeout and, when a wait has lasted
 * longer than comm_timeout seconds, prints one line
 *   zerotrain: error: rank R (host H): <collective> #N (B bytes) made no progress for Ns (waiting on ...)
 * and takes the whole job down with MPI_Abort (mpirun kills every rank, the stopped one included).
 * The hung rank itself cannot print; every rank waiting on it does. The timeout covers one wait,
 * not a step: a long checkpoint save by rank 0 while others wait in a collective counts, so the
 * default is generous (ZT_COMM_TIMEOUT_DEFAULT). */
#ifndef ZT_WATCHDOG_H
#define ZT_WATCHDOG_H

#include <stddef.h>

#define ZT_COMM_TIMEOUT_DEFAULT 600.0 /* seconds; NCCL/torch use 10-30 minutes */

/* Starts (or retunes) the watchdog thread of this process: timeout_s <= 0 turns it off. */
void zt_watchdog_start(double timeout_s, int rank, int world);
/* Stops the thread (at exit; safe without start). */
void zt_watchdog_stop(void);
/* A blocking wait on collective `what` (a string literal) of `bytes` begins / ends. Not nested. */
void zt_watchdog_enter(const char *what, size_t bytes);
void zt_watchdog_leave(void);

#endif
