/* comm_costed.c — the costed comms of `zerotrain predict --ranks N [--tp T]` (see comm.h): one
 * process stands for one rank of N, every rank of a ZeRO or tensor-parallel group doing the same
 * work, so no other rank is needed to know what this one does and waits for. Installed before the
 * run, it answers the comm constructors the engine already calls (zt_comm_mpi, zt_comm_mpi_group,
 * zt_comm_nccl_group): the world and each group report their real size, this process is rank 0 of
 * each, and every collective is charged to the simulated GPU's virtual clock (backend/sim_clock.h)
 * from the hardware profile's network section instead of being carried out. Buffers keep what they
 * hold: predict only costs the work (ZEROTRAIN_SIM_DRY), so no value read after a collective matters.
 *
 * What a collective costs (the ring algorithms NCCL uses, n ranks, S bytes):
 *   all-reduce                 2 (n-1)/n S / bw + 2 steps
 *   reduce-scatter, all-gather   (n-1)/n S / bw + steps      (S: the whole, every rank's piece)
 *   broadcast                          S / bw + steps      (pipelined: the root's S crosses each link once)
 * bw is the profile's intra-node bus bandwidth when the group fits in one node (gpus_per_node), the
 * inter-node one otherwise (hierarchical: the slowest links bind); "steps" is the latency of the
 * n - 1 hops, each hop inside a node at the intra-node latency and each between nodes at the
 * inter-node one (a ring within each node, then across the nodes). Device collectives run on the
 * sim's comm lane (NCCL's stream): each starts once the compute lane has run what was queued before
 * it, and a wait() makes the compute lane, not the host, wait for it. The host comms (MPI: loss,
 * grad norm, agreements; a barrier) carry a few scalars: they cost the latency of ceil(log2 n)
 * rounds (recursive doubling, MPI's algorithm for small messages), on the calling thread.
 *
 * Which group a constructor call is: the session splits the world into a data-parallel group (every
 * tp-th rank: stride tp) and then a tensor-parallel one (tp consecutive ranks), host comms first,
 * then device comms for the groups of more than one rank (engine/session.c, open_groups). A split
 * names its group by a color this rank alone cannot tell apart (rank 0's colors are all 0), so the
 * groups are handed out in that order, and a call past them is refused with a line saying so; two
 * swapped would shard ZeRO over the wrong group, which t_predict_ranks's check of the per-rank memory
 * under --tp 2 against estimate's catches. */
#include "comm/comm.h"

#include <math.h>
#include <stdlib.h>

#include "backend/sim_clock.h"
#include "util/clock.h"

static struct {
    int active;
    int world, tp, gpus_per_node;
    zt_hw_profile prof;
    int host_groups, device_groups; /* handed out so far */
} g;

struct zt_comm_req {
    unsigned long long ticket; /* on the comm lane; 0: nothing to wait for (a host comm's, done) */
};

typedef struct {
    int stride; /* world ranks between two ranks of the group */
    int device; /* NCCL's kind: collectives on the comm lane; else MPI's, on the calling thread */
} costed_impl;

/* the group's spread: ranks per node it has there, and nodes it spans */
static void spread(const zt_comm *c, int *per_node, int *nodes) {
    int stride = ((costed_impl *)c->impl)->stride, G = g.gpus_per_node;
    int k = stride <= G ? G / stride : 1;
    *per_node = k < c->world ? k : c->world;
    *nodes = (c->world + *per_node - 1) / *per_node;
}

/* the latency of the n - 1 hops of a ring over the group (hierarchical) */
static double hop_latency(const zt_comm *c) {
    int per_node, nodes;
    spread(c, &per_node, &nodes);
    return (per_node - 1) * g.prof.intra_lat_s + (nodes - 1) * g.prof.inter_lat_s;
}

static double bus_bandwidth(const zt_comm *c) {
    int per_node, nodes;
    spread(c, &per_node, &nodes);
    return nodes > 1 ? g.prof.inter_bw : g.prof.intra_bw;
}

/* a ring phase (reduce-scatter or all-gather) over S bytes: every rank sends (n-1)/n of S */
static double ring_phase(const zt_comm *c, double bytes) {
    if (c->world < 2) return 0;
    return (double)(c->world - 1) / c->world * bytes / bus_bandwidth(c) + hop_latency(c);
}

/* a host collective of a few scalars: ceil(log2 n) rounds at the latency of the links it crosses */
static double scalar_rounds(const zt_comm *c) {
    if (c->world < 2) return 0;
    int per_node, nodes;
    spread(c, &per_node, &nodes);
    return ceil(log2((double)c->world)) * (nodes > 1 ? g.prof.inter_lat_s : g.prof.intra_lat_s);
}

/* charges `seconds` of a collective named `name`: on the comm lane (device comms, a request to
 * wait on) or on the calling thread (host comms, done when the call returns) */
static zt_comm_req *charge(zt_comm *c, double seconds, const char *name) {
    zt_comm_req *r = zt_xcalloc(1, sizeof *r);
    if (((costed_impl *)c->impl)->device) r->ticket = zt_sim_comm_issue(seconds, name);
    else zt_clock_after(zt_clock_now() + seconds);
    return r;
}

static size_t total_of(const zt_comm *c, const size_t *counts) {
    size_t n = 0;
    for (int r = 0; r < c->world; r++) n += counts[r];
    return n;
}

/* This rank's traffic is counted as the group's mean per rank: every rank stands for every other, so
 * the pieces this one happens to hold (rank 0's, the larger where the flat shards cut a segment
 * unevenly) would say less than the mean the known formulas give. */
