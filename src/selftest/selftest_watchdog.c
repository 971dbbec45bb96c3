/* selftest_watchdog.c — the NCCL side of the hang watchdog (comm/watchdog.h) on one GPU, for
 * `zerotrain selftest`:
 *   - healthy: while the NCCL collectives of the selftest run, the watchdog (comm_timeout 30 s) probes
 *     the NCCL comm; afterwards it has seen every operation complete and no asynchronous error;
 *   - hung: a child process (this binary, `selftest --nccl-hang-child`, an MPI singleton) makes a
 *     one-rank NCCL comm with comm_timeout 1 s, and ZEROTRAIN_INJECT_NCCL_HANG=1 queues a spinning
 *     kernel before its first all-reduce on the comm stream, so the collective really hangs on the
 *     GPU while the host blocks in an unwatched synchronize. The child must print the watchdog's
 *     line naming "NCCL all-reduce #1", abort NCCL and exit non-zero long before the kernel would
 *     give up (120 s), through MPI_Abort once the abort has had ZT_WATCHDOG_ABORT_WAIT seconds, not
 *     through the watchdog's last-resort 30 s alarm (SIGALRM); the selftest lives on in the parent.
 * It also owns how such a child is spawned: an MPI singleton of its own (Open MPI's configuration
 * kept, the parent job's identity dropped, no remote launcher), which `selftest --singleton-probe`
 * checks without a GPU (test/t_selftest_singleton.sh: on a machine without ssh). */
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "selftest/selftest.h"
#include "comm/comm.h"
#include "comm/comm_nccl.h"
#include "comm/watchdog.h"
#include "util/util.h"

extern char **environ;

enum { HANG_BYTES_COUNT = 1000, CHILD_LIMIT_S = 60 };

void zt_selftest_nccl_watchdog_healthy(zt_selftest *st) {
    /* the watchdog ticks once a second: wait for its answer from a tick after the last operation */
    long asked0 = 0, asked = 0;
    zt_watchdog_last_probe(&asked0);
    int seen = 2;
    for (int i = 0; i < 40; i++) {
        seen = zt_watchdog_last_probe(&asked);
        if (asked > asked0 + 1 && seen == 0) break; /* a whole tick after asked0 */
        usleep(100000);
    }
    char name[160];
    snprintf(name, sizeof name, "nccl watchdog saw every collective complete (probe %s)",
             seen == 0 ? "all done" : seen == 1 ? "still pending" : seen < 0 ? "error" : "not watching");
    zt_selftest_check(st, name, asked > asked0 + 1 && seen == 0 ? 0 : 1, 0);
}

/* `selftest --nccl-hang-child`: returns only when the watchdog did not fire */
int zt_selftest_nccl_hang_child(void) {
    const char *why = NULL;
    const zt_backend *be = zt_backend_cuda(ZT_BF16, &why);
    if (!be) {
        fprintf(stderr, "nccl-hang-child: no CUDA backend: %s\n", why ? why : "?");
        return 3;
    }
    zt_watchdog_start(1.0, 0, 1);
    zt_err err = {{0}};
    zt_comm *nc = zt_comm_nccl(be, &err);
    if (!nc) {
        fprintf(stderr, "nccl-hang-child: %s\n", err.msg);
        return 3;
    }
    float host[HANG_BYTES_COUNT] = {0};
    float *d = st_up_f(be, host, HANG_BYTES_COUNT);
    nc->wait(nc, nc->allreduce_sum(nc, d, HANG_BYTES_COUNT, ZT_F32)); /* #1: hangs behind the spin kernel */
    st_down_f(be, host, d, HANG_BYTES_COUNT); /* blocks here, in no watched wait */
    fprintf(stderr, "nccl-hang-child: the all-reduce completed and the watchdog did not fire\n");
    return 0;
}

