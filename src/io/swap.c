/* swap.c — see swap.h.
 *
 * Why io_uring: it is asynchronous for buffered and O_DIRECT files alike (Linux AIO is asynchronous
 * only with O_DIRECT and blocks otherwise), and one system call submits a whole batch of pieces.
 * Why O_DIRECT: the drive then moves the bytes by DMA straight to and from the caller's buffer. The
 * page cache would copy every byte once more and fill host memory with pages of the swap file,
 * when the reason to swap at all is that host memory is short.
 * Why pieces of aio.block_size with aio.queue_depth in flight: an NVMe drive reaches its bandwidth
 * only with several commands queued at once (it serves them in parallel across its flash chips),
 * and a bounded piece keeps the memory the kernel pins per request bounded too.
 *
 * Bookkeeping: a request (one ticket) is cut into pieces lazily, oldest request first, as piece
 * slots free up; a piece whose transfer comes back short is resubmitted for the rest, and one that
 * fails marks its request failed (the rest of that request is not submitted). A request is complete
 * when every piece it handed out has come back.
 *
 * Checksums: one CRC32C per ZT_SWAP_ALIGN block of the file, in host memory (4 bytes per 4 KiB,
 * 0.1% of the file: the file is scratch, rewritten each run, so nothing needs them on the disk).
 * A piece's blocks are summed when the piece completes, on the thread that reaps it, while the other
 * pieces are still in flight: a write records them, a read compares them. The file starts empty
 * (truncated at open), so every block's sum starts as that of a block of zeros: a block read before
 * it was ever written is checked too. */
#define _GNU_SOURCE
#include "io/swap.h"
#include "backend/backend.h" /* the trace's observer: swap requests are reported beside the device's copies */
#include "util/clock.h"
#include "util/crc32c.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <liburing.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

enum { KIND_READ, KIND_WRITE };
static const char *const kind_names[] = {"read", "write"};

typedef struct swap_request {
    int ticket; /* -1: the slot is free */
    uint64_t seq; /* issue order: pieces are cut from the oldest request first */
    int kind, done, failed;
    char *buf;
    size_t offset, bytes;
    size_t split;   /* bytes already handed out to pieces */
    int pieces_out; /* its pieces in flight */
    double vend;    /* when it completes on the run's clock (util/clock.h: the NVMe queue's lane) */
    double issued;  /* zt_clock_now() at issue: the start of its interval in the trace */
    char error[sizeof(((zt_err *)0)->msg)];
} swap_request;

typedef struct swap_piece {
    int req;        /* slot of its request; -1: the piece is free */
    size_t start;   /* byte within the request where the piece starts */
    size_t at, len; /* byte within the request of the next byte to move, bytes still to move */
} swap_piece;

struct zt_swap {
    char *dir, *path;
    int fd, direct;
    size_t bytes, block_size;
    zt_swap_opts opts;
    struct io_uring ring;
    swap_piece *pieces; /* opts.queue_depth of them */
    int pieces_out, unsubmitted;
    swap_request *reqs;
    int nreqs;
    uint64_t next_seq;
    size_t moved[2];      /* bytes read, written */
    int active[2];        /* requests of each kind not yet complete */
    double busy[2], busy_since[2];
    uint32_t *sums;       /* CRC32C of each ZT_SWAP_ALIGN block, as last written */
    char context[64];     /* zt_swap_set_context's words, named in errors */
};

size_t zt_swap_round(size_t bytes) { return (bytes + ZT_SWAP_ALIGN - 1) / ZT_SWAP_ALIGN * ZT_SWAP_ALIGN; }

void *zt_swap_buffer_alloc(size_t bytes) {
    size_t n = bytes ? zt_swap_round(bytes) : ZT_SWAP_ALIGN;
    /* predict: address space only (page-aligned, never touched: nothing is read into it) */
    if (zt_clock_costs_only()) {
        void *q = zt_clock_bulk_alloc(n);
        if (q) return q;
    }
    void *p = aligned_alloc(ZT_SWAP_ALIGN, n);
    if (!p) {
        fprintf(stderr, "zerotrain: error: out of host memory (%zu bytes for a swap buffer)\n", n);
        abort();
    }
    return memset(p, 0, n);
}

