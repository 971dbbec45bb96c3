/* util.c — see util.h */
#define _GNU_SOURCE /* memrchr */
#include "util/util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static int log_rank = 0; /* process-wide logger state (the one allowed global besides MPI/device) */

int zt_fail(zt_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void zt_print_error(const zt_err *err) {
    char line[4 * sizeof err->msg + 4];
    fprintf(stderr, "zerotrain: error: %s\n", zt_escape_str(err->msg, line, sizeof line));
    fflush(stderr);
}

/* length of the valid UTF-8 sequence starting at p (at most n bytes), 0 when not valid */
static size_t utf8_len(const unsigned char *p, size_t n) {
    size_t k = p[0] > 0xF4 ? 0 : p[0] >= 0xF0 ? 4 : p[0] >= 0xE0 ? 3 : p[0] >= 0xC2 ? 2 : 0;
    if (!k || k > n) return 0;
    for (size_t i = 1; i < k; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    uint32_t cp = k == 2 ? (p[0] & 0x1Fu) : k == 3 ? (p[0] & 0x0Fu) : (p[0] & 0x07u);
    for (size_t i = 1; i < k; i++) cp = cp << 6 | (p[i] & 0x3Fu);
    if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return k;
}

char *zt_escape(const void *text, size_t n, char *buf, size_t cap) {
    const unsigned char *p = text;
    size_t o = 0;
    if (!cap) return buf;
    for (size_t i = 0, used; i < n; i += used) {
        char piece[8];
        size_t len;
        used = p[i] >= 0x80 ? utf8_len(p + i, n - i) : 0;
        if (used) { /* a valid UTF-8 character: as it is */
            memcpy(piece, p + i, used);
            len = used;
        } else if (p[i] == '\n' || p[i] == '\r' || p[i] == '\t') {
            piece[0] = '\\';
            piece[1] = p[i] == '\n' ? 'n' : p[i] == '\r' ? 'r' : 't';
            len = 2;
            used = 1;
        } else if (p[i] < 0x20 || p[i] >= 0x7F) {
            len = (size_t)snprintf(piece, sizeof piece, "\\x%02X", p[i]);
            used = 1;
        } else {
            piece[0] = (char)p[i];
            len = used = 1;
        }
        if (o + len + 1 > cap) { /* cut short: end in "..." (never inside a UTF-8 character) */
            size_t keep = cap > 4 ? cap - 4 : 0;
            if (o > keep) {
                o = keep;
                while (o > 0 && ((unsigned char)buf[o] & 0xC0) == 0x80) o--;
            }
            for (int d = 0; d < 3 && o + 1 < cap; d++) buf[o++] = '.';
            break;
        }
        memcpy(buf + o, piece, len);
        o += len;
    }
    buf[o] = 0;
    return buf;
}

char *zt_escape_str(const char *s, char *buf, size_t cap) { return zt_escape(s, strlen(s), buf, cap); }

void *zt_xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "zerotrain: error: out of host memory (asked for %zu bytes)\n", bytes);
        abort();
    }
    return p;
}

void *zt_xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "zerotrain: error: out of host memory (asked for %zu x %zu bytes)\n", count, size);
        abort();
    }
    return p;
}

void *zt_xrealloc(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) {
        fprintf(stderr, "zerotrain: error: out of host memory (asked for %zu bytes)\n", bytes);
        abort();
    }
    return q;
}

char *zt_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = zt_xmalloc(n);
    memcpy(d, s, n);
    return d;
}

void zt_log_set_rank(int rank) { log_rank = rank; }
int zt_log_rank(void) { return log_rank; }

