/* trace.h — a Chrome trace (JSON Trace Event Format; opens in Perfetto and chrome://tracing) of one
 * rank's run: complete events ("ph":"X") for the phases of each step on per-role lanes, and
 * counter events ("ph":"C") for device and host memory. Each event reaches the file whole as it
 * happens, so a killed run leaves a trace that still opens; timestamps are Unix-epoch microseconds,
 * so the files of all ranks (and machines) line up when merged. Thread-safe; every call on a NULL
 * trace does nothing, so callers need no "if tracing" tests. */
#ifndef ZT_TRACE_H
#define ZT_TRACE_H

#include "util/util.h"

/* lanes ("tid") of a rank's process ("pid" = rank) */
enum { ZT_LANE_MAIN = 1, ZT_LANE_HOST_ADAM = 2, ZT_LANE_D2H = 3, ZT_LANE_COMM = 4, ZT_LANE_H2D = 5, ZT_LANE_LAST = 5 };

typedef struct zt_trace zt_trace;

/* Opens PATH with the rank inserted before a ".json" suffix (run.json -> run.rank0.json; other
 * names get ".rank0.json" appended), creating its directory with parents, and writes the lane names. */
zt_trace *zt_trace_open(const char *path, int rank, zt_err *err);
/* One phase [t0, t1] on a lane, times from zt_now() (seconds). */
void zt_trace_complete(zt_trace *t, int lane, const char *name, double t0, double t1);
/* One item [t0, t1] on a device lane of its own (tid ZT_LANE_LAST + 1 + dev_lane, dev_lane in [0, 8)),
 * named lane_name the first time it appears: a timed device's lanes (util/clock.h, zt_clock_event). */
void zt_trace_device(zt_trace *t, int dev_lane, const char *lane_name, const char *name, double t0, double t1);
/* A counter sample: series name with two values (e.g. "device MiB" / "host MiB") at time ts. */
void zt_trace_counter(zt_trace *t, const char *name, double ts, const char *k1, double v1, const char *k2, double v2);
/* -1 with "PATH: cannot write the trace: REASON" in err once a write has failed (a full disk): the
 * trace writes nothing more, and the training loop stops the run (the one policy for a full disk,
 * README "Faults"); 0 otherwise and on a NULL trace. */
int zt_trace_check(zt_trace *t, zt_err *err);
/* Ends the JSON array and closes the file; returns -1 (with err) if any write failed. */
int zt_trace_close(zt_trace *t, zt_err *err);

#endif
