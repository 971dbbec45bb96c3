/* test_watchdog.c — the hang watchdog's device-comm side (comm/watchdog.h: zt_watchdog_watch) on the
 * CPU, with a probe written here (the NCCL comm's is cuda/comm_nccl.cu, which needs a GPU): each case
 * runs in a child process that is an MPI singleton with comm_timeout 1 s on one rank:
 *   - all done: the probe reports every operation complete; nothing fires in 3 s, the probe was asked;
 *   - progressing: an operation stays pending, but the probe reports progress on every tick; nothing
 *     fires in 3 s;
 *   - stuck: the probe reports the same operation pending since the start: the child prints one line
 *     `rank 0 (host H): TEST all-reduce #7 (4096 bytes) made no progress for Ns (on the GPU, ...)`,
 *     the comm's abort runs, and the child exits non-zero, within 1 s + a tick (the test allows 10 s);
 *   - asynchronous error: the probe reports one; the line says `failed on the GPU: <error>`, abort
 *     runs, non-zero exit;
 *   - device fault: the probe reports a sticky CUDA error (-2): the line blames the GPU, names no
 *     collective, abort runs, non-zero exit;
 *   - stuck, and the comm's abort never returns (ncclCommAbort behind a collective hung on the GPU):
 *     the job is still taken down by MPI_Abort once ZT_WATCHDOG_ABORT_WAIT has passed, not by the
 *     30 s alarm that is the last resort (the test waits up to 40 s to tell the two apart);
 *   - stopped and continued: a process stuck 2 s into a 4 s comm_timeout is stopped for 1 s (too short
 *     for the watchdog's late-tick rule) and continued, as a launcher does to kill a stopped rank: it
 *     counts its wait from its return (SIGCONT) and reports no sooner than a whole comm_timeout after
 *     it, not at once for a wait the stop made long;
 *   - a peer in the roll whose stamps stopped but whose process runs (its watchdog stopped, the process
 *     alive and sleeping: what a rank starved on a loaded machine looks like, found by the fault soak)
 *     is not taken for a stopped one: the waiting rank (comm_timeout 6 s, stamps stale after 3 s)
 *     reports only once comm_timeout has passed, and says the peer is not stopped;
 *   - the same peer stopped (SIGSTOP) is: the waiting rank (comm_timeout 30 s) reports at once,
 *     naming it `stopped answering`. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "comm/watchdog.h"
#include "util/util.h"

enum { ALL_DONE, PROGRESSING, STUCK, ASYNC_ERROR, DEVICE_FAULT, STUCK_ABORT_HANGS, STOPPED_AND_CONTINUED,
       ROLL_WAITER, ROLL_PEER };
static int mode, probes;
static double t_start;
static char roll_tag[64];      /* ROLL_WAITER and ROLL_PEER share this roll */
static double waiter_timeout;  /* ROLL_WAITER's comm_timeout */

static int test_probe(void *ctx, zt_watchdog_op *op) {
    probes++;
    if (mode == ALL_DONE) return 0;
    op->what = "TEST all-reduce", op->seq = 7, op->bytes = 4096;
    op->since = mode == PROGRESSING ? zt_now() : t_start;
    if (mode == ASYNC_ERROR) {
        snprintf(op->error, sizeof op->error, "test: remote peer gone");
        return -1;
    }
    if (mode == DEVICE_FAULT) {
        snprintf(op->error, sizeof op->error, "test: an illegal memory access was encountered");
        return -2;
    }
    return 1;
}
static void test_abort(void *ctx) {
    printf("abort callback ran (ctx %s)\n", (const char *)ctx);
    fflush(stdout);
    while (mode == STUCK_ABORT_HANGS) pause();
}