void zt_swap_buffer_free(void *p) { zt_clock_bulk_free(p); /* free() unless it was address space only */ }

const char *zt_swap_path(const zt_swap *s) { return s->path; }
int zt_swap_is_direct(const zt_swap *s) { return s->direct; }

/* " (CONTEXT)" for messages, or "" */
static const char *context_note(const zt_swap *s, char *buf, size_t cap) {
    if (s->context[0]) snprintf(buf, cap, " (%s)", s->context);
    else buf[0] = 0;
    return buf;
}

void zt_swap_set_context(zt_swap *s, const char *context) {
    snprintf(s->context, sizeof s->context, "%s", context ? context : "");
}

size_t zt_swap_checksum_bytes(const zt_swap *s) { return s->bytes / ZT_SWAP_ALIGN * sizeof *s->sums; }

/* A piece of request r that moved file bytes [lo, hi) (whole blocks) in full: a write records their
 * sums, a read checks them; 0, or -1 with r failed and its error naming the first block that differs. */
static int check_piece(zt_swap *s, swap_request *r, size_t lo, size_t hi) {
    enum { BATCH = 48 }; /* blocks summed per call: a multiple of the three the instruction interleaves */
    uint32_t got[BATCH];
    const char *buf = r->buf + (lo - r->offset);
    for (size_t b = lo / ZT_SWAP_ALIGN, end = hi / ZT_SWAP_ALIGN; b < end;) {
        size_t k = end - b < BATCH ? end - b : BATCH;
        if (r->kind == KIND_WRITE) {
            zt_crc32c_blocks(buf, ZT_SWAP_ALIGN, k, s->sums + b);
        } else {
            zt_crc32c_blocks(buf, ZT_SWAP_ALIGN, k, got);
            for (size_t i = 0; i < k; i++)
                if (got[i] != s->sums[b + i]) {
                    char note[80];
                    snprintf(r->error, sizeof r->error,
                             "%s: checksum mismatch in %d bytes at byte %zu%s: the bytes read back are not the ones "
                             "written there (a failing drive, or another program wrote the file); nothing read from "
                             "it was used", s->path, ZT_SWAP_ALIGN, (b + i) * ZT_SWAP_ALIGN,
                             context_note(s, note, sizeof note));
                    r->failed = 1;
                    r->split = r->bytes;
                    return -1;
                }
        }
        b += k, buf += k * ZT_SWAP_ALIGN;
    }
    return 0;
}

/* ---- submission and completion ---- */

static void prep_piece(zt_swap *s, swap_piece *p) {
    swap_request *r = &s->reqs[p->req];
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
    assert(sqe && "the submission queue holds queue_depth entries and at most that many pieces exist");
    if (r->kind == KIND_READ) io_uring_prep_read(sqe, s->fd, r->buf + p->at, (unsigned)p->len, r->offset + p->at);
    else io_uring_prep_write(sqe, s->fd, r->buf + p->at, (unsigned)p->len, r->offset + p->at);
    io_uring_sqe_set_data(sqe, p);
    s->unsubmitted++;
}

/* Hands prepared pieces to the kernel. The only errors io_uring_submit can give on a ring set up
 * as ours is are transient (retried) or the kernel being out of memory, which, as for malloc in
 * this project, is not a recoverable input error. */
static void flush(zt_swap *s) {
    while (s->unsubmitted > 0) {
        int rc = io_uring_submit(&s->ring);
        if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) continue;
        if (rc < 0) {
            fprintf(stderr, "zerotrain: error: %s: io_uring_submit: %s\n", s->path, strerror(-rc));
            abort();
        }
        s->unsubmitted -= rc;
    }
}

static swap_request *oldest_unsplit(zt_swap *s) {
    swap_request *best = NULL;
    for (int i = 0; i < s->nreqs; i++) {
        swap_request *r = &s->reqs[i];
        if (r->ticket >= 0 && r->split < r->bytes && (!best || r->seq < best->seq)) best = r;
    }
    return best;
}

/* Cuts pieces from the oldest requests into free piece slots and submits them: one submit call per
 * piece with aio.single_submit, one for the whole batch otherwise. Without aio.overlap_events new
 * pieces go out only once every piece in flight has come back (batch by batch). */
