/* checkpoint_dir.c — who owns a checkpoint directory, which step directory a path names, and which old
 * steps keep_last removes after a save (ck_prune).
 *
 * Ownership: rank 0 of a run holds flock(LOCK_EX) on DIR itself (where the file system locks
 * directories: local ones do, NFS does not) and on DIR/.lock, from zt_checkpoint_dir_open to the end
 * of the run. The directory is locked FIRST: a second run that finds it held is refused before it
 * touches .lock (it neither creates, truncates nor replaces the file), naming the holder recorded in
 * .lock. The kernel releases both locks when the process exits or dies (kill -9 included), so a
 * crashed run never leaves the directory stuck.
 *
 * The claim is the held locks, not the file's presence: each save re-checks .lock
 * (zt_checkpoint_dir_check). Still the locked file (same device and inode) with this run's record:
 * nothing to do; its record overwritten: written again. Deleted, or replaced by another file: while
 * this run holds the directory's lock no other run can own DIR, so .lock is restored (a fresh locked
 * file with this run's record renamed over whatever is there) and the save goes on — a stray or
 * hand-made .lock never costs the holder a step. Only where the directory cannot be locked (NFS) and
 * the file now at .lock is flock'ed by another process (a second run got in) does the save stop,
 * naming the new holder. Each save works in .tmp_step_N.RUNID, so even two runs that bypassed the
 * lock could not share a temporary directory.
 * File systems: on local file systems and NFS (Linux emulates flock with NFS byte-range locks, which
 * the server arbitrates across clients) the lock holds between nodes; Lustre needs the `flock` mount
 * option (with `localflock` the lock only holds within one node; without either flock fails with
 * ENOSYS, reported as such). */
#define _GNU_SOURCE
#include "io/checkpoint_common.h"
#include "io/checkpoint_manifest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/fail_together.h"
#include "util/test_hooks.h"

/* removes .tmp_* entries (saves of runs that crashed or failed) and .lock.RUNID files (a restore of
 * .lock cut short): the lock says no run that made them is running */
static void remove_leftovers(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, ".tmp_", 5) && strncmp(de->d_name, ".lock.", 6)) continue;
        char p[CK_PATHCAP];
        if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, de->d_name) < sizeof p) ck_rmtree(p);
    }
    closedir(d);
}

static void new_run_id(char out[24]) {
    unsigned long long id = 0;
    if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id) { /* no entropy source: time and pid */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        id = ((unsigned long long)ts.tv_sec << 32) ^ (unsigned long long)ts.tv_nsec ^ ((unsigned long long)getpid() << 16);
    }
    snprintf(out, 24, "%016llx", id);
}

/* the holder record of a lock file (its first line, escaped), or "holder unknown" */
static const char *holder_of(int fd, char *shown, size_t cap) {
    char holder[512] = "";
    ssize_t n = fd >= 0 ? pread(fd, holder, sizeof holder - 1, 0) : -1;
    holder[n > 0 ? n : 0] = 0;
    holder[strcspn(holder, "\n")] = 0;
    return holder[0] ? zt_escape_str(holder, shown, cap) : "holder unknown";
}

static int refuse_in_use(const zt_checkpoint_dir *d, const char *holder, zt_err *err) {
    return zt_fail(err, "%s: checkpoint directory is in use by another run (%s); a checkpoint.dir belongs to one run at "
                        "a time: wait for it to end or use another directory", d->path, holder);
}

/* the holder record shown for DIR/.lock (read without creating it), or "holder unknown" */
static const char *holder_at(const char *lock, char *shown, size_t cap) {
    int fd = open(lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    const char *h = holder_of(fd, shown, cap);
    if (fd >= 0) close(fd);
    return h;
}

/* the directory's own lock, taken before .lock is touched: a run refused here has changed nothing.
 * File systems that do not lock directories (NFS; ZEROTRAIN_INJECT_NO_DIR_LOCK in tests) leave the
 * .lock file alone to hold (dir_fd stays -1). */
static int lock_directory(zt_checkpoint_dir *d, const char *lock, zt_err *err) {
    if (zt_test_hook_no_dir_lock()) return 0;
    int fd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return 0;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        d->dir_fd = fd;
        return 0;
    }
    int busy = errno == EWOULDBLOCK;
    close(fd);
    char shown[600];
    return busy ? refuse_in_use(d, holder_at(lock, shown, sizeof shown), err) : 0;
}

