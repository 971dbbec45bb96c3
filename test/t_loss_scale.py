"""t_loss_scale.py — fp16 dynamic loss scaling in training, on the CPU backend with injected
overflows (ZEROTRAIN_INJECT_OVERFLOW puts an inf into the reduced gradients of the listed steps on
every rank, as a 16-bit overflow would):
  - a static power-of-two loss scale gives the unscaled run's trajectory bit for bit (scaling by 2^k
    and unscaling are exact in fp32);
  - an overflowing step is skipped (parameters unchanged: the next loss equals the loss a run without
    that step would see), logged, and the scale follows DeepSpeed's rules (hysteresis, window);
  - on 2 ranks at stage 2 every rank skips the same steps;
  - the scaler state is saved in checkpoints and a resumed run continues it exactly."""
import os
import tempfile

import ztlib

ztlib.ensure_shakespeare()
tiny = "configs/tiny.yaml"
_, base = ztlib.train(tiny)
p, rows = ztlib.train(tiny, ["fp16.enabled=true", "fp16.loss_scale=1024"])
ztlib.check(p.returncode == 0 and ztlib.losses(rows) == ztlib.losses(base), "static_power_of_two_scale_exact",
            f"{ztlib.losses(rows)[:3]} vs {ztlib.losses(base)[:3]}")

fp16 = ["fp16.enabled=true", "fp16.initial_scale_power=8", "fp16.hysteresis=2", "fp16.loss_scale_window=5"]
ztlib.ENV["ZEROTRAIN_INJECT_OVERFLOW"] = "3,4,9"
p, rows = ztlib.train(tiny, fp16)
scales = [r["loss_scale"] for r in rows]
skipped = [r["step"] for r in rows if r["skipped"]]
ztlib.check(p.returncode == 0 and skipped == [3, 4, 9], "overflowing_steps_skipped", f"{skipped} {p.stderr[-500:]}")
# DeepSpeed: 256 (step 3 absorbed by hysteresis 2), halved at step 4 -> 128 from step 5; steps 5-8 are 4
# clean steps (< window 5); step 9 overflows with hysteresis spent -> 64; 5 clean steps 10-14 -> 128 at
# 15; 5 more (15-19) -> 256 at 20
want = [256, 256, 256, 256, 128, 128, 128, 128, 128, 64, 64, 64, 64, 64, 128, 128, 128, 128, 128, 256]
ztlib.check(scales == want, "loss_scale_follows_deepspeed_rules", f"{scales}")
ztlib.check(p.stdout.count("update skipped") == 3 and all(r["grad_norm"] is None for r in rows if r["skipped"]),
            "overflow_logged", p.stdout[-600:])
losses = ztlib.losses(rows)

p, rows_2r = ztlib.train(tiny, fp16 + ["zero_optimization.stage=2"], ranks=2)
ztlib.check(p.returncode == 0 and [r["step"] for r in rows_2r if r["skipped"]] == [3, 4, 9] and
            [r["loss_scale"] for r in rows_2r] == want, "two_ranks_skip_together", p.stderr[-600:])

d = tempfile.mkdtemp()
m = os.path.join(d, "m.jsonl")
ztlib.train(tiny, fp16 + [f"checkpoint.dir={d}/ck", "train_iters=12"], metrics=m)
p, rows_r = ztlib.train(tiny, fp16 + [f"checkpoint.dir={d}/ck"], metrics=m)
ztlib.check(p.returncode == 0 and ztlib.losses(rows_r) == losses and [r["loss_scale"] for r in rows_r] == want,
            "resume_restores_loss_scaler", f"{[r['loss_scale'] for r in rows_r]}")
ztlib.finish()
