"""trace_figures.py — `scripts/plot --trace`: the characterization figures of an offloaded step (after
the offload study, arXiv 2406.10728) from a zerotrain Chrome trace (config key `trace`), for one
iteration (default: the last complete one):

  PREFIX.memory.png  device memory in use over the step, phases shaded, capacity, peak and the
                     headroom during the update; host memory (pinned, optimizer, activations) beside it
  PREFIX.pcie.png    H2D and D2H GB/s over the step (binned; the bin width is in the title) against
                     the link's peak (the fastest copy of the run, or --link-peak)
  PREFIX.busy.png    device compute busy and CPU-Adam busy over the step (fraction of each bin)
  PREFIX.phases.png  stacked phase bars per iteration; the update's sub-phases with their GB/s
  PREFIX.sweep.png   with several LABEL=TRACE inputs: step time, device idle waiting for the host
                     and mean H2D/D2H GB/s over the update against the label (a Twin-Flow ratio...)

and prints a summary of the same numbers, one line per figure, as key=value pairs (for logs and
tests). All numbers come from the trace's own events: the copies as the device ran them (lanes
"copies: ... stream", each with its bytes), the allocator's "device memory (bytes)" counter, the
"busy" intervals, the main lane's phases and the "step" events that end each finished step. A
trace whose run was killed ends after a whole event and is read as it is; its unfinished step has
no "step" event and is never chosen.

The file is Python's, imported by scripts/plot (it only draws and reads; the trace's format is
src/io/trace.h's)."""
import glob
import json
import math
import os
import re
import sys

# lanes (src/io/trace.h)
LANE_MAIN, LANE_HOST_ADAM, LANE_D2H, LANE_COMM, LANE_H2D, LANE_STEP, LANE_DEVICE = 1, 2, 3, 4, 5, 6, 7
STREAM_LANES = (8, 9, 10, 11)
ADAM_THREAD_LANES = range(12, 28)  # host Adam threads 0..15, each its busy intervals
LANE_NVME = 36  # the NVMe swap's requests, issue to completion, each with its bytes
# the "nvml" counter's series (src/io/trace_nvml.c)
NVML_RX, NVML_TX, NVML_USED = "pcie rx (H2D) bytes/s", "pcie tx (D2H) bytes/s", "memory used bytes"
NVML_KEYS = (NVML_RX, NVML_TX, NVML_USED, "gpu util %", "memory util %")
PHASES = ("forward", "backward", "reduction", "update", "other")
PHASE_COLORS = {"forward": "#4c72b0", "backward": "#dd8452", "reduction": "#937860", "update": "#55a868",
                "other": "#bbbbbb"}
REDUCTION_WAITS = ("reduce-scatter wait", "all-reduce wait")
# the update's sub-phases: trace event names (prefixes) on the engine's lanes; the GB/s of one whose
# events carry their own bytes (casts, NVMe requests) are those bytes, of the others the copies that
# ran during them
SUBPHASES = (
    ("unscale/clip (grad norm)", (LANE_MAIN,), ("grad norm",)),
    ("device adam", (LANE_MAIN,), ("device adam",)),
    ("host adam", (LANE_HOST_ADAM,), ("host adam",)),
    ("copies down (D2H grads)", (LANE_D2H,), ("D2H",)),
    ("copies back (H2D params)", (LANE_H2D,), ("H2D",)),
    ("gathers", (LANE_COMM,), ("all-gather",)),
    ("casts (fused in host adam)", (LANE_HOST_ADAM,), ("casts",)),
    ("nvme reads (in flight)", (LANE_NVME,), ("nvme read",)),
    ("nvme writes (in flight)", (LANE_NVME,), ("nvme write",)),
    ("nvme read waits", (LANE_HOST_ADAM, LANE_MAIN), ("nvme read wait", "param NVMe read wait")),
    ("nvme write waits", (LANE_HOST_ADAM,), ("nvme write wait",)),
    ("device idle (host part)", (LANE_MAIN,), ("device idle", "wait for the host part")),
)


class TraceError(Exception):
    pass


# ------------------------------------------------------------------ reading

def trace_files(path):
    """The per-rank files of a trace: PATH itself, or PATH's ".rankN.json" files when PATH is the
    name given in the config (run.json -> run.rank0.json ...), by rank."""
    if os.path.exists(path) and re.search(r"\.rank\d+\.json$", path):
        return [path]
    stem = path[:-5] if path.endswith(".json") else path
    found = glob.glob(glob.escape(stem) + ".rank*.json")
    if not found and os.path.exists(path):
        return [path]
    if not found:
        raise TraceError(f"{path}: no trace file (nor {stem}.rankN.json)")
    return sorted(found, key=lambda f: int(re.search(r"\.rank(\d+)\.json$", f).group(1)))


def load_events(path):
    """The events of one file. A run still writing or killed leaves no closing ']' (each event
    reached the file whole), so one is added when missing."""
    try:
        with open(path) as f:
            text = f.read().rstrip()
    except OSError as e:
        raise TraceError(f"{path}: {e.strerror}")
    for candidate in (text, text + "\n]", text.rstrip(",") + "\n]"):
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    raise TraceError(f"{path}: not a Chrome trace (JSON array of events)")


