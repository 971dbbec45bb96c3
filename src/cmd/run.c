/* cmd_run.c — `zerotrain run -n N [--hostfile FILE] CONFIG [--set KEY=VALUE]...`: starts the
 * training job for you: `srun` inside a Slurm allocation, else `mpirun` with the flags this binary
 * needs (root, oversubscription on a small machine, no core binding so OpenMP threads spread).
 * A DeepSpeed hostfile ("host slots=K" lines) is also an Open MPI hostfile, so it is passed as is.
 * Each rank binds one GPU by its local rank (done by the CUDA backend). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/commands.h"
#include "util/util.h"

static void usage(void) {
    fprintf(stderr, "usage: zerotrain run -n N [--hostfile FILE] CONFIG [--set KEY=VALUE]...\n");
}

static int on_path(const char *prog) {
    const char *path = getenv("PATH");
    if (!path) return 0;
    char *copy = zt_xstrdup(path), *save = NULL;
    int found = 0;
    for (char *dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
        char full[PATH_MAX];
        snprintf(full, sizeof full, "%s/%s", dir, prog);
        found = access(full, X_OK) == 0;
    }
    free(copy);
    return found;
}

int zt_cmd_run(int argc, char **argv) {
    long n = 0;
    const char *hostfile = NULL;
    char **rest = zt_xcalloc((size_t)argc + 1, sizeof *rest);
    int n_rest = 0;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-n") || !strcmp(argv[i], "--ranks")) && i + 1 < argc) n = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--hostfile") && i + 1 < argc) hostfile = argv[++i];
        else rest[n_rest++] = argv[i];
    }
    if (n < 1 || n_rest < 1) {
        usage();
        free(rest);
        return 2;
    }
    if (hostfile && access(hostfile, R_OK) != 0) {
        fprintf(stderr, "zerotrain: error: %s: cannot read hostfile\n", hostfile);
        free(rest);
        return 1;
    }
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) snprintf(self, sizeof self, "zerotrain");
    else self[len] = '\0';

    char nbuf[32];
    snprintf(nbuf, sizeof nbuf, "%ld", n);
    const char *cmd[64 + 2 * 64];
    int k = 0;
    int in_slurm = getenv("SLURM_JOB_ID") && on_path("srun");
    if (in_slurm) {
        cmd[k++] = "srun";
        cmd[k++] = "-n";
        cmd[k++] = nbuf;
    } else {
        cmd[k++] = "mpirun";
        cmd[k++] = "-np";
        cmd[k++] = nbuf;
        if (hostfile) { cmd[k++] = "--hostfile"; cmd[k++] = hostfile; }
        if (geteuid() == 0) cmd[k++] = "--allow-run-as-root";
        if (!hostfile && n > sysconf(_SC_NPROCESSORS_ONLN)) cmd[k++] = "--oversubscribe";
        cmd[k++] = "--bind-to";
        cmd[k++] = "none";
    }
    cmd[k++] = self;
    cmd[k++] = "train";
    for (int i = 0; i < n_rest && k < 126; i++) cmd[k++] = rest[i];
    cmd[k] = NULL;
    /* threads per rank: split this node's cores among the local ranks unless the user chose */
    if (!getenv("OMP_NUM_THREADS")) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN), per = hostfile ? 1 : cores / n;
        char tbuf[32];
        snprintf(tbuf, sizeof tbuf, "%ld", per > 0 ? per : 1);
        setenv("OMP_NUM_THREADS", tbuf, 1);
    }
    printf("zerotrain run: OMP_NUM_THREADS=%s", getenv("OMP_NUM_THREADS"));
    for (int i = 0; cmd[i]; i++) printf(" %s", cmd[i]);
    printf("\n");
    fflush(stdout);
    execvp(cmd[0], (char *const *)cmd);
    fprintf(stderr, "zerotrain: error: cannot start %s (is it installed and on PATH?)\n", cmd[0]);
    free(rest);
    return 1;
}
