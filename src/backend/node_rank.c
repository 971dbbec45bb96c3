/* node_rank.c — this process's rank among the job's ranks on its machine (backend.h), which the
 * device backends choose their GPU by. It lives here, below the comm, so that the backends read it
 * without calling up a floor: comm_mpi.c tells it MPI's numbering once MPI has started
 * (zt_node_local_rank_set); before that, or without MPI, the launcher's variables say it. */
#include <stdlib.h>

#include "backend/backend.h"
#include "util/test_hooks.h"

static int g_node_local_rank = -1; /* MPI's numbering, once comm_mpi.c has set it */

/* the launchers' own numbering: Open MPI, Slurm, MPICH/Intel MPI, torchrun */
static int local_rank_from_env(void) {
    const char *names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *s = getenv(names[i]);
        if (s && *s && atoi(s) >= 0) return atoi(s);
    }
    return 0;
}

void zt_node_local_rank_set(int rank) { g_node_local_rank = rank; }

int zt_node_local_rank(void) {
    if (g_node_local_rank >= 0 && !zt_test_hook_local_rank_from_env()) return g_node_local_rank;
    return local_rank_from_env();
}
