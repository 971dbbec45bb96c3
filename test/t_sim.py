#!/usr/bin/env python3
"""t_sim.py — the engine's GPU paths on the simulated device (`device: sim`, src/backend/backend_sim.c).

  - the matrix: ZeRO stages 0-3 on 1, 2 and 4 ranks; optimizer offload to the host at ratios 0.3, 1
    and auto and to NVMe; parameter offload to the host and to NVMe; overlap_step on and off;
    activation checkpointing on and off; bf16, and fp16 with loss scaling. Every case's losses equal
    the same case on the CPU backend within the 16-bit tolerance below, and equal its own rerun under
    another jitter seed exactly (the sim's lanes are timed differently, the arithmetic is not);
  - the offload rows run with pin_memory unset: on the sim (a GPU) the session pins the transfer buffers
    anyway, and the sim stops an asynchronous copy from pageable memory, so a buffer left unpinned
    stops the case;
  - ranks of a machine with several simulated devices (ZEROTRAIN_SIM_DEVICES) open distinct ones
    with no launcher variable set, and two on one device are refused;
  - a Twin-Flow D2H lane started without its synchronize (ZEROTRAIN_INJECT_SKIP_SYNC) gives another
    loss: the sim's asynchrony catches a missing wait;
  - one rank at stage 2 and 3 runs (it crashed on GPUs: device buffers reached MPI) and allocates no
    reduce-scatter landing zone;
  - save -> resume on the same rank count (exact) and on another (within tolerance) -> eval -> sample
    -> export, all on the sim;
  - `estimate`'s device column equals what the sim device counts in use (every buffer the engine and
    the model allocate) within 1 %, on one rank, for the settings of DeepSpeed's 10B GPT-2 config and
    the other offload rows.

Tolerance: bf16 keeps 8 bits of mantissa (relative rounding 2^-9 = 2e-3 per value), but a loss is a
mean over B*T tokens of sums whose rounding errors mostly cancel: the measured largest relative
difference from the fp32 CPU run over the whole matrix is ~2e-5 (printed below). 1e-3 keeps a margin
of ~50x and still stops a real bug: a missing wait or a wrong gradient moves the loss by ~1e-3 after
a few steps (the injected missing synchronize: 7e-4 after 6 steps, which the exact jitter rerun
catches where the tolerance would not)."""
import os
import re
import shutil
import subprocess
import tempfile

import ztlib

TOL = 1e-3
cfg = os.path.join(ztlib.ROOT, "configs", "tiny.yaml")
ztlib.ensure_shakespeare()
work = tempfile.mkdtemp(prefix="zt_sim_")
nvme = os.path.join(work, "nvme")
os.makedirs(nvme)
BASE = ["train_iters=4", "steps_per_print=1"]

OPT_CPU = "zero_optimization.offload_optimizer={{device: cpu, ratio: {}, overlap_step: {}}}"
OPT_NVME = f"zero_optimization.offload_optimizer={{device: nvme, nvme_path: {nvme}}}"
PAR_CPU = "zero_optimization.offload_param.device=cpu"
PAR_NVME = f"zero_optimization.offload_param={{device: nvme, nvme_path: {nvme}}}"
CKPT = "activation_checkpointing.enabled=true"
FP16 = "fp16={enabled: true, initial_scale_power: 8}"


def stage(s):
    return f"zero_optimization.stage={s}"


cases = []  # (name, ranks, sets)
for s in range(4):
    for n in (1, 2, 4):
        cases.append((f"stage{s}_{n}ranks", n, [stage(s)]))
for s in (1, 2, 3):
    for n in (1, 2):
        cases.append((f"stage{s}_{n}ranks_opt_cpu_0.3_overlap", n, [stage(s), OPT_CPU.format(0.3, "true")]))