void zt_info(const char *fmt, ...) {
    if (log_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

void zt_warn(const char *fmt, ...) {
    char msg[1024], line[4 * sizeof msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "zerotrain: warning: [rank %d] %s\n", log_rank, zt_escape_str(msg, line, sizeof line));
    fflush(stderr);
}

double zt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double zt_unix_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- scratch files: a fixed table, so the signal path needs no allocation or lock (a slot's path is
 * complete before it is marked in use) */
#define ZT_SCRATCH_MAX 16
static struct {
    char path[4096];
    volatile sig_atomic_t used;
} scratch[ZT_SCRATCH_MAX];

static void scratch_at_exit(void) { zt_scratch_remove_all(); }

void zt_scratch_register(const char *path) {
    static int hooked;
    if (!hooked) hooked = !atexit(scratch_at_exit);
    for (int i = 0; i < ZT_SCRATCH_MAX; i++)
        if (!scratch[i].used) {
            snprintf(scratch[i].path, sizeof scratch[i].path, "%s", path);
            scratch[i].used = 1;
            return;
        }
}

void zt_scratch_forget(const char *path) {
    for (int i = 0; i < ZT_SCRATCH_MAX; i++)
        if (scratch[i].used && !strcmp(scratch[i].path, path)) scratch[i].used = 0;
}

void zt_scratch_remove_all(void) {
    for (int i = 0; i < ZT_SCRATCH_MAX; i++)
        if (scratch[i].used) {
            unlink(scratch[i].path);
            scratch[i].used = 0;
        }
}

int zt_mkdir_p(const char *path, zt_err *err) {
    if (!*path) return zt_fail(err, "cannot create a directory with an empty name");
    char *buf = zt_xstrdup(path);
    int rc = 0;
    for (char *p = buf + 1; rc == 0; p++) { /* each prefix that ends at a '/' or the end */
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST) rc = zt_fail(err, "%s: cannot create directory: %s", buf, strerror(errno));
        if (!c) break;
        *p = c;
    }
    free(buf);
    struct stat st;
    if (rc == 0 && (stat(path, &st) || !S_ISDIR(st.st_mode)))
        rc = zt_fail(err, "%s: exists and is not a directory", path);
    return rc;
}

int zt_mkdir_parent(const char *path, zt_err *err) {
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path) return 0;
    char *dir = zt_xstrdup(path);
    dir[slash - path] = '\0';
    int rc = zt_mkdir_p(dir, err);
    free(dir);
    return rc;
}

int zt_exe_dir(char *out, size_t cap) {
    ssize_t n = cap > 1 ? readlink("/proc/self/exe", out, cap - 1) : -1;
    if (n <= 0) return -1;
    out[n] = '\0';
    char *slash = strrchr(out, '/');
    if (!slash) return -1;
    *slash = '\0';
    return 0;
}

void zt_sb_printf(zt_sb *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->n;
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? room : 0, fmt, ap);
        va_end(ap);
        if (k < 0) return;
        if (b->p && (size_t)k < room) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + (size_t)k + 1) cap *= 2;
        b->p = zt_xrealloc(b->p, cap);
        b->cap = cap;
    }
}

int zt_parse_bytes(const char *t, double *out) {
    while (isspace((unsigned char)*t)) t++;
    if (!isdigit((unsigned char)*t) && *t != '.') return -1;
    char *end;
    double v = strtod(t, &end);
    if (end == t || !isfinite(v) || v < 0) return -1;
    while (isspace((unsigned char)*end)) end++;
    static const struct { const char *unit; double mult; } units[] = {
        {"", 1},      {"b", 1},          {"kb", 1e3},  {"mb", 1e6},          {"gb", 1e9},
        {"tb", 1e12}, {"kib", 1024.0},   {"mib", 1048576.0},                 {"gib", 1073741824.0},
        {"tib", 1099511627776.0},        {"k", 1024.0}, {"m", 1048576.0},    {"g", 1073741824.0},
        {"t", 1099511627776.0}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcasecmp(end, units[i].unit)) {
            *out = v * units[i].mult;
            return 0;
        }
    return -1;
}

