/* monitor_tb.c — TensorBoard event files without TensorFlow or a protobuf library (monitor.h).
 *
 * An event file is a TFRecord stream: each record is
 *     uint64 length | uint32 masked CRC-32C of those 8 bytes | data | uint32 masked CRC-32C of data
 * (little-endian; masked = rotate right by 15, plus 0xa282ead8), and each record's data is one
 * serialized tensorflow.Event message. We encode the few fields we use by hand:
 *     Event:       1 wall_time (double)  2 step (int64)  3 file_version (string)  5 summary  7 session_log
 *     Summary:     1 value (repeated Summary.Value)
 *     Value:       1 tag (string)  2 simple_value (float)
 *     SessionLog:  1 status (enum, START = 1)
 * The first record carries file_version "brain.Event:2", which is what makes TensorBoard honour a
 * SessionLog START: it drops what it read at or after that step (the steps a resumed run redoes). */
#include "io/monitor_writers.h"

#include "io/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct zt_tb_writer {
    int fd;
    char *path;
};

/* ---- TFRecord's masked CRC-32C (the CRC itself is checkpoint.c's) ---- */

uint32_t zt_crc32c_masked(const void *data, size_t n) {
    uint32_t c = zt_crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- a growable byte buffer and protobuf wire encoding ---- */

typedef struct bytes {
    unsigned char *p;
    size_t n, cap;
} bytes;

static void put(bytes *b, const void *src, size_t n) {
    if (n == 0) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = zt_xrealloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_varint(bytes *b, uint64_t v) {
    unsigned char buf[10];
    int n = 0;
    do {
        buf[n] = v & 0x7f;
        v >>= 7;
        if (v) buf[n] |= 0x80;
        n++;
    } while (v);
    put(b, buf, (size_t)n);
}

static void put_le(bytes *b, uint64_t v, int nbytes) {
    unsigned char buf[8];
    for (int i = 0; i < nbytes; i++) buf[i] = (unsigned char)(v >> (8 * i));
    put(b, buf, (size_t)nbytes);
}

enum { WIRE_VARINT = 0, WIRE_64BIT = 1, WIRE_LEN = 2, WIRE_32BIT = 5 };
static void put_key(bytes *b, int field, int wire) { put_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }

static void put_len_field(bytes *b, int field, const void *data, size_t n) {
    put_key(b, field, WIRE_LEN);
    put_varint(b, n);
    put(b, data, n);
}

static void put_double_field(bytes *b, int field, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    put_key(b, field, WIRE_64BIT);
    put_le(b, bits, 8);
}

static void put_float_field(bytes *b, int field, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    put_key(b, field, WIRE_32BIT);
    put_le(b, bits, 4);
}

/* Event fields */
enum { EV_WALL_TIME = 1, EV_STEP = 2, EV_FILE_VERSION = 3, EV_SUMMARY = 5, EV_SESSION_LOG = 7 };
enum { SUMMARY_VALUE = 1, VALUE_TAG = 1, VALUE_SIMPLE_VALUE = 2, SESSION_LOG_STATUS = 1, SESSION_LOG_START = 1 };

/* Event header: wall_time and step */
static void event_begin(bytes *ev, long step) {
    put_double_field(ev, EV_WALL_TIME, zt_unix_time());
    if (step != 0) { /* proto3: a zero int64 is left out */
        put_key(ev, EV_STEP, WIRE_VARINT);
        put_varint(ev, (uint64_t)step);
    }
}

/* Frames an Event as one TFRecord onto out. */
static void frame_record(bytes *out, const bytes *ev) {
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)ev->n >> (8 * i));
    put(out, len, 8);
    put_le(out, zt_crc32c_masked(len, 8), 4);
    put(out, ev->p, ev->n);
    put_le(out, zt_crc32c_masked(ev->p, ev->n), 4);
}

/* All of out in one write(2): a record is on disk whole or not at all, even if the process is killed. */
static int write_all(int fd, const bytes *out) {
    for (size_t done = 0; done < out->n;) {
        ssize_t k = write(fd, out->p + done, out->n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = ENOSPC; /* no progress: the file system is full */
            return -1;
        }
        done += (size_t)k;
    }
    return 0;
}

/* An event file of an earlier run that stopped inside a record (a full disk, a kill during the write)
 * is cut back to its last whole record, so the directory reads cleanly: TensorBoard would stop at
 * the torn record, and our own reader refuses it. -1 with err when the file cannot be cut. */
