"""t_tp_checkpoint.py — checkpoints under tensor parallelism (the tiny config with 4 heads):
  - saved at tp 2 (2 ranks) and tp 2 x dp 2 (4 ranks, ZeRO stages 1 and 3), index.h5 still presents
    whole tensors: h5py's params/NAME and the flat master, adam_m, adam_v equal the tp-1 run's
    checkpoint of the same step (step 1: the warm-up's lr is 0, so the master weights are the init;
    the moments differ by the fp32 rounding of the split sums: 1e-6) and `zerotrain export` bit for bit;
  - resume across tensor-parallel sizes: tp 2 -> tp 1, tp 1 -> tp 4 (4 ranks) and tp 2 x dp 2 stage 3
    -> tp 1 stage 0 continue the straight tp-1 run's losses within a relative 1e-5;
  - `zerotrain info` verifies a tp checkpoint and says how it was split; a flipped byte in a tp rank's
    file is refused by info and by a resume at another tp size, naming that file;
  - the guard: a copy of a tensor every tp rank holds whole that differs on one tp rank
    (ZEROTRAIN_INJECT_TP_DIVERGE) fails the save with one line naming the tensor; nothing is published."""
import os
import shutil
import tempfile

import h5py
import numpy as np

import gpt2_ref
import ztlib

ztlib.ensure_shakespeare()
cfg = "configs/tiny.yaml"
HEADS = ["model.n_head=4"]
tmp = tempfile.mkdtemp()


def ck(name):
    return os.path.join(tmp, name)


def train(name, tp, dp, sets, **kw):
    p, rows = ztlib.train(cfg, HEADS + [f"tensor_parallel.tp_size={tp}"] + list(sets), ranks=tp * dp if tp * dp > 1 else 0,
                          **kw)
    ztlib.check(p.returncode == 0, name + "_runs", p.stdout[-600:] + p.stderr[-1200:])
    return p, rows


def index(d, step):
    return os.path.join(d, f"step_{step:08d}", "index.h5")


def read_index(path):
    with h5py.File(path, "r") as f:
        return ({k: f[k][:] for k in ("master", "adam_m", "adam_v")}, {n: f["params"][n][:] for n in f["params"]},
                dict(f.attrs))


def max_diff(a, b):
    """largest |a - b| over the flat vectors and tensors of two read_index results (inf on a shape mismatch)"""
    d = 0.0
    for x, y in list(zip(a[0].values(), b[0].values())) + [(a[1][n], b[1].get(n)) for n in a[1]]:
        if y is None or x.shape != y.shape:
            return float("inf")
        d = max(d, float(np.max(np.abs(x - y))))  # NaN (an unmapped element) compares as not <= tol
    return d if len(a[1]) == len(b[1]) else float("inf")


# the straight tp-1 run (checkpoints at steps 10 and 20), and the tp-1 checkpoint of step 1
straight_dir = ck("tp1")
_, straight = train("tp1_straight", 1, 1, [f"checkpoint.dir={straight_dir}", "checkpoint.save_interval=10"])
base = ztlib.losses(straight)
train("tp1_step1", 1, 1, [f"checkpoint.dir={ck('tp1_step1')}", "train_iters=1"])
ref = read_index(index(ck("tp1_step1"), 1))

# ---- saved at tp 2 and tp 2 x dp 2: whole tensors in the index
tp2 = ck("tp2")
_, rows = train("tp2_save", 2, 1, [f"checkpoint.dir={tp2}", "train_iters=10", "checkpoint.save_interval=1"])
for name, d, tp, dp, stage in (("tp2", tp2, 2, 1, 0), ("tp2_dp2_stage1", ck("tp2dp2s1"), 2, 2, 1),
                               ("tp2_dp2_stage3", ck("tp2dp2s3"), 2, 2, 3)):
    if d != tp2:
        train(name + "_save", tp, dp, [f"checkpoint.dir={d}", "train_iters=1", f"zero_optimization.stage={stage}"])
    if not os.path.exists(index(d, 1)):
        continue
    got = read_index(index(d, 1))
    diff = max_diff(got, ref)
    ztlib.check(diff <= 1e-6 and np.array_equal(got[0]["master"], ref[0]["master"]),
                f"{name}_index_whole_tensors_equal_tp1 ({diff:.1e})", f"max difference {diff}")
    ztlib.check(got[2].get("tensor_parallel") == tp and got[2].get("world_size") == tp * dp and
                got[2].get("format_version") == 3, f"{name}_index_attributes", str({k: got[2].get(k) for k in
                                                                                  ("tensor_parallel", "world_size", "format_version")}))
    exp = ck(name + "_export")
    p = ztlib.run(["export", d, "-o", exp])
    if ztlib.check(p.returncode == 0, f"{name}_export_runs", p.stderr[-800:]):
        tensors = gpt2_ref.read_safetensors(os.path.join(exp, "model.safetensors"))[0]
        latest = read_index(index(d, 10 if d == tp2 else 1))
        same = all(np.array_equal(np.asarray(tensors[n]).reshape(-1), x.reshape(-1)) for n, x in latest[1].items())
        ztlib.check(same and len(tensors) == len(latest[1]), f"{name}_export_equals_index_params", "tensors differ")

