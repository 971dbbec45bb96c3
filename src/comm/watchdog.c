/* watchdog.c — the hang watchdog thread (see watchdog.h). The main thread publishes "collective X
 * of B bytes, number N, entered at t" through atomics; the watchdog thread only reads them, so the
 * hot path costs two relaxed stores per wait. MPI is initialised MPI_THREAD_FUNNELED: the watchdog
 * thread makes exactly one MPI call, MPI_Abort, which Open MPI serves from any thread; an alarm
 * ends the process should even that not return. The registered device probes (one per device comm:
 * a world comm and group comms alike) are called under a mutex that zt_watchdog_unwatch also takes,
 * so a comm never goes away while it is being probed (or aborted: the mutex is held from the report
 * to the end of the process). A pre-step phase (zt_watchdog_phase) is published the same way, its
 * words under a mutex of their own. */
#include "comm/watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

static struct {
    pthread_t thread;
    int running;
    atomic_int stop;
    _Atomic double timeout; /* seconds; <= 0: off */
    int rank, world; /* in the job (MPI_COMM_WORLD), whatever comm a wait is on */
    /* the wait in progress (what == NULL: none) */
    _Atomic(const char *) what;
    atomic_size_t bytes;
    atomic_int ranks; /* of the comm it waits on */
    _Atomic double since;
    atomic_long seq; /* blocking waits begun so far */
    /* the device comms watched (under probe_mu) */
    pthread_mutex_t probe_mu;
    zt_watchdog_probe probe[ZT_WATCHDOG_MAX_WATCHED];
    int watching;
    atomic_int last_probe;
    atomic_long probes; /* probe calls so far */
    /* the pre-step phase in progress (zt_watchdog_phase; limit <= 0: none); its words under phase_mu */
    pthread_mutex_t phase_mu;
    char phase_what[192], phase_why[256];
    _Atomic double phase_limit, phase_since;
    atomic_int phase_bounds_waits;
} wd = {.probe_mu = PTHREAD_MUTEX_INITIALIZER, .phase_mu = PTHREAD_MUTEX_INITIALIZER, .last_probe = 2};

/* The roll (zt_watchdog_roll): one record per rank in a file every rank can read. Each watchdog
 * tick stamps this rank's record; a stopped or frozen process stamps nothing (its watchdog thread
 * stops with it), so a rank that reports a hang can name the peers whose stamps stopped. */
typedef struct {
    double beat;    /* zt_unix_time() of the last stamp; 0: never stamped (no record) */
    int in_wait;    /* in one now */
    int pid;        /* the rank's process, and when it started (clock ticks after boot, /proc/PID/stat): */
    unsigned long long started; /* a peer reads its state, and a reused pid is not taken for it */
    char what[36];  /* the collective, when in_wait */
    char host[72];
} roll_rec;
static struct {
    int fd; /* -1: no roll */
    char path[256];
    char host[72]; /* this rank's, taken once */
    int pid;
    unsigned long long started;
    double opened; /* zt_unix_time() of zt_watchdog_roll: a record's silence counts from then at the earliest
                    * (a record left by an earlier attempt's rank says nothing about this one's) */
} roll = {.fd = -1};

static void stamp_roll(void) {
    if (roll.fd < 0) return;
    roll_rec r;
    memset(&r, 0, sizeof r);
    r.beat = zt_unix_time();
    const char *what = atomic_load(&wd.what);
    r.in_wait = what != NULL;
    if (what) snprintf(r.what, sizeof r.what, "%s", what);
    memcpy(r.host, roll.host, sizeof r.host);
    r.pid = roll.pid;
    r.started = roll.started;
    if (pwrite(roll.fd, &r, sizeof r, (off_t)wd.rank * (off_t)sizeof r) != (ssize_t)sizeof r) {}
}

/* The scheduling state of process `pid` (/proc/PID/stat: 'R' running, 'S' sleeping, 'D' in the
 * kernel, 'T' stopped, 'Z' exited...), and when it started; 0 when it cannot be read. */
static char proc_state(int pid, unsigned long long *started) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses; it ends at the last ')' */
    char state = 0;
    /* after the name: state (field 3) ... starttime (field 22) */
    if (!p || sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
                     &state, started) != 2)
        return 0;
    return state;
}

/* Whether a peer whose stamps are late is a stopped process, and its state in *state. Stamps late on a
 * process that runs (R, S, D) only say it is slow: starved of the CPU on a loaded machine (found by the
 * fault soak: two ranks of one host 3 s late beside a CI run, taken for stopped), in the kernel, or in
 * a frozen cgroup (shown as D): such a wait is left to comm_timeout. Stopped (T, t: SIGSTOP, a
 * debugger) or exited (Z, X) counts. A record whose process cannot be read here (gone and reaped, its
 * pid reused, or in another pid namespace that shares /dev/shm) is judged by its stamps alone. */
