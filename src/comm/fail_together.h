/* fail_together.h — the one way ranks agree on a failure: every step that can fail on some ranks
 * only is followed by zt_agree (or zt_fail_together, which also prints), so a failure on any rank
 * is seen by every rank and no rank waits forever in a collective the others never reach. Over a
 * group comm (comm.h: zt_comm_mpi_group) "every rank" is the group's: other groups learn nothing. */
#ifndef ZT_FAIL_TOGETHER_H
#define ZT_FAIL_TOGETHER_H

#include <stddef.h>

#include "comm/comm.h"
#include "util/util.h"

/* Collective. 0 when rc is 0 on every rank; otherwise -1 on every rank, and err on every rank holds
 * the message of the lowest failing rank (the ranks that did not fail learn what happened). */
int zt_agree(zt_comm *c, int rc, zt_err *err);

/* zt_agree, then rank 0 prints the agreed message (one line for the whole job). Returns 1 when any
 * rank failed, 0 otherwise. */
int zt_fail_together(zt_comm *c, int rc, zt_err *err);

/* Collective: every rank's text (cap bytes, NUL-terminated) becomes root's. */
void zt_share_text(zt_comm *c, int root, char *text, size_t cap);

#endif
