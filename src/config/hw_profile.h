/* hw_profile.h — a hardware profile: what one op, copy, host pass or collective costs on a given
 * GPU machine, read from YAML (configs/hw/NAME.yaml, or any file of that shape). Owns the profile's
 * keys and units, its lookup by name, and the cost functions the virtual clock (backend/sim_clock.c)
 * charges each lane with: this module knows nothing of lanes, it only prices work.
 * Every key is required (a profile that leaves a cost out would predict nothing for it silently);
 * an unknown key is an error, with the file position, as in a config file. Units in the file are
 * the ones datasheets use (GB/s, TFLOP/s, microseconds, sizes with units); the struct holds SI
 * (bytes/s, FLOP/s, seconds, bytes). */
#ifndef ZT_HW_PROFILE_H
#define ZT_HW_PROFILE_H

#include "backend/backend.h"
#include "util/util.h"

#define ZT_HW_CURVE_MAX 16

/* an efficiency curve: [size, efficiency] pairs, interpolated linearly in log size, flat past either end */
typedef struct zt_hw_curve {
    int n;
    double size[ZT_HW_CURVE_MAX], eff[ZT_HW_CURVE_MAX]; /* size increasing, eff in (0, 1] */
} zt_hw_curve;

/* GEMM throughput of one dtype: peak FLOP/s times an efficiency. `square` is read by the GEMM's size,
 * the cube root of M*N*K. A GEMM with one dimension far longer than the other two (GPT-2's LM head:
 * the vocabulary against n_embd and the tokens) runs slower than the square of its size on a CPU's
 * BLAS; where the profile measured it, `long_out` (the long dimension is C's rows or columns) and
 * `long_k` (it is the reduction) are read by the geometric mean of the two short dimensions, and the
 * GEMM gets the lower of that and the square curve's figure (n 0: not measured, the square curve alone).
 * `long_rows`, where measured, takes the GEMMs whose long dimension is C's rows (M: the LM head's dW,
 * [V, C] = dout^T inp), which a CPU's BLAS runs at a rate of their own; without it long_out does. */
typedef struct zt_hw_gemm {
    double peak_flops;
    zt_hw_curve square, long_out, long_k, long_rows;
} zt_hw_gemm;

typedef struct zt_hw_profile {
    char name[64];
    char path[512];                    /* the file it was read from */
    /* device */
    double dev_memory;                 /* bytes */
    double dev_bw;                     /* bytes/s of element-wise traffic (read + write) */
    double launch_s;                   /* host time to queue one kernel or copy */
    double kernel_min_s;               /* the shortest kernel */
    double sync_s;                     /* a synchronize that waits: the host resumes this late */
    double operand_bw;                 /* bytes/s at which an op's operands are read whole before it runs
                                        * (the simulated GPU widens 16-bit buffers); 0: not at all (a GPU) */
    double xent_bw;                    /* bytes/s of logits through the softmax cross-entropies (an exp per
                                        * logit); 0: at dev_bw, memory-bound (a GPU) */
    double round_bw;                   /* bytes/s at which the operands an op wrote are rounded back to 16
                                        * bits after it ran (the simulated GPU); 0: not at all (a GPU) */
    zt_hw_gemm gemm[3];                /* by zt_dtype: ZT_F32, ZT_BF16, ZT_F16 */
    double attn_flops[3];              /* causal attention FLOP/s by zt_dtype */
    /* PCIe, per direction: bytes/s, pinned and pageable host memory; fixed cost per copy */
    double h2d_pinned, d2h_pinned, h2d_pageable, d2h_pageable, pcie_latency_s;
    /* host */
    double host_memory, host_bw;       /* bytes, bytes/s */
    int host_cores;
    double adam_per_core;              /* CPU AdamW elements/s per core (compute-bound) */
    double memcpy_bw;                  /* one thread's memcpy / cast, bytes/s (read + write) */
    /* NVMe */
    double nvme_read, nvme_write, nvme_latency_s;
    /* collectives: bus bandwidth (bytes/s) and latency per step of the algorithm */
    double intra_bw, intra_lat_s, inter_bw, inter_lat_s;
    int gpus_per_node;                 /* GPUs on one node's fast links (intra_node); its host serves them all */
} zt_hw_profile;

/* Loads a profile: SPEC is a path (it contains '/' or ends in .yaml) or a name looked up as
 * NAME.yaml in $ZEROTRAIN_HW_DIR, then configs/hw/ beside the executable, then ./configs/hw/.
 * An unknown name lists the profiles that exist. */
int zt_hw_profile_load(zt_hw_profile *p, const char *spec, zt_err *err);

/* ---- costs, in seconds ---- */
/* an [M,K] x [K,N] GEMM in dtype dt (2 M N K FLOPs), at least kernel_min_s */
double zt_hw_gemm_seconds(const zt_hw_profile *p, zt_dtype dt, double M, double N, double K);
/* efficiency of dt's GEMM of that size (for reports) */
double zt_hw_gemm_efficiency(const zt_hw_profile *p, zt_dtype dt, double M, double N, double K);
/* causal attention of `flops` FLOPs */
double zt_hw_attention_seconds(const zt_hw_profile *p, zt_dtype dt, double flops);
/* an element-wise kernel moving `bytes` (read + write) through device memory */
double zt_hw_elementwise_seconds(const zt_hw_profile *p, double bytes);
/* a softmax cross-entropy moving `bytes` of logits and their gradient (at xent_bw, else dev_bw) */
double zt_hw_xent_seconds(const zt_hw_profile *p, double bytes);
/* an op's operands: `widened` bytes (their whole extents) read before it runs, `rounded` bytes of them
 * (the written ones) written back after; each 0 where its rate is 0 */
double zt_hw_operand_seconds(const zt_hw_profile *p, double widened, double rounded);
/* a PCIe copy of `bytes` in direction kind (ZT_H2D or ZT_D2H), from pinned or pageable host memory */
double zt_hw_pcie_seconds(const zt_hw_profile *p, zt_copy_kind kind, int pinned, double bytes);
/* CPU AdamW over n elements on `threads` threads (0: every core; bandwidth- or compute-bound, whichever binds),
 * moving bytes_per_elem through host memory */
double zt_hw_host_adam_seconds(const zt_hw_profile *p, double n, int threads, double bytes_per_elem);
/* a host memcpy or cast moving `bytes` (read + write) on `threads` threads (0: every core): each
 * thread at the memcpy rate, all of them at most at the host's memory bandwidth */
double zt_hw_host_copy_seconds(const zt_hw_profile *p, double bytes, int threads);
/* NVMe read or write of `bytes` */
double zt_hw_nvme_seconds(const zt_hw_profile *p, int write, double bytes);

#endif
