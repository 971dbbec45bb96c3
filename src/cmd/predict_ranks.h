/* predict_ranks.h — `zerotrain predict --ranks N [--tp T]`'s part of predict (predict_ranks.c): the
 * layout one process stands for, installed before the run (the costed comms, this rank's share of
 * the node's host), and the report's lines about it. */
#ifndef ZT_PREDICT_RANKS_H
#define ZT_PREDICT_RANKS_H

#include <stdio.h>

#include "comm/comm.h"
#include "config/hw_profile.h"

typedef struct zt_predict_layout {
    int ranks, tp;         /* the world, and its tensor-parallel groups' size */
    int node_ranks, nodes; /* ranks sharing a node's host and fast links; nodes the world spans */
} zt_predict_layout;

/* Checks --ranks and --tp against each other and the profile and installs the layout: the costed
 * comms (comm.h: zt_comm_costed_install) when ranks > 1, and this rank's host share
 * (backend/sim_clock.h: zt_sim_set_node_ranks). -1 with err on a bad layout. */
int zt_predict_layout_install(zt_predict_layout *L, long ranks, long tp, int perform, const zt_hw_profile *hw,
                              zt_err *err);
/* sum += b, kind by kind (the mean of several steps' traffic) */
void zt_predict_comm_add(zt_comm_bytes *sum, const zt_comm_bytes *b);
/* The report's lines for several ranks: the layout, and this rank's traffic a step (mean over k
 * steps) on its data-parallel and tensor-parallel groups. Nothing for one rank. */
void zt_predict_ranks_report(FILE *f, const zt_predict_layout *L, const zt_comm_bytes *dp, const zt_comm_bytes *tp, int k);

#endif
