/* comm_node.c — which ranks of a comm share this rank's machine: counted from host names through the
 * comm's host-side all-reduce, so it works the same for the MPI and the NCCL tables (for splitting
 * a machine's memory among the ranks that run on it, and for checking that they opened distinct
 * devices). */
#include "comm/comm.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

/* FNV-1a of the host name, cut to 48 bits so that a double holds it exactly; never 0 */
static double host_name_hash(void) {
    char name[256] = {0};
    if (gethostname(name, sizeof name - 1) != 0) name[0] = 0;
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 1099511628211ull;
    return (double)((h >> 16) | 1);
}

int zt_comm_ranks_on_node(zt_comm *c) {
    if (c->world <= 1) return 1;
    if (c->node_ranks > 0) return c->node_ranks;
    double *hash = zt_xcalloc((size_t)c->world, sizeof *hash);
    double mine = host_name_hash();
    hash[c->rank] = mine;
    c->allreduce_host_double(c, hash, c->world); /* every other entry is 0: the sum is each rank's own */
    int n = 0;
    for (int r = 0; r < c->world; r++) n += hash[r] == mine;
    free(hash);
    return n > 0 ? n : 1;
}

int zt_comm_check_devices(zt_comm *c, int device, int device_count, zt_err *err) {
    if (c->world <= 1) return 0;
    /* per rank: its host's hash, its device + 1 (0 stays "not this rank's entry" in the sum) and its
     * machine's device count; every rank then judges every machine, so all agree */
    double *v = zt_xcalloc(3 * (size_t)c->world, sizeof *v);
    v[3 * c->rank] = host_name_hash();
    v[3 * c->rank + 1] = device + 1;
    v[3 * c->rank + 2] = device_count;
    c->allreduce_host_double(c, v, 3 * c->world);
    int rc = 0;
    for (int r = 0; r < c->world && !rc; r++) {
        int on_node = 0, twin = -1, count = (int)v[3 * r + 2];
        for (int q = 0; q < c->world; q++) {
            if (v[3 * q] != v[3 * r]) continue;
            on_node++;
            if (q < r && twin < 0 && v[3 * q + 1] == v[3 * r + 1]) twin = q;
        }
        if (twin >= 0 && count > 0 && on_node <= count)
            rc = zt_fail(err,
                         "ranks %d and %d both opened device %d of their machine, which has %d devices for its %d "
                         "ranks: each rank must open its own (the node-local rank from MPI_Comm_split_type, modulo "
                         "the device count)",
                         twin, r, (int)v[3 * r + 1] - 1, count, on_node);
    }
    free(v);
    return rc;
}
