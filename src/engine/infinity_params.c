/* infinity_params.c — ZeRO-Infinity's parameters on NVMe (offload_param.device: nvme, stage 3):
 * this rank's shard in the compute dtype lives in one swap file (io/swap.h); a segment's piece of
 * it comes up into one of offload_param.buffer_count host staging buffers when the segment is
 * gathered (start_gather in zero_comm.c), and the update writes the new values back.
 *
 * Read-ahead: when a segment's piece is fetched, the pieces of the segments predicted to be gathered
 * next are read into the other staging buffers at once, so their reads run while the device computes
 * with this one; their fetch then only waits for what is left of the read. The prediction is learned
 * from the order of the gathers themselves: after the pair (previous, current) came `next` last time
 * (the step boundary, where the update writes the file, is one more symbol in that sequence). Until
 * a pair has been seen, the guess is the next segment in the direction of the last move (up at the
 * start: forward goes up the segments, backward down). Nothing of this knows what a segment holds.
 *
 * A wrong guess costs only time: a fetch uses a buffer only if it holds (or is reading) that very
 * piece, read after the file's last write; otherwise it reads the piece now. Every write to the file
 * (the update, a checkpoint load, initialisation) first completes and drops every read in flight or
 * done, and reads ahead never cross the step boundary (the update comes first). A buffer handed out
 * by a fetch is only read by the H2D copy that follows, which returns once the buffer may be reused
 * (backend.h), so the next fetch may read into it again. Only the engine's main thread comes here.
 * A failed read, or one whose checksum does not match what was written (io/swap.h), ends the job
 * with the swap's one-line error, naming the step, wherever it is waited for: a corrupted piece is
 * never gathered. The state (struct inf_params) is this file's; the engine hands it the shared facts,
 * and with each request the step it belongs to. */
#include <stdlib.h>
#include <string.h>

#include "engine/infinity.h"

#include "io/swap.h"
#include "util/test_hooks.h"
#include "util/clock.h"

typedef struct param_buf {
    char *buf;
    int seg;        /* segment whose piece it holds or is reading; -1: nothing valid */
    size_t first;   /* file byte where buf starts (the piece's first byte rounded down to a block) */
    int ticket;     /* read in flight, -1 when none */
    int ahead;      /* the read was issued ahead of the segment's gather */
    long used;      /* fetch clock when last filled or handed out (the oldest is reused first) */
} param_buf;

struct inf_params {
    engine_facts f;
    zt_swap *swap;
    int nbuf;
    size_t buf_bytes;
    param_buf *b;
    int current;    /* buffer handed out by the last fetch, -1 none */
    int n_sym;      /* n_segments + 1: the last symbol is the step boundary */
    int *next;      /* [n_sym * n_sym]: what followed the pair (prev, cur) last time; -1 unknown */
    int prev, cur;  /* the last two symbols */
    long clock;
    long pieces, issued_ahead, hits; /* fetches; reads issued ahead; fetches that found theirs issued ahead */
    double wait_seconds;             /* fetches waiting for their read */
};

#define BOUNDARY(r) ((r)->n_sym - 1)

static size_t esz(const inf_params *r) { return facts_esz(&r->f); }
static size_t seg_lo(const inf_params *r, int s) { return r->f.table->segment_lo[s]; }
static size_t seg_hi(const inf_params *r, int s) { return r->f.table->segment_lo[s + 1]; }

/* this rank's piece of segment s as file bytes [*lo, *hi); 0 when it has none */
static int piece_bytes(const inf_params *r, int s, size_t *lo, size_t *hi) {
    size_t a = max_sz(seg_lo(r, s), r->f.lay.lo), b = min_sz(seg_hi(r, s), r->f.lay.hi);
    if (b <= a) return 0;
    *lo = (a - r->f.lay.lo) * esz(r);
    *hi = (b - r->f.lay.lo) * esz(r);
    return 1;
}

