/* trace.h — a Chrome trace (JSON Trace Event Format; opens in Perfetto and chrome://tracing) of one
 * rank's run: complete events ("ph":"X") for the phases of each step on per-role lanes, and
 * counter events ("ph":"C") for device and host memory. Each event reaches the file whole as it
 * happens, so a killed run leaves a trace that still opens; timestamps are Unix-epoch microseconds,
 * so the files of all ranks (and machines) line up when merged. Thread-safe; every call on a NULL
 * trace does nothing, so callers need no "if tracing" tests. */
#ifndef ZT_TRACE_H
#define ZT_TRACE_H

#include "util/util.h"

/* lanes ("tid") of a rank's process ("pid" = rank): the engine's threads (main, host Adam, the
 * Twin-Flow copy threads, comm), one "step N" event per finished optimizer step (its args: the bytes
 * each direction moved, the device peak), the device's compute stream busy, and the copies as the
 * device ran them, one lane per stream (ZT_LANE_STREAM + backend.h's ZT_STREAM_*), and each host Adam
 * thread's busy intervals. */
enum {
    ZT_LANE_MAIN = 1, ZT_LANE_HOST_ADAM = 2, ZT_LANE_D2H = 3, ZT_LANE_COMM = 4, ZT_LANE_H2D = 5,
    ZT_LANE_STEP = 6, ZT_LANE_DEVICE = 7, ZT_LANE_STREAM = 8, /* 8..11: compute, H2D, D2H, ahead streams */
    ZT_LANE_ADAM_THREAD = 12, ZT_ADAM_THREAD_LANES = 16, /* 12..27: host Adam threads 0..15 (more share the last) */
    ZT_LANE_LAST = ZT_LANE_ADAM_THREAD + ZT_ADAM_THREAD_LANES - 1,
    ZT_LANE_NVME = ZT_LANE_LAST + 1 + 8 /* after zt_trace_device's 8 lanes: the NVMe swap's requests */
};
/* Busy intervals on one lane closer than this are written as one (the trace's resolution for busy
 * time; it bounds the events a step of many short ops writes). */
#define ZT_TRACE_BUSY_MERGE_S 50e-6

typedef struct zt_trace zt_trace;

/* Opens PATH with the rank inserted before a ".json" suffix (run.json -> run.rank0.json; other
 * names get ".rank0.json" appended), creating its directory with parents, and writes the lane names. */
zt_trace *zt_trace_open(const char *path, int rank, zt_err *err);
/* One phase [t0, t1] on a lane, times from zt_now() (seconds). */
void zt_trace_complete(zt_trace *t, int lane, const char *name, double t0, double t1);
/* One item [t0, t1] on a device lane of its own (tid ZT_LANE_LAST + 1 + dev_lane, dev_lane in [0, 8)),
 * named lane_name the first time it appears: a timed device's lanes (util/clock.h, zt_clock_event). */
void zt_trace_device(zt_trace *t, int dev_lane, const char *lane_name, const char *name, double t0, double t1);
/* The same with args: a JSON object's members ("\"bytes\":4096"), written as they are. */
void zt_trace_complete_args(zt_trace *t, int lane, const char *name, double t0, double t1, const char *args);
/* A host<->device copy as the device ran it: "H2D" or "D2H" (kind 0 = H2D, 1 = D2H, as zt_copy_kind)
 * with its bytes on lane ZT_LANE_STREAM + stream. */
void zt_trace_transfer(zt_trace *t, int kind, size_t bytes, int stream, double t0, double t1);
/* An NVMe swap request (io/swap.h) from its issue to its completion: "nvme read" or "nvme write"
 * with its bytes on lane ZT_LANE_NVME (named the first time). */
void zt_trace_nvme(zt_trace *t, int write, size_t bytes, double t0, double t1);
/* Lane was busy over [t0, t1]: joined with the lane's previous interval when the gap is below
 * ZT_TRACE_BUSY_MERGE_S, written as "busy" once the next one starts later (or at zt_trace_flush). */
void zt_trace_busy(zt_trace *t, int lane, double t0, double t1);
/* Writes the busy intervals still held (at the end of each step, so a killed run keeps its last). */
void zt_trace_flush(zt_trace *t);
/* A counter sample of n series (n <= 8): keys[i] = vals[i] at time ts. */
void zt_trace_counters(zt_trace *t, const char *name, double ts, int n, const char *const *keys, const double *vals);
/* A counter sample: series name with two values (e.g. "device MiB" / "host MiB") at time ts. */
void zt_trace_counter(zt_trace *t, const char *name, double ts, const char *k1, double v1, const char *k2, double v2);
/* -1 with "PATH: cannot write the trace: REASON" in err once a write has failed (a full disk): the
 * trace writes nothing more, and the training loop stops the run (the one policy for a full disk,
 * docs/faults.md); 0 otherwise and on a NULL trace. */
int zt_trace_check(zt_trace *t, zt_err *err);
/* Ends the JSON array and closes the file; returns -1 (with err) if any write failed. */
int zt_trace_close(zt_trace *t, zt_err *err);

#endif
