/* twin_ratio.c — Twin-Flow's `ratio: auto`: measures the host part's pipeline as the step runs it
 * (the CPU Adam with its 16-bit conversions, both copy directions) against the device Adam, all at
 * once as in the step, and keeps the ratio inside the window both memories allow: the device part
 * must fit the device, the host part the host. twin_flow.c's twin_open calls it.
 *
 * Kept in step with twin_flow.c: host_part_bytes counts what twin_alloc allocates, and the
 * calibration's passes do what host_adam_lane and device_adam do. It sees the engine through the
 * facts twin_open is handed (engine_facts.h): `e` below. */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_adam.h"
#include "engine/twin_ratio.h"
#include "util/clock.h"

#define MIB 1048576.0
#define GIB 1073741824.0

/* ---------------------------------------------------------------- what the host part takes */

/* Host bytes of the host part at host_n elements = fixed + host_n * per_element, as twin_alloc
 * allocates them: fp32 master, m, v (12 B; on NVMe instead, staging groups: the fixed part, at most
 * buffer_count groups of sub_group_size) and the gradient landing buffer (E) per element, and the
 * updated parameters' buffer (E) where there is one (twin_has_out_buffer). */
static double host_part_bytes(const engine_facts *e, double *fixed) {
    double E = (double)facts_esz(e), N = (double)(e->lay.opt_hi - e->lay.opt_lo);
    *fixed = 0;
    if (e->off.nvme_path) {
        double group = fmin(fmax(e->off.sub_group_size, 2048.0), N); /* as inf_states_open rounds it (0: the smallest) */
        *fixed = (e->off.buffer_count > 0 ? e->off.buffer_count : 4) * group * 12.0;
    }
    return (e->off.nvme_path ? 0.0 : 12.0) + E + (twin_has_out_buffer(e) ? E : 0.0);
}

/* "12.5 MiB" below 1 GiB, "3.20 GiB" from there */
static void fmt_bytes(char out[32], double b) {
    if (b < GIB) snprintf(out, 32, "%.1f MiB", b / MIB);
    else snprintf(out, 32, "%.2f GiB", b / GIB);
}

/* MemAvailable of /proc/meminfo in bytes; -1 where there is none. On a clock that stands for another
 * machine (predict: util/clock.h), that machine's free host memory instead. */
static double mem_available(void) {
    double v = zt_clock_host_available();
    if (v >= 0) return v;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    double kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
    fclose(f);
    return kib >= 0 ? kib * 1024.0 : -1;
}

int twin_has_out_buffer(const engine_facts *f) {
    if (f->off.param_device == ZT_PARAM_ON_NVME) return 1; /* written to the parameter swap file after the update */
    return f->off.param_device == ZT_PARAM_ON_DEVICE && (f->be->compute_dtype != ZT_F32 || f->off.nvme_path);
}

/* The speculation window (twin_ratio.h). Auto: this rank's share of the free host memory (as ratio auto
 * counts it below, or of host_memory when that is set), less host_reserve, less the host part's own
 * bytes (not allocated yet: twin_open calls this), 12 B an element. Collective where it asks the
 * ranks how many share the machine: every rank with offload on calls it. */
size_t twin_speculation_elems(const engine_facts *e, size_t n) {
    if (e->off.speculation_window > 0) return min_sz(n, (size_t)(e->off.speculation_window / 12.0));
    int node_ranks = zt_comm_ranks_on_node(e->comm) * e->table->tp_size;
    double fixed, per = host_part_bytes(e, &fixed), free_b;
    if (e->off.host_memory > 0) {
        free_b = e->off.host_memory - (double)mem_sum(e->mem->host);
    } else {
        double avail = mem_available();
        if (avail < 0) return 0; /* no /proc/meminfo: no window unless it is given */
        /* the engine's host buffers so far are counted where a clock stands for the machine; the
         * MemAvailable of this one does not see buffers not yet written */
        free_b = avail / node_ranks - e->off.host_reserve - (zt_clock_host_available() >= 0 ? 0.0 : (double)mem_sum(e->mem->host));
    }
    free_b -= fixed + per * (double)n;
    return free_b <= 0 ? 0 : min_sz(n, (size_t)(free_b / 12.0));
}

/* ---------------------------------------------------------------- calibration */