inf_params *inf_params_open(const engine_facts *f, zt_err *err) {
    inf_params *r = zt_xcalloc(1, sizeof *r);
    r->f = *f;
    size_t E = esz(r), piece = 0;
    for (int s = 0; s < r->f.table->n_segments; s++) {
        size_t a = max_sz(seg_lo(r, s), r->f.lay.lo), b = min_sz(seg_hi(r, s), r->f.lay.hi);
        if (b > a) piece = max_sz(piece, b - a);
    }
    if ((double)piece > r->f.off.param_buffer_size) {
        zt_fail(err, "zero_optimization.offload_param.buffer_size %.0f is smaller than the largest piece of a "
                     "segment this rank holds, %zu elements (the embeddings' or a block's share of the shard)",
                r->f.off.param_buffer_size, piece);
        inf_params_close(r);
        return NULL;
    }
    zt_swap_opts so = {r->f.off.aio_block_size, r->f.off.aio_queue_depth, r->f.off.aio_single_submit,
                       r->f.off.aio_overlap_events, !zt_test_hook_no_prealloc()};
    zt_err why;
    size_t bytes = zt_swap_round(r->f.lay.shard * E);
    r->swap = zt_swap_open(r->f.off.param_nvme_path, "params", r->f.lay.rank, bytes, &so, &why);
    if (!r->swap) {
        zt_fail(err, "zero_optimization.offload_param.nvme_path: %s", why.msg);
        inf_params_close(r);
        return NULL;
    }
    r->f.mem->nvme[ZT_MEM_PARAMS] += bytes;
    r->f.mem->host[ZT_MEM_PARAMS] += zt_swap_checksum_bytes(r->swap);
    r->nbuf = r->f.off.param_buffer_count >= 1 ? r->f.off.param_buffer_count : 5;
    /* a piece may start and end anywhere in a block: one block more on each side */
    r->buf_bytes = zt_swap_round(piece * E) + 2 * ZT_SWAP_ALIGN;
    r->b = zt_xcalloc((size_t)r->nbuf, sizeof *r->b);
    for (int i = 0; i < r->nbuf; i++) {
        r->b[i] = (param_buf){zt_swap_buffer_alloc(r->buf_bytes), -1, 0, -1, 0, 0};
        r->f.mem->host[ZT_MEM_PARAMS] += r->buf_bytes;
    }
    r->current = -1;
    r->n_sym = r->f.table->n_segments + 1;
    r->next = zt_xmalloc((size_t)r->n_sym * (size_t)r->n_sym * sizeof *r->next);
    for (size_t i = 0; i < (size_t)r->n_sym * (size_t)r->n_sym; i++) r->next[i] = -1;
    r->prev = r->cur = BOUNDARY(r); /* the start is like the end of an update */
    zt_info("zero-infinity: rank %d keeps its %zu parameters in %s (%s, %.1f MiB), %d staging buffers of %.1f MiB "
            "(the next pieces read ahead)", r->f.lay.rank, r->f.lay.hi - r->f.lay.lo, zt_swap_path(r->swap),
            zt_swap_is_direct(r->swap) ? "O_DIRECT" : "buffered: the file system refuses O_DIRECT",
            bytes / 1048576.0, r->nbuf, r->buf_bytes / 1048576.0);
    return r;
}

static void wait_buf(inf_params *r, param_buf *b) {
    zt_err err;
    if (b->ticket >= 0 && zt_swap_wait(r->swap, b->ticket, &err)) inf_swap_failed(&err);
    b->ticket = -1;
}

/* completes every read in flight and forgets what the buffers hold (before the file is written) */
static void drop_all(inf_params *r) {
    for (int i = 0; i < r->nbuf; i++) {
        wait_buf(r, &r->b[i]);
        r->b[i].seg = -1;
    }
    r->current = -1;
}