/* this run's holder record (one line; the run id is what identifies the holder) */
static int holder_record(const zt_checkpoint_dir *d, char *rec, size_t cap) {
    char host[256] = "?", when[64] = "?";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    struct tm tm;
    if (localtime_r(&d->started, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    return snprintf(rec, cap, "host %s, pid %ld, run id %s, started %s\n", host, (long)getpid(), d->run_id, when);
}

/* writes this run's holder record into the locked file fd */
static int write_holder(const zt_checkpoint_dir *d, int fd, const char *lock, zt_err *err) {
    char rec[512];
    int len = holder_record(d, rec, sizeof rec);
    if (ftruncate(fd, 0) || pwrite(fd, rec, (size_t)len, 0) != len) return zt_fail(err, "%s: cannot write: %s", lock, strerror(errno));
    return 0;
}

/* rank 0: directory, its lock, .lock, holder record, leftovers */
static int take_lock(zt_checkpoint_dir *d, zt_err *err) {
    if (ck_mkdir_p(d->path, err)) return -1;
    char lock[CK_PATHCAP];
    if (ck_path_join(lock, sizeof lock, d->path, ".lock", err)) return -1;
    if (lock_directory(d, lock, err)) return -1;
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) return zt_fail(err, "%s: cannot open the checkpoint directory's lock: %s", lock, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int e = errno;
        char shown[600];
        if (e == EWOULDBLOCK) refuse_in_use(d, holder_of(fd, shown, sizeof shown), err);
        else zt_fail(err, "%s: cannot lock: %s%s", lock, strerror(e),
                     e == ENOSYS || e == EOPNOTSUPP ? " (on Lustre, mount with -o flock)" : "");
        close(fd);
        return -1;
    }
    if (write_holder(d, fd, lock, err)) {
        close(fd);
        return -1;
    }
    d->lock_fd = fd;
    remove_leftovers(d->path);
    return 0;
}

/* a fresh .lock with this run's record, locked, renamed over whatever DIR/.lock now is */
static int restore_lock(zt_checkpoint_dir *d, const char *lock, zt_err *err) {
    char tmp[CK_PATHCAP];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.%s", lock, d->run_id) >= sizeof tmp) return zt_fail(err, "%s: path too long", lock);
    unlink(tmp); /* a leftover of this run's own earlier try */
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) return zt_fail(err, "%s: cannot be made again: %s", lock, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) || write_holder(d, fd, tmp, err) || rename(tmp, lock)) {
        zt_fail(err, "%s: cannot be made again: %s", lock, strerror(errno));
        close(fd);
        unlink(tmp);
        return -1;
    }
    close(d->lock_fd);
    d->lock_fd = fd;
    return 0;
}

int zt_checkpoint_dir_check(zt_checkpoint_dir *d, zt_err *err) {
    if (d->lock_fd < 0) return 0;
    char lock[CK_PATHCAP], shown[600];
    const char *was = "";
    if (ck_path_join(lock, sizeof lock, d->path, ".lock", err)) return -1;
    struct stat now, held;
    if (fstat(d->lock_fd, &held)) return zt_fail(err, "%s: %s", lock, strerror(errno));
    int found = lstat(lock, &now) == 0;
    if (found && now.st_dev == held.st_dev && now.st_ino == held.st_ino) {
        char rec[512], have[512];
        int len = holder_record(d, rec, sizeof rec);
        ssize_t n = pread(d->lock_fd, have, sizeof have, 0);
        if (n == len && !memcmp(have, rec, (size_t)len)) return 0;
        if (write_holder(d, d->lock_fd, lock, err)) return -1;
        zt_warn("checkpoint: %s was overwritten while this run holds the directory; its record written again", lock);
        return 0;
    }
    if (!found && errno != ENOENT) return zt_fail(err, "%s: %s", lock, strerror(errno));
    if (found) was = holder_at(lock, shown, sizeof shown); /* "holder unknown" for an empty file */
    if (found && d->dir_fd < 0) {
        /* no directory lock to prove the directory is still ours: the new file decides. Locked by
         * another process: a second run got in; not locked: a stray file, replaced by ours. */
        int fd = open(lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        int taken = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) && errno == EWOULDBLOCK;
        if (fd >= 0) close(fd);
        if (taken)
            return zt_fail(err, "%s: replaced while this run holds the checkpoint directory (now: %s): another run "
                                "holds it and may be writing there; this run stops without saving", lock, was);
    }
    if (restore_lock(d, lock, err)) return -1;
    if (found) zt_warn("checkpoint: %s was replaced while this run holds the directory (by: %s); restored", lock, was);
    else zt_warn("checkpoint: %s was deleted while this run holds the directory; restored", lock);
    return 0;
}