class Rank:
    """One rank's trace, times in seconds from the trace's first event."""

    def __init__(self, path):
        self.path = path
        ev = load_events(path)
        ts = [e["ts"] for e in ev if "ts" in e]
        if not ts:
            raise TraceError(f"{path}: no timed events")
        self.origin = min(ts)
        self.rank = next((e["pid"] for e in ev if "pid" in e), 0)
        self.merge_s = 0.0
        self.spans = {}       # lane -> [(t0, t1, name, args)]
        self.counters = {}    # name -> [(t, {key: value})]
        for e in ev:
            ph = e.get("ph")
            if ph == "M" and e.get("name") == "zerotrain":
                self.merge_s = e.get("args", {}).get("busy_merge_us", 0) * 1e-6
            elif ph == "X":
                t0 = (e["ts"] - self.origin) * 1e-6
                self.spans.setdefault(e.get("tid"), []).append((t0, t0 + e.get("dur", 0) * 1e-6, e["name"],
                                                                e.get("args", {})))
            elif ph == "C":
                self.counters.setdefault(e["name"], []).append(((e["ts"] - self.origin) * 1e-6, e.get("args", {})))
        for v in self.spans.values():
            v.sort(key=lambda s: s[0])
        for v in self.counters.values():
            v.sort(key=lambda s: s[0])
        self.steps = [s for s in self.spans.get(LANE_STEP, []) if s[2] == "step"]
        self.transfers = [s for lane in STREAM_LANES for s in self.spans.get(lane, []) if s[2] in ("H2D", "D2H")]
        self.nvme = [s for s in self.spans.get(LANE_NVME, []) if s[2] in ("nvme read", "nvme write")]
        self.has_device = "device memory (bytes)" in self.counters

    def step(self, number=None):
        """(step, t0, t1, args) of the chosen finished step: `number`, or the last."""
        if not self.steps:
            raise TraceError(f"{self.path}: no finished step in the trace (a 'step' event ends each one)")
        if number is None:
            s = self.steps[-1]
        else:
            match = [s for s in self.steps if s[3].get("step") == number]
            if not match:
                raise TraceError(f"{self.path}: step {number} did not finish in this trace")
            s = match[-1]
        return s[3].get("step"), s[0], s[1], s[3]

    def named(self, lanes, prefixes, t0, t1):
        """Spans on `lanes` whose name starts with one of prefixes, clipped to [t0, t1]."""
        out = []
        for lane in lanes:
            for a, b, name, _ in self.spans.get(lane, []):
                if any(name.startswith(p) for p in prefixes) and b > t0 and a < t1:
                    out.append((max(a, t0), min(b, t1)))
        return out


# ------------------------------------------------------------------ measures

def union_seconds(intervals):
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def step_transfers(rk, t0, t1, spans=None):
    """The copies (or NVMe requests) the engine counted in the step: those that finished inside it
    (the engine and the swap add a request's bytes when it ends)."""
    return [s for s in (rk.transfers if spans is None else spans) if t0 <= s[1] <= t1]


def binned_rate(spans, lo, hi, width):
    """bytes of each span spread evenly over its duration, summed per bin of `width` s from lo;
    returns (bin starts, GB/s per bin, total bytes put in bins)."""
    n = max(1, int(math.ceil((hi - lo) / width)))
    acc = [0.0] * n
    for a, b, _, args in spans:
        nbytes = float(args.get("bytes", 0))
        if b <= a:
            acc[min(n - 1, max(0, int((a - lo) / width)))] += nbytes
            continue
        i = max(0, int((a - lo) / width))
        while i < n and lo + i * width < b:
            x0, x1 = lo + i * width, lo + (i + 1) * width
            ov = min(b, x1) - max(a, x0)
            if ov > 0:
                acc[i] += nbytes * ov / (b - a)
            i += 1
    return [lo + i * width for i in range(n)], [v / width / 1e9 for v in acc], sum(acc)


def busy_fraction(intervals, lo, hi, width):
    n = max(1, int(math.ceil((hi - lo) / width)))
    acc = [0.0] * n
    for a, b in intervals:
        i = max(0, int((a - lo) / width))
        while i < n and lo + i * width < b:
            ov = min(b, lo + (i + 1) * width) - max(a, lo + i * width)
            if ov > 0:
                acc[i] += ov
            i += 1
    return [lo + i * width for i in range(n)], [min(1.0, v / width) for v in acc]


def counter_path(samples, key, t0, t1):
    """(times, values) of a counter key over [t0, t1]: the value in effect at t0, then every change."""
    before = [(t, a[key]) for t, a in samples if t <= t0 and key in a]
    pts = [(t0, before[-1][1])] if before else []
    pts += [(t, a[key]) for t, a in samples if t0 < t <= t1 and key in a]
    if pts:
        pts.append((t1, pts[-1][1]))
    return [p[0] for p in pts], [p[1] for p in pts]


