/* grads_lane.c — see grads_lane.h. One thread per engine, started at open: it takes the queued
 * pieces in order, brings each down into the staging buffer with the backend's D2H transfer (its own
 * stream, so it runs while backward's compute does) and adds it into the host gradients through the
 * caller's hook. Tickets count the pieces since the lane was last drained (drain starts them from 0
 * again, so the queue's bookkeeping is bounded by one step's pieces). On a virtual clock each piece
 * starts no earlier than it was queued, and a wait ends no earlier than the piece landed. */
#include "engine/grads_lane.h"

#include <pthread.h>
#include <stdlib.h>

#include "util/clock.h"

typedef struct grads_piece {
    const void *src;
    size_t off, n;
    double queued_at, landed_at;
} grads_piece;

struct grads_lane {
    engine_facts f;
    void *owner;
    grads_land_fn land;
    void *staging; /* [max_elems] compute dtype */
    size_t max_elems;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    grads_piece *pieces; /* [cap], indexed by ticket */
    long cap, queued, landed;
    int stop;
};

static void *lane_main(void *arg) {
    grads_lane *g = arg;
    size_t E = facts_esz(&g->f);
    zt_backend_bind_thread(g->f.be);
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (g->landed == g->queued && !g->stop) pthread_cond_wait(&g->cv, &g->mu);
        if (g->landed == g->queued) break; /* stopped, nothing left */
        grads_piece p = g->pieces[g->landed];
        pthread_mutex_unlock(&g->mu);
        zt_clock_after(p.queued_at);
        double t0 = zt_clock_now();
        g->f.be->transfer(g->staging, p.src, p.n * E, ZT_D2H);
        double t1 = zt_clock_now();
        zt_trace_complete(*g->f.trace, ZT_LANE_D2H, "D2H grads (a reduced bucket)", t0, t1);
        g->land(g->owner, p.off, g->staging, p.n);
        double t2 = zt_clock_now();
        zt_trace_complete(*g->f.trace, ZT_LANE_D2H, "grads added on the host", t1, t2);
        pthread_mutex_lock(&g->mu);
        g->pieces[g->landed++].landed_at = t2;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

grads_lane *grads_lane_open(const engine_facts *f, size_t max_elems, void *owner, grads_land_fn land) {
    grads_lane *g = zt_xcalloc(1, sizeof *g);
    g->f = *f;
    g->owner = owner;
    g->land = land;
    g->max_elems = max_elems;
    g->staging = facts_host_alloc(f, max_elems * facts_esz(f), f->off.pin_memory, ZT_MEM_COMM);
    if (!g->staging) {
        free(g);
        return NULL;
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->thread, NULL, lane_main, g)) {
        fprintf(stderr, "zerotrain: error: cannot start the gradient lane's host thread\n");
        abort();
    }
    return g;
}

void grads_lane_close(grads_lane *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    facts_host_free(&g->f, g->staging, g->f.off.pin_memory);
    free(g->pieces);
    free(g);
}

long grads_lane_push(grads_lane *g, const void *src, size_t off, size_t n) {
    if (n > g->max_elems) {
        fprintf(stderr, "zerotrain: error: a gradient piece of %zu elements exceeds the lane's staging buffer (%zu)\n", n,
                g->max_elems);
        abort();
    }
    pthread_mutex_lock(&g->mu);
    if (g->queued == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        g->pieces = zt_xrealloc(g->pieces, (size_t)g->cap * sizeof *g->pieces);
    }
    long ticket = g->queued++;
    g->pieces[ticket] = (grads_piece){src, off, n, zt_clock_now(), 0};
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return ticket;
}

void grads_lane_wait(grads_lane *g, long ticket, const char *what) {
    if (ticket < 0) return;
    pthread_mutex_lock(&g->mu);
    double t0 = zt_clock_now();
    int waited = g->landed <= ticket;
    while (g->landed <= ticket) pthread_cond_wait(&g->cv, &g->mu);
    zt_clock_after(g->pieces[ticket].landed_at);
    pthread_mutex_unlock(&g->mu);
    double t1 = zt_clock_now();
    if (waited || t1 > t0) zt_trace_complete(*g->f.trace, ZT_LANE_MAIN, what, t0, t1);
}

void grads_lane_drain(grads_lane *g) {
    if (!g) return;
    grads_lane_wait(g, g->queued - 1, "wait for the gradients to reach the host");
    pthread_mutex_lock(&g->mu);
    g->queued = g->landed = 0; /* nothing in flight: tickets start again */
    pthread_mutex_unlock(&g->mu);
}