static void feed(zt_swap *s) {
    if (!s->opts.overlap_events && s->pieces_out > 0) return;
    for (int slot = 0; slot < s->opts.queue_depth && s->pieces_out < s->opts.queue_depth; slot++) {
        swap_piece *p = &s->pieces[slot];
        if (p->req >= 0) continue;
        swap_request *r = oldest_unsplit(s);
        if (!r) break;
        p->req = (int)(r - s->reqs);
        p->start = p->at = r->split;
        p->len = r->bytes - r->split < s->block_size ? r->bytes - r->split : s->block_size;
        r->split += p->len;
        r->pieces_out++;
        s->pieces_out++;
        prep_piece(s, p);
        if (s->opts.single_submit) flush(s);
    }
    flush(s);
}

/* A finished request to the trace's observer (backend.h): from its issue to its completion, the
 * NVMe lane's completion time on a virtual clock (the wall clock's now has no meaning there). */
static void request_finished(zt_swap *s, swap_request *r) {
    r->done = 1;
    if (--s->active[r->kind] == 0) s->busy[r->kind] += zt_now() - s->busy_since[r->kind];
    const zt_device_observer *obs = zt_device_observer_now();
    if (obs && obs->nvme && !r->failed && r->bytes)
        obs->nvme(obs->ctx, r->kind == KIND_WRITE, r->bytes, r->issued, zt_clock_is_virtual() ? r->vend : zt_clock_now());
}

/* One completion: res is the byte count moved or -errno. */
static void complete_piece(zt_swap *s, swap_piece *p, int res) {
    swap_request *r = &s->reqs[p->req];
    if (res == -EAGAIN || res == -EINTR) { /* nothing moved: the same piece again */
        prep_piece(s, p);
        return;
    }
    if (res > 0) {
        s->moved[r->kind] += (size_t)res;
        p->at += (size_t)res;
        p->len -= (size_t)res;
        if (p->len > 0 && !r->failed) { /* short transfer: the rest as a new submission */
            prep_piece(s, p);
            return;
        }
        if (!r->failed) check_piece(s, r, r->offset + p->start, r->offset + p->at);
    } else if (!r->failed) {
        const char *why = res < 0 ? strerror(-res) : r->kind == KIND_READ ? "unexpected end of file" : "nothing written";
        char note[80];
        snprintf(r->error, sizeof r->error, "%s: %s of %zu bytes at byte %zu failed%s: %s", s->path,
                 kind_names[r->kind], p->len, r->offset + p->at, context_note(s, note, sizeof note), why);
        r->failed = 1;
        r->split = r->bytes; /* the rest of a failed request is not submitted */
    }
    p->req = -1;
    s->pieces_out--;
    if (--r->pieces_out == 0 && r->split == r->bytes) request_finished(s, r);
}

/* Handles every completion that is ready, after waiting for one when `block`; then resubmits
 * short pieces and feeds new ones. */
static void reap(zt_swap *s, int block) {
    struct io_uring_cqe *cqe;
    int rc;
    do rc = block ? io_uring_wait_cqe(&s->ring, &cqe) : io_uring_peek_cqe(&s->ring, &cqe);
    while (rc == -EINTR);
    while (rc == 0) {
        complete_piece(s, io_uring_cqe_get_data(cqe), cqe->res);
        io_uring_cqe_seen(&s->ring, cqe);
        rc = io_uring_peek_cqe(&s->ring, &cqe);
    }
    flush(s);
    feed(s);
}

