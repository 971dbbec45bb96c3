/* cmd_run.c — `zerotrain run -n N [--tp T] [--hostfile FILE] [--restarts N] CONFIG [--set KEY=VALUE]...`: starts the
 * training job for you: `srun` inside a Slurm allocation, else `mpirun` with the flags this binary
 * needs (root, oversubscription on a small machine, no core binding so OpenMP threads spread, ssh
 * to hostfile hosts without prompts and with a connect timeout). A DeepSpeed hostfile
 * ("host slots=K" lines) is also an Open MPI hostfile, so it is passed as is. Each rank binds one
 * GPU by its local rank (done by the CUDA backend). --tp T is tensor_parallel.tp_size T: mpirun and srun
 * place consecutive ranks on a node (by slot), so each tensor-parallel group of T consecutive ranks
 * sits on one node when T divides the ranks per node.
 *
 * The launcher runs as a child in its own process group, so that Ctrl-C at the terminal reaches
 * this process alone: the first SIGINT/SIGTERM is passed to the ranks as SIGUSR1 (mpirun and srun
 * forward SIGUSR1 to every rank as it is; given SIGTERM, mpirun kills the ranks a second later,
 * which would cut a save short), the ranks finish their step, save a checkpoint and exit 99, and
 * this process exits 99 too. A save that does not end within the grace period
 * (ZEROTRAIN_STOP_GRACE seconds, default 120), or a second signal, kills the launcher and the
 * ranks below it at once; the previous checkpoint stays `latest` either way.
 *
 * --restarts N: a failed job is started again from `latest`, up to N times (run_with_restarts).
 * The launcher's output then passes through this process, which reads what happened from it;
 * run_restart.c decides whether a restart can cure it and on which hosts. A launch that shows no
 * banner within ZEROTRAIN_STARTUP_TIMEOUT seconds (a host that never starts its part) is stopped
 * and counts as a failure; so does a launcher that has not exited ZEROTRAIN_LAUNCHER_GRACE seconds
 * after it said the job failed, or after every rank on this node ended. A signal to this process
 * still stops the job without a restart; before the banner it stops the launch at once (exit 99).
 * An attempt on fewer hosts than the hostfile's (some did not answer) grows back by itself once they
 * answer (grow_watch). After each launch its Open MPI shared-memory segments are removed (by its job id). */
#define _GNU_SOURCE /* pipe2 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmd/commands.h"
#include "cmd/launcher_notes.h"
#include "cmd/run_restart.h"
#include "comm/watchdog.h"
#include "config/config.h"
#include "util/util.h"

#define ZT_EXIT_PREEMPTED 99      /* train's status after a signal and a saved checkpoint */
#define ZT_STOP_GRACE_DEFAULT 120 /* seconds the ranks get to save after the first signal */
#define ZT_SSH_CONNECT_TIMEOUT 30 /* seconds for ssh to reach a hostfile host (ZEROTRAIN_SSH_TIMEOUT) */
/* seconds for the ranks to start, with --restarts (ZEROTRAIN_STARTUP_TIMEOUT): the ranks' own start-up bound */
#define ZT_STARTUP_TIMEOUT ((long)ZT_STARTUP_TIMEOUT_DEFAULT)
#define ZT_LAUNCHER_GRACE 15      /* seconds for the launcher to exit once the job failed (ZEROTRAIN_LAUNCHER_GRACE) */

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

