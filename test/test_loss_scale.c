/* test_loss_scale.c — the fp16 loss scaler against DeepSpeed's DynamicLossScaler rules, with
 * overflows injected by hand: halving after `hysteresis` overflows, the floor at min_loss_scale,
 * doubling after `loss_scale_window` clean steps, every overflowing step skipped, and a static
 * scale that never moves. */
#include "engine/loss_scale.h"
#include "check.h"

int main(void) {
    zt_loss_scaler s;
    zt_loss_scaler_init(&s, 0, 16, 4, 2, 1.0);
    CHECK(s.dynamic && s.scale == 65536.0, "initial_scale_power", "scale %g", s.scale);
    int skip = zt_loss_scaler_update(&s, 1);
    CHECK(skip && s.scale == 65536.0 && s.hysteresis_left == 1, "hysteresis_absorbs_first_overflow", "scale %g", s.scale);
    skip = zt_loss_scaler_update(&s, 1);
    CHECK(skip && s.scale == 32768.0, "second_overflow_halves", "scale %g", s.scale);
    for (int i = 0; i < 3; i++) zt_loss_scaler_update(&s, 0);
    CHECK(s.scale == 32768.0, "no_raise_before_window", "scale %g", s.scale);
    skip = zt_loss_scaler_update(&s, 0);
    CHECK(!skip && s.scale == 65536.0 && s.hysteresis_left == 2, "raise_after_window_resets_hysteresis", "scale %g", s.scale);
    zt_loss_scaler_update(&s, 0);
    zt_loss_scaler_update(&s, 1); /* overflow mid-window restarts the window */
    for (int i = 0; i < 3; i++) zt_loss_scaler_update(&s, 0);
    CHECK(s.scale == 65536.0, "overflow_restarts_window", "scale %g", s.scale);
    zt_loss_scaler_update(&s, 0);
    CHECK(s.scale == 131072.0, "raise_window_after_overflow", "scale %g", s.scale);
    CHECK(s.skipped == 3, "skipped_count", "%ld", s.skipped);

    zt_loss_scaler_init(&s, 0, 2, 1000, 1, 1.0);
    for (int i = 0; i < 10; i++) zt_loss_scaler_update(&s, 1);
    CHECK(s.scale == 1.0, "min_loss_scale_floor", "scale %g", s.scale);

    zt_loss_scaler_init(&s, 128.0, 16, 2, 2, 1.0);
    skip = zt_loss_scaler_update(&s, 1);
    for (int i = 0; i < 10; i++) zt_loss_scaler_update(&s, 0);
    CHECK(!s.dynamic && skip && s.scale == 128.0, "static_scale", "scale %g", s.scale);

    zt_loss_scaler_off(&s);
    CHECK(s.scale == 1.0 && !zt_loss_scaler_update(&s, 0), "off_is_one", "scale %g", s.scale);
    return zt_check_exit();
}