static int peer_stopped(const roll_rec *rec, char *state) {
    unsigned long long started = 0;
    *state = rec->pid > 0 ? proc_state(rec->pid, &started) : 0;
    if (!*state || started != rec->started) {
        *state = 0;
        return 1;
    }
    return strchr("TtZX", *state) != NULL;
}

/* For each peer whose stamp is older than `stale` seconds, counted from `floor` (a unix time) at the
 * earliest: "; rank K (host H) stopped answering Ns ago (last seen ...)" when it is stopped (above),
 * "; rank K (host H) has not answered for Ns but is not stopped (state S, last seen ...)" when it
 * runs; "" when every readable peer is stamping. Returns how many stopped ones it named. */
static int name_late_peers(char *out, size_t cap, double stale, double floor) {
    out[0] = 0;
    if (roll.fd < 0) return 0;
    double now = zt_unix_time();
    if (floor < roll.opened) floor = roll.opened;
    size_t n = 0;
    int named = 0;
    for (int r = 0; r < wd.world && n + 1 < cap; r++) {
        roll_rec rec;
        if (r == wd.rank || pread(roll.fd, &rec, sizeof rec, (off_t)r * (off_t)sizeof rec) != (ssize_t)sizeof rec ||
            rec.beat <= 0 || now - (rec.beat > floor ? rec.beat : floor) <= stale)
            continue;
        rec.host[sizeof rec.host - 1] = rec.what[sizeof rec.what - 1] = 0;
        char state, running[48] = "";
        int stopped = peer_stopped(&rec, &state);
        if (!stopped) snprintf(running, sizeof running, "state %c, ", state);
        int k = snprintf(out + n, cap - n, stopped ? "; rank %d (host %s) stopped answering %.0fs ago (%slast seen %s%s)"
                                                   : "; rank %d (host %s) has not answered for %.0fs but is not stopped "
                                                     "(%slast seen %s%s)",
                         r, rec.host, now - rec.beat, running, rec.in_wait ? "waiting in " : "outside any collective",
                         rec.in_wait ? rec.what : "");
        if (k < 0 || (size_t)k >= cap - n) break;
        n += (size_t)k;
        named += stopped;
    }
    return named;
}

static void sleep_seconds(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* The device comms' aborts, one after the other on a thread of their own (watchdog.h: one may wait
 * for the device forever), waited for at most ZT_WATCHDOG_ABORT_WAIT seconds in all. Static: the
 * thread may outlive the wait. */
static struct {
    zt_watchdog_probe probe[ZT_WATCHDOG_MAX_WATCHED];
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} comm_abort = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *run_comm_abort(void *arg) {
    (void)arg;
    for (int i = 0; i < comm_abort.n; i++)
        if (comm_abort.probe[i].abort) comm_abort.probe[i].abort(comm_abort.probe[i].ctx);
    pthread_mutex_lock(&comm_abort.mu);
    comm_abort.done = 1;
    pthread_cond_signal(&comm_abort.cv);
    pthread_mutex_unlock(&comm_abort.mu);
    return NULL;
}

static void abort_comms_bounded(const zt_watchdog_probe *p, int n) {
    memcpy(comm_abort.probe, p, (size_t)n * sizeof *p);
    comm_abort.n = n;
    pthread_t t;
    if (pthread_create(&t, NULL, run_comm_abort, NULL) != 0) return; /* MPI_Abort without it */
    pthread_detach(t);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ZT_WATCHDOG_ABORT_WAIT;
    pthread_mutex_lock(&comm_abort.mu);
    while (!comm_abort.done)
        if (pthread_cond_timedwait(&comm_abort.cv, &comm_abort.mu, &until) == ETIMEDOUT) break;
    pthread_mutex_unlock(&comm_abort.mu);
}

/* one line naming this rank, its host and what failed (`subject`: an operation, or the GPU; `how`
 * says what went wrong), then the watched device comms' own aborts (all: any may be hung behind the
 * failure), then MPI_Abort */