cases += [
    ("stage2_1rank_opt_cpu_1", 1, [stage(2), OPT_CPU.format(1, "false")]),
    ("stage2_2ranks_opt_cpu_1", 2, [stage(2), OPT_CPU.format(1, "false")]),
    ("stage3_4ranks_opt_cpu_1_overlap", 4, [stage(3), OPT_CPU.format(1, "true")]),
    ("stage2_1rank_opt_cpu_auto", 1, [stage(2), OPT_CPU.format("auto", "true")]),
    ("stage3_2ranks_opt_cpu_auto", 2, [stage(3), OPT_CPU.format("auto", "false")]),
    ("stage3_1rank_opt_nvme", 1, [stage(3), OPT_NVME]),
    ("stage3_2ranks_opt_nvme", 2, [stage(3), OPT_NVME]),
    ("stage3_1rank_param_cpu", 1, [stage(3), PAR_CPU]),
    ("stage3_2ranks_param_cpu", 2, [stage(3), PAR_CPU]),
    ("stage3_4ranks_param_cpu", 4, [stage(3), PAR_CPU]),
    ("stage3_2ranks_param_cpu_opt_cpu_0.5_overlap", 2, [stage(3), PAR_CPU, OPT_CPU.format(0.5, "true")]),
    ("stage3_1rank_param_nvme", 1, [stage(3), PAR_NVME]),
    ("stage3_2ranks_param_nvme", 2, [stage(3), PAR_NVME]),
    ("stage3_2ranks_param_nvme_opt_nvme", 2, [stage(3), PAR_NVME, OPT_NVME]),
    ("stage0_1rank_ckpt", 1, [stage(0), CKPT]),
    ("stage2_2ranks_opt_cpu_0.3_ckpt", 2, [stage(2), OPT_CPU.format(0.3, "true"), CKPT]),
    ("stage3_2ranks_param_cpu_ckpt", 2, [stage(3), PAR_CPU, CKPT]),
    ("stage0_1rank_fp16", 1, [stage(0), FP16]),
    ("stage2_2ranks_opt_cpu_0.5_fp16", 2, [stage(2), OPT_CPU.format(0.5, "true"), FP16]),
    ("stage3_2ranks_param_cpu_fp16", 2, [stage(3), PAR_CPU, FP16]),
]


def sim_run(sets, ranks, seed, extra_env=None, iters=None):
    env = {"ZEROTRAIN_SIM_JITTER": str(seed)}
    env.update(extra_env or {})
    metrics = os.path.join(work, "m.jsonl")
    if os.path.exists(metrics):
        os.unlink(metrics)
    args = ["train", cfg, "--set", "device=sim", "--set", f"metrics_file={metrics}"]
    for s in BASE + sets + ([f"train_iters={iters}"] if iters else []):
        args += ["--set", s]
    p = ztlib.run(args, ranks=ranks if ranks > 1 else 0, env=env)
    return p, ztlib.read_metrics(metrics)


# the CPU references: fp32, bit-identical across stages, ranks and offload (t_zero.py, t_infinity.py)
cpu_ref = {}
for key, sets in (("bf16", []), ("fp16", [FP16])):
    p, rows = ztlib.train(cfg, ["device=cpu"] + BASE + sets)
    ztlib.check(p.returncode == 0 and len(rows) == 4, f"cpu_reference_{key}", p.stderr[-500:])
    cpu_ref[key] = ztlib.losses(rows)

worst = 0.0
for name, ranks, sets in cases:
    p1, r1 = sim_run(sets, ranks, seed=1)
    p2, r2 = sim_run(sets, ranks, seed=2)
    ok = p1.returncode == 0 and p2.returncode == 0 and len(r1) == 4
    a, b = ztlib.losses(r1), ztlib.losses(r2)
    ref = cpu_ref["fp16" if FP16 in sets else "bf16"]
    d = ztlib.max_rel_diff(a, ref) if ok else float("inf")
    worst = max(worst, d)
    ztlib.check(ok and d <= TOL, f"{name}_equals_cpu",
                f"rc {p1.returncode}/{p2.returncode}, rel diff {d:.3g}: {a} vs cpu {ref}\n" + p1.stderr[-800:])
    ztlib.check(ok and a == b, f"{name}_jitter_rerun_exact", f"seed 1 {a} vs seed 2 {b}")
