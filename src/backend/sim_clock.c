/* sim_clock.c — the simulated GPU's virtual clock (sim_clock.h). Each host thread's time is a
 * thread-local double; each device lane's time lives here too, written only by the lane's thread;
 * the statistics are summed under one lock (they are read between steps, never on a hot path that
 * matters: the sim's own op is far slower than the lock). */
#include "backend/sim_clock.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const zt_sim_lane_names[ZT_SIM_NLANES] = {"compute", "h2d", "d2h", "side (copy_ahead)", "comm"};

static zt_hw_profile g_prof;
static int g_timed;
static __thread double t_now; /* the calling host thread's virtual time */
static double g_lane_end[ZT_SIM_NLANES];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static zt_sim_stats g_st;
static double g_dev_used;

static double vnow(void) { return t_now; }
static void vafter(double t) {
    if (t > t_now) t_now = t;
}
static void vhost_work(int kind, double amount, double bytes, int threads) {
    double s = 0;
    switch (kind) {
    case ZT_WORK_ADAM: s = zt_hw_host_adam_seconds(&g_prof, amount, threads, amount > 0 ? bytes / amount : 0); break;
    case ZT_WORK_COPY: s = zt_hw_host_copy_seconds(&g_prof, bytes, threads); break;
    default: return;
    }
    t_now += s;
    pthread_mutex_lock(&g_mu);
    g_st.host_busy[kind] += s;
    pthread_mutex_unlock(&g_mu);
}
/* the NVMe drive: reads and writes each in issue order (a drive serves both at once, each at its
 * own datasheet rate) */
static double g_queue_end[ZT_QUEUE_NKIND];
static double vqueue(int queue, double bytes) {
    double cost = zt_hw_nvme_seconds(&g_prof, queue == ZT_QUEUE_NVME_WRITE, bytes);
    pthread_mutex_lock(&g_mu);
    double start = fmax(g_queue_end[queue], t_now), end = start + cost;
    g_queue_end[queue] = end;
    g_st.queue_busy[queue] += cost;
    pthread_mutex_unlock(&g_mu);
    return end;
}
static zt_clock_ops g_ops = {vnow, vafter, vhost_work, vqueue, 0, 0, 0};
static int g_node_ranks = 1;

void zt_sim_set_node_ranks(int ranks) { g_node_ranks = ranks > 1 ? ranks : 1; }

int zt_sim_clock_start(zt_err *err) {
    const char *spec = getenv("ZEROTRAIN_SIM_PROFILE");
    if (!spec || !*spec) return 0;
    if (zt_hw_profile_load(&g_prof, spec, err)) return -1;
    if (g_node_ranks > 1) { /* this rank's share of the machine's host: its memory, bandwidth and cores */
        g_prof.host_memory /= g_node_ranks, g_prof.host_bw /= g_node_ranks;
        g_prof.host_cores = g_prof.host_cores > g_node_ranks ? g_prof.host_cores / g_node_ranks : 1;
    }
    g_timed = 1;
    const char *dry = getenv("ZEROTRAIN_SIM_DRY");
    g_ops.costs_only = dry && *dry && strcmp(dry, "0") != 0;
    g_ops.host_bytes = g_prof.host_memory; /* host buffers are address space then: the profile's memory binds */
    g_ops.host_cores = g_prof.host_cores;
    zt_clock_install(&g_ops);
    return 0;
}

const zt_hw_profile *zt_sim_profile(void) { return g_timed ? &g_prof : NULL; }

void zt_sim_stats_get(zt_sim_stats *s) {
    pthread_mutex_lock(&g_mu);
    *s = g_st;
    pthread_mutex_unlock(&g_mu);
}

void zt_sim_stats_reset(void) {
    pthread_mutex_lock(&g_mu);
    double peak = g_st.dev_peak;
    memset(&g_st, 0, sizeof g_st);
    g_st.dev_peak = peak;
    pthread_mutex_unlock(&g_mu);
}

double sim_clock_launch(void) {
    if (g_timed) t_now += g_prof.launch_s;
    return t_now;
}

void sim_clock_host_waited(double t) {
    if (!g_timed) return;
    /* a wait that finds the item already done costs nothing more; one that blocks wakes late */
    if (t > t_now) t_now = t + g_prof.sync_s;
    pthread_mutex_lock(&g_mu);
    g_st.syncs++;
    pthread_mutex_unlock(&g_mu);
}

double sim_clock_lane_run(int lane, double ready, double dep, double cost, double flops) {
    double free_at = g_lane_end[lane];
    double start = fmax(free_at, fmax(ready, dep)), end = start + cost;
    g_lane_end[lane] = end;
    pthread_mutex_lock(&g_mu);
    g_st.busy[lane] += cost;
    g_st.items[lane]++;
    g_st.flops += flops;
    if (lane == ZT_SIM_COMPUTE && start > free_at) { /* idle: say what it waited for */
        if (ready >= dep) g_st.compute_wait_host += start - fmax(free_at, dep);
        else g_st.compute_wait_lane += start - fmax(free_at, ready);
    }
    pthread_mutex_unlock(&g_mu);
    return end;
}

