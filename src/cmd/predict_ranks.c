/* predict_ranks.c — see predict_ranks.h. One process stands for one rank of N: the ranks of a ZeRO
 * or tensor-parallel group do the same work, so this rank's schedule, memory and traffic are every
 * rank's, and the collectives are costed from the profile's network section (comm/comm_costed.c). */
#include "cmd/predict_ranks.h"

#include "backend/sim_clock.h"
#include "cmd/commands.h"

int zt_predict_layout_install(zt_predict_layout *L, long ranks, long tp, int perform, const zt_hw_profile *hw,
                              zt_err *err) {
    if (ranks < 1 || ranks > ZT_MAX_RANKS) return zt_fail(err, "predict: --ranks: expected a number of ranks in [1, %d]", ZT_MAX_RANKS);
    if (tp < 1 || tp > 64) return zt_fail(err, "predict: --tp: expected tensor-parallel ranks in [1, 64]");
    if (ranks % tp) return zt_fail(err, "predict: --tp %ld must divide --ranks %ld", tp, ranks);
    if (ranks > 1 && perform)
        return zt_fail(err, "predict: --perform takes one rank: one process standing for %ld ranks only costs their "
                            "work (the other ranks' data is not there to compute with)", ranks);
    L->ranks = (int)ranks, L->tp = (int)tp;
    L->node_ranks = L->ranks < hw->gpus_per_node ? L->ranks : hw->gpus_per_node;
    L->nodes = (L->ranks + hw->gpus_per_node - 1) / hw->gpus_per_node;
    if (ranks > 1 && zt_comm_costed_install(L->ranks, L->tp, hw, err)) return -1;
    zt_sim_set_node_ranks(L->node_ranks);
    return 0;
}

void zt_predict_comm_add(zt_comm_bytes *sum, const zt_comm_bytes *b) {
    for (int k = 0; k < ZT_COLL_NKIND; k++) sum->sent[k] += b->sent[k], sum->recv[k] += b->recv[k];
}

static void traffic(FILE *f, const char *group, int size, const zt_comm_bytes *b, int k) {
    fprintf(f, "    %-19s %10.3f MB sent a step (group of %d):", group, zt_comm_bytes_sent(b) / k * 1e-6, size);
    for (int c = 0; c < ZT_COLL_NKIND; c++) fprintf(f, " %s %.3f%s", zt_coll_names[c], b->sent[c] / k * 1e-6, c + 1 < ZT_COLL_NKIND ? "," : "\n");
}

void zt_predict_ranks_report(FILE *f, const zt_predict_layout *L, const zt_comm_bytes *dp, const zt_comm_bytes *tp, int k) {
    if (L->ranks < 2) return;
    fprintf(f, "  layout              %d ranks: data-parallel %d x tensor-parallel %d, %d per node, %d node%s "
               "(one rank predicted; every rank does its work)\n",
            L->ranks, L->ranks / L->tp, L->tp, L->node_ranks, L->nodes, L->nodes > 1 ? "s" : "");
    fprintf(f, "  comm, per rank (MB a step by kind):\n");
    traffic(f, "data-parallel", L->ranks / L->tp, dp, k);
    if (L->tp > 1) traffic(f, "tensor-parallel", L->tp, tp, k);
}