static int cut_torn_records(const char *path, zt_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0; /* unreadable: not ours to judge */
    /* record by record (an event file of a long run is large): only one record's bytes are held */
    struct stat st;
    size_t len = fstat(fileno(f), &st) == 0 && st.st_size > 0 ? (size_t)st.st_size : 0, at = 0, cap = 0;
    unsigned char head[12], *data = NULL;
    while (len - at >= 12 && fread(head, 1, 12, f) == 12) {
        uint64_t n = 0;
        uint32_t crc_len = 0, crc_data = 0;
        for (int i = 0; i < 8; i++) n |= (uint64_t)head[i] << (8 * i);
        for (int i = 0; i < 4; i++) crc_len |= (uint32_t)head[8 + i] << (8 * i);
        if (crc_len != zt_crc32c_masked(head, 8) || n > len - at - 12 || len - at - 12 - n < 4) break;
        if (n + 4 > cap) data = zt_xrealloc(data, cap = (size_t)n + 4);
        if (fread(data, 1, (size_t)n + 4, f) != n + 4) break;
        for (int i = 0; i < 4; i++) crc_data |= (uint32_t)data[n + i] << (8 * i);
        if (crc_data != zt_crc32c_masked(data, n)) break;
        at += 12 + n + 4;
    }
    free(data);
    fclose(f);
    if (at == len) return 0;
    if (truncate(path, (off_t)at)) return zt_fail(err, "%s: cannot cut its torn last record: %s", path, strerror(errno));
    zt_warn("tensorboard: %s ended inside a record (an earlier run stopped while writing); cut back to its last whole "
            "record (%zu bytes removed)", path, len - at);
    return 0;
}

static int cut_torn_event_files(const char *dir, zt_err *err) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20)) continue;
        char *path = zt_xmalloc(strlen(dir) + strlen(e->d_name) + 2);
        sprintf(path, "%s/%s", dir, e->d_name);
        rc = cut_torn_records(path, err);
        free(path);
    }
    closedir(d);
    return rc;
}

zt_tb_writer *zt_tb_open(const char *dir, long start_step, zt_err *err) {
    if (cut_torn_event_files(dir, err)) return NULL;
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    size_t cap = strlen(dir) + strlen(host) + 96;
    char *path = zt_xmalloc(cap);
    snprintf(path, cap, "%s/events.out.tfevents.%ld.%s.%ld", dir, (long)time(NULL), host, (long)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        zt_fail(err, "%s: cannot create the TensorBoard event file: %s", path, strerror(errno));
        free(path);
        return NULL;
    }
    bytes out = {0}, ev = {0};
    event_begin(&ev, 0);
    static const char version[] = "brain.Event:2";
    put_len_field(&ev, EV_FILE_VERSION, version, sizeof version - 1);
    frame_record(&out, &ev);
    ev.n = 0;
    event_begin(&ev, start_step);
    bytes log = {0};
    put_key(&log, SESSION_LOG_STATUS, WIRE_VARINT);
    put_varint(&log, SESSION_LOG_START);
    put_len_field(&ev, EV_SESSION_LOG, log.p, log.n);
    frame_record(&out, &ev);
    int rc = write_all(fd, &out);
    free(out.p);
    free(ev.p);
    free(log.p);
    if (rc) {
        zt_fail(err, "%s: cannot write the TensorBoard event file: %s", path, strerror(errno));
        close(fd);
        free(path);
        return NULL;
    }
    zt_tb_writer *w = zt_xcalloc(1, sizeof *w);
    w->fd = fd;
    w->path = path;
    return w;
}

int zt_tb_write(zt_tb_writer *w, long step, const zt_scalar *v, int n) {
    bytes summary = {0}, value = {0}, ev = {0}, out = {0};
    for (int i = 0; i < n; i++) {
        value.n = 0;
        put_len_field(&value, VALUE_TAG, v[i].tag, strlen(v[i].tag));
        put_float_field(&value, VALUE_SIMPLE_VALUE, (float)v[i].value);
        put_len_field(&summary, SUMMARY_VALUE, value.p, value.n);
    }
    event_begin(&ev, step);
    put_len_field(&ev, EV_SUMMARY, summary.p, summary.n);
    frame_record(&out, &ev);
    int rc = write_all(w->fd, &out);
    free(summary.p);
    free(value.p);
    free(ev.p);
    free(out.p);
    return rc;
}

const char *zt_tb_path(const zt_tb_writer *w) { return w->path; }

void zt_tb_close(zt_tb_writer *w) {
    if (!w) return;
    close(w->fd);
    free(w->path);
    free(w);
}
