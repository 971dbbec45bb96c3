/* main.c — the zerotrain binary: initialises MPI (a single process works without mpirun),
 * dispatches the subcommand, and makes the exit status the job's. A command that computes first
 * gets the best OpenBLAS kernels this CPU runs (blas_core.h: that may re-execute the program, so
 * it happens before MPI_Init and before anything else). A command that trains holds the stop
 * signals from its first instruction until its handler is in place (hold_stop_signals). */
#include <hdf5.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "backend/blas_core.h"
#include "comm/comm.h"
#include "cmd/commands.h"
#include "comm/watchdog.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: zerotrain COMMAND [ARGS]\n"
            "  train CONFIG [--set KEY=VALUE]...   train a GPT-2 (under mpirun/srun, or alone)\n"
            "  tokenize [--vocab DIR] INPUT... -o PREFIX [--val-fraction F] [--shard-tokens N] [-j N]\n"
            "  sample MODEL [--prompt TEXT] [--max-tokens N] [--temperature F] [--top-k K] [--seed S]\n"
            "         [--device auto|cpu|cuda|sim]\n"
            "  eval MODEL --data FILE [--batch-size B] [--seq-len T] [--batches N] [--grads FILE] [--device D]\n"
            "  run -n N [--hostfile FILE] [--restarts N] CONFIG [--set KEY=VALUE]...   start mpirun/srun for train\n"
            "  config CONFIG [--ranks N] [--set KEY=VALUE]...   check a config, print the effective config\n"
            "  estimate CONFIG --ranks N [--device-mem 80GiB] [--host-mem 512GiB] [--hw PROFILE]   memory per rank per ZeRO stage\n"
            "  predict CONFIG --hw PROFILE [--ranks N [--tp T]] [--steps K] [--set KEY=VALUE]...   step time on a GPU machine (configs/hw/)\n"
            "  calibrate [-o FILE] [--dir DIR] [--tp T]   this machine as the simulated GPU runs on it, as a profile\n"
            "  interval --mtbf SECONDS (--save-seconds C | LOG...)   the checkpoint interval (Young/Daly)\n"
            "  export CHECKPOINT -o DIR [--format safetensors|hdf5] [--dtype fp32|bf16|fp16] [--vocab DIR]\n"
            "  info CHECKPOINT                     step, world size, stage, sizes, config, integrity\n"
            "  selftest [--device cuda]            GPU ops against the CPU backend\n");
}

/* computes: runs model math on the CPU (OpenBLAS), so it gets zt_blas_core_choose() */
typedef struct { const char *name; int (*run)(int, char **); int needs_mpi, computes; } command;

/* train and predict save and exit 99 on SIGUSR1, SIGTERM or SIGINT, but their handler is installed
 * only after MPI_Init (train.c): until then such a signal (run's Ctrl-C forwarded by mpirun to ranks
 * still starting, a batch system's SIGTERM) would kill the rank (found by scripts/soak: status 138,
 * 143). So they are blocked here, first thing; the mask and what is pending survive the BLAS
 * re-exec and MPI_Init, and train unblocks them once its handler is in place, which then runs. */
static void hold_stop_signals(void) {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGUSR1);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigprocmask(SIG_BLOCK, &stop, NULL);
}

int main(int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[1], "train") || !strcmp(argv[1], "predict"))) hold_stop_signals();
    /* `run` does not compute: the ranks it starts choose their kernels each on its own machine */
    static const command commands[] = {
        {"train", zt_cmd_train, 1, 1},     {"tokenize", zt_cmd_tokenize, 0, 0}, {"sample", zt_cmd_sample, 1, 1},
        {"eval", zt_cmd_eval, 1, 1},       {"selftest", zt_cmd_selftest, 1, 1}, {"estimate", zt_cmd_estimate, 0, 0},
        {"run", zt_cmd_run, 0, 0},         {"export", zt_cmd_export, 1, 0},     {"info", zt_cmd_info, 1, 0},
        {"config", zt_cmd_config, 0, 0},   {"predict", zt_cmd_predict, 1, 1}, {"interval", zt_cmd_interval, 0, 0},
        {"calibrate", zt_cmd_calibrate, 0, 1}, /* no MPI: a singleton's variables would stop its --tp step's mpirun */
    };
    for (size_t i = 0; argc >= 2 && i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name)) continue;
        if (commands[i].needs_mpi) zt_watchdog_hold_continue(); /* a rank: before any thread starts */
        if (commands[i].computes) zt_blas_core_choose(argv);
    }
    /* HDF5's exit-time cleanup retries closing any file whose close failed (a full disk) and
     * crashes on it; every file is closed explicitly, so the cleanup has nothing else to do */
    H5dont_atexit();
    /* a log line is written when it is printed, also into a file (a batch job's output, gpu-check's
     * logs): a run stopped from outside (a time limit, SIGKILL) still shows how far it got */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name)) continue;
        if (!commands[i].needs_mpi) return commands[i].run(argc - 1, argv + 1);
        zt_err err = {{0}};
        if (zt_mpi_init(&argc, &argv, &err)) {
            zt_print_error(&err);
            return 1;
        }
        /* commands fail together (every rank returns non-zero after agreeing), so a plain finalize
         * suffices; a rank that dies instead makes mpirun end the others */
        int rc = commands[i].run(argc - 1, argv + 1);
        zt_mpi_finalize();
        return rc;
    }
    fprintf(stderr, "zerotrain: error: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