def link_peak(rk):
    """The fastest copy of the run (GB/s): copies of at least 64 KiB lasting at least 20 µs."""
    rates = [float(a.get("bytes", 0)) / (b - t) / 1e9 for t, b, _, a in rk.transfers
             if b - t >= 20e-6 and float(a.get("bytes", 0)) >= 65536]
    return max(rates) if rates else 0.0


def phase_bars(rk, t0, t1):
    """Seconds of each phase in [t0, t1]: forward, backward and update from the main lane, reduction
    = reduction waits outside them, other = the rest (loading, the loss all-reduce, syncs)."""
    out = {}
    main = [(max(a, t0), min(b, t1), n) for a, b, n, _ in rk.spans.get(LANE_MAIN, []) if b > t0 and a < t1]
    for p in ("forward", "backward", "update"):
        out[p] = sum(b - a for a, b, n in main if n == p)
    named = [(a, b) for a, b, n in main if n in ("forward", "backward", "update")]
    waits = rk.named((LANE_COMM,), REDUCTION_WAITS, t0, t1)
    out["reduction"] = union_seconds(waits + named) - union_seconds(named)
    out["other"] = (t1 - t0) - sum(out[p] for p in ("forward", "backward", "update", "reduction"))
    return out


def update_window(rk, t0, t1):
    ups = [(a, b) for a, b, n, _ in rk.spans.get(LANE_MAIN, []) if n == "update" and b > t0 and a < t1]
    return (ups[-1][0], ups[-1][1]) if ups else (None, None)


def subphases(rk, u0, u1):
    """[(name, seconds, GB/s of the copies that ran during it or None)] within the update."""
    out = []
    for name, lanes, prefixes in SUBPHASES:
        iv = rk.named(lanes, prefixes, u0, u1)
        if not iv:
            continue
        secs = union_seconds(iv)
        own = [sp for lane in lanes for sp in rk.spans.get(lane, []) if "bytes" in sp[3] and sp[1] > u0 and sp[0] < u1
               and any(sp[2].startswith(p) for p in prefixes)]
        if own:  # its events' own bytes, the share of each inside the update
            moved = sum(float(a["bytes"]) * ((min(e, u1) - max(s, u0)) / (e - s) if e > s else 1.0)
                        for s, e, _, a in own)
        else:
            moved = sum(float(a.get("bytes", 0)) for s, e, _, a in rk.transfers
                        if any(x <= (s + e) / 2 <= y for x, y in iv))
        out.append((name, secs, moved / secs / 1e9 if secs > 0 and moved else None))
    return out


def device_idle_waiting(rk, t0, t1):
    return union_seconds(rk.named((LANE_MAIN,), ("device idle", "wait for the host part"), t0, t1))