print(f"largest relative difference from the CPU over the matrix: {worst:.3g} (tolerance {TOL})")

# one rank at stage 2-3: no reduce-scatter landing zone (the comm buffer category stays empty)
p, rows = sim_run([stage(3), "memory_breakdown=true"], 1, seed=0, iters=1)
m = re.search(r"memory step 1: sim .* comm ([0-9.]+) = ", p.stdout)
ztlib.check(p.returncode == 0 and m and float(m.group(1)) == 0.0, "one_rank_stage3_no_landing_zone",
            p.stdout[-600:] + p.stderr[-400:])

# the log says where the states live: on NVMe, not "in host memory" (the host holds staging buffers)
p, rows = sim_run([stage(3), PAR_NVME, OPT_NVME], 1, seed=0, iters=1)
ztlib.check(p.returncode == 0 and "parameter shard (" in p.stdout and "is on NVMe" in p.stdout and
            "elements on NVMe" in p.stdout and "in host memory" not in p.stdout, "nvme_log_says_nvme",
            "\n".join(l for l in p.stdout.splitlines() if "host memory" in l or "NVMe" in l))

# a missing synchronize before the Twin-Flow D2H lane gives another loss
twin = [stage(2), OPT_CPU.format(0.5, "false")]
p_ok, good = sim_run(twin, 1, seed=3, iters=6)
p_bad, bad = sim_run(twin, 1, seed=3, extra_env={"ZEROTRAIN_INJECT_SKIP_SYNC": "1"}, iters=6)
ztlib.check(p_ok.returncode == 0 and p_bad.returncode == 0 and ztlib.losses(good) != ztlib.losses(bad),
            "missing_synchronize_changes_the_loss", f"{ztlib.losses(good)} vs {ztlib.losses(bad)}")

# save -> resume (same ranks: exact; other ranks and stage: within tolerance) -> eval -> sample -> export
ck = os.path.join(work, "ck")
save = [stage(3), PAR_CPU, f"checkpoint={{dir: {ck}, save_interval: 2}}"]
p, straight = sim_run(save, 2, seed=4)
shutil.rmtree(ck)
p, first = sim_run(save + ["train_iters=2"], 2, seed=4)
ck2 = os.path.join(work, "ck2")
shutil.copytree(ck, ck2, symlinks=True)
p, same = sim_run(save, 2, seed=5)
ztlib.check(p.returncode == 0 and ztlib.losses(same) == ztlib.losses(straight)[2:], "resume_same_ranks_exact",
            f"{ztlib.losses(same)} vs {ztlib.losses(straight)[2:]}\n" + p.stderr[-600:])
p, other = sim_run([stage(2), f"checkpoint={{dir: {ck2}, save_interval: 2}}"], 1, seed=6)
ztlib.check(p.returncode == 0 and len(other) == 2 and
            ztlib.max_rel_diff(ztlib.losses(other), ztlib.losses(straight)[2:]) <= TOL, "resume_other_ranks_and_stage",
            f"{ztlib.losses(other)} vs {ztlib.losses(straight)[2:]}\n" + p.stderr[-600:])
val = ztlib.ensure_shakespeare() + "_val.bin"
ev = {}
for dev in ("sim", "cpu"):
    p = ztlib.run(["eval", ck, "--data", val, "--batch-size", "2", "--seq-len", "32", "--batches", "2", "--device", dev])
    m = re.search(r"val_loss: ([0-9.]+)", p.stdout)
    ev[dev] = float(m.group(1)) if p.returncode == 0 and m else None
ztlib.check(ev["sim"] and ev["cpu"] and abs(ev["sim"] - ev["cpu"]) / ev["cpu"] <= TOL, "eval_on_sim_equals_cpu",
            f"{ev}")
