"""t_checkpoint.py — sharded HDF5 checkpoints end to end:
  - resume: 20 steps straight vs 10 + save + resume + 10 give identical losses (bit for bit), on 1
    and 2 ranks, stages 1-3;
  - reshard: saved on 4 ranks at stage 2, resumed on 2 ranks at stage 3 and on 1 rank at stage 0:
    the loss of the next step, computed on exactly the loaded weights, equals the straight 4-rank
    run's within a relative 1e-5 (other world sizes add the gradient sums in another order: fp32
    rounding shows up in the steps after); weights read back through the index's virtual datasets
    equal the export bit for bit, and an import of the export re-saves bit for bit;
  - crash safety: a run killed with SIGKILL while writing a checkpoint leaves `latest` on the
    previous complete one and resumes from it; a flipped byte in a shard is detected on load;
  - export: safetensors round trip is bit-exact in fp32 (import via model.init_from, re-saved), the
    exported files open with h5py / our safetensors reader, PyTorch's loss on the exported weights
    equals `zerotrain eval` on the checkpoint and on the export; h5dump -H -p shows the virtual datasets (-p prints the storage layout);
  - bad checkpoints: missing shard, foreign HDF5 file, other model shape: one clear error naming the
    file, training does not start."""
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time

import h5py
import numpy as np
import torch

import gpt2_ref
import ztlib

prefix = ztlib.ensure_shakespeare()
tiny = "configs/tiny.yaml"
tmp = tempfile.mkdtemp()


def ck(name):
    return os.path.join(tmp, name)


# ---- resume = uninterrupted, bit for bit
for ranks in (1, 2):
    for stage in (1, 2, 3):
        sets = [f"zero_optimization.stage={stage}"]
        _, straight = ztlib.train(tiny, sets, ranks=ranks)
        d = ck(f"resume_{ranks}_{stage}")
        m = d + ".jsonl"
        p1, _ = ztlib.train(tiny, sets + [f"checkpoint.dir={d}", "train_iters=10"], ranks=ranks, metrics=m)
        p2, rows = ztlib.train(tiny, sets + [f"checkpoint.dir={d}"], ranks=ranks, metrics=m)
        ok = p1.returncode == 0 and p2.returncode == 0 and "resumed from" in p2.stdout
        ztlib.check(ok and ztlib.losses(rows) == ztlib.losses(straight), f"resume_bit_identical_ranks{ranks}_stage{stage}",
                    f"{ztlib.losses(rows)[8:12]} vs {ztlib.losses(straight)[8:12]}; {p2.stderr[-800:]}")

# ---- with Twin-Flow offload (half of each rank's optimizer shard in host memory)
for ranks, stage in ((1, 2), (2, 3)):
    sets = [f"zero_optimization.stage={stage}", "zero_optimization.offload_optimizer.device=cpu",
            "zero_optimization.offload_optimizer.ratio=0.5"]
    _, straight = ztlib.train(tiny, sets, ranks=ranks)
    d = ck(f"offload_{ranks}_{stage}")
    m = d + ".jsonl"
    p1, _ = ztlib.train(tiny, sets + [f"checkpoint.dir={d}", "train_iters=10"], ranks=ranks, metrics=m)
    p2, rows = ztlib.train(tiny, sets + [f"checkpoint.dir={d}"], ranks=ranks, metrics=m)
    ztlib.check(p2.returncode == 0 and "resumed from" in p2.stdout and ztlib.losses(rows) == ztlib.losses(straight),
                f"resume_with_offload_bit_identical_ranks{ranks}_stage{stage}", p1.stderr[-500:] + p2.stderr[-800:])
# a checkpoint saved with offload resumes without it, and the other way round
d = ck("offload_to_none")
p1, _ = ztlib.train(tiny, ["zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu",
                           "zero_optimization.offload_optimizer.ratio=0.5", f"checkpoint.dir={d}", "train_iters=10"])
_, straight = ztlib.train(tiny, ["zero_optimization.stage=2"])
p2, rows = ztlib.train(tiny, ["zero_optimization.stage=2", f"checkpoint.dir={d}"])
ztlib.check(p2.returncode == 0 and ztlib.losses(rows) == ztlib.losses(straight)[10:], "offload_checkpoint_resumes_without_offload",
            f"{ztlib.losses(rows)[:3]} vs {ztlib.losses(straight)[10:13]} {p2.stderr[-500:]}")

# ---- reshard 4 ranks stage 2 -> 2 ranks stage 3 and 1 rank stage 0
src = ck("reshard")
p, _ = ztlib.train(tiny, ["zero_optimization.stage=2", f"checkpoint.dir={src}", "train_iters=10"], ranks=4)
_, straight4 = ztlib.train(tiny, ["zero_optimization.stage=2"], ranks=4)
with h5py.File(os.path.join(src, "step_00000010", "index.h5"), "r") as f:
    saved = {k: f[k][:] for k in ("master", "adam_m", "adam_v")}
