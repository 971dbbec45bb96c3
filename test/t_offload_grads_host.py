#!/usr/bin/env python3
"""t_offload_grads_host.py — at ZeRO stages 2-3 with the whole optimizer shard on the host
(offload_optimizer cpu, ratio 1) the gradients go to the host bucket by bucket, as ZeRO-Offload's do
(zero_comm.c: land_on_host; twin_flow.c: twin_grads_land), on the simulated GPU:

  - the path is taken: the device's gradient account (the allocator's count) drops by the whole
    16-bit shard, and with several ranks the reduce-scatter landing zone shrinks from the shard to
    zt_zero_landing_slots x reduce_bucket_size elements;
  - every loss and gradient norm equals the same run's without offload (the device path) exactly: on
    one rank with gradient accumulation (the host adds each micro-step's bucket with the device's
    rounding), on 2 ranks at stages 2 and 3 with overlap_comm and buckets small enough that the
    landing zones are reused, and with fp16 loss scaling and an injected overflow (the non-finite
    norm summed on the host skips the step in both runs)."""
import os
import re
import tempfile

import ztlib

ztlib.ensure_shakespeare()
cfg = "configs/tiny.yaml"
BASE = ["device=sim", "train_iters=5", "steps_per_print=1"]
RATIO_1 = "zero_optimization.offload_optimizer={device: cpu, ratio: 1}"
work = tempfile.mkdtemp(prefix="zt_grads_host_")
BUCKET = 100000  # elements: below a tiny.yaml shard on 2 ranks, so the landing zones rotate


def mib(stdout, cat):
    m = re.search(r"memory per rank \(sim\):.*? %s ([0-9.]+) MiB" % cat, stdout)
    return float(m.group(1)) if m else None


def run(name, sets, ranks=0, env=None):
    """losses and norms with and without RATIO_1, and both outputs"""
    out = {}
    metrics = os.path.join(work, "m.jsonl")
    for offload in (False, True):
        if os.path.exists(metrics):
            os.unlink(metrics)
        p = ztlib.run(["train", cfg, "--set", f"metrics_file={metrics}"] +
                      [a for s in BASE + sets + ([RATIO_1] if offload else []) for a in ("--set", s)],
                      ranks=ranks, env=env)
        rows = [r for r in ztlib.read_metrics(metrics) if "loss" in r]
        out[offload] = (p, [(r["loss"], r.get("grad_norm")) for r in rows])
    (p0, a), (p1, b) = out[False], out[True]
    ok = p0.returncode == 0 and p1.returncode == 0 and len(a) == 5
    ztlib.check(ok and a == b, name + "_same_losses", f"{a}\nvs\n{b}" if ok else (p0.stderr + p1.stderr)[-1500:])
    return p0.stdout, p1.stdout


# one rank, stage 3, 4 micro-steps a step: the grads account drops by the shard (= stage 3's params)
s0, s1 = run("stage3_1rank_accumulation", ["zero_optimization.stage=3", "gradient_accumulation_steps=4"])
g0, g1, shard = mib(s0, "grads"), mib(s1, "grads"), mib(s0, "params")
ztlib.check(None not in (g0, g1, shard) and shard > 1 and abs((g0 - g1) - shard) <= 0.11, "stage3_1rank_no_device_shard",
            f"grads {g0} MiB without offload, {g1} with ratio 1; shard {shard} MiB")

# two ranks, stages 2 and 3, overlap_comm and small buckets: the landing zone is two buckets, not the shard
for stage in (2, 3):
    s0, s1 = run(f"stage{stage}_2ranks_buckets", [f"zero_optimization.stage={stage}", "gradient_accumulation_steps=2",
                                                  "zero_optimization.overlap_comm=true",
                                                  f"zero_optimization.reduce_bucket_size={BUCKET}"], ranks=2)
    g0, g1, c0, c1 = mib(s0, "grads"), mib(s1, "grads"), mib(s0, "comm"), mib(s1, "comm")
    zones = 2 * BUCKET * 2 / 1048576  # two slots of 16-bit elements
    ztlib.check(None not in (g0, g1, c0, c1) and g0 - g1 > 1 and abs(c1 - (c0 - (g0 - g1) + zones)) <= 0.11,
                f"stage{stage}_2ranks_landing_zones",
                f"grads {g0} -> {g1} MiB, comm {c0} -> {c1} MiB (the shard-sized zone -> {zones:.2f} MiB of slots)")

# fp16 with an overflow injected after step 2's backward: both runs skip it
run("stage2_2ranks_fp16_overflow", ["zero_optimization.stage=2", "fp16={enabled: true, initial_scale_power: 8}"], ranks=2,
    env={"ZEROTRAIN_INJECT_OVERFLOW": "2"})

ztlib.finish()
