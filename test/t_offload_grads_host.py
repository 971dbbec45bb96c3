#!/usr/bin/env python3
"""t_offload_grads_host.py — at ZeRO stages 2-3 with the whole optimizer shard on the host
(offload_optimizer cpu, ratio 1) the gradients may go to the host bucket by bucket, as ZeRO-Offload's
do (zero_comm.c: land_on_host; twin_flow.c: twin_grads_land), on the simulated GPU.

offload_optimizer.gradients auto (engine.c: gradients_to_host) keeps the device shard where the
device holds it beside what the step needs, and its info line says which path and why:
  - on the default 8 GiB simulated device the shard stays (the grads account is the no-offload run's);
  - with ZEROTRAIN_SIM_MEM between the two paths' needs (read from that line) the gradients go to
    the host; both runs' losses and norms equal the device path's exactly.

`zerotrain predict` shows the same choice at full scale: the GPT-2 1.5B ZeRO-2 peer config keeps
the shard on an H200 and an H100, the offload study's 13B ZeRO-3 goes to the host on an A100 40 GB.
gradients: host is refused, naming the file and position, where the path does not exist (stage 1,
ratio below 1). With gradients: host (the path forced):

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
RATIO_1 = "zero_optimization.offload_optimizer={device: cpu, ratio: 1, gradients: host}"
AUTO = "zero_optimization.offload_optimizer={device: cpu, ratio: 1}"
work = tempfile.mkdtemp(prefix="zt_grads_host_")
BUCKET = 100000  # elements: below a tiny.yaml shard on 2 ranks, so the landing zones rotate


def mib(stdout, cat):
    m = re.search(r"memory per rank \(sim\):.*? %s ([0-9.]+) MiB" % cat, stdout)
    return float(m.group(1)) if m else None


def run(name, sets, ranks=0, env=None, offload_set=RATIO_1, env_offload=None):
    """losses and norms without offload and with offload_set (env_offload added to env there), and both outputs"""
    out = {}
    metrics = os.path.join(work, "m.jsonl")
    for offload in (False, True):
        if os.path.exists(metrics):
            os.unlink(metrics)
        p = ztlib.run(["train", cfg, "--set", f"metrics_file={metrics}"] +
                      [a for s in BASE + sets + ([offload_set] if offload else []) for a in ("--set", s)],
                      ranks=ranks, env=dict(env or {}, **(env_offload or {})) if offload else env)
        rows = [r for r in ztlib.read_metrics(metrics) if "loss" in r]
        out[offload] = (p, [(r["loss"], r.get("grad_norm")) for r in rows])
    (p0, a), (p1, b) = out[False], out[True]
    ok = p0.returncode == 0 and p1.returncode == 0 and len(a) == 5
    ztlib.check(ok and a == b, name + "_same_losses", f"{a}\nvs\n{b}" if ok else (p0.stderr + p1.stderr)[-1500:])
    return p0.stdout, p1.stdout


# ---- gradients auto: the device shard where it fits, the host where it does not
CHOICE = re.compile(r"^gradients: (.*?) \(auto: with the "
                    r"gradient shard the device needs ([\d.]+) (MiB|GiB), (within|more than) the ([\d.]+) (MiB|GiB) "
                    r"of the device's memory; sent to the host bucket by bucket, ([\d.]+) (MiB|GiB)\)$", re.M)


def choice(stdout):
    m = CHOICE.search(stdout)
    if not m:
        return None
    unit = {"MiB": 2**20, "GiB": 2**30}
    return dict(host=m[1].startswith("to the host"), device_path=float(m[2]) * unit[m[3]], within=m[4] == "within",
                budget=float(m[5]) * unit[m[6]], host_path=float(m[7]) * unit[m[8]])


STAGE2 = ["zero_optimization.stage=2", "gradient_accumulation_steps=4"]
s0, s1 = run("auto_fits_keeps_device_shard", STAGE2, offload_set=AUTO)
c = choice(s1)
ztlib.check(c is not None and not c["host"] and c["within"] and abs(c["budget"] - 8 * 2**30) < 2**20
            and c["device_path"] > c["host_path"] and mib(s1, "grads") == mib(s0, "grads"),
            "auto_fits_keeps_device_shard_line", s1[:1500])
if c:
    # a device between the two paths' needs: the shard no longer fits, the host path does
    mem = int((c["device_path"] + c["host_path"]) / 2)
    s0, s2 = run("auto_short_goes_to_host", STAGE2, offload_set=AUTO, env_offload={"ZEROTRAIN_SIM_MEM": f"{mem}B"})
    c2 = choice(s2)
    ztlib.check(c2 is not None and c2["host"] and not c2["within"] and abs(c2["budget"] - mem) < 2**14
                and mib(s2, "grads") is not None and mib(s1, "grads") - mib(s2, "grads") > 1,
                "auto_short_goes_to_host_line", s2[:1500])

# predict (the engine on the timed simulated GPU, at full scale) takes the same choice and says it: the
# ZeRO-2 peer config (GPT-2 1.5B, 9.35 GiB with the shard) keeps it on an H200 and an H100, the
# offload study's 13B ZeRO-3 (53.27 GiB with it) sends it to the host on an A100 40 GB and fits
for conf, hw, to_host in (("configs/gpu_peer_1p5b.yaml", "h200", False), ("configs/gpu_peer_1p5b.yaml", "h100-sxm", False),
                          ("configs/offload_study_13b.yaml", "a100-40gb", True)):
    p = ztlib.run(["predict", conf, "--hw", hw, "--steps", "2"])
    c = choice(p.stdout)
    ztlib.check(p.returncode == 0 and c is not None and c["host"] == to_host and c["within"] != to_host
                and c["host_path"] <= c["budget"], f"predict_{hw}_{os.path.basename(conf)}_choice",
                p.stdout[:600] + p.stderr[-600:])

# gradients: host where the path does not exist is refused, with the file and position
bad = os.path.join(work, "bad.yaml")
with open(bad, "w") as f:
    f.write("zero_optimization:\n  stage: 1\n  offload_optimizer: {device: cpu, gradients: host}\n")
p = ztlib.run(["config", bad])
ztlib.check(p.returncode != 0 and f"{bad}:3:" in p.stderr and "host needs zero_optimization.stage 2 or 3" in p.stderr
            and "it is stage 1" in p.stderr, "host_refused_at_stage_1", p.stderr[-500:])
p = ztlib.run(["config", cfg, "--set", "zero_optimization.stage=2", "--set",
               "zero_optimization.offload_optimizer={device: cpu, ratio: 0.5, gradients: host}"])
ztlib.check(p.returncode != 0 and "ratio < 1" in p.stderr, "host_refused_below_ratio_1", p.stderr[-500:])

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
