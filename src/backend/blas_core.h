/* blas_core.h — which OpenBLAS kernels (its "core type") the process computes with, and choosing
 * better ones than the library's own choice when it fell back to old ones.
 *
 * Debian's OpenBLAS is a DYNAMIC_ARCH build: at load it reads OPENBLAS_CORETYPE, or else looks at
 * cpuid, and keeps that kernel family for the life of the process. A CPU newer than the library
 * (0.3.21 does not know Sapphire/Emerald Rapids) gets its generic fallback, the SSE3 "Prescott"
 * kernels, several times slower than the CPU's AVX-512 ones. zt_blas_core_choose() notices that
 * and re-executes the program with OPENBLAS_CORETYPE set to the best family the CPU runs.
 * A user's own OPENBLAS_CORETYPE always wins.
 *
 * Environment it reads:
 *   OPENBLAS_CORETYPE                the user's choice (non-empty: kept as it is)
 *   ZEROTRAIN_BLAS_CORE_FROM         set by zt_blas_core_choose() itself on the re-executed program
 *                                    only: the core OpenBLAS had chosen on its own (for the log line;
 *                                    and it says OPENBLAS_CORETYPE is zerotrain's, not the user's)
 *   ZEROTRAIN_INJECT_BLAS_FALLBACK=1 test hook (test_hooks.h): OPENBLAS_CORETYPE is taken as the
 *                                    library's own choice, so OPENBLAS_CORETYPE=Prescott starts the
 *                                    process on a real fallback whatever the CPU */
#ifndef ZT_BLAS_CORE_H
#define ZT_BLAS_CORE_H

#include <stddef.h>

#include "backend/cpu_simd.h" /* zt_simd: a core's level and the CPU's */

/* The SIMD level of an OpenBLAS core's kernels (case-insensitive name, as openblas_get_corename()
 * or OPENBLAS_CORETYPE spell it); -1 for a name this table does not know (a newer library). */
int zt_blas_core_simd(const char *core);

/* The choice, without looking at this machine: the core to switch to when `running` uses less SIMD
 * than the CPU's level `cpu` allows (SkylakeX for AVX-512; Zen on AMD, else Haswell, for AVX2;
 * Sandybridge for AVX), or NULL to keep it (it is as wide as the CPU, or a name the table does not
 * know). Each core it returns is one test/t_gemm_coretypes.sh checks. */
const char *zt_blas_core_better(const char *running, zt_simd cpu, int amd);

/* Call first in main(), before MPI_Init and before any thread or output. When OpenBLAS runs a
 * core zt_blas_core_better() would replace, OPENBLAS_CORETYPE is not the user's and the library is
 * DYNAMIC_ARCH, re-executes /proc/self/exe with the same argv and OPENBLAS_CORETYPE set to it; else
 * (or when exec fails, noted for zt_blas_core_line) returns. */
void zt_blas_core_choose(char **argv);

/* One line (no newline) for the log's start: which kernels run and why, and the CPU Adam's path,
 * e.g. "cpu kernels: OpenBLAS 0.3.21 SkylakeX (AVX-512), chosen by zerotrain: OpenBLAS took
 * Prescott (SSE) on this AVX-512 CPU; CPU Adam avx512; vector math avx512". Returns buf. */
char *zt_blas_core_line(char *buf, size_t cap);

#endif
