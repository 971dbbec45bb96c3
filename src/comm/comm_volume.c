/* comm_volume.c — the nominal communication volume of each collective, added to the comm's byte
 * counters (formulas in comm.h): this rank's, and every rank's where the comm keeps them (the metrics
 * line's per-rank figures without a gather). Shared by every table, so all report alike. */
#include "comm/comm.h"

#include <stdlib.h>

const char *const zt_coll_names[ZT_COLL_NKIND] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                                  "scalar"};

void zt_comm_keep_rank_bytes(zt_comm *c) { c->rank_bytes = zt_xcalloc((size_t)c->world, sizeof *c->rank_bytes); }

/* The ranks whose counts a collective adds to: every rank where c keeps rank_bytes, else its own. */
static int first_counted(const zt_comm *c) { return c->rank_bytes ? 0 : c->rank; }
static int end_counted(const zt_comm *c) { return c->rank_bytes ? c->world : c->rank + 1; }

/* Rank r's part of one collective: into c->bytes when r is this rank, into rank_bytes[r] where kept.
 * Both get the same value by the same addition, so rank_bytes[r] on any rank equals rank r's bytes. */
static void add_volume(zt_comm *c, int kind, int r, double sent, double recv) {
    if (r == c->rank) {
        c->bytes.sent[kind] += sent;
        c->bytes.recv[kind] += recv;
    }
    if (c->rank_bytes) {
        c->rank_bytes[r].sent[kind] += sent;
        c->rank_bytes[r].recv[kind] += recv;
    }
}

void zt_comm_count_allreduce(zt_comm *c, int kind, size_t bytes) {
    int n = c->world;
    if (n < 2) return;
    double v = 2.0 * (n - 1) / n * (double)bytes;
    for (int r = first_counted(c); r < end_counted(c); r++) add_volume(c, kind, r, v, v);
}

static double sum_counts(const zt_comm *c, const size_t *counts) {
    double t = 0;
    for (int r = 0; r < c->world; r++) t += (double)counts[r];
    return t;
}

void zt_comm_count_reduce_scatter(zt_comm *c, const size_t *counts, size_t esz) {
    if (c->world < 2) return;
    double total = sum_counts(c, counts);
    for (int r = first_counted(c); r < end_counted(c); r++) {
        double piece = (double)counts[r];
        add_volume(c, ZT_COLL_REDUCE_SCATTER, r, (total - piece) * (double)esz, (c->world - 1) * piece * (double)esz);
    }
}

void zt_comm_count_allgather(zt_comm *c, const size_t *counts, size_t esz) {
    if (c->world < 2) return;
    double total = sum_counts(c, counts);
    for (int r = first_counted(c); r < end_counted(c); r++) {
        double piece = (double)counts[r];
        add_volume(c, ZT_COLL_ALLGATHER, r, (c->world - 1) * piece * (double)esz, (total - piece) * (double)esz);
    }
}

void zt_comm_count_broadcast(zt_comm *c, size_t bytes, int root) {
    if (c->world < 2) return;
    for (int r = first_counted(c); r < end_counted(c); r++)
        add_volume(c, ZT_COLL_BROADCAST, r, r == root ? (double)bytes : 0.0, r == root ? 0.0 : (double)bytes);
}

double zt_comm_bytes_sent(const zt_comm_bytes *b) {
    double t = 0;
    for (int k = 0; k < ZT_COLL_NKIND; k++)
        if (k != ZT_COLL_SCALAR) t += b->sent[k];
    return t;
}

double zt_comm_bytes_recv(const zt_comm_bytes *b) {
    double t = 0;
    for (int k = 0; k < ZT_COLL_NKIND; k++)
        if (k != ZT_COLL_SCALAR) t += b->recv[k];
    return t;
}

zt_comm_bytes zt_comm_bytes_since(const zt_comm_bytes *now, const zt_comm_bytes *before) {
    zt_comm_bytes d;
    for (int k = 0; k < ZT_COLL_NKIND; k++) {
        d.sent[k] = now->sent[k] - before->sent[k];
        d.recv[k] = now->recv[k] - before->recv[k];
    }
    return d;
}

zt_comm_bytes *zt_comm_bytes_gather(zt_comm *c, const zt_comm_bytes *b) {
    zt_comm_bytes *all = zt_xcalloc((size_t)c->world, sizeof *all);
    all[c->rank] = *b;
    /* a sum where every other rank contributes zeros: an all-gather through the host all-reduce */
    c->allreduce_host_double(c, (double *)all, (int)(c->world * sizeof *all / sizeof(double)));
    return all;
}

static void json_kinds(FILE *f, const char *key, const zt_comm_bytes *all, int world, int sent) {
    fprintf(f, ", \"%s\": {", key);
    for (int k = 0; k < ZT_COLL_NKIND; k++) {
        fprintf(f, "%s\"%s\": [", k ? ", " : "", zt_coll_names[k]);
        for (int r = 0; r < world; r++) fprintf(f, "%s%.0f", r ? ", " : "", sent ? all[r].sent[k] : all[r].recv[k]);
        fprintf(f, "]");
    }
    fprintf(f, "}");
}

void zt_comm_bytes_json(FILE *f, const char *prefix, const zt_comm_bytes *per_rank, int world) {
    char key[64];
    snprintf(key, sizeof key, "%s_sent_bytes", prefix);
    json_kinds(f, key, per_rank, world, 1);
    snprintf(key, sizeof key, "%s_recv_bytes", prefix);
    json_kinds(f, key, per_rank, world, 0);
}

void zt_comm_bytes_print(const zt_comm_bytes *b) {
    zt_info("      comm (MB sent/received by rank %d): all-reduce %.3f/%.3f | reduce-scatter %.3f/%.3f | "
            "all-gather %.3f/%.3f | broadcast %.3f/%.3f | scalars %.6f/%.6f",
            zt_log_rank(), b->sent[0] * 1e-6, b->recv[0] * 1e-6, b->sent[1] * 1e-6, b->recv[1] * 1e-6,
            b->sent[2] * 1e-6, b->recv[2] * 1e-6, b->sent[3] * 1e-6, b->recv[3] * 1e-6, b->sent[4] * 1e-6,
            b->recv[4] * 1e-6);
}
