/* calibrate.c — `zerotrain calibrate [-o FILE] [--dir DIR] [--tp T]`: measures this machine as the simulated
 * GPU executes on it and writes a hardware profile (config/hw_profile.h, the shape of the files in configs/hw/)
 * whose every key says what was measured, how, and when. With it, `predict --hw FILE` prices a step
 * as the simulated GPU's real lanes would run it here, which is what `make bench`'s model check
 * (test/bench_predict.py) sets against measured step times.
 *
 * What is measured, each as the engine meets it:
 *   - the sim's compute lane (a real thread running the CPU backend's math on widened 16-bit
 *     tensors): GEMMs of square shapes, as a peak and an efficiency curve by size, and GEMMs with
 *     one dimension GPT-2's vocabulary long (the LM head's shapes) as two more curves; attention at its
 *     FLOPs; element-wise ops as the bytes the sim charges for them; the host time to queue an item
 *     (launch), the shortest item, and the extra a blocking synchronize costs (the lane's handoff);
 *   - the sim's copy lanes (real memcpys on their own threads): "PCIe" bandwidth and latency per
 *     direction from host_alloc (pinned) and malloc (pageable) memory;
 *   - the host: memory, cores, one thread's memcpy, every core's memcpy together, CPU AdamW per core;
 *   - the disk under --dir (default .): sequential write and read in 4 MiB requests, O_DIRECT
 *     where the file system takes it (as the NVMe swap does), and a 4 KiB read's latency.
 * Each figure is the median of several timed batches, so one slow moment on a shared machine does
 * not set it. Work done on this machine's cores is timed in CPU time (the process's, or the calling
 * thread's for what only it does), the disk in wall time: what a core spends on an item is what it
 * takes on an idle machine, and it does not grow when other processes share the cores, where wall
 * time would carry their load into the profile (on a 2-core machine shared with a dozen runnable
 * threads, tight loops ran 1.6x and training steps 4x slower by the wall clock than by CPU time). Collectives are not measured (one process): the network keys are derived from the host
 * copy rate and say so. The whole calibration takes well under a minute.
 *
 * --tp T: the profile of one rank of a tensor-parallel group of T on this machine, for `predict --ranks
 * T --tp T`: the real step (calibrate_step.c) runs as T processes at once at tp_size T, so its rates
 * are what a rank's ops cost beside the other ranks, and the profile says the machine is one node of
 * T GPUs (predict shares the host among them as the ranks share it). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "cmd/help.h"
#include "backend/cpu_adam.h"
#include "cmd/calibrate_step.h"
#include "cmd/commands.h"
#include "util/util.h"

#define BATCHES 5

/* one timed thing: run(ctx) does `reps` of it and returns when they are complete */
typedef void (*timed_fn)(void *ctx, int reps);

