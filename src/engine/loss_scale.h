/* loss_scale.h — fp16 loss scaling, DeepSpeed's semantics (deepspeed/runtime/fp16/loss_scaler.py):
 * a static scale (`fp16.loss_scale` > 0) or a dynamic one that starts at 2^initial_scale_power,
 * halves on an overflowing step once `hysteresis` overflows have been absorbed, never below
 * `min_loss_scale`, and doubles after `loss_scale_window` steps without overflow. Backend-neutral:
 * it sees only "this step's gradients overflowed" and hands back the scale to use. */
#ifndef ZT_LOSS_SCALE_H
#define ZT_LOSS_SCALE_H

typedef struct zt_loss_scaler {
    int dynamic;
    double scale, min_scale;
    long window;            /* steps without overflow before the scale doubles */
    int hysteresis;         /* overflows absorbed before the scale is cut (DeepSpeed's delayed_shift) */
    int hysteresis_left;
    long good_steps;        /* steps since the last overflow (or the last raise) */
    long skipped;           /* overflowing steps skipped so far */
} zt_loss_scaler;

/* loss_scale > 0: static; 0: dynamic from 2^initial_scale_power. */
void zt_loss_scaler_init(zt_loss_scaler *s, double loss_scale, int initial_scale_power, long window, int hysteresis,
                         double min_scale);
/* A scaler that always returns 1 and never skips (bf16 / fp32 training). */
void zt_loss_scaler_off(zt_loss_scaler *s);
/* Records whether this step's gradients overflowed (non-finite gradient norm); returns 1 when the
 * optimizer step must be skipped. Updates the scale for the next step. */
int zt_loss_scaler_update(zt_loss_scaler *s, int overflow);

#endif
