/* selftest.h — op-by-op comparison of a device backend against the CPU reference backend.
 * `zerotrain selftest` (zt_cmd_selftest in commands.h) runs it; the pieces are exported so that
 * later parts of the selftest (training steps, NCCL vs MPI) can reuse the tally and the helpers. */
#ifndef ZT_SELFTEST_H
#define ZT_SELFTEST_H

#include <stddef.h>
#include <stdint.h>
#include "backend.h"

typedef struct zt_selftest {
    const zt_backend *ref; /* reference: the CPU backend (fp32) */
    const zt_backend *dev; /* backend under test */
    uint64_t seed;
    int passed, failed;
} zt_selftest;

/* Prints "PASS name (err E <= tol T)" or "FAIL name: err E > tol T" and counts it. */
void zt_selftest_check(zt_selftest *st, const char *name, double err, double tol);
/* Norm-wise relative error ||a - b|| / ||b|| (b is the reference); inf if a has a non-finite value. */
double zt_selftest_rel_err(const float *a, const float *b, size_t n);

/* Every op of the table on random inputs (rounded to bf16 so both backends see the same numbers). */
void zt_selftest_ops(zt_selftest *st);

#endif
