/* comm_node.c — which ranks of a comm share this rank's machine: counted from host names through the
 * comm's host-side all-reduce, so it works the same for the MPI and the NCCL tables (for splitting
 * a machine's memory among the ranks that run on it). */
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
    double *hash = zt_xcalloc((size_t)c->world, sizeof *hash);
    double mine = host_name_hash();
    hash[c->rank] = mine;
    c->allreduce_host_double(c, hash, c->world); /* every other entry is 0: the sum is each rank's own */
    int n = 0;
    for (int r = 0; r < c->world; r++) n += hash[r] == mine;
    free(hash);
    return n > 0 ? n : 1;
}
