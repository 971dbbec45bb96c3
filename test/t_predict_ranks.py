#!/usr/bin/env python3
"""t_predict_ranks.py — `zerotrain predict --ranks N [--tp T]`: one process standing for one rank of N,
the collectives costed from the profile's network section (src/comm/comm_costed.c).

Nothing here reads a wall clock: every time checked is a prediction, deterministic by construction.
  - traffic per rank follows the known formulas, per element of a transformer block (told apart by
    predicting 4 and 8 layers): ZeRO-2 sends 2 per element (reduce-scatter of the gradients,
    all-gather of the updated parameters), ZeRO-3 3 (all-gathers in forward and backward, the
    reduce-scatter), times (n-1)/n x 2 bytes;
  - more ranks within a node: each rank's optimizer shard is smaller, so its device AdamW is shorter;
  - crossing a node boundary slows the collectives: 16 ranks on two A100 nodes of 8 spend longer on
    the comm lane than the same 16 on one node of 16 (the inter-node links bind);
  - per-rank memory equals `estimate`'s row for the same config and ranks (ZeRO-3, the optimizer on
    the device and on the host; ZeRO-2; ZeRO-3 with --tp 2);
  - tokens/s are the global batch's, TFLOP/s per GPU;
  - tensor parallelism: --tp 2 predicts, with its group's all-reduces on the tensor-parallel line;
  - bad layouts are refused with one line (--tp not dividing --ranks, --ranks not a number, --perform
    with several ranks);
  - the 512-rank ZeRO-3 layout of a 20B model (configs/predict_20b_512.yaml, 64 nodes x 8) predicts
    within the runner's timeout and 1 GiB resident, its per-rank memory equal to estimate's."""
import os
import re
import resource
import tempfile

import ztlib

ztlib.ensure_shakespeare()
cfg = os.path.join(ztlib.ROOT, "configs", "tiny.yaml")
work = tempfile.mkdtemp(prefix="zt_predict_ranks_")
WIDER = ["model.n_embd=256", "model.n_head=4", "train_batch_size=16"]
MiB = 1048576.0


def predict(ranks, sets=(), extra=(), hw="dgx-h100", config=cfg):
    args = ["predict", config, "--hw", hw, "--ranks", str(ranks)] + list(extra)
    for s in sets:
        args += ["--set", s]
    p = ztlib.run(args, timeout=600)
    out = {"ok": p.returncode == 0, "p": p}
    m = re.search(r"step time\s+([0-9.]+) ms", p.stdout)
    if m and p.returncode == 0:
        out["ms"] = float(m[1])
        out["tokens_s"] = float(re.search(r"tokens/s\s+([0-9.]+)", p.stdout)[1])
        out["comm_busy"] = float(re.search(r"^\s+comm\s+([0-9.]+) %", p.stdout, re.M)[1]) / 100 * out["ms"]
        mem = re.search(r"memory per rank\s+device ([0-9.]+) MiB, host ([0-9.]+) MiB", p.stdout)
        out["device"], out["host"] = float(mem[1]) * MiB, float(mem[2]) * MiB
        for group in ("data-parallel", "tensor-parallel"):
            g = re.search(group + r"\s+[0-9.]+ MB sent a step \(group of \d+\):(.*)$", p.stdout, re.M)
            if g:
                out[group] = {k: float(v) * 1e6 for k, v in re.findall(r"(\w+) ([0-9.]+)", g[1])}
    return out


# ---- traffic per element of a block: ZeRO-2 2, ZeRO-3 3 (x (n-1)/n x 2 bytes)
C, N = 256, 8
block = 2 * 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + (C * 4 * C + 4 * C) + (4 * C * C + C)
per_block_elem = (N - 1) / N * 2  # bytes each rank sends per element per pass, bf16
for stage, want in ((2, {"reduce_scatter": 1, "allgather": 1}), (3, {"reduce_scatter": 1, "allgather": 2})):
    # reuse distance 0: stage 3 gathers every block again in backward, as the formula counts
    sets = WIDER + [f"zero_optimization.stage={stage}", "zero_optimization.stage3_max_reuse_distance=0"]
    a, b = predict(N, sets + ["model.n_layer=4"]), predict(N, sets + ["model.n_layer=8"])
    ok = a["ok"] and b["ok"] and "data-parallel" in a and "data-parallel" in b
    got = {k: (b["data-parallel"][k] - a["data-parallel"][k]) / (4 * block * per_block_elem) for k in want} if ok else {}
    ztlib.check(ok and all(abs(got[k] - want[k]) < 0.002 for k in want), f"zero{stage}_bytes_per_block_element",
                f"passes per element {got}, want {want}" if ok else (a["p"].stderr + b["p"].stderr)[-400:])