static void count_mean(zt_comm *c, int kind, double sent, double recv) {
    c->bytes.sent[kind] += sent;
    c->bytes.recv[kind] += recv;
}

static zt_comm_req *costed_allreduce(zt_comm *c, void *buf, size_t count, zt_dtype t) {
    double bytes = (double)count * zt_dtype_size(t);
    zt_comm_count_allreduce(c, ZT_COLL_ALLREDUCE, count * zt_dtype_size(t));
    return charge(c, 2 * ring_phase(c, bytes), "all-reduce");
}

/* a reduce-scatter or all-gather of S bytes in all: the mean rank sends and receives (n-1)/n S */
static zt_comm_req *ring_collective(zt_comm *c, int kind, const size_t *counts, zt_dtype t, const char *name) {
    double bytes = (double)total_of(c, counts) * zt_dtype_size(t), moved = bytes * (c->world - 1) / c->world;
    count_mean(c, kind, moved, moved);
    return charge(c, ring_phase(c, bytes), name);
}

static zt_comm_req *costed_reduce_scatter(zt_comm *c, const void *send, void *recv, const size_t *counts, zt_dtype t) {
    return ring_collective(c, ZT_COLL_REDUCE_SCATTER, counts, t, "reduce-scatter");
}

static zt_comm_req *costed_allgather(zt_comm *c, const void *send, void *recv, const size_t *counts, zt_dtype t) {
    return ring_collective(c, ZT_COLL_ALLGATHER, counts, t, "all-gather");
}

static zt_comm_req *costed_broadcast(zt_comm *c, void *buf, size_t bytes, int root) {
    /* the root sends S, the others receive it: the mean rank sends S/n and receives (n-1)/n S */
    count_mean(c, ZT_COLL_BROADCAST, (double)bytes / c->world, (double)bytes * (c->world - 1) / c->world);
    return charge(c, c->world < 2 ? 0 : (double)bytes / bus_bandwidth(c) + hop_latency(c), "broadcast");
}

static void costed_wait(zt_comm *c, zt_comm_req *r) {
    if (!r) return;
    if (r->ticket) zt_sim_comm_wait(r->ticket);
    free(r);
}

static void costed_barrier(zt_comm *c) { zt_clock_after(zt_clock_now() + scalar_rounds(c)); }

static void costed_allreduce_host_double(zt_comm *c, double *vals, int n) {
    zt_comm_count_allreduce(c, ZT_COLL_SCALAR, (size_t)n * sizeof(double));
    zt_clock_after(zt_clock_now() + scalar_rounds(c));
}

static int costed_agree_max(zt_comm *c, int status) {
    zt_comm_count_allreduce(c, ZT_COLL_SCALAR, sizeof(int));
    zt_clock_after(zt_clock_now() + scalar_rounds(c));
    return status; /* every rank does what this one does: the max is its own */
}

static void costed_destroy(zt_comm *c) {
    free(c->impl);
    free(c);
}

static int g_comm_lane; /* the one device queue every costed device comm runs on (zt_comm.order) */

static zt_comm *new_costed(const char *name, int world, int stride, int device) {
    zt_comm *c = zt_xcalloc(1, sizeof *c);
    costed_impl *m = zt_xcalloc(1, sizeof *m);
    m->stride = stride;
    m->device = device;
    c->name = name;
    c->rank = 0;
    c->world = world;
    c->impl = m;
    c->order = device ? &g_comm_lane : NULL;
    c->node_ranks = 1; /* the machine's host is divided among its ranks already (zt_sim_set_node_ranks) */
    c->allreduce_sum = costed_allreduce;
    c->reduce_scatter_sum = costed_reduce_scatter;
    c->allgather = costed_allgather;
    c->broadcast = costed_broadcast;
    c->wait = costed_wait;
    c->barrier = costed_barrier;
    c->allreduce_host_double = costed_allreduce_host_double;
    c->agree_max = costed_agree_max;
    c->destroy = costed_destroy;
    return c;
}

int zt_comm_costed_install(int world, int tp, const zt_hw_profile *prof, zt_err *err) {
    if (world < 1 || tp < 1 || world % tp)
        return zt_fail(err, "predict: --tp %d must divide --ranks %d", tp, world);
    g.active = 1;
    g.world = world, g.tp = tp, g.gpus_per_node = prof->gpus_per_node;
    g.prof = *prof;
    return 0;
}

int zt_comm_costed_active(void) { return g.active; }

zt_comm *zt_comm_costed_open(int split, int device, zt_err *err) {
    if (!split) return new_costed("costed", g.world, 1, device);
    /* the groups in the session's order: data-parallel, then tensor-parallel; device comms only
     * for the groups of more than one rank */
    int dp = g.world / g.tp, *handed = device ? &g.device_groups : &g.host_groups, which = *handed;
    if (device && dp == 1) which++; /* no data-parallel device comm to hand out first */
    if (which > 1 || (which == 1 && g.tp == 1)) {
        zt_fail(err, "predict --ranks: a group comm past the data-parallel and tensor-parallel ones was asked for "
                     "(the costed comm knows those two: engine/session.c opens them in that order)");
        return NULL;
    }
    (*handed)++;
    return which == 0 ? new_costed(device ? "costed data-parallel" : "costed data-parallel host", dp, g.tp, device)
                      : new_costed(device ? "costed tensor-parallel" : "costed tensor-parallel host", g.tp, 1, device);
}
