"""t_delayed_update.py — offload_optimizer.delayed_update (ZeRO-Offload's one-step delayed parameter
update, src/engine/twin_flow.c) on the CPU backend and the simulated GPU.

Against an independent reference: a float64 PyTorch loop of the delayed math (gpt2_ref.py's model,
AdamW with bias correction and clipping by each step's own norm; from warm-up W+2 on, step t's forward
and backward use the parameters of step t-2) gives the 1-rank CPU run's losses within 1e-5, on one
repeated window (so the data order does not matter) from a random init; the undelayed loop's are far
from them.

What the delayed math says, checked exactly (==):
  * during the warm-up (delayed_update_warmup W) the run is the undelayed one, and so is step W+1
    (its forward uses the parameters of update W, which was not delayed); step W+2 differs, since its
    forward uses the host part's parameters of step W instead of W+1;
  * at ratio 0 nothing is on the host, so nothing lags: the run is the undelayed one at every step;
  * at ratio 1 every parameter lags by one step whatever the layout, so 2 ranks at ZeRO-2 and
    ZeRO-3 and tensor parallelism 2 give the 1-rank losses (the equivalence rule); the sim gives the
    CPU backend's within 16-bit tolerance, and the same bits whatever its lanes' timing;
  * evaluation and samples do not drain it (the losses are those of the run without them);
  * a save drains the pending update in every run, so a run resumed from a save continues the
    uninterrupted run's losses bit for bit;
  * the sim's trace shows the host Adam of step t running during step t+1's forward and backward, and
    its parameters going up only after step t+1's backward;
  * bad combinations are refused with one line naming the file and line (or the ranks and ratio)."""
import os
import tempfile

import numpy as np
import torch

import gpt2_ref
import ztlib

ztlib.ensure_shakespeare()
cfg = "configs/tiny.yaml"
KEY = "zero_optimization.offload_optimizer"


def offload(ratio, warmup=None):
    sets = [f"{KEY}={{device: cpu, ratio: {ratio}}}"]
    if warmup is not None:
        sets += [f"{KEY}.delayed_update=true", f"{KEY}.delayed_update_warmup={warmup}"]
    return sets


def as_args(sets):
    return [a for s in sets for a in ("--set", s)]


def losses(sets, ranks=0, iters=6):
    p, rows = ztlib.train(cfg, [f"train_iters={iters}"] + sets, ranks=ranks)
    ok = p.returncode == 0 and len(rows) == iters
    return (ztlib.losses(rows) if ok else None), p


# --- the delayed math against a float64 reference
MODEL = {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}
B, T, STEPS, LR, BETAS, EPS = 2, 32, 6, 1e-2, (0.9, 0.95), 1e-8


def reference(params, window, warmup, delayed):
    """losses of STEPS AdamW steps on the one batch of `window` (float64)"""
    x = torch.tensor(np.tile(window, (B, 1)), dtype=torch.long)
    y = torch.tensor(np.tile(np.roll(window, -1), (B, 1)), dtype=torch.long)
    cur = {k: torch.tensor(v, dtype=torch.float64) for k, v in params.items()}
    last = cur
    m = {k: torch.zeros_like(a) for k, a in cur.items()}
    v = {k: torch.zeros_like(a) for k, a in cur.items()}
    out = []
    for t in range(1, STEPS + 1):
        used = last if delayed and t >= warmup + 2 else cur
        used = {k: a.clone().requires_grad_(True) for k, a in used.items()}
        loss = gpt2_ref.forward(used, MODEL, x, y)[1]
        loss.backward()
        out.append(loss.item())
        norm = torch.sqrt(sum((a.grad * a.grad).sum() for a in used.values())).item()
        clip = 1.0 / (norm + 1e-6) if norm > 1.0 else 1.0  # gradient_clipping 1.0, torch's formula
        new = {}
        for k in cur:
            g = used[k].grad * clip
            m[k] = BETAS[0] * m[k] + (1 - BETAS[0]) * g
            v[k] = BETAS[1] * v[k] + (1 - BETAS[1]) * g * g
            mhat, vhat = m[k] / (1 - BETAS[0] ** t), v[k] / (1 - BETAS[1] ** t)
            new[k] = cur[k] - LR * mhat / (torch.sqrt(vhat) + EPS)
        last, cur = cur, new
    return out


