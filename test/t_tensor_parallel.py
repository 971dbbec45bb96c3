"""t_tensor_parallel.py — Megatron-style tensor parallelism under ZeRO: the tiny config (with 4 heads, so
that 4 tensor-parallel ranks each hold one) trained 20 steps at tp 2 and 4, data-parallel 1 and 2, ZeRO
stages 0-3, with optimizer offload (Twin-Flow), parameter offload and activation checkpointing, gives
the losses of the one-rank tp-1 run (same global batch of 8 sequences).

The split changes the order of fp32 additions (a row-parallel linear's output is the sum of tp partial
GEMMs; the cross-entropy's softmax sums are combined from tp partial sums), so the losses agree to
fp32 rounding, not bit for bit: we require a relative 1e-5 per step (the tolerance t_zero.py uses for
several data-parallel ranks; observed: 3e-8). On the simulated GPU (bf16 storage, the tp partial sums
rounded to bf16 before they are added) the tp-2 run must match the simulated tp-1 run to a relative
1e-3 per step (observed: 3e-5).

partition_activations keeps 1/tp of each checkpointed block input per rank: losses bit-identical to
checkpointing without it, and the device memory the simulated GPU measures drops by what `estimate`
predicts (within 5%).

The tensor-parallel traffic against Megatron's formula is t_comm_bytes.py's."""
import os
import shutil
import tempfile

import ztlib

ztlib.ensure_shakespeare()
cfg = "configs/tiny.yaml"
HEADS = ["model.n_head=4"]

p, rows = ztlib.train(cfg, HEADS)
base = ztlib.losses(rows)
ztlib.check(p.returncode == 0 and len(base) == 20, "tp1_baseline_runs", p.stderr[-2000:])


def tp_run(name, tp, dp, sets=(), ref=base, tol=1e-5, device=()):
    p, rows = ztlib.train(cfg, HEADS + [f"tensor_parallel.tp_size={tp}"] + list(device) + list(sets), ranks=tp * dp,
                          timeout=600)
    got = ztlib.losses(rows)
    if not ztlib.check(p.returncode == 0 and len(got) == 20, name + "_runs", p.stderr[-1500:]):
        return None
    d = ztlib.max_rel_diff(got, ref)
    ztlib.check(d <= tol, f"{name}_matches_tp1 (max rel diff {d:.1e})", f"max relative difference {d:.3g}")
    return rows


for tp, dp, stages in ((2, 1, (0, 1, 2, 3)), (2, 2, (0, 1, 2, 3)), (4, 1, (0, 1, 2, 3)), (4, 2, (0, 1, 2, 3))):
    for stage in stages:
        tp_run(f"tp{tp}_dp{dp}_stage{stage}", tp, dp, [f"zero_optimization.stage={stage}"])

# ZeRO-Offload over the tensor-parallel shards: Twin-Flow (half the optimizer on the host), and
# stage 3 with the parameters in host memory
tp_run("tp2_dp2_twinflow", 2, 2, ["zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu",
                                   "zero_optimization.offload_optimizer.ratio=0.5"])
tp_run("tp2_dp1_offload_param", 2, 1, ["zero_optimization.stage=3", "zero_optimization.offload_param.device=cpu"])
# Three data-parallel ranks: their sums are no longer commutative pairs, so the whole tensors' (LayerNorms,
# biases, wpe) gradients stay bit-identical across the tensor-parallel group only if every tp rank's
# data-parallel group adds them in the same order. Every tp rank's part has the same shape (wte padded),
# hence the same ZeRO partition and buckets; the checkpoint saved at the end checks the result (a save
# fails when a whole tensor differs between tp ranks). (Open MPI's reduce-scatter here adds in rank
# order whatever the partition, so this passes even without the padding; a ring, as NCCL's, adds in an
# order that follows each piece's owner, which the padding keeps the same.)
B3 = ["train_batch_size=12"]
p, rows = ztlib.train(cfg, HEADS + B3 + ["zero_optimization.stage=2"], ranks=3)
dp3 = ztlib.losses(rows)
for stage in (0, 2, 3):
    ck = tempfile.mkdtemp(prefix="zt-tp-dp3-")
    tp_run(f"tp2_dp3_stage{stage}_saves", 2, 3, B3 + [f"zero_optimization.stage={stage}", f"checkpoint.dir={ck}"],
           ref=dp3)
    ztlib.check(os.path.exists(os.path.join(ck, "step_00000020", "index.h5")), f"tp2_dp3_stage{stage}_checkpoint_saved",
                str(os.listdir(ck)))
    shutil.rmtree(ck, ignore_errors=True)

# ZeRO-Infinity: the optimizer states and the parameters on NVMe (swap files per rank)
nvme = tempfile.mkdtemp(prefix="zt-tp-nvme-")
tp_run("tp2_dp2_nvme", 2, 2, ["zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=nvme",
                               f"zero_optimization.offload_optimizer.nvme_path={nvme}",
                               "zero_optimization.offload_param.device=nvme",
                               f"zero_optimization.offload_param.nvme_path={nvme}"])
shutil.rmtree(nvme, ignore_errors=True)
# activation checkpointing recomputes the blocks (their all-reduces run again): losses unchanged
tp_run("tp2_dp1_act_ckpt", 2, 1, ["activation_checkpointing.enabled=true",
                                               "activation_checkpointing.cpu_checkpointing=true"])

