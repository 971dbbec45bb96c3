"""t_super_offload.py — the speculative offloaded step (offload_optimizer.super_offload,
src/engine/twin_flow.c) on the CPU backend and the simulated GPU: exact, whatever it speculated.

The host part's CPU Adam starts during backward on the gradients already down, as if the step will
be accepted (clip coefficient 1, nothing overflowed); after backward the norm and the finite check
decide: accepted, the speculated states are the step's; rejected, they are dropped and the chunks
redone. So every run here is checked for the same bits (==) as the run with super_offload false:
  * at stages 0-3 on 1 rank and 1-3 on 2 ranks, ratio 1, 0.5 and auto, tensor parallelism 2,
    offload_param, a small speculation_window (part of the host part), micro-batches of 8;
  * with clipping never triggered (gradient_clipping 0: every speculation accepted), triggered at
    every step (the tiny model's norms are 1.1-1.9 against max 1.0: every one rolled back), and
    alternating (ZEROTRAIN_INJECT_CLIP puts a tiny max norm on chosen steps); with an fp16 overflow;
  * ZEROTRAIN_INJECT_SPECULATE=always makes every step speculate over its whole window before the
    verdict (the tiny model is done before the policy would try), =never none: the same bits;
  * the final parameters of a rolled-back run are the unspeculated run's (its checkpoint);
  * a run that keeps its rejected speculations (ZEROTRAIN_INJECT_SKIP_ROLLBACK) differs: the check
    can fail;
  * a resumed run continues the uninterrupted one; two jitter seeds of the sim give the same bits;
  * NVMe optimizer state falls back to the validated step, and says so;
  * the step line and the metrics say which mode each step ran in and count the rollbacks; after a
    rollback the next step validates first and speculates again once a step would have accepted."""
import os
import tempfile

import ztlib

ztlib.ensure_shakespeare()
cfg = "configs/tiny.yaml"
KEY = "zero_optimization.offload_optimizer"


def offload(ratio=1, spec=None, extra=""):
    s = [f"{KEY}={{device: cpu, ratio: {ratio}{extra}}}"]
    if spec is not None:
        s.append(f"{KEY}.super_offload={'true' if spec else 'false'}")
    return s


def run(sets, ranks=0, iters=6, env=None):
    saved = dict(ztlib.ENV)
    ztlib.ENV.update(env or {})
    try:
        p, rows = ztlib.train(cfg, [f"train_iters={iters}", "steps_per_print=1"] + sets, ranks=ranks)
    finally:
        ztlib.ENV.clear()
        ztlib.ENV.update(saved)
    ok = p.returncode == 0 and len(rows) == iters
    return (ztlib.losses(rows) if ok else None), rows, p


ALWAYS, NEVER = {"ZEROTRAIN_INJECT_SPECULATE": "always"}, {"ZEROTRAIN_INJECT_SPECULATE": "never"}
NOCLIP = ["gradient_clipping=0"]


def same_bits(name, sets, ranks=0, iters=6, envs=(ALWAYS,)):
    """the speculative runs (each env) against super_offload false under the same injected faults"""
    for env in envs:
        faults = {k: v for k, v in env.items() if k != "ZEROTRAIN_INJECT_SPECULATE"}
        want, _, p0 = run(sets + [f"{KEY}.super_offload=false"], ranks, iters, faults)
        got, rows, p = run(sets, ranks, iters, env)
        tag = "" if len(envs) == 1 else "_" + env.get("ZEROTRAIN_INJECT_SPECULATE", "policy")
        ztlib.check(want and got == want, name + tag, f"{got} vs {want}; {p.stderr[-600:]}{p0.stderr[-300:]}")
    return want, rows


# --- clipping never, always, alternating: 1 rank, ratio 1, every stage
_, rows = same_bits("noclip_stage0_ratio1", offload() + NOCLIP, envs=(ALWAYS, NEVER, {}))
ztlib.check(rows and all(r["update"] == "speculated" and not r["rolled_back"] for r in rows) and
            rows[-1]["rollbacks"] == 0 and rows[-1]["speculated_steps"] == len(rows) and rows[-1]["accepted_elems"] > 0,
            "noclip_every_speculation_accepted", f"{rows[-1] if rows else None}")
want, rows = same_bits("clip_every_step_stage0_ratio1", offload())
ztlib.check(rows and [r["rolled_back"] for r in rows] == [r["grad_norm"] > 1.0 for r in rows] and
            rows[-1]["rollbacks"] == sum(r["grad_norm"] > 1.0 for r in rows) > 0 and rows[-1]["accepted_elems"] == 0,
            "clipped_steps_rolled_back", f"{[(r['grad_norm'], r['rolled_back']) for r in rows]}")