/* a whole decimal integer in [lo, hi], nothing else (no "2abc", no " 2", no overflow) */
static int parse_whole(const char *text, long lo, long hi, long *out) {
    if (!text || !*text || !(text[0] == '-' || (text[0] >= '0' && text[0] <= '9'))) return -1;
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* the arguments of `run`: what it launches, and the ones passed on to `train` */
typedef struct run_args {
    long n;
    const char *hostfile;
    const char **train_args; /* CONFIG and the --set pairs, in order */
    int n_train_args;
    char tp_set[48];         /* --tp T as "tensor_parallel.tp_size=T" */
    long restarts;           /* --restarts N: failed attempts started again (run_restart.c) */
    long tp;                 /* --tp T (1 without) */
} run_args;

static int parse_args(int argc, char **argv, run_args *a, zt_err *err) {
    memset(a, 0, sizeof *a);
    a->tp = 1;
    a->train_args = zt_xcalloc((size_t)argc + 3, sizeof *a->train_args); /* + a resume path's --set */
    const char *config = NULL;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(arg, "-n") || !strcmp(arg, "--ranks") || !strcmp(arg, "-np")) {
            if (!val) return zt_fail(err, "run: %s needs a number of ranks", arg);
            if (a->n) return zt_fail(err, "run: the number of ranks is given twice");
            if (parse_whole(val, 1, ZT_MAX_RANKS, &a->n))
                return zt_fail(err, "run: %s: expected a number of ranks in [1, %d], got '%.40s'", arg, ZT_MAX_RANKS,
                               val);
            i++;
        } else if (!strcmp(arg, "--tp")) {
            long tp;
            if (parse_whole(val, 1, 64, &tp))
                return zt_fail(err, "run: --tp: expected tensor-parallel ranks in [1, 64], got '%.40s'", val ? val : "");
            snprintf(a->tp_set, sizeof a->tp_set, "tensor_parallel.tp_size=%ld", tp);
            a->tp = tp;
            i++;
        } else if (!strcmp(arg, "--restarts") || !strcmp(arg, "--max-restarts")) {
            if (parse_whole(val, 0, 1000000, &a->restarts))
                return zt_fail(err, "run: %s: expected a number of restarts in [0, 1000000], got '%.40s'", arg,
                               val ? val : "");
            i++;
        } else if (!strcmp(arg, "--hostfile")) {
            if (!val) return zt_fail(err, "run: --hostfile needs a file");
            a->hostfile = argv[++i];
        } else if (!strcmp(arg, "--set")) {
            if (!val) return zt_fail(err, "run: --set needs KEY=VALUE");
            a->train_args[a->n_train_args++] = arg;
            a->train_args[a->n_train_args++] = argv[++i];
        } else if (!strncmp(arg, "--set=", 6)) {
            a->train_args[a->n_train_args++] = arg;
        } else if (arg[0] == '-') {
            return zt_fail(err, "run: unknown option '%.80s'", arg);
        } else if (config) {
            return zt_fail(err, "run: one CONFIG expected, got '%.80s' and '%.80s'", config, arg);
        } else {
            config = arg;
            a->train_args[a->n_train_args++] = arg;
        }
    }
    if (!a->n) return zt_fail(err, "run: -n N (the number of ranks) is required");
    if (!config) return zt_fail(err, "run: CONFIG is required");
    /* every --set as train will read it, so a bad one stops here, before mpirun starts any rank */
    char **sets = zt_xcalloc((size_t)a->n_train_args + 1, sizeof *sets);
    int n_sets = 0;
    for (int i = 0; i < a->n_train_args; i++) {
        if (!strcmp(a->train_args[i], "--set")) sets[n_sets++] = (char *)a->train_args[++i];
        else if (!strncmp(a->train_args[i], "--set=", 6)) sets[n_sets++] = (char *)a->train_args[i] + 6;
    }
    int bad = zt_config_check_overrides(sets, n_sets, err);
    free(sets);
    if (bad) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        return zt_fail(err, "run: %s", why);
    }
    if (a->tp_set[0]) { /* last, so that it wins over the config and any --set */
        long tp = strtol(strchr(a->tp_set, '=') + 1, NULL, 10);
        if (a->n % tp) return zt_fail(err, "run: --tp %ld does not divide the %ld ranks", tp, a->n);
        a->train_args[a->n_train_args++] = "--set";
        a->train_args[a->n_train_args++] = a->tp_set;
    }
    if (a->hostfile && access(a->hostfile, R_OK) != 0) return zt_fail(err, "%s: cannot read hostfile", a->hostfile);
    return 0;
}

/* The launcher's command line, NULL-terminated (malloc'ed; its strings are the arguments' or static). */
static const char **build_command(const run_args *a, const char *self, const char *nbuf) {
    const char **cmd = zt_xcalloc((size_t)a->n_train_args + 32, sizeof *cmd);
    int k = 0;
    if (getenv("SLURM_JOB_ID") && on_path("srun")) {
        cmd[k++] = "srun";
        cmd[k++] = "-n";
        cmd[k++] = nbuf;
    } else {
        cmd[k++] = "mpirun";
        cmd[k++] = "-np";
        cmd[k++] = nbuf;
        if (a->hostfile) {
            static char ssh_args[96];
            long connect_s = ZT_SSH_CONNECT_TIMEOUT;
            const char *env = getenv("ZEROTRAIN_SSH_TIMEOUT");
            if (env && parse_whole(env, 1, 3600, &connect_s))
                zt_warn("zerotrain run: ZEROTRAIN_SSH_TIMEOUT '%.40s' is not a number of seconds in [1, 3600]; using %d",
                        env, ZT_SSH_CONNECT_TIMEOUT);
            snprintf(ssh_args, sizeof ssh_args, "-o BatchMode=yes -o ConnectTimeout=%ld", connect_s);
            cmd[k++] = "--hostfile";
            cmd[k++] = a->hostfile;
            /* a host that never answers ssh, or asks for a password, fails within the timeout
             * (unless the user chose ssh's arguments themselves) */
            if (!getenv("OMPI_MCA_plm_rsh_args")) {
                cmd[k++] = "--mca";
                cmd[k++] = "plm_rsh_args";
                cmd[k++] = ssh_args;
            }
        }
        if (geteuid() == 0) cmd[k++] = "--allow-run-as-root";
        if (!a->hostfile && a->n > sysconf(_SC_NPROCESSORS_ONLN)) cmd[k++] = "--oversubscribe";
        cmd[k++] = "--bind-to";
        cmd[k++] = "none";
    }
    cmd[k++] = self;
    cmd[k++] = "train";
    for (int i = 0; i < a->n_train_args; i++) cmd[k++] = a->train_args[i];
    cmd[k] = NULL;
    return cmd;
}