/* Scratch of n elements laid out like the step's: host buffers aligned and written by this thread (as
 * twin_alloc's are), transfer buffers pinned when pin_memory asks. The gradients hold real values: a
 * calloc'ed buffer never written reads the kernel's shared zero page, from cache, and the CPU Adam
 * then looked faster than in any step. */
typedef struct calib {
    size_t n, chunk;
    float *master, *m, *v; /* host part, fp32 */
    void *grad;            /* gradients as the D2H lands them (compute dtype) */
    void *params16;        /* 16-bit backends: the updated parameters in compute dtype */
    void *down, *up;       /* the copy lanes' host ends (D2H destination, H2D source) */
    float *dmaster, *dm, *dv;
    void *dgrad, *dparams, *dup; /* device gradients, the device Adam's parameter output, H2D target */
} calib;

static void *host_zeroed(size_t bytes) {
    size_t sz = (max_sz(bytes, 64) + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, sz);
    if (p) memset(p, 0, sz);
    return p;
}

static void *transfer_buf(const engine_facts *e, size_t bytes) {
    return e->off.pin_memory ? e->be->host_alloc(max_sz(bytes, 64)) : host_zeroed(bytes);
}

static void calib_free(const engine_facts *e, calib *c) {
    const zt_backend *be = e->be;
    free(c->master); free(c->m); free(c->v);
    /* every transfer_buf goes back the way it came: pinned memory to the backend (free() of pinned
     * memory crashed ratio auto on the first H100 run of the offload work) */
    void *tr[] = {c->grad, c->params16, c->down, c->up};
    for (int i = 0; i < 4; i++)
        if (tr[i]) e->off.pin_memory ? be->host_free(tr[i]) : free(tr[i]);
    void *dev[] = {c->dmaster, c->dm, c->dv, c->dgrad, c->dparams, c->dup};
    for (int i = 0; i < 6; i++)
        if (dev[i]) be->free(dev[i]);
}

static int calib_alloc(const engine_facts *e, calib *c, size_t n) {
    const zt_backend *be = e->be;
    int fp32 = be->compute_dtype == ZT_F32;
    size_t E = facts_esz(e);
    memset(c, 0, sizeof *c);
    c->n = n;
    /* twin_alloc's chunk: n/8 in multiples of ZT_TWIN_ALIGN, within [2^16, 2^20] */
    size_t chunk = (n / 8 + ZT_TWIN_ALIGN - 1) / ZT_TWIN_ALIGN * ZT_TWIN_ALIGN;
    c->chunk = min_sz(max_sz(chunk, (size_t)1 << 16), (size_t)1 << 20);
    c->master = host_zeroed(n * 4), c->m = host_zeroed(n * 4), c->v = host_zeroed(n * 4);
    c->grad = transfer_buf(e, n * E);
    if (!fp32) c->params16 = transfer_buf(e, n * E);
    c->down = transfer_buf(e, n * E), c->up = transfer_buf(e, n * E);
    c->dmaster = be->alloc(n * 4), c->dm = be->alloc(n * 4), c->dv = be->alloc(n * 4);
    c->dgrad = be->alloc(n * E), c->dup = be->alloc(n * E);
    if (!fp32) c->dparams = be->alloc(n * E);
    if (!c->master || !c->m || !c->v || !c->grad || !c->down || !c->up || !c->dmaster || !c->dm || !c->dv ||
        !c->dgrad || !c->dup || (!fp32 && (!c->params16 || !c->dparams)))
        return -1;
    /* gradients of about 1e-3, in the compute dtype's bits (bf16 0x3A83, fp16 0x1419) */
    for (size_t i = 0; i < n; i++) {
        if (fp32) ((float *)c->grad)[i] = 1e-3f;
        else ((uint16_t *)c->grad)[i] = be->compute_dtype == ZT_BF16 ? 0x3A83 : 0x1419;
    }
    be->copy(c->dgrad, c->grad, n * E, ZT_H2D);
    memcpy(c->up, c->grad, n * E);
    return 0;
}

/* The end of the tensor piece that calibration element x starts, at most b: the calibration runs on
 * this rank's first n optimizer elements, cut where the step cuts them (weight decay is per tensor);
 * past the range (a calibration longer than a small shard) the rest is one piece. */
