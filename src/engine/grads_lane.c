/* grads_lane.c — see grads_lane.h. Two threads per engine, started at open, take the queued pieces
 * in order: the down thread brings each into one of two staging buffers with the backend's D2H
 * transfer (its own stream, so it runs while backward's compute does), the add thread adds it into
 * the host gradients through the caller's hook, so one piece is added while the next comes down.
 * A piece's device source is free again once it is read (down), the host gradients hold it once it
 * has landed (added). Tickets count the pieces since the lane was last drained (drain starts them
 * from 0 again, so the bookkeeping is bounded by one step's pieces). On a virtual clock a piece comes
 * down no earlier than it was queued and its staging buffer was free, is added no earlier than it
 * came down, and a wait ends no earlier than what it waited for. */
#include "engine/grads_lane.h"

#include <pthread.h>
#include <stdlib.h>

#include "util/clock.h"

typedef struct grads_piece {
    const void *src;
    size_t off, n;
    int flags;
    double queued_at, read_at, landed_at;
} grads_piece;

struct grads_lane {
    engine_facts f;
    void *owner;
    grads_land_fn land;
    void *staging[GRADS_STAGING]; /* [max_elems] compute dtype each; piece i comes down into i % 2 */
    size_t max_elems;
    pthread_t down_thread, add_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    grads_piece *pieces; /* [cap], indexed by ticket */
    long cap, queued, read, landed;
    int stop;
};

/* waits, holding mu, until a stage has a piece to take: its next piece (*next) is below what the stage
 * before it has passed on (*ahead); 0 when the lane stops with nothing left. The counters are read
 * afresh each time: a drain starts them from 0 again. */
static int wait_for_piece(grads_lane *g, const long *next, const long *ahead) {
    while (*next >= *ahead && !(g->stop && *next >= g->queued)) pthread_cond_wait(&g->cv, &g->mu);
    return *next < *ahead;
}

static void *down_main(void *arg) {
    grads_lane *g = arg;
    size_t E = facts_esz(&g->f);
    zt_backend_bind_thread(g->f.be);
    pthread_mutex_lock(&g->mu);
    while (wait_for_piece(g, &g->read, &g->queued)) {
        long i = g->read;
        /* its staging buffer held piece i - 2: added by now */
        while (g->landed < i - (GRADS_STAGING - 1)) pthread_cond_wait(&g->cv, &g->mu);
        grads_piece p = g->pieces[i];
        double free_at = i >= GRADS_STAGING ? g->pieces[i - GRADS_STAGING].landed_at : 0;
        pthread_mutex_unlock(&g->mu);
        zt_clock_after(p.queued_at);
        zt_clock_after(free_at);
        double t0 = zt_clock_now();
        g->f.be->transfer(g->staging[i % GRADS_STAGING], p.src, p.n * E, ZT_D2H);
        double t1 = zt_clock_now();
        zt_trace_complete(*g->f.trace, ZT_LANE_D2H, "D2H grads (a reduced bucket)", t0, t1);
        pthread_mutex_lock(&g->mu);
        g->pieces[i].read_at = t1;
        g->read = i + 1;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

static void *add_main(void *arg) {
    grads_lane *g = arg;
    pthread_mutex_lock(&g->mu);
    while (wait_for_piece(g, &g->landed, &g->read)) {
        long i = g->landed;
        grads_piece p = g->pieces[i];
        pthread_mutex_unlock(&g->mu);
        zt_clock_after(p.read_at);
        double t0 = zt_clock_now();
        g->land(g->owner, p.off, g->staging[i % GRADS_STAGING], p.n, p.flags);
        double t1 = zt_clock_now();
        zt_trace_complete(*g->f.trace, ZT_LANE_HOST_ADAM, "grads added on the host", t0, t1);
        pthread_mutex_lock(&g->mu);
        g->pieces[i].landed_at = t1;
        g->landed = i + 1;
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
    for (int k = 0; k < GRADS_STAGING; k++) {
        g->staging[k] = facts_host_alloc(f, max_elems * facts_esz(f), f->off.pin_memory, ZT_MEM_COMM);
        if (!g->staging[k]) {
            for (int j = 0; j < k; j++) facts_host_free(f, g->staging[j], f->off.pin_memory);
            free(g);
            return NULL;
        }
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->down_thread, NULL, down_main, g) || pthread_create(&g->add_thread, NULL, add_main, g)) {
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
    pthread_join(g->down_thread, NULL);
    pthread_join(g->add_thread, NULL);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    for (int k = 0; k < GRADS_STAGING; k++) facts_host_free(&g->f, g->staging[k], g->f.off.pin_memory);
    free(g->pieces);
    free(g);
}

long grads_lane_push(grads_lane *g, const void *src, size_t off, size_t n, int flags) {
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
    g->pieces[ticket] = (grads_piece){src, off, n, flags, zt_clock_now(), 0, 0};
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return ticket;
}

void grads_lane_wait(grads_lane *g, long ticket, int landed, const char *what) {
    if (ticket < 0) return;
    const long *counter = landed ? &g->landed : &g->read;
    pthread_mutex_lock(&g->mu);
    double t0 = zt_clock_now();
    int waited = *counter <= ticket;
    while (*counter <= ticket) pthread_cond_wait(&g->cv, &g->mu);
    zt_clock_after(landed ? g->pieces[ticket].landed_at : g->pieces[ticket].read_at);
    pthread_mutex_unlock(&g->mu);
    double t1 = zt_clock_now();
    if (waited || t1 > t0) zt_trace_complete(*g->f.trace, ZT_LANE_MAIN, what, t0, t1);
}

void grads_lane_drain(grads_lane *g) {
    if (!g) return;
    grads_lane_wait(g, g->queued - 1, 1, "wait for the gradients to reach the host");
    pthread_mutex_lock(&g->mu);
    g->queued = g->read = g->landed = 0; /* nothing in flight: tickets start again */
    pthread_mutex_unlock(&g->mu);
}
