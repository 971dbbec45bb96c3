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
 *     through the watchdog's last-resort 30 s alarm (SIGALRM); the selftest lives on in the parent. */
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmd/selftest.h"
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

/* whether a variable says where Open MPI and PMIx are installed (a relocated install, such as
 * gpu-check's pack, is found only through them) rather than which job this process belongs to */
static int is_install_location(const char *var) {
    return !strncmp(var, "OPAL_PREFIX=", 12) || !strncmp(var, "PMIX_PREFIX=", 12);
}

/* the child's environment: ours without Open MPI's/PMIx's job variables (the child is a singleton,
 * not a rank of our job), plus the injection. The install locations stay: without OPAL_PREFIX a
 * singleton of the packed Open MPI looks for orted where Debian puts it, finds none and tries ssh
 * (seen on the first H100 run of gpu-check: "plm_rsh_agent: ssh : rsh" not found) */
static char **child_env(void) {
    size_t n = 0;
    while (environ[n]) n++;
    char **env = zt_xcalloc(n + 2, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (is_install_location(environ[i]) ||
            (strncmp(environ[i], "OMPI_", 5) && strncmp(environ[i], "PMIX_", 5) && strncmp(environ[i], "OPAL_", 5) &&
             strncmp(environ[i], "ZEROTRAIN_INJECT_", 17)))
            env[k++] = environ[i];
    env[k++] = "ZEROTRAIN_INJECT_NCCL_HANG=1";
    env[k] = NULL;
    return env;
}

void zt_selftest_nccl_watchdog_hang(zt_selftest *st) {
    char out_path[] = "/tmp/zerotrain-selftest-hang-XXXXXX";
    int fd = mkstemp(out_path);
    if (fd < 0) {
        zt_selftest_check(st, "nccl watchdog hang child (cannot make a temporary file)", 1, 0);
        return;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, 1);
    posix_spawn_file_actions_adddup2(&fa, fd, 2);
    char *argv[] = {"/proc/self/exe", "selftest", "--nccl-hang-child", NULL};
    char **env = child_env();
    pid_t pid;
    double t0 = zt_now();
    int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    close(fd);
    int status = 0, done = 0;
    while (rc == 0 && !done && zt_now() - t0 < CHILD_LIMIT_S) {
        done = waitpid(pid, &status, WNOHANG) == pid;
        if (!done) usleep(50000);
    }
    double took = zt_now() - t0;
    if (rc == 0 && !done) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    char text[4096] = "";
    FILE *f = fopen(out_path, "r");
    if (f) {
        size_t got = fread(text, 1, sizeof text - 1, f);
        text[got] = 0;
        fclose(f);
    }
    unlink(out_path);
    const char *line = strstr(text, "zerotrain: error: rank 0");
    int named = line && strstr(line, "NCCL all-reduce #1 (4000 bytes) made no progress for");
    int nonzero = done && !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    int by_alarm = done && WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM;
    char *nl = line ? strchr(line, '\n') : NULL;
    if (nl) *nl = 0;
    char name[1400];
    snprintf(name, sizeof name, "nccl watchdog: a collective hung on the GPU ends the process in %.1fs (%s; %s)", took,
             !done      ? "still running after 60 s"
             : by_alarm ? "ended by the 30 s alarm: the NCCL abort was not bounded"
             : nonzero  ? "non-zero exit"
                        : "exit 0",
             named ? line : text[0] ? text : "no output");
    zt_selftest_check(st, name, rc == 0 && named && nonzero && !by_alarm ? 0 : 1, 0);
}
