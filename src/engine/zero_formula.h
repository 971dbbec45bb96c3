/* zero_formula.h — per-rank model-state bytes of each ZeRO stage (Rajbhandari et al. 2020,
 * section 5), shared by the engine's accounting check and `zerotrain estimate`; and the memory
 * formulas `estimate` uses for offload: stage-3 gather buffers, ZeRO-Infinity's NVMe placement
 * (Rajbhandari et al. 2021) and the Twin-Flow ratio window. Ψ/N is one rank's shard. */
#ifndef ZT_ZERO_FORMULA_H
#define ZT_ZERO_FORMULA_H

#include <stddef.h>

/* The partition: total elements padded to world * shard, shard a multiple of align. */
static inline size_t zt_zero_shard(size_t total, int world, size_t align) {
    size_t per = (total + (size_t)world - 1) / (size_t)world;
    return (per + align - 1) / align * align;
}

/* Model-state bytes per rank for Ψ = world * shard padded parameters, compute dtype of P bytes and
 * K bytes of optimizer state per parameter (fp32 master + m + v = 12; on fp32 backends the master
 * aliases the parameters, K = 8):
 *   stage 0: (2P + K) Ψ    stage 1: 2P Ψ + K Ψ/N    stage 2: P Ψ + (P + K) Ψ/N    stage 3: (2P + K) Ψ/N
 * With P = 2 and K = 12 these are the paper's 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N and 16Ψ/N. */
static inline size_t zt_zero_model_state_bytes(int stage, size_t P, size_t K, size_t shard, int world) {
    size_t psi = shard * (size_t)world;
    switch (stage) {
    case 0: return (2 * P + K) * psi;
    case 1: return 2 * P * psi + K * shard;
    case 2: return P * psi + (P + K) * shard;
    default: return (2 * P + K) * shard;
    }
}

/* Stages 2-3 with the whole optimizer shard in host memory (offload_optimizer cpu, ratio 1): the
 * gradients go to the host bucket by bucket (zero_comm.c), so no gradient shard stays on the device.
 * A bucket's piece of this rank's shard is at most LANDING elements: reduce_bucket_size (< 1: a whole
 * segment), at most the largest segment and the shard. With several ranks the device keeps
 * LANDING_SLOTS such landing zones for reductions in flight (two with overlap_comm, one without);
 * the host keeps GRADS_STAGING staging buffers of LANDING elements (one piece is added on the host
 * while the next comes down into the other). */
#define GRADS_STAGING 2
static inline size_t zt_zero_landing_elems(double bucket, size_t largest_segment, size_t shard) {
    size_t n = largest_segment < shard ? largest_segment : shard;
    return bucket >= 1 && bucket < (double)n ? (size_t)bucket : n;
}
static inline int zt_zero_landing_slots(int overlap_comm) { return overlap_comm ? 2 : 1; }
/* The device bytes the reduced gradients take at stages 2-3 besides the segment pools, on either path
 * (offload_optimizer.gradients; engine.c chooses, estimate shows the choice): kept on the device, a
 * shard of P-byte elements and, on several ranks, a shard-sized landing zone; sent to the host, the
 * landing zones above only (none on one rank: a bucket goes down from its gradient buffer). */
static inline double zt_zero_grads_device_bytes(int to_host, size_t P, size_t shard, size_t landing, int slots,
                                                int world) {
    if (to_host) return world > 1 ? (double)P * (double)landing * slots : 0;
    return (double)P * (double)shard * (world > 1 ? 2 : 1);
}
/* The host bytes the host path adds besides the gradients themselves: GRADS_STAGING staging buffers of
 * a bucket's piece, and per CHUNK elements of the shard (the sumsq chunk) the chunk's sum of squares
 * (8 B) and its count of landed elements (4 B), which let the norm be summed as the gradients land. */
static inline double zt_zero_grads_host_bytes(size_t P, size_t landing, size_t shard, size_t chunk) {
    return (double)GRADS_STAGING * (double)P * (double)landing + 12.0 * (double)((shard + chunk - 1) / chunk);
}

/* DeepSpeed's stage3_max_live_parameters 0 leaves no room to prefetch (its budget is the bound less
 * what is gathered): the least working set, not "no bound". The engine's bound: < 0 for that. */
static inline double zt_zero3_live_bound(double deepspeed_value) { return deepspeed_value == 0 ? -1 : deepspeed_value; }

/* Stage 3's prefetch depth: how many segments are gathered ahead of use. DeepSpeed's
 * stage3_prefetch_bucket_size is the elements fetched ahead: as many of the largest segment as it
 * holds, at least one (0 turns prefetch off), at most ZT_MAX_PREFETCH; then fewer while the gather
 * buffers (EMBED's own, 1 + depth rotating ones of LARGEST, the RESIDENTS) exceed
 * stage3_max_live_parameters (BOUND, 0 = none, < 0 = the least working set: no prefetch). */
