"""t_offload.py — Twin-Flow (zero_optimization.offload_optimizer): the tiny config trained with
offload ratios 0, 0.25, 0.5, 1 and auto on 1, 2 and 4 ranks and ZeRO stages 0-3 gives exactly the
loss trajectory of the same run without offload. The host part runs the SIMD CPU Adam and the
device part the backend's adamw, which on the CPU backend is the same cpu_adam.c code, and every
cpu_adam path is bit-identical to opmath.h's formula (test_cpu_adam), so the comparison is ==.
Also: the trace shows the host and device Adam of a step overlapping in time, and (overlap_step) the
host Adam still running during the next step's forward, bit-identical also without clipping and
with fp16 overflows; the host part's optimizer bytes are accounted in host memory, and bad offload
configs fail with clear messages."""
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
# fp32 backend: device m, v = 8 B/element; host master, m, v = 12 B/element; half of the shard each; and
# (super_offload, on by default) 12 B/element more for the speculation window's elements
m = re.search(r"super-offload: the update speculates during backward on up to (\d+) of rank 0's (\d+) host-part", out1)
window = int(m.group(1)) / int(m.group(2)) if m else 0.0
ztlib.check(ok and host0 == 0 and abs(host1 - 0.75 * dev0 * (1 + window)) < 0.2 and abs(dev1 - 0.5 * dev0) < 0.2,
            "accounting_host_part_in_host_memory",
            f"device optimizer {dev0} -> {dev1} MiB, host optimizer {host0} -> {host1} MiB (window {window:.3f})\n{out1[-800:]}")

# --- trace (one rank, so its three threads have the two cores): host and device Adam overlap in
# time; the rank-named file, the lanes, the memory counters. Whether two threads' intervals overlap
# is up to the OS scheduler: on a machine loaded by other jobs a run of 6 steps can serialize them
# by chance, so up to three runs are looked at; code that serializes the two sides fails all three.
def trace_events(tmp):
    trace = os.path.join(tmp, "run.json")
    p, rows = ztlib.train(cfg, [ITERS, "zero_optimization.stage=2", offload(0.5), f"trace={trace}",
                                "wall_clock_breakdown=true"])
    ztlib.check(p.returncode == 0, "trace_run", p.stderr[-1500:])
    path = os.path.join(tmp, "run.rank0.json")
    try:
        with open(path) as f:
            return p, json.load(f)
    except (OSError, ValueError) as e:
        ztlib.check(False, "trace_rank0_is_json", str(e))
        return p, None


def adam_intervals(events, name):
    return [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == name and e["ph"] == "X"]


overlaps, runs = 0, 0
with tempfile.TemporaryDirectory() as tmp:
    p, events = trace_events(tmp)
ztlib.check(re.search(r"time \(ms\): forward [0-9.]+ \| backward .* host adam [0-9.]+ \| device adam [0-9.]+ \| "
                      r"D2H [0-9.]+ \| H2D [0-9.]+ \| all-gather .*host idle", p.stdout) is not None,
            "wall_clock_breakdown_line", p.stdout[-800:])
if events is not None:
    ztlib.check(all(ev.get("pid") == 0 for ev in events), "trace_rank0_pid_is_rank", "")
    host, dev = adam_intervals(events, "host adam"), adam_intervals(events, "device adam")
    ztlib.check(len(host) >= 6 and len(dev) >= 6, "trace_rank0_host_and_device_adam_events",
                f"{len(host)} host, {len(dev)} device adam events")
    lanes = {e["tid"] for e in events if e["ph"] == "X"}
    names = {e["name"] for e in events if e["ph"] == "X"}
    # one rank: no collective at all, so nothing on the comm lane (4)
    ztlib.check({1, 2, 3, 5} <= lanes and 4 not in lanes and
                {"forward", "backward", "grad norm", "D2H grads", "H2D params"} <= names,
                "trace_rank0_phases_on_lanes", f"lanes {sorted(lanes)}, names {sorted(names)}")
    ztlib.check(any(e["ph"] == "C" and "device" in e.get("args", {}) for e in events), "trace_rank0_memory_counters", "")
while events is not None and runs < 3:
    runs += 1
    host, dev = adam_intervals(events, "host adam"), adam_intervals(events, "device adam")
    overlaps = sum(1 for h in host for d in dev if min(h[1], d[1]) > max(h[0], d[0]))
    if overlaps or runs == 3:
        break
    with tempfile.TemporaryDirectory() as tmp:
        events = trace_events(tmp)[1]
ztlib.check(overlaps >= 1, "trace_host_and_device_adam_overlap_in_time",
            f"no overlapping host/device adam in {runs} run(s) of 6 steps")