_, rows, p = run(offload(), iters=6)
modes = [r["update"] for r in rows]
norms = [r["grad_norm"] for r in rows]
# the policy: the first step speculates; after a rolled-back one the next validates first; it speculates
# again after a step whose norm would have been accepted
want_modes = ["speculated"] + ["speculated" if norms[i - 1] <= 1.0 else "validated" for i in range(1, len(rows))]
ztlib.check(rows and modes == want_modes, "policy_validates_after_a_rollback_speculates_after_a_kept_step",
            f"{list(zip(norms, modes))}")
ztlib.check("update speculated, rolled back (1 of 1 rolled back)" in p.stdout and "update validated first" in p.stdout,
            "step_line_says_the_mode", p.stdout[-800:])
for stage in (1, 2, 3):
    same_bits(f"clip_alternating_stage{stage}_ratio1", offload() + NOCLIP + [f"zero_optimization.stage={stage}"],
              envs=({**ALWAYS, "ZEROTRAIN_INJECT_CLIP": "2,4"},))
_, rows, _ = run(offload() + NOCLIP, env={**ALWAYS, "ZEROTRAIN_INJECT_CLIP": "2,4"})
ztlib.check([r["rolled_back"] for r in rows] == [False, True, False, True, False, False], "alternating_rollbacks_where_clipped",
            f"{[r['rolled_back'] for r in rows]}")

# --- the rollback is what keeps it exact: kept rejected speculations change the losses
good, _, _ = run(offload(), env=ALWAYS)
bad, _, p = run(offload(), env={**ALWAYS, "ZEROTRAIN_INJECT_SKIP_ROLLBACK": "1"})
ztlib.check(good and bad and bad != good, "skipping_the_rollback_changes_the_losses", f"{bad} vs {good}; {p.stderr[-400:]}")

# --- the parameters: a rolled-back run's final checkpoint is the unspeculated run's
with tempfile.TemporaryDirectory() as tmp:
    weights = []
    for name, sets, env in (("a", offload(spec=False), None), ("b", offload(), ALWAYS)):
        run(sets + ["checkpoint.save_interval=4", f"checkpoint.dir={tmp}/{name}"], iters=4, env=env)
        weights.append(ztlib.weights_of(os.path.join(tmp, name), tmp))
    ztlib.check(weights[0] is not None and weights[0] == weights[1], "final_parameters_equal_bit_for_bit",
                f"{None if weights[1] is None else len(weights[1])} bytes")

# --- ratios, layouts and state places
same_bits("ratio_half_stage2", offload(0.5) + ["zero_optimization.stage=2"], envs=(ALWAYS, {}))
same_bits("ratio_auto_stage2", offload("auto") + ["zero_optimization.stage=2"])
same_bits("micro_batch_8_accumulation_1", offload() + NOCLIP + ["train_micro_batch_size_per_gpu=8"],
          envs=({**ALWAYS, "ZEROTRAIN_INJECT_CLIP": "3"},))
same_bits("offload_param_stage3", offload() + ["zero_optimization.stage=3", "zero_optimization.offload_param.device=cpu"])
same_bits("partial_window", offload(extra=", speculation_window: 2MB") + NOCLIP, envs=({**ALWAYS, "ZEROTRAIN_INJECT_CLIP": "2"},))
_, _, p = run(offload(extra=", speculation_window: 2MB"), iters=1)
window = [w for w in (p.stderr + p.stdout).split("\n") if w.startswith("super-offload: the update speculates")]
ztlib.check(window and " of rank 0's 1635744 host-part" in window[0] and " up to 1635744 " not in window[0],
            "window_bound_by_speculation_window", (p.stderr + p.stdout)[-600:])
for stage in (1, 2, 3):
    same_bits(f"two_ranks_stage{stage}", offload() + [f"zero_optimization.stage={stage}"], ranks=2, iters=4)
same_bits("two_ranks_stage2_noclip", offload() + NOCLIP + ["zero_optimization.stage=2"], ranks=2, iters=4)
same_bits("tensor_parallel_2", offload() + ["tensor_parallel.tp_size=2"], ranks=2, iters=4)
same_bits("fp16_overflow", offload() + NOCLIP + ["fp16.enabled=true", "fp16.initial_scale_power=8"],
          envs=({**ALWAYS, "ZEROTRAIN_INJECT_OVERFLOW": "3"},))

