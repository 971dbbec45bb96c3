"""t_tiled_linear.py — tiled linears for ZeRO-3 (zero_optimization.tiled_linear.in_splits): each block's
four linears cut into row tiles, each tile its own segment, gathered, used and released in turn.

  - losses: tiles 2 and 4 at stages 0-3 (1 and 2 ranks), with tensor parallelism 2, parameter offload and
    activation checkpointing give the untiled run's losses within 1e-5 relative per step (the tiles
    add a linear's partial products in another order: fp32 rounding, not bit for bit; observed 3e-8);
    on the simulated GPU within 1e-3 of its untiled run;
  - memory: on the simulated GPU at stage 3 (persistence threshold 0, so every tile rotates), the device
    memory its allocator reports ("device in use") drops with tiles by what `estimate` predicts for the
    stage-3 row, within 5% (the gather and gradient buffers are sized by the largest segment: a tile,
    not a block);
  - the Llama family (nn.Linear layout: a row tile is a block of the output's columns, q|k|v and
    gate|up each one weight) at stages 0 and 3, 2 ranks, tensor parallelism and activation
    checkpointing gives its untiled run's losses (1e-5; the simulated GPU 1e-3);
  - bad values are refused with the key: out_splits other than 1, in_splits not dividing the rows."""
import re

import ztlib

ztlib.ensure_shakespeare()
cfg = "configs/tiny.yaml"
HEADS = ["model.n_head=4"]


def tiled(n):
    return [f"zero_optimization.tiled_linear.in_splits={n}"]


p, rows = ztlib.train(cfg, HEADS)
base = ztlib.losses(rows)
ztlib.check(p.returncode == 0 and len(base) == 20, "untiled_baseline_runs", p.stderr[-1500:])


def run(name, sets, ranks=0):
    p, rows = ztlib.train(cfg, HEADS + sets, ranks=ranks)
    got = ztlib.losses(rows)
    if not ztlib.check(p.returncode == 0 and len(got) == 20, name + "_runs", p.stderr[-1500:]):
        return
    d = ztlib.max_rel_diff(got, base)
    ztlib.check(d <= 1e-5, f"{name}_matches_untiled (max rel diff {d:.1e})", f"max relative difference {d:.3g}")


for tiles in (2, 4):
    for stage in (0, 1, 2, 3):
        run(f"tiles{tiles}_stage{stage}", tiled(tiles) + [f"zero_optimization.stage={stage}"])
run("tiles4_stage3_ranks2", tiled(4) + ["zero_optimization.stage=3"], ranks=2)
run("tiles2_stage3_tp2", tiled(2) + ["zero_optimization.stage=3", "tensor_parallel.tp_size=2"], ranks=2)
run("tiles2_stage3_offload_param", tiled(2) + ["zero_optimization.stage=3", "zero_optimization.offload_param.device=cpu",
                                               "zero_optimization.stage3_param_persistence_threshold=0"])
run("tiles4_stage3_act_ckpt", tiled(4) + ["zero_optimization.stage=3", "activation_checkpointing.enabled=true",
                                          "zero_optimization.stage3_param_persistence_threshold=0"])

# the simulated GPU (bf16; the tiles' partial products add up in fp32, rounded once with the bias): within
# 1e-3 of its own untiled run (observed: 3e-5)
p, rows = ztlib.train(cfg, HEADS + ["device=sim", "zero_optimization.stage=3"])
sim_base = ztlib.losses(rows)
p, rows = ztlib.train(cfg, HEADS + tiled(4) + ["device=sim", "zero_optimization.stage=3"])
got = ztlib.losses(rows)
d = ztlib.max_rel_diff(got, sim_base) if len(got) == len(sim_base) == 20 else float("inf")
ztlib.check(p.returncode == 0 and d <= 1e-3, f"sim_tiles4_stage3_matches_untiled (max rel diff {d:.1e})", p.stderr[-800:])