/* the clocks a figure is timed on (see the opening comment) */
typedef enum { ON_WALL, ON_PROCESS_CPU, ON_THREAD_CPU } on_clock;
static double clock_read(on_clock c) {
    if (c == ON_WALL) return zt_now();
    struct timespec ts;
    clock_gettime(c == ON_PROCESS_CPU ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* seconds per repetition: one warm-up, then BATCHES batches sized to take about min_s each; the median */
static double per_rep(timed_fn run, void *ctx, double min_s, on_clock clock) {
    double t0 = clock_read(clock);
    run(ctx, 1);
    double one = clock_read(clock) - t0;
    int reps = one > 0 ? (int)(min_s / one) : 1000;
    if (reps < 1) reps = 1;
    if (reps > 1000) reps = 1000;
    double s[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        t0 = clock_read(clock);
        run(ctx, reps);
        s[b] = (clock_read(clock) - t0) / reps;
    }
    qsort(s, BATCHES, sizeof s[0], cmp_double);
    return s[BATCHES / 2];
}

/* seconds per repetition that `slow` takes beyond `fast` (the same work, waited for differently), on
 * the wall clock: batches of each taken in turn, so that a change in the machine's load falls on both;
 * the median of BATCHES differences */
static double extra_per_rep(timed_fn slow, timed_fn fast, void *ctx, double min_s) {
    double t0 = zt_now();
    slow(ctx, 1);
    double one = zt_now() - t0;
    int reps = one > 0 ? (int)(min_s / one) : 1000;
    reps = reps < 1 ? 1 : reps > 1000 ? 1000 : reps;
    double d[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        t0 = zt_now();
        slow(ctx, reps);
        double t1 = zt_now();
        fast(ctx, reps);
        d[b] = ((t1 - t0) - (zt_now() - t1)) / reps;
    }
    qsort(d, BATCHES, sizeof d[0], cmp_double);
    return d[BATCHES / 2];
}

/* ---------------------------------------------------------------- the simulated GPU's lanes */

typedef struct sim_op {
    const zt_backend *be;
    void *a, *b, *c, *host;
    int n, sq, B, T, C, NH;
    int M, N, K, lda, ldb, ldc, tb; /* a GEMM of any shape (run_gemm_shape) */
    size_t bytes;
    zt_copy_kind kind;
} sim_op;

static void run_gemm(void *ctx, int reps) {
    sim_op *o = ctx;
    for (int r = 0; r < reps; r++) o->be->gemm(o->c, o->a, o->b, o->sq, o->sq, o->sq, o->sq, o->sq, o->sq, 0, 0, 0.0f);
    o->be->synchronize();
}
static void run_gemm_shape(void *ctx, int reps) {
    sim_op *o = ctx;
    for (int r = 0; r < reps; r++) o->be->gemm(o->c, o->a, o->b, o->M, o->N, o->K, o->lda, o->ldb, o->ldc, 0, o->tb, 0.0f);
    o->be->synchronize();
}
static void run_dw_long(void *ctx, int reps) { /* matmul_backward's dW alone, w stored [L, s] as the LM head's wte */
    sim_op *o = ctx;
    for (int r = 0; r < reps; r++) o->be->matmul_backward(NULL, o->c, NULL, o->a, o->b, o->host, o->M, o->K, o->N, 1, o->N);
    o->be->synchronize();
}
static void run_gemm_synced(void *ctx, int reps) { /* each GEMM waited for before the next is queued */
    sim_op *o = ctx;
    for (int r = 0; r < reps; r++) {
        o->be->gemm(o->c, o->a, o->b, o->sq, o->sq, o->sq, o->sq, o->sq, o->sq, 0, 0, 0.0f);
        o->be->synchronize();
    }
}
static void run_pointwise(void *ctx, int reps) { /* residual (4 E(n) charged), gelu (3 E(n)), scale (2 E(n)) */
    sim_op *o = ctx;
    for (int r = 0; r < reps; r++) {
        o->be->residual_forward(o->c, o->a, o->b, (size_t)o->n);
        o->be->gelu_forward(o->b, o->c, (size_t)o->n);
        o->be->scale(o->a, 1.0f, (size_t)o->n);
    }
    o->be->synchronize();
}
static void run_embedding(void *ctx, int reps) { /* one token's row: the work is nothing, the operands are wte */
    sim_op *o = ctx;
    for (int r = 0; r < reps; r++) o->be->embedding_forward(o->c, o->host, o->a, 0, o->n, o->b, 1, 1, o->C);
    o->be->synchronize();
}
static void run_embedding_grad(void *ctx, int reps) { /* one token's row into dwte: widened and rounded back whole */
    sim_op *o = ctx;
    for (int r = 0; r < reps; r++) o->be->embedding_backward(o->a, 0, o->n, NULL, o->c, o->host, 1, 1, o->C);
    o->be->synchronize();
}
static void run_xent(void *ctx, int reps) { /* a: logits, b: dlogits, c: losses, host: targets (B rows of n) */
    sim_op *o = ctx;
    for (int r = 0; r < reps; r++) o->be->softmax_xent(o->c, o->b, o->a, o->host, o->B, o->n, o->n, 1.0f);
    o->be->synchronize();
}
static void run_attention(void *ctx, int reps) {
    sim_op *o = ctx;
    for (int r = 0; r < reps; r++) o->be->attention_forward(o->c, o->b, o->a, o->B, o->T, o->C, o->NH);
    o->be->synchronize();
}
static void run_queue_only(void *ctx, int reps) { /* the host's side of a launch: queueing, no wait */
    sim_op *o = ctx;
    for (int r = 0; r < reps; r++) o->be->scale(o->a, 1.0f, 1);
}
static void run_tiny_items(void *ctx, int reps) { /* the lane's side: items back to back */
    sim_op *o = ctx;
    for (int r = 0; r < reps; r++) o->be->scale(o->a, 1.0f, 1);
    o->be->synchronize();
}
static void run_tiny_synced(void *ctx, int reps) { /* each item waited for: launch + item + the handoff */
    sim_op *o = ctx;
    for (int r = 0; r < reps; r++) {
        o->be->scale(o->a, 1.0f, 1);
        o->be->synchronize();
    }
}
static void run_transfer(void *ctx, int reps) {
    sim_op *o = ctx;
    for (int r = 0; r < reps; r++)
        o->be->transfer(o->kind == ZT_H2D ? o->a : o->host, o->kind == ZT_H2D ? o->host : o->a, o->bytes, o->kind);
}
static void run_copy(void *ctx, int reps) { /* pageable: the blocking copy, the one that may take malloc memory */
    sim_op *o = ctx;
    for (int r = 0; r < reps; r++)
        o->be->copy(o->kind == ZT_H2D ? o->a : o->host, o->kind == ZT_H2D ? o->host : o->a, o->bytes, o->kind);
}

typedef struct measured {
    char when[32], cpu[128];
    double dev_mem, dev_bw, xent_bw, operand_bw, round_bw, launch, kernel_min, sync, handoff, attn[2];
    int ngemm;
    double gemm_size[8], gemm_rate[2][8], gemm_peak[2];
    double long_rate[3][2][8]; /* [long_out, long_k, long_rows][dtype][size]: the long-GEMM curves (LONG_SIZES) */
    double pcie_bw[2][2], pcie_lat; /* [kind][pinned] */
    double host_mem, host_bw, memcpy_bw, adam_per_core;
    int cores;
    double disk_read, disk_write, disk_lat;
    int disk_direct;
} measured;

/* t less the time the sim spends reading `widened` bytes of operands whole (widening them) and
 * rounding `rounded` bytes of them back, which the profile prices apart (device.operand_gbs,
 * device.round_gbs); at least a tenth of t */
static double less_operands(const measured *m, double t, double widened, double rounded) {
    return fmax(t - widened / m->operand_bw - rounded / m->round_bw, 0.1 * t);
}

static void measure_gemms(const zt_backend *be, int dt_index, measured *m) {
    static const int sizes[] = {32, 64, 128, 256, 384, 512, 768};
    m->ngemm = (int)(sizeof sizes / sizeof sizes[0]);
    size_t es = zt_dtype_size(be->compute_dtype), most = (size_t)768 * 768 * es;
    sim_op o = {.be = be, .a = be->alloc(most), .b = be->alloc(most), .c = be->alloc(most)};
    for (int i = 0; i < m->ngemm; i++) {
        o.sq = sizes[i];
        double c_bytes = (double)sizes[i] * sizes[i] * (double)es; /* a, b and c widened, c rounded */
        double s = less_operands(m, per_rep(run_gemm, &o, 0.15, ON_PROCESS_CPU), 3.0 * c_bytes, c_bytes);
        m->gemm_size[i] = sizes[i];
        m->gemm_rate[dt_index][i] = 2.0 * sizes[i] * sizes[i] * (double)sizes[i] / s;
        if (m->gemm_rate[dt_index][i] > m->gemm_peak[dt_index]) m->gemm_peak[dt_index] = m->gemm_rate[dt_index][i];
    }
    be->free(o.a), be->free(o.b), be->free(o.c);
}

/* GEMMs with one dimension GPT-2's padded vocabulary long and the other two LONG_SIZES[i]: the LM
 * head's shapes (forward and dW: the vocabulary along C, `long_out`; dinp: along the reduction,
 * `long_k`). On OpenBLAS they run at a fraction of the square curve's figure for their size (the tiny
 * matrix's LM head, 64 x 50304 x 64, at 0.37 of peak where the square curve says 0.95: the GEMM the
 * real run spent most of its underpriced time in, ZEROTRAIN_SIM_OP_TIMES's table in docs/predict.md) */
static const int LONG_SIZES[] = {32, 64, 128, 256};
#define NLONG ((int)(sizeof LONG_SIZES / sizeof LONG_SIZES[0]))
#define LONG_DIM 50304
static void measure_long_gemms(const zt_backend *be, int dt_index, measured *m) {
    size_t es = zt_dtype_size(be->compute_dtype), most = (size_t)LONG_SIZES[NLONG - 1] * LONG_DIM * es;
    sim_op o = {.be = be, .a = be->alloc(most), .b = be->alloc(most), .c = be->alloc(most), .host = be->alloc(most)};
    be->memset_zero(o.a, most), be->memset_zero(o.b, most), be->memset_zero(o.c, most), be->memset_zero(o.host, most);
    for (int i = 0; i < NLONG; i++) {
        double s = LONG_SIZES[i], L = LONG_DIM, flops = 2.0 * s * s * L;
        /* long_out: C [s, L] = A [s, s] B^T, B stored [L, s] (the LM head's forward) */
        o.M = (int)s, o.N = LONG_DIM, o.K = (int)s, o.lda = (int)s, o.ldb = (int)s, o.ldc = LONG_DIM, o.tb = 1;
        double t = less_operands(m, per_rep(run_gemm_shape, &o, 0.15, ON_PROCESS_CPU), (s * s + 2 * s * L) * es, s * L * es);
        m->long_rate[0][dt_index][i] = flops / t;
        /* long_k: C [s, s] = A [s, L] B [L, s] (the LM head's dinp) */
        o.M = (int)s, o.N = (int)s, o.K = LONG_DIM, o.lda = LONG_DIM, o.ldb = (int)s, o.ldc = (int)s, o.tb = 0;
        t = less_operands(m, per_rep(run_gemm_shape, &o, 0.15, ON_PROCESS_CPU), (s * s + 2 * s * L) * es, s * s * es);
        m->long_rate[1][dt_index][i] = flops / t;
        /* long_rows: dW [L, s] += dout^T [L, s tokens] inp [s tokens, s] (the LM head's dW): matmul_backward
         * with no dinp, which widens dW, dout, inp and w and rounds dW back */
        o.M = (int)s, o.K = (int)s, o.N = LONG_DIM;
        t = less_operands(m, per_rep(run_dw_long, &o, 0.15, ON_PROCESS_CPU), (s * s + 3 * s * L) * es, s * L * es);
        m->long_rate[2][dt_index][i] = flops / t;
    }
    be->free(o.a), be->free(o.b), be->free(o.c), be->free(o.host);
}

static void measure_sim(const zt_backend *be16, const zt_backend *fp16, measured *m) {
    size_t total = 0, free_bytes = 0;
    be16->mem_info(&free_bytes, &total);
    m->dev_mem = (double)total;
    const zt_backend *be = be16;
    size_t es = zt_dtype_size(be->compute_dtype);
    /* operands: embedding_forward of one token from a 16384 x 256 table, which the sim widens whole;
     * rounding: embedding_backward of one token into a gradient table of that size, which it widens
     * and rounds back whole (the same table's widening taken off). 8 MiB of 16-bit table, 16 of
     * fp32: beyond the cores' L2, where the tensors that carry most operand bytes live (a GPT-2
     * vocabulary's embedding and logits are 6.4 MiB at n_embd 64); a table inside L2 converts twice
     * as fast and priced the tiny matrix's step at half its CPU time */
    sim_op e = {.be = be, .n = 16384, .C = 256};
    e.a = be->alloc((size_t)e.n * e.C * es), e.b = be->alloc((size_t)e.C * es), e.c = be->alloc((size_t)e.C * es);
    e.host = be->alloc(sizeof(int));
    double table = (double)e.n * e.C * es, widen_s = per_rep(run_embedding, &e, 0.15, ON_PROCESS_CPU);
    m->operand_bw = table / widen_s;
    m->round_bw = table / fmax(per_rep(run_embedding_grad, &e, 0.15, ON_PROCESS_CPU) - widen_s, 0.1 * widen_s);
    be->free(e.a), be->free(e.b), be->free(e.c), be->free(e.host);
    measure_gemms(be16, 0, m);
    measure_gemms(fp16, 1, m);
    measure_long_gemms(be16, 0, m);
    measure_long_gemms(fp16, 1, m);
    /* element-wise: 1M elements, three ops, the bytes the sim charges them (backend_sim.c's q_pointwise) */
    sim_op o = {.be = be, .n = 1 << 20};
    o.a = be->alloc((size_t)o.n * es), o.b = be->alloc((size_t)o.n * es), o.c = be->alloc((size_t)o.n * es);
    m->dev_bw = (4.0 + 3.0 + 2.0) * o.n * (double)es / /* each op's first operand written */
                less_operands(m, per_rep(run_pointwise, &o, 0.15, ON_PROCESS_CPU), (3.0 + 2.0 + 1.0) * o.n * (double)es,
                              3.0 * o.n * (double)es);
    /* the cross-entropy: 64 rows of GPT-2's vocabulary, the bytes the sim charges it (logits and their
     * gradient), net of widening both and rounding the gradient */
    sim_op x = {.be = be, .B = 64, .n = 50304};
    double logits = (double)x.B * x.n * (double)es;
    x.a = be->alloc((size_t)logits), x.b = be->alloc((size_t)logits), x.c = be->alloc((size_t)x.B * sizeof(float));
    x.host = be->alloc((size_t)x.B * sizeof(int));
    be->memset_zero(x.a, (size_t)logits), be->memset_zero(x.host, (size_t)x.B * sizeof(int));
    m->xent_bw = 2.0 * logits / less_operands(m, per_rep(run_xent, &x, 0.15, ON_PROCESS_CPU), 2.0 * logits, logits);
    be->free(x.a), be->free(x.b), be->free(x.c), be->free(x.host);
    /* launch, the shortest item, the synchronize's handoff */
    m->launch = per_rep(run_queue_only, &o, 0.02, ON_THREAD_CPU);
    be->synchronize();
    double item = per_rep(run_tiny_items, &o, 0.05, ON_PROCESS_CPU), synced = per_rep(run_tiny_synced, &o, 0.05, ON_PROCESS_CPU);
    m->kernel_min = item;
    m->handoff = fmax(synced - m->launch - item, 0);
    be->free(o.a), be->free(o.b), be->free(o.c);
    /* the synchronize as the engine meets it: the lane has just run real work (a 256 GEMM: OpenBLAS's
     * and OpenMP's threads on every core) and drained; the host wakes, queues the next item and the
     * lane wakes for it. What that costs beyond the GEMMs is time no core works (threads handing the
     * cores over), so it is wall time: GEMMs each waited for, less the same GEMMs queued back to back */
    sim_op g = {.be = be, .sq = 256};
    size_t gb = (size_t)g.sq * g.sq * es;
    g.a = be->alloc(gb), g.b = be->alloc(gb), g.c = be->alloc(gb);
    m->sync = fmax(extra_per_rep(run_gemm_synced, run_gemm, &g, 0.2), 0);
    be->free(g.a), be->free(g.b), be->free(g.c);
    /* attention at a GPT-2-small-like head size: B 4, T 128, C 256, NH 4 (forward: 2 B T^2 C FLOPs, as the sim charges) */
    for (int k = 0; k < 2; k++) {
        const zt_backend *b = k ? fp16 : be16;
        sim_op a = {.be = b, .B = 4, .T = 128, .C = 256, .NH = 4};
        a.a = b->alloc((size_t)a.B * a.T * 3 * a.C * es);
        a.b = b->alloc((size_t)a.B * a.NH * a.T * a.T * es);
        a.c = b->alloc((size_t)a.B * a.T * a.C * es);
        double out = (double)es * a.B * a.T * a.C; /* out and qkv widened (att is not), out rounded */
        m->attn[k] = 2.0 * a.B * a.T * (double)a.T * a.C /
                     less_operands(m, per_rep(run_attention, &a, 0.15, ON_PROCESS_CPU), 4.0 * out, out);
        b->free(a.a), b->free(a.b), b->free(a.c);
    }
    /* the copy lanes: 32 MiB for bandwidth, 4 KiB for latency */
    size_t big = (size_t)32 << 20;
    sim_op c = {.be = be, .a = be->alloc(big), .host = be->host_alloc(big), .bytes = big};
    void *pageable = zt_xcalloc(1, big);
    double small_s = 0;
    for (int k = 0; k < 2; k++) {
        c.kind = k ? ZT_D2H : ZT_H2D;
        c.bytes = big;
        m->pcie_bw[k][1] = big / per_rep(run_transfer, &c, 0.15, ON_PROCESS_CPU);
        c.bytes = 4096;
        small_s += per_rep(run_transfer, &c, 0.02, ON_PROCESS_CPU) / 2;
        c.bytes = big;
        void *pinned = c.host;
        c.host = pageable;
        m->pcie_bw[k][0] = big / per_rep(run_copy, &c, 0.15, ON_PROCESS_CPU);
        c.host = pinned;
    }
    m->pcie_lat = fmax(small_s - 4096.0 / m->pcie_bw[0][1], 0);
    be->host_free(c.host), be->free(c.a), free(pageable);
}

/* ---------------------------------------------------------------- the host */

typedef struct host_op {
    char *src, *dst;
    size_t bytes;
    int threads;
    float *p, *mo, *v;
    void *g;
} host_op;

static void run_memcpy(void *ctx, int reps) {
    host_op *h = ctx;
    for (int r = 0; r < reps; r++) {
        size_t part = h->bytes / (size_t)h->threads;
#pragma omp parallel for num_threads(h->threads)
        for (int t = 0; t < h->threads; t++) memcpy(h->dst + (size_t)t * part, h->src + (size_t)t * part, part);
    }
}
static void run_adam1(void *ctx, int reps) {
    host_op *h = ctx;
    zt_adam_step s = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f, 1.0f};
    size_t n = h->bytes;
    for (int r = 0; r < reps; r++)
        zt_cpu_adamw_g(h->p, h->mo, h->v, h->g, ZT_BF16, n, &s, h->src, ZT_BF16, 1, ZT_ADAM_ISA_BEST);
}

static void measure_host(measured *m) {
    m->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    m->host_mem = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    size_t big = (size_t)64 << 20;
    host_op h = {.src = zt_xcalloc(1, big), .dst = zt_xcalloc(1, big), .bytes = big, .threads = 1};
    m->memcpy_bw = 2.0 * big / per_rep(run_memcpy, &h, 0.15, ON_PROCESS_CPU); /* read + write */
    h.threads = m->cores; /* CPU time over every core: each core's share of it is the copy's time */
    m->host_bw = 2.0 * big / (per_rep(run_memcpy, &h, 0.15, ON_PROCESS_CPU) / m->cores);
    free(h.src), free(h.dst);
    size_t n = (size_t)1 << 21;
    host_op a = {.bytes = n, .p = zt_xcalloc(n, 4), .mo = zt_xcalloc(n, 4), .v = zt_xcalloc(n, 4),
                 .g = zt_xcalloc(n, 2), .src = zt_xcalloc(n, 2)};
    m->adam_per_core = n / per_rep(run_adam1, &a, 0.15, ON_PROCESS_CPU);
    free(a.p), free(a.mo), free(a.v), free(a.g), free(a.src);
}

/* ---------------------------------------------------------------- the disk */

typedef struct disk_op {
    int fd;
    char *buf;
    size_t file, req;
    int write;
    char failed[160]; /* the first failed request, for the error */
} disk_op;

static void run_disk(void *ctx, int reps) {
    disk_op *d = ctx;
    for (int r = 0; r < reps && !d->failed[0]; r++)
        for (size_t off = 0; off < d->file && !d->failed[0]; off += d->req) {
            ssize_t k = d->write ? pwrite(d->fd, d->buf, d->req, (off_t)off) : pread(d->fd, d->buf, d->req, (off_t)off);
            if (k != (ssize_t)d->req)
                snprintf(d->failed, sizeof d->failed, "%s at byte %zu: %s", d->write ? "write" : "read", off,
                         k < 0 ? strerror(errno) : "short");
        }
    if (d->write && fdatasync(d->fd) && !d->failed[0]) snprintf(d->failed, sizeof d->failed, "fdatasync: %s", strerror(errno));
}

static int measure_disk(const char *dir, measured *m, zt_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/zerotrain-calibrate.%d.tmp", dir, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    m->disk_direct = fd >= 0;
    if (fd < 0) fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return zt_fail(err, "calibrate --dir %s: cannot create %s: %s", dir, path, strerror(errno));
    unlink(path); /* gone when closed, whatever happens */
    disk_op d = {.fd = fd, .file = (size_t)128 << 20, .req = (size_t)4 << 20, .write = 1};
    if (posix_memalign((void **)&d.buf, 4096, d.req)) {
        close(fd);
        return zt_fail(err, "calibrate: out of memory for a 4 MiB disk buffer");
    }
    memset(d.buf, 0x5a, d.req);
    m->disk_write = d.file / per_rep(run_disk, &d, 0.3, ON_WALL);
    d.write = 0;
    if (!m->disk_direct) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    m->disk_read = d.file / per_rep(run_disk, &d, 0.3, ON_WALL);
    d.file = d.req = 4096;
    m->disk_lat = per_rep(run_disk, &d, 0.02, ON_WALL);
    close(fd);
    free(d.buf);
    return d.failed[0] ? zt_fail(err, "calibrate --dir %s: disk %s", dir, d.failed) : 0;
}

/* ---------------------------------------------------------------- the profile */

/* dtype k's curves: the square one, then the long GEMMs' (each rate a share of the square peak) */
static void curve(FILE *f, const measured *m, int k) {
    fprintf(f, "[");
    for (int i = 0; i < m->ngemm; i++)
        fprintf(f, "%s[%.0f, %.4f]", i ? ", " : "", m->gemm_size[i], fmin(m->gemm_rate[k][i] / m->gemm_peak[k], 1.0));
    static const char *const long_names[3] = {"long_out", "long_k", "long_rows"};
    for (int c = 0; c < 3; c++) {
        fprintf(f, "], %s: [", long_names[c]);
        for (int i = 0; i < NLONG; i++)
            fprintf(f, "%s[%d, %.4f]", i ? ", " : "", LONG_SIZES[i], fmin(m->long_rate[c][k][i] / m->gemm_peak[k], 1.0));
    }
    fprintf(f, "]");
}

/* the real step's rates (calibrate_step.h) in place of the loops': each kind's math rate scaled by
 * what the step's ops of that kind took against their loop price (the loops' curves keep their shape
 * by size), the operands' rates as the step met them. The step runs in bf16; fp16 (and fp32, which
 * the sim runs in 16 bits) get the same factors, their ops being the same widened math. */
static double step_ratio(const zt_step_prices *st, int kind) { return st->measured[kind] / st->priced[kind]; }
static void apply_step(measured *m, const zt_step_prices *st) {
    static const int long_kind[3] = {STEP_LM_FORWARD, STEP_LM_BACKWARD, STEP_LM_BACKWARD};
    for (int k = 0; k < 2; k++) {
        double peak = 0;
        for (int i = 0; i < m->ngemm; i++) peak = fmax(peak, m->gemm_rate[k][i] /= step_ratio(st, STEP_GEMM_SQUARE));
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < NLONG; i++) peak = fmax(peak, m->long_rate[c][k][i] /= step_ratio(st, long_kind[c]));
        m->gemm_peak[k] = peak; /* so no curve point is cut at 1 */
        m->attn[k] /= step_ratio(st, STEP_ATTENTION);
    }
    m->xent_bw /= step_ratio(st, STEP_XENT);
    m->dev_bw /= step_ratio(st, STEP_ELEMENTWISE);
    m->operand_bw = st->widened / st->widen_cpu;
    m->round_bw = st->rounded / st->round_cpu;
}