def analyze(rk, number=None, bin_s=None):
    """Every number the figures show, for one step of one rank."""
    step, t0, t1, args = rk.step(number)
    r = {"rank": rk.rank, "step": step, "t0": t0, "t1": t1, "step_s": t1 - t0, "steps": len(rk.steps),
         "args": args, "merge_s": rk.merge_s}
    r["bin_s"] = bin_s or max((t1 - t0) / 100.0, 1e-5)
    xs = step_transfers(rk, t0, t1)
    r["h2d"] = [s for s in xs if s[2] == "H2D"]
    r["d2h"] = [s for s in xs if s[2] == "D2H"]
    r["h2d_bytes"] = sum(float(s[3].get("bytes", 0)) for s in r["h2d"])
    r["d2h_bytes"] = sum(float(s[3].get("bytes", 0)) for s in r["d2h"])
    r["link_peak"] = link_peak(rk)
    # the curves of the PCIe figure start at the first counted copy (one may have begun before the step)
    r["xfer_lo"] = min([t0] + [s[0] for s in xs])
    for key in ("h2d", "d2h"):
        r[key + "_curve_bytes"] = binned_rate(r[key], r["xfer_lo"], t1, r["bin_s"])[2] if r[key] else 0.0
    if rk.has_device:
        times, used = counter_path(rk.counters["device memory (bytes)"], "in use", t0, t1)
        cap = rk.counters["device memory (bytes)"][-1][1].get("capacity", 0)
        r["mem_unit"] = "bytes (allocator)"
    else:  # the CPU backend: the engine's accounting, in MiB
        times, used = counter_path(rk.counters.get("memory (MiB)", []), "device", t0, t1)
        used = [v * 1048576.0 for v in used]
        cap = 0
        r["mem_unit"] = "bytes (engine accounting; CPU backend: device memory is host memory)"
    r["mem_t"], r["mem_used"], r["capacity"] = times, used, cap
    r["device_peak"] = max(used) if used else 0.0
    r["update"] = update_window(rk, t0, t1)
    u0, u1 = r["update"]
    if u0 is not None:
        ut, uu = counter_path(rk.counters.get("device memory (bytes)", []), "in use", u0, u1) if rk.has_device \
            else ([], [])
        r["update_peak"] = max(uu) if uu else r["device_peak"]
        r["headroom_update"] = cap - r["update_peak"] if cap else None
        r["subphases"] = subphases(rk, u0, u1)
        us = u1 - u0
        r["update_s"] = us
        in_up = lambda s: u0 <= (s[0] + s[1]) / 2 <= u1
        r["update_h2d_gbps"] = sum(float(s[3].get("bytes", 0)) for s in rk.transfers
                                   if s[2] == "H2D" and in_up(s)) / us / 1e9 if us > 0 else 0.0
        r["update_d2h_gbps"] = sum(float(s[3].get("bytes", 0)) for s in rk.transfers
                                   if s[2] == "D2H" and in_up(s)) / us / 1e9 if us > 0 else 0.0
    else:
        r.update(update_peak=r["device_peak"], headroom_update=None, subphases=[], update_s=0.0,
                 update_h2d_gbps=0.0, update_d2h_gbps=0.0)
    nv = [(t, a) for t, a in rk.counters.get("nvml", []) if t0 <= t <= t1]  # the GPU's own view (trace_nvml_ms)
    r["nvml"] = {k: ([t for t, a in nv if k in a], [a[k] for t, a in nv if k in a]) for k in NVML_KEYS}
    r["nvml_samples"] = len(nv)
    hs = rk.counters.get("host memory (bytes)", [])
    r["host"] = {k: counter_path(hs, k, t0, t1) for k in ("pinned", "optimizer", "activations", "total")}
    r["device_busy"] = [(max(a, t0), min(b, t1)) for a, b, n, _ in rk.spans.get(LANE_DEVICE, []) if b > t0 and a < t1]
    r["adam_busy"] = rk.named((LANE_HOST_ADAM,), ("host adam",), t0, t1)
    r["adam_threads"] = {lane - ADAM_THREAD_LANES[0]: rk.named((lane,), ("busy",), t0, t1)
                         for lane in ADAM_THREAD_LANES if rk.spans.get(lane)}
    ios = step_transfers(rk, t0, t1, rk.nvme)
    for kind in ("read", "write"):
        r["nvme_" + kind] = [s for s in ios if s[2] == "nvme " + kind]
        r[f"nvme_{kind}_bytes"] = sum(float(s[3].get("bytes", 0)) for s in r["nvme_" + kind])
    r["phases"] = phase_bars(rk, t0, t1)
    r["all_phases"] = [(s[3].get("step"), phase_bars(rk, s[0], s[1])) for s in rk.steps]
    r["idle_wait_s"] = device_idle_waiting(rk, t0, t1)
    return r


# ------------------------------------------------------------------ summary

def summary_lines(r, label=None):
    tag = f"rank {r['rank']}" + (f" {label}" if label else "")
    ms = lambda s: f"{s * 1e3:.3f}"
    gb = lambda v: f"{v:.3f}"
    head = f"{tag}: step={r['step']} step_ms={ms(r['step_s'])} complete_steps={r['steps']}"
    hroom = "n/a" if r["headroom_update"] is None else f"{r['headroom_update']:.0f}"
    host_now = {k: (v[1][-1] if v[1] else 0) for k, v in r["host"].items()}
    mem = (f"{tag} memory: device_peak_bytes={r['device_peak']:.0f} capacity_bytes={r['capacity']:.0f} "
           f"update_peak_bytes={r['update_peak']:.0f} headroom_update_bytes={hroom} "
           f"host_pinned_bytes={host_now['pinned']:.0f} host_optimizer_bytes={host_now['optimizer']:.0f} "
           f"host_activations_bytes={host_now['activations']:.0f} source={r['mem_unit'].split()[1].strip('(;)')}")
    if r["h2d"] or r["d2h"]:
        pcie = (f"{tag} pcie: h2d_bytes={r['h2d_bytes']:.0f} d2h_bytes={r['d2h_bytes']:.0f} "
                f"h2d_curve_bytes={r['h2d_curve_bytes']:.0f} d2h_curve_bytes={r['d2h_curve_bytes']:.0f} "
                f"bin_ms={ms(r['bin_s'])} link_peak_gbps={gb(r['link_peak'])} "
                f"update_h2d_gbps={gb(r['update_h2d_gbps'])} update_d2h_gbps={gb(r['update_d2h_gbps'])}")
    else:
        pcie = f"{tag} pcie: h2d_bytes=0 d2h_bytes=0 no host<->device copies in this trace (CPU backend: no PCIe)"
    if r["nvml_samples"]:
        mean = lambda k: sum(r["nvml"][k][1]) / len(r["nvml"][k][1]) if r["nvml"][k][1] else 0.0
        pcie += (f" nvml_samples={r['nvml_samples']} nvml_rx_gbps={mean(NVML_RX) / 1e9:.3f} "
                 f"nvml_tx_gbps={mean(NVML_TX) / 1e9:.3f} nvml_gpu_util_pct={mean('gpu util %'):.1f} "
                 f"nvml_used_peak_bytes={max(r['nvml'][NVML_USED][1] or [0]):.0f}")
    span = r["step_s"]
    u0, u1 = r["update"]
    dev_b = union_seconds(r["device_busy"])
    dev_u = union_seconds([(max(a, u0), min(b, u1)) for a, b in r["device_busy"] if u0 is not None and b > u0 and a < u1])
    cpu_u = union_seconds([(max(a, u0), min(b, u1)) for a, b in r["adam_busy"] if u0 is not None and b > u0 and a < u1])
    us = r["update_s"] or 1.0
    nthr = len(r["adam_threads"])
    thr_u = sum(union_seconds([(max(a, u0), min(b, u1)) for a, b in iv if u0 is not None and b > u0 and a < u1])
                for iv in r["adam_threads"].values()) / max(nthr, 1)
    busy = (f"{tag} busy: device_busy_pct={100 * dev_b / span:.1f} device_busy_update_pct={100 * dev_u / us:.1f} "
            f"cpu_adam_busy_update_pct={100 * cpu_u / us:.1f} cpu_adam_threads={nthr} "
            f"cpu_adam_threads_busy_update_pct={100 * thr_u / us:.1f} device_idle_waiting_host_ms={ms(r['idle_wait_s'])} "
            f"resolution_ms={ms(r['merge_s'])}")
    if r["nvme_read"] or r["nvme_write"]:
        busy += (f" nvme_read_bytes={r['nvme_read_bytes']:.0f} nvme_write_bytes={r['nvme_write_bytes']:.0f} "
                 f"nvme_read_inflight_pct={100 * union_seconds([s[:2] for s in r['nvme_read']]) / span:.1f} "
                 f"nvme_write_inflight_pct={100 * union_seconds([s[:2] for s in r['nvme_write']]) / span:.1f}")
    ph = r["phases"]
    phases = (f"{tag} phases: step_ms={ms(span)} " + " ".join(f"{p}_ms={ms(ph[p])}" for p in PHASES) +
              f" sum_ms={ms(sum(ph.values()))} update: " +
              ", ".join(f"{n} {ms(s)} ms" + (f" at {g:.3f} GB/s" if g else "") for n, s, g in r["subphases"]))
    return [head, mem, pcie, busy, phases]