#define ZT_MAX_PREFETCH 4
static inline int zt_zero3_prefetch_depth(double bucket, double bound, size_t embed, size_t largest, size_t residents) {
    if (bucket < 1 || largest == 0 || bound < 0) return 0;
    double fit = bucket / (double)largest;
    int depth = fit < 2 ? 1 : fit >= ZT_MAX_PREFETCH ? ZT_MAX_PREFETCH : (int)fit;
    while (depth > 0 && bound > 0 && (double)embed + (1.0 + depth) * (double)largest + (double)residents > bound) depth--;
    return depth;
}

/* Stage 3's gather buffers (bytes): the embedding segment, kept gathered for both ends of the
 * forward pass (0 when it is gathered in row blocks), and 1 + PREFETCH_DEPTH buffers of the largest
 * other segment (the one in use and the ones being gathered ahead). */
static inline double zt_zero3_gather_bytes(size_t P, size_t embed_elems, size_t largest_elems, int prefetch_depth) {
    return (double)P * ((double)embed_elems + (1.0 + prefetch_depth) * (double)largest_elems);
}

/* Host bytes per element of the optimizer shard that Twin-Flow puts in host memory: fp32 master,
 * m and v (12) and the gradient / updated-parameter transfer buffers (4: two 16-bit, or one fp32
 * gradient on fp32 backends whose master is the parameter upload itself). */
#define ZT_TWIN_HOST_BYTES 16

/* checkpoint.async_save's host staging buffer: the snapshot of a rank's shard of fp32 master, m and v
 * (io/checkpoint_async.c), 12 B an element */
static inline double zt_async_save_staging_bytes(size_t shard) { return 12.0 * (double)shard; }

/* ZeRO-Infinity optimizer offload to NVMe (engine_infinity.c): the K Ψ/N bytes of optimizer state
 * live on NVMe in groups of G = min(sub_group_size, Ψ/N) elements (rounded up to 2048); the host
 * stages min(BUFFER_COUNT, groups) groups of 12 B per element (fp32 master + m + v). */
static inline double zt_nvme_optimizer_staging_bytes(int buffer_count, double sub_group_size, size_t shard) {
    double sub = sub_group_size < (double)shard ? sub_group_size : (double)shard;
    sub = sub < 2048 ? 2048 : ((double)(size_t)((sub + 2047) / 2048)) * 2048; /* 0: the smallest group */
    double groups = (double)(size_t)(((double)shard + sub - 1) / sub), nbuf = buffer_count < groups ? buffer_count : groups;
    return nbuf * sub * 12.0;
}

/* ZeRO-Infinity parameter offload to NVMe: the host keeps BUFFER_COUNT staging buffers (the piece of
 * a segment being gathered and the next ones read ahead), each the largest piece: at most the
 * largest segment, at most the shard, P bytes per element (offload_param.buffer_size only has to
 * allow it) rounded up to a 4 KiB block, plus two blocks of alignment. */
static inline double zt_nvme_param_staging_bytes(int buffer_count, size_t largest_segment, size_t shard, size_t P) {
    size_t piece = largest_segment < shard ? largest_segment : shard;
    size_t blocks = (piece * P + 4095) / 4096 + 2;
    return (double)(buffer_count > 0 ? buffer_count : 1) * (double)blocks * 4096.0;
}

/* Twin-Flow (offload_optimizer cpu, ratio r): of a rank's optimizer shard of OPT_N elements, the
 * share r lives in host memory, HOST_PER_ELEM bytes per element, and 1 - r stays on the device, K
 * bytes per element. With DEVICE_AT_0 the device bytes at r = 0 (nothing offloaded):
 *   device(r) = DEVICE_AT_0 - r K OPT_N <= DEVICE_MEM   gives r >= r_min
 *   host(r)   = r HOST_PER_ELEM OPT_N  <= HOST_MEM     gives r <= r_max
 * The window is [r_min, r_max] clamped to [0, 1]; empty when r_min > 1 (the device does not fit even
 * with everything offloaded: short = device(1) - DEVICE_MEM) or r_min > r_max (the host cannot take
 * r_min: short = host(r_min) - HOST_MEM). */
typedef struct zt_twin_window {
    int fits;                 /* 1: every r in [r_min, r_max] fits both */
    double r_min, r_max;
    int short_on_device;      /* when it does not fit: 1 device, 0 host */
    double short_bytes;
} zt_twin_window;

static inline zt_twin_window zt_twin_ratio_window(double device_at_0, size_t K, size_t host_per_elem, size_t opt_n,
                                                   double device_mem, double host_mem) {
    zt_twin_window w = {0, 0, 1, 0, 0};
    double dev_part = (double)K * (double)opt_n, host_part = (double)host_per_elem * (double)opt_n;
    double need = device_at_0 - device_mem; /* bytes that must leave the device */
    w.r_min = need <= 0 ? 0 : dev_part > 0 ? need / dev_part : 2;
    w.r_max = host_part > 0 ? host_mem / host_part : 1;
    if (w.r_max > 1) w.r_max = 1;
    if (w.r_min > 1) {
        w.short_on_device = 1;
        w.short_bytes = device_at_0 - dev_part - device_mem;
    } else if (w.r_min > w.r_max) {
        w.short_bytes = w.r_min * host_part - host_mem;
    } else {
        w.fits = 1;
    }
    return w;
}

#endif
