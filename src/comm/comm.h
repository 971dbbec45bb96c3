/* comm.h — the collectives table the engine uses for data parallelism and ZeRO (MPI in
 * src/comm/comm_mpi.c; NCCL in cuda/; host-staged and one-rank device comms in comm_staged.c), over
 * all ranks or over a group of them (tensor parallelism's and ZeRO's sub-communicators). Buffers are
 * device buffers of the backend the comm was made for.
 * Asynchronous calls return a request that wait() completes; the MPI table uses non-blocking
 * collectives so that reduction overlaps with backward when overlap_comm is on. */
#ifndef ZT_COMM_H
#define ZT_COMM_H

#include <stddef.h>
#include <stdio.h>
#include "backend/backend.h"
#include "config/hw_profile.h"
#include "util/util.h"

typedef struct zt_comm_req zt_comm_req; /* opaque in-flight operation */

/* Communication volume, counted by every comm table per collective kind: the bytes this rank sends
 * and receives under the algorithm's nominal volume (bandwidth-optimal ring/pipeline, n ranks):
 *   all-reduce of S bytes            sends 2(n-1)/n S, receives the same
 *   reduce-scatter, pieces p_r bytes  sends sum_r p_r - p_self, receives (n-1) p_self
 *   all-gather, pieces p_r bytes      sends (n-1) p_self, receives sum_r p_r - p_self
 *   broadcast of S bytes             the root sends S, every other rank receives S
 * "scalar" is the host-side loss/norm/agreement traffic, counted like all-reduces. Summed over
 * ranks, sent == received for every kind. */
enum { ZT_COLL_ALLREDUCE, ZT_COLL_REDUCE_SCATTER, ZT_COLL_ALLGATHER, ZT_COLL_BROADCAST, ZT_COLL_SCALAR,
       ZT_COLL_NKIND };
extern const char *const zt_coll_names[ZT_COLL_NKIND]; /* "allreduce", "reduce_scatter", ... */
typedef struct zt_comm_bytes {
    double sent[ZT_COLL_NKIND], recv[ZT_COLL_NKIND]; /* cumulative since the comm was made */
} zt_comm_bytes;

typedef struct zt_comm {
    const char *name;
    int rank, world; /* in this comm: a group comm's rank and size, not MPI_COMM_WORLD's */
    void *impl;
    zt_comm_bytes bytes; /* counted by the table's collectives (comm_volume.c) */
    /* Every rank's counts [world], as each rank counts its own (bit for bit: the same additions in the
     * same order, since every rank of a collective knows every rank's pieces), so one rank can report
     * every rank's traffic without asking them; kept by the tables whose ranks are real processes
     * (zt_comm_keep_rank_bytes), NULL in the costed comm, where one process stands for every rank */
    zt_comm_bytes *rank_bytes;
    /* The device queue this comm's collectives run on, in the order they are issued (NCCL: the comm
     * stream); NULL where each one runs in the calling thread's program order, done before its call
     * returns or before the next collective of any comm starts (MPI, host-staged, one rank). Two comms
     * with different queues could run collectives at once on a device, and NCCL's kernels of two
     * communicators in flight at once can deadlock: zt_comm_check_order refuses that. */
    const void *order;
    /* ranks of this comm on this rank's machine when the table knows it without asking (the costed
     * comm); 0: zt_comm_ranks_on_node asks the ranks */
    int node_ranks;
    /* sum-reductions over dtype elements (ZT_F32 or the backend compute dtype) */
    zt_comm_req *(*allreduce_sum)(struct zt_comm *c, void *buf, size_t count, zt_dtype t);
    /* Variable-count reduce-scatter: send is the concatenation of per-rank pieces of counts[r]
     * elements; recv (counts[rank] elements) = sum over ranks of their piece for this rank. */
    zt_comm_req *(*reduce_scatter_sum)(struct zt_comm *c, const void *send, void *recv, const size_t *counts,
                                       zt_dtype t);
    /* Variable-count all-gather: recv is the concatenation over ranks r of counts[r] elements, each
     * rank's piece coming from its send (send may be its own piece inside recv: in place). */
    zt_comm_req *(*allgather)(struct zt_comm *c, const void *send, void *recv, const size_t *counts, zt_dtype t);
    zt_comm_req *(*broadcast)(struct zt_comm *c, void *buf, size_t bytes, int root);
    void (*wait)(struct zt_comm *c, zt_comm_req *req);
    void (*barrier)(struct zt_comm *c);
    /* host-side small reductions for scalars (loss sums, norms), always blocking, in double */
    void (*allreduce_host_double)(struct zt_comm *c, double *vals, int n);
    /* every rank agrees: returns the max over ranks of status (used to fail together) */
    int (*agree_max)(struct zt_comm *c, int status);
    void (*destroy)(struct zt_comm *c);
} zt_comm;