for ranks, stage in ((2, 3), (1, 0)):
    d = ck(f"reshard_{ranks}_{stage}")
    shutil.copytree(src, d)
    d2 = ck(f"reshard_{ranks}_{stage}_resaved")
    p, rows = ztlib.train(tiny, [f"zero_optimization.stage={stage}", f"checkpoint.dir={d2}", f"checkpoint.resume={d}",
                                 "train_iters=11", "checkpoint.save_interval=1"], ranks=ranks)
    ok = p.returncode == 0 and "resharded from 4 ranks at ZeRO stage 2" in p.stdout
    ztlib.check(ok, f"reshard_to_ranks{ranks}_stage{stage}_runs", p.stdout[-600:] + p.stderr[-800:])
    # step 11's loss is computed on exactly the loaded weights
    got = ztlib.losses(rows)
    want = ztlib.losses(straight4)[10:11]
    ztlib.check(len(got) == 1 and abs(got[0] - want[0]) <= 1e-5 * abs(want[0]),
                f"reshard_to_ranks{ranks}_stage{stage}_next_loss", f"{got} vs {want}")
# ---- exact reload: export of the 4-rank checkpoint vs the index's virtual dataset
exp = ck("export")
p = ztlib.run(["export", src, "-o", exp])
ztlib.check(p.returncode == 0 and os.path.exists(os.path.join(exp, "model.safetensors")), "export_runs",
            p.stdout[-400:] + p.stderr[-800:])
tensors = gpt2_ref.read_safetensors(os.path.join(exp, "model.safetensors"))[0] if p.returncode == 0 else {}
cfg = {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 50257, "n_positions": 64}
flat = np.concatenate([np.asarray(tensors[n], dtype=np.float32).reshape(-1) for n, _ in gpt2_ref.param_shapes(cfg)]) \
    if tensors else np.zeros(0)
ztlib.check(flat.shape == saved["master"].shape and np.array_equal(flat, saved["master"]),
            "export_bit_exact_vs_virtual_dataset", f"{flat.shape} vs {saved['master'].shape}")
with h5py.File(os.path.join(src, "step_00000010", "index.h5"), "r") as f:
    ztlib.check(f["master"].is_virtual and "params" in f and
                np.array_equal(f["params/transformer.h.1.mlp.c_fc.weight"][:].reshape(-1),
                               np.asarray(tensors.get("transformer.h.1.mlp.c_fc.weight", np.zeros(1))).reshape(-1)),
                "h5py_reads_full_model_from_index", "virtual datasets missing or different")
h = subprocess.run(["h5dump", "-H", "-p", os.path.join(src, "step_00000010", "index.h5")], capture_output=True, text=True)
ztlib.check(h.returncode == 0 and "VIRTUAL" in h.stdout, "h5dump_shows_virtual_datasets", h.stdout[:400] + h.stderr[-300:])

# a failed export (a rank file cut short) leaves no directory behind (issue 31), in either format; a
# directory that was there before stays
cut = ck("export_cut_src")
shutil.copytree(os.path.join(src, "step_00000010"), cut)
os.truncate(os.path.join(cut, "rank_00000.h5"), 100000)
for fmt in ("safetensors", "hdf5"):
    out = ck(f"export_failed_{fmt}")
    p = ztlib.run(["export", cut, "-o", out, "--format", fmt])
    ztlib.check(p.returncode == 1 and p.stderr.count("zerotrain: error:") == 1 and "rank_00000.h5" in p.stderr
                and not os.path.exists(out), f"export_failed_{fmt}_leaves_no_directory",
                f"rc {p.returncode}, exists {os.path.exists(out)}: {p.stderr[-400:]}")
out = ck("export_failed_existing")
os.makedirs(out)
p = ztlib.run(["export", cut, "-o", out])
ztlib.check(p.returncode == 1 and os.path.isdir(out) and os.listdir(out) == [], "export_failed_keeps_existing_directory",
            f"rc {p.returncode}, {os.listdir(out) if os.path.isdir(out) else 'gone'}")

# import round trip: init_from the export, one step with lr 0 and no weight decay keeps the weights,
# the re-saved checkpoint equals the original bit for bit
d = ck("import")
p, _ = ztlib.train(tiny, [f"model.init_from={exp}", f"checkpoint.dir={d}", "train_iters=1",
                          "optimizer.params.lr=0", "optimizer.params.weight_decay=0", "scheduler.params.warmup_max_lr=0"])
ok = p.returncode == 0 and os.path.exists(os.path.join(d, "step_00000001", "index.h5"))
if ok:
    with h5py.File(os.path.join(d, "step_00000001", "index.h5"), "r") as f:
        ok = np.array_equal(f["master"][:], saved["master"])
ztlib.check(ok, "export_import_round_trip_bit_exact", p.stderr[-800:])