int zt_checkpoint_dir_open(zt_checkpoint_dir *d, const char *path, zt_comm *comm, zt_err *err) {
    memset(d, 0, sizeof *d);
    d->lock_fd = d->dir_fd = -1;
    int rc = (size_t)snprintf(d->path, sizeof d->path, "%s", path) >= sizeof d->path - 64 ? zt_fail(err, "%s: path too long", path) : 0;
    d->started = time(NULL);
    if (comm->rank == 0) new_run_id(d->run_id);
    if (!rc && comm->rank == 0) rc = take_lock(d, err);
    if (zt_agree(comm, rc, err)) {
        zt_checkpoint_dir_close(d);
        return -1;
    }
    zt_share_text(comm, 0, d->run_id, sizeof d->run_id);
    return 0;
}

void zt_checkpoint_dir_close(zt_checkpoint_dir *d) {
    if (d->lock_fd >= 0) close(d->lock_fd); /* closing the only descriptor releases the flock */
    if (d->dir_fd >= 0) close(d->dir_fd);
    d->lock_fd = d->dir_fd = -1;
}

/* ================================================================ resolve */

/* DIR/latest: must name a complete step_NNNNNNNN directory of DIR */
static int resolve_latest(const char *dir, const char *latest, char *step_dir, size_t cap, zt_err *err) {
    size_t len;
    char *text = zt_read_file(latest, &len, err);
    if (!text) return -1;
    size_t line = strcspn(text, "\r\n");
    int rest_blank = 1; /* after the name: line breaks only */
    for (size_t i = line; i < len; i++) rest_blank &= text[i] == '\n' || text[i] == '\r';
    char shown[160];
    zt_escape(text, len < 100 ? len : 100, shown, sizeof shown);
    text[line] = 0;
    int rc = 0;
    char sd[CK_PATHCAP], idx[CK_PATHCAP];
    if (ck_step_of_name(text) < 0 || strlen(text) != line || !rest_blank)
        rc = zt_fail(err, "%s: does not name a step directory (expected step_NNNNNNNN, found '%s')", latest, shown);
    else if (ck_path_join(sd, sizeof sd, dir, text, err) || ck_path_join(idx, sizeof idx, sd, "index.h5", err))
        rc = -1;
    else if (!ck_is_dir(sd) || !ck_is_file(idx))
        rc = zt_fail(err, "%s names %s, which is missing or incomplete (no index.h5)", latest, text);
    else if ((size_t)snprintf(step_dir, cap, "%s", sd) >= cap)
        rc = zt_fail(err, "%s: path too long", sd);
    free(text);
    return rc ? -1 : 1;
}

