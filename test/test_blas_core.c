/* test_blas_core.c — the choice of OpenBLAS kernels (blas_core.h), on any CPU: the decision table
 * for every kind of CPU (SSE to AVX-512, Intel and AMD) against what the library may report; every
 * core the choice can name is one test/t_gemm_coretypes.sh proves deterministic; and this CPU's
 * SIMD level as libgcc reads it agrees with the kernel's /proc/cpuinfo flags. What a run really
 * ends up on (the re-exec) is test/t_blas_core.py's. */
#include <stdlib.h>
#include <string.h>

#include "backend/blas_core.h"
#include "check.h"
#include "util/util.h"

static const char *str_or_keep(const char *s) { return s ? s : "(keep)"; }

static void expect(const char *running, zt_simd cpu, int amd, const char *want) {
    const char *got = zt_blas_core_better(running, cpu, amd);
    char name[160];
    snprintf(name, sizeof name, "%s on an %s %s CPU -> %s", running, amd ? "AMD" : "Intel", zt_simd_name(cpu),
             str_or_keep(want));
    CHECK(want ? got && !strcmp(got, want) : !got, name, "got %s", str_or_keep(got));
}

/* the level the flags in /proc/cpuinfo give, with the same rule as zt_cpu_simd; -1 when unreadable */
static int cpuinfo_simd(void) {
    zt_err err = {{0}};
    size_t len;
    char *text = zt_read_file_max("/proc/cpuinfo", 1 << 24, &len, &err);
    if (!text) return -1;
    char *flags = strstr(text, "\nflags");
    char *eol = flags ? strchr(flags + 1, '\n') : NULL;
    if (!flags || !eol) { free(text); return -1; }
    *eol = ' ';
    eol[1] = 0;
#define HAS(f) (strstr(flags, " " f " ") != NULL)
    int level = HAS("avx512f") && HAS("avx512bw") && HAS("avx512dq") && HAS("avx512vl") && HAS("avx512cd") ? ZT_SIMD_AVX512
                : HAS("avx2") && HAS("fma")                                                            ? ZT_SIMD_AVX2
                : HAS("avx")                                                                           ? ZT_SIMD_AVX
                                                                                                       : ZT_SIMD_SSE;
#undef HAS
    free(text);
    return level;
}

int main(void) {
    /* a fallback on a CPU the library does not know: the widest family the CPU runs */
    expect("Prescott", ZT_SIMD_AVX512, 0, "SkylakeX"); /* Sapphire/Emerald Rapids on 0.3.21 */
    expect("Prescott", ZT_SIMD_AVX512, 1, "SkylakeX"); /* Zen 4 */
    expect("Prescott", ZT_SIMD_AVX2, 0, "Haswell");
    expect("Prescott", ZT_SIMD_AVX2, 1, "Zen");
    expect("Prescott", ZT_SIMD_AVX, 0, "Sandybridge");
    expect("prescott", ZT_SIMD_AVX2, 0, "Haswell"); /* names compare case-insensitively */
    expect("Core2", ZT_SIMD_AVX512, 0, "SkylakeX");
    expect("Nehalem", ZT_SIMD_AVX2, 1, "Zen");
    expect("Barcelona", ZT_SIMD_AVX2, 1, "Zen");
    /* narrower than the CPU allows, without being generic */
    expect("Sandybridge", ZT_SIMD_AVX2, 0, "Haswell");
    expect("Haswell", ZT_SIMD_AVX512, 0, "SkylakeX");
    expect("Zen", ZT_SIMD_AVX512, 1, "SkylakeX"); /* a Zen 4 given the AVX2 Zen kernels */
    /* as wide as the CPU: kept (an AVX2 EPYC, a Xeon the library knows, a Cooperlake) */
    expect("Zen", ZT_SIMD_AVX2, 1, NULL);
    expect("Haswell", ZT_SIMD_AVX2, 0, NULL);
    expect("Haswell", ZT_SIMD_AVX2, 1, NULL); /* an AMD CPU the library gave Haswell: same instructions */
    expect("SkylakeX", ZT_SIMD_AVX512, 0, NULL);
    expect("Cooperlake", ZT_SIMD_AVX512, 0, NULL);
    expect("SapphireRapids", ZT_SIMD_AVX512, 0, NULL);
    expect("Prescott", ZT_SIMD_SSE, 0, NULL); /* nothing wider to run */
    /* a name this table does not know (a newer library): left alone */
    expect("Granite", ZT_SIMD_AVX512, 0, NULL);
    expect("Unknown", ZT_SIMD_AVX2, 0, NULL);

    /* every core the choice can name is one t_gemm_coretypes.sh runs the determinism checks under */
    zt_err err = {{0}};
    size_t len;
    char *script = zt_read_file("test/t_gemm_coretypes.sh", &len, &err);
    for (int cpu = ZT_SIMD_AVX; cpu <= ZT_SIMD_AVX512; cpu++)
        for (int amd = 0; amd <= 1; amd++) {
            const char *core = zt_blas_core_better("Prescott", (zt_simd)cpu, amd);
            char quoted[64], name[128], name2[128];
            snprintf(quoted, sizeof quoted, "\"%s ", core ? core : "?");
            snprintf(name, sizeof name, "%s is one of t_gemm_coretypes.sh's core types", core ? core : "(none)");
            CHECK(core && script && strstr(script, quoted), name, "%s", script ? "not in its list" : err.msg);
            snprintf(name2, sizeof name2, "the core chosen on an %s %s CPU uses its SIMD", amd ? "AMD" : "Intel",
                     zt_simd_name((zt_simd)cpu));
            CHECK(core && zt_blas_core_simd(core) == cpu, name2, "%s", core ? core : "none");
        }
    free(script);

    int amd, flags = cpuinfo_simd();
    zt_simd here = zt_cpu_simd(&amd);
    char name[128];
    snprintf(name, sizeof name, "this CPU's SIMD level (%s) agrees with /proc/cpuinfo", zt_simd_name(here));
    CHECK(flags < 0 || flags == (int)here, name, "cpuinfo flags say %s", flags < 0 ? "?" : zt_simd_name((zt_simd)flags));
    return zt_check_exit();
}