static int issue(zt_swap *s, int kind, size_t offset, void *buf, size_t bytes) {
    assert(offset % ZT_SWAP_ALIGN == 0 && bytes % ZT_SWAP_ALIGN == 0 && (uintptr_t)buf % ZT_SWAP_ALIGN == 0);
    assert(offset <= s->bytes && bytes <= s->bytes - offset && "request outside the swap file");
    int slot = 0;
    while (slot < s->nreqs && s->reqs[slot].ticket >= 0) slot++;
    if (slot == s->nreqs) {
        s->nreqs = s->nreqs ? 2 * s->nreqs : 8;
        s->reqs = zt_xrealloc(s->reqs, (size_t)s->nreqs * sizeof *s->reqs);
        for (int i = slot; i < s->nreqs; i++) s->reqs[i].ticket = -1;
    }
    swap_request *r = &s->reqs[slot];
    uint64_t seq = s->next_seq++;
    *r = (swap_request){.ticket = (int)(seq % INT_MAX), .seq = seq, .kind = kind, .buf = buf, .offset = offset,
                        .bytes = bytes, .issued = zt_clock_now()};
    r->vend = zt_clock_queue(kind == KIND_READ ? ZT_QUEUE_NVME_READ : ZT_QUEUE_NVME_WRITE, (double)bytes);
    if (s->active[kind]++ == 0) s->busy_since[kind] = zt_now();
    if (zt_clock_costs_only()) { /* predict: the request is costed on the clock's NVMe lane, never made */
        r->split = bytes;
        s->moved[kind] += bytes;
        request_finished(s, r);
        return r->ticket;
    }
    if (bytes == 0) request_finished(s, r);
    reap(s, 0); /* takes what has completed meanwhile, then feeds this request's first pieces */
    return r->ticket;
}

int zt_swap_read(zt_swap *s, size_t offset, void *buf, size_t bytes) {
    return issue(s, KIND_READ, offset, buf, bytes);
}

int zt_swap_write(zt_swap *s, size_t offset, const void *buf, size_t bytes) {
    return issue(s, KIND_WRITE, offset, (void *)buf, bytes); /* only ever read from */
}

int zt_swap_wait(zt_swap *s, int ticket, zt_err *err) {
    int slot = 0;
    while (slot < s->nreqs && !(ticket >= 0 && s->reqs[slot].ticket == ticket)) slot++;
    assert(slot < s->nreqs && "zt_swap_wait: ticket unknown or already waited for");
    swap_request *r = &s->reqs[slot];
    while (!r->done) {
        feed(s);
        assert(s->pieces_out > 0);
        reap(s, 1);
    }
    r->ticket = -1;
    zt_clock_after(r->vend); /* the waiter continues when the request completes on the run's clock */
    return r->failed ? zt_fail(err, "%s", r->error) : 0;
}

int zt_swap_wait_all(zt_swap *s, zt_err *err) {
    int rc = 0;
    for (;;) { /* oldest first, so that the first failure reported is the earliest request's */
        swap_request *oldest = NULL;
        for (int i = 0; i < s->nreqs; i++)
            if (s->reqs[i].ticket >= 0 && (!oldest || s->reqs[i].seq < oldest->seq)) oldest = &s->reqs[i];
        if (!oldest) return rc;
        if (zt_swap_wait(s, oldest->ticket, rc ? NULL : err)) rc = -1;
    }
}

zt_swap_stats zt_swap_get_stats(const zt_swap *s) {
    double now = zt_now(), busy[2];
    for (int k = 0; k < 2; k++) busy[k] = s->busy[k] + (s->active[k] ? now - s->busy_since[k] : 0);
    return (zt_swap_stats){s->moved[KIND_READ], s->moved[KIND_WRITE], busy[KIND_READ], busy[KIND_WRITE]};
}

/* ---- open and close ---- */

/* Reserves the file's blocks so that later writes cannot run out of space. fallocate is the
 * file system's own reservation; where it has none (EOPNOTSUPP), posix_fallocate writes a byte
 * into each block, through a descriptor without O_DIRECT since such small writes are unaligned. */
static int reserve(const char *path, int fd, size_t bytes) {
    if (fallocate(fd, 0, 0, (off_t)bytes) == 0) return 0;
    if (errno != EOPNOTSUPP && errno != ENOSYS) return errno;
    int plain = open(path, O_RDWR | O_CLOEXEC);
    if (plain < 0) return errno;
    int rc = posix_fallocate(plain, 0, (off_t)bytes);
    close(plain);
    return rc;
}

/* Swap files in dir left by runs that are no longer alive on this host (killed, crashed: a clean
 * end removes its files): " (N swap files of earlier runs hold X in DIR: remove them if no run
 * on another host uses them)" for the space errors, or "" when there are none. Never removes them:
 * on a directory shared between hosts the pid says nothing about another host's runs (`run
 * --restarts` removes its own job's dead ranks' files, told by their locks: run_restart.c). */