static volatile sig_atomic_t signals_seen = 0, last_signal = 0;
static void on_signal(int sig) {
    signals_seen++;
    last_signal = sig;
}

/* seconds from the environment variable `name` (a whole number in [lo, 86400]), or fallback */
static double env_seconds(const char *name, long lo, long fallback) {
    const char *g = getenv(name);
    long v;
    if (g && parse_whole(g, lo, 86400, &v) == 0) return (double)v;
    if (g) zt_warn("zerotrain run: %s '%.40s' is not a number of seconds in [%ld, 86400]; using %ld", name, g, lo, fallback);
    return (double)fallback;
}

/* the earlier of a planned time (0: none) and t */
static double end_by(double planned, double t) { return planned > 0 && planned < t ? planned : t; }

/* Output of the launcher passed on to this process's stdout and stderr, each line also read by the
 * attempt's scanner (--restarts only: without it the launcher writes its stdout to the terminal
 * itself); its stderr always comes through here, for the notices of a clean stop (launcher_notes.h). */
typedef struct relay {
    int fd[2]; /* read ends of the launcher's stdout and stderr pipes; -1 once closed (or not piped) */
    zt_attempt *seen;
    zt_launcher_notes notes;
} relay;

/* Passes on what is there, waiting up to wait_ms for something; 0 once both pipes are at EOF. */
static int relay_some(relay *r, int wait_ms) {
    struct pollfd p[2];
    int n = 0;
    for (int i = 0; i < 2; i++)
        if (r->fd[i] >= 0) p[n++] = (struct pollfd){r->fd[i], POLLIN, 0};
    if (!n) {
        if (wait_ms > 0) poll(NULL, 0, wait_ms);
        return 0;
    }
    if (poll(p, (nfds_t)n, wait_ms) <= 0) return 1;
    for (int i = 0; i < 2; i++) {
        if (r->fd[i] < 0) continue;
        struct pollfd *q = r->fd[i] == p[0].fd ? &p[0] : &p[1];
        if (!q->revents) continue;
        char chunk[8192];
        ssize_t k = read(r->fd[i], chunk, sizeof chunk);
        if (k <= 0) {
            close(r->fd[i]);
            r->fd[i] = -1;
            continue;
        }
        if (i == 1) zt_launcher_notes_feed(&r->notes, chunk, (size_t)k);
        for (ssize_t off = 0; i == 0 && off < k;) { /* on, even when this process's own output is gone */
            ssize_t w = write(1, chunk + off, (size_t)(k - off));
            if (w <= 0 && errno != EINTR) break;
            if (w > 0) off += w;
        }
        if (r->seen) zt_attempt_scan(r->seen, i, chunk, (size_t)k);
    }
    return r->fd[0] >= 0 || r->fd[1] >= 0;
}

/* CLEAN_STOP: the job ended with ZT_EXIT_PREEMPTED (the launcher's notices of it are dropped) */
static void relay_end(relay *r, int clean_stop) {
    for (int i = 0; i < 2; i++)
        if (r->fd[i] >= 0) close(r->fd[i]);
    r->fd[0] = r->fd[1] = -1;
    zt_launcher_notes_end(&r->notes, clean_stop);
}

static void relay_close(relay *r) { relay_end(r, 0); }

/* Ends what the launcher left behind: processes it started that outlived it (an rsh agent still
 * waiting for a host when mpirun gave up) were handed to this process (a child subreaper, set in
 * launch_and_wait) instead of init; they are killed with their trees and reaped, so that nothing
 * of an attempt outlives it or keeps this process's output open. */
static void reap_strays(void) {
    DIR *proc = opendir("/proc");
    for (struct dirent *d; proc && (d = readdir(proc));)
        if (zt_proc_parent(d->d_name) == getpid()) zt_kill_tree((pid_t)atol(d->d_name));
    if (proc) closedir(proc);
    while (waitpid(-1, NULL, 0) > 0 || errno == EINTR) {}
}