/* the child: returns its exit status when the watchdog did not end it */
static int child(int m) {
    mode = m;
    if (m == ROLL_PEER) { /* rank 1 of 2: stamps the roll, then stops its watchdog and sleeps on */
        zt_watchdog_start(waiter_timeout, 1, 2);
        zt_watchdog_roll(roll_tag);
        zt_watchdog_stop();
        printf("silent\n");
        fflush(stdout);
        for (;;) pause();
    }
    zt_watchdog_hold_continue(); /* as main.c does for a rank */
    MPI_Init(NULL, NULL);
    if (m == ROLL_WAITER) { /* rank 0 of 2: waits in a collective for rank 1 */
        zt_watchdog_start(waiter_timeout, 0, 2);
        zt_watchdog_roll(roll_tag);
        zt_watchdog_enter("TEST all-gather", 64, 2);
        for (;;) pause(); /* the watchdog ends the process */
    }
    t_start = zt_now();
    zt_watchdog_start(m == STOPPED_AND_CONTINUED ? 4.0 : 1.0, 0, 1);
    zt_watchdog_probe p = {test_probe, test_abort, "comm", 1};
    zt_watchdog_watch(&p);
    if (m == STOPPED_AND_CONTINUED) {
        printf("watching\n");
        fflush(stdout);
        for (;;) pause(); /* the watchdog ends the process */
    }
    sleep(3);
    long asked = 0;
    int last = zt_watchdog_last_probe(&asked);
    zt_watchdog_unwatch("comm");
    zt_watchdog_stop();
    printf("alive after 3s: %d probes (watchdog counted %ld), last answer %d\n", probes, asked, last);
    fflush(stdout);
    MPI_Finalize();
    return probes > 0 && asked == probes && last == (m == ALL_DONE ? 0 : 1) ? 0 : 3;
}

/* forks child(m) with its stdout and stderr in a new unlinked file, whose descriptor goes to *fd */
static pid_t start_child(int m, int *fd) {
    char path[] = "/tmp/zt-test-watchdog-XXXXXX";
    *fd = mkstemp(path);
    if (*fd < 0) return -1;
    unlink(path);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(*fd, 1), dup2(*fd, 2);
        _exit(child(m));
    }
    return pid;
}

/* what the child has written so far, into out */
static void read_output(int fd, char *out, size_t cap) {
    ssize_t n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? n : 0] = 0;
}

/* runs child(m) with its output in `out`; returns the wait status, -1 when it outlives `limit` s */
static int run_child(int m, double limit, char *out, size_t cap, double *took) {
    int fd;
    double t0 = zt_now();
    pid_t pid = start_child(m, &fd);
    if (pid < 0) return -1;
    int status = 0, done = 0;
    while (!done && zt_now() - t0 < limit) {
        done = waitpid(pid, &status, WNOHANG) == pid;
        if (!done) usleep(20000);
    }
    *took = zt_now() - t0;
    if (!done) kill(pid, SIGKILL), waitpid(pid, &status, 0);
    read_output(fd, out, cap);
    close(fd);
    return done ? status : -1;
}

/* STOPPED_AND_CONTINUED: 1 when the case decided (*from_continue: seconds from SIGCONT to the child's end),
 * 0 when the stop came too late to tell (the child had already reported: a loaded machine) */
static int run_stopped_child(char *out, size_t cap, double *from_continue, int *status) {
    int fd;
    pid_t pid = start_child(STOPPED_AND_CONTINUED, &fd);
    if (pid < 0) return 0;
    int done = 0;
    double t0 = zt_now();
    while (!done && zt_now() - t0 < 60) { /* its watchdog is running once it says so */
        read_output(fd, out, cap);
        if (strstr(out, "watching")) break;
        done = waitpid(pid, status, WNOHANG) == pid;
        usleep(20000);
    }
    int decided = 0;
    if (!done) {
        double seen = zt_now();
        usleep(2000000); /* 2 s into its 4 s comm_timeout */
        kill(pid, SIGSTOP);
        usleep(1000000);
        read_output(fd, out, cap);
        decided = !strstr(out, "zerotrain: error") && zt_now() - seen < 3.5;
        double cont = zt_now();
        kill(pid, SIGCONT);
        while (!done && zt_now() - cont < 30) {
            done = waitpid(pid, status, WNOHANG) == pid;
            if (!done) usleep(20000);
        }
        *from_continue = zt_now() - cont;
        if (!done) kill(pid, SIGKILL), waitpid(pid, status, 0), *status = -1;
    }
    read_output(fd, out, cap);
    close(fd);
    return decided;
}

