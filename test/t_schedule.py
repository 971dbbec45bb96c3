"""t_schedule.py — learning-rate schedules and gradient clipping as a DeepSpeed user expects:
the lr of every step of WarmupLR, WarmupDecayLR and WarmupCosineLR (log and linear warmup) equals
DeepSpeed's formulas (deepspeed/runtime/lr_schedules.py, re-derived here independently; step s uses
last_batch_iteration = s), and clipping by a tiny global norm all but stops learning (AdamW is
invariant to gradient scale except through eps, so a clip to 1e-10 shrinks every update ~1e4x)."""
import math

import ztlib

ztlib.ensure_shakespeare()
tiny = "configs/tiny.yaml"
N = 30


def warm(s, W, kind):
    W = max(2, W)
    return math.log(s + 1) / math.log(W) if kind == "log" else s / W


def expected(kind, sched, lr, W, total, **kw):
    out = []
    for s in range(N):
        if sched == "WarmupLR":
            g = warm(s, W, kind) if s < max(2, W) else 1.0
            out.append(kw.get("min_lr", 0.0) + (lr - kw.get("min_lr", 0.0)) * g)
        elif sched == "WarmupDecayLR":
            Wc = max(2, W)
            g = warm(s, W, kind) if s < Wc else max(0.0, (total - s) / max(1.0, total - Wc))
            out.append(kw.get("min_lr", 0.0) + (lr - kw.get("min_lr", 0.0)) * g)
        else:
            Wc = max(2, W)
            if s < Wc:
                r = kw["warmup_min_ratio"] + warm(s, W, kind) * (1 - kw["warmup_min_ratio"])
            else:
                r = kw["cos_min_ratio"] + (1 - kw["cos_min_ratio"]) * (1 + math.cos(math.pi * min(1.0, (s - Wc + 1) / (total - Wc)))) / 2
            out.append(lr * max(0.0, r))
    return out


cases = [
    ("WarmupLR", "log", {"min_lr": 1e-4}, [f"scheduler.params.warmup_min_lr=1e-4"]),
    ("WarmupLR", "linear", {}, []),
    ("WarmupDecayLR", "linear", {}, ["scheduler.params.total_num_steps=25"]),
    ("WarmupDecayLR", "log", {"min_lr": 2e-4}, ["scheduler.params.total_num_steps=25", "scheduler.params.warmup_min_lr=2e-4"]),
    ("WarmupCosineLR", "linear", {"warmup_min_ratio": 0.1, "cos_min_ratio": 0.05},
     ["scheduler.params.total_num_steps=25", "scheduler.params.warmup_min_ratio=0.1", "scheduler.params.cos_min_ratio=0.05"]),
]
for sched, kind, kw, extra in cases:
    sets = [f"train_iters={N}", "scheduler.type=" + sched, f"scheduler.params.warmup_type={kind}",
            "scheduler.params.warmup_num_steps=8", "optimizer.params.lr=3e-3"] + extra
    if sched != "WarmupCosineLR":
        sets.append("scheduler.params.warmup_max_lr=3e-3")
    p, rows = ztlib.train(tiny, sets)
    got = [r["lr"] for r in rows]
    want = expected(kind, sched, 3e-3, 8, 25, **kw)
    ok = p.returncode == 0 and len(got) == N and all(abs(a - b) <= 1e-6 * 3e-3 for a, b in zip(got, want))
    ztlib.check(ok, f"lr_{sched}_{kind}", f"got {got[:4]}..{got[-2:]} want {want[:4]}..{want[-2:]}; {p.stderr[-400:]}")

_, free_rows = ztlib.train(tiny)
_, clip_rows = ztlib.train(tiny, ["gradient_clipping=1e-10"])
f, c = ztlib.losses(free_rows), ztlib.losses(clip_rows)
ztlib.check(len(c) == 20 and f[0] == c[0] and abs(c[-1] - c[0]) < 0.05 < f[0] - f[-1] and
            all(r["grad_norm"] > 1e-10 for r in clip_rows), "clipping_to_tiny_norm_stops_learning",
            f"clipped {c[0]} -> {c[-1]}, free {f[0]} -> {f[-1]}")
ztlib.finish()