# PyTorch's loss on the exported weights == zerotrain eval on the checkpoint and on the export
val = prefix + "_val.bin"
e1 = ztlib.run(["eval", src, "--data", val, "--batch-size", "2", "--seq-len", "32", "--batches", "3"])
e2 = ztlib.run(["eval", exp, "--data", val, "--batch-size", "2", "--seq-len", "32", "--batches", "3"])
tok = np.fromfile(val, dtype=np.uint16, offset=1024).astype(np.int64)
params = {n: torch.tensor(np.asarray(tensors[n]), dtype=torch.float64) for n, _ in gpt2_ref.param_shapes(cfg)} \
    if tensors else {}
losses = []
for k in range(3):
    x = torch.tensor(tok[k * 64: k * 64 + 64]).view(2, 32)
    y = torch.tensor(tok[k * 64 + 1: k * 64 + 65]).view(2, 32)
    with torch.no_grad():
        losses.append(float(gpt2_ref.forward(params, cfg, x, y)[1])) if params else None
ref = sum(losses) / 3 if losses else float("nan")


def val_loss(p):
    for line in p.stdout.splitlines():
        if line.startswith("val_loss:"):
            return float(line.split()[1])
    return float("nan")


ztlib.check(abs(val_loss(e1) - ref) <= 1e-5 * ref and val_loss(e1) == val_loss(e2),
            "eval_checkpoint_equals_torch_and_export", f"{val_loss(e1)} {val_loss(e2)} torch {ref}; {e1.stderr[-500:]}")

# ---- crash safety: SIGKILL during a save
d = ck("crash")
big = ["model.n_embd=256", "model.n_head=4", "checkpoint.save_interval=1", f"checkpoint.dir={d}", "train_iters=50"]
proc = subprocess.Popen([ztlib.BIN, "train", tiny, *sum((["--set", s] for s in big), [])], cwd=ztlib.ROOT, env=ztlib.ENV,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
killed = False
deadline = time.time() + 120
while time.time() < deadline and proc.poll() is None:
    if os.path.exists(os.path.join(d, "latest")) and glob.glob(os.path.join(d, ".tmp_step_*")):
        os.killpg(proc.pid, signal.SIGKILL)
        killed = True
        break
    time.sleep(0.002)
proc.wait()
latest = open(os.path.join(d, "latest")).read().strip() if os.path.exists(os.path.join(d, "latest")) else ""
complete = os.path.exists(os.path.join(d, latest, "index.h5"))
info = ztlib.run(["info", d])
ztlib.check(killed and complete and info.returncode == 0, "sigkill_during_save_keeps_previous",
            f"killed {killed}, latest {latest!r}, {info.stdout[-300:]}{info.stderr[-300:]}")
p, rows = ztlib.train(tiny, big[:-1] + ["train_iters=" + str(int(latest[5:]) + 1 if latest else 1)])
ztlib.check(p.returncode == 0 and f"at step {int(latest[5:]) if latest else -1}" in p.stdout,
            "resume_after_crash", p.stdout[-400:] + p.stderr[-600:])

# ---- corruption and bad checkpoints
d = ck("corrupt")
shutil.copytree(src, d)
shard = os.path.join(d, "step_00000010", "rank_00001.h5")
data = bytearray(open(shard, "rb").read())
data[len(data) // 2] ^= 0x40
open(shard, "wb").write(bytes(data))
p = ztlib.run(["train", tiny, "--set", f"checkpoint.dir={d}", "--set", "zero_optimization.stage=2"], ranks=4)
err = [l for l in p.stderr.splitlines() if l.startswith("zerotrain: error:")]
ztlib.check(p.returncode != 0 and len(err) == 1 and "rank_00001.h5" in err[0] and "checksum" in err[0],
            "flipped_byte_detected", p.stderr[-600:])
d = ck("missing")
shutil.copytree(src, d)
os.unlink(os.path.join(d, "step_00000010", "rank_00002.h5"))
p = ztlib.run(["train", tiny, "--set", f"checkpoint.dir={d}"])
ztlib.check(p.returncode != 0 and "rank_00002.h5" in p.stderr and "step    1/" not in p.stdout, "missing_shard",
            p.stderr[-600:])
d = ck("foreign")
os.makedirs(os.path.join(d, "step_00000001"))
with h5py.File(os.path.join(d, "step_00000001", "index.h5"), "w") as f:
    f["x"] = np.arange(10)
open(os.path.join(d, "latest"), "w").write("step_00000001\n")
p = ztlib.run(["train", tiny, "--set", f"checkpoint.dir={d}"])
ztlib.check(p.returncode != 0 and "index.h5" in p.stderr and "not a zerotrain checkpoint" in p.stderr,
            "foreign_hdf5", p.stderr[-600:])
p = ztlib.run(["train", tiny, "--set", f"checkpoint.dir={src}", "--set", "model.n_embd=64"])
ztlib.check(p.returncode != 0 and "different model" in p.stderr and "step    1/" not in p.stdout,
            "other_model_shape", p.stderr[-600:])
ztlib.finish()
