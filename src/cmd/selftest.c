/* selftest.c — `zerotrain selftest [--device cuda|cpu] [--seed N] [--allow-skip]`: every op of the
 * backend op table against the CPU reference backend, 20 steps of tiny training against the CPU
 * trajectory, NCCL's collectives against MPI's, and (on 4+ ranks) the group comms against results
 * known from each group's members; on a GPU for both CUDA tables, bf16 then fp16. `--bench` times
 * the ops instead. Uses the op table only, so it builds without CUDA. The checks are the harness in
 * src/selftest/ (selftest.h); this file reads the arguments, picks the backends and runs them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/blas_core.h"
#include "cmd/commands.h"
#include "cmd/help.h"
#include "config/config.h"
#include "selftest/selftest.h"
#include "util/util.h"

int zt_cmd_selftest(int argc, char **argv) {
    const char *device = "cuda";
    unsigned long long seed = 1234;
    int allow_skip = 0, bench = 0, bench_b = 16, bench_t = 1024, bench_fp16 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--allow-skip")) allow_skip = 1;
        else if (!strcmp(argv[i], "--bench")) bench = 1;
        else if (!strcmp(argv[i], "--fp16")) bench_fp16 = 1;
        else if (!strcmp(argv[i], "--bench-B") && i + 1 < argc) bench_b = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bench-T") && i + 1 < argc) bench_t = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--nccl-hang-child")) return zt_selftest_nccl_hang_child(); /* internal */
        else if (!strcmp(argv[i], "--singleton-child")) return zt_selftest_singleton_child();  /* internal */
        else if (!strcmp(argv[i], "--singleton-probe")) return zt_selftest_singleton_probe();  /* internal */
        else return zt_help_bad_argument("selftest", argv[i], i + 1 < argc ? argv[i + 1] : NULL); /* help: main.c */
    }
    if (bench_b < 1 || bench_t < 2) {
        fprintf(stderr, "zerotrain: error: selftest: --bench-B must be >= 1 and --bench-T >= 2\n");
        return 2;
    }
    zt_selftest st;
    memset(&st, 0, sizeof st);
    st.seed = seed;
    st.ref = zt_backend_cpu();
    int rank = zt_mpi_world_rank();
    st.verbose = rank == 0;
    char kernels[512];
    if (st.verbose) printf("selftest: %s\n", zt_blas_core_line(kernels, sizeof kernels));
    const zt_backend *fp16_dev = NULL; /* the second CUDA table, checked after the bf16 one */
    if (!strcmp(device, "cuda")) {
        const char *why = NULL;
        st.dev = zt_backend_cuda(ZT_BF16, &why);
        fp16_dev = zt_backend_cuda(ZT_F16, NULL);
        if (!st.dev) {
            printf("selftest: SKIPPED: %s\n", why ? why : "the CUDA backend is not available");
            return allow_skip ? 0 : 1;
        }
        st.device_kind = ZT_DEVICE_CUDA;
    } else if (!strcmp(device, "sim")) {
        const char *why = NULL;
        st.dev = zt_backend_sim(ZT_BF16, &why);
        fp16_dev = zt_backend_sim(ZT_F16, NULL);
        if (!st.dev) {
            fprintf(stderr, "zerotrain: error: selftest: %s\n", why);
            return 1;
        }
        st.device_kind = ZT_DEVICE_SIM;
    } else if (!strcmp(device, "cpu")) {
        st.dev = zt_backend_cpu();
        st.device_kind = ZT_DEVICE_CPU;
    } else {
        fprintf(stderr, "zerotrain: error: selftest: --device must be cuda, sim or cpu, not '%s'\n", device);
        return 2;
    }
    if (bench) return rank == 0 ? zt_selftest_bench(bench_fp16 && fp16_dev ? fp16_dev : st.dev, bench_b, bench_t) : 0;
    if (st.verbose)
        printf("selftest: %s backend (%s) vs cpu reference, seed %llu\n", st.dev->name,
               st.dev->compute_dtype == ZT_BF16 ? "bf16" : st.dev->compute_dtype == ZT_F16 ? "fp16" : "fp32", seed);
    if (fp16_dev) st.tag = "bf16 ";
    zt_selftest_ops(&st);
    zt_selftest_training(&st);
    zt_selftest_comm(&st);
    if (fp16_dev) {
        st.dev = fp16_dev;
        st.tag = "fp16 ";
        if (st.verbose) printf("selftest: %s backend (fp16) vs cpu reference, seed %llu\n", st.dev->name, seed);
        zt_selftest_ops(&st);
        zt_selftest_training(&st);
        zt_selftest_comm(&st);
    }
    if (st.verbose) printf("selftest: %d passed, %d failed\n", st.passed, st.failed);
    return st.failed ? 1 : 0;
}

