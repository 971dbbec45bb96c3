/* run_restart.c — the decisions behind `zerotrain run --restarts N` (run.c owns the loop that
 * launches, waits and backs off). After a failed attempt:
 *   - causes a restart cures: a rank killed (by a signal, the kernel's OOM killer, a person), a hang
 *     the watchdog caught, a host lost (mpirun loses its daemon), exit 99 (the ranks were preempted
 *     and saved), or any other failure the checks below do not explain (a restart is cheap to try);
 *   - causes it cannot cure, each found from the job's state rather than only from its words: the
 *     config no longer passes `zerotrain config` (read again, it may have been edited); `latest`
 *     fails `zerotrain info` and no older step of the directory passes it (with one that passes, the
 *     job resumes from that one); a full disk that stays full over ZT_DISK_FULL_TRIES attempts in a
 *     row spanning at least ZEROTRAIN_DISK_FULL_SECONDS (default ZT_DISK_FULL_SECONDS): attempts
 *     alone are not enough, since a job that resumes and saves within seconds of its start tries
 *     three times within a few seconds, while a disk filled by a neighbour's burst or a log
 *     rotation frees again within a minute.
 * With a hostfile, when a host may be gone, each host is probed with a one-process mpirun (what the
 * job itself needs: its launcher reaches the host and the host's daemon reaches back), all at once
 * (a host still silent after ZT_PROBE_FACTOR times the slowest answer is taken as gone), and the
 * next attempt runs on the hosts that answered, with fewer ranks when some did not: the
 * checkpoint is resharded on resume. */
#define _GNU_SOURCE /* pipe2 */
#include "cmd/run_restart.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <time.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "util/util.h"

#define ZT_DISK_FULL_TRIES 3       /* attempts in a row that end on a full disk before giving up ... */
#define ZT_DISK_FULL_SECONDS 60.0  /* ... and for at least this long (ZEROTRAIN_DISK_FULL_SECONDS) */
#define ZT_PROBE_TIMEOUT_DEFAULT 20 /* seconds a host gets to answer the probe (ZEROTRAIN_PROBE_TIMEOUT) ... */
#define ZT_PROBE_FACTOR 4.0         /* ... or, once a host has answered, this many times the slowest answer ... */
#define ZT_PROBE_FLOOR 2.0          /* ... and at least this many seconds */
#define ZT_CHECK_TIMEOUT 600       /* seconds for `config` (`info` reads a whole checkpoint: zt_checkpoint_read_bound) */

static int contains(const char *s, const char *word) { return strstr(s, word) != NULL; }

static void scan_line(zt_attempt *a, const char *line) {
    if (!strncmp(line, "step ", 5) && strchr(line, '/') && contains(line, "| loss")) a->steps++;
    if (!strncmp(line, "model: ", 7)) a->started = 1; /* the banner ("model: GPT-2 L12 ..."): every rank is up */
    if (contains(line, "checkpoint: saved") || contains(line, "checkpoint saved")) a->saves++;
    /* Open MPI: "mpirun noticed that process rank 1 with PID 123 on node x exited on signal 9 (Killed)." */
    const char *sig = strstr(line, "exited on signal ");
    if (sig && !a->rank_signal) a->rank_signal = atoi(sig + 17);
    /* Open MPI's words once it has decided that the job failed and is ending it */
    if (contains(line, "mpirun noticed that process") || contains(line, "mpirun has exited due to process") ||
        contains(line, "the job has been aborted"))
        a->launcher_ending = 1;
    if (contains(line, "ORTE has lost communication") || contains(line, "ORTE does not know how to route") ||
        contains(line, "daemon did not report back") || contains(line, "lost connection"))
        a->lost_contact = 1;
    if (!a->failed_at && (a->rank_signal || a->launcher_ending || a->lost_contact))
        a->failed_at = zt_now();
    if (!strncmp(line, "zerotrain: error:", 17)) {
        if (!a->first_error[0]) snprintf(a->first_error, sizeof a->first_error, "%s", line + 18);
        if (contains(line, "; aborting the job")) a->hang = 1;
        if (contains(line, "; aborting the job") && contains(line, ") stopped answering ")) a->hang_on_stopped = 1;
        if (!a->failed_at) a->failed_at = zt_now();
        if (contains(line, "No space left") || contains(line, "quota") || contains(line, "disk full") ||
            contains(line, "file system is full"))
            a->disk_full = 1;
    }
}