/* Growing back: an attempt of --restarts on fewer ranks than asked (hosts of the hostfile did not
 * answer) probes the hostfile again, in a child, every ZEROTRAIN_GROW_INTERVAL seconds once its ranks
 * train; when the hosts that answer hold more ranks, the ranks are asked to save and exit (SIGUSR1,
 * as on Ctrl-C: exit 99) and the restart runs on all of them. Without it a job shrunk by a link
 * down for a while stayed shrunk until its next failure. */
#define ZT_GROW_INTERVAL 10 /* seconds between probes of the missing hosts (ZEROTRAIN_GROW_INTERVAL) */
typedef struct grow_watch {
    const zt_restart_job *job; /* the job as asked for (all hosts, all ranks) */
    long ranks_now;            /* the attempt's ranks */
    double interval, next_at;
    pid_t prober;              /* the probe in flight (0: none) */
    int asked;                 /* the ranks were asked to save and exit, to grow */
} grow_watch;

/* One look: starts a probe when one is due, or reads the one in flight; asks the launcher's ranks to
 * save and exit when more ranks would answer. */
static void grow_look(grow_watch *g, pid_t launcher) {
    if (g->asked) return;
    if (g->prober > 0) {
        int status = 0;
        if (waitpid(g->prober, &status, WNOHANG) != g->prober) return;
        g->prober = 0;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            g->asked = 1;
            fprintf(stderr, "zerotrain run: the hosts that did not answer answer again: the ranks save and exit, "
                            "and the job starts again on all of them\n");
            kill(launcher, SIGUSR1);
        }
        return;
    }
    if (zt_now() < g->next_at) return;
    g->next_at = zt_now() + g->interval;
    fflush(stderr);
    if ((g->prober = fork()) == 0) {
        zt_restart_plan plan;
        char lost[512];
        int n_lost = zt_restart_hosts(g->job, &plan, lost, sizeof lost);
        if (plan.hostfile[0]) unlink(plan.hostfile);
        _exit(n_lost >= 0 && plan.ranks > g->ranks_now ? 0 : 1);
    }
}

/* the probe in flight, ended (the attempt is over) */
static void grow_stop(grow_watch *g) {
    if (!g || g->prober <= 0) return;
    zt_kill_tree(g->prober);
    while (waitpid(g->prober, NULL, 0) < 0 && errno == EINTR) {}
    g->prober = 0;
}

/* Runs cmd as a child in its own process group and waits for it, passing signals on as the
 * header says. With seen, the child's output goes through this process (relay). The launch's Open
 * MPI job id goes to *jobid once a rank shows it. With grow, the attempt may end itself to grow back
 * (grow_watch). Returns this process's exit status. */
