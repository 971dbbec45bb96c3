"""t_offload.py — Twin-Flow (zero_optimization.offload_optimizer): the tiny config trained with
offload ratios 0, 0.25, 0.5, 1 and auto on 1, 2 and 4 ranks and ZeRO stages 0-3 gives exactly the
loss trajectory of the same run without offload. The host part runs the SIMD CPU Adam and the
device part the backend's adamw, which on the CPU backend is the same cpu_adam.c code, and every
cpu_adam path is bit-identical to opmath.h's formula (test_cpu_adam), so the comparison is ==.
Also: the trace shows the host and device Adam of a step overlapping in time, the host part's
optimizer bytes are accounted in host memory, and bad offload configs fail with clear messages."""
import json
import os
import re
import tempfile

import ztlib

ztlib.ensure_shakespeare()
cfg = "configs/tiny.yaml"
ITERS = "train_iters=6"


def offload(ratio):
    return f"zero_optimization.offload_optimizer={{device: cpu, ratio: {ratio}}}"


def mib(stdout, which, cat):
    m = re.search(r"memory per rank \(%s\):.*? %s ([0-9.]+) MiB" % (which, cat), stdout)
    return float(m.group(1)) if m else None


# --- same trajectory with and without offload. Every (ranks, stage) pair runs two ratios, chosen so
# that each rank count sees all five ratios and each stage at least four (the full 45-run product
# would not fit the time budget); stage 0 (all ranks update everything) is covered on one rank.
RATIOS = ("0", "0.25", "0.5", "1", "auto")
outputs = {}
cases = [(1, 0, ("0.5", "1"))]
for ri, ranks in enumerate((1, 2, 4)):
    for si, stage in enumerate((1, 2, 3)):
        k = 3 * ri + si
        cases.append((ranks, stage, (RATIOS[(2 * k) % 5], RATIOS[(2 * k + 1) % 5])))
for ranks, stage, ratios in cases:
    base_sets = [ITERS, f"zero_optimization.stage={stage}"]
    p, rows = ztlib.train(cfg, base_sets, ranks=ranks if ranks > 1 else 0)
    base = ztlib.losses(rows)
    outputs[(ranks, stage, None)] = p.stdout
    if not ztlib.check(p.returncode == 0 and len(base) == 6, f"stage{stage}_ranks{ranks}_baseline", p.stderr[-1500:]):
        continue
    for ratio in ratios:
        name = f"stage{stage}_ranks{ranks}_ratio_{ratio}"
        p, rows = ztlib.train(cfg, base_sets + [offload(ratio)], ranks=ranks if ranks > 1 else 0)
        outputs[(ranks, stage, ratio)] = p.stdout
        got = ztlib.losses(rows)
        if not ztlib.check(p.returncode == 0 and len(got) == 6, name + "_runs", p.stderr[-1500:]):
            continue
        ztlib.check(got == base, name + "_bit_identical_to_no_offload",
                    f"max relative difference {ztlib.max_rel_diff(got, base):.3g}")
        if ratio == "auto":
            ztlib.check("twin-flow: ratio auto = " in p.stdout, name + "_logs_choice", p.stdout[-1500:])

# --- accounting: the host part's master, m and v are host bytes, the device keeps the rest
out0, out1 = outputs.get((1, 2, None), ""), outputs.get((1, 2, "0.5"), "")
dev0, dev1 = mib(out0, "cpu", "optimizer"), mib(out1, "cpu", "optimizer")
host0, host1 = mib(out0, "host", "optimizer"), mib(out1, "host", "optimizer")
ok = None not in (dev0, dev1, host0, host1)
# fp32 backend: device m, v = 8 B/element; host master, m, v = 12 B/element; half of the shard each
ztlib.check(ok and host0 == 0 and abs(host1 - 0.75 * dev0) < 0.2 and abs(dev1 - 0.5 * dev0) < 0.2,
            "accounting_host_part_in_host_memory",
            f"device optimizer {dev0} -> {dev1} MiB, host optimizer {host0} -> {host1} MiB\n{out1[-800:]}")

# --- trace (one rank, so its three threads have the two cores): host and device Adam overlap in
# time; the rank-named file, the lanes, the memory counters
with tempfile.TemporaryDirectory() as tmp:
    trace = os.path.join(tmp, "run.json")
    p, rows = ztlib.train(cfg, [ITERS, "zero_optimization.stage=2", offload(0.5), f"trace={trace}",
                                "wall_clock_breakdown=true"])
    ztlib.check(p.returncode == 0, "trace_run", p.stderr[-1500:])
    total_overlaps = 0
    for r in range(1):
        path = os.path.join(tmp, f"run.rank{r}.json")
        try:
            with open(path) as f:
                events = json.load(f)
        except (OSError, ValueError) as e:
            ztlib.check(False, f"trace_rank{r}_is_json", str(e))
            continue
        ztlib.check(all(ev.get("pid") == r for ev in events), f"trace_rank{r}_pid_is_rank", "")
        host = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "host adam" and e["ph"] == "X"]
        dev = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "device adam" and e["ph"] == "X"]
        overlaps = sum(1 for h in host for d in dev if min(h[1], d[1]) > max(h[0], d[0]))
        total_overlaps += overlaps
        ztlib.check(len(host) >= 6 and len(dev) >= 6, f"trace_rank{r}_host_and_device_adam_events",
                    f"{len(host)} host, {len(dev)} device adam events")
        lanes = {e["tid"] for e in events if e["ph"] == "X"}
        names = {e["name"] for e in events if e["ph"] == "X"}
        ztlib.check({1, 2, 3, 4} <= lanes and {"forward", "backward", "grad norm", "D2H grads", "H2D params"} <= names,
                    f"trace_rank{r}_phases_on_lanes", f"lanes {sorted(lanes)}, names {sorted(names)}")
        ztlib.check(any(e["ph"] == "C" and "device" in e.get("args", {}) for e in events),
                    f"trace_rank{r}_memory_counters", "")
    ztlib.check(total_overlaps >= 1, "trace_host_and_device_adam_overlap_in_time", "no overlapping host/device adam")
    ztlib.check(re.search(r"time \(ms\): forward [0-9.]+ \| backward .* host adam [0-9.]+ \| device adam [0-9.]+ \| "
                          r"D2H [0-9.]+ \| H2D [0-9.]+ \| all-gather .*host idle", p.stdout) is not None,
                "wall_clock_breakdown_line", p.stdout[-800:])

# --- bad configs
p = ztlib.run(["train", cfg, "--set", offload(1.5)])
ztlib.check(p.returncode != 0 and "expected a number in [0, 1]" in p.stderr, "bad_ratio_rejected", p.stderr[-500:])
p = ztlib.run(["train", cfg, "--set", "zero_optimization.offload_optimizer.device=gpu"])
ztlib.check(p.returncode != 0 and "gpu" in p.stderr and "cpu" in p.stderr, "unknown_device_rejected", p.stderr[-500:])
ztlib.finish()