void zt_attempt_scan(zt_attempt *a, int stream, const char *data, size_t n) {
    char *buf = a->partial[stream];
    size_t *len = &a->partial_len[stream];
    for (size_t i = 0; i < n; i++) {
        if (data[i] == '\n') {
            buf[*len] = 0;
            scan_line(a, buf);
            *len = 0;
        } else if (*len < sizeof a->partial[stream] - 1) { /* a longer line is scanned by its start */
            buf[(*len)++] = data[i];
        }
    }
}

pid_t zt_proc_parent(const char *pid_name) {
    if (pid_name[0] < '0' || pid_name[0] > '9') return -1;
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", pid_name);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = '\0';
    const char *close_paren = strrchr(buf, ')'); /* the command name may hold spaces */
    int parent;
    return close_paren && sscanf(close_paren + 1, " %*c %d", &parent) == 1 ? (pid_t)parent : -1;
}

/* The pids of root and every process below it on this node, into *out (malloc'ed); how many. The
 * whole table is listed first (from /proc) because a killed parent's children move to init. */
static int list_tree(pid_t root, pid_t **out) {
    int cap = 64, n = 0;
    pid_t *pid = zt_xmalloc((size_t)cap * sizeof *pid), *ppid = zt_xmalloc((size_t)cap * sizeof *ppid);
    DIR *proc = opendir("/proc");
    for (struct dirent *d; proc && (d = readdir(proc));) {
        pid_t parent = zt_proc_parent(d->d_name);
        if (parent < 0) continue;
        if (n == cap) {
            cap *= 2;
            pid = zt_xrealloc(pid, (size_t)cap * sizeof *pid);
            ppid = zt_xrealloc(ppid, (size_t)cap * sizeof *ppid);
        }
        pid[n] = (pid_t)atol(d->d_name);
        ppid[n++] = parent;
    }
    if (proc) closedir(proc);
    /* mark the tree: root, then anything whose parent is marked, until nothing changes */
    char *in = zt_xcalloc((size_t)n + 1, 1);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < n; i++) {
            if (in[i]) continue;
            int below = pid[i] == root;
            for (int j = 0; j < n && !below; j++) below = in[j] && pid[j] == ppid[i];
            if (below) in[i] = changed = 1;
        }
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (in[i]) pid[k++] = pid[i];
    free(in);
    free(ppid);
    *out = pid;
    return k;
}

/* SIGKILL to pid and every process below it on this node. mpirun puts the ranks it starts in
 * process groups of their own, so a signal to its group would orphan them. Ranks on other nodes
 * end with their node's daemon, which loses mpirun. */
void zt_kill_tree(pid_t root) {
    for (int pass = 0; pass < 2; pass++) { /* again, for a process started while the first pass ran */
        pid_t *pid;
        int n = list_tree(root, &pid);
        for (int i = 0; i < n; i++) kill(pid[i], SIGKILL);
        free(pid);
    }
}

int zt_tree_count(pid_t root, const char *name) {
    pid_t *pid;
    int n = list_tree(root, &pid), found = 0;
    for (int i = 0; i < n; i++) {
        char path[64], comm[64] = "";
        snprintf(path, sizeof path, "/proc/%ld/comm", (long)pid[i]);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
        fclose(f);
        found += !strcmp(comm, name);
    }
    free(pid);
    return found;
}

int zt_capture(const char *const *argv, double timeout_s, char *out, size_t cap) {
    int fds[2];
    if (cap) out[0] = 0;
    if (pipe2(fds, O_CLOEXEC)) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0); /* its own group: a timeout kills what it started too */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        int null_fd = open("/dev/null", O_RDONLY);
        if (null_fd >= 0) dup2(null_fd, 0);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    setpgid(pid, pid);
    close(fds[1]);
    size_t got = 0;
    double end = zt_now() + timeout_s;
    int timed_out = 0;
    for (;;) { /* until EOF: the output closes when the command (and what it started) ends */
        double left = end - zt_now();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd p = {fds[0], POLLIN, 0};
        int r = poll(&p, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        char chunk[4096];
        ssize_t k = read(fds[0], chunk, sizeof chunk);
        if (k <= 0) break;
        size_t take = got + (size_t)k < cap ? (size_t)k : (cap > got + 1 ? cap - got - 1 : 0);
        memcpy(out + got, chunk, take);
        got += take;
        if (cap) out[got] = 0;
    }
    close(fds[0]);
    if (timed_out) zt_kill_tree(pid); /* mpirun starts its rsh agents in sessions of their own */
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (timed_out) return -2;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* the first line of text that starts with "zerotrain: error:", without the prefix (or the last line) */
static void error_of(const char *text, char *buf, size_t cap) {
    const char *e = strstr(text, "zerotrain: error: ");
    if (e) e += 18;
    else {
        size_t n = strlen(text);
        while (n && text[n - 1] == '\n') n--;
        const char *start = text + n;
        while (start > text && start[-1] != '\n') start--;
        e = start;
    }
    size_t n = strcspn(e, "\n");
    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), e);
}