static int launch_and_wait_for(const char **cmd, zt_attempt *seen, grow_watch *grow, unsigned long *jobid) {
    relay r = {{-1, -1}, seen, {.out_fd = 2}};
    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    if ((seen && pipe2(out_pipe, O_CLOEXEC)) || pipe2(err_pipe, O_CLOEXEC)) {
        fprintf(stderr, "zerotrain: error: cannot make a pipe for %s: %s\n", cmd[0], strerror(errno));
        return 1;
    }
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, &old); /* no signal may land between fork and the handlers */
    prctl(PR_SET_CHILD_SUBREAPER, 1);     /* what the launcher orphans comes here (reap_strays) */
    pid_t child = fork();
    if (child < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        fprintf(stderr, "zerotrain: error: cannot start %s: %s\n", cmd[0], strerror(errno));
        return 1;
    }
    if (child == 0) {
        setpgid(0, 0);
        sigprocmask(SIG_SETMASK, &old, NULL);
        /* in a background process group a read of the terminal would stop the launcher */
        int null_fd = open("/dev/null", O_RDONLY);
        if (null_fd >= 0) dup2(null_fd, 0);
        if (seen) dup2(out_pipe[1], 1);
        dup2(err_pipe[1], 2);
        execvp(cmd[0], (char *const *)cmd);
        fprintf(stderr, "zerotrain: error: cannot start %s (is it installed and on PATH?)\n", cmd[0]);
        _exit(127);
    }
    if (seen) {
        close(out_pipe[1]);
        r.fd[0] = out_pipe[0];
    }
    close(err_pipe[1]);
    r.fd[1] = err_pipe[0];
    setpgid(child, child); /* also here, so the group exists before any signal is passed on */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigprocmask(SIG_SETMASK, &old, NULL);

    double grace = env_seconds("ZEROTRAIN_STOP_GRACE", 0, ZT_STOP_GRACE_DEFAULT), stop_at = 0, started_at = zt_now();
    double startup_s = seen ? env_seconds("ZEROTRAIN_STARTUP_TIMEOUT", 1, ZT_STARTUP_TIMEOUT) : 0;
    double end_grace = seen ? env_seconds("ZEROTRAIN_LAUNCHER_GRACE", 1, ZT_LAUNCHER_GRACE) : 0;
    double stop_launch_at = 0, next_look = 0; /* when a failed launch is ended; the next look at the ranks */
    double next_jobid_look = 0;
    int jobid_looks = 0, forwarded = 0, status = 0, ranks_here_max = 0;
    for (;;) {
        pid_t w = waitpid(child, &status, WNOHANG);
        if (w == child) break;
        /* the first rank's environment names it: looked for every 0.1 s for the first 10 s (a rank
         * of a small job may start, save and be killed within a second, and a launch whose id was
         * not learned leaves its segments), then a second apart up to about 5 minutes (a walk of
         * /proc: none shows up under srun, or where this node runs no rank) */
        if (!*jobid && jobid_looks < 400 && zt_now() >= next_jobid_look) {
            next_jobid_look = zt_now() + (jobid_looks < 100 ? 0.1 : 1);
            jobid_looks++;
            *jobid = zt_tree_mpi_jobid(child);
        }
        if (w < 0 && errno != EINTR) {
            fprintf(stderr, "zerotrain: error: waiting for %s: %s\n", cmd[0], strerror(errno));
            relay_close(&r);
            return 1;
        }
        if (signals_seen >= 2 || (forwarded && zt_now() > stop_at)) {
            zt_kill_tree(child);
            waitpid(child, &status, 0);
            relay_close(&r);
            reap_strays();
            if (signals_seen >= 2)
                fprintf(stderr, "zerotrain: error: stopped at once by a second signal; a checkpoint being written "
                                "is left incomplete, `latest` names the previous one\n");
            else
                fprintf(stderr, "zerotrain: error: the ranks did not save and exit within %.0f s of the signal "
                                "(ZEROTRAIN_STOP_GRACE); stopped them, `latest` names the previous checkpoint\n",
                        grace);
            return 1;
        }
        if (seen && seen->started && zt_now() >= next_look) { /* this node's ranks, once a second */
            next_look = zt_now() + 1;
            int ranks_here = zt_tree_count(child, "zerotrain");
            if (ranks_here > ranks_here_max) ranks_here_max = ranks_here;
            if (ranks_here_max && !ranks_here) stop_launch_at = end_by(stop_launch_at, zt_now() + end_grace);
        }
        if (grow && seen->started && !forwarded && !seen->launcher_ending && !seen->rank_signal && !seen->hang)
            grow_look(grow, child);
        if (seen && seen->launcher_ending) stop_launch_at = end_by(stop_launch_at, zt_now() + end_grace);
        /* a rank died of a signal, or the watchdog aborts the job: the attempt is lost, and the
         * launcher's own teardown (SIGTERM to every other rank, which the ranks take as a request
         * to save, then SIGKILL; waiting for a host it cannot reach) only delays the restart, so
         * the launch is ended now (what the ranks were writing is a .tmp_step directory that never
         * became `latest`), after a hang a second later (the other ranks' own lines) */
        if (seen && seen->rank_signal) stop_launch_at = end_by(stop_launch_at, zt_now());
        if (seen && seen->hang) stop_launch_at = end_by(stop_launch_at, zt_now() + 1);
        if (stop_launch_at && !forwarded && zt_now() > stop_launch_at) {
            /* the launcher said the job failed, or every rank of this node has ended, and still it
             * does not exit (found by scripts/soak: mpirun hung when both ranks were SIGKILLed at
             * once): it is stopped, and the attempt ends as a failure a restart can cure */
            zt_kill_tree(child);
            waitpid(child, &status, 0);
            relay_close(&r);
            reap_strays();
            if (!seen->rank_signal && !seen->hang)
                fprintf(stderr, "zerotrain: error: run: %s %s did not exit within %.0f s (ZEROTRAIN_LAUNCHER_GRACE); "
                                "stopped it\n", seen->launcher_ending ? "the job failed, but" : "the ranks here ended, but",
                        cmd[0], end_grace);
            return seen->rank_signal ? 128 + seen->rank_signal : 1;
        }
        if (seen && !seen->started && startup_s > 0 && zt_now() > started_at + startup_s) {
            /* a host that never starts its part (its launch hangs, its daemon cannot call back):
             * the attempt fails, and a restart probes the hosts again */
            zt_kill_tree(child);
            waitpid(child, &status, 0);
            relay_close(&r);
            reap_strays();
            seen->start_timeout = 1;
            fprintf(stderr, "zerotrain: error: run: the ranks did not start within %.0f s (ZEROTRAIN_STARTUP_TIMEOUT); "
                            "stopped the launch\n", startup_s);
            return 1;
        }
        if (signals_seen == 1 && !forwarded && seen && !seen->started) {
            /* before the banner no rank has trained, and some may not run yet (the launcher passes a
             * signal only to the ranks it has started; found by scripts/soak, a rank in start-up
             * ended on it, status 138): nothing to save, so the launch is stopped at once */
            zt_kill_tree(child);
            waitpid(child, &status, 0);
            relay_close(&r);
            reap_strays();
            fprintf(stderr, "zerotrain run: %s before the ranks started: stopped the launch, nothing to save; "
                            "`latest` names the last complete checkpoint\n",
                    last_signal == SIGINT ? "interrupted" : "terminated");
            return ZT_EXIT_PREEMPTED;
        }
        if (signals_seen == 1 && !forwarded) {
            forwarded = 1;
            stop_at = zt_now() + grace;
            fprintf(stderr, "zerotrain run: %s: the ranks finish their step, save a checkpoint and exit (up to %.0f s; "
                            "a second Ctrl-C stops at once)\n",
                    last_signal == SIGINT ? "interrupted" : "terminated", grace);
            kill(child, SIGUSR1);
        }
        if (!relay_some(&r, 50)) {
            struct timespec nap = {0, 50 * 1000 * 1000};
            nanosleep(&nap, NULL);
        }
    }
    reap_strays();
    /* the rest of the output: to EOF, or until it stops coming (a rank the launcher lost may
     * still hold the pipe open) */
    for (double until = zt_now() + 2; zt_now() < until && relay_some(&r, 100);) {}
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    relay_end(&r, code == ZT_EXIT_PREEMPTED);
    if (seen && WIFSIGNALED(status)) seen->launcher_signal = WTERMSIG(status);
    if (forwarded && code == ZT_EXIT_PREEMPTED) return ZT_EXIT_PREEMPTED;
    if (forwarded) {
        fprintf(stderr, "zerotrain: error: the ranks ended with status %d after the signal, not %d: no checkpoint "
                        "was confirmed, `latest` names the last complete one\n", code, ZT_EXIT_PREEMPTED);
        /* a launcher signalled before its ranks started may end with 0: that is no success */
        return code ? code : 1;
    }
    return code;
}

