/* cpu_simd.c — the widest SIMD this CPU runs (cpu_simd.h). */
#include "backend/cpu_simd.h"

const char *zt_simd_name(zt_simd s) {
    static const char *const names[] = {"SSE", "AVX", "AVX2+FMA", "AVX-512"};
    return s >= ZT_SIMD_SSE && s <= ZT_SIMD_AVX512 ? names[s] : "?";
}

zt_simd zt_cpu_simd(int *amd) {
    __builtin_cpu_init();
    if (amd) *amd = __builtin_cpu_is("amd");
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd"))
        return ZT_SIMD_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return ZT_SIMD_AVX2;
    if (__builtin_cpu_supports("avx")) return ZT_SIMD_AVX;
    return ZT_SIMD_SSE;
}