/* `zerotrain config` of the job's config and --set pairs on `ranks` ranks: 0, or the error in buf;
 * the checkpoint.dir it names goes to ckdir ("" when null). */
static int check_config(const zt_restart_job *job, long ranks, char *ckdir, size_t ckcap, char *buf, size_t cap) {
    const char **argv = zt_xcalloc((size_t)job->n_train_args + 8, sizeof *argv);
    char rbuf[32];
    snprintf(rbuf, sizeof rbuf, "%ld", ranks);
    int k = 0;
    argv[k++] = job->self;
    argv[k++] = "config";
    for (int i = 0; i < job->n_train_args; i++) argv[k++] = job->train_args[i];
    argv[k++] = "--ranks";
    argv[k++] = rbuf;
    size_t out_cap = 1 << 20;
    char *out = zt_xmalloc(out_cap);
    int rc = zt_capture(argv, ZT_CHECK_TIMEOUT, out, out_cap);
    ckdir[0] = 0;
    if (rc == 0) { /* "checkpoint:\n  dir: \"PATH\"" in the effective config */
        const char *sec = strstr(out, "\ncheckpoint:\n");
        const char *dir = sec ? strstr(sec, "\n  dir: ") : NULL;
        if (dir && dir[8] == '"') {
            const char *q = strchr(dir + 9, '"');
            if (q) snprintf(ckdir, ckcap, "%.*s", (int)(q - dir - 9), dir + 9);
        }
    } else {
        error_of(out, buf, cap);
    }
    free(out);
    free(argv);
    return rc;
}

/* The NVMe swap directories of the job's effective config (offload_optimizer and offload_param
 * nvme_path), into dirs; returns how many. */
int zt_restart_swap_dirs(const zt_restart_job *job, char dirs[][4096], int cap) {
    const char **argv = zt_xcalloc((size_t)job->n_train_args + 4, sizeof *argv);
    int k = 0, n = 0;
    argv[k++] = job->self;
    argv[k++] = "config";
    for (int i = 0; i < job->n_train_args; i++) argv[k++] = job->train_args[i];
    size_t out_cap = 1 << 20;
    char *out = zt_xmalloc(out_cap);
    if (zt_capture(argv, ZT_CHECK_TIMEOUT, out, out_cap) == 0) {
        for (const char *p = out; n < cap && (p = strstr(p, "nvme_path: \"")); p++) {
            const char *start = p + 12, *q = strchr(start, '"');
            if (!q) break;
            snprintf(dirs[n], 4096, "%.*s", (int)(q - start), start);
            int dup = 0;
            for (int i = 0; i < n; i++) dup |= !strcmp(dirs[i], dirs[n]);
            if (!dup) n++;
        }
    }
    free(out);
    free(argv);
    return n;
}

void zt_restart_sweep_swaps(const char *dir, double since) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *de; (de = readdir(d));) {
        const char *name = de->d_name;
        size_t len = strlen(name);
        if (strncmp(name, "zerotrain-swap-", 15) || len < 5 || strcmp(name + len - 4, ".bin")) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        struct stat st;
        if (lstat(path, &st) || !S_ISREG(st.st_mode) || (double)st.st_ctime + 1 < since) continue; /* not this run's */
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) unlink(path); /* while holding it: no one takes it meanwhile */
        if (fd >= 0) close(fd);
    }
    closedir(d);
}

unsigned long zt_tree_mpi_jobid(pid_t root) {
    pid_t *pid;
    int n = list_tree(root, &pid);
    unsigned long jobid = 0;
    for (int i = 0; i < n && !jobid; i++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%ld/environ", (long)pid[i]);
        zt_err err = {{0}};
        size_t len = 0;
        char *env = zt_read_file_max(path, 1 << 20, &len, &err); /* NUL-separated NAME=VALUE */
        for (size_t at = 0; env && at < len; at += strlen(env + at) + 1)
            if (!strncmp(env + at, "OMPI_MCA_ess_base_jobid=", 24)) jobid = strtoul(env + at + 24, NULL, 10);
        free(env);
    }
    free(pid);
    return jobid;
}