void inf_params_close(inf_params *r) {
    if (!r) return;
    if (r->swap) drop_all(r); /* the kernel may still be writing into the buffers */
    for (int i = 0; i < r->nbuf; i++) zt_swap_buffer_free(r->b[i].buf);
    free(r->b);
    free(r->next);
    if (r->swap) {
        zt_err ignored;
        zt_swap_wait_all(r->swap, &ignored);
        zt_swap_close(r->swap, 1);
    }
    free(r);
}

/* ---------------------------------------------------------------- synchronous access */

/* Reads the aligned blocks covering bytes [lo, hi) of the file (at most one buffer's worth) into
 * buffer 0 and returns where byte lo landed; *first is the file byte the buffer starts at. */
static char *read_blocks(inf_params *r, size_t lo, size_t hi, size_t *first) {
    zt_err err;
    size_t a = lo / ZT_SWAP_ALIGN * ZT_SWAP_ALIGN, b = min_sz(zt_swap_round(hi), a + r->buf_bytes);
    if (zt_swap_wait(r->swap, zt_swap_read(r->swap, a, r->b[0].buf, b - a), &err)) inf_swap_failed(&err);
    *first = a;
    return r->b[0].buf + (lo - a);
}

/* Outside the gathers (initialisation, the update's write-back, checkpoint loads): through buffer 0,
 * after every read ahead is dropped, since what it read may be about to change. */
void inf_params_rw(inf_params *r, long step, size_t off, size_t n, void *buf, int write) {
    zt_err err;
    inf_swap_at_step(r->swap, step); /* the update's write-back, a checkpoint, the start */
    drop_all(r);
    size_t E = esz(r), lo = off * E, hi = (off + n) * E;
    char *p = buf;
    while (lo < hi) {
        size_t first;
        char *at_lo = read_blocks(r, lo, hi, &first);
        size_t k = min_sz(hi - lo, first + r->buf_bytes - lo);
        if (write) {
            if (!zt_clock_costs_only()) memcpy(at_lo, p, k); /* predict: the I/O is costed, nothing moves */
            size_t len = zt_swap_round(lo + k) - first;
            if (zt_swap_wait(r->swap, zt_swap_write(r->swap, first, r->b[0].buf, len), &err))
                inf_swap_failed(&err);
        } else if (!zt_clock_costs_only()) {
            memcpy(p, at_lo, k);
        }
        lo += k, p += k;
    }
}

/* ---------------------------------------------------------------- gathers and read-ahead */

/* the symbol guessed to follow (prev, cur) when that pair has not been seen: the neighbour in the
 * direction of the last move (up after the boundary), if this rank has a piece of it; -1 if none */
static int guess(const inf_params *r, int prev, int cur) {
    if (cur == BOUNDARY(r) || prev == cur) return -1;
    int x = prev == BOUNDARY(r) || cur > prev ? cur + 1 : cur - 1;
    size_t lo, hi;
    return x >= 0 && x < r->f.table->n_segments && piece_bytes(r, x, &lo, &hi) ? x : -1;
}

/* Up to nbuf - 1 segments (other than the current one) predicted to be fetched next, in order,
 * stopping at the step boundary; returns how many. */
static int predict(const inf_params *r, int *out) {
    int n = 0, prev = r->prev, cur = r->cur;
    for (int steps = 0; steps < 2 * r->n_sym && n < r->nbuf - 1; steps++) {
        int x = r->next[(size_t)prev * (size_t)r->n_sym + (size_t)cur];
        if (x < 0) x = guess(r, prev, cur);
        if (x < 0 || x == BOUNDARY(r)) break;
        int seen = x == r->cur;
        for (int i = 0; i < n; i++) seen |= out[i] == x;
        if (!seen) out[n++] = x;
        prev = cur, cur = x;
    }
    return n;
}

/* symbol s happened: learned as what follows the last pair */
static void learn(inf_params *r, int s) {
    r->next[(size_t)r->prev * (size_t)r->n_sym + (size_t)r->cur] = s;
    r->prev = r->cur;
    r->cur = s;
}

