/* interval.c — `zerotrain interval --mtbf SECONDS (--save-seconds C | LOG...) [--step-seconds T]
 * [--restart-seconds R]`: the checkpoint interval that loses the least time to saves and to the
 * work a failure throws away, for a save that takes C seconds and failures every M seconds on
 * average (the mean time between failures of the whole job).
 *
 * Young (1974): tau = sqrt(2 C M), from minimising the time lost per unit of work, C/tau (saving)
 * + tau/(2M) (half an interval redone after each failure). Daly (2006) keeps the next terms of the
 * expansion: tau = sqrt(2 C M) [1 + sqrt(C/(2M))/3 + C/(18 M)] - C while C < 2M, else tau = M; it is
 * the better of the two when saves are not small next to M, and is the one advised.
 *
 * C and T can come from a run's own log (what `zerotrain train` or `run` printed): the mean of its
 * "save step N: blocked B ms, written W ms" lines' B (a log from before them: of its "checkpoint:
 * saved ... in X s" lines) and of its step lines' milliseconds; the interval is then also given in
 * steps, as checkpoint.save_interval. An asynchronous save (checkpoint.async_save) blocks training for
 * B only, so C = B; but it is complete W after it began, and a failure in between loses it too: a
 * failure costs tau/2 + (W - C) of work on average, which moves no optimum (a constant) but lowers the
 * goodput. The expected goodput at that interval (the share of wall time spent on steps that survive)
 * counts the restart's own time R too: 1 - C/tau - (tau/2 + (W - C) + R)/M, to first order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/commands.h"
#include "cmd/help.h"

/* a positive number of seconds, nothing else */
static int parse_seconds(const char *text, double *out) {
    if (!text) return -1;
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || *end || !(v > 0) || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

/* what the logs say: the saves' blocked and written seconds ("save step" lines), the older "checkpoint:
 * saved" lines' seconds, the steps' milliseconds */
typedef struct {
    double blocked_sum, written_sum, save_sum, step_ms_sum;
    long reported, saves, steps;
} log_sums;

/* Adds a log's figures to the sums; -1 when it cannot be read. */
static int read_log(const char *path, log_sums *ls) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        double b, w;
        const char *r = strstr(line, "save step ");
        if (r && sscanf(r, "save step %*d: blocked %lf ms, written %lf ms", &b, &w) == 2) {
            ls->blocked_sum += b / 1e3;
            ls->written_sum += w / 1e3;
            ls->reported++;
        }
        const char *s = strstr(line, "checkpoint: saved ");
        const char *in = s ? strstr(s, " GB in ") : NULL;
        if (in) {
            ls->save_sum += atof(in + 7);
            ls->saves++;
        }
        /* "step    12/100 ( 12%) | loss ... | 470.5 ms | ..." */
        if (!strncmp(line, "step ", 5) && strstr(line, "| loss")) {
            const char *ms = strstr(line, " ms |");
            if (!ms) continue;
            const char *bar = ms;
            while (bar > line && *bar != '|') bar--;
            ls->step_ms_sum += atof(bar + 1);
            ls->steps++;
        }
    }
    fclose(f);
    return 0;
}

int zt_cmd_interval(int argc, char **argv) {
    double mtbf = 0, save = 0, write = 0, step = 0, restart = 0;
    log_sums ls = {0};
    int n_logs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double *target = !strcmp(a, "--mtbf")              ? &mtbf
                         : !strcmp(a, "--save-seconds")    ? &save
                         : !strcmp(a, "--write-seconds")   ? &write
                         : !strcmp(a, "--step-seconds")    ? &step
                         : !strcmp(a, "--restart-seconds") ? &restart
                                                           : NULL;
        if (target) {
            if (parse_seconds(v, target)) {
                fprintf(stderr, "zerotrain: error: interval: %s: expected a positive number of seconds, got '%.40s'\n",
                        a, v ? v : "");
                return 2;
            }
            i++;
        } else if (a[0] == '-') {
            return zt_help_bad_argument("interval", a, NULL);
        } else {
            if (read_log(a, &ls)) {
                fprintf(stderr, "zerotrain: error: interval: %.200s: cannot read the log\n", a);
                return 2;
            }
            n_logs++;
        }
    }
    if (!mtbf) {
        fprintf(stderr, "zerotrain: error: interval: --mtbf SECONDS (the mean time between failures) is required\n");
        return 2;
    }
    char source[160] = "given";
    const char *logs = n_logs > 1 ? "s" : "";
    if (!save && ls.reported) { /* the save lines of today's trainer: what a save blocked, when it was complete */
        save = ls.blocked_sum / ls.reported;
        if (!write) write = ls.written_sum / ls.reported;
        snprintf(source, sizeof source, "the mean blocked time of %ld save%s in the log%s", ls.reported,
                 ls.reported > 1 ? "s" : "", logs);
    } else if (!save && ls.saves) {
        save = ls.save_sum / ls.saves;
        snprintf(source, sizeof source, "the mean of %ld save%s in the log%s", ls.saves, ls.saves > 1 ? "s" : "", logs);
    }
    if (!step && ls.steps) step = ls.step_ms_sum / ls.steps / 1000.0;
    if (!save) {
        fprintf(stderr, "zerotrain: error: interval: no save time: give --save-seconds C, or a log with "
                        "\"save step\" or \"checkpoint: saved\" lines\n");
        return 2;
    }
    double young = sqrt(2 * save * mtbf), daly = mtbf;
    if (save < 2 * mtbf) {
        double x = sqrt(save / (2 * mtbf));
        daly = young * (1 + x / 3 + x * x / 9) - save;
    }
    /* at most one asynchronous save is in flight: a save due while the last still writes waits for it,
     * so saving more often than a write takes gains nothing */
    int back_to_back = write > daly;
    if (back_to_back) daly = write;
    double lag = write > save ? write - save : 0; /* an asynchronous save's write beyond what it blocked */
    double goodput = 1 - save / daly - (daly / 2 + lag + restart) / mtbf;
    printf("save time C = %.4g s (%s), mean time between failures M = %.4g s\n", save, source, mtbf);
    if (lag > 0)
        printf("write time W = %.4g s: a save is complete %.4g s after it blocked, and a failure then loses it too\n",
               write, lag);
    printf("young interval: %.4g s\n", young);
    printf("daly interval: %.4g s (advised%s)\n", daly, back_to_back ? ": a save's write, since one waits for the last" : "");
    if (step > 0) {
        long every = lround(daly / step);
        printf("checkpoint.save_interval: %ld (a step takes %.4g s)\n", every < 1 ? 1 : every, step);
    }
    printf("expected goodput at that interval: %.1f %% (restart time R = %.4g s%s)\n", goodput > 0 ? 100 * goodput : 0,
           restart, restart ? "" : ": give --restart-seconds");
    return 0;
}