int zt_checkpoint_resolve(const char *path, char *step_dir, size_t cap, zt_err *err) {
    struct stat st;
    if (stat(path, &st)) {
        if (errno == ENOENT) return 0;
        return zt_fail(err, "%s: %s", path, strerror(errno));
    }
    char buf[CK_PATHCAP];
    if (S_ISREG(st.st_mode)) { /* PATH/index.h5 names its step directory */
        const char *slash = strrchr(path, '/');
        if (strcmp(slash ? slash + 1 : path, "index.h5"))
            return zt_fail(err, "%s: not a checkpoint directory (expected a checkpoint or step directory)", path);
        snprintf(buf, sizeof buf, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
        path = buf;
    } else if (!S_ISDIR(st.st_mode)) {
        return zt_fail(err, "%s: not a directory", path);
    }
    char p[CK_PATHCAP];
    if (ck_path_join(p, sizeof p, path, "index.h5", err)) return -1;
    if (ck_is_file(p)) {
        if ((size_t)snprintf(step_dir, cap, "%s", path) >= cap) return zt_fail(err, "%s: path too long", path);
        return 1;
    }
    if (ck_path_join(p, sizeof p, path, "latest", err)) return -1;
    if (ck_is_file(p)) return resolve_latest(path, p, step_dir, cap, err);
    /* no `latest` (deleted by hand?): the newest complete step directory, if any */
    ck_step_entry *s;
    int n = ck_list_steps(path, &s);
    if (n) {
        zt_warn("checkpoint: %s has no 'latest' file; using its newest complete step directory %s", path, s[n - 1].name);
        int too_long = (size_t)snprintf(step_dir, cap, "%s/%s", path, s[n - 1].name) >= cap;
        free(s);
        if (too_long) return zt_fail(err, "%s: path too long", path);
        return 1;
    }
    return 0;
}

int zt_checkpoint_resolve_shared(zt_comm *comm, const char *path, char *step_dir, size_t cap, zt_err *err) {
    int found = 0;
    if (comm->rank == 0) found = zt_checkpoint_resolve(path, step_dir, cap, err);
    if (zt_agree(comm, found < 0 ? -1 : 0, err)) return -1;
    found = comm->agree_max(comm, found); /* rank 0's 0 or 1; the others contribute 0 */
    if (found) zt_share_text(comm, 0, step_dir, cap);
    return found;
}

/* rank 0 of zt_checkpoint_resolve_verified_shared: STEP_DIR (resolved from checkpoint directory DIR)
 * when its files verify, else the newest older step directory of DIR whose files do (one warning) */
static int newest_verified(const char *dir, char *step_dir, size_t cap, zt_err *err) {
    zt_err why;
    if (ck_manifest_check(step_dir, &why) >= 0) return 1;
    const char *base = strrchr(step_dir, '/');
    long bad = ck_step_of_name(base ? base + 1 : step_dir);
    ck_step_entry *s;
    int n = ck_list_steps(dir, &s), skipped = 0, found = -1;
    for (int i = n - 1; i >= 0 && found < 0; i--) {
        char cand[CK_PATHCAP];
        zt_err also;
        if ((bad >= 0 && s[i].step >= bad) || ck_path_join(cand, sizeof cand, dir, s[i].name, NULL)) continue;
        if (ck_manifest_check(cand, &also) >= 0) found = i;
        else skipped++;
    }
    int rc = 1;
    if (found < 0) {
        rc = zt_fail(err, "%s (and no older step directory of %s verifies)", why.msg, dir);
    } else {
        zt_warn("checkpoint: %s does not verify (%s); resuming from %s, the newest step that does%s", step_dir, why.msg,
                s[found].name, skipped ? " (older damaged steps skipped too)" : "");
        if ((size_t)snprintf(step_dir, cap, "%s/%s", dir, s[found].name) >= cap) rc = zt_fail(err, "%s: path too long", dir);
    }
    free(s);
    return rc;
}

int zt_checkpoint_resolve_verified_shared(zt_comm *comm, const char *path, char *step_dir, size_t cap, zt_err *err) {
    int found = 0;
    if (comm->rank == 0) {
        found = zt_checkpoint_resolve(path, step_dir, cap, err);
        if (found > 0 && strcmp(step_dir, path)) found = newest_verified(path, step_dir, cap, err);
    }
    if (zt_agree(comm, found < 0 ? -1 : 0, err)) return -1;
    found = comm->agree_max(comm, found);
    if (found) zt_share_text(comm, 0, step_dir, cap);
    return found;
}

double zt_checkpoint_read_bound(const char *path, char *step_dir, size_t cap, char *why, size_t why_cap) {
    zt_err ignored;
    if (zt_checkpoint_resolve(path, step_dir, cap, &ignored) != 1) step_dir[0] = 0;
    const char *env = getenv("ZEROTRAIN_LOAD_TIMEOUT");
    if (env && *env) {
        snprintf(why, why_cap, "ZEROTRAIN_LOAD_TIMEOUT");
        return atof(env);
    }
    double bytes = 0; /* the step directory's files: what a load or `info` reads (the 16-bit export's folder is not) */
    DIR *d = step_dir[0] ? opendir(step_dir) : NULL;
    for (struct dirent *e; d && (e = readdir(d));) {
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISREG(st.st_mode)) bytes += (double)st.st_size;
    }
    if (d) closedir(d);
    char size[32];
    snprintf(why, why_cap, "%s at %.0f MB/s + %.0f s floor; ZEROTRAIN_LOAD_TIMEOUT sets it",
             zt_format_bytes(bytes, size, sizeof size), ZT_CKPT_READ_RATE / 1e6, ZT_CKPT_READ_FLOOR);
    return ZT_CKPT_READ_FLOOR + bytes / ZT_CKPT_READ_RATE;
}