static void report_and_abort(const char *subject, const char *how) {
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    fprintf(stderr, "zerotrain: error: rank %d (host %s): %s %s; aborting the job\n", wd.rank, host, subject, how);
    fflush(stderr);
    fflush(stdout);
    alarm(30); /* SIGALRM's default action ends the process if the aborts below cannot finish */
    zt_scratch_remove_all();
    if (wd.watching) abort_comms_bounded(wd.probe, wd.watching); /* the caller holds probe_mu */
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

/* "<collective> #N (B bytes)", the subject of a line about one operation */
static const char *op_subject(char *buf, size_t cap, const char *what, long seq, size_t bytes) {
    snprintf(buf, cap, "%s #%ld (%zu bytes)", what, seq, bytes);
    return buf;
}

/* " of its group of N" when a comm of `ranks` ranks is not the whole job's */
static const char *group_words(char *buf, size_t cap, int ranks) {
    buf[0] = 0;
    if (ranks > 0 && ranks < wd.world) snprintf(buf, cap, " of its group of %d", ranks);
    return buf;
}

/* A live peer stamps every tick: two missed ticks and a second's margin (a loaded machine may run
 * a woken thread late, never seconds late) mean its process is not running. */
static double stale_after(double poll) { return 2 * poll + 1.0; }

/* `stopped`: name_late_peers's words for the peers whose stamps are late ("" when none are) */
static void report_wait(const char *what, size_t bytes, int ranks, long seq, double waited, const char *stopped) {
    char how[1200], subject[160], group[40];
    int others = (ranks > 0 ? ranks : wd.world) - 1;
    snprintf(how, sizeof how, "made no progress for %.0fs (waiting on the other %d rank%s%s%s; comm_timeout %gs)",
             waited, others, others == 1 ? "" : "s", group_words(group, sizeof group, ranks), stopped,
             atomic_load(&wd.timeout));
    pthread_mutex_lock(&wd.probe_mu); /* held until the process ends: the watched comm stays */
    report_and_abort(op_subject(subject, sizeof subject, what, seq, bytes), how);
}

/* SIGCONT: this process was stopped (SIGSTOP, Slurm's suspend, a debugger) and goes on. Its time
 * away is not its peers' fault, however short: a peer that waited on it past comm_timeout may end
 * the job within a second of the stop, and the launcher continues it to kill it (found by CI: the
 * stopped rank then blamed the others). The handler counts; the watchdog thread is the only thread
 * that takes the signal (zt_watchdog_hold_continue), so the count is current before the thread runs
 * another instruction of its own after the stop. */
static atomic_long continued;
static void on_continue(int sig) {
    (void)sig;
    atomic_fetch_add(&continued, 1);
}

void zt_watchdog_hold_continue(void) {
    sigset_t cont;
    sigemptyset(&cont);
    sigaddset(&cont, SIGCONT);
    sigprocmask(SIG_BLOCK, &cont, NULL);
}

/* whether this process was continued after tick's count `seen`: a tick that read its times before
 * the stop must not report a wait that the stop made long */
static int continued_since(long seen) { return atomic_load(&continued) != seen; }

/* each watched device comm: its oldest pending operation against the timeout, and its errors */
static void check_device(double now, double resumed, double timeout, long seen) {
    pthread_mutex_lock(&wd.probe_mu);
    int tick = 0; /* the tick's answer: 1 when any comm has an operation pending */
    for (int i = 0; i < wd.watching; i++) {
        const zt_watchdog_probe *p = &wd.probe[i];
        zt_watchdog_op op = {0};
        int st = p->probe(p->ctx, &op);
        if (st > tick) tick = st; /* an error ends the process below */
        atomic_fetch_add(&wd.probes, 1);
        double waited = now - (op.since > resumed ? op.since : resumed);
        char how[320], subject[160], group[40];
        int ranks = p->ranks > 0 ? p->ranks : wd.world;
        if (st == -2) {
            snprintf(how, sizeof how, "failed: %s", op.error);
            report_and_abort("the GPU", how);
        }
        if (st < 0) {
            snprintf(how, sizeof how, "failed on the GPU: %s", op.error);
            report_and_abort(op.what ? op_subject(subject, sizeof subject, op.what, op.seq, op.bytes) : "NCCL comm", how);
        }
        if (st > 0 && waited > timeout && !continued_since(seen)) {
            snprintf(how, sizeof how, "made no progress for %.0fs (on the GPU, with %d rank%s%s; comm_timeout %gs)",
                     waited, ranks, ranks == 1 ? "" : "s", group_words(group, sizeof group, p->ranks), timeout);
            report_and_abort(op_subject(subject, sizeof subject, op.what, op.seq, op.bytes), how);
        }
    }
    if (wd.watching) atomic_store(&wd.last_probe, tick);
    pthread_mutex_unlock(&wd.probe_mu);
}

/* the pre-step phase against its limit: past it, one line and the job goes down. A rank waiting in a
 * collective is left to the wait's check, where one runs (its line names the peers it waits on): the
 * phase's line is for the rank that is stuck itself. */
static void check_phase(double now, double resumed, long seen) {
    double limit = atomic_load(&wd.phase_limit), since = atomic_load(&wd.phase_since);
    int wait_checked = atomic_load(&wd.what) && atomic_load(&wd.timeout) > 0;
    if (limit <= 0 || wait_checked || now - (since > resumed ? since : resumed) <= limit ||
        continued_since(seen))
        return;
    char subject[200], how[400];
    pthread_mutex_lock(&wd.phase_mu);
    int current = atomic_load(&wd.phase_since) == since && atomic_load(&wd.phase_limit) > 0; /* not moved on meanwhile */
    snprintf(subject, sizeof subject, "%s", wd.phase_what);
    snprintf(how, sizeof how, "did not finish in %g s (%s)", limit, wd.phase_why);
    pthread_mutex_unlock(&wd.phase_mu);
    if (!current) return;
    pthread_mutex_lock(&wd.probe_mu); /* as report_wait: held until the process ends */
    report_and_abort(subject, how);
}

static void *watch(void *arg) {
    (void)arg;
    sigset_t cont;
    sigemptyset(&cont);
    sigaddset(&cont, SIGCONT);
    pthread_sigmask(SIG_UNBLOCK, &cont, NULL);
    double last = zt_now(), resumed = 0, resumed_unix = 0;
    long seen = atomic_load(&continued);
    while (!atomic_load(&wd.stop)) {
        double timeout = atomic_load(&wd.timeout), phase_limit = atomic_load(&wd.phase_limit);
        /* checks a few times per timeout (or phase limit, the shorter), at least once a second: a hang
         * is reported at most timeout + min(timeout/4, 1s) after its wait began */
        double shortest = timeout > 0 && (phase_limit <= 0 || timeout < phase_limit) ? timeout : phase_limit;
        double poll = shortest > 0 && shortest < 4 ? shortest / 4 : 1.0;
        sleep_seconds(poll);
        long count = atomic_load(&continued);
        double now = zt_now();
        /* continued, or a tick far later than asked (a frozen VM sends no SIGCONT): this whole process
         * was stopped, and the time it was away is not its peers' fault, so waits count from its return */
        if (count != seen || now - last > 2 * poll + 1.0) {
            seen = count;
            resumed = now;
            resumed_unix = zt_unix_time();
        }
        last = now;
        check_phase(now, resumed, seen);
        if (timeout <= 0) continue;
        stamp_roll();
        check_device(now, resumed, timeout, seen);
        long seq = atomic_load(&wd.seq);
        const char *what = atomic_load(&wd.what);
        double since = atomic_load(&wd.since);
        size_t bytes = atomic_load(&wd.bytes);
        int ranks = atomic_load(&wd.ranks);
        if (!what || seq != atomic_load(&wd.seq)) continue; /* none, or it changed while we read */
        double waited = now - (since > resumed ? since : resumed);
        /* any rank of the job that stopped (its stamps stopped and the kernel shows it stopped; one
         * stopped outside this wait's group holds up the job as well): such a wait cannot end, so it
         * is reported without waiting out the timeout, which is left for what the roll cannot see (a
         * peer on another host, a silent network) and for a peer that is only slow. Silences count
         * from this process's own return when it was away itself. */
        char stopped[800];
        int n_stopped = name_late_peers(stopped, sizeof stopped, stale_after(poll), resumed_unix);
        /* within a phase that may take longer (a peer reading its part of a big checkpoint), the phase's
         * limit bounds the wait, and its line names the phase */
        double limit = atomic_load(&wd.phase_bounds_waits) && phase_limit > timeout ? phase_limit : timeout;
        if (limit > timeout && waited > limit) {
            size_t used = strlen(stopped);
            pthread_mutex_lock(&wd.phase_mu);
            snprintf(stopped + used, sizeof stopped - used, "; within %s, bounded at %g s (%s)", wd.phase_what, limit,
                     wd.phase_why);
            pthread_mutex_unlock(&wd.phase_mu);
        }
        if ((waited > limit || (n_stopped > 0 && waited > poll)) && !continued_since(seen))
            report_wait(what, bytes, ranks, seq, waited, stopped);
    }
    return NULL;
}

static void start_thread(void) {
    if (wd.running || (atomic_load(&wd.timeout) <= 0 && atomic_load(&wd.phase_limit) <= 0)) return;
    atomic_store(&wd.stop, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_continue;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCONT, &sa, NULL);
    if (pthread_create(&wd.thread, NULL, watch, NULL) == 0) wd.running = 1;
    else zt_warn("comm_timeout: cannot start the watchdog thread; hung collectives will not be detected");
}

void zt_watchdog_start(double timeout_s, int rank, int world) {
    atomic_store(&wd.timeout, timeout_s);
    wd.rank = rank;
    wd.world = world;
    /* one rank alone has no peer to wait on, unless a device comm can hang on its GPU */
    pthread_mutex_lock(&wd.probe_mu);
    int watching = wd.watching;
    pthread_mutex_unlock(&wd.probe_mu);
    if (world >= 2 || watching) start_thread();
}

double zt_watchdog_startup_timeout(void) {
    const char *env = getenv("ZEROTRAIN_STARTUP_TIMEOUT");
    return env && *env ? atof(env) : ZT_STARTUP_TIMEOUT_DEFAULT;
}

void zt_watchdog_phase(const char *what, double limit_s, const char *why, int bounds_waits) {
    pthread_mutex_lock(&wd.phase_mu);
    atomic_store(&wd.phase_bounds_waits, what && bounds_waits);
    snprintf(wd.phase_what, sizeof wd.phase_what, "%s", what ? what : "");
    snprintf(wd.phase_why, sizeof wd.phase_why, "%s", why ? why : "");
    atomic_store(&wd.phase_since, zt_now());
    atomic_store(&wd.phase_limit, what ? limit_s : 0.0);
    pthread_mutex_unlock(&wd.phase_mu);
    if (what && limit_s > 0) start_thread(); /* also on one rank: its own read can hang */
}

void zt_watchdog_watch(const zt_watchdog_probe *p) {
    pthread_mutex_lock(&wd.probe_mu);
    int full = wd.watching == ZT_WATCHDOG_MAX_WATCHED;
    if (!full) wd.probe[wd.watching++] = *p;
    pthread_mutex_unlock(&wd.probe_mu);
    if (full) zt_warn("comm_timeout: more than %d device comms; a collective hung on the GPU in the last one is not "
                      "detected", ZT_WATCHDOG_MAX_WATCHED);
    start_thread();
}

void zt_watchdog_unwatch(void *ctx) {
    pthread_mutex_lock(&wd.probe_mu);
    for (int i = 0; i < wd.watching; i++)
        if (wd.probe[i].ctx == ctx) {
            memmove(&wd.probe[i], &wd.probe[i + 1], (size_t)(wd.watching - i - 1) * sizeof wd.probe[0]);
            wd.watching--;
            break;
        }
    if (!wd.watching) atomic_store(&wd.last_probe, 2);
    pthread_mutex_unlock(&wd.probe_mu);
}

int zt_watchdog_last_probe(long *asked) {
    if (asked) *asked = atomic_load(&wd.probes);
    return atomic_load(&wd.last_probe);
}

void zt_watchdog_stop(void) {
    if (wd.running) {
        atomic_store(&wd.stop, 1);
        pthread_join(wd.thread, NULL);
        wd.running = 0;
    }
    if (roll.fd >= 0) {
        close(roll.fd);
        roll.fd = -1;
        if (wd.rank == 0) unlink(roll.path);
        zt_scratch_forget(roll.path);
    }
}

/* /dev/shm: a memory file system on every Linux host, so the roll costs no space or inode where the
 * run keeps anything (a full checkpoint directory must fail where it would without it) */
void zt_watchdog_roll(const char *tag) {
    if (roll.fd >= 0 || wd.world < 2) return;
    snprintf(roll.path, sizeof roll.path, "/dev/shm/.zerotrain-roll-%s", tag);
    gethostname(roll.host, sizeof roll.host - 1);
    roll.pid = (int)getpid();
    if (!proc_state(roll.pid, &roll.started)) roll.pid = 0; /* no /proc: peers judge this rank by its stamps */
    roll.opened = zt_unix_time();
    roll.fd = open(roll.path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (roll.fd < 0) return; /* hang lines then name no stopped rank */
    zt_scratch_register(roll.path); /* whichever rank gets to run its exit path removes it */
    stamp_roll();
}

void zt_watchdog_enter(const char *what, size_t bytes, int ranks) {
    atomic_fetch_add(&wd.seq, 1);
    atomic_store(&wd.bytes, bytes);
    atomic_store(&wd.ranks, ranks);
    atomic_store(&wd.since, zt_now());
    atomic_store(&wd.what, what);
}

void zt_watchdog_leave(void) { atomic_store(&wd.what, (const char *)NULL); }
