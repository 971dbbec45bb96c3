/* mem_report.c — see mem_report.h */
#include "engine/mem_report.h"
#include "engine/engine_internal.h"

#include <stdio.h>
#include <unistd.h>

static double mib(double bytes) { return bytes / 1048576.0; }

/* resident set size of this process in bytes, 0 where /proc is not there */
static double rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    long pages_total = 0, pages_resident = 0;
    int got = fscanf(f, "%ld %ld", &pages_total, &pages_resident);
    fclose(f);
    return got == 2 ? (double)pages_resident * (double)sysconf(_SC_PAGESIZE) : 0;
}

void zt_mem_report_step(const zt_engine *e, long step, size_t act_bytes) {
    char line[768];
    double dev_total = 0, host_total = 0;
    int n = snprintf(line, sizeof line, "memory step %ld: %s", step, e->be->name);
    for (int c = 0; c < ZT_MEM_NCAT; c++) {
        double b = c == ZT_MEM_ACTS ? (double)act_bytes : (double)e->mem.device[c];
        dev_total += b;
        n += snprintf(line + n, sizeof line - (size_t)n, " %s %.1f", zt_mem_category_names[c], mib(b));
    }
    n += snprintf(line + n, sizeof line - (size_t)n, " = %.1f MiB; stage-3 params peak %.1f MiB; host", mib(dev_total),
                  mib((double)e->mem.params_peak));
    for (int c = 0; c < ZT_MEM_NCAT; c++) {
        host_total += (double)e->mem.host[c];
        n += snprintf(line + n, sizeof line - (size_t)n, " %s %.1f", zt_mem_category_names[c],
                      mib((double)e->mem.host[c]));
    }
    n += snprintf(line + n, sizeof line - (size_t)n, " = %.1f MiB; process RSS %.1f MiB", mib(host_total),
                  mib(rss_bytes()));
    double nvme_total = 0;
    for (int c = 0; c < ZT_MEM_NCAT; c++) nvme_total += (double)e->mem.nvme[c];
    if (nvme_total > 0) n += snprintf(line + n, sizeof line - (size_t)n, "; nvme %.1f MiB", mib(nvme_total));
    if (!e->be->memory_is_host) { /* what the device itself counts: every buffer, the model's scratch included */
        size_t free_b = 0, total_b = 0;
        e->be->mem_info(&free_b, &total_b);
        snprintf(line + n, sizeof line - (size_t)n, "; device in use %.2f of %.1f MiB", mib((double)(total_b - free_b)),
                 mib((double)total_b));
    }
    zt_info("%s", line);
}
