"""t_zero_launch.py — ZeRO memory accounting, stage-3 release, the launcher, the estimator and a
dying rank:
  - per-rank model-state bytes equal the ZeRO formulas (fp32 CPU backend: P = 4 bytes of params and
    of grads, K = 8 bytes of Adam moments, the master aliasing the params) for 1, 2 and 4 ranks,
    computed here independently from the parameter count and the stated padding (shard = ceil(Ψ/N)
    rounded up to 128 elements);
  - stage 3 holds at most a shard plus the gathered segments in use (embeddings + two blocks), never
    the whole model;
  - `zerotrain run` starts mpirun (also with a DeepSpeed-style hostfile) and prints the command;
  - `zerotrain estimate` lists every stage/offload setting and says which fit (its offload and NVMe
    rows and the Twin-Flow ratio window against hand-computed numbers: t_estimate.py);
  - a rank killed with SIGKILL mid-run makes every rank exit, non-zero, within 30 s."""
import os
import re
import signal
import subprocess
import tempfile
import time

import ztlib

ztlib.ensure_shakespeare()
tiny = "configs/tiny.yaml"
MiB = 1048576.0

# parameter count of the tiny config (L2 H2 C32 V50257 P64), from the model's definition
L, C, V, NP = 2, 32, 50257, 64
total = V * C + NP * C + L * (12 * C * C + 13 * C) + 2 * C
seg0 = V * C + NP * C
block = 12 * C * C + 13 * C
P, K = 4, 8
for ranks in (1, 2, 4):
    shard = -(-total // ranks)
    shard = -(-shard // 128) * 128
    psi = shard * ranks
    expect = {0: (2 * P + K) * psi, 1: 2 * P * psi + K * shard, 2: P * psi + (P + K) * shard, 3: (2 * P + K) * shard}
    for stage in range(4):
        p, rows = ztlib.train(tiny, [f"zero_optimization.stage={stage}", "train_iters=2"], ranks=ranks)
        m = re.search(r"model states: ([0-9.]+) MiB allocated, ZeRO formula ([0-9.]+) MiB", p.stdout)
        ok = m and abs(float(m.group(1)) - expect[stage] / MiB) < 0.05 and m.group(1) == m.group(2)
        ztlib.check(bool(ok), f"model_state_bytes_stage{stage}_ranks{ranks}",
                    f"expected {expect[stage] / MiB:.1f} MiB, log: {m.group(0) if m else p.stdout[-800:] + p.stderr[-800:]}")

# stage 3 releases gathered parameters: a deep model with a small vocabulary (so that blocks, not the
# embeddings, hold the parameters) on a synthetic shard of tokens < 256
import struct, random
tmpd = tempfile.mkdtemp()
synth = os.path.join(tmpd, "synth.bin")
random.seed(5)
toks = [random.randrange(256) for _ in range(20000)]
with open(synth, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)) + struct.pack(f"<{len(toks)}H", *toks))
L, C, V = 12, 64, 256
total = V * C + NP * C + L * (12 * C * C + 13 * C) + 2 * C
seg0, block = V * C + NP * C, 12 * C * C + 13 * C
for ranks in (2, 4):
    shard = -(-(-(-total // ranks)) // 128) * 128
    p, rows = ztlib.train(tiny, ["zero_optimization.stage=3", "train_iters=2", f"data.train={synth}", "data.val=",
                                 "zero_optimization.stage3_param_persistence_threshold=1000",
                                 "zero_optimization.stage3_prefetch_bucket_size=1",  # one block ahead
                                 f"model.vocab_size={V}", f"model.n_layer={L}", f"model.n_embd={C}"], ranks=ranks)
    peak = rows[-1]["params_peak_mib"] * MiB if rows else float("inf")
    bound = 4 * (shard + seg0 + 2 * block + 2 * C)  # + the final LayerNorm, persistent under the threshold
    ztlib.check(peak <= bound + 0.0005 * MiB and peak < 0.75 * 4 * total, f"stage3_releases_params_ranks{ranks}",  # %.3f MiB
                f"peak {peak / MiB:.2f} MiB, bound {bound / MiB:.2f}, whole model {4 * total / MiB:.2f}; "
                + p.stderr[-600:])

# launcher
tmp = tempfile.mkdtemp()
metrics = os.path.join(tmp, "m.jsonl")
p = ztlib.run(["run", "-n", "2", tiny, "--set", "train_iters=3", "--set", f"metrics_file={metrics}"])
ok = p.returncode == 0 and "zerotrain run:" in p.stdout and "mpirun -np 2" in p.stdout and \
    len(open(metrics).read().splitlines()) == 3
ztlib.check(ok, "run_launcher_mpirun", p.stdout[-800:] + p.stderr[-800:])
hostfile = os.path.join(tmp, "hostfile")
with open(hostfile, "w") as f:
    f.write("localhost slots=2\n")
p = ztlib.run(["run", "-n", "2", "--hostfile", hostfile, tiny, "--set", "train_iters=2",
               "--set", f"metrics_file={metrics}"])
ztlib.check(p.returncode == 0 and f"--hostfile {hostfile}" in p.stdout, "run_launcher_hostfile",
            p.stdout[-800:] + p.stderr[-800:])
p = ztlib.run(["run", "-n", "2", "--hostfile", os.path.join(tmp, "missing"), tiny])
ztlib.check(p.returncode != 0 and "missing" in p.stderr, "run_launcher_missing_hostfile", p.stderr[-400:])

# estimator
p = ztlib.run(["estimate", "configs/gpu_124m.yaml", "--ranks", "8"])
rows = [l for l in p.stdout.splitlines() if re.match(r"^[0-3] ", l)]
ztlib.check(p.returncode == 0 and len(rows) == 10 and all(l.endswith("yes") for l in rows), "estimate_table",
            p.stdout[-1500:] + p.stderr[-500:])
p = ztlib.run(["estimate", "configs/gpu_124m.yaml", "--ranks", "8", "--device-mem", "1GiB"])
ztlib.check(p.returncode == 0 and all(l.endswith("no") for l in p.stdout.splitlines() if re.match(r"^[0-3] ", l)),
            "estimate_does_not_fit", p.stdout[-1500:])
p = ztlib.run(["estimate", "configs/gpu_124m.yaml", "--ranks", "3"])
ztlib.check(p.returncode != 0 and "train_micro_batch_size_per_gpu" in p.stderr or p.returncode == 0,
            "estimate_checks_batch_rule", p.stderr[-500:])
p = ztlib.run(["estimate", "configs/gpu_124m.yaml", "--ranks", "8", "--device-mem", "lots"])
ztlib.check(p.returncode == 2 and "lots" in p.stderr, "estimate_bad_argument", p.stderr[-400:])

# a rank dies: every rank exits non-zero promptly
metrics = os.path.join(tmp, "kill.jsonl")
cmd = ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", ztlib.BIN, "train", tiny,
       "--set", "train_iters=100000", "--set", f"metrics_file={metrics}", "--set", "steps_per_print=1000"]
proc = subprocess.Popen(cmd, cwd=ztlib.ROOT, env=ztlib.ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
deadline = time.time() + 60
while time.time() < deadline and (not os.path.exists(metrics) or len(open(metrics).read().splitlines()) < 3):
    time.sleep(0.2)
ranks_pids = subprocess.run(["pgrep", "-P", str(proc.pid), "-f", "zerotrain train"], capture_output=True,
                            text=True).stdout.split()
killed_at = time.time()
if ranks_pids:
    os.kill(int(ranks_pids[-1]), signal.SIGKILL)
try:
    rc = proc.wait(timeout=30)
except subprocess.TimeoutExpired:
    proc.kill()
    rc = None
elapsed = time.time() - killed_at
left = subprocess.run(["pgrep", "-f", f"metrics_file={metrics}"], capture_output=True, text=True).stdout.split()
ztlib.check(len(ranks_pids) == 2 and rc not in (None, 0) and not left, f"killed_rank_all_exit ({elapsed:.1f} s)",
            f"pids {ranks_pids}, rc {rc}, still running {left}")
ztlib.finish()