/* how a rate was measured: by the loop alone (`loop`), or in the real step too (its factor) */
static void how(FILE *f, const zt_step_prices *st, int kind, const char *loop) {
    if (!st) fprintf(f, "%s", loop);
    else
        fprintf(f, "%s; then in the real step (above) its ops' lane CPU time was %.2fx that rate's price (%.1f of %.1f ms): "
                   "this rate is the loop's over that",
                loop, step_ratio(st, kind), 1e3 * st->measured[kind], 1e3 * st->priced[kind]);
}

static void write_profile(FILE *f, const measured *m, const char *dir, const measured *loops, const zt_step_prices *st) {
    const char *median = "median of 5 timed batches, in CPU time (the disk: wall time)";
    fprintf(f, "# This machine (%s, %d cores) as the simulated GPU executes on it: measured by `zerotrain calibrate`\n"
               "# at %s. Every loop figure is the %s; the device lanes are the simulated GPU's real threads,\n"
               "# its copies real memcpys, so `predict --hw` with this file prices a step as `device: sim` runs it here.\n",
            m->cpu, m->cores, m->when, median);
    if (st)
        fprintf(f, "# The real step: `train` of a fixed GPT-2 (%d layer, n_embd %d, T %d, micro-batch %d, stage 0, bf16), %d pairs\n"
                   "# of runs, each figure the long run's less the short one's (%d steps: start-up and the first step fall out),\n"
                   "# each CPU time the median of the pairs'; the sim's op table of each run, in which every item is\n"
                   "# priced by the loops' rates beside its lane CPU time (ZEROTRAIN_SIM_OP_TIMES): a step's\n"
                   "# ops meet their operands cold and run beside the other lanes, which loops of one op do not. The loops\n"
                   "# give each rate's shape (the GEMM curves by size), the step its level, kind by kind.\n",
                st->layers, st->n_embd, st->seq_len, st->micro_batch, st->runs, st->steps);
    if (st && st->tp > 1)
        fprintf(f, "# The real step ran at tensor_parallel.tp_size %d as %d processes at once (`calibrate --tp %d`), every rank's\n"
                   "# ops summed: this profile prices one rank of a tp-%d group on this machine (predict --ranks %d --tp %d).\n",
                st->tp, st->tp, st->tp, st->tp, st->tp, st->tp);
    fprintf(f, "name: calibrated\ndevice:\n");
    fprintf(f, "  memory: %.0fMiB   # measured: the simulated GPU's mem_info total (ZEROTRAIN_SIM_MEM)\n", m->dev_mem / 1048576);
    fprintf(f, "  memory_bandwidth_gbs: %.3f   # ", m->dev_bw * 1e-9);
    how(f, st, STEP_ELEMENTWISE, "measured: residual, gelu and scale over 1M 16-bit elements on the compute lane, the bytes the sim charges them");
    fprintf(f, "\n  xent_gbs: %.3f   # ", m->xent_bw * 1e-9);
    how(f, st, STEP_XENT, "measured: softmax_xent over 64 rows of 50304 logits, the bytes the sim charges it (logits in, their gradient out), net of its operands");
    if (st)
        fprintf(f, "\n  operand_gbs: %.3f   # measured in the real step: every op's widened 16-bit operand bytes over the lane CPU "
                   "time its widening took (%.1f MB in %.1f ms; the loop, on one table beyond L2: %.3f)\n"
                   "  round_gbs: %.3f   # measured in the real step: every op's written operand bytes over the lane CPU time "
                   "rounding them back took (%.1f MB in %.1f ms; the loop: %.3f)\n",
                m->operand_bw * 1e-9, st->widened * 1e-6, st->widen_cpu * 1e3, loops->operand_bw * 1e-9, m->round_bw * 1e-9,
                st->rounded * 1e-6, st->round_cpu * 1e3, loops->round_bw * 1e-9);
    else
        fprintf(f, "\n  operand_gbs: %.3f   # measured: embedding_forward of one token from a 16384 x 256 table, which the sim "
                   "widens whole before it runs: the table's bytes over the time\n"
                   "  round_gbs: %.3f   # measured: embedding_backward of one token into a 16384 x 256 gradient table, "
                   "which the sim widens and rounds back whole: the table's bytes over the time less its widening\n",
                m->operand_bw * 1e-9, m->round_bw * 1e-9);
    fprintf(f, "  launch_us: %.2f   # measured: host time to queue one item (a 1-element scale), no wait\n", m->launch * 1e6);
    fprintf(f, "  kernel_min_us: %.2f   # measured: 1-element items back to back on the compute lane (their rate, the queueing included)\n",
            m->kernel_min * 1e6);
    fprintf(f, "  sync_us: %.2f   # measured: 256 GEMMs on the compute lane each waited for before the next is queued, "
               "less the same queued back to back, in wall time (the lane drains, the host wakes and queues, the lane "
               "wakes: the cores handed over, no work done; a bare item's handoff in CPU time is %.2f)\n",
            m->sync * 1e6, m->handoff * 1e6);
    fprintf(f, "  gemm:\n    # measured: square GEMMs (be->gemm, 32..768) on the compute lane, widened 16-bit inputs and\n"
               "    # OpenBLAS on this machine's cores, net of their operands; the peak is the fastest rate, the curve each\n"
               "    # size's share of it; long_out and long_k: GEMMs of [s, %d] x [%d, s]-like shapes (GPT-2's LM head: the\n"
               "    # long dimension along C, or along the reduction) by s; long_rows: matmul_backward's dW of a [%d, s]\n"
               "    # weight stored transposed (the LM head's dW) by s\n", LONG_DIM, LONG_DIM, LONG_DIM);
    if (st)
        fprintf(f, "    # then each curve scaled by the real step's lane CPU over price for its GEMMs: the square curve by the\n"
                   "    # blocks' (%.2fx), long_out by the LM head forward's (%.2fx), long_k and long_rows by its backward's (%.2fx)\n",
                step_ratio(st, STEP_GEMM_SQUARE), step_ratio(st, STEP_LM_FORWARD), step_ratio(st, STEP_LM_BACKWARD));
    fprintf(f, "    bf16: {peak_tflops: %.6f, efficiency: ", m->gemm_peak[0] * 1e-12);
    curve(f, m, 0);
    fprintf(f, "}\n    fp16: {peak_tflops: %.6f, efficiency: ", m->gemm_peak[1] * 1e-12);
    curve(f, m, 1);
    fprintf(f, "}\n    # the sim computes in 16 bits only (gemm_f32 takes 16-bit inputs too): bf16's figures\n");
    fprintf(f, "    fp32: {peak_tflops: %.6f, efficiency: ", m->gemm_peak[0] * 1e-12);
    curve(f, m, 0);
    fprintf(f, "}\n  # ");
    how(f, st, STEP_ATTENTION, "measured: attention_forward at B 4, T 128, C 256, NH 4, its causal FLOPs as the sim charges them");
    fprintf(f, "\n  attention_tflops: {bf16: %.6f, fp16: %.6f, fp32: %.6f}\n", m->attn[0] * 1e-12, m->attn[1] * 1e-12,
            m->attn[0] * 1e-12);
    fprintf(f, "pcie:\n  # measured: the sim's copy lanes, 32 MiB transfers from host_alloc (pinned) and blocking copies\n"
               "  # from malloc'd memory (pageable): memcpys on the lanes' threads\n");
    fprintf(f, "  h2d_pinned_gbs: %.3f\n  d2h_pinned_gbs: %.3f\n  h2d_pageable_gbs: %.3f\n  d2h_pageable_gbs: %.3f\n",
            m->pcie_bw[0][1] * 1e-9, m->pcie_bw[1][1] * 1e-9, m->pcie_bw[0][0] * 1e-9, m->pcie_bw[1][0] * 1e-9);
    fprintf(f, "  latency_us: %.2f   # measured: a 4 KiB transfer each way, less its bytes at the bandwidth\n", m->pcie_lat * 1e6);
    fprintf(f, "host:\n  memory: %.0fMiB   # measured: physical pages (sysconf)\n", m->host_mem / 1048576);
    fprintf(f, "  memory_bandwidth_gbs: %.3f   # measured: 64 MiB memcpy split over every core (read + write)\n", m->host_bw * 1e-9);
    fprintf(f, "  cores: %d   # measured: online CPUs; the sim's lanes and the host Adam threads share them\n", m->cores);
    fprintf(f, "  adam_gelems_per_core: %.4f   # measured: zt_cpu_adamw_g on one thread, 2M elements, bf16 gradients and copy-out\n",
            m->adam_per_core * 1e-9);
    fprintf(f, "  memcpy_gbs: %.3f   # measured: one thread's 64 MiB memcpy (read + write)\n", m->memcpy_bw * 1e-9);
    fprintf(f, "nvme:\n  # measured: the disk under %s, 128 MiB in 4 MiB requests%s\n", dir,
            m->disk_direct ? ", O_DIRECT (as the swap opens it)" : ", buffered (O_DIRECT refused here), written with fdatasync");
    fprintf(f, "  read_gbs: %.3f\n  write_gbs: %.3f\n", m->disk_read * 1e-9, m->disk_write * 1e-9);
    fprintf(f, "  latency_us: %.1f   # measured: one 4 KiB read\n", m->disk_lat * 1e6);
    fprintf(f, "network:\n  # not measured (calibrate is one process): ranks here meet in host memory, so the bandwidth is\n"
               "  # the one-thread memcpy rate above and the latency a synchronize's handoff\n");
    fprintf(f, "  intra_node: {bandwidth_gbs: %.3f, latency_us: %.2f}\n", m->memcpy_bw * 1e-9, m->handoff * 1e6 + 1);
    fprintf(f, "  inter_node: {bandwidth_gbs: %.3f, latency_us: %.2f}\n", m->memcpy_bw * 1e-9, m->handoff * 1e6 + 1);
    if (st && st->tp > 1)
        fprintf(f, "  gpus_per_node: %d           # measured: the real step's %d ranks ran on this machine at once (predict --ranks shares "
                   "its host among a node's ranks)\n", st->tp, st->tp);
    else
        fprintf(f, "  gpus_per_node: 1           # this machine is one simulated GPU (predict --ranks shares its host among a node's ranks)\n");
}

