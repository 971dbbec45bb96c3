"""t_train.py — single-rank training end to end on the CPU backend: learning, determinism,
activation checkpointing, metrics, the demo config on real text, and every bad-input case of the
trainer (bad shards, batch rule, config errors, model states that do not fit in memory) with 1 and
2 ranks: one clear line naming the file, a non-zero exit on every rank, no hang."""
import json
import math
import os
import resource
import signal
import struct
import subprocess
import tempfile

import ztlib

prefix = ztlib.ensure_shakespeare()
tiny = "configs/tiny.yaml"

# learning, determinism, checkpointing
p1, r1 = ztlib.train(tiny)
l1 = ztlib.losses(r1)
ztlib.check(p1.returncode == 0 and len(l1) == 20, "tiny_trains", p1.stderr[-2000:])
ztlib.check(l1 and l1[-1] < l1[0] - 1.0, "tiny_loss_falls", f"{l1[:1]} -> {l1[-1:]}")
p2, r2 = ztlib.train(tiny)
ztlib.check(ztlib.losses(r2) == l1, "same_seed_bit_identical_trajectory", "trajectories differ")
p3, r3 = ztlib.train(tiny, ["activation_checkpointing.enabled=true"])
ztlib.check(ztlib.losses(r3) == l1, "checkpointing_bit_identical_trajectory", "trajectories differ")
ztlib.check("activations:" in p3.stdout and "without checkpointing" in p3.stdout, "checkpointing_memory_logged",
            p3.stdout[-1500:])
p4, r4 = ztlib.train(tiny, ["seed=99"])
ztlib.check(ztlib.losses(r4) != l1, "other_seed_other_trajectory", "same losses for another seed")
keys = {"step", "loss", "lr", "grad_norm", "step_ms", "tokens_per_s"}
ztlib.check(r1 and keys <= set(r1[0]), "metrics_keys", f"{sorted(r1[0]) if r1 else None}")
p5, r5 = ztlib.train(tiny, ["eval_interval=10", "eval_batches=2"])
ztlib.check(sum("val_loss" in r for r in r5) == 2 and " val " in p5.stdout, "val_loss_every_eval_interval",
            str(r5[-1:]))
p6, r6 = ztlib.train(tiny, ranks=1)
ztlib.check(p6.returncode == 0 and ztlib.losses(r6) == l1, "mpirun_np1_same_as_alone", p6.stderr[-1500:])
ztlib.check("step    20/20 (100%)" in p1.stdout and "tok/s" in p1.stdout and "GFLOP/s" in p1.stdout,
            "step_log_line", p1.stdout[-600:])

# the demo config learns on real text: well below ln(V) = 10.82 within 150 steps
pd, rd = ztlib.train("configs/demo.yaml", ["train_iters=150", "eval_interval=0", "sample_tokens=0",
                                           f"data.train={prefix}_train_*.bin", f"data.val={prefix}_val.bin",
                                           "zero_optimization.stage=0",
                                           "scheduler.params.total_num_steps=150"], timeout=600)
ld = ztlib.losses(rd)
ztlib.check(pd.returncode == 0 and ld and ld[-1] < 7.0 < math.log(50257), "demo_config_learns",
            f"last loss {ld[-1:]}; {pd.stderr[-1500:]}")

# bad shards
tmp = tempfile.mkdtemp()
good = open(prefix + "_val.bin", "rb").read()


def shard(name, data):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


header = list(struct.unpack("<256i", good[:1024]))
bad_magic = shard("bad_magic.bin", struct.pack("<256i", 12345, *header[1:]) + good[1024:])
bad_version = shard("bad_version.bin", struct.pack("<256i", header[0], 7, *header[2:]) + good[1024:])
truncated = shard("truncated.bin", good[: len(good) - 1000])
short_header = shard("short_header.bin", good[:100])
# tokens are checked as their windows are read (io/data.h): one every 16 outside the vocabulary, so the
# first batch meets one
big = bytearray(good)
for i in range(1024 + 200, len(big) - 1, 32):
    big[i:i + 2] = struct.pack("<H", 60000)