static int holding(const inf_params *r, int seg) {
    for (int i = 0; i < r->nbuf; i++)
        if (r->b[i].seg == seg) return i;
    return -1;
}

/* a buffer to read a new piece into: not the one handed out, not one holding a wanted segment;
 * empty first, then the least recently used with no read in flight, then one still reading (its
 * read is waited for: a wrong guess) */
static int victim(const inf_params *r, const int *wanted, int n_wanted) {
    int best = -1, best_rank = 0;
    for (int i = 0; i < r->nbuf; i++) {
        const param_buf *b = &r->b[i];
        int keep = i == r->current;
        for (int w = 0; w < n_wanted; w++) keep |= b->seg == wanted[w];
        if (keep) continue;
        int rank = b->seg < 0 ? 0 : b->ticket < 0 ? 1 : 2;
        if (best < 0 || rank < best_rank || (rank == best_rank && b->used < r->b[best].used)) best = i, best_rank = rank;
    }
    return best;
}

static void issue(inf_params *r, int i, int seg, int ahead) {
    param_buf *b = &r->b[i];
    size_t lo = 0, hi = 0;
    piece_bytes(r, seg, &lo, &hi);
    wait_buf(r, b); /* a read still landing in it (a wrong guess) */
    b->seg = seg;
    b->first = lo / ZT_SWAP_ALIGN * ZT_SWAP_ALIGN;
    b->ticket = zt_swap_read(r->swap, b->first, b->buf, zt_swap_round(hi) - b->first);
    b->ahead = ahead;
    b->used = ++r->clock;
    if (ahead) r->issued_ahead++;
}

/* reads the predicted pieces that no buffer holds yet */
static void read_ahead(inf_params *r) {
    int want[r->nbuf > 1 ? r->nbuf - 1 : 1];
    int n = predict(r, want);
    for (int w = 0; w < n; w++) {
        if (holding(r, want[w]) >= 0) continue;
        int i = victim(r, want, n);
        if (i < 0) break;
        issue(r, i, want[w], 1);
    }
}

const void *inf_params_fetch(inf_params *r, long step, int seg) {
    size_t lo, hi;
    if (!piece_bytes(r, seg, &lo, &hi)) return NULL;
    inf_swap_at_step(r->swap, step); /* training: the step under way */
    learn(r, seg);
    r->current = -1; /* its H2D copy has returned: the buffer may be read into again */
    int i = holding(r, seg);
    if (i >= 0 && r->b[i].ahead) r->hits++;
    if (i < 0) { /* not guessed: read now, then the guesses from here */
        int want[r->nbuf > 1 ? r->nbuf - 1 : 1];
        int n = predict(r, want);
        i = victim(r, want, n);
        issue(r, i, seg, 0);
    }
    r->current = i;
    r->b[i].used = ++r->clock;
    r->b[i].ahead = 0; /* a later fetch of the same piece from here is no read-ahead */
    read_ahead(r);
    double t0 = zt_clock_now();
    wait_buf(r, &r->b[i]);
    double t1 = zt_clock_now();
    r->pieces++;
    r->wait_seconds += t1 - t0;
    if (t1 - t0 > 1e-5) zt_trace_complete(*r->f.trace, ZT_LANE_MAIN, "param NVMe read wait", t0, t1);
    return r->b[i].buf + (lo - r->b[i].first);
}

void inf_params_after_update(inf_params *r) {
    learn(r, BOUNDARY(r));
    r->current = -1;
    read_ahead(r);
}

void inf_params_stats(const inf_params *r, zt_engine_nvme *out) {
    if (!r) return;
    inf_swap_stats(r->swap, out);
    out->param_pieces = (double)r->pieces;
    out->param_read_ahead = (double)r->issued_ahead;
    out->param_hits = (double)r->hits;
    out->param_wait_seconds = r->wait_seconds;
}
