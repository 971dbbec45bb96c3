/* mem_report.h — the per-step memory line of `memory_breakdown: true` (DeepSpeed's option of that
 * name prints memory after each step): the engine's accounting per category on the device and in
 * host memory, the stage-3 parameter peak, and the process's resident set from /proc. */
#ifndef ZT_MEM_REPORT_H
#define ZT_MEM_REPORT_H

#include "engine/engine.h"

/* Logs (rank 0) one line for `step`; act_bytes = the model's activation memory. */
void zt_mem_report_step(const zt_engine *e, long step, size_t act_bytes);

#endif