/* ROLL_PEER started and silent (its record in the roll no longer stamped), then SIGSTOPped when `stop`;
 * then ROLL_WAITER with comm_timeout `timeout` run to its end (at most `limit` s): its status, output in
 * `out`; -1 when it outlived the limit or the peer never went silent */
static int run_waiter_beside_silent_peer(double timeout, int stop, double limit, char *out, size_t cap,
                                         double *took) {
    snprintf(roll_tag, sizeof roll_tag, "test-watchdog-%d", (int)getpid());
    waiter_timeout = timeout;
    int fd, st = -1;
    pid_t peer = start_child(ROLL_PEER, &fd);
    if (peer < 0) return -1;
    double t0 = zt_now();
    char said[256] = "";
    while (!strstr(said, "silent") && zt_now() - t0 < 60) {
        usleep(20000);
        read_output(fd, said, sizeof said);
    }
    if (strstr(said, "silent")) {
        if (stop) kill(peer, SIGSTOP);
        st = run_child(ROLL_WAITER, limit, out, cap, took);
    }
    kill(peer, SIGKILL);
    waitpid(peer, NULL, 0);
    close(fd);
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/.zerotrain-roll-%s", roll_tag);
    unlink(path);
    return st;
}

int main(void) {
    static char out[8192];
    double took;
    int st = run_child(ALL_DONE, 10, out, sizeof out, &took);
    CHECK(st == 0 && strstr(out, "alive after 3s") && !strstr(out, "zerotrain: error"), "device_probe_all_done_no_fire",
          "status %d: %s", st, out);
    st = run_child(PROGRESSING, 10, out, sizeof out, &took);
    CHECK(st == 0 && strstr(out, "alive after 3s") && !strstr(out, "zerotrain: error"),
          "device_probe_progressing_no_fire", "status %d: %s", st, out);

    st = run_child(STUCK, 10, out, sizeof out, &took);
    const char *line = strstr(out, "zerotrain: error: rank 0 (host ");
    CHECK(st > 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0) && line &&
              strstr(line, "): TEST all-reduce #7 (4096 bytes) made no progress for ") &&
              strstr(line, "(on the GPU, with 1 rank; comm_timeout 1s); aborting the job") &&
              strstr(out, "abort callback ran (ctx comm)") && !strstr(out, "alive after"),
          "device_probe_stuck_fires_names_op_aborts", "status %d after %.1fs: %s", st, took, out);
    printf("test_watchdog: a stuck device op ended the process %.1fs after it was enqueued (comm_timeout 1s)\n", took);
    st = run_child(ASYNC_ERROR, 10, out, sizeof out, &took);
    line = strstr(out, "zerotrain: error: rank 0 (host ");
    CHECK(st > 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0) && line &&
              strstr(line, "TEST all-reduce #7 (4096 bytes) failed on the GPU: test: remote peer gone; aborting") &&
              strstr(out, "abort callback ran") && !strstr(out, "alive after"),
          "device_probe_async_error_fires", "status %d after %.1fs: %s", st, took, out);

    st = run_child(DEVICE_FAULT, 10, out, sizeof out, &took);
    line = strstr(out, "zerotrain: error: rank 0 (host ");
    CHECK(st > 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0) && line &&
              strstr(line, "): the GPU failed: test: an illegal memory access was encountered; aborting the job") &&
              !strstr(line, "TEST all-reduce") && strstr(out, "abort callback ran") && !strstr(out, "alive after"),
          "device_probe_device_fault_blames_the_gpu", "status %d after %.1fs: %s", st, took, out);

    st = run_child(STUCK_ABORT_HANGS, 40, out, sizeof out, &took);
    line = strstr(out, "zerotrain: error: rank 0 (host ");
    int by_alarm = st > 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM;
    CHECK(st > 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0) && !by_alarm && line &&
              strstr(line, "TEST all-reduce #7 (4096 bytes) made no progress for ") &&
              strstr(out, "abort callback ran (ctx comm)") && !strstr(out, "alive after"),
          "device_probe_abort_that_hangs_is_bounded", "%s after %.1fs: %s",
          st < 0 ? "still running" : by_alarm ? "ended by the 30 s alarm" : "status", took, out);
    printf("test_watchdog: with a comm abort that never returns, the process ended %.1fs after the op was enqueued "
           "(comm_timeout 1s, abort wait %ds)\n", took, ZT_WATCHDOG_ABORT_WAIT);

    /* a stop that came late (the child had reported) proves nothing: tried again, three times at most */
    int status = 0, decided = 0;
    double from_continue = 0;
    for (int attempt = 0; attempt < 3 && !decided; attempt++)
        decided = run_stopped_child(out, sizeof out, &from_continue, &status);
    line = strstr(out, "zerotrain: error: rank 0 (host ");
    CHECK(decided && status > 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0) && line &&
              strstr(line, "TEST all-reduce #7 (4096 bytes) made no progress for ") && from_continue >= 4.0,
          "device_probe_stopped_rank_counts_from_its_return",
          "%s; ended %.1fs after SIGCONT (comm_timeout 4s; status %d): %s",
          decided ? "decided" : "the stop came too late three times", from_continue, status, out);
    printf("test_watchdog: stopped 2 s into a 4 s comm_timeout for 1 s, the process reported %.1fs after it was "
           "continued\n", from_continue);

    /* a peer whose stamps stopped but which runs: reported after comm_timeout, as not stopped */
    st = run_waiter_beside_silent_peer(6.0, 0, 40, out, sizeof out, &took);
    line = strstr(out, "zerotrain: error: rank 0 (host ");
    const char *made = line ? strstr(line, "made no progress for ") : NULL;
    int waited = made ? atoi(made + strlen("made no progress for ")) : -1;
    CHECK(st > 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0) && made && waited >= 6 &&
              strstr(line, "TEST all-gather #1 (64 bytes) made no progress for ") &&
              strstr(line, "(waiting on the other 1 rank; rank 1 (host ") &&
              strstr(line, ") has not answered for ") &&
              strstr(line, "s but is not stopped (state S, last seen outside any collective); comm_timeout 6s)") &&
              !strstr(line, "stopped answering"),
          "roll_running_peer_with_late_stamps_waits_out_comm_timeout", "status %d after %.1fs: %s", st, took, out);
    printf("test_watchdog: beside a peer that runs but stamps no more, the wait was reported after %ds "
           "(comm_timeout 6s, stamps stale after 3s)\n", waited);

    /* the same peer stopped: reported at once, well before its 30 s comm_timeout */
    st = run_waiter_beside_silent_peer(30.0, 1, 40, out, sizeof out, &took);
    line = strstr(out, "zerotrain: error: rank 0 (host ");
    CHECK(st > 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0) && line && took < 25 &&
              strstr(line, "TEST all-gather #1 (64 bytes) made no progress for ") &&
              strstr(line, "(waiting on the other 1 rank; rank 1 (host ") &&
              strstr(line, ") stopped answering ") && strstr(line, "s ago (last seen outside any collective); "
                                                                  "comm_timeout 30s)"),
          "roll_stopped_peer_reported_before_comm_timeout", "status %d after %.1fs: %s", st, took, out);
    printf("test_watchdog: beside a stopped peer, the wait was reported %.1fs after it began (comm_timeout 30s)\n",
           took);
    return zt_check_exit();
}
