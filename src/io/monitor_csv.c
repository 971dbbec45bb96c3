/* monitor_csv.c — DeepSpeed's csv_monitor (monitor.h): one file per metric in the monitor's
 * directory, named after the tag with '/' and ' ' replaced by '_' (Train/Samples/train_loss ->
 * Train_Samples_train_loss.csv), a header row "step,<last part of the tag>", then one "step,value"
 * row per step, with CRLF line ends as Python's csv module (which DeepSpeed uses) writes them.
 * Unlike DeepSpeed, a restarted run does not append a second header or repeat rows: at open, each
 * of our CSV files in the directory (Train_Samples_*.csv with a "step," header; nothing else is
 * touched) keeps its header and only the rows up to the resume point; a last row without its line
 * end (a full disk, a kill while writing) is cut, so appended rows start on a line of their own. */
#include "io/monitor_writers.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TAGS 64
#define TAG_PREFIX "Train_Samples_" /* the file names of monitor.c's tags */

struct zt_csv_writer {
    char *dir;
    int n;
    char *tags[MAX_TAGS];
    FILE *files[MAX_TAGS];
    int failed;
};

/* Keeps the header and the rows whose step is <= keep_upto; rewritten through a temporary file.
 * A file whose first line is not a "step,..." header is not ours and is left alone. */
static int trim_file(const char *path, long keep_upto, zt_err *err) {
    FILE *in = fopen(path, "r");
    if (!in) return zt_fail(err, "%s: cannot read: %s", path, strerror(errno));
    char line[512];
    if (!fgets(line, sizeof line, in)) {
        fclose(in);
        return 0;
    }
    if (!strchr(line, '\n')) { /* not one whole line: its header was cut short (a full disk), so is nothing */
        fclose(in);
        zt_warn("csv_monitor: %s holds no whole line (an earlier run stopped while writing it); emptied", path);
        return truncate(path, 0) ? zt_fail(err, "%s: cannot empty: %s", path, strerror(errno)) : 0;
    }
    if (strncmp(line, "step,", 5)) {
        fclose(in);
        return 0;
    }
    rewind(in);
    size_t cap = strlen(path) + 8;
    char *tmp = zt_xmalloc(cap);
    snprintf(tmp, cap, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fclose(in);
        int rc = zt_fail(err, "%s: cannot write: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    int first = 1;
    long torn = 0;
    while (fgets(line, sizeof line, in)) {
        char *end;
        long step = strtol(line, &end, 10);
        size_t n = strlen(line);
        if (n == 0 || line[n - 1] != '\n') { /* a row cut short by a full disk or a kill: it and what follows go */
            torn += (long)n;
            for (int c; (c = fgetc(in)) != EOF;) torn++;
            break;
        }
        if (first || (end != line && *end == ',' && step <= keep_upto)) fputs(line, out);
        first = 0;
    }
    if (torn) zt_warn("csv_monitor: %s ended inside a row (an earlier run stopped while writing); the torn row is cut "
                      "(%ld bytes)", path, torn);
    fclose(in);
    int bad = ferror(out) | (fclose(out) != 0);
    int rc = bad || rename(tmp, path) ? zt_fail(err, "%s: cannot rewrite: %s", path, strerror(errno)) : 0;
    if (rc) remove(tmp);
    free(tmp);
    return rc;
}

zt_csv_writer *zt_csv_open(const char *dir, long keep_upto, zt_err *err) {
    DIR *d = opendir(dir);
    if (!d) {
        zt_fail(err, "%s: cannot open the csv_monitor directory: %s", dir, strerror(errno));
        return NULL;
    }
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n <= 4 || strcmp(e->d_name + n - 4, ".csv") || strncmp(e->d_name, TAG_PREFIX, strlen(TAG_PREFIX))) continue;
        char *path = zt_xmalloc(strlen(dir) + n + 2);
        sprintf(path, "%s/%s", dir, e->d_name);
        rc = trim_file(path, keep_upto, err);
        free(path);
    }
    closedir(d);
    if (rc) return NULL;
    zt_csv_writer *w = zt_xcalloc(1, sizeof *w);
    w->dir = zt_xstrdup(dir);
    return w;
}

/* the open file of tag, opened (with its header when new) on first use; NULL on failure */
static FILE *file_of(zt_csv_writer *w, const char *tag) {
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->tags[i], tag)) return w->files[i];
    if (w->n == MAX_TAGS) return NULL;
    size_t cap = strlen(w->dir) + strlen(tag) + 8;
    char *path = zt_xmalloc(cap);
    int k = snprintf(path, cap, "%s/", w->dir);
    for (const char *p = tag; *p; p++) path[k++] = (*p == '/' || *p == ' ') ? '_' : *p;
    strcpy(path + k, ".csv");
    FILE *f = fopen(path, "a");
    free(path);
    if (!f) return NULL;
    if (ftell(f) == 0) {
        const char *last = strrchr(tag, '/');
        fprintf(f, "step,%s\r\n", last ? last + 1 : tag);
    }
    w->tags[w->n] = zt_xstrdup(tag);
    w->files[w->n++] = f;
    return f;
}

/* Python's repr of a float (what DeepSpeed's rows hold): the shortest text that reads back as the
 * same double; integral values below 1e16 as "N.0" */
static void python_float(double v, char *buf, size_t cap) {
    if (!isfinite(v)) {
        snprintf(buf, cap, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (v == floor(v) && fabs(v) < 1e16) snprintf(buf, cap, "%.1f", v); /* 2e6 -> 2000000.0 as Python */
}

int zt_csv_write(zt_csv_writer *w, long step, const zt_scalar *v, int n) {
    int first_errno = 0; /* errno of the first failure: later calls may overwrite it */
    for (int i = 0; i < n; i++) {
        FILE *f = file_of(w, v[i].tag);
        if (!f) return -1;
        char num[48];
        python_float(v[i].value, num, sizeof num);
        fprintf(f, "%ld,%s\r\n", step, num);
    }
    for (int i = 0; i < w->n; i++)
        if ((fflush(w->files[i]) || ferror(w->files[i])) && !first_errno) first_errno = errno ? errno : EIO;
    errno = first_errno;
    return first_errno ? -1 : 0;
}

void zt_csv_close(zt_csv_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) {
        fclose(w->files[i]);
        free(w->tags[i]);
    }
    free(w->dir);
    free(w);
}