# ------------------------------------------------------------------ figures

def shade_phases(ax, rk, t0, t1):
    seen = set()
    for a, b, n, _ in rk.spans.get(LANE_MAIN, []):
        if n in PHASE_COLORS and b > t0 and a < t1:
            ax.axvspan((max(a, t0) - t0) * 1e3, (min(b, t1) - t0) * 1e3, color=PHASE_COLORS[n], alpha=0.15,
                       label=None if n in seen else n, linewidth=0)
            seen.add(n)


def fig_memory(plt, ranks, results, out):
    fig, axes = plt.subplots(2, len(ranks), figsize=(7 * len(ranks), 7), squeeze=False)
    for j, (rk, r) in enumerate(zip(ranks, results)):
        ax, axh = axes[0][j], axes[1][j]
        t0 = r["t0"]
        shade_phases(ax, rk, t0, r["t1"])
        ax.step([(t - t0) * 1e3 for t in r["mem_t"]], [v / 2**20 for v in r["mem_used"]], where="post",
                color="black", label="in use")
        if r["capacity"] and r["capacity"] <= 4 * r["device_peak"]:
            ax.axhline(r["capacity"] / 2**20, color="red", linestyle="--", label="capacity")
        elif r["capacity"]:  # a line that would flatten the curve: named instead
            ax.annotate(f"capacity {r['capacity'] / 2**20:.0f} MiB (above the axis)", xy=(0.01, 0.79),
                        xycoords="axes fraction", color="red")
        ax.annotate(f"peak {r['device_peak'] / 2**20:.1f} MiB", xy=(0.01, 0.93), xycoords="axes fraction")
        nt, nu = r["nvml"][NVML_USED]
        if nt:  # the driver's count: every context on the GPU, this process's CUDA context included
            ax.plot([(t - t0) * 1e3 for t in nt], [v / 2**20 for v in nu], color="tab:gray", linestyle=":",
                    label="in use (NVML)")
        if r["headroom_update"] is not None:
            ax.annotate(f"headroom during the update {r['headroom_update'] / 2**20:.1f} MiB "
                        f"({100 * r['headroom_update'] / r['capacity']:.0f}% idle)", xy=(0.01, 0.86),
                        xycoords="axes fraction")
        ax.set_title(f"rank {r['rank']} step {r['step']}: device memory ({r['mem_unit'].split(';')[0]})", fontsize=9)
        if not rk.has_device:
            ax.text(0.5, 0.5, "CPU backend: device memory is host memory", transform=ax.transAxes, ha="center",
                    color="gray")
        ax.set_ylabel("MiB")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7, loc="lower right")
        for k, c in (("pinned", "tab:purple"), ("optimizer", "tab:green"), ("activations", "tab:orange"),
                     ("total", "black")):
            tt, vv = r["host"][k]
            if tt:
                axh.step([(t - t0) * 1e3 for t in tt], [v / 2**20 for v in vv], where="post", color=c, label=k)
        axh.set_title("host memory (engine accounting)", fontsize=9)
        axh.set_xlabel("ms from the step's start")
        axh.set_ylabel("MiB")
        axh.set_ylim(bottom=0)
        axh.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def fig_pcie(plt, ranks, results, out, given_peak):
    fig, axes = plt.subplots(1, len(ranks), figsize=(7 * len(ranks), 4), squeeze=False)
    for j, (rk, r) in enumerate(zip(ranks, results)):
        ax = axes[0][j]
        t0, w = r["t0"], r["bin_s"]
        shade_phases(ax, rk, t0, r["t1"])
        if not (r["h2d"] or r["d2h"]):
            ax.text(0.5, 0.5, "no host<->device copies: CPU backend (no PCIe)", transform=ax.transAxes,
                    ha="center", color="gray")
        for key, c in (("h2d", "tab:blue"), ("d2h", "tab:red")):
            if r[key]:
                xs, ys, _ = binned_rate(r[key], r["xfer_lo"], r["t1"], w)
                ax.step([(x - t0) * 1e3 for x in xs], ys, where="post", color=c, label=key.upper())
        for key, c, lab in ((NVML_RX, "tab:blue", "RX (H2D)"), (NVML_TX, "tab:red", "TX (D2H)")):
            nt, nv = r["nvml"][key]
            if nt:  # NVML's own 20 ms averages, the GPU's view of the same link
                ax.plot([(t - t0) * 1e3 for t in nt], [v / 1e9 for v in nv], color=c, linestyle=":", marker=".",
                        markersize=3, label=f"NVML {lab}")
        peak = given_peak or r["link_peak"]
        if peak:
            ax.axhline(peak, color="gray", linestyle="--",
                       label=f"link peak {peak:.2f} GB/s" + (" (given)" if given_peak else " (fastest copy)"))
        ax.set_title(f"rank {r['rank']} step {r['step']}: host<->device GB/s (bins of {w * 1e3:.3g} ms)", fontsize=9)
        ax.set_xlabel("ms from the step's start")
        ax.set_ylabel("GB/s")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def fig_busy(plt, ranks, results, out):
    fig, axes = plt.subplots(1, len(ranks), figsize=(7 * len(ranks), 4), squeeze=False)
    for j, (rk, r) in enumerate(zip(ranks, results)):
        ax = axes[0][j]
        t0, w = r["t0"], r["bin_s"]
        shade_phases(ax, rk, t0, r["t1"])
        for iv, c, lab in ((r["device_busy"], "black", "device compute"), (r["adam_busy"], "tab:green", "CPU Adam lane")):
            xs, ys = busy_fraction(iv, t0, r["t1"], w)
            ax.step([(x - t0) * 1e3 for x in xs], [100 * y for y in ys], where="post", color=c, label=lab)
        if r["adam_threads"]:  # the mean over the CPU Adam's threads: how much of the host's cores it used
            per = [busy_fraction(iv, t0, r["t1"], w)[1] for iv in r["adam_threads"].values()]
            xs = busy_fraction([], t0, r["t1"], w)[0]
            mean = [100 * sum(col) / len(per) for col in zip(*per)]
            ax.step([(x - t0) * 1e3 for x in xs], mean, where="post", color="tab:olive", linestyle="--",
                    label=f"CPU Adam threads (mean of {len(per)})")
        for kind, c in (("read", "tab:cyan"), ("write", "tab:brown")):  # the NVMe lane: a request in flight
            if r["nvme_" + kind]:
                xs, ys = busy_fraction([s[:2] for s in r["nvme_" + kind]], t0, r["t1"], w)
                gbs = r[f"nvme_{kind}_bytes"] / r["step_s"] / 1e9
                ax.step([(x - t0) * 1e3 for x in xs], [100 * y for y in ys], where="post", color=c, linestyle=":",
                        label=f"NVMe {kind}s in flight ({gbs:.2f} GB/s over the step)")
        if not r["device_busy"]:
            ax.text(0.5, 0.5, "no device compute lane in this trace (CPU backend)", transform=ax.transAxes,
                    ha="center", color="gray")
        ax.set_title(f"rank {r['rank']} step {r['step']}: busy % per {w * 1e3:.3g} ms bin", fontsize=9)
        ax.set_xlabel("ms from the step's start")
        ax.set_ylabel("% busy")
        ax.set_ylim(0, 105)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def fig_phases(plt, ranks, results, out):
    fig, axes = plt.subplots(2, len(ranks), figsize=(7 * len(ranks), 7), squeeze=False)
    for j, r in enumerate(results):
        ax, axs = axes[0][j], axes[1][j]
        steps = [s for s, _ in r["all_phases"]]
        bottom = [0.0] * len(steps)
        for p in PHASES:
            vals = [ph[p] * 1e3 for _, ph in r["all_phases"]]
            ax.bar([str(s) for s in steps], vals, bottom=bottom, color=PHASE_COLORS[p], label=p)
            bottom = [a + b for a, b in zip(bottom, vals)]
        ax.set_title(f"rank {r['rank']}: phases per iteration (ms)", fontsize=9)
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
        names = [n for n, _, _ in r["subphases"]]
        secs = [s * 1e3 for _, s, _ in r["subphases"]]
        axs.barh(names, secs, color="tab:green")
        for i, (_, s, g) in enumerate(r["subphases"]):
            axs.text(s * 1e3, i, f" {s * 1e3:.2f} ms" + (f", {g:.2f} GB/s" if g else ""), va="center", fontsize=7)
        axs.invert_yaxis()
        axs.set_title(f"step {r['step']}: the update's sub-phases ({r['update_s'] * 1e3:.2f} ms; lanes overlap; "
                      "GB/s: the copies that ran during each)",
                      fontsize=9)
        axs.set_xlabel("ms")
        axs.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def merged_view(ranks, results, bin_s=None):
    """All ranks' step on one time axis (the trace's Unix-epoch times: every rank's file shares it, so
    no rank's times are shifted), the same step number on each, and the sum of their copies' GB/s."""
    common = min(r["step"] for r in results)
    results = [r if r["step"] == common else analyze(rk, common, bin_s) for rk, r in zip(ranks, results)]
    base = min(rk.origin * 1e-6 + r["t0"] for rk, r in zip(ranks, results))
    shift = [rk.origin * 1e-6 - base for rk in ranks]  # a rank's own seconds to the merged axis
    lo = min(r["t0"] + d for r, d in zip(results, shift))
    hi = max(r["t1"] + d for r, d in zip(results, shift))
    width = bin_s or max((hi - lo) / 100.0, 1e-5)
    moved = [(a + d, b + d, n, x) for r, d in zip(results, shift) for a, b, n, x in r["h2d"] + r["d2h"]]
    lo_x = min([lo] + [m[0] for m in moved])
    xs, gbps, curve = binned_rate(moved, lo_x, hi, width)
    return {"step": common, "results": results, "shift": shift, "lo": lo, "hi": hi, "bin_s": width,
            "sum_t": xs, "sum_gbps": gbps, "sum_curve_bytes": curve,
            "windows": [(r["t0"] + d, r["t1"] + d) for r, d in zip(results, shift)]}


