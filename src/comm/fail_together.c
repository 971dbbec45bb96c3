/* fail_together.c — see fail_together.h. Messages travel as doubles through allreduce_host_double
 * (only the sending rank contributes non-zero values), which every comm implements on host memory,
 * so this works the same over MPI and over the NCCL table's host side. */
#include "comm/fail_together.h"

#include <stdlib.h>
#include <string.h>

void zt_share_text(zt_comm *c, int root, char *text, size_t cap) {
    if (c->world == 1 || cap == 0) return;
    double *buf = zt_xcalloc(cap, sizeof *buf);
    if (c->rank == root)
        for (size_t i = 0; i < cap && text[i]; i++) buf[i] = (unsigned char)text[i];
    c->allreduce_host_double(c, buf, (int)cap);
    for (size_t i = 0; i < cap; i++) text[i] = (char)(int)buf[i];
    text[cap - 1] = 0;
    free(buf);
}

int zt_agree(zt_comm *c, int rc, zt_err *err) {
    if (c->world == 1) return rc ? -1 : 0;
    int failed_rank = rc ? c->rank : c->world;
    int lowest = c->world - c->agree_max(c, c->world - failed_rank);
    if (lowest == c->world) return 0;
    zt_err local = {{0}};
    if (err) local = *err;
    zt_share_text(c, lowest, local.msg, sizeof local.msg);
    if (err) *err = local;
    return -1;
}

int zt_fail_together(zt_comm *c, int rc, zt_err *err) {
    if (!zt_agree(c, rc, err)) return 0;
    if (c->rank == 0) zt_print_error(err);
    return 1;
}
