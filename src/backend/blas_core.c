/* blas_core.c — OpenBLAS's kernel family: what runs, and a better one when it fell back (see
 * blas_core.h).
 *
 * Why re-execute rather than load the BLAS at run time. OpenBLAS picks its core in a constructor
 * that runs when the library is loaded, before main(): a setenv() in main() is too late, and the
 * library has no supported call to switch afterwards (gotoblas_dynamic_init/quit are exported but
 * internal: buffers and thread-pool state sized for the first core would stay). dlopen()ing it
 * after setting the variable would put every cblas call of the backend, the tests and the benches
 * behind a table of function pointers, for one decision made once. exec() of the same program
 * with the variable set costs one more program load (its libraries loaded again: 0.0-0.3 s
 * measured on a loaded 2-core VM, before anything has run) and keeps the process id, its open descriptors and its environment: mpirun's and srun's ranks
 * stay the processes their launcher started, as long as it happens before MPI_Init. Each rank
 * decides for its own CPU, so a job across different machines gets each machine's best kernels.
 *
 * Which cores. The replacement is the widest family the CPU runs and t_gemm_coretypes.sh checks
 * (the ops deterministic run to run and for any thread count under it). Cooperlake, which 0.3.21
 * also has, shares SkylakeX's AVX-512 SGEMM code and adds bf16 kernels zerotrain does not call;
 * it is left to the library on the CPUs it detects itself. */
#include "backend/blas_core.h"

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "backend/cpu_adam.h"
#include "backend/cpu_kernels.h"
#include "util/test_hooks.h"

#define FROM_VAR "ZEROTRAIN_BLAS_CORE_FROM"

/* OpenBLAS 0.3.21's x86-64 core names (driver/others/dynamic.c) and the widest SIMD their SGEMM
 * kernels use (kernel/x86_64/KERNEL.*); SapphireRapids is a later release's */
static const struct { const char *name; zt_simd simd; } cores[] = {
    {"Katmai", ZT_SIMD_SSE},       {"Coppermine", ZT_SIMD_SSE},   {"Northwood", ZT_SIMD_SSE},
    {"Prescott", ZT_SIMD_SSE},     {"Banias", ZT_SIMD_SSE},       {"Atom", ZT_SIMD_SSE},
    {"Core2", ZT_SIMD_SSE},        {"Penryn", ZT_SIMD_SSE},       {"Dunnington", ZT_SIMD_SSE},
    {"Nehalem", ZT_SIMD_SSE},      {"Athlon", ZT_SIMD_SSE},       {"Opteron", ZT_SIMD_SSE},
    {"Opteron_SSE3", ZT_SIMD_SSE}, {"Barcelona", ZT_SIMD_SSE},    {"Nano", ZT_SIMD_SSE},
    {"Bobcat", ZT_SIMD_SSE},       {"Sandybridge", ZT_SIMD_AVX},  {"Bulldozer", ZT_SIMD_AVX},
    {"Piledriver", ZT_SIMD_AVX},   {"Steamroller", ZT_SIMD_AVX},  {"Excavator", ZT_SIMD_AVX},
    {"Haswell", ZT_SIMD_AVX2},     {"Zen", ZT_SIMD_AVX2},         {"SkylakeX", ZT_SIMD_AVX512},
    {"Cooperlake", ZT_SIMD_AVX512}, {"SapphireRapids", ZT_SIMD_AVX512},
};

int zt_blas_core_simd(const char *core) {
    for (size_t i = 0; core && i < sizeof cores / sizeof cores[0]; i++)
        if (!strcasecmp(core, cores[i].name)) return (int)cores[i].simd;
    return -1;
}

const char *zt_blas_core_better(const char *running, zt_simd cpu, int amd) {
    int have = zt_blas_core_simd(running);
    if (have < 0 || have >= (int)cpu) return NULL;
    switch (cpu) {
    case ZT_SIMD_AVX512: return "SkylakeX";
    case ZT_SIMD_AVX2: return amd ? "Zen" : "Haswell";
    case ZT_SIMD_AVX: return "Sandybridge";
    default: return NULL;
    }
}

