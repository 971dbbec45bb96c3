/* twin_ratio.h — Twin-Flow's sizing (twin_ratio.c): `ratio: auto`, the speculation window, and what
 * the host part allocates. Read from the facts alone (engine_facts.h), below twin_flow.c, which
 * calls it when it opens the host part. */
#ifndef ZT_TWIN_RATIO_H
#define ZT_TWIN_RATIO_H

#include <stddef.h>

#include "engine/engine_facts.h"
#include "util/util.h"

/* whether the host part has a buffer for its updated compute-dtype parameters (twin_alloc) */
int twin_has_out_buffer(const engine_facts *f);

/* the speculation window in host-part elements: offload_optimizer.speculation_window /
 * 12 B, or with 0 (auto) what host memory still holds for this rank beside everything else (as ratio
 * auto counts it), at most n */
size_t twin_speculation_elems(const engine_facts *e, size_t n);

/* ratio auto (collective): *ratio in [0, 1] and which bound decided it; -1 with err set,
 * on every rank, when no ratio fits both the device and the host memory */
enum { TWIN_BOUND_SPEED, TWIN_BOUND_DEVICE, TWIN_BOUND_HOST };
int twin_choose_ratio(const engine_facts *e, double *ratio, int *bound, zt_err *err);

#endif