/* launch_and_wait_for, then what the launch left in /dev/shm: Open MPI's shared-memory segments are
 * removed by the ranks and their launcher when they end, so a rank killed outright (SIGKILL, the
 * kernel's memory-limit kill) and a launcher this process ended leave theirs behind (found by
 * scripts/soak). Only this launch's go, named by its job id (into *jobid when given): a segment a
 * rank still being torn down maps is kept, and --restarts sweeps it again after later attempts. */
static int launch_and_wait(const char **cmd, zt_attempt *seen, grow_watch *grow, unsigned long *jobid) {
    unsigned long id = 0;
    int rc = launch_and_wait_for(cmd, seen, grow, &id);
    grow_stop(grow);
    zt_remove_mpi_segments("/dev/shm", id);
    if (jobid) *jobid = id;
    return rc;
}

/* The job ids of this run's launches, swept again after each attempt and at the end: a killed
 * launch's other ranks may still be exiting, their segments mapped, when its own sweep runs. */
typedef struct launched_jobs {
    unsigned long id[64];
    int n;
} launched_jobs;

static void sweep_launched(launched_jobs *jobs, unsigned long latest) {
    if (latest && jobs->n < (int)(sizeof jobs->id / sizeof jobs->id[0])) jobs->id[jobs->n++] = latest;
    for (int i = 0; i < jobs->n; i++) zt_remove_mpi_segments("/dev/shm", jobs->id[i]);
}

/* Back-off before a restart: none after an attempt that saved a checkpoint (a fault in a job that
 * was making progress: every second waited is lost training), else ZEROTRAIN_RESTART_BACKOFF seconds
 * (default 1) after the first fruitless attempt, doubled for each further one, at most
 * ZT_BACKOFF_MAX. `fruitless`: attempts in a row that saved nothing. */
#define ZT_BACKOFF_MAX 30.0
static double backoff_seconds(int fruitless) {
    if (fruitless < 1) return 0;
    double base = 1;
    const char *env = getenv("ZEROTRAIN_RESTART_BACKOFF");
    if (env) base = atof(env);
    double wait = base;
    for (int i = 1; i < fruitless && wait < ZT_BACKOFF_MAX; i++) wait *= 2;
    return wait > ZT_BACKOFF_MAX ? ZT_BACKOFF_MAX : wait;
}

