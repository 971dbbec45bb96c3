"""t_deepspeed_train.py — DeepSpeed-config features that change a training run, on the tiny config:
Adam without bias correction (optimizer.params.bias_correction: false) gives the same losses
through the device Adam, the SIMD CPU Adam (offload ratio 1) and Twin-Flow's split (ratio 0.5), and
not those of bias-corrected Adam; memory_breakdown prints a memory line with each step line; and a
Hugging Face "auto" config from the corpus trains, with the "auto" values named at start."""
import ztlib

ztlib.ensure_shakespeare()
cfg = "configs/tiny.yaml"
base = ["train_iters=6", "zero_optimization.stage=1"]
no_bc = base + ["optimizer.params.bias_correction=false"]


def offload(ratio):
    return f"zero_optimization.offload_optimizer={{device: cpu, ratio: {ratio}}}"


p, rows = ztlib.train(cfg, no_bc)
ref = ztlib.losses(rows)
if ztlib.check(p.returncode == 0 and len(ref) == 6, "no_bias_correction_trains", p.stderr[-1500:]):
    for ratio in ("1", "0.5"):
        p, rows = ztlib.train(cfg, no_bc + [offload(ratio)])
        got = ztlib.losses(rows)
        ztlib.check(p.returncode == 0 and got == ref, f"no_bias_correction_cpu_adam_ratio_{ratio}_same_losses",
                    f"rc {p.returncode} {p.stderr[-800:]} max rel diff {ztlib.max_rel_diff(got, ref):.3g}")
    p, rows = ztlib.train(cfg, base)
    corrected = ztlib.losses(rows)
    # step 1's loss is computed before any update; from step 2 on the updates differ (uncorrected
    # Adam's first steps are smaller: m/(1-b1) vs m)
    ztlib.check(p.returncode == 0 and corrected[0] == ref[0] and corrected[2:] != ref[2:],
                "no_bias_correction_differs_from_adamw", f"{corrected} vs {ref}")
    p, rows = ztlib.train(cfg, no_bc, ranks=2)
    got = ztlib.losses(rows)
    ztlib.check(p.returncode == 0 and ztlib.max_rel_diff(got, ref) < 1e-5, "no_bias_correction_2_ranks_stage1",
                f"rc {p.returncode} {p.stderr[-800:]} max rel diff {ztlib.max_rel_diff(got, ref):.3g}")

# memory_breakdown: one memory line per printed step (steps 1, 5, 6 with steps_per_print 5)
p, rows = ztlib.train(cfg, base + ["memory_breakdown=true"])
lines = [line for line in p.stdout.splitlines() if line.startswith("memory step ")]
ztlib.check(p.returncode == 0 and len(lines) == 3 and "params" in lines[0] and "process RSS" in lines[0],
            "memory_breakdown_lines", "\n".join(lines) or p.stdout[-1500:])

# a Hugging Face Trainer config with "auto" everywhere trains (model and data from tiny via --set)
tiny_sets = ["model={n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 50257, n_positions: 64}",
             "data={train: 'build/testdata/shakespeare_train_*.bin', seq_len: 32}", "train_iters=3",
             "device=cpu", "sample_tokens=0", "optimizer.params.lr=3e-3"]
p, rows = ztlib.train("test/configs/deepspeed/hf_zero2_auto.json", tiny_sets, ranks=2)
ztlib.check(p.returncode == 0 and len(rows) == 3 and 'config: "auto" filled in: train_batch_size = 8,' in p.stdout
            and "zero_optimization.reduce_bucket_size = 1024" in p.stdout,
            "hf_auto_config_trains", p.stdout[-1500:] + p.stderr[-800:])
# the fine-tuning recipes' ZeRO-3 "offload everything" config: sub_group_size 0 (DeepSpeed: one tensor a
# group), stage3_max_live_parameters and stage3_max_reuse_distance 0, "auto" elsewhere
p, rows = ztlib.train("test/configs/deepspeed/hf_zero3_offload_all_sub_group_0.json", tiny_sets, ranks=2)
ztlib.check(p.returncode == 0 and len(rows) == 3 and "offload_param: the parameter shard" in p.stdout,
            "hf_zero3_offload_all_config_trains", p.stdout[-1500:] + p.stderr[-800:])
ztlib.finish()