static void leftovers(const char *dir, char *note, size_t cap) {
    note[0] = 0;
    DIR *d = opendir(dir);
    if (!d) return;
    int count = 0;
    double bytes = 0;
    for (struct dirent *de; (de = readdir(d));) {
        const char *name = de->d_name, *dash = strrchr(name, '-');
        size_t len = strlen(name);
        if (strncmp(name, "zerotrain-swap-", 15) || !dash || len < 5 || strcmp(name + len - 4, ".bin")) continue;
        long pid = strtol(dash + 1, NULL, 10);
        if (pid <= 0 || !(kill((pid_t)pid, 0) && errno == ESRCH)) continue; /* alive (or not ours to tell) */
        struct stat st;
        zt_sb path = {0};
        zt_sb_printf(&path, "%s/%s", dir, name);
        if (stat(path.p, &st) == 0) bytes += (double)st.st_blocks * 512.0, count++;
        free(path.p);
    }
    closedir(d);
    char size[32];
    if (count)
        snprintf(note, cap, " (%d swap file%s of earlier runs %s %s there: remove %s if no run on another host uses %s)",
                 count, count > 1 ? "s" : "", count > 1 ? "hold" : "holds", zt_format_bytes(bytes, size, sizeof size),
                 count > 1 ? "them" : "it", count > 1 ? "them" : "it");
}

static zt_swap *open_fail(zt_swap *s, int unlink_file) {
    if (s->fd >= 0) close(s->fd);
    if (unlink_file) unlink(s->path);
    zt_scratch_forget(s->path);
    free(s->dir);
    free(s->path);
    zt_clock_bulk_free(s->sums);
    free(s);
    return NULL;
}