static size_t piece_end(const engine_facts *e, size_t x, size_t b) {
    size_t g = e->lay.opt_lo + x;
    if (g >= e->lay.opt_hi) return b;
    for (int i = 0; i < e->table->count; i++) {
        const zt_param_info *p = &e->table->params[i];
        if (g >= p->offset && g < p->offset + p->numel) return min_sz(b, p->offset + p->numel - e->lay.opt_lo);
    }
    return b;
}

/* host_adam_lane's work on the calibration scratch: chunk by chunk, the CPU Adam per tensor piece
 * reading the gradients in the compute dtype as they landed and writing the 16-bit parameters for
 * the trip up */
static void host_pass(const engine_facts *e, calib *c, const zt_adam_step *st) {
    zt_dtype dt = e->be->compute_dtype;
    int fp32 = dt == ZT_F32;
    for (size_t a = 0; a < c->n; a += c->chunk) {
        size_t b = min_sz(c->n, a + c->chunk);
        for (size_t x = a, y; x < b; x = y) {
            y = piece_end(e, x, b);
            /* as twin_adam_span declares it: what the run's clock charges (util/clock.h) */
            zt_clock_host_work(ZT_WORK_ADAM, (double)(y - x), (double)(y - x) * (24.0 + 2.0 * (double)facts_esz(e)),
                               e->off.host_threads);
            if (!zt_clock_costs_only())
                zt_cpu_adamw_g(c->master + x, c->m + x, c->v + x, facts_at(e, c->grad, x), dt, y - x, st,
                               fp32 ? NULL : facts_at(e, c->params16, x), dt, e->off.host_threads, ZT_ADAM_ISA_BEST);
        }
    }
}

/* device_adam's work: one call per tensor piece, then wait for the device */
static void device_pass(const engine_facts *e, calib *c, const zt_adam_step *st) {
    int fp32 = e->be->compute_dtype == ZT_F32;
    for (size_t x = 0, y; x < c->n; x = y) {
        y = piece_end(e, x, c->n);
        e->be->adamw(c->dmaster + x, c->dm + x, c->dv + x, facts_at(e, c->dgrad, x), fp32 ? NULL : facts_at(e, c->dparams, x),
                     y - x, st);
    }
    e->be->synchronize();
}

/* the copy lanes' work: the gradients down, the parameters up, chunk by chunk */
static void copy_pass(const engine_facts *e, calib *c, zt_copy_kind kind) {
    size_t E = facts_esz(e);
    for (size_t a = 0; a < c->n; a += c->chunk) {
        size_t k = min_sz(c->n - a, c->chunk);
        if (kind == ZT_D2H) e->be->transfer(facts_at(e, c->down, a), facts_at(e, c->dgrad, a), k * E, ZT_D2H);
        else e->be->transfer(facts_at(e, c->dup, a), facts_at(e, c->up, a), k * E, ZT_H2D);
    }
}

/* One pass kind, repeated on a thread of its own until told to stop; the first pass warms up, the
 * others are timed, each on its own (at most CALIB_TIMED). The copy lanes start one pass per pass of
 * the host Adam, as the step moves each element down and up once per update (copying without pause
 * would load the memory more than the step does). */
enum { LANE_HOST_ADAM, LANE_D2H, LANE_H2D, NLANES };
#define CALIB_TIMED 64
#define CALIB_AGREE 0.25 /* the 3 fastest passes of each lane agree within 25 %: settled (zt_settled_time) */
/* a lane's pass time as calibrate counts it; *settled as zt_settled_time says (0 with no pass yet) */
static double lane_time(const double *seconds, int timed, int *settled) {
    *settled = 0;
    return timed > 0 ? zt_settled_time(seconds, timed, CALIB_AGREE, settled) : 0;
}
typedef struct calib_pace {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int host_passes; /* host Adam passes started */
    atomic_int stop;
} calib_pace;
typedef struct calib_lane {
    const engine_facts *e;
    calib *c;
    const zt_adam_step *st;
    int kind;
    calib_pace *pace;
    atomic_int timed;           /* timed passes so far: seconds[0 .. timed) written */
    double seconds[CALIB_TIMED]; /* each one's time */
    pthread_t th;
} calib_lane;