# --- NVMe: the swap reads and writes the states in place, so there is no speculation to keep apart
with tempfile.TemporaryDirectory() as tmp:
    nvme = [f"{KEY}={{device: nvme, nvme_path: {tmp}, ratio: 1}}"]
    want, _, _ = run(nvme + [f"{KEY}.super_offload=false"], iters=4)
    got, rows, p = run(nvme, iters=4, env=ALWAYS)
    ztlib.check(want and got == want and all("update" not in r for r in rows), "nvme_runs_the_plain_step_exact",
                f"{got} vs {want}; {p.stderr[-500:]}")
    ztlib.check("super-offload: off" in p.stderr + p.stdout, "nvme_says_it_validates", (p.stderr + p.stdout)[-600:])

# --- resume in the middle continues the uninterrupted run
with tempfile.TemporaryDirectory() as tmp:
    save = offload() + ["checkpoint.save_interval=3"]
    whole, _, _ = run(save + [f"checkpoint.dir={tmp}/a"], env=ALWAYS)
    first, _, _ = run(save + [f"checkpoint.dir={tmp}/b"], iters=3, env=ALWAYS)
    rest, _, p = run(save + [f"checkpoint.dir={tmp}/b", "train_iters=6"], iters=3, env=ALWAYS)
    ztlib.check(whole and first == whole[:3] and rest == whole[3:], "resume_continues_exactly",
                f"{whole} vs {first} + {rest}; {p.stderr[-600:]}")

# --- the simulated GPU: the device part beside, the lanes' timing jittered; same bits either way
sim = ["device=sim", "zero_optimization.stage=2"]
for ratio in (1, 0.5):
    want, _, _ = run(sim + offload(ratio, spec=False), iters=4)
    for seed in (1, 2):
        got, rows, p = run(sim + offload(ratio), iters=4, env={"ZEROTRAIN_SIM_JITTER": str(seed)})
        ztlib.check(want and got == want, f"sim_ratio{ratio}_jitter{seed}_exact", f"{got} vs {want}; {p.stderr[-600:]}")
        got, rows, p = run(sim + offload(ratio) + NOCLIP, iters=4,
                           env={"ZEROTRAIN_SIM_JITTER": str(seed), "ZEROTRAIN_INJECT_CLIP": "2"})
        base, _, _ = run(sim + offload(ratio, spec=False) + NOCLIP, iters=4, env={"ZEROTRAIN_INJECT_CLIP": "2"})
        ztlib.check(base and got == base, f"sim_ratio{ratio}_jitter{seed}_alternating_exact", f"{got} vs {base}")

# the sim's lanes: with nothing clipped, the speculative CPU Adam runs during backward
# (a model whose blocks outweigh its embedding: the tiny model's wte spans every chunk, and its
# gradients are final only when backward ends)
with tempfile.TemporaryDirectory() as tmp:
    ztlib.write_synthetic_shard(f"{tmp}/syn_000000.bin", 1 << 16)
    deep = ["model={n_layer: 6, n_head: 2, n_embd: 64, vocab_size: 256, n_positions: 64}",
            f"data.train={tmp}/syn_*.bin", "data.val="]
    _, rows, p = run(sim + deep + offload() + NOCLIP + [f"trace={tmp}/run.json"], iters=3)
    spans = ztlib.trace_spans(os.path.join(tmp, "run.rank0.json"))
    spec, bwd = spans.get("host adam (speculative)", []), spans.get("backward", [])
    during = ztlib.overlaps(spec, bwd)
    ztlib.check(rows and during >= 1 and rows[-1]["accepted_elems"] > 0, "sim_trace_speculative_adam_during_backward",
                f"{len(spec)} speculative, {len(bwd)} backward events, {during} overlapping; {p.stderr[-400:]}")

# --- refused
p = ztlib.run(["train", cfg, "--set", f"{KEY}={{device: cpu, super_offload: true, delayed_update: true}}"])
ztlib.check(p.returncode != 0 and "super_offload" in p.stderr and "delayed_update" in p.stderr,
            "super_offload_with_delayed_update_refused", p.stderr[-500:])
p = ztlib.run(["train", cfg, "--set", f"{KEY}={{device: cpu, cpuadam_cores_perc: 0}}"])
ztlib.check(p.returncode != 0 and "cpuadam_cores_perc" in p.stderr, "cpuadam_cores_perc_zero_refused", p.stderr[-500:])
ztlib.finish()