p = ztlib.run(["sample", ck, "--prompt", "ROMEO:", "--max-tokens", "8", "--device", "sim"])
ztlib.check(p.returncode == 0 and p.stdout.strip().startswith("ROMEO:"), "sample_on_sim", p.stdout + p.stderr[-400:])
p = ztlib.run(["export", ck, "-o", os.path.join(work, "hf")])
ztlib.check(p.returncode == 0 and os.path.exists(os.path.join(work, "hf", "model.safetensors")), "export_of_sim_checkpoint",
            p.stderr[-400:])

# estimate's device column = what the sim counts in use, one rank (DeepSpeed's 10B config's settings,
# scaled down: fp16, stage 2, optimizer on the host, activation checkpointing; then the other rows)
mid = os.path.join(work, "mid.yaml")
with open(mid, "w") as f:
    f.write(f"""model: {{n_layer: 2, n_head: 4, n_embd: 128, vocab_size: 50257, n_positions: 128}}
data: {{train: "{ztlib.TESTDATA}/shakespeare_train_*.bin", val: "{ztlib.TESTDATA}/shakespeare_val.bin", seq_len: 64}}
train_micro_batch_size_per_gpu: 2
gradient_accumulation_steps: 1
train_iters: 1
fp16: {{enabled: true, initial_scale_power: 8}}
zero_optimization: {{stage: 2, reduce_bucket_size: 5.0e7, offload_optimizer: {{device: cpu, pin_memory: true}}}}
activation_checkpointing: {{enabled: true}}
memory_breakdown: true
sample_tokens: 0
device: sim
""")
est = ztlib.run(["estimate", mid, "--ranks", "1", "--dtype", "bf16"])
rows = {}
for line in est.stdout.splitlines():
    f = line.split()
    if len(f) >= 6 and f[0].isdigit() and f[1] in ("device", "cpu", "nvme"):
        rows[(int(f[0]), f[1], f[2])] = float(f[5]) * {"MiB": 1, "GiB": 1024}[f[6]]
for name, key, sets in (("10b_settings_stage2_opt_cpu", (2, "cpu", "device"), []),
                        ("stage1", (1, "device", "device"), [stage(1), "zero_optimization.offload_optimizer.device=none"]),
                        ("stage2", (2, "device", "device"), ["zero_optimization.offload_optimizer.device=none"]),
                        ("stage3", (3, "device", "device"), [stage(3), "zero_optimization.offload_optimizer.device=none"]),
                        ("stage3_param_cpu", (3, "cpu", "cpu"), [stage(3), PAR_CPU]),
                        ("stage3_param_nvme_opt_nvme", (3, "nvme", "nvme"), [stage(3), PAR_NVME, OPT_NVME])):
    args = ["train", mid]
    for s in sets:
        args += ["--set", s]
    p = ztlib.run(args)
    m = re.search(r"device in use ([0-9.]+) of", p.stdout)
    got, want = (float(m.group(1)) if m else None), rows.get(key)
    ztlib.check(p.returncode == 0 and got and want and abs(got - want) / want <= 0.01, f"estimate_device_{name}",
                f"sim in use {got} MiB, estimate {want} MiB\n" + p.stderr[-400:] + est.stdout[-300:])

# cpu_checkpointing: the kept block inputs in host memory change no loss (the same bytes come back for
# the recompute), on the sim (its copies queued without waiting, under jitter) and on the CPU; the
# device memory saved is what estimate predicts
CPU_CKPT = "activation_checkpointing.cpu_checkpointing=true"
for name, ranks, sets in (("stage3_2ranks_param_cpu", 2, [stage(3), PAR_CPU, CKPT]),
                          ("stage2_1rank_2_per_segment", 1, [stage(2), CKPT, "activation_checkpointing.number_checkpoints=1"])):
    p1, plain = sim_run(sets, ranks, seed=7)
    p2, host = sim_run(sets + [CPU_CKPT], ranks, seed=8)
    ztlib.check(p1.returncode == 0 and p2.returncode == 0 and len(plain) == 4 and
                ztlib.losses(plain) == ztlib.losses(host), f"cpu_checkpointing_same_losses_sim_{name}",
                f"{ztlib.losses(plain)} vs {ztlib.losses(host)}\n" + p2.stderr[-600:])