big_token = shard("big_token.bin", bytes(big))
cases = [("bad_magic", bad_magic, "magic"), ("bad_version", bad_version, "version"),
         ("truncated", truncated, "truncated"), ("short_header", short_header, ""),
         ("token_out_of_vocab", big_token, "vocab"), ("no_match", os.path.join(tmp, "nothing_*.bin"), "no token shard")]
for ranks in (0, 2):
    for name, path, word in cases:
        p = ztlib.run(["train", tiny, "--set", f"data.train={path}"], ranks=ranks, timeout=60)
        err = p.stderr.strip().splitlines()
        errline = [l for l in err if l.startswith("zerotrain: error:")]
        ok = p.returncode != 0 and len(errline) == 1 and os.path.basename(path) in errline[0] and word in errline[0]
        ztlib.check(ok, f"bad_shard_{name}_ranks{max(ranks, 1)}", f"rc {p.returncode}, stderr: {p.stderr[-600:]}")

# batch rule and config errors, on 2 ranks (every rank exits non-zero, one error line)
p = ztlib.run(["train", tiny, "--set", "train_micro_batch_size_per_gpu=3"], ranks=2, timeout=60)
ztlib.check(p.returncode != 0 and "train_batch_size 8" in p.stderr and "3" in p.stderr and "2" in p.stderr,
            "batch_rule_names_numbers", p.stderr[-600:])
cfgfile = os.path.join(tmp, "bad_stage.yaml")
with open(tiny) as f:
    text = f.read().replace("zero_optimization: {stage: 0}", "zero_optimization: {stage: 4}")
with open(cfgfile, "w") as f:
    f.write(text)
p = ztlib.run(["train", cfgfile], ranks=2, timeout=60)
line = [l for l in p.stderr.splitlines() if l.startswith("zerotrain: error:")]
ztlib.check(p.returncode != 0 and len(line) == 1 and f"{cfgfile}:" in line[0] and "stage" in line[0],
            "stage_out_of_range_file_line_col", p.stderr[-600:])

# model states that do not fit: under a 3 GiB address-space limit a 203M-parameter model (3.02 GiB
# of fp32 model states at stage 0) fails on every rank with one line naming what it needed
def limit_3gib():
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


for ranks in (1, 2):
    cmd = [ztlib.BIN, "train", tiny, "--set", "model.n_layer=12", "--set", "model.n_head=16", "--set",
           "model.n_embd=1024"]
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none"] + cmd
    p = subprocess.run(cmd, cwd=ztlib.ROOT, env=ztlib.ENV, capture_output=True, text=True, timeout=120,
                       preexec_fn=limit_3gib)
    line = [l for l in p.stderr.splitlines() if l.startswith("zerotrain: error:")]
    ztlib.check(p.returncode != 0 and len(line) == 1 and "out of cpu memory for model states" in line[0]
                and "needs about 3.02 GiB" in line[0], f"model_states_out_of_memory_ranks{ranks}", p.stderr[-800:])
# a run stopped by a signal with no checkpoint.dir says nothing was saved (a requeue starts over), and
# still exits 99 (issue 48, 8: it said "requeue to resume")
proc = subprocess.Popen([ztlib.BIN, "train", "configs/tiny.yaml", "--set", "train_iters=100000", "--set",
                         "steps_per_print=1"], cwd=ztlib.ROOT, env=ztlib.ENV, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True)
seen = []
for out_line in proc.stdout:  # waits on the run's own state: its first step line
    seen.append(out_line)
    if out_line.startswith("step "):
        proc.send_signal(signal.SIGINT)
        break
rest = proc.communicate(timeout=120)[0]
ztlib.check(proc.returncode == 99 and "nothing saved (no checkpoint.dir), so a requeued run starts over" in rest
            and "requeue to resume" not in rest, "signal_without_checkpoint_dir_says_nothing_saved",
            f"rc {proc.returncode}: {(''.join(seen) + rest)[-600:]}")
ztlib.finish()