/* whether a process on this node maps `path` (read from /proc/PID/maps: a shared-memory segment in use) */
static int mapped_by_anyone(const char *path) {
    DIR *proc = opendir("/proc");
    int mapped = 0;
    for (struct dirent *d; proc && !mapped && (d = readdir(proc));) {
        if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
        char maps[300], line[4608];
        snprintf(maps, sizeof maps, "/proc/%s/maps", d->d_name);
        FILE *f = fopen(maps, "r");
        while (f && !mapped && fgets(line, sizeof line, f)) {
            char *at = strchr(line, '/');
            if (at) at[strcspn(at, "\n")] = 0;
            mapped = at && !strcmp(at, path);
        }
        if (f) fclose(f);
    }
    if (proc) closedir(proc);
    return mapped;
}

int zt_remove_mpi_segments(const char *dir, unsigned long jobid) {
    DIR *d = opendir(dir);
    if (!d || !jobid) {
        if (d) closedir(d);
        return 0;
    }
    char job_field[32];
    snprintf(job_field, sizeof job_field, ".%lx.", jobid);
    int removed = 0;
    for (struct dirent *de; (de = readdir(d));) {
        /* vader_segment.NODE.UID.JOBID.LOCALRANK, all but NODE in hex / decimal: the job id is the
         * second field from the end, so a node name holding dots cannot fake it */
        const char *name = de->d_name, *last = strrchr(name, '.');
        if (strncmp(name, "vader_segment.", 14) || !last) continue;
        const char *before = last - 1;
        while (before > name && *before != '.') before--;
        size_t field_len = (size_t)(last - before) + 1;
        if (field_len != strlen(job_field) || strncmp(before, job_field, field_len)) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        struct stat st;
        if (lstat(path, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) continue;
        if (mapped_by_anyone(path)) continue; /* a live process of that job id (a reused one) still uses it */
        removed += unlink(path) == 0;
    }
    closedir(d);
    return removed;
}

/* `zerotrain info PATH`: 1 when it passes (every checksum of the checkpoint verifies), 0 when it
 * fails, -1 when it did not finish within the bound for the checkpoint's size (one line says so): a
 * stuck file system, which says nothing about the checkpoint's bytes */
static int checkpoint_good(const char *self, const char *path) {
    const char *argv[] = {self, "info", path, NULL};
    char out[8192], step_dir[4096], why[200];
    double bound = zt_checkpoint_read_bound(path, step_dir, sizeof step_dir, why, sizeof why);
    int rc = zt_capture(argv, bound > 0 ? bound : 1e9, out, sizeof out);
    if (rc == -2)
        fprintf(stderr, "zerotrain run: `zerotrain info %s` did not finish in %g s (%s): its file system may be stuck; "
                        "not taken as damaged\n", step_dir[0] ? step_dir : path, bound, why);
    return rc == -2 ? -1 : rc == 0;
}

/* the step `latest` of ckdir names (-1: none) */
static long latest_step(const char *ckdir) {
    char path[4200], name[256] = "";
    snprintf(path, sizeof path, "%s/latest", ckdir);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    if (!fgets(name, sizeof name, f)) name[0] = 0;
    fclose(f);
    const char *u = strrchr(name, '_');
    return u ? atol(u + 1) : -1;
}

/* The newest step_N of ckdir below `below` that `info` verifies, into path; 0, -1 when none, -2 when
 * a check did not finish (checkpoint_good). */
static int older_good(const char *self, const char *ckdir, long below, char *path, size_t cap) {
    for (;;) {
        DIR *d = opendir(ckdir);
        if (!d) return -1;
        long best = -1;
        char name[256] = "";
        for (struct dirent *e; (e = readdir(d));) {
            char *end;
            if (strncmp(e->d_name, "step_", 5)) continue;
            long s = strtol(e->d_name + 5, &end, 10);
            if (!*end && s < below && s > best) {
                best = s;
                snprintf(name, sizeof name, "%s", e->d_name);
            }
        }
        closedir(d);
        if (best < 0) return -1;
        snprintf(path, cap, "%s/%s", ckdir, name);
        int good = checkpoint_good(self, path);
        if (good) return good > 0 ? 0 : -2;
        below = best;
    }
}

/* A hostfile's "HOST slots=K" lines (K defaults to 1), in order. */
typedef struct { char name[128]; long slots; } host_line;

static int read_hostfile(const char *file, host_line *hosts, int cap) {
    FILE *f = fopen(file, "r");
    if (!f) return -1;
    int n = 0;
    char line[512];
    while (n < cap && fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char name[128];
        if (sscanf(line, "%127s", name) != 1) continue;
        snprintf(hosts[n].name, sizeof hosts[n].name, "%s", name);
        const char *s = strstr(line, "slots=");
        hosts[n].slots = s ? atol(s + 6) : 1;
        if (hosts[n].slots < 1) hosts[n].slots = 1;
        n++;
    }
    fclose(f);
    return n;
}

/* whether a one-process mpirun on host answers within the probe timeout */
static int host_answers(const char *host) {
    long timeout = ZT_PROBE_TIMEOUT_DEFAULT;
    const char *env = getenv("ZEROTRAIN_PROBE_TIMEOUT");
    if (env && atol(env) > 0) timeout = atol(env);
    const char *argv[] = {"mpirun", "-np", "1", "--host", host, "--allow-run-as-root", "true", NULL};
    if (geteuid() != 0) argv[5] = "true", argv[6] = NULL;
    char out[4096];
    return zt_capture(argv, (double)timeout, out, sizeof out) == 0;
}

/* Probes the hostfile's hosts; writes the answering ones to a new hostfile (plan->hostfile) and sets
 * plan->ranks. Returns the number of hosts lost (names in lost), or -1 when none answers. */
int zt_restart_hosts(const zt_restart_job *job, zt_restart_plan *plan, char *lost, size_t cap) {
    memset(plan, 0, sizeof *plan);
    plan->ranks = job->ranks;
    host_line hosts[256];
    int n = read_hostfile(job->hostfile, hosts, 256), n_lost = 0;
    lost[0] = 0;
    if (n <= 0) return 0; /* unreadable now: let the launcher say so */
    long slots = 0;
    char tmpl[] = "/tmp/zerotrain-hosts-XXXXXX";
    int fd = mkstemp(tmpl);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) return 0;
    /* every host at once: a child each (a host that does not answer costs the wait once, not once
     * per host before it). The wait: the timeout while no host has answered; once one has, a host
     * still silent after ZT_PROBE_FACTOR times the slowest answer (at least ZT_PROBE_FLOOR s) is
     * taken as gone. A link down cost the soak's restarts the whole timeout (10 s there) where the
     * answering hosts took 0.1 s; a loaded machine slows the answering hosts' probes too, and a
     * slow host taken as gone comes back with the next grow probe (run.c). */
    pid_t *prober = zt_xcalloc((size_t)n, sizeof *prober);
    int *answered = zt_xcalloc((size_t)n, sizeof *answered); /* 1 yes, -1 no, 0 not yet */
    for (int i = 0; i < n; i++)
        if ((prober[i] = fork()) == 0) _exit(host_answers(hosts[i].name) ? 0 : 1);
    double start = zt_now(), slowest = -1;
    for (int pending = n;;) {
        for (int i = 0; i < n; i++) {
            if (answered[i]) continue;
            int status = 0;
            if (prober[i] <= 0) {
                answered[i] = host_answers(hosts[i].name) ? 1 : -1; /* no child: probed here */
            } else {
                pid_t got = waitpid(prober[i], &status, WNOHANG);
                if (got == 0 || (got < 0 && errno == EINTR)) continue;
                answered[i] = got == prober[i] && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 1 : -1;
            }
            if (answered[i] > 0) slowest = fmax(slowest, zt_now() - start);
            pending--;
        }
        if (!pending) break;
        double waited = zt_now() - start;
        if (slowest >= 0 && waited > ZT_PROBE_FLOOR && waited > ZT_PROBE_FACTOR * slowest) {
            for (int i = 0; i < n; i++) /* silent: gone, and its probe with it */
                if (!answered[i] && prober[i] > 0) {
                    zt_kill_tree(prober[i]);
                    while (waitpid(prober[i], NULL, 0) < 0 && errno == EINTR) {}
                    answered[i] = -1;
                }
            break;
        }
        struct timespec nap = {0, 20 * 1000000L};
        nanosleep(&nap, NULL);
    }
    for (int i = 0; i < n; i++) {
        if (answered[i] > 0) {
            fprintf(f, "%s slots=%ld\n", hosts[i].name, hosts[i].slots);
            slots += hosts[i].slots;
        } else {
            size_t used = strlen(lost);
            snprintf(lost + used, cap - used, "%s%.127s", n_lost ? ", " : "", hosts[i].name);
            n_lost++;
        }
    }
    plan->probe_seconds = zt_now() - start;
    free(answered);
    free(prober);
    fclose(f);
    if (!slots) {
        unlink(tmpl);
        return -1;
    }
    snprintf(plan->hostfile, sizeof plan->hostfile, "%s", tmpl);
    plan->ranks = slots < job->ranks ? slots : job->ranks;
    plan->ranks -= plan->ranks % job->tp; /* whole tensor-parallel groups */
    return n_lost;
}