# the Llama family (nn.Linear weights: a row tile is a block of output columns; q|k|v and gate|up one
# weight each): the untiled Llama run's losses, on the CPU and the simulated GPU
LLAMA = ["model.model_type=llama", "model.num_key_value_heads=2", "model.intermediate_size=96"]
p, rows = ztlib.train(cfg, HEADS + LLAMA)
llama_base = ztlib.losses(rows)
for name, sets, ranks in (("tiles2_stage0", tiled(2), 0),
                          ("tiles4_stage3", tiled(4) + ["zero_optimization.stage=3"], 0),
                          ("tiles2_stage3_ranks2", tiled(2) + ["zero_optimization.stage=3"], 2),
                          ("tiles2_stage3_tp2", tiled(2) + ["zero_optimization.stage=3", "tensor_parallel.tp_size=2"], 2),
                          ("tiles2_stage3_act_ckpt", tiled(2) + ["zero_optimization.stage=3",
                                                                 "activation_checkpointing.enabled=true"], 0)):
    p, rows = ztlib.train(cfg, HEADS + LLAMA + sets, ranks=ranks)
    d = ztlib.max_rel_diff(ztlib.losses(rows), llama_base) if len(llama_base) == 20 else float("inf")
    ztlib.check(p.returncode == 0 and d <= 1e-5, f"llama_{name}_matches_untiled (max rel diff {d:.1e})", p.stderr[-800:])
p, rows = ztlib.train(cfg, HEADS + LLAMA + ["device=sim", "zero_optimization.stage=3"])
sim_base = ztlib.losses(rows)
p, rows = ztlib.train(cfg, HEADS + LLAMA + tiled(4) + ["device=sim", "zero_optimization.stage=3"])
got = ztlib.losses(rows)
d = ztlib.max_rel_diff(got, sim_base) if len(got) == len(sim_base) == 20 else float("inf")
ztlib.check(p.returncode == 0 and d <= 1e-3, f"llama_sim_tiles4_stage3_matches_untiled (max rel diff {d:.1e})",
            p.stderr[-800:])
p = ztlib.run(["train", cfg] + sum((["--set", x] for x in HEADS + LLAMA + ["model.intermediate_size=89"] + tiled(4)), []))
ztlib.check(p.returncode != 0 and "in_splits 4 must divide" in p.stderr and "gate|up 178" in p.stderr,
            "llama_refused_in_splits_not_dividing_its_rows", p.stderr[-400:])

# memory, measured by the simulated GPU's allocator against estimate
BIG = ["model.n_layer=4", "model.n_embd=256", "model.n_head=4", "train_batch_size=4", "train_micro_batch_size_per_gpu=4",
       "data.seq_len=64", "zero_optimization.stage=3", "zero_optimization.stage3_param_persistence_threshold=0"]


def device_in_use(extra):
    p, _ = ztlib.train(cfg, BIG + extra + ["device=sim", "train_iters=2", "memory_breakdown=true"])
    m = re.findall(r"device in use ([0-9.]+) of", p.stderr + p.stdout)
    return float(m[-1]) if p.returncode == 0 and m else None


def estimated(extra):
    p = ztlib.run(["estimate", cfg, "--ranks", "1"] + sum((["--set", x] for x in BIG + extra), []))
    m = re.search(r"^3 +device +device +[0-9.]+ MiB +([0-9.]+) MiB", p.stdout, re.M)
    return float(m.group(1)) if m else None


measured = [device_in_use([]), device_in_use(tiled(4))]
predicted = [estimated([]), estimated(tiled(4))]
if ztlib.check(None not in measured + predicted, "tiled_memory_figures", f"{measured} {predicted}"):
    saved, want = measured[0] - measured[1], predicted[0] - predicted[1]
    ztlib.check(want > 1.0 and abs(saved - want) <= 0.05 * want,
                f"tiles_save_what_estimate_says ({saved:.2f} MiB measured, {want:.2f} MiB estimated)",
                f"{measured} {predicted}")

# refused values name the key
for sets, want in ((["zero_optimization.tiled_linear.out_splits=2"], "out_splits"),
                   (tiled(3), "in_splits")):
    p = ztlib.run(["train", cfg] + sum((["--set", x] for x in HEADS + sets), []))
    ztlib.check(p.returncode != 0 and want in p.stderr and p.stderr.count("\n") == 1, f"refused_{want}", p.stderr[-400:])
ztlib.finish()