p1, plain = ztlib.train(cfg, ["device=cpu", CKPT] + BASE)
p2, host = ztlib.train(cfg, ["device=cpu", CKPT, CPU_CKPT] + BASE)
ztlib.check(p2.returncode == 0 and len(host) == 4 and ztlib.losses(plain) == ztlib.losses(host),
            "cpu_checkpointing_same_losses_cpu", f"{ztlib.losses(plain)} vs {ztlib.losses(host)}")
in_use, est_dev, est_host = {}, {}, {}
deep = ["zero_optimization.offload_optimizer.device=none", "model.n_layer=8", "train_micro_batch_size_per_gpu=4"]
for key, sets in (("off", deep), ("on", deep + [CPU_CKPT])):
    args, ea = ["train", mid], ["estimate", mid, "--ranks", "1"]
    for x in sets:
        args += ["--set", x]
        ea += ["--set", x]
    p = ztlib.run(args)
    m = re.search(r"device in use ([0-9.]+) of", p.stdout)
    h = re.search(r"host .* activations ([0-9.]+) comm", p.stdout)
    in_use[key] = (float(m.group(1)) if m else None, float(h.group(1)) if h else None)
    e = ztlib.run(ea)
    row = [ln.split() for ln in e.stdout.splitlines() if ln.split()[:3] == ["2", "device", "device"]]
    est_dev[key], est_host[key] = (float(row[0][5]), float(row[0][7])) if row else (None, None)
saved, predicted = in_use["off"][0] - in_use["on"][0], est_dev["off"] - est_dev["on"]
ztlib.check(predicted > 0 and abs(saved - predicted) <= 0.05 * predicted and
            abs(in_use["on"][1] - (est_host["on"] - est_host["off"])) <= 0.05 * predicted,
            "cpu_checkpointing_saves_what_estimate_predicts",
            f"sim in use {in_use}, estimate device {est_dev} host {est_host} (MiB)")
print(f"cpu_checkpointing: device memory saved {saved:.2f} MiB, estimate {predicted:.2f} MiB")

# a machine with a simulated device per rank (ZEROTRAIN_SIM_DEVICES=2) and no launcher variable set: the
# ranks open devices by the node-local rank MPI gives them (MPI_Comm_split_type), as the CUDA backend
# picks its GPU; picked from the launcher's variables alone (the old way, injected), both open device
# 0 and the session refuses the run, naming the ranks
def bare_launch(extra_env):
    no_vars = ["env"] + sum((["-u", v] for v in ("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID",
                                                  "LOCAL_RANK")), [])
    cmd = ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"] + no_vars + [
        ztlib.BIN, "train", cfg, "--set", "device=sim", "--set", "train_iters=1"]
    return subprocess.run(cmd, cwd=ztlib.ROOT, env=dict(ztlib.ENV, ZEROTRAIN_SIM_DEVICES="2", **extra_env),
                          capture_output=True, text=True, timeout=300)


p = bare_launch({})
ztlib.check(p.returncode == 0 and "both opened device" not in p.stderr, "sim_devices_distinct_without_launcher_vars",
            p.stderr[-800:])
p = bare_launch({"ZEROTRAIN_INJECT_LOCAL_RANK_FROM_ENV": "1"})
ztlib.check(p.returncode != 0 and "ranks 0 and 1 both opened device 0" in p.stderr, "sim_devices_shared_refused",
            p.stderr[-800:])

# ratio auto's calibration on the simulated GPU: its transfer buffers are pinned (host_alloc) and go
# back through host_free; free() of one faults on the sim as it crashed on the H100
p, rows = sim_run(["zero_optimization.stage=2", "zero_optimization.offload_optimizer={device: cpu, ratio: auto}"], 1, 5,
                  iters=2)
ztlib.check(p.returncode == 0 and len(rows) == 2 and "ratio auto" in p.stdout + p.stderr, "sim_ratio_auto_calibrates",
            (p.stderr or p.stdout)[-600:])

shutil.rmtree(work, ignore_errors=True)
ztlib.finish()