# --- overlap_step (the default): the host part's update finishes during the next step, exactly.
# Bit-identical also without clipping, with fp16 overflows skipping steps, and against overlap_step off
def same_as_base(name, sets, ranks, env=None):
    if env:
        ztlib.ENV.update(env)
    p0, r0 = ztlib.train(cfg, [ITERS] + sets, ranks=ranks)
    p1, r1 = ztlib.train(cfg, [ITERS] + sets + [offload("0.5")], ranks=ranks)
    for k in env or {}:
        ztlib.ENV.pop(k)
    a, b = ztlib.losses(r0), ztlib.losses(r1)
    ztlib.check(p0.returncode == 0 and p1.returncode == 0 and len(a) == 6 and a == b, name,
                f"{a} vs {b}; {p1.stderr[-600:]}")

same_as_base("overlap_step_no_clipping_stage3_ranks2", ["zero_optimization.stage=3", "gradient_clipping=0"], 2)
same_as_base("overlap_step_no_clipping_stage0_ranks4", ["zero_optimization.stage=0", "gradient_clipping=0"], 4)
same_as_base("overlap_step_fp16_overflow_skips_stage3_ranks2",
             ["zero_optimization.stage=3", "fp16.enabled=true", "fp16.initial_scale_power=8"], 2,
             env={"ZEROTRAIN_INJECT_OVERFLOW": "2,3"})
# evaluation, sampling and checkpoint saves while the host part is still updating, then a resume:
# val losses, samples and the resumed losses are those of the run without offload
with tempfile.TemporaryDirectory() as tmp:
    mid = ["zero_optimization.stage=3", "eval_interval=2", "sample_tokens=8", "sample_interval=4",
           "checkpoint.save_interval=3"]
    p0, r0 = ztlib.train(cfg, mid + ["train_iters=8", f"checkpoint.dir={tmp}/a"], ranks=2)
    p1, r1 = ztlib.train(cfg, mid + ["train_iters=8", f"checkpoint.dir={tmp}/b", offload("0.5")], ranks=2)
    samples = [[l for l in p.stdout.splitlines() if "sample" in l.lower()] for p in (p0, p1)]
    ztlib.check(p0.returncode == 0 and p1.returncode == 0 and len(r1) == 8 and ztlib.losses(r0) == ztlib.losses(r1)
                and [r.get("val_loss") for r in r0] == [r.get("val_loss") for r in r1] and samples[0] == samples[1]
                and samples[0], "overlap_step_eval_sample_save_mid_run", f"{p1.stderr[-600:]}")
    p2, r2 = ztlib.train(cfg, mid + ["train_iters=10", f"checkpoint.dir={tmp}/b", offload("0.5")], ranks=2)
    p3, r3 = ztlib.train(cfg, mid + ["train_iters=10", f"checkpoint.dir={tmp}/a"], ranks=2)
    ztlib.check(p2.returncode == 0 and len(r2) == 2 and ztlib.losses(r2) == ztlib.losses(r3),
                "overlap_step_resume_continues_exactly", f"{ztlib.losses(r2)} vs {ztlib.losses(r3)}; {p2.stderr[-600:]}")

p0, r0 = ztlib.train(cfg, [ITERS, "zero_optimization.stage=2", offload("0.5")])
p1, r1 = ztlib.train(cfg, [ITERS, "zero_optimization.stage=2", offload("0.5"),
                           "zero_optimization.offload_optimizer.overlap_step=false"])
ztlib.check(ztlib.losses(r0) == ztlib.losses(r1) and len(r0) == 6, "overlap_step_on_equals_off",
            f"{ztlib.losses(r0)} vs {ztlib.losses(r1)}")

# the trace shows the host Adam running during the next step's forward (up to three runs: whether
# two threads' intervals overlap is up to the scheduler; code that waits for the host part at the
# end of the update fails all three)
during_forward, runs = 0, 0
while runs < 3 and not during_forward:
    runs += 1
    with tempfile.TemporaryDirectory() as tmp:
        events = trace_events(tmp)[1] or []
    host, fwd = adam_intervals(events, "host adam"), adam_intervals(events, "forward")
    during_forward = sum(1 for h in host for f in fwd if min(h[1], f[1]) > max(h[0], f[0]))
ztlib.check(during_forward >= 1, "trace_host_adam_during_next_forward",
            f"no host adam chunk overlapped a forward in {runs} run(s)")

# --- bad configs
p = ztlib.run(["train", cfg, "--set", offload(1.5)])
ztlib.check(p.returncode != 0 and "expected a number in [0, 1]" in p.stderr, "bad_ratio_rejected", p.stderr[-500:])
p = ztlib.run(["train", cfg, "--set", "zero_optimization.offload_optimizer.device=gpu"])
ztlib.check(p.returncode != 0 and "gpu" in p.stderr and "cpu" in p.stderr, "unknown_device_rejected", p.stderr[-500:])
ztlib.finish()
