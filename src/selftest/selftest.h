/* selftest.h — the selftest harness: a device backend checked against the CPU reference backend,
 * op by op (selftest_ops.c; the Llama family's ops in selftest_llama_ops.c), in training
 * (selftest_train.c) and in its comms (selftest_comm.c, selftest_watchdog.c), with the tally and the test buffers they share (selftest_util.c), and the
 * op timings of `--bench` (selftest_bench.c). `zerotrain selftest` (src/cmd/selftest.c, on the
 * floor above) reads the arguments and runs them. */
#ifndef ZT_SELFTEST_H
#define ZT_SELFTEST_H

#include <stddef.h>
#include <stdint.h>
#include "backend/backend.h"
#include "util/util.h"

/* Tolerances of the device-vs-CPU checks, norm-wise relative (derived in selftest_ops.c) */
#define TOL_ROUND 4e-3 /* one 16-bit rounding of an fp32-exact result */
#define TOL_BF16 1e-2  /* outputs of reductions, rounded once */
#define TOL_ATTN 2e-2  /* attention backward: three roundings */
#define TOL_F32 1e-5   /* fp32 outputs: operation order only */

typedef struct zt_selftest {
    const zt_backend *ref; /* reference: the CPU backend (fp32) */
    const zt_backend *dev; /* backend under test */
    uint64_t seed;
    int passed, failed;
    int verbose;           /* print PASS lines (rank 0); FAIL lines are always printed */
    const char *tag;       /* prefix of every check's name ("bf16 ", "fp16 "), or NULL */
    int device_kind;       /* ZT_DEVICE_* of dev: the simulated GPU has no NCCL (host-staged comm instead) */
} zt_selftest;

/* Prints "PASS name (err E <= tol T)" or "FAIL name: err E > tol T" and counts it. */
void zt_selftest_check(zt_selftest *st, const char *name, double err, double tol);
/* Norm-wise relative error ||a - b|| / ||b|| (b is the reference); inf if a has a non-finite value. */
double zt_selftest_rel_err(const float *a, const float *b, size_t n);

/* Every op of the table on random inputs (rounded to the device's 16-bit type, bf16 for fp32, so
 * both backends see the same numbers). */
void zt_selftest_ops(zt_selftest *st);
/* The Llama family's ops (grouped-query attention, RMSNorm, rope, SwiGLU; selftest_llama_ops.c), the
 * last part of zt_selftest_ops, with its random stream; an entry either backend lacks is skipped. */
void zt_selftest_llama_ops(zt_selftest *st, zt_rng *rng);

/* The tiny GPT-2's 20 training steps on st->dev against the CPU trajectory (selftest_train.c);
 * skipped under mpirun with more than one rank. */
void zt_selftest_training(zt_selftest *st);

/* NCCL collectives (device buffers) against the MPI ones (host buffers) on random per-rank data.
 * Needs st->dev to be the CUDA backend; with a single rank both are one-rank communicators. */
void zt_selftest_comm(zt_selftest *st);

/* The NCCL side of the hang watchdog (selftest_watchdog.c): after the NCCL collectives ran with the
 * watchdog watching, it saw them all complete; and a collective hung on the GPU (in a child process,
 * `selftest --nccl-hang-child`, which zt_selftest_nccl_hang_child runs) ends that process with the
 * watchdog's line. */
void zt_selftest_nccl_watchdog_healthy(zt_selftest *st);
void zt_selftest_nccl_watchdog_hang(zt_selftest *st);
int zt_selftest_nccl_hang_child(void);
/* `selftest --singleton-probe`: a child spawned the way the hang check spawns it (an MPI singleton
 * of its own, `selftest --singleton-child`) starts MPI as a world of one; exit status 0 when it did */
int zt_selftest_singleton_probe(void);
int zt_selftest_singleton_child(void);

/* For the training part of the selftest: checks a device loss trajectory against the reference
 * one step by step; err = max_i |dev_i - ref_i| / |ref_i| (inf if a device loss is not finite).
 * Prints one PASS/FAIL line naming the worst step; returns 0 on pass, -1 on failure. */
int zt_selftest_check_losses(zt_selftest *st, const char *name, const float *dev, const float *ref, int n, double tol);

/* `selftest --bench`: times every op at GPT-2 124M shapes with B x T rows; prints "BENCH" lines. */
int zt_selftest_bench(const zt_backend *be, int B, int T);

/* Helpers shared by the selftest's files (selftest_util.c defines them): host buffers of random
 * values rounded to the input dtype, device buffers in the compute dtype (c) or fp32 (f), ints (i).
 * Allocation failures end the selftest with a message. */
void st_set_input_dtype(zt_dtype dtype); /* what st_rnd rounds to: ZT_BF16 (the default) or ZT_F16 */
float st_round_input(float x);          /* x rounded to that dtype, back in fp32 */
float *st_rnd(zt_rng *rng, size_t n, float scale, float offset);
float *st_zeros(size_t n);
void *st_alloc(const zt_backend *be, size_t bytes);
void *st_up_c(const zt_backend *be, const float *h, size_t n);
void st_down_c(const zt_backend *be, float *h, const void *d, size_t n);
float *st_up_f(const zt_backend *be, const float *h, size_t n);
void st_down_f(const zt_backend *be, float *h, const float *d, size_t n);
int *st_up_i(const zt_backend *be, const int *h, size_t n);
size_t st_count_diff(const float *a, const float *b, size_t n); /* elements whose bits differ */

#endif
