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
 * "checkpoint: saved ... in X s" lines and of its step lines' milliseconds; the interval is then
 * also given in steps, as checkpoint.save_interval. The expected goodput at that interval (the share
 * of wall time spent on steps that survive) counts the restart's own time R too:
 * 1 - C/tau - (tau/2 + R)/M, to first order. */
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

/* Adds a log's save seconds and step milliseconds to the sums; -1 when it cannot be read. */
static int read_log(const char *path, double *save_sum, long *saves, double *step_ms_sum, long *steps) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        const char *s = strstr(line, "checkpoint: saved ");
        const char *in = s ? strstr(s, " GB in ") : NULL;
        if (in) {
            *save_sum += atof(in + 7);
            (*saves)++;
        }
        /* "step    12/100 ( 12%) | loss ... | 470.5 ms | ..." */
        if (!strncmp(line, "step ", 5) && strstr(line, "| loss")) {
            const char *ms = strstr(line, " ms |");
            if (!ms) continue;
            const char *bar = ms;
            while (bar > line && *bar != '|') bar--;
            *step_ms_sum += atof(bar + 1);
            (*steps)++;
        }
    }
    fclose(f);
    return 0;
}

int zt_cmd_interval(int argc, char **argv) {
    double mtbf = 0, save = 0, step = 0, restart = 0, save_sum = 0, step_ms_sum = 0;
    long saves = 0, steps = 0;
    int n_logs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double *target = !strcmp(a, "--mtbf")              ? &mtbf
                         : !strcmp(a, "--save-seconds")    ? &save
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
            if (read_log(a, &save_sum, &saves, &step_ms_sum, &steps)) {
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
    char source[128] = "given";
    if (!save && saves) {
        save = save_sum / saves;
        snprintf(source, sizeof source, "the mean of %ld save%s in the log%s", saves, saves > 1 ? "s" : "",
                 n_logs > 1 ? "s" : "");
    }
    if (!step && steps) step = step_ms_sum / steps / 1000.0;
    if (!save) {
        fprintf(stderr, "zerotrain: error: interval: no save time: give --save-seconds C, or a log with "
                        "\"checkpoint: saved\" lines\n");
        return 2;
    }
    double young = sqrt(2 * save * mtbf), daly = mtbf;
    if (save < 2 * mtbf) {
        double x = sqrt(save / (2 * mtbf));
        daly = young * (1 + x / 3 + x * x / 9) - save;
    }
    double goodput = 1 - save / daly - (daly / 2 + restart) / mtbf;
    printf("save time C = %.4g s (%s), mean time between failures M = %.4g s\n", save, source, mtbf);
    printf("young interval: %.4g s\n", young);
    printf("daly interval: %.4g s (advised)\n", daly);
    if (step > 0) {
        long every = lround(daly / step);
        printf("checkpoint.save_interval: %ld (a step takes %.4g s)\n", every < 1 ? 1 : every, step);
    }
    printf("expected goodput at that interval: %.1f %% (restart time R = %.4g s%s)\n", goodput > 0 ? 100 * goodput : 0,
           restart, restart ? "" : ": give --restart-seconds");
    return 0;
}