def merged_summary(m):
    w = m["windows"]
    ms = lambda v: f"{v * 1e3:.3f}"
    return (f"merged: ranks={len(w)} step={m['step']} window_ms={ms(m['hi'] - m['lo'])} "
            f"start_skew_ms={ms(max(a for a, _ in w) - min(a for a, _ in w))} "
            f"end_skew_ms={ms(max(b for _, b in w) - min(b for _, b in w))} "
            f"overlap_ms={ms(min(b for _, b in w) - max(a for a, _ in w))} "
            f"h2d_bytes_sum={sum(r['h2d_bytes'] for r in m['results']):.0f} "
            f"d2h_bytes_sum={sum(r['d2h_bytes'] for r in m['results']):.0f} "
            f"sum_curve_bytes={m['sum_curve_bytes']:.0f} bin_ms={ms(m['bin_s'])} "
            f"peak_sum_gbps={max(m['sum_gbps'] or [0]):.3f}")


def fig_ranks(plt, ranks, m, out):
    """Each rank's lanes as rows on the merged axis; below, the sum of all ranks' copies."""
    fig, (ax, axs) = plt.subplots(2, 1, figsize=(12, 2 + 1.3 * len(ranks)), sharex=True,
                                  gridspec_kw={"height_ratios": [len(ranks) * 1.3, 1.5]})
    rows, lo = [], m["lo"]
    ms = lambda t: (t - lo) * 1e3
    for rk, r, d in zip(ranks, m["results"], m["shift"]):
        t0, t1 = r["t0"], r["t1"]
        lanes = [("phases", [(max(a, t0), min(b, t1), PHASE_COLORS[n]) for a, b, n, _ in rk.spans.get(LANE_MAIN, [])
                             if n in PHASE_COLORS and b > t0 and a < t1]),
                 ("device compute", [(a, b, "black") for a, b in r["device_busy"]]),
                 ("H2D", [(a, b, "tab:blue") for a, b, _, _ in r["h2d"]]),
                 ("D2H", [(a, b, "tab:red") for a, b, _, _ in r["d2h"]]),
                 ("CPU Adam", [(a, b, "tab:green") for a, b in r["adam_busy"]]),
                 ("NVMe", [(a, b, "tab:cyan") for a, b, _, _ in r["nvme_read"] + r["nvme_write"]])]
        for name, spans in lanes:
            if not spans and name != "phases":
                continue
            y = len(rows)
            ax.broken_barh([(ms(a + d), max((b - a) * 1e3, 1e-4)) for a, b, _ in spans], (y - 0.4, 0.8),
                           facecolors=[c for _, _, c in spans], linewidth=0)
            rows.append(f"rank {r['rank']} {name}")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontsize=7)
    ax.invert_yaxis()
    ax.set_title(f"step {m['step']} of {len(ranks)} ranks on one time axis (the trace's own clock; "
                 f"start skew {1e3 * (max(a for a, _ in m['windows']) - min(a for a, _ in m['windows'])):.2f} ms)",
                 fontsize=9)
    axs.step([ms(x) for x in m["sum_t"]], m["sum_gbps"], where="post", color="tab:purple")
    axs.set_title(f"H2D + D2H of all ranks together, GB/s (bins of {m['bin_s'] * 1e3:.3g} ms)", fontsize=9)
    axs.set_xlabel("ms from the earliest rank's step start")
    axs.set_ylabel("GB/s")
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def fig_sweep(plt, points, out):
    """points: [(label, result)]; x is the label as a number when every label is one."""
    try:
        xs = [float(lab) for lab, _ in points]
        numeric = True
    except ValueError:
        xs, numeric = list(range(len(points))), False
    order = sorted(range(len(points)), key=lambda i: xs[i])
    x = [xs[i] for i in order]
    res = [points[i][1] for i in order]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4))
    a1.plot(x, [r["step_s"] * 1e3 for r in res], "o-", label="step time")
    a1.plot(x, [r["idle_wait_s"] * 1e3 for r in res], "s--", label="device idle waiting for the host")
    a1.set_ylabel("ms")
    a1.legend(fontsize=8)
    a2.plot(x, [r["update_h2d_gbps"] for r in res], "o-", color="tab:blue", label="H2D over the update")
    a2.plot(x, [r["update_d2h_gbps"] for r in res], "o-", color="tab:red", label="D2H over the update")
    a2.set_ylabel("mean GB/s")
    a2.legend(fontsize=8)
    for ax in (a1, a2):
        ax.set_xlabel("label" if not numeric else "label (e.g. Twin-Flow ratio)")
        if not numeric:
            ax.set_xticks(x)
            ax.set_xticklabels([points[i][0] for i in order])
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


