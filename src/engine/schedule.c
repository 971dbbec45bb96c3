/* schedule.c — see schedule.h. Formulas follow DeepSpeed's lr_schedules.py. */
#include "engine/schedule.h"

#include <math.h>

/* warmup progress in [0,1]: log: ln(s+1)/ln(W); linear: s/W (DeepSpeed clamps W to at least 2) */
static double warmup_gamma(const zt_config *c, long step) {
    double W = c->warmup_num_steps < 2 ? 2.0 : (double)c->warmup_num_steps;
    if (c->warmup_type_log) return log((double)step + 1.0) / log(W);
    return (double)step / W;
}

float zt_lr_at(const zt_config *c, long step) {
    double base = c->lr;
    long total = c->total_num_steps > 0 ? c->total_num_steps : c->train_iters;
    long W = c->warmup_num_steps < 2 ? 2 : c->warmup_num_steps;
    switch (c->scheduler) {
    case ZT_SCHED_WARMUP_LR:
    case ZT_SCHED_WARMUP_DECAY_LR: {
        double lo = c->warmup_min_lr, hi = c->warmup_max_lr >= 0 ? c->warmup_max_lr : base;
        double gamma;
        if (step < W)
            gamma = warmup_gamma(c, step);
        else if (c->scheduler == ZT_SCHED_WARMUP_LR)
            gamma = 1.0;
        else /* linear decay to 0 at total_num_steps */
            gamma = fmax(0.0, (double)(total - step) / fmax(1.0, (double)(total - W)));
        return (float)(lo + (hi - lo) * gamma);
    }
    case ZT_SCHED_WARMUP_COSINE_LR: {
        double ratio;
        if (step < W) {
            ratio = c->warmup_min_ratio + warmup_gamma(c, step) * (1.0 - c->warmup_min_ratio);
        } else {
            double done = (double)(step - W + 1), span = fmax(1.0, (double)(total - W));
            double cosine = (1.0 + cos(M_PI * fmin(1.0, done / span))) / 2.0;
            ratio = fmax(0.0, c->cos_min_ratio + (1.0 - c->cos_min_ratio) * cosine);
        }
        return (float)(base * ratio);
    }
    default:
        return (float)base;
    }
}