/* the host lane announces its pass; a copy lane waits for the host pass it goes with (0: stop) */
static int pace_pass(calib_lane *l, int pass) {
    calib_pace *p = l->pace;
    pthread_mutex_lock(&p->mu);
    if (l->kind == LANE_HOST_ADAM) {
        p->host_passes = pass + 1;
        pthread_cond_broadcast(&p->cv);
    } else {
        while (!atomic_load(&p->stop) && p->host_passes <= pass) pthread_cond_wait(&p->cv, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return !atomic_load(&p->stop);
}

static void *lane_main(void *arg) {
    calib_lane *l = arg;
    atomic_int *stop = &l->pace->stop;
    zt_backend_bind_thread(l->e->be); /* the copy lanes transfer on the backend's device */
    for (int pass = 0; pace_pass(l, pass); pass++) {
        double t0 = zt_clock_now();
        if (l->kind == LANE_HOST_ADAM) host_pass(l->e, l->c, l->st);
        else copy_pass(l->e, l->c, l->kind == LANE_D2H ? ZT_D2H : ZT_H2D);
        double t = zt_clock_now() - t0;
        int k = atomic_load(&l->timed);
        if (pass > 0 && !atomic_load(stop) && k < CALIB_TIMED) { /* a pass that ended alone does not count */
            l->seconds[k] = t;
            atomic_store(&l->timed, k + 1);
        }
    }
    return NULL;
}

/* Rates as the step sees them: the host Adam, both copies and the device Adam run at the same time,
 * each on the thread the step runs it on (the host side on threads of their own, the device Adam on
 * this one), so they share the cores, the memory bandwidth and the copy engines as in the step. Each
 * rate is its lane's settled pass time (zt_settled_time: the middle of its 3 fastest once they agree),
 * so a pass that something else slowed does not count: on the H200's fresh VM one run's CPU Adam
 * measured 2026 M el/s and the next 130 (the mean of 3 passes, as it was), and the ratio followed.
 * The passes go on until every lane settles, for 10 s at most once each has 3, 20 s at most in all.
 * rates: host Adam el/s, device Adam el/s, D2H B/s, H2D B/s; all 0 when the scratch could not be
 * allocated. *passes: the fewest timed passes of a lane; *settled: whether every lane settled. */
static void calibrate(const engine_facts *e, size_t n, double rates[4], int *passes, int *settled) {
    calib c;
    memset(rates, 0, 4 * sizeof *rates);
    if (calib_alloc(e, &c, n)) {
        calib_free(e, &c);
        return;
    }
    zt_adam_step st = {1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.1f, 0.001f, 1.0f};
    calib_pace pace = {.host_passes = 0};
    pthread_mutex_init(&pace.mu, NULL);
    pthread_cond_init(&pace.cv, NULL);
    atomic_init(&pace.stop, 0);
    calib_lane lanes[NLANES];
    int started = 0;
    for (int k = 0; k < NLANES; k++) {
        lanes[k] = (calib_lane){.e = e, .c = &c, .st = &st, .kind = k, .pace = &pace};
        atomic_init(&lanes[k].timed, 0);
        if (pthread_create(&lanes[k].th, NULL, lane_main, &lanes[k])) break;
        started++;
    }
    double dev_seconds[CALIB_TIMED], t_start = zt_clock_now();
    int dev_timed = 0, least = 0, all_settled = 0;
    for (int pass = 0; started == NLANES; pass++) {
        double t0 = zt_clock_now();
        device_pass(e, &c, &st);
        if (pass > 0 && dev_timed < CALIB_TIMED) dev_seconds[dev_timed++] = zt_clock_now() - t0;
        least = dev_timed;
        lane_time(dev_seconds, dev_timed, &all_settled);
        for (int k = 0; k < NLANES; k++) {
            int timed = atomic_load(&lanes[k].timed), lane_settled;
            least = least < timed ? least : timed;
            lane_time(lanes[k].seconds, timed, &lane_settled);
            all_settled = all_settled && lane_settled;
        }
        double spent = zt_clock_now() - t_start;
        if (all_settled || least >= CALIB_TIMED || (least >= 3 && spent > 10.0) || (least >= 1 && spent > 20.0)) break;
    }
    *passes = least;
    *settled = all_settled;
    pthread_mutex_lock(&pace.mu);
    atomic_store(&pace.stop, 1);
    pthread_cond_broadcast(&pace.cv);
    pthread_mutex_unlock(&pace.mu);
    for (int k = 0; k < started; k++) pthread_join(lanes[k].th, NULL);
    pthread_mutex_destroy(&pace.mu);
    pthread_cond_destroy(&pace.cv);
    if (started == NLANES) {
        size_t E = facts_esz(e);
        double per[NLANES];
        int ignored;
        for (int k = 0; k < NLANES; k++) per[k] = lane_time(lanes[k].seconds, atomic_load(&lanes[k].timed), &ignored) + 1e-12;
        rates[0] = n / per[LANE_HOST_ADAM];
        rates[1] = n / (lane_time(dev_seconds, dev_timed, &ignored) + 1e-12);
        rates[2] = (double)(n * E) / per[LANE_D2H];
        rates[3] = (double)(n * E) / per[LANE_H2D];
    }
    calib_free(e, &c);
}

/* The device's rate on the model's largest GEMM (FLOP/s; 0 when it is not known or the scratch does not
 * fit): the speculative step overlaps the host part's CPU Adam with the step's forward and backward,
 * whose time is its FLOPs at about this rate. The settled time of up to 8 passes after a warm-up. */
static double gemm_rate(const engine_facts *e) {
    const zt_backend *be = e->be;
    size_t M = (size_t)e->off.step_gemm[0], K = (size_t)e->off.step_gemm[1], N = (size_t)e->off.step_gemm[2];
    size_t E = facts_esz(e);
    if (!M || !K || !N) return 0;
    void *a = be->alloc(M * K * E), *w = be->alloc(K * N * E), *out = be->alloc(M * N * E);
    double seconds[8], rate = 0;
    int timed = 0;
    if (a && w && out) {
        for (int pass = 0; pass <= 8; pass++) {
            double t0 = zt_clock_now();
            be->matmul_forward(out, a, w, NULL, (int)M, (int)K, (int)N, 0, (int)N);
            be->synchronize();
            if (pass > 0) seconds[timed++] = zt_clock_now() - t0;
        }
        int settled;
        double t = zt_settled_time(seconds, timed, CALIB_AGREE, &settled);
        rate = t > 0 ? 2.0 * (double)M * (double)K * (double)N / t : 0;
    }
    void *bufs[] = {a, w, out};
    for (int i = 0; i < 3; i++)
        if (bufs[i]) be->free(bufs[i]);
    return rate;
}

/* ---------------------------------------------------------------- the window and the choice */

/* Chooses the ratio (same on every rank; collective). The step time model
 *   host lane   t_h(r) = r N / H,  H = min(CPU Adam, D2H bw / E, H2D bw / E)   (pipelined chunks)
 *   device lane t_d(r) = (1 - r) N / D
 * has its smallest maximum where t_h = t_d: r* = H / (H + D). With super_offload the host part's CPU
 * Adam also runs while the device computes the step, F (the step's FLOPs at the device's rate on the
 * model's largest GEMM, measured here): during backward on the chunks whose gradients are final, and
 * into the next forward, which needs the host part (the tail of the range) last. The host then has
 * F + t_d(r) for its t_h(r), and the balance is r N / H = F + (1 - r) N / D:
 *   r* = (F + N / D) / (N / H + N / D),
 * which offloads more of the optimizer at no cost in speed. The memories bound r from both sides:
 *   device: the device part's optimizer bytes (1 - r) N K_dev (K_dev = 8: m, v; + 4 for the master
 *           on 16-bit backends) fit in device_memory less the engine's other device buffers when it
 *           is set, else in the device's free memory less device_reserve:         r >= r_min;
 *   host:   the host part's bytes r N B_host + fixed (host_part_bytes) fit in host_memory less the
 *           engine's other host buffers when it is set, else in MemAvailable / (ranks on this
 *           machine) less host_reserve, and less the device part too where device memory is host
 *           memory (the CPU backend):                                            r <= r_max.
 * r = r* clamped to [r_min, r_max]; no ratio when r_min > r_max (an error naming both amounts). */
int twin_choose_ratio(const engine_facts *e, double *ratio, int *bound, zt_err *err) {
    const zt_backend *be = e->be;
    int fp32 = be->compute_dtype == ZT_F32;
    double E = (double)facts_esz(e);
    size_t N = e->lay.opt_hi - e->lay.opt_lo;
    /* 2^24 elements (256 MiB of fp32 master, m, v, grads): beyond any CPU cache, so the CPU Adam is
     * timed at its memory-bound speed; at 2^20 it ran from cache 5x faster than in real steps */
    size_t n = max_sz(min_sz(N, (size_t)1 << 24), 4096);
    double rates[4];
    int passes = 0, settled = 0;
    calibrate(e, n, rates, &passes, &settled);
    e->comm->allreduce_host_double(e->comm, rates, 4);
    for (int i = 0; i < 4; i++) rates[i] /= e->lay.world;
    int calibrated = rates[0] > 0 && rates[1] > 0 && rates[2] > 0 && rates[3] > 0;
    double H = calibrated ? fmin(rates[0], fmin(rates[2] / E, rates[3] / E)) : 0, D = rates[1];
    double r_speed = calibrated ? H / (H + D) : 1.0;
    /* the speculative step's overlap (above): the step's compute F, from the slowest rank's GEMM rate */
    double gemm[1] = {e->off.super_offload && !e->off.delayed_update && !e->off.nvme_path ? gemm_rate(e) : 0};
    int counted = e->comm->agree_max(e->comm, gemm[0] > 0 ? 0 : 1) == 0; /* every rank measured one */
    gemm[0] = counted ? 1.0 / gemm[0] : 0;
    e->comm->allreduce_host_double(e->comm, gemm, 1); /* the sum of 1/rate: their mean, below */
    double F = counted ? e->off.step_flops * gemm[0] / e->lay.world : 0;
    if (calibrated && counted && N) r_speed = fmin(1.0, (F + (double)N / D) / ((double)N / H + (double)N / D));

    /* device bound */
    double K = fp32 ? 8 : 12, dev_budget = e->off.device_memory, dev_avail = 0;
    size_t free_now = 0, total_dev = 0;
    be->mem_info(&free_now, &total_dev);
    int dev_is_host = total_dev == 0; /* the CPU backend: "device" buffers are host memory */
    int dev_limited = dev_budget > 0 || !dev_is_host;
    char why_dev[200] = "device memory is host memory: no device budget";
    if (dev_budget > 0) {
        double other = (double)mem_sum(e->mem->device); /* params, grads, comm buffers allocated so far */
        dev_avail = dev_budget - other;
        char b1[32], b2[32];
        fmt_bytes(b1, dev_budget), fmt_bytes(b2, other);
        snprintf(why_dev, sizeof why_dev, "budget %s (device_memory) less %s of other device buffers", b1, b2);
    } else if (dev_limited) {
        dev_avail = (double)free_now - e->off.device_reserve;
        char b1[32], b2[32];
        fmt_bytes(b1, (double)free_now), fmt_bytes(b2, e->off.device_reserve);
        snprintf(why_dev, sizeof why_dev, "%s free less %s kept for activations and scratch", b1, b2);
    }
    double r_min = dev_limited && N ? 1.0 - dev_avail / ((double)N * K) : 0.0;

    /* host bound */
    double fixed, B = host_part_bytes(e, &fixed), host_avail = 0, shared = 0; /* shared: the device part's bytes */
    int host_limited = 1;
    char why_host[240];
    if (e->off.host_memory > 0) {
        double other = (double)mem_sum(e->mem->host);
        host_avail = e->off.host_memory - other;
        char b1[32], b2[32];
        fmt_bytes(b1, e->off.host_memory), fmt_bytes(b2, other);
        snprintf(why_host, sizeof why_host, "budget %s (host_memory) less %s of other host buffers", b1, b2);
    } else {
        double avail = mem_available();
        /* the engine's comm is the data-parallel group; a tensor-parallel group's tp ranks sit on one
         * machine together, so each data-parallel rank here stands for tp of them */
        int node_ranks = zt_comm_ranks_on_node(e->comm) * e->table->tp_size;
        host_limited = avail >= 0;
        if (dev_is_host) shared = K; /* the device part comes out of the same memory */
        host_avail = avail / node_ranks - e->off.host_reserve;
        char b1[32], b2[32];
        fmt_bytes(b1, avail / node_ranks), fmt_bytes(b2, e->off.host_reserve);
        snprintf(why_host, sizeof why_host, "%s available (%s / %d rank(s) on this machine) less %s for "
                 "the run's other host memory%s", b1, zt_clock_host_available() >= 0 ? "the clock's free host memory" : "MemAvailable", node_ranks, b2,
                 shared ? " and the device part (host memory on this backend)" : "");
        if (!host_limited) snprintf(why_host, sizeof why_host, "no /proc/meminfo: no host bound");
    }
    /* fixed + N (r B + (1 - r) shared) <= host_avail */
    double r_max = host_limited && N ? (host_avail - fixed - (double)N * shared) / ((double)N * (B - shared)) : 1.0;

    /* every rank takes the tightest window: r_min rounded up, r_max down, in millionths */
    int own_empty = fmax(r_min, 0.0) > fmin(r_max, 1.0);
    r_min = e->comm->agree_max(e->comm, (int)ceil(fmin(fmax(r_min, 0.0), 2.0) * 1e6)) / 1e6;
    r_max = -e->comm->agree_max(e->comm, -(int)floor(fmax(fmin(r_max, 1.0), -1.0) * 1e6)) / 1e6;
    if (r_min > r_max) {
        char dn[32], hn[32], da[32], ha[32], lo[64], hi[64];
        fmt_bytes(dn, (double)N * K), fmt_bytes(hn, fixed + (double)N * B);
        fmt_bytes(da, fmax(dev_avail, 0.0)), fmt_bytes(ha, fmax(host_avail, 0.0));
        if (r_min > 1) snprintf(lo, sizeof lo, "the device is short even with everything on the host");
        else snprintf(lo, sizeof lo, "at least %.3f must go to the host", r_min);
        if (r_max < 0) snprintf(hi, sizeof hi, "the host is short even with nothing offloaded");
        else snprintf(hi, sizeof hi, "at most %.3f fits there", r_max);
        return zt_fail(err,
                       "twin-flow: ratio auto: no offload ratio fits both memories: rank %d's %zu optimizer elements "
                       "need %s on the device at ratio 0 and %s on the host at ratio 1 (ratio r puts r of them on "
                       "the host); the device has %s for them (%s), the host %s (%s)%s: %s, %s; use a higher ZeRO "
                       "stage or more ranks (`zerotrain estimate CONFIG --ranks N` shows the memory per rank of "
                       "each), or raise zero_optimization.offload_optimizer.device_memory / host_memory",
                       e->lay.rank, N, dn, hn, da, why_dev, ha, why_host,
                       own_empty ? "" : " (this rank fits; the others' bounds do not)", lo, hi);
    }
    double r = r_speed;
    *bound = TWIN_BOUND_SPEED;
    if (r < r_min) r = r_min, *bound = TWIN_BOUND_DEVICE;
    if (r > r_max) r = r_max, *bound = TWIN_BOUND_HOST;
    r = fmin(fmax(r, 0.0), 1.0);
    static const char *const bound_names[] = {"speed", "device memory", "host memory"};
    if (!calibrated)
        zt_warn("twin-flow: ratio auto: calibration failed (out of memory?); offloading as much as the memories "
                "allow");
    char balance[200];
    if (counted && calibrated)
        snprintf(balance, sizeof balance, "with super_offload's overlap of the step's compute (F = %.1f ms: %.3g "
                 "TFLOP at the device's %.1f TFLOP/s on the model's %dx%dx%d GEMM), (F+N/D)/(N/H+N/D) = %.3f", F * 1e3,
                 e->off.step_flops * 1e-12, F > 0 ? e->off.step_flops / F * 1e-12 : 0.0, e->off.step_gemm[0],
                 e->off.step_gemm[1], e->off.step_gemm[2], r_speed);
    else
        snprintf(balance, sizeof balance, "H/(H+D) = %.3f", calibrated ? r_speed : 1.0);
    zt_info("twin-flow: ratio auto = %.3f (decided by %s): CPU Adam %.0f M el/s (%s, %d thread(s)), device Adam "
            "%.0f M el/s, D2H %.2f GB/s, H2D %.2f GB/s, measured together on %zu elements (%s, %d+ passes each); "
            "host pipeline %.0f M el/s -> balanced ratio %s; device: %s -> ratio >= %.3f; host: %s, %.0f B per offloaded element "
            "-> ratio <= %.3f",
            r, bound_names[*bound], rates[0] * 1e-6,
            fp32 ? "fp32 gradients and parameters" : "16-bit gradients widened, 16-bit parameters written",
            e->off.host_threads > 0 ? e->off.host_threads : zt_clock_host_cores(), D * 1e-6, rates[2] * 1e-9,
            rates[3] * 1e-9, n, settled ? "settled" : "not settled: the median", passes, H * 1e-6,
            balance, why_dev, fmax(r_min, 0.0), why_host, B, fmin(r_max, 1.0));
    *ratio = r;
    return 0;
}
