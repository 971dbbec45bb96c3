/* loss_scale.c — see loss_scale.h */
#include "engine/loss_scale.h"

#include <math.h>

void zt_loss_scaler_init(zt_loss_scaler *s, double loss_scale, int initial_scale_power, long window, int hysteresis,
                         double min_scale) {
    s->dynamic = loss_scale <= 0;
    s->scale = s->dynamic ? ldexp(1.0, initial_scale_power) : loss_scale;
    s->min_scale = min_scale > 0 ? min_scale : 1.0;
    s->window = window > 0 ? window : 1000;
    s->hysteresis = hysteresis > 0 ? hysteresis : 1;
    s->hysteresis_left = s->hysteresis;
    s->good_steps = 0;
    s->skipped = 0;
}

void zt_loss_scaler_off(zt_loss_scaler *s) {
    zt_loss_scaler_init(s, 1.0, 0, 1000, 1, 1.0);
}

int zt_loss_scaler_update(zt_loss_scaler *s, int overflow) {
    if (!overflow) {
        s->good_steps++;
        if (s->dynamic && s->good_steps % s->window == 0) { /* a full window without overflow */
            s->scale *= 2.0;
            s->hysteresis_left = s->hysteresis; /* DeepSpeed's consecutive_hysteresis=False default keeps it */
        }
        return 0;
    }
    s->skipped++;
    if (s->dynamic) {
        if (s->hysteresis_left <= 1) {
            s->scale = fmax(s->scale / 2.0, s->min_scale);
        } else {
            s->hysteresis_left--;
        }
        s->good_steps = 0;
    }
    return 1; /* an overflowing step is skipped, also with a static scale */
}
