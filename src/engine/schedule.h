/* schedule.h — learning-rate schedules with DeepSpeed's names and parameters (WarmupLR,
 * WarmupDecayLR, WarmupCosineLR; deepspeed/runtime/lr_schedules.py). Step s (0-based) is the
 * s-th optimizer step, DeepSpeed's last_batch_iteration. */
#ifndef ZT_SCHEDULE_H
#define ZT_SCHEDULE_H

#include "config/config.h"

float zt_lr_at(const zt_config *cfg, long step);

#endif