/* Adds a collective's nominal volume to c->bytes, and every rank's to c->rank_bytes where kept
 * (counts in elements of esz bytes). */
void zt_comm_count_allreduce(zt_comm *c, int kind, size_t bytes);
void zt_comm_count_reduce_scatter(zt_comm *c, const size_t *counts, size_t esz);
void zt_comm_count_allgather(zt_comm *c, const size_t *counts, size_t esz);
void zt_comm_count_broadcast(zt_comm *c, size_t bytes, int root);
/* A table keeps c->rank_bytes from its creation on (before any collective: the counts start at zero
 * as c->bytes does); the table's destroy frees it. */
void zt_comm_keep_rank_bytes(zt_comm *c);
/* Total bytes this rank sent (received) over the kinds that carry model states (all but scalar). */
double zt_comm_bytes_sent(const zt_comm_bytes *b);
double zt_comm_bytes_recv(const zt_comm_bytes *b);
/* now - before, per kind (the traffic of one step from two snapshots of c->bytes). */
zt_comm_bytes zt_comm_bytes_since(const zt_comm_bytes *now, const zt_comm_bytes *before);
/* Every rank's b, gathered over c (collective; counted as scalar traffic): [world] entries. */
zt_comm_bytes *zt_comm_bytes_gather(zt_comm *c, const zt_comm_bytes *b);
/* Appends `, "PREFIX_sent_bytes": {"allreduce": [rank 0, rank 1, ...], ...}, "PREFIX_recv_bytes": {...}`
 * to a metrics line, from [world] entries (zt_comm_bytes_gather, or a comm's rank_bytes). */
void zt_comm_bytes_json(FILE *f, const char *prefix, const zt_comm_bytes *per_rank, int world);
/* The wall_clock_breakdown line: MB sent/received per kind, via zt_info. */
void zt_comm_bytes_print(const zt_comm_bytes *b);

/* 0 when the collectives of comms a and b (either may be NULL) run in one order: both on the same
 * device queue, or neither on one (zt_comm.order); else fails with err naming what (e.g.
 * "data-parallel and tensor-parallel") — two device queues whose collectives could overlap. */
int zt_comm_check_order(const zt_comm *a, const zt_comm *b, const char *what, zt_err *err);

/* Collective over c: fails (on every rank alike) when two ranks of c on one machine opened the same
 * device while the machine has at least as many devices as ranks of c — each was meant to have its
 * own (zt_node_local_rank). Ranks sharing a device where devices are fewer is legitimate (the
 * host-staged comm serves them). device / device_count as the backend table has them (count 0: no
 * devices, nothing to check). */
int zt_comm_check_devices(zt_comm *c, int device, int device_count, zt_err *err);

/* Collective: how many ranks of c run on this rank's machine (same host name), this one included;
 * over a group comm, the group's ranks only (a machine's memory is split among the job's ranks:
 * ask a world comm for that). */
int zt_comm_ranks_on_node(zt_comm *c);

/* Process-wide MPI setup: MPI_Init_thread once, error handler that makes every rank exit non-zero
 * when one fails, and a duplicate of MPI_COMM_WORLD reserved for data parallelism / ZeRO. Init and
 * finalize each end the rank with one line past ZEROTRAIN_MPI_TIMEOUT seconds (comm_mpi.c). */