/* whether a variable is one a launcher (mpirun's orted, or a singleton's own orted) sets to make a
 * process one rank of its job: the rank, the job's size and ids, the daemon's and PMIx server's
 * addresses, the session directories. A launched rank and a singleton differ in these alone (seen
 * with `mpirun -np 1 env` of Open MPI 4.1); everything else with these prefixes configures Open MPI
 * or PMIx and stays. */
static int is_job_identity(const char *var) {
    static const char *const launcher_set[] = {
        "OMPI_MCA_ess", "OMPI_MCA_orte_", "OMPI_MCA_pmix=", "OMPI_MCA_initial_wdir=", "OMPI_MCA_mpi_oversubscribe=",
        "OMPI_MCA_shmem_RUNTIME_QUERY_hint=", "PMIX_RANK=", "PMIX_NAMESPACE=", "PMIX_ID=", "PMIX_SERVER_",
        "PMIX_SYSTEM_TMPDIR=", "PMIX_SECURITY_MODE=", "PMIX_GDS_MODULE=", "PMIX_PTL_MODULE=", "PMIX_BFROP_BUFFER_TYPE=",
        "PMIX_DSTORE_", "PMIX_HOSTNAME=", "PMIX_VERSION="};
    for (size_t i = 0; i < sizeof launcher_set / sizeof *launcher_set; i++)
        if (!strncmp(var, launcher_set[i], strlen(launcher_set[i]))) return 1;
    /* OMPI_COMM_WORLD_*, OMPI_UNIVERSE_SIZE, OMPI_COMMAND, ...: all but the MCA and run-as-root ones */
    return !strncmp(var, "OMPI_", 5) && strncmp(var, "OMPI_MCA_", 9) && strncmp(var, "OMPI_ALLOW_RUN_AS_ROOT", 22);
}

/* The environment of a child that must be an MPI singleton of its own, not a rank of our job: ours
 * without the job's identity and our injections, plus `extra` (an injection, or NULL). Open MPI's
 * and PMIx's configuration stays (OMPI_MCA_*, OMPI_ALLOW_RUN_AS_ROOT*, PMIX_MCA_*, and where a
 * relocated install such as gpu-check's pack lives: OPAL_PREFIX, PMIX_PREFIX, PMIX_PKGLIBDIR, ...),
 * and plm is `isolated`: a singleton of one process
 * never starts a daemon on another machine, and Open MPI 4.1's default rsh launcher ends its orted
 * where no ssh is installed ("plm_rsh_agent: ssh : rsh" not found, seen on the first H200 run of
 * gpu-check, whose image configured its own way around it in a variable the child lost). */
static char **singleton_env(const char *extra) {
    size_t n = 0;
    while (environ[n]) n++;
    char **env = zt_xcalloc(n + 3, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!is_job_identity(environ[i]) && strncmp(environ[i], "OMPI_MCA_plm=", 13) &&
            strncmp(environ[i], "ZEROTRAIN_INJECT_", 17))
            env[k++] = environ[i];
    env[k++] = "OMPI_MCA_plm=isolated";
    if (extra) env[k++] = (char *)extra;
    env[k] = NULL;
    return env;
}

/* Runs `/proc/self/exe selftest MODE` as a singleton (singleton_env with `extra`) for at most
 * CHILD_LIMIT_S seconds, killing it then; its stdout and stderr land in text. Returns
 * posix_spawn's result; *done says whether it ended by itself (with *status), *took its seconds. */