/* the per-item table (sim_clock.h): a small open-addressed table, filled under g_mu */
typedef struct {
    int lane;
    const char *name;
    double n;
    sim_op_sample sum; /* cost and operand_cost are the key's (one item's); the rest summed */
} op_row;
#define OP_ROWS 1024
static op_row *g_op_rows;
static char g_op_times_path[4096];

static void op_times_write(void) {
    FILE *f = fopen(g_op_times_path, "w");
    if (!f) return;
    /* price_ms and operand_ms are one item's; the rest are sums over its count */
    fprintf(f, "lane\tname\tcount\tprice_ms\toperand_ms\tflops\twidened_bytes\trounded_bytes\twall_ms\tcpu_ms\t"
               "widen_cpu_ms\tround_cpu_ms\n");
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < OP_ROWS; i++) {
        op_row *r = &g_op_rows[i];
        if (!r->name) continue;
        const sim_op_sample *s = &r->sum;
        fprintf(f, "%s\t%s\t%.0f\t%.6f\t%.6f\t%.0f\t%.0f\t%.0f\t%.6f\t%.6f\t%.6f\t%.6f\n", zt_sim_lane_names[r->lane],
                r->name, r->n, 1e3 * s->cost, 1e3 * s->operand_cost, s->flops, s->widened, s->rounded, 1e3 * s->wall,
                1e3 * s->cpu, 1e3 * s->widen_cpu, 1e3 * s->round_cpu);
    }
    pthread_mutex_unlock(&g_mu);
    fclose(f);
}

static void op_times_open(void) {
    const char *p = getenv("ZEROTRAIN_SIM_OP_TIMES");
    if (g_timed && p && *p) {
        /* one table a process: under a launcher, the node's rank R > 0 writes FILE.R (calibrate --tp reads them all) */
        int rank = zt_node_local_rank();
        if (rank > 0) snprintf(g_op_times_path, sizeof g_op_times_path, "%s.%d", p, rank);
        else snprintf(g_op_times_path, sizeof g_op_times_path, "%s", p);
        g_op_rows = calloc(OP_ROWS, sizeof *g_op_rows);
        atexit(op_times_write);
    }
}

/* the lanes' threads ask at their first items, at once: opened exactly once */
int sim_clock_op_times_on(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, op_times_open);
    return g_op_rows != NULL;
}

void sim_clock_op_measured(int lane, const char *name, const sim_op_sample *s) {
    unsigned long h = ((unsigned long)(uintptr_t)name * 31u + (unsigned long)lane) ^ (unsigned long)(s->cost * 1e9);
    pthread_mutex_lock(&g_mu);
    for (int probe = 0; probe < OP_ROWS; probe++) {
        op_row *r = &g_op_rows[(h + (unsigned long)probe) % OP_ROWS];
        if (r->name && !(r->name == name && r->lane == lane && r->sum.cost == s->cost)) continue;
        if (!r->name) *r = (op_row){.lane = lane, .name = name, .sum = {.cost = s->cost, .operand_cost = s->operand_cost}};
        sim_op_sample *t = &r->sum;
        r->n++, t->flops += s->flops, t->widened += s->widened, t->rounded += s->rounded;
        t->wall += s->wall, t->cpu += s->cpu, t->widen_cpu += s->widen_cpu, t->round_cpu += s->round_cpu;
        break;
    }
    pthread_mutex_unlock(&g_mu);
}

void sim_clock_count_pcie(zt_copy_kind kind, double bytes) {
    if (kind == ZT_D2D) return;
    pthread_mutex_lock(&g_mu);
    if (kind == ZT_H2D) g_st.bytes_h2d += bytes;
    else g_st.bytes_d2h += bytes;
    pthread_mutex_unlock(&g_mu);
}

void sim_clock_device_used(double bytes) {
    pthread_mutex_lock(&g_mu);
    g_dev_used = bytes;
    if (bytes > g_st.dev_peak) g_st.dev_peak = bytes;
    pthread_mutex_unlock(&g_mu);
}

double sim_cost_gemm(zt_dtype dt, double M, double N, double K) {
    return g_timed ? zt_hw_gemm_seconds(&g_prof, dt, M, N, K) : 0;
}
double sim_cost_bytes(double bytes) { return g_timed ? zt_hw_elementwise_seconds(&g_prof, bytes) : 0; }
double sim_cost_xent(double bytes) { return g_timed ? zt_hw_xent_seconds(&g_prof, bytes) : 0; }
double sim_cost_operands(double widened, double rounded) {
    return g_timed ? zt_hw_operand_seconds(&g_prof, widened, rounded) : 0;
}
double sim_cost_attention(zt_dtype dt, double flops) { return g_timed ? zt_hw_attention_seconds(&g_prof, dt, flops) : 0; }
double sim_cost_pcie(zt_copy_kind kind, int pinned, double bytes) {
    if (!g_timed) return 0;
    if (kind == ZT_D2D) return zt_hw_elementwise_seconds(&g_prof, 2 * bytes);
    return zt_hw_pcie_seconds(&g_prof, kind, pinned, bytes);
}