/* ================================================================ keep_last's pruning */

/* The run id in step directory P's index.h5 (malloc'ed; "" for format version 1, which has
 * none), or NULL when the index cannot be read — or fails the step's manifest: no damaged byte
 * reaches HDF5 here either (a damaged older step is kept and not counted, never parsed). */
static char *saved_run_id(const char *p) {
    char idx[CK_PATHCAP];
    zt_err damaged;
    if (ck_path_join(idx, sizeof idx, p, "index.h5", NULL) || ck_manifest_check(p, &damaged) < 0) return NULL;
    hid_t fapl = ck_file_access();
    hid_t f = H5Fopen(idx, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (f < 0) return NULL;
    char *run_id = NULL;
    if (ck_get_str(f, "run_id", &run_id) == -1) run_id = zt_xstrdup(""); /* format version 1: no run id */
    H5Fclose(f);
    return run_id;
}

/* Whether keep_last counts and may remove step directory P: one this run saved, or one a run of its
 * lineage saved (zt_checkpoint_dir), or any with checkpoint.overwrite. Another run's steps, and a
 * step whose index cannot be read, are neither removed nor counted. */
static int in_lineage(const zt_checkpoint_dir *cd, const char *p) {
    if (cd->prune_any) return 1;
    char *run_id = saved_run_id(p);
    int ours = run_id && !strcmp(run_id, cd->run_id);
    for (int i = 0; run_id && !ours && i < cd->n_lineage; i++) ours = !strcmp(run_id, cd->lineage[i]);
    free(run_id);
    return ours;
}

/* keep_last: of the complete step directories of this run's lineage (in_lineage), the newest
 * keep_last stay; of the older ones, all go except KEEP (the one just saved) and cd->keep_step (the
 * newest good checkpoint: train.c), which stay whatever their age. Other runs' step directories stay
 * and do not count; when they make more than keep_last stay, an info line says so, once a run. */
void ck_prune(zt_checkpoint_dir *cd, const char *keep, int keep_last) {
    if (keep_last <= 0) return;
    ck_step_entry *s;
    int n = ck_list_steps(cd->path, &s), mine = 0, others = 0, first_other = -1;
    char *ours = zt_xcalloc((size_t)n + 1, 1), p[CK_PATHCAP];
    for (int i = 0; i < n; i++) {
        ours[i] = !ck_path_join(p, sizeof p, cd->path, s[i].name, NULL) && in_lineage(cd, p);
        mine += ours[i];
        if (!ours[i] && others++ == 0) first_other = i;
    }
    int stay = mine;
    for (int i = 0, older = mine - keep_last; i < n && older > 0; i++) {
        if (!ours[i]) continue;
        older--;
        if (!strcmp(s[i].name, keep) || (cd->keep_step > 0 && s[i].step == cd->keep_step)) continue;
        /* renamed out of the listing first: a run killed while removing it (a kill -9 right after
         * `latest` moved) leaves a .tmp_ entry, which the next run removes, not a torn step directory */
        char gone[CK_PATHCAP];
        if (ck_path_join(p, sizeof p, cd->path, s[i].name, NULL) ||
            (size_t)snprintf(gone, sizeof gone, "%s/.tmp_pruned_%s.%s", cd->path, s[i].name, cd->run_id) >= sizeof gone)
            continue;
        if (rename(p, gone)) {
            zt_warn("checkpoint: cannot remove old %s: %s", p, strerror(errno));
            continue;
        }
        stay--;
        if (ck_rmtree(gone)) zt_warn("checkpoint: cannot remove old %s (was %s): %s", gone, p, strerror(errno));
    }
    if (others > 0 && stay + others > keep_last && !cd->told_kept_others) {
        cd->told_kept_others = 1;
        zt_info("checkpoint: keep_last %d leaves %d step director%s outside this run's lineage in %s (oldest %s; saved "
                "by runs it does not descend from, or unreadable): neither counted nor removed (remove them by hand, "
                "or start over there with checkpoint.overwrite)", keep_last, others, others > 1 ? "ies" : "y", cd->path,
                s[first_other].name);
    }
    free(ours);
    free(s);
}