# ---- resume across tensor-parallel sizes
_, rows = train("tp2_to_tp1_resume", 1, 1, [f"checkpoint.dir={ck('tp2_to_tp1')}", f"checkpoint.resume={tp2}"])
d = ztlib.max_rel_diff(ztlib.losses(rows), base[10:])
ztlib.check(d <= 1e-5, f"tp2_to_tp1_continues_straight_run ({d:.1e})", f"max relative difference {d}")

p, rows = train("tp1_to_tp4_resume", 4, 1, [f"checkpoint.dir={ck('tp1_to_tp4')}",
                                            f"checkpoint.resume={os.path.join(straight_dir, 'step_00000010')}"])
d = ztlib.max_rel_diff(ztlib.losses(rows), base[10:])
ztlib.check(d <= 1e-5 and "tensor parallel 4" in p.stdout, f"tp1_to_tp4_continues_straight_run ({d:.1e})",
            f"max relative difference {d}; {p.stdout[-300:]}")

_, rows = train("tp2dp2_stage3_to_tp1_resume", 1, 1, [f"checkpoint.dir={ck('s3_to_tp1')}",
                                                      f"checkpoint.resume={ck('tp2dp2s3')}", "train_iters=5"])
d = ztlib.max_rel_diff(ztlib.losses(rows), base[1:5])
ztlib.check(d <= 1e-5, f"tp2dp2_stage3_to_tp1_continues_straight_run ({d:.1e})", f"max relative difference {d}")

# ---- info verifies; a flipped byte in a tp rank's file is refused, naming it
r = ztlib.info(tp2)
ztlib.check(r.rc == 0 and "integrity: OK" in r.stdout and "tensor parallel: 2 ranks a group" in r.stdout,
            "info_verifies_tp_checkpoint", r.stdout[-600:] + r.stderr[-600:])
bad = ck("corrupt")
shutil.copytree(tp2, bad)
shard = os.path.join(bad, "step_00000010", "rank_00001.h5")
with h5py.File(shard, "r") as f:
    at = f["adam_v"].id.get_offset() + 4 * 1000
with open(shard, "r+b") as f:
    f.seek(at)
    b = f.read(1)
    f.seek(at)
    f.write(bytes([b[0] ^ 0x40]))
r = ztlib.info(bad)
ztlib.check(r.rc != 0 and "CORRUPT" in r.stdout and "rank_00001.h5: checksum mismatch in dataset adam_v" in r.stderr,
            "info_refuses_corrupt_tp_rank_file", r.stdout[-300:] + r.stderr[-600:])
p, _ = ztlib.train(cfg, HEADS + [f"checkpoint.dir={ck('corrupt_resume')}", f"checkpoint.resume={bad}"])
ztlib.check(p.returncode != 0 and "rank_00001.h5: checksum mismatch in dataset adam_v" in p.stderr,
            "resume_refuses_corrupt_tp_rank_file", p.stderr[-600:])

# ---- the guard: a whole tensor that differs between tp ranks fails the save, naming it
g = ck("guard")
p = ztlib.run(["train", cfg, "--set", "model.n_head=4", "--set", "tensor_parallel.tp_size=2", "--set",
               f"checkpoint.dir={g}", "--set", "train_iters=2"], ranks=2, env={"ZEROTRAIN_INJECT_TP_DIVERGE": "1"})
lines = [ln for ln in p.stderr.splitlines() if "error:" in ln]
ztlib.check(p.returncode != 0 and len(lines) == 1 and "master of transformer.ln_f.bias differs between tensor-parallel "
            "ranks 0 and 1" in lines[0] and not os.path.exists(os.path.join(g, "latest")),
            "guard_refuses_divergent_whole_tensor", p.stderr[-800:])

shutil.rmtree(tmp, ignore_errors=True)
ztlib.finish()