static void cpu_name(char *out, size_t cap) {
    snprintf(out, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(out, cap, "%s", strchr(line, ':') + 2);
            out[strcspn(out, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
}

int zt_cmd_calibrate(int argc, char **argv) {
    const char *out = NULL, *dir = ".";
    int tp = 1;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--tp") && i + 1 < argc) {
            tp = (int)strtol(argv[++i], &end, 10);
            if (*end || tp < 1 || tp > 2) { /* the real step's model has 2 heads */
                fprintf(stderr, "zerotrain: error: calibrate --tp: expected 1 or 2 ranks (the real step's model has 2 "
                                "heads), got '%s'\n", argv[i]);
                return 2;
            }
        } else {
            return zt_help_bad_argument("calibrate", argv[i], NULL);
        }
    }
    if (access(dir, W_OK | X_OK)) { /* before the announcement: a wrong --dir is one line, at once */
        fprintf(stderr, "zerotrain: error: calibrate --dir %s: cannot write there: %s\n", dir, strerror(errno));
        return 1;
    }
    /* with no arguments too, say what is about to take a minute of every core, and where its result goes */
    fprintf(stderr, "calibrate: measuring this machine for about a minute (the disk under %s, host memory and cores, "
                    "the simulated GPU's lanes, a real training step%s); the profile goes to %s\n",
            dir, tp > 1 ? " as tensor-parallel ranks" : "", out ? out : "stdout (-o FILE to write a file)");
    /* the sim on the wall clock: a profile in the environment would price the items instead of timing them */
    unsetenv("ZEROTRAIN_SIM_PROFILE");
    unsetenv("ZEROTRAIN_SIM_JITTER");
    const char *why = NULL;
    const zt_backend *bf16 = zt_backend_sim(ZT_BF16, &why), *fp16 = bf16 ? zt_backend_sim(ZT_F16, &why) : NULL;
    if (!fp16) {
        fprintf(stderr, "zerotrain: error: calibrate: the simulated GPU does not open: %s\n", why ? why : "unknown");
        return 1;
    }
    measured m;
    memset(&m, 0, sizeof m);
    time_t now = time(NULL);
    strftime(m.when, sizeof m.when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    cpu_name(m.cpu, sizeof m.cpu);
    double t0 = zt_now();
    zt_err err = {{0}};
    if (measure_disk(dir, &m, &err)) {
        zt_print_error(&err);
        return 1;
    }
    measure_host(&m);
    measure_sim(bf16, fp16, &m);
    /* the real step, priced by the loops' profile (a file under dir while it runs) */
    measured loops = m;
    zt_step_prices st;
    char loop_profile[4096];
    snprintf(loop_profile, sizeof loop_profile, "%s/zerotrain-calibrate.%d.loops.yaml", dir, (int)getpid());
    FILE *lf = fopen(loop_profile, "w");
    if (!lf) {
        fprintf(stderr, "zerotrain: error: calibrate --dir %s: cannot write %s: %s\n", dir, loop_profile, strerror(errno));
        return 1;
    }
    write_profile(lf, &loops, dir, NULL, NULL);
    int step_rc = fclose(lf) ? zt_fail(&err, "calibrate: cannot write %s: %s", loop_profile, strerror(errno))
                             : zt_calibrate_step(loop_profile, dir, m.kernel_min, tp, &st, &err);
    unlink(loop_profile);
    if (step_rc) {
        zt_print_error(&err);
        return 1;
    }
    apply_step(&m, &st);
    FILE *f = out ? fopen(out, "w") : stdout;
    if (!f) {
        fprintf(stderr, "zerotrain: error: calibrate -o %s: %s\n", out, strerror(errno));
        return 1;
    }
    write_profile(f, &m, dir, &loops, &st);
    if (out && fclose(f)) {
        fprintf(stderr, "zerotrain: error: calibrate -o %s: %s\n", out, strerror(errno));
        return 1;
    }
    fprintf(stderr, "calibrate: measured in %.1f s%s%s\n", zt_now() - t0, out ? ", wrote " : "", out ? out : "");
    return 0;
}
