/* launcher_notes.c — mpirun's and srun's notices of a clean stop held back (see launcher_notes.h). */
#include "cmd/launcher_notes.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void put(int fd, const char *s, size_t n) {
    while (n) { /* on, even when the process's own output is gone */
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

static int is_border(const char *s) { /* Open MPI's box border: a line of dashes */
    size_t n = strspn(s, "-");
    return n >= 20 && s[n] == '\0';
}

static int starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* the first line of a box mpirun prints when a rank exits non-zero */
static int is_exit_box(const char *s) {
    return starts(s, "Primary job  terminated normally, but") || starts(s, "Primary job terminated normally, but") ||
           starts(s, "mpirun detected that one or more processes exited with non-zero status");
}

static int is_srun_exit(const char *s) { return starts(s, "srun: error: ") && strstr(s, "Exited with exit code 99"); }

static void one_line(zt_launcher_notes *f, const char *s) {
    if (f->in_box) {
        zt_sb_printf(&f->held, "%s\n", s);
        if (is_border(s)) f->in_box = 0;
        return;
    }
    if (f->dashes) {
        char *top = f->dashes;
        f->dashes = NULL;
        if (is_exit_box(s)) {
            zt_sb_printf(&f->held, "%s\n%s\n", top, s);
            f->in_box = 1;
            free(top);
            return;
        }
        put(f->out_fd, top, strlen(top));
        put(f->out_fd, "\n", 1);
        free(top);
    }
    if (is_border(s)) f->dashes = zt_xstrdup(s);
    else if (is_srun_exit(s)) zt_sb_printf(&f->held, "%s\n", s);
    else {
        put(f->out_fd, s, strlen(s));
        put(f->out_fd, "\n", 1);
    }
}

void zt_launcher_notes_feed(zt_launcher_notes *f, const char *data, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (data[i] != '\n' && f->len < sizeof f->line - 1) {
            f->line[f->len++] = data[i];
            continue;
        }
        f->line[f->len] = '\0';
        if (data[i] == '\n') one_line(f, f->line);
        else { /* a line longer than the buffer is no notice: its start goes on, and the rest */
            put(f->out_fd, f->line, f->len);
            f->line[0] = data[i];
            f->len = 1;
            continue;
        }
        f->len = 0;
    }
}

void zt_launcher_notes_end(zt_launcher_notes *f, int clean_stop) {
    if (f->dashes) {
        put(f->out_fd, f->dashes, strlen(f->dashes));
        put(f->out_fd, "\n", 1);
    }
    if (f->len) put(f->out_fd, f->line, f->len);
    if (!clean_stop && f->held.p) put(f->out_fd, f->held.p, strlen(f->held.p));
    free(f->dashes);
    free(f->held.p);
    f->dashes = NULL;
    f->held = (zt_sb){0};
    f->len = 0;
    f->in_box = 0;
}