# ---- more ranks within a node: a smaller optimizer shard per rank, a shorter device AdamW
def adamw_us(trace):
    import json
    with open(trace) as f:
        events = json.load(f)
    return sum(e["dur"] for e in events if e.get("ph") == "X" and e.get("name") == "adamw")


adam = {}
for n in (2, 8):
    trace = os.path.join(work, f"adam{n}.json")
    r = predict(n, WIDER + ["model.n_layer=4", "zero_optimization.stage=2"], ["--steps", "1", "--trace", trace])
    path = trace.replace(".json", ".rank0.json")
    adam[n] = adamw_us(path) if r["ok"] and os.path.exists(path) else None
ztlib.check(adam[2] and adam[8] and 3.0 < adam[2] / adam[8] < 4.5, "more_ranks_less_optimizer_work_per_rank",
            f"device AdamW per step: {adam[2]} us on 2 ranks, {adam[8]} us on 8")

# ---- crossing a node boundary: the same 16 ranks on one node of 16 and on two nodes of 8
# (a100-40gb: NVSwitch 230 GB/s within a node, 20 GB/s a GPU between nodes)
with open(os.path.join(ztlib.ROOT, "configs", "hw", "a100-40gb.yaml")) as f:
    a100 = f.read()
wide_node = os.path.join(work, "node16.yaml")
with open(wide_node, "w") as f:
    f.write(re.sub(r"(?m)^  gpus_per_node: 8\b", "  gpus_per_node: 16", a100).replace("name: a100-40gb", "name: node16"))
# a model whose gathers are large enough for bandwidth, not latency, to decide their time
sets = ["model.n_embd=1024", "model.n_head=16", "model.n_layer=4", "zero_optimization.stage=3", "train_batch_size=32"]
one, two = predict(16, sets, hw=wide_node), predict(16, sets, hw="a100-40gb")
ztlib.check(one["ok"] and two["ok"] and two["comm_busy"] > 3 * one["comm_busy"] and two["ms"] > one["ms"],
            "node_boundary_slows_collectives",
            f"comm lane {one.get('comm_busy')} ms a step on one node, {two.get('comm_busy')} ms on two; step "
            f"{one.get('ms')} vs {two.get('ms')} ms" if one["ok"] and two["ok"] else (one["p"].stderr + two["p"].stderr)[-400:])
# the same volume either way: only the links differ
ztlib.check(one["ok"] and two["ok"] and one["data-parallel"] == two["data-parallel"], "node_boundary_same_traffic",
            f"{one.get('data-parallel')} vs {two.get('data-parallel')}")

# ---- per-rank memory equals estimate's
ROW = re.compile(r"^(\d)\s+(\S+)\s+(\S+)\s+[\d.]+ (MiB|GiB)\s+([\d.]+) (?:MiB|GiB)\s+([\d.]+) (?:MiB|GiB)")


def estimate_rows(ranks, sets, config=cfg, extra=()):
    args = ["estimate", config, "--ranks", str(ranks)] + list(extra)
    for s in sets:
        args += ["--set", s]
    p = ztlib.run(args)
    rows = {}
    for line in p.stdout.splitlines():
        m = ROW.match(line)
        if m:
            unit = MiB if m[4] == "MiB" else 1024 * MiB
            rows[(int(m[1]), m[2], m[3])] = (float(m[5]) * unit, float(m[6]) * unit, unit)
    return rows


