/* config_sizes.h — the checks of a config that need the model's sizes: what a rank's activations
 * take against the memory it computes in, stage 3's least working set against
 * stage3_max_live_parameters, and the largest parameter piece against offload_param.buffer_size.
 * `zerotrain config` and `train` both run them before anything is allocated, so both refuse the same
 * configs with the same line, at the key's FILE:LINE:COL (the engine keeps its own checks as a
 * last guard). */
#ifndef ZT_CONFIG_SIZES_H
#define ZT_CONFIG_SIZES_H

#include "backend/backend.h"
#include "config/config.h"

/* For `world` ranks on backend be (after zt_config_check_batch). Returns 0, or -1 with err set. */
int zt_config_check_sizes(const zt_config *cfg, int world, const zt_backend *be, zt_err *err);

#endif