void zt_restart_decide(const zt_restart_job *job, const zt_attempt *a, zt_restart_plan *plan) {
    memset(plan, 0, sizeof *plan);
    plan->ranks = job->ranks;
    plan->latest_step = -1;
    char why[400] = "", ckdir[4096] = "";
    /* the config first: nothing else matters when it does not pass */
    if (check_config(job, job->ranks, ckdir, sizeof ckdir, why, sizeof why)) {
        plan->give_up = 1;
        snprintf(plan->kind, sizeof plan->kind, "bad-config");
        snprintf(plan->cause, sizeof plan->cause, "the config does not pass `zerotrain config`: %s", why);
        return;
    }
    if (ckdir[0]) plan->latest_step = latest_step(ckdir);
    /* the cause, most specific first */
    if (job->code == 99) {
        snprintf(plan->kind, sizeof plan->kind, "preempted");
        snprintf(plan->cause, sizeof plan->cause, "the ranks were stopped by a signal and saved (exit 99)");
    } else if (a->start_timeout) {
        snprintf(plan->kind, sizeof plan->kind, "no-start");
        snprintf(plan->cause, sizeof plan->cause, "the ranks did not start in time (a host that does not answer?)");
    } else if (a->hang) {
        snprintf(plan->kind, sizeof plan->kind, "hang");
        snprintf(plan->cause, sizeof plan->cause, "a hang caught by the watchdog: %s", a->first_error);
    } else if (a->disk_full) {
        snprintf(plan->kind, sizeof plan->kind, "disk-full");
        double stays = ZT_DISK_FULL_SECONDS;
        const char *env = getenv("ZEROTRAIN_DISK_FULL_SECONDS");
        if (env && *env) stays = atof(env);
        if (!a->saves && job->disk_full_in_a_row + 1 >= ZT_DISK_FULL_TRIES && job->disk_full_for >= stays) {
            plan->give_up = 1;
            snprintf(plan->cause, sizeof plan->cause, "the disk stays full (%d attempts in a row over %.0f s): %s",
                     job->disk_full_in_a_row + 1, job->disk_full_for, a->first_error);
            return;
        }
        snprintf(plan->cause, sizeof plan->cause, "a full disk: %s", a->first_error);
    } else if (a->rank_signal) {
        snprintf(plan->kind, sizeof plan->kind, "killed");
        snprintf(plan->cause, sizeof plan->cause, "a rank was killed by signal %d (%s)", a->rank_signal,
                 strsignal(a->rank_signal));
    } else if (job->code > 128 && job->code - 128 < NSIG) {
        /* mpirun exits with 128 + N when a rank ended on signal N, also when its line saying so was
         * another (found by CI under load: "1 process returned a non-zero exit code", exit 137 after
         * a rank's SIGKILL; this said "the launcher ended on signal 9") */
        snprintf(plan->kind, sizeof plan->kind, "killed");
        if (a->launcher_signal)
            snprintf(plan->cause, sizeof plan->cause, "the launcher ended on signal %d (%s)", a->launcher_signal,
                     strsignal(a->launcher_signal));
        else
            snprintf(plan->cause, sizeof plan->cause, "a rank was killed by signal %d (%s), as the launcher's exit "
                     "status %d says", job->code - 128, strsignal(job->code - 128), job->code);
    } else if (!a->lost_contact && !a->steps && a->first_error[0] && !strcmp(a->first_error, job->previous_error)) {
        /* an error that no other cause explains, before any step, twice the same: start-up fails
         * the same way each time (a missing data file, an unreadable tokenizer) */
        plan->give_up = 1;
        snprintf(plan->kind, sizeof plan->kind, "failed");
        snprintf(plan->cause, sizeof plan->cause, "the same error twice before any step: %s", a->first_error);
        return;
    } else {
        snprintf(plan->kind, sizeof plan->kind, a->lost_contact ? "lost-host" : "failed");
        snprintf(plan->cause, sizeof plan->cause, "%s (status %d)%s%s",
                 a->lost_contact ? "the launcher lost a host" : "the job failed", job->code,
                 a->first_error[0] ? ": " : "", a->first_error);
    }
    /* the hosts that answer: probed when a host may be gone (the launcher lost one, the ranks did
     * not start, a hang, a failure no signal explains) or one lost before may be back; a rank killed
     * or preempted, or a full disk, on every host says nothing about the hosts, nor does a hang on a
     * stopped process (the roll that showed it stopped is on a host that answered): the probe's
     * seconds are saved (a host that did go stops the launch within ZEROTRAIN_STARTUP_TIMEOUT, and
     * the restart after that probes) */
    int hosts_answered = !strcmp(plan->kind, "killed") || !strcmp(plan->kind, "preempted") ||
                         !strcmp(plan->kind, "disk-full") || (a->hang && a->hang_on_stopped);
    int hosts_in_question = a->lost_contact || a->start_timeout || job->attempt_ranks < job->ranks || !hosts_answered;
    if (job->hostfile && hosts_in_question) {
        char lost[512];
        zt_restart_plan hosts;
        int n_lost = zt_restart_hosts(job, &hosts, lost, sizeof lost);
        plan->probe_seconds = hosts.probe_seconds;
        plan->ranks = hosts.ranks;
        memcpy(plan->hostfile, hosts.hostfile, sizeof plan->hostfile);
        if (n_lost < 0) {
            snprintf(plan->kind, sizeof plan->kind, "lost-host");
            size_t used = strlen(plan->cause);
            snprintf(plan->cause + used, sizeof plan->cause - used, "; no host of %s answers", job->hostfile);
        } else if (n_lost > 0) {
            snprintf(plan->kind, sizeof plan->kind, "lost-host");
            size_t used = strlen(plan->cause);
            snprintf(plan->cause + used, sizeof plan->cause - used, "; host%s %s do%s not answer: %ld ranks on the rest",
                     n_lost > 1 ? "s" : "", lost, n_lost > 1 ? "" : "es", plan->ranks);
            if (plan->ranks < 1) {
                plan->give_up = 1;
                return;
            }
        }
    }
    /* the checkpoint it would resume from: only when the attempt never trained (a corrupt `latest`
     * fails the resume, before any step) */
    int latest_good = ckdir[0] && plan->latest_step >= 0 && !a->steps ? checkpoint_good(job->self, ckdir) : 1;
    if (latest_good < 0) { /* the resume's own load is bounded the same way (train.c) */
        size_t used = strlen(plan->cause);
        snprintf(plan->cause + used, sizeof plan->cause - used, "; `zerotrain info` of latest (step %ld) did not "
                 "finish: resuming from it as it is", plan->latest_step);
    }
    if (!latest_good) {
        char older[4000];
        int found = older_good(job->self, ckdir, plan->latest_step, older, sizeof older);
        if (found == -2) { /* the resume itself takes the newest step that verifies (checkpoint.h) */
            size_t used = strlen(plan->cause);
            snprintf(plan->cause + used, sizeof plan->cause - used, "; latest (step %ld) fails `zerotrain info`, "
                     "checking older steps did not finish: the resume picks the newest that verifies", plan->latest_step);
            return;
        }
        if (found) {
            plan->give_up = 1;
            snprintf(plan->kind, sizeof plan->kind, "corrupt-checkpoint");
            snprintf(plan->cause, sizeof plan->cause, "%s/latest (step %ld) fails `zerotrain info` and no older "
                     "checkpoint there passes it", ckdir, plan->latest_step);
            return;
        }
        snprintf(plan->resume_path, sizeof plan->resume_path, "%s", older);
        size_t used = strlen(plan->cause);
        snprintf(plan->cause + used, sizeof plan->cause - used, "; latest (step %ld) fails `zerotrain info`: "
                 "resuming from %s", plan->latest_step, older);
    }
}
