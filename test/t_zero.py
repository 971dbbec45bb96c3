"""t_zero.py — ZeRO equivalence: the tiny config trained 20 steps with stages 0-3 on 1, 2 and 4
ranks, with and without overlap_comm, gives the single-rank stage-0 loss trajectory (same global
batch of 8 sequences: micro 2, accumulation 8 / (2 x ranks)).

Bit-identical where the order of the fp32 gradient additions is the same:
  - on one rank, stages 0 and 1 (micro-batch gradients accumulate inside the GEMMs, beta = 1);
  - on one rank, stages 2 and 3 (each micro-batch's gradient is reduced into the shard and added
    there), with or without overlap_comm.
Otherwise (stage 0/1 vs 2/3, or several ranks, where the gradient is a sum of per-rank partial
sums) the additions happen in another order, and we require the loss of every step to agree with
the single-rank stage-0 run to a relative 1e-5 (observed: about 3e-8, i.e. fp32 rounding)."""
import ztlib

ztlib.ensure_shakespeare()
cfg = "configs/tiny.yaml"
p, base_rows = ztlib.train(cfg)
base = ztlib.losses(base_rows)
ztlib.check(p.returncode == 0 and len(base) == 20, "baseline_runs", p.stderr[-2000:])
ztlib.check(base and base[-1] < base[0] - 1.0, "baseline_learns", f"losses {base[:1]} -> {base[-1:]}")
p, rows = ztlib.train(cfg, ["zero_optimization.stage=2"])
base_reduced = ztlib.losses(rows)

for ranks in (1, 2, 4):
    for stage in (0, 1, 2, 3):
        for overlap in ("false", "true"):
            name = f"stage{stage}_ranks{ranks}_overlap_{overlap}"
            p, rows = ztlib.train(cfg, [f"zero_optimization.stage={stage}",
                                        f"zero_optimization.overlap_comm={overlap}"], ranks=ranks)
            got = ztlib.losses(rows)
            if not ztlib.check(p.returncode == 0 and len(got) == 20, name + "_runs", p.stderr[-1500:]):
                continue
            if ranks == 1:
                ref = base if stage < 2 else base_reduced
                d = ztlib.max_rel_diff(got, ref)
                ztlib.check(d == 0.0, name + "_bit_identical", f"max relative difference {d:.3g}")
            d = ztlib.max_rel_diff(got, base)
            ztlib.check(d <= 1e-5, name + f"_matches_single_rank (max rel diff {d:.1e})", f"max relative difference {d:.3g}")
ztlib.finish()