static int levenshtein(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 1000;
    int row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            int best = diag + cost;
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* Writes " (did you mean 'X'?)" into out when one candidate is close enough, else "". */
void zt_suggest(const char *word, const char *const *cands, int n, char *out, size_t cap) {
    int limit = (int)strlen(word) / 3;
    if (limit < 2) limit = 2;
    int best = limit + 1;
    const char *pick = NULL;
    for (int i = 0; i < n; i++) {
        int d = levenshtein(word, cands[i]);
        if (d < best) best = d, pick = cands[i];
    }
    if (pick) snprintf(out, cap, " (did you mean '%s'?)", pick);
    else out[0] = '\0';
}

size_t zt_first_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

char *zt_read_file(const char *path, size_t *len, zt_err *err) { return zt_read_file_max(path, ZT_READ_FILE_MAX, len, err); }

/* seconds a pipe or device may go without data while read (ZEROTRAIN_PIPE_TIMEOUT, default 30) */
static double pipe_timeout(void) {
    const char *env = getenv("ZEROTRAIN_PIPE_TIMEOUT");
    double s = env && *env ? atof(env) : 30.0;
    return s > 0 ? s : 30.0;
}

int zt_reader_open(zt_reader *r, const char *path, zt_err *err) {
    /* O_NONBLOCK: opening a FIFO nobody has opened for writing would otherwise wait forever */
    r->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    r->path = path;
    if (r->fd < 0) return zt_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    r->streamed = 0;
    if (fstat(r->fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISSOCK(st.st_mode)))
        r->streamed = S_ISFIFO(st.st_mode) ? 'f' : S_ISCHR(st.st_mode) ? 'c' : 's';
    r->wait_s = pipe_timeout();
    return 0;
}

long zt_reader_read(zt_reader *r, void *buf, size_t n, zt_err *err) {
    for (;;) {
        if (r->streamed) { /* a pipe or device: wait for data (or the writer's end) a bounded time */
            struct pollfd pf = {.fd = r->fd, .events = POLLIN};
            int ready = poll(&pf, 1, (int)(r->wait_s * 1000));
            if (ready < 0 && errno == EINTR) continue;
            if (ready == 0)
                return zt_fail(err, "%s: no data within %g s (a %s nobody writes to; ZEROTRAIN_PIPE_TIMEOUT sets the wait)", r->path,
                               r->wait_s, r->streamed == 'f' ? "named pipe" : r->streamed == 'c' ? "device" : "socket");
        }
        ssize_t got = read(r->fd, buf, n > (1u << 30) ? (1u << 30) : n);
        if (got >= 0) return (long)got;
        if (errno == EINTR || errno == EAGAIN) continue; /* EAGAIN: poll again */
        return zt_fail(err, "%s: read error: %s", r->path, strerror(errno));
    }
}

void zt_reader_close(zt_reader *r) {
    if (r->fd >= 0) close(r->fd);
    r->fd = -1;
}

char *zt_read_file_max(const char *path, size_t max, size_t *len, zt_err *err) {
    zt_reader r;
    if (zt_reader_open(&r, path, err)) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = zt_xmalloc(cap);
    for (;;) {
        if (n > max) { /* a device or pipe has no size to look at first: stop one byte past max */
            free(buf);
            zt_reader_close(&r);
            zt_fail(err, "%s: larger than %zu bytes, the most this file may hold", path, max);
            return NULL;
        }
        if (n + 1 >= cap) {
            cap *= 2;
            char *grown = realloc(buf, cap);
            if (!grown) { free(buf); zt_reader_close(&r); zt_fail(err, "%s: out of memory reading", path); return NULL; }
            buf = grown;
        }
        long got = zt_reader_read(&r, buf + n, cap - 1 - n, err);
        if (got < 0) { free(buf); zt_reader_close(&r); return NULL; }
        if (got == 0) break;
        n += (size_t)got;
    }
    zt_reader_close(&r);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void zt_rng_seed(zt_rng *rng, uint64_t seed) {
    uint64_t s = seed;
    rng->state = splitmix64(&s);
    if (rng->state == 0) rng->state = 0x2545f4914f6cdd1dull;
}

uint64_t zt_rng_u64(zt_rng *rng) {
    uint64_t x = rng->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng->state = x;
    return x * 0x2545f4914f6cdd1dull;
}

float zt_rng_uniform(zt_rng *rng) { return (float)(zt_rng_u64(rng) >> 40) / 16777216.0f; }

/* A GF(2)-linear map of 64-bit words, stored as the images of the 64 unit vectors. */
typedef struct { uint64_t col[64]; } bitmat64;

static uint64_t bitmat_apply(const bitmat64 *m, uint64_t x) {
    uint64_t y = 0;
    for (int i = 0; x; i++, x >>= 1)
        if (x & 1) y ^= m->col[i];
    return y;
}

/* a then b: (b o a)(x) = b(a(x)) */
static bitmat64 bitmat_then(const bitmat64 *a, const bitmat64 *b) {
    bitmat64 r;
    for (int i = 0; i < 64; i++) r.col[i] = bitmat_apply(b, a->col[i]);
    return r;
}

void zt_rng_jump(zt_rng *rng, uint64_t draws) {
    bitmat64 step; /* one xorshift state transition, column by column */
    for (int i = 0; i < 64; i++) {
        uint64_t x = 1ull << i;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        step.col[i] = x;
    }
    uint64_t state = rng->state;
    for (; draws; draws >>= 1) { /* square-and-multiply: apply step^(2^k) for each set bit k */
        if (draws & 1) state = bitmat_apply(&step, state);
        if (draws > 1) step = bitmat_then(&step, &step);
    }
    rng->state = state;
}

float zt_rng_normal(zt_rng *rng) {
    float u1 = zt_rng_uniform(rng), u2 = zt_rng_uniform(rng);
    if (u1 < 1e-12f) u1 = 1e-12f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

int zt_cut_torn_line(const char *path, long *cut, zt_err *err) {
    if (cut) *cut = 0;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : zt_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) { /* a pipe or device: nothing to cut */
        close(fd);
        return 0;
    }
    off_t end = st.st_size; /* scan back from the end, a block at a time, for the last '\n' */
    char buf[4096];
    while (end > 0) {
        off_t from = end > (off_t)sizeof buf ? end - (off_t)sizeof buf : 0;
        ssize_t n = pread(fd, buf, (size_t)(end - from), from);
        if (n != end - from) {
            int rc = zt_fail(err, "%s: cannot read: %s", path, n < 0 ? strerror(errno) : "short read");
            close(fd);
            return rc;
        }
        char *nl = memrchr(buf, '\n', (size_t)n);
        if (nl) {
            end = from + (nl - buf) + 1;
            break;
        }
        end = from;
    }
    int rc = 0;
    if (end < st.st_size) {
        if (ftruncate(fd, end)) rc = zt_fail(err, "%s: cannot cut its torn last record: %s", path, strerror(errno));
        else if (cut) *cut = (long)(st.st_size - end);
    }
    close(fd);
    return rc;
}

const char *zt_format_bytes(double bytes, char *buf, size_t cap) {
    if (bytes >= 1073741824.0) snprintf(buf, cap, "%.2f GiB", bytes / 1073741824.0);
    else if (bytes >= 1048576.0) snprintf(buf, cap, "%.2f MiB", bytes / 1048576.0);
    else if (bytes >= 1024.0) snprintf(buf, cap, "%.2f KiB", bytes / 1024.0);
    else snprintf(buf, cap, "%.0f bytes", bytes);
    return buf;
}

double zt_settled_time(const double *t, int n, double tolerance, int *settled) {
    double *s = zt_xmalloc((size_t)n * sizeof *s);
    for (int i = 0; i < n; i++) { /* insertion sort: a few dozen samples at most */
        int j = i;
        for (; j > 0 && s[j - 1] > t[i]; j--) s[j] = s[j - 1];
        s[j] = t[i];
    }
    *settled = n >= 3 && s[2] <= s[0] * (1.0 + tolerance);
    double v = *settled ? s[1] : n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return v;
}