/* ZEROTRAIN_MPI_TIMEOUT's seconds (default 300, 0 = off): also the watchdog's timeout for the
 * collectives before the config's comm_timeout is known (a rank stopped right after MPI_Init). */
double zt_mpi_phase_timeout(void);
int zt_mpi_init(int *argc, char ***argv, zt_err *err);
void zt_mpi_finalize(void);
/* Ends the whole job with status (MPI_Abort when world > 1, exit otherwise). */
void zt_mpi_abort(int status);
int zt_mpi_world_rank(void);
/* zt_node_local_rank (this process's rank on its machine) is backend/backend.h's, where the device
 * backends that choose their GPU by it see it; zt_mpi_init tells it MPI's numbering. */
int zt_mpi_world_size(void);

/* Data-parallel comm over MPI for the given backend (device buffers are host memory on the CPU
 * backend; a CUDA backend uses the NCCL table instead): a duplicate of MPI_COMM_WORLD. Collective
 * over the world. */
zt_comm *zt_comm_mpi(const zt_backend *be, zt_err *err);
/* The same over a group: the ranks of MPI_COMM_WORLD that pass the same color (>= 0), numbered
 * 0..n-1 in the order of key (ties: world rank) — MPI_Comm_split. Collective over the world: every
 * rank calls it, each with its own color (with tp-inner ranks, w's tensor-parallel group is color
 * w / tp, key w % tp; its data-parallel group color w % tp, key w / tp). Every entry of the table
 * works over the group: rank and world are the group's, a broadcast's root is a group rank, the
 * byte counts use n = the group's size, and agree_max (so zt_agree) agrees within the group only —
 * a failure that must stop the job is agreed over a world comm. NULL with the reason in *err on
 * every rank when any rank passed a negative color. A hang in a group collective is reported by
 * the watchdog with this rank's world rank, as "waiting on the other K ranks of its group of n"
 * (watchdog.h). */
zt_comm *zt_comm_mpi_group(const zt_backend *be, int color, int key, zt_err *err);

/* Device-buffer comms without NCCL (comm_staged.c), for backends whose memory is not host memory.
 * zt_comm_device_local: one rank, no comm at all — a reduce-scatter or all-gather whose source and
 * destination differ is a device copy, the rest does nothing. zt_comm_staged: several ranks, each
 * collective copied through pinned host buffers and run over MPI (blocking; 16-bit sums in fp32);
 * collective like zt_comm_mpi. Used by the simulated device, and by GPUs when NCCL is unusable.
 * zt_comm_staged_group: the same over a group, as zt_comm_mpi_group (collective over the world).
 * A group of one rank works with it too, through the host; callers use zt_comm_device_local
 * instead when every group has one rank (tp = 1, or dp = 1: each rank decides alone, no rank calls
 * the collective) — never when only some groups do, since the others' ranks would wait in the
 * split for the ranks that skipped it. */
zt_comm *zt_comm_device_local(const zt_backend *be);
zt_comm *zt_comm_staged(const zt_backend *be, zt_err *err);
zt_comm *zt_comm_staged_group(const zt_backend *be, int color, int key, zt_err *err);

/* The costed comms (comm_costed.c), for `zerotrain predict --ranks N [--tp T]`: this process stands
 * for one rank of `world` (tp ranks to a tensor-parallel group), and once installed zt_comm_mpi,
 * zt_comm_mpi_group and zt_comm_nccl_group return costed comms that report the world's and the
 * groups' sizes and charge each collective to the simulated GPU's virtual clock from prof's network
 * section (gpus_per_node ranks to a node) instead of carrying it out. */
int zt_comm_costed_install(int world, int tp, const zt_hw_profile *prof, zt_err *err);
int zt_comm_costed_active(void);
/* the world's costed comm (split 0) or the next group's (split 1); device: NCCL's kind */
zt_comm *zt_comm_costed_open(int split, int device, zt_err *err);

#endif