# partition_activations: each tp rank keeps 1/tp of every checkpointed block input and the group
# all-gathers it before the recompute — the same bytes, so the same losses bit for bit (on the device,
# and in host memory with cpu_checkpointing)
CKPT = ["activation_checkpointing.enabled=true"]
p, rows = ztlib.train(cfg, HEADS + CKPT + ["tensor_parallel.tp_size=2"], ranks=2)
ckpt_only = ztlib.losses(rows)
for name, extra in (("partition_activations", []), ("partition_activations_cpu",
                                                     ["activation_checkpointing.cpu_checkpointing=true"])):
    p, rows = ztlib.train(cfg, HEADS + CKPT + ["tensor_parallel.tp_size=2",
                                               "activation_checkpointing.partition_activations=true"] + extra, ranks=2)
    got = ztlib.losses(rows)
    ztlib.check(p.returncode == 0 and len(got) == 20 and got == ckpt_only, f"tp2_{name}_bit_identical",
                p.stderr[-800:] + f" {got[:3]} vs {ckpt_only[:3]}")

# ... and the device memory it saves, measured by the simulated GPU's allocator ("device in use" of the
# memory breakdown) against what `estimate` predicts, within 5%: a model big enough for MiB figures
import re  # noqa: E402
BIG = ["model.n_layer=8", "model.n_embd=256", "model.n_head=4", "train_batch_size=8", "train_micro_batch_size_per_gpu=8",
       "data.seq_len=64"] + CKPT


def device_in_use(extra):
    p, _ = ztlib.train(cfg, BIG + extra + ["device=sim", "tensor_parallel.tp_size=2", "train_iters=1",
                                           "memory_breakdown=true"], ranks=2)
    m = re.search(r"device in use ([0-9.]+) of", p.stderr + p.stdout)
    return float(m.group(1)) if m else None


def estimated(extra):
    p = ztlib.run(["estimate", cfg, "--ranks", "2", "--tp", "2"] + sum((["--set", x] for x in BIG + extra), []))
    m = re.search(r"activations ([0-9.]+) MiB/rank", p.stdout)
    return float(m.group(1)) if m else None


PART = ["activation_checkpointing.partition_activations=true"]
measured = [device_in_use([]), device_in_use(PART)]
predicted = [estimated([]), estimated(PART)]
if ztlib.check(None not in measured + predicted, "partition_memory_figures", f"{measured} {predicted}"):
    saved, want = measured[0] - measured[1], predicted[0] - predicted[1]
    ztlib.check(want > 0.5 and abs(saved - want) <= 0.05 * want,
                f"partition_activations_saves_what_estimate_says ({saved:.2f} MiB measured, {want:.2f} MiB estimated)",
                f"{measured} {predicted}")

# the simulated GPU: device comms over the groups (host-staged), bf16
SIM = ["device=sim"]
p, rows = ztlib.train(cfg, HEADS + SIM)
sim_base = ztlib.losses(rows)
if ztlib.check(p.returncode == 0 and len(sim_base) == 20, "sim_tp1_runs", p.stderr[-1500:]):
    for tp, dp, stage in ((2, 1, 0), (2, 2, 3), (4, 1, 2)):
        r = tp_run(f"sim_tp{tp}_dp{dp}_stage{stage}", tp, dp, [f"zero_optimization.stage={stage}"], ref=sim_base,
                   tol=1e-3, device=SIM)

# two device comms (data- and tensor-parallel) whose collectives could overlap on the device are refused:
# NCCL's comms share one stream (cuda/comm_nccl.cu); a comm table that queued them on a queue of its
# own, as each NCCL comm once did, is stopped here before the first step, named
p = ztlib.run(["train", cfg, "--set", "device=sim", "--set", "tensor_parallel.tp_size=2", "--set", "train_iters=1"]
              + sum((["--set", h] for h in HEADS), []), ranks=4, env={"ZEROTRAIN_INJECT_OWN_COMM_ORDER": "1"})
ztlib.check(p.returncode != 0 and "different device queues" in p.stderr and "share one order" in p.stderr,
            "sim_device_comms_on_separate_queues_refused", p.stderr[-800:])

# DeepSpeed's name for it
p, rows = ztlib.train(cfg, HEADS + ["tensor_parallel.autotp_size=2", "train_iters=3"], ranks=2)
ztlib.check(p.returncode == 0 and ztlib.max_rel_diff(ztlib.losses(rows), base[:3]) <= 1e-5, "autotp_size_is_tp_size",
            p.stderr[-800:])

# what cannot be split is refused before anything runs, naming the key
p = ztlib.run(["train", cfg, "--set", "tensor_parallel.tp_size=3"] + sum((["--set", h] for h in HEADS), []), ranks=3)
ztlib.check(p.returncode != 0 and "tensor_parallel.tp_size" in p.stderr and "n_head" in p.stderr,
            "tp_must_divide_heads", p.stderr[-500:])
p = ztlib.run(["train", cfg, "--set", "tensor_parallel.tp_size=2"] + sum((["--set", h] for h in HEADS), []), ranks=3)
ztlib.check(p.returncode != 0 and "tp_size 2 does not divide the 3 ranks" in p.stderr, "tp_must_divide_ranks",
            p.stderr[-500:])
ztlib.finish()
