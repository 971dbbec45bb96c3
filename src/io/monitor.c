/* monitor.c — see monitor.h: opens the enabled monitors and turns a step's metrics into tagged
 * scalars for them. */
#include "io/monitor.h"
#include "io/monitor_writers.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct zt_monitor {
    zt_tb_writer *tb;
    zt_csv_writer *csv;
    char *csv_dir; /* for the error line */
    char mem_tags[ZT_MEM_NCAT][64];
};

char *zt_monitor_dir(const zt_monitor_config *mc, zt_err *err) {
    const char *base = mc->output_path ? mc->output_path : ".";
    const char *job = mc->job_name ? mc->job_name : "";
    size_t cap = strlen(base) + strlen(job) + 2;
    char *dir = zt_xmalloc(cap);
    snprintf(dir, cap, "%s%s%s", base, *job ? "/" : "", job);
    if (zt_mkdir_p(dir, err)) {
        free(dir);
        return NULL;
    }
    return dir;
}

zt_monitor *zt_monitor_open(const zt_config *cfg, long resume_samples, zt_err *err) {
    if (!cfg->tensorboard.enabled && !cfg->csv_monitor.enabled) return NULL;
    zt_monitor *m = zt_xcalloc(1, sizeof *m);
    for (int c = 0; c < ZT_MEM_NCAT; c++)
        snprintf(m->mem_tags[c], sizeof m->mem_tags[c], "Train/Samples/mem_%s_mib", zt_mem_category_names[c]);
    int rc = 0;
    if (cfg->tensorboard.enabled) {
        char *dir = zt_monitor_dir(&cfg->tensorboard, err);
        /* TensorBoard drops what it read at steps >= the START's: the steps after the checkpoint */
        m->tb = dir ? zt_tb_open(dir, resume_samples + 1, err) : NULL;
        if (m->tb) zt_info("tensorboard: writing %s", zt_tb_path(m->tb));
        rc = m->tb ? 0 : -1;
        free(dir);
    }
    if (rc == 0 && cfg->csv_monitor.enabled) {
        char *dir = zt_monitor_dir(&cfg->csv_monitor, err);
        m->csv = dir ? zt_csv_open(dir, resume_samples, err) : NULL;
        if (m->csv) zt_info("csv_monitor: writing %s/*.csv", dir);
        rc = m->csv ? 0 : -1;
        m->csv_dir = dir;
    }
    if (rc) {
        zt_monitor_close(m);
        return NULL;
    }
    return m;
}

int zt_monitor_step(zt_monitor *m, const zt_step_metrics *s, zt_err *err) {
    if (!m) return 0;
    zt_scalar v[32];
    int n = 0;
#define ADD(tag, x) do { if (!isnan(x)) v[n++] = (zt_scalar){tag, (x)}; } while (0)
    /* DeepSpeed's tags */
    ADD("Train/Samples/train_loss", s->loss);
    ADD("Train/Samples/lr", s->lr);
    ADD("Train/Samples/loss_scale", s->loss_scale);
    ADD("Train/Samples/elapsed_time_ms_forward", s->forward_ms);
    ADD("Train/Samples/elapsed_time_ms_backward", s->backward_ms);
    ADD("Train/Samples/elapsed_time_ms_step", s->optimizer_ms);
    /* ours */
    if (isfinite(s->grad_norm)) ADD("Train/Samples/grad_norm", s->grad_norm);
    ADD("Train/Samples/val_loss", s->val_loss);
    ADD("Train/Samples/step_ms", s->step_ms);
    ADD("Train/Samples/tokens_per_s", s->tokens_per_s);
    ADD("Train/Samples/comm_ms", s->comm_ms);
    if (s->mem) {
        for (int c = 0; c < ZT_MEM_NCAT; c++) ADD(m->mem_tags[c], s->mem->device[c] / 1048576.0);
        ADD("Train/Samples/params_peak_mib", s->mem->params_peak / 1048576.0);
    }
#undef ADD
    if (m->tb && zt_tb_write(m->tb, s->samples, v, n))
        return zt_fail(err, "%s: cannot write the TensorBoard event file: %s", zt_tb_path(m->tb), strerror(errno));
    if (m->csv && zt_csv_write(m->csv, s->samples, v, n))
        return zt_fail(err, "%s: cannot write the csv_monitor files: %s", m->csv_dir, strerror(errno));
    return 0;
}

void zt_monitor_close(zt_monitor *m) {
    if (!m) return;
    zt_tb_close(m->tb);
    zt_csv_close(m->csv);
    free(m->csv_dir);
    free(m);
}