/* Waits `seconds`, cut short by a signal: 0, or -1 when a signal came. */
static int wait_unless_signalled(double seconds) {
    for (double until = zt_now() + seconds; zt_now() < until;) {
        if (signals_seen) return -1;
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    return signals_seen ? -1 : 0;
}

/* The restart loop of --restarts N (run_restart.c decides; this launches, logs and backs off). */
static int run_with_restarts(run_args *a, const char *self) {
    run_args now = *a;
    const char **cmd = NULL;
    char nbuf[32], resume_set[4200], hostfile[64] = "", previous_error[400] = "";
    int rc = 0, fruitless = 0, disk_full_in_a_row = 0;
    double disk_full_since = 0; /* when the first attempt of those in a row ended on a full disk */
    launched_jobs jobs = {{0}, 0};
    double run_start = zt_unix_time(); /* compared with files' ctimes */
    char swap_dirs[2][4096];
    zt_restart_job config_job = {self, a->train_args, a->n_train_args, a->n, a->tp, a->hostfile, 0, 0, "", a->n, 0};
    int n_swap_dirs = zt_restart_swap_dirs(&config_job, swap_dirs, 2);
    /* Open MPI ends a failed job's other ranks with SIGTERM and, odls_base_sigkill_timeout seconds
     * later (default 1, one rank after another), SIGKILL; the ranks take SIGTERM as a request to
     * save, which they cannot do once a peer is gone, so the restart waited out the timeout (about
     * 4 s on 2 x 2 ranks). Their work is lost either way: SIGKILL at once, unless the user chose. */
    if (!getenv("OMPI_MCA_odls_base_sigkill_timeout")) setenv("OMPI_MCA_odls_base_sigkill_timeout", "0", 1);
    if (a->hostfile) { /* the first attempt too runs on the hosts that answer */
        zt_restart_job job = {self, a->train_args, a->n_train_args, a->n, a->tp, a->hostfile, 0, 0, "", a->n, 0};
        zt_restart_plan plan;
        char lost[512];
        if (zt_restart_hosts(&job, &plan, lost, sizeof lost) > 0) {
            fprintf(stderr, "zerotrain run: host%s %s do%s not answer (probe %.1f s): starting on %ld rank%s\n",
                    strchr(lost, ',') ? "s" : "", lost, strchr(lost, ',') ? "" : "es", plan.probe_seconds,
                    plan.ranks, plan.ranks == 1 ? "" : "s");
            now.n = plan.ranks;
        }
        if (plan.hostfile[0]) {
            snprintf(hostfile, sizeof hostfile, "%s", plan.hostfile);
            now.hostfile = hostfile;
        }
    }
    for (long attempt = 0;; attempt++) {
        snprintf(nbuf, sizeof nbuf, "%ld", now.n);
        cmd = build_command(&now, self, nbuf);
        /* the watchdog's roll of this attempt has a name this process knows: removed below when
         * the ranks of rank 0's host were killed before their exit path could */
        char roll_tag[96], roll_path[160];
        snprintf(roll_tag, sizeof roll_tag, "run%ld-%ld", (long)getpid(), attempt);
        snprintf(roll_path, sizeof roll_path, "/dev/shm/.zerotrain-roll-%s", roll_tag);
        setenv("ZEROTRAIN_ROLL_TAG", roll_tag, 1);
        zt_attempt seen;
        memset(&seen, 0, sizeof seen);
        double started = zt_now();
        /* fewer ranks than asked, on the hosts that answered, and a restart left to grow back with */
        zt_restart_job all_hosts = {self, a->train_args, a->n_train_args, a->n, a->tp, a->hostfile, 0, 0, "", a->n, 0};
        grow_watch grow = {&all_hosts, now.n, env_seconds("ZEROTRAIN_GROW_INTERVAL", 1, ZT_GROW_INTERVAL), 0, 0, 0};
        grow.next_at = zt_now() + grow.interval;
        int may_grow = a->hostfile && now.n < a->n && attempt < a->restarts;
        unsigned long jobid = 0;
        rc = launch_and_wait(cmd, &seen, may_grow ? &grow : NULL, &jobid);
        free(cmd);
        sweep_launched(&jobs, jobid);
        for (int i = 0; i < n_swap_dirs; i++) zt_restart_sweep_swaps(swap_dirs[i], run_start); /* killed ranks' files */
        unlink(roll_path); /* the attempt is over: no rank of it reads the roll any more */
        if (rc == 0 || signals_seen) break; /* done, or stopped by the user: no restart */
        zt_restart_job job = {self, a->train_args, a->n_train_args, a->n, a->tp, a->hostfile, rc, disk_full_in_a_row,
                              previous_error, now.n, 0};
        zt_restart_plan plan;
        double ended = zt_now();
        job.disk_full_for = disk_full_in_a_row ? ended - disk_full_since : 0;
        zt_restart_decide(&job, &seen, &plan);
        if (grow.asked && rc == ZT_EXIT_PREEMPTED && !plan.give_up) { /* the ranks saved and exited to grow */
            snprintf(plan.kind, sizeof plan.kind, "grow");
            snprintf(plan.cause, sizeof plan.cause, "the hosts that did not answer answer again");
        }
        snprintf(previous_error, sizeof previous_error, "%s", seen.first_error);
        if (hostfile[0]) unlink(hostfile); /* the previous attempt's answering hosts */
        snprintf(hostfile, sizeof hostfile, "%s", plan.hostfile);
        disk_full_in_a_row = !strcmp(plan.kind, "disk-full") && !seen.saves ? disk_full_in_a_row + 1 : 0;
        if (disk_full_in_a_row == 1) disk_full_since = ended;
        fruitless = seen.saves ? 0 : fruitless + 1;
        double wait = backoff_seconds(fruitless);
        if (plan.give_up || attempt >= a->restarts) {
            fprintf(stderr, "zerotrain: error: run: giving up after %ld restart%s: %s%s\n", attempt,
                    attempt == 1 ? "" : "s", plan.give_up ? "a restart cannot cure it: " : "no restarts left; last cause: ",
                    plan.cause);
            break;
        }
        /* where the restart's time goes: the launcher's end after the first sign of the failure, the
         * decision (its host probe), the back-off; the launch and the resume follow this line */
        fprintf(stderr, "zerotrain run: restart %ld/%ld [%s] after %.1f s (launcher ended %.1f s after the failure, "
                        "decided in %.1f s, probe %.1f s, back-off %.1f s): %s; resuming from %s on %ld rank%s\n",
                attempt + 1, a->restarts, plan.kind, ended - started, seen.failed_at > 0 ? ended - seen.failed_at : 0.0,
                zt_now() - ended, plan.probe_seconds, wait, plan.cause,
                plan.resume_path[0] ? plan.resume_path : plan.latest_step >= 0 ? "latest" : "the start (no checkpoint)",
                plan.ranks, plan.ranks == 1 ? "" : "s");
        if (wait_unless_signalled(wait)) {
            fprintf(stderr, "zerotrain run: stopped by a signal before the restart; `latest` names the last "
                            "complete checkpoint\n");
            rc = ZT_EXIT_PREEMPTED;
            break;
        }
        now = *a;
        now.n = plan.ranks;
        if (hostfile[0]) now.hostfile = hostfile;
        if (plan.resume_path[0]) { /* room was left for it (parse_args) */
            snprintf(resume_set, sizeof resume_set, "checkpoint.resume=%s", plan.resume_path);
            now.train_args[now.n_train_args++] = "--set";
            now.train_args[now.n_train_args++] = resume_set;
        }
    }
    if (hostfile[0]) unlink(hostfile);
    sweep_launched(&jobs, 0);
    return rc;
}

int zt_cmd_run(int argc, char **argv) {
    run_args a;
    zt_err err = {{0}};
    if (parse_args(argc, argv, &a, &err)) {
        zt_print_error(&err); /* the line names what is wrong; `zerotrain --help` shows the usage */
        free(a.train_args);
        return 2;
    }
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) snprintf(self, sizeof self, "zerotrain");
    else self[len] = '\0';
    char nbuf[32];
    snprintf(nbuf, sizeof nbuf, "%ld", a.n);
    const char **cmd = build_command(&a, self, nbuf);
    /* threads per rank: split this node's cores among the local ranks unless the user chose */
    if (!getenv("OMP_NUM_THREADS")) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN), per = a.hostfile ? 1 : cores / a.n;
        char tbuf[32];
        snprintf(tbuf, sizeof tbuf, "%ld", per > 0 ? per : 1);
        setenv("OMP_NUM_THREADS", tbuf, 1);
    }
    printf("zerotrain run: OMP_NUM_THREADS=%s", getenv("OMP_NUM_THREADS"));
    for (int i = 0; cmd[i]; i++) printf(strchr(cmd[i], ' ') ? " '%s'" : " %s", cmd[i]); /* as a shell reads it */
    printf("\n");
    fflush(stdout);
    int rc = a.restarts ? run_with_restarts(&a, self) : launch_and_wait(cmd, NULL, NULL, NULL);
    free(cmd);
    free(a.train_args);
    return rc;
}
