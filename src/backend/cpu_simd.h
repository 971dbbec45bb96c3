/* cpu_simd.h — the widest SIMD this CPU (with its OS) runs, from cpuid: what the CPU kernels choose
 * their path by (cpu_kernels.c) and what the OpenBLAS kernel choice compares its core with
 * (blas_core.c). Below both, so that neither reads the other to learn it. */
#ifndef ZT_CPU_SIMD_H
#define ZT_CPU_SIMD_H

/* The widest SIMD a kernel family uses, or a CPU (with its OS) runs; ordered. */
typedef enum { ZT_SIMD_SSE = 0, ZT_SIMD_AVX = 1, ZT_SIMD_AVX2 = 2, ZT_SIMD_AVX512 = 3 } zt_simd;

/* "SSE", "AVX", "AVX2+FMA", "AVX-512" */
const char *zt_simd_name(zt_simd s);

/* This CPU's widest level, from cpuid and the OS's saved register state (libgcc's
 * __builtin_cpu_supports): AVX-512 = F, BW, DQ, VL and CD (what OpenBLAS's SkylakeX kernels use);
 * AVX2 = AVX2 and FMA. *amd (may be NULL) gets 1 on an AMD CPU. */
zt_simd zt_cpu_simd(int *amd);

#endif
