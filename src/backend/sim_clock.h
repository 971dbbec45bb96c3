/* sim_clock.h — the simulated GPU's virtual clock (sim_clock.c): a hardware profile
 * (config/hw_profile.h) turned into time for every lane the engine uses. Owns the profile the sim
 * runs under, each host thread's virtual time, each device lane's accounting, and the figures
 * `zerotrain predict` prints. The simulated GPU drives it (backend_sim_ops.c: what each op costs;
 * backend_sim.c: the copies' costs, when each item was launched, what it waited for); nothing else
 * writes to it.
 *
 * The rules, the same for every lane:
 *   - a host thread has a time of its own (util/clock.h: zt_clock_now); queueing a kernel or copy
 *     costs it the profile's launch time, and the item may not start before it was queued;
 *   - a device lane (compute, H2D, D2H, copy_ahead's side lane, the collectives' comm lane) runs its
 *     items in order: an item starts at the latest of the lane's last end, its launch, and what it
 *     waits on (another lane's item: an event), and ends its cost later;
 *   - whatever waits takes the latest of the times it waits on: a synchronize or blocking copy
 *     moves the host thread to the item's end (plus the profile's sync latency), a host thread
 *     that waited for another (clock.h: zt_clock_after) moves to the time that one published;
 *   - host work (CPU Adam, casts) advances the thread that did it by its cost; an NVMe request
 *     queues on the drive's lane for its direction and completes at its end there.
 * Without a profile (ZEROTRAIN_SIM_PROFILE unset) every cost is 0 and the sim is untimed. */
#ifndef ZT_SIM_CLOCK_H
#define ZT_SIM_CLOCK_H

#include "backend/backend.h"
#include "config/hw_profile.h"
#include "util/clock.h"

/* ZT_SIM_COMM: the collectives' stream (NCCL's), used by the costed comm (comm/comm_costed.c) only */
enum { ZT_SIM_COMPUTE, ZT_SIM_H2D, ZT_SIM_D2H, ZT_SIM_AHEAD, ZT_SIM_COMM, ZT_SIM_NLANES };
extern const char *const zt_sim_lane_names[ZT_SIM_NLANES];

/* What the lanes did since the last zt_sim_stats_reset (seconds on the virtual clock, bytes). */
typedef struct zt_sim_stats {
    double busy[ZT_SIM_NLANES];          /* time each device lane spent running items */
    double items[ZT_SIM_NLANES];         /* items each lane ran */
    double compute_wait_host;            /* compute lane idle because its next kernel was not yet launched */
    double compute_wait_lane;            /* compute lane idle waiting on another lane (wait_ahead) */
    double host_busy[ZT_WORK_NKIND];     /* host work by kind, summed over the threads that did it */
    double queue_busy[ZT_QUEUE_NKIND];   /* NVMe reads and writes: time the drive spent on them */
    double bytes_h2d, bytes_d2h;         /* PCIe traffic */
    double flops;                        /* GEMM and attention FLOPs the compute lane ran */
    double syncs;                        /* host waits on a device lane (synchronize, blocking copies) */
    double dev_peak;                     /* device memory in use, highest (bytes; since the start) */
} zt_sim_stats;

/* Reads ZEROTRAIN_SIM_PROFILE (a profile name or file) and installs the virtual clock (clock.h);
 * 0 and nothing installed when it is unset; -1 with err when it is set but unreadable. */
int zt_sim_clock_start(zt_err *err);
/* the profile the sim runs under, NULL when untimed */
const zt_hw_profile *zt_sim_profile(void);
void zt_sim_stats_get(zt_sim_stats *s);
void zt_sim_stats_reset(void);
/* Before the sim starts: this process stands for one of `ranks` ranks sharing the profile's machine
 * (predict --ranks), so its host memory, host bandwidth and cores are the machine's divided among
 * them (default 1); zt_sim_profile() then has this rank's share. */
void zt_sim_set_node_ranks(int ranks);

/* ---- the comm lane (backend_sim.c), for the costed comm ----
 * A collective queued on it starts once the compute lane has run what was queued before it (the
 * event NCCL records) and the comm lane is free, and lasts `cost`; returns its ticket. Waiting on a
 * ticket makes the compute lane wait for that collective, not the host (NCCL's wait). */
unsigned long long zt_sim_comm_issue(double cost, const char *name);
void zt_sim_comm_wait(unsigned long long ticket);

/* ---- for backend_sim.c and backend_sim_ops.c ---- */
/* the calling thread queues an item: its time advances by the launch cost; returns the item's
 * earliest start */
double sim_clock_launch(void);
/* the calling thread has waited for a lane item that ended at t */
void sim_clock_host_waited(double t);
/* lane `lane` runs an item: launched at `ready`, waiting on `dep` (0: nothing), costing `cost`;
 * returns its end. Called on the lane's own thread only, in the lane's order. */
double sim_clock_lane_run(int lane, double ready, double dep, double cost, double flops);
void sim_clock_count_pcie(zt_copy_kind kind, double bytes);
/* ZEROTRAIN_SIM_OP_TIMES=FILE, with a profile and the items run (not dry): each lane item's real
 * wall and lane-thread CPU time (and the parts of it spent widening and rounding 16-bit operands)
 * beside its price, the price's operand part and what it was priced for, summed by lane, name and
 * price (one price is one shape), written to FILE at exit as tab-separated rows (a node's rank R > 0
 * of several writes FILE.R). Says where a real run's time goes that the virtual clock does not
 * charge; `zerotrain calibrate` prices ops from it. */
typedef struct sim_op_sample {
    double cost, operand_cost;   /* its price and the price's operand part (seconds) */
    double flops, widened, rounded; /* what it was priced for: FLOPs, 16-bit bytes widened and rounded back */
    double wall, cpu;            /* what its run took: wall time, the lane thread's CPU time */
    double widen_cpu, round_cpu; /* the parts of cpu spent widening and rounding */
} sim_op_sample;
int sim_clock_op_times_on(void);
void sim_clock_op_measured(int lane, const char *name, const sim_op_sample *s);
void sim_clock_device_used(double bytes);

/* costs (0 when untimed) */
double sim_cost_gemm(zt_dtype dt, double M, double N, double K);
double sim_cost_bytes(double bytes);               /* element-wise */
double sim_cost_xent(double bytes);                /* softmax cross-entropy over logits */
double sim_cost_attention(zt_dtype dt, double flops);
double sim_cost_pcie(zt_copy_kind kind, int pinned, double bytes);
/* an op's 16-bit operands: `widened` bytes read whole into fp32 before it runs, `rounded` bytes of them
 * (the written ones) rounded back after */
double sim_cost_operands(double widened, double rounded);

#endif