static int run_singleton_child(char *mode, const char *extra, char *text, size_t cap, int *status, int *done,
                               double *took) {
    text[0] = 0;
    *done = 0;
    *took = 0;
    char out_path[] = "/tmp/zerotrain-selftest-child-XXXXXX";
    int fd = mkstemp(out_path);
    if (fd < 0) {
        snprintf(text, cap, "cannot make a temporary file");
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, 1);
    posix_spawn_file_actions_adddup2(&fa, fd, 2);
    char *argv[] = {"/proc/self/exe", "selftest", mode, NULL};
    char **env = singleton_env(extra);
    pid_t pid;
    double t0 = zt_now();
    int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    close(fd);
    while (rc == 0 && !*done && zt_now() - t0 < CHILD_LIMIT_S) {
        *done = waitpid(pid, status, WNOHANG) == pid;
        if (!*done) usleep(50000);
    }
    *took = zt_now() - t0;
    if (rc == 0 && !*done) {
        kill(pid, SIGKILL);
        waitpid(pid, status, 0);
    }
    FILE *f = fopen(out_path, "r");
    if (f) {
        size_t got = fread(text, 1, cap - 1, f);
        text[got] = 0;
        fclose(f);
    }
    unlink(out_path);
    return rc;
}

/* The child's output on one line, for a check's name (the report keeps a FAIL line's first line
 * only): Open MPI's banners of dashes dropped, line ends made spaces */
static void one_line(char *text) {
    char *w = text;
    for (const char *r = text; *r; r++) {
        if (*r == '-' && (r == text || r[-1] == '\n' || r[-1] == '-')) continue; /* a line of dashes */
        *w++ = *r == '\n' ? ' ' : *r;
    }
    while (w > text && w[-1] == ' ') w--;
    *w = 0;
    size_t lead = strspn(text, " ");
    memmove(text, text + lead, strlen(text + lead) + 1);
}

/* `selftest --singleton-child`: main has started MPI; a singleton is a world of one */
int zt_selftest_singleton_child(void) {
    printf("singleton-child: MPI started, rank %d of %d\n", zt_mpi_world_rank(), zt_mpi_world_size());
    return zt_mpi_world_size() == 1 ? 0 : 1;
}

/* `selftest --singleton-probe`: the spawn the hang check uses, without a GPU: from this process (a
 * singleton or a launched rank, MPI started), a child in singleton_env starts MPI as a world of one */
int zt_selftest_singleton_probe(void) {
    zt_selftest st;
    memset(&st, 0, sizeof st);
    st.verbose = 1;
    char text[4096];
    int status = 0, done = 0;
    double took = 0;
    int rc = run_singleton_child("--singleton-child", NULL, text, sizeof text, &status, &done, &took);
    int started = rc == 0 && done && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
                  strstr(text, "MPI started, rank 0 of 1");
    one_line(text);
    char name[1400];
    snprintf(name, sizeof name, "a singleton child of rank %d of %d starts MPI in %.1fs (%.1000s)", zt_mpi_world_rank(),
             zt_mpi_world_size(), took, !done ? "still running after 60 s" : text[0] ? text : "no output");
    zt_selftest_check(&st, name, started ? 0 : 1, 0);
    return st.failed ? 1 : 0;
}

void zt_selftest_nccl_watchdog_hang(zt_selftest *st) {
    char text[4096];
    int status = 0, done = 0;
    double took = 0;
    int rc = run_singleton_child("--nccl-hang-child", "ZEROTRAIN_INJECT_NCCL_HANG=1", text, sizeof text, &status,
                                 &done, &took);
    const char *line = strstr(text, "zerotrain: error: rank 0");
    int named = line && strstr(line, "NCCL all-reduce #1 (4000 bytes) made no progress for");
    int nonzero = done && !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    int by_alarm = done && WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM;
    char *nl = line ? strchr(line, '\n') : NULL;
    if (nl) *nl = 0;
    if (!named) one_line(text);
    char name[1400];
    snprintf(name, sizeof name, "nccl watchdog: a collective hung on the GPU ends the process in %.1fs (%s; %.1000s)", took,
             !done      ? "still running after 60 s"
             : by_alarm ? "ended by the 30 s alarm: the NCCL abort was not bounded"
             : nonzero  ? "non-zero exit"
                        : "exit 0",
             named ? line : text[0] ? text : "no output");
    zt_selftest_check(st, name, rc == 0 && named && nonzero && !by_alarm ? 0 : 1, 0);
}