/* the user set OPENBLAS_CORETYPE (an empty value chooses nothing); the test hook makes a set one
 * count as the library's own choice */
static const char *user_coretype(void) {
    const char *v = getenv("OPENBLAS_CORETYPE");
    if (!v || !*v || getenv(FROM_VAR) || zt_test_hook_blas_fallback()) return NULL;
    return v;
}

static int blas_is_dynamic(void) { return strstr(openblas_get_config(), "DYNAMIC_ARCH") != NULL; }

static char exec_failed[160]; /* why the re-exec did not happen, for the log line */

void zt_blas_core_choose(char **argv) {
    if (user_coretype() || getenv(FROM_VAR) || !blas_is_dynamic()) return;
    int amd;
    zt_simd cpu = zt_cpu_simd(&amd);
    const char *running = openblas_get_corename();
    const char *better = zt_blas_core_better(running, cpu, amd);
    if (!better) return;
    char from[64];
    snprintf(from, sizeof from, "%s", running);
    if (setenv("OPENBLAS_CORETYPE", better, 1) || setenv(FROM_VAR, from, 1)) {
        snprintf(exec_failed, sizeof exec_failed, "could not switch to %s: setenv: %s", better, strerror(errno));
        return;
    }
    execv("/proc/self/exe", argv);
    snprintf(exec_failed, sizeof exec_failed, "could not switch to %s: exec /proc/self/exe: %s", better, strerror(errno));
    unsetenv(FROM_VAR);
    unsetenv("OPENBLAS_CORETYPE");
}

char *zt_blas_core_line(char *buf, size_t cap) {
    int amd;
    zt_simd cpu = zt_cpu_simd(&amd);
    const char *running = openblas_get_corename();
    int simd = zt_blas_core_simd(running);
    /* "OpenBLAS 0.3.21 DYNAMIC_ARCH ..." -> "OpenBLAS 0.3.21" */
    char version[48];
    const char *config = openblas_get_config();
    const char *sp = strchr(config, ' ');
    sp = sp ? strchr(sp + 1, ' ') : NULL;
    snprintf(version, sizeof version, "%.*s", sp ? (int)(sp - config) : (int)strlen(config), config);

    char why[320];
    const char *user = user_coretype(), *from = getenv(FROM_VAR), *asked = getenv("OPENBLAS_CORETYPE");
    if (user) {
        snprintf(why, sizeof why, "set by OPENBLAS_CORETYPE=%s", user);
    } else if (from) {
        char asked_note[96] = ""; /* OpenBLAS did not switch to what the re-exec asked for */
        if (asked && strcasecmp(asked, running)) snprintf(asked_note, sizeof asked_note, " (asked for %s)", asked);
        snprintf(why, sizeof why, "chosen by zerotrain%s: OpenBLAS took %s (%s) by itself", asked_note, from,
                 zt_simd_name((zt_simd)zt_blas_core_simd(from)));
    } else if (exec_failed[0]) {
        snprintf(why, sizeof why, "OpenBLAS's own choice; zerotrain %s", exec_failed);
    } else if (zt_blas_core_better(running, cpu, amd) && !blas_is_dynamic()) {
        snprintf(why, sizeof why, "the only kernels of this OpenBLAS (not a DYNAMIC_ARCH build)");
    } else {
        snprintf(why, sizeof why, "OpenBLAS's own choice");
    }
    snprintf(buf, cap, "cpu kernels: %s %s (%s) on an %s CPU, %s; CPU Adam %s; vector math %s", version, running,
             simd >= 0 ? zt_simd_name((zt_simd)simd) : "SIMD unknown", zt_simd_name(cpu), why,
             zt_cpu_adam_isa_name(zt_cpu_adam_best_isa()), zt_vec_name(zt_vec_best()));
    return buf;
}