base = WIDER + ["model.n_layer=4"]
rows = estimate_rows(N, base)
for stage, opt in ((3, "device"), (3, "cpu"), (2, "device")):
    sets = base + [f"zero_optimization.stage={stage}"] + (["zero_optimization.offload_optimizer.device=cpu"] if opt == "cpu" else [])
    r = predict(N, sets)
    want = rows.get((stage, opt, "device"))
    near = r["ok"] and want and abs(r["device"] - want[0]) <= 0.011 * want[2] and abs(r["host"] - want[1]) <= 0.011 * want[2]
    ztlib.check(near, f"memory_per_rank_equals_estimate_zero{stage}_{opt}",
                f"predict device {r.get('device', 0) / MiB:.2f} MiB host {r.get('host', 0) / MiB:.2f} MiB; estimate "
                f"{want[0] / MiB if want else None} / {want[1] / MiB if want else None} MiB" if r["ok"] else r["p"].stderr[-400:])

# tensor parallelism too: 4 data-parallel x 2 tensor-parallel, stage 3
sets = base + ["zero_optimization.stage=3", "train_batch_size=8"]
r, want = predict(N, sets, ["--tp", "2"]), estimate_rows(N, sets, extra=["--tp", "2"]).get((3, "device", "device"))
ztlib.check(r["ok"] and want and abs(r["device"] - want[0]) <= 0.011 * want[2], "memory_per_rank_equals_estimate_tp2_zero3",
            f"predict {r.get('device', 0) / MiB:.2f} MiB, estimate {want[0] / MiB if want else None} MiB" if r["ok"] else r["p"].stderr[-400:])

# ---- tokens/s are global, TFLOP/s per GPU
r8 = predict(N, base + ["zero_optimization.stage=1"])
ztlib.check(r8["ok"] and abs(r8["tokens_s"] * r8["ms"] / 1e3 - 16 * 32) < 0.01 * 16 * 32 and "per GPU" in r8["p"].stdout,
            "tokens_global_flops_per_gpu", r8["p"].stdout[-600:])

# ---- tensor parallelism: its group's all-reduces
t = predict(8, base + ["zero_optimization.stage=1", "train_batch_size=8"], ["--tp", "2"])
ztlib.check(t["ok"] and "tensor-parallel" in t and t["tensor-parallel"]["allreduce"] > 0
            and "data-parallel 4 x tensor-parallel 2" in t["p"].stdout, "tensor_parallel_layout",
            t["p"].stdout[-600:] + t["p"].stderr[-400:])

# ---- bad layouts, one line each
bad = predict(8, base, ["--tp", "3"])
ztlib.check(not bad["ok"] and "--tp 3 must divide --ranks 8" in bad["p"].stderr, "tp_not_dividing_refused",
            bad["p"].stderr[-300:])
bad = predict("8x", base)
ztlib.check(not bad["ok"] and "--ranks: expected a number of ranks" in bad["p"].stderr, "ranks_not_a_number_refused",
            bad["p"].stderr[-300:])
bad = predict(8, base, ["--perform"])
ztlib.check(not bad["ok"] and "--perform takes one rank" in bad["p"].stderr, "perform_with_ranks_refused",
            bad["p"].stderr[-300:])

# ---- 512 ranks of a 20B model: bounded, and its per-rank memory equal to estimate's
big = os.path.join(ztlib.ROOT, "configs", "predict_20b_512.yaml")
r = predict(512, (), config=big)
rows = estimate_rows(512, (), config=big)
want = rows.get((3, "device", "device"))
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1048576.0  # GiB: the largest child so far
ztlib.check(r["ok"] and "64 nodes" in r["p"].stdout and rss < 1.0, "predict_512_ranks_20b_bounded",
            f"peak resident {rss:.2f} GiB; " + (r["p"].stdout[-300:] if r["ok"] else r["p"].stderr[-400:]))
ztlib.check(r["ok"] and want and abs(r["device"] - want[0]) <= 0.006 * want[2], "predict_512_ranks_memory_equals_estimate",
            f"predict {r.get('device', 0) / MiB:.2f} MiB, estimate {want[0] / MiB if want else None} MiB")

ztlib.finish()