with tempfile.TemporaryDirectory() as tmp:
    window = np.random.default_rng(7).integers(0, MODEL["vocab_size"], T)
    gpt2_ref.write_shard(os.path.join(tmp, "rep_000.bin"), np.tile(window, 64))  # every window is this one
    params = gpt2_ref.random_params(MODEL, std=0.1, seed=3)
    gpt2_ref.write_hf_dir(os.path.join(tmp, "init"), MODEL, params)
    ref_cfg = os.path.join(tmp, "ref.yaml")
    with open(ref_cfg, "w") as f:
        f.write(f"""model: {{n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, n_positions: 32,
        init_from: "{tmp}/init/model.safetensors"}}
data: {{train: "{tmp}/rep_*.bin", seq_len: {T}}}
train_batch_size: {B}
train_micro_batch_size_per_gpu: {B}
train_iters: {STEPS}
optimizer: {{type: AdamW, params: {{lr: {LR}, betas: [{BETAS[0]}, {BETAS[1]}], eps: {EPS}, weight_decay: 0.0}}}}
gradient_clipping: 1.0
zero_optimization: {{stage: 0, offload_optimizer: {{device: cpu, ratio: 1, delayed_update: true, delayed_update_warmup: 1}}}}
sample_tokens: 0
device: cpu
""")
    p, rows = ztlib.train(ref_cfg)
    got = ztlib.losses(rows)
    want, undelayed = reference(params, window, 1, True), reference(params, window, 1, False)
    ok = p.returncode == 0 and len(got) == STEPS
    ztlib.check(ok and ztlib.max_rel_diff(got, want) <= 1e-5, "losses_equal_float64_reference_of_delayed_math",
                f"{got} vs {want}; {p.stderr[-600:]}")
    ztlib.check(ok and ztlib.max_rel_diff(got, undelayed) > 1e-2, "undelayed_reference_is_far_from_them",
                f"{got} vs undelayed {undelayed}")

# --- warm-up, then one step behind
base, p0 = losses(offload(1))
late, p1 = losses(offload(1, warmup=2))
ztlib.check(base and late and base[:3] == late[:3] and base[3] != late[3], "warmup_steps_and_the_next_equal_undelayed_then_differ",
            f"{base} vs {late}; {p1.stderr[-600:]}")
ztlib.check(late is not None and all(a != b for a, b in zip(base[3:], late[3:])), "every_step_after_warmup_plus_one_differs",
            f"{base} vs {late}")
zero, p2 = losses(offload(0, warmup=0))
base0, _ = losses(offload(0))
ztlib.check(zero and zero == base0, "ratio_0_nothing_lags", f"{base0} vs {zero}; {p2.stderr[-600:]}")

# evaluation and samples read the parameters the next forward reads and drain nothing: same losses
seen, p = losses(offload(1, warmup=2) + ["eval_interval=2", "sample_tokens=8", "sample_interval=3"])
ztlib.check(seen and seen == late, "eval_and_samples_do_not_change_the_losses", f"{late} vs {seen}; {p.stderr[-600:]}")

# --- the equivalence rule at ratio 1: 2 ranks (ZeRO-2, ZeRO-3) give the 1-rank losses
for stage in (2, 3):
    one, _ = losses(offload(1, warmup=1) + [f"zero_optimization.stage={stage}"])
    two, p = losses(offload(1, warmup=1) + [f"zero_optimization.stage={stage}"], ranks=2)
    ztlib.check(one and one == two and one != base, f"stage{stage}_two_ranks_equal_one_rank", f"{one} vs {two}; {p.stderr[-600:]}")
one, _ = losses(offload(1, warmup=1), iters=5)
tp, p = losses(offload(1, warmup=1) + ["tensor_parallel.tp_size=2"], ranks=2, iters=5)
ztlib.check(one and one == tp, "tensor_parallel_2_equals_one_rank", f"{one} vs {tp}; {p.stderr[-600:]}")
# on the sim (16-bit, whose 2-rank reductions round differently even undelayed, t_sim.py): the CPU
# backend's delayed losses within t_sim's 16-bit tolerance, and the same bits under another jitter seed
# of its lanes (the delayed schedule is the same whatever the lanes' timing)
sim = ["device=sim", "zero_optimization.stage=2"]
cpu, _ = losses(sim[1:] + offload(1, warmup=1), iters=4)
runs = []
for seed in (1, 2):
    ztlib.ENV["ZEROTRAIN_SIM_JITTER"] = str(seed)
    runs.append(losses(sim + offload(1, warmup=1), iters=4))