# ------------------------------------------------------------------ entry

def main(args, die):
    """args: argparse namespace with trace (list of TRACE or LABEL=TRACE), output, rank, step, bin_ms,
    link_peak. Prints the summary; writes the PNGs."""
    inputs = []
    for item in args.trace:
        label, path = None, item
        if "=" in item and not os.path.exists(item):
            label, path = item.split("=", 1)
        inputs.append((label, path))
    try:
        loaded = []
        for label, path in inputs:
            files = trace_files(path)
            ranks = [Rank(f) for f in files]
            if args.rank != "all":
                want = int(args.rank)
                ranks = [rk for rk in ranks if rk.rank == want]
                if not ranks:
                    raise TraceError(f"{path}: no rank {want} in this trace")
            results = [analyze(rk, args.step, args.bin_ms * 1e-3 if args.bin_ms else None) for rk in ranks]
            loaded.append((label, path, ranks, results))
    except TraceError as e:
        die(str(e))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        die("needs python3-matplotlib (apt-get install python3-matplotlib, or scripts/install-deps.sh)")
    first_path = loaded[0][1]
    prefix = args.output or re.sub(r"(\.rank\d+)?\.json$", "", first_path)
    if prefix.endswith(".png"):
        prefix = prefix[:-4]
    written = []
    for label, path, ranks, results in loaded:
        for r in results:
            for line in summary_lines(r, label):
                print(line)
    label, path, ranks, results = loaded[0]
    if len(loaded) == 1:
        for name, fn in (("memory", lambda o: fig_memory(plt, ranks, results, o)),
                         ("pcie", lambda o: fig_pcie(plt, ranks, results, o, args.link_peak)),
                         ("busy", lambda o: fig_busy(plt, ranks, results, o)),
                         ("phases", lambda o: fig_phases(plt, ranks, results, o))):
            out = f"{prefix}.{name}.png"
            fn(out)
            plt.close("all")
            written.append(out)
        if len(ranks) > 1:  # --rank all: the ranks merged on one axis as well
            try:
                m = merged_view(ranks, results, args.bin_ms * 1e-3 if args.bin_ms else None)
            except TraceError as e:  # a rank without the step the others share
                die(str(e))
            print(merged_summary(m))
            out = f"{prefix}.ranks.png"
            fig_ranks(plt, ranks, m, out)
            plt.close("all")
            written.append(out)
    else:
        points = [(lab or os.path.basename(p), res[0]) for lab, p, _, res in loaded]
        for lab, r in points:
            print(f"sweep: label={lab} rank={r['rank']} step={r['step']} step_ms={r['step_s'] * 1e3:.3f} "
                  f"device_idle_waiting_host_ms={r['idle_wait_s'] * 1e3:.3f} "
                  f"update_h2d_gbps={r['update_h2d_gbps']:.3f} update_d2h_gbps={r['update_d2h_gbps']:.3f}")
        out = f"{prefix}.sweep.png"
        fig_sweep(plt, points, out)
        written.append(out)
    print("plot: wrote " + " ".join(written))
    return 0