zt_swap *zt_swap_open(const char *dir, const char *purpose, int rank, size_t bytes, const zt_swap_opts *opts,
                      zt_err *err) {
    struct stat st;
    if (stat(dir, &st)) { zt_fail(err, "%s: %s", dir, strerror(errno)); return NULL; }
    if (!S_ISDIR(st.st_mode)) { zt_fail(err, "%s: not a directory", dir); return NULL; }
    if (access(dir, W_OK | X_OK)) { zt_fail(err, "%s: not writable: %s", dir, strerror(errno)); return NULL; }

    zt_swap *s = zt_xcalloc(1, sizeof *s);
    s->fd = -1;
    s->dir = zt_xstrdup(dir);
    zt_sb name = {0};
    zt_sb_printf(&name, "%s/zerotrain-swap-%s-rank%d-%ld.bin", dir, purpose, rank, (long)getpid());
    s->path = name.p;
    s->bytes = zt_swap_round(bytes);
    s->opts = *opts;
    if (s->opts.queue_depth < 1) s->opts.queue_depth = 1;
    size_t block = opts->block_size < ZT_SWAP_ALIGN ? ZT_SWAP_ALIGN : zt_swap_round(opts->block_size);
    s->block_size = block > ((size_t)1 << 30) ? (size_t)1 << 30 : block; /* io_uring lengths are 32-bit */

    /* The space check: what the file system grants an unprivileged user (f_bavail), plus what a
     * leftover file of the same name holds, since it is reused. A file system that reports no
     * size at all (f_blocks 0: ramfs and some virtual ones) is not checked. */
    struct statvfs vfs;
    if (statvfs(dir, &vfs)) { zt_fail(err, "%s: %s", dir, strerror(errno)); return open_fail(s, 0); }
    double free_bytes = (double)vfs.f_bavail * (double)vfs.f_frsize;
    if (stat(s->path, &st) == 0) free_bytes += (double)st.st_blocks * 512.0;
    char need[32], have[32], note[200];
    int costs_only = zt_clock_costs_only(); /* predict: nothing is written, the file stays empty */
    if (!costs_only && vfs.f_blocks > 0 && (double)s->bytes > free_bytes) {
        leftovers(dir, note, sizeof note);
        zt_fail(err, "%s: needs %s for %s swap, %s free%s", dir, zt_format_bytes((double)s->bytes, need, sizeof need), purpose,
                zt_format_bytes(free_bytes, have, sizeof have), note);
        return open_fail(s, 0);
    }

    /* O_DIRECT where the file system takes it; those without it refuse the open with EINVAL. O_TRUNC:
     * a leftover of the same name (a reused pid) must read as zeros, as the checksums expect.
     * The file is made under another name, locked, then renamed: a swap file is held (flock) by
     * its rank from the moment it has its name until the rank ends, however it ends (the kernel
     * drops the lock of a killed process), so one that no process holds is a dead rank's
     * (`zerotrain run --restarts` removes those of its own job, run_restart.c). */
    int flags = O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC;
    zt_sb fresh = {0};
    zt_sb_printf(&fresh, "%s.new", s->path);
    s->fd = open(fresh.p, flags | O_DIRECT, 0600);
    s->direct = s->fd >= 0;
    if (s->fd < 0 && errno == EINVAL) s->fd = open(fresh.p, flags, 0600);
    if (s->fd < 0) {
        zt_fail(err, "%s: cannot create: %s", s->path, strerror(errno));
        free(fresh.p);
        return open_fail(s, 0);
    }
    if (flock(s->fd, LOCK_EX) != 0 && errno != ENOLCK && errno != EOPNOTSUPP && errno != EINVAL) { /* unlocked where locks are not arbitrated */
        zt_fail(err, "%s: cannot lock: %s", fresh.p, strerror(errno));
        unlink(fresh.p);
        free(fresh.p);
        return open_fail(s, 0);
    }
    if (rename(fresh.p, s->path) != 0) {
        zt_fail(err, "%s: cannot rename to %s: %s", fresh.p, s->path, strerror(errno));
        unlink(fresh.p);
        free(fresh.p);
        return open_fail(s, 0);
    }
    free(fresh.p);
    zt_scratch_register(s->path); /* gone on every exit path that runs code, errors and signals included */
    if (!costs_only && ftruncate(s->fd, (off_t)s->bytes)) {
        zt_fail(err, "%s: cannot set its size to %zu bytes: %s", s->path, s->bytes, strerror(errno));
        return open_fail(s, 1);
    }
    int rc = opts->preallocate && !costs_only ? reserve(s->path, s->fd, s->bytes) : 0;
    if (rc == ENOSPC || rc == EDQUOT || rc == EFBIG) {
        leftovers(dir, note, sizeof note);
        zt_fail(err, "%s: needs %s for %s swap, %s free (reserving it: %s)%s", dir,
                zt_format_bytes((double)s->bytes, need, sizeof need), purpose, zt_format_bytes(free_bytes, have, sizeof have),
                strerror(rc), note);
        return open_fail(s, 1);
    } else if (rc) {
        zt_fail(err, "%s: cannot reserve %zu bytes: %s", s->path, s->bytes, strerror(rc));
        return open_fail(s, 1);
    }
    rc = io_uring_queue_init((unsigned)s->opts.queue_depth, &s->ring, 0);
    if (rc < 0) {
        zt_fail(err, "%s: cannot set up io_uring with queue depth %d: %s", s->path, s->opts.queue_depth,
                strerror(-rc));
        return open_fail(s, 1);
    }
    s->pieces = zt_xcalloc((size_t)s->opts.queue_depth, sizeof *s->pieces);
    for (int i = 0; i < s->opts.queue_depth; i++) s->pieces[i].req = -1;
    size_t n_blocks = s->bytes / ZT_SWAP_ALIGN;
    /* the checksums are host memory the run needs (address space only when nothing is written) */
    s->sums = zt_clock_bulk_alloc((n_blocks ? n_blocks : 1) * sizeof *s->sums);
    if (!s->sums) { zt_fail(err, "%s: out of host memory for its block checksums", s->path); return open_fail(s, 1); }
    char zeros[ZT_SWAP_ALIGN] = {0};
    uint32_t zero_sum = zt_crc32c(0, zeros, sizeof zeros);
    for (size_t b = 0; b < n_blocks && !costs_only; b++) s->sums[b] = zero_sum;
    return s;
}

void zt_swap_close(zt_swap *s, int remove_file) {
    if (!s) return;
    /* the kernel may still be writing into caller buffers: let what is in flight come back, and
     * submit nothing new */
    for (int i = 0; i < s->nreqs; i++) s->reqs[i].split = s->reqs[i].bytes;
    while (s->pieces_out > 0) reap(s, 1);
    io_uring_queue_exit(&s->ring);
    free(s->pieces);
    free(s->reqs);
    open_fail(s, remove_file);
}