ztlib.ENV.pop("ZEROTRAIN_SIM_JITTER")
(a, p), (b, _) = runs
ztlib.check(a and cpu and ztlib.max_rel_diff(a, cpu) <= 1e-3, "sim_equals_cpu_within_16bit_tolerance",
            f"{a} vs cpu {cpu}; {p.stderr[-600:]}")
ztlib.check(a and a == b, "sim_jitter_rerun_exact", f"{a} vs {b}")

# --- resume: a save drains in every run, so the resumed run continues the uninterrupted one exactly
with tempfile.TemporaryDirectory() as tmp:
    save = offload(1, warmup=1) + ["checkpoint.save_interval=3"]
    whole, _ = losses(save + [f"checkpoint.dir={tmp}/a"])
    first, _ = losses(save + [f"checkpoint.dir={tmp}/b"], iters=3)
    p, rows = ztlib.train(cfg, ["train_iters=6", f"checkpoint.dir={tmp}/b"] + save)
    rest = ztlib.losses(rows)
    ztlib.check(whole and first == whole[:3] and rest == whole[3:], "resume_continues_exactly",
                f"{whole} vs {first} + {rest}; {p.stderr[-600:]}")

# --- the sim's lanes: the host Adam of a delayed update runs during the next step's forward and
# backward (on this tiny model it ends within the first micro-step's forward), and its parameters go
# up only after that step's backward: no H2D overlaps a forward or backward
with tempfile.TemporaryDirectory() as tmp:
    trace = os.path.join(tmp, "run.json")
    p, rows = ztlib.train(cfg, ["train_iters=4", f"trace={trace}"] + sim + offload(1, warmup=0))
    spans = ztlib.trace_spans(os.path.join(tmp, "run.rank0.json"))
    overlap = ztlib.overlaps
    host, h2d = spans.get("host adam", []), spans.get("H2D params", [])
    compute = spans.get("forward", []) + spans.get("backward", [])
    ztlib.check(p.returncode == 0 and overlap(host, compute) >= 1, "sim_trace_host_adam_during_next_step",
                f"{len(host)} host adam, {len(compute)} forward/backward events; {p.stderr[-600:]}")
    ztlib.check(h2d and overlap(h2d, compute) == 0, "sim_trace_parameters_go_up_after_the_next_backward",
                f"{len(h2d)} H2D events, {overlap(h2d, compute)} overlapping a forward or backward")

# --- refused
with tempfile.TemporaryDirectory() as tmp:
    bad = os.path.join(tmp, "bad.yaml")
    with open(bad, "w") as f:
        f.write(open(cfg).read().replace("zero_optimization: {stage: 0}",
                                         "zero_optimization: {stage: 0, offload_optimizer: {delayed_update: true}}"))
    p = ztlib.run(["train", bad])
    ztlib.check(p.returncode != 0 and f"{bad}:" in p.stderr and "needs zero_optimization.offload_optimizer.device cpu" in p.stderr,
                "without_offload_refused_with_file_line", p.stderr[-500:])
p = ztlib.run(["train", cfg, "--set", f"{KEY}.delayed_update_warmup=-1"])
ztlib.check(p.returncode != 0 and "delayed_update_warmup" in p.stderr, "negative_warmup_refused", p.stderr[-500:])
p = ztlib.run(["train", cfg] + as_args(["zero_optimization.stage=3", "zero_optimization.offload_param.device=cpu"]
                                      + offload(1, warmup=0)))
ztlib.check(p.returncode != 0 and "not supported with zero_optimization.offload_param" in p.stderr, "offload_param_refused",
            p.stderr[-500:])
p = ztlib.run(["train", cfg] + as_args(["zero_optimization.stage=2", "train_iters=1"] + offload(0.5, warmup=0)), ranks=2)
ztlib.check(p.returncode != 0 and "needs ratio 1" in p.stderr and "2 ranks" in p.stderr, "two_ranks_ratio_half_refused",
            p.stderr[-500:])
p = ztlib.run(["train", cfg] + as_args(["tensor_parallel.tp_size=2"] + offload(0.5, warmup=0)))
ztlib.check(p.returncode != 0 and "with tensor_parallel.tp_size 2 needs offload_optimizer.ratio 1" in p.stderr,
            "tensor_parallel_ratio_half_refused", p.stderr[-500:])
ztlib.finish()
