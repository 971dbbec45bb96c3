"""bench_async_save.py — what an asynchronous checkpoint save costs training (issue 51, part 1), on the
demo's config (configs/demo.yaml: 2 CPU ranks, ZeRO stage 2, as `make demo` runs it): runs with
checkpoint.async_save false and true alternated (ROUNDS each), a save every SAVE_EVERY steps. Prints:
  - the blocking time of a save (its `save step N: blocked B ms` line; the run's last save, blocking
    in both, left out): median over all saves of each kind, and the ratio async / blocking;
  - step time (the metrics' step_ms; a run's first step, which warms up, left out): median of the
    steps with an asynchronous write in flight (after a save began, up to the step whose boundary
    completed it) and of the other steps of the same runs, and of the blocking runs' steps; the ratio.
Usage: test/bench_async_save.py [ROUNDS] [STEPS] [SAVE_EVERY]   (defaults 3, 120, 10)"""
import os
import re
import statistics
import sys
import tempfile

import ztlib

rounds, steps, every = (int(a) for a in (sys.argv[1:] + ["3", "120", "10"][len(sys.argv) - 1:])[:3])
if not os.path.exists(os.path.join(ztlib.ROOT, "data/tinyshakespeare_val.bin")):
    ztlib.run(["tokenize", "--vocab", "data/gpt2", "data/tinyshakespeare.txt", "-o", "data/tinyshakespeare"])
tmp = tempfile.mkdtemp(prefix="zt_bench_async_")
blocked = {False: [], True: []}
step_ms = {"blocking": [], "async_in_flight": [], "async_idle": []}
for r in range(rounds):
    for async_save in (False, True):
        tag = f"{r}_{int(async_save)}"
        metrics = os.path.join(tmp, tag + ".jsonl")
        sets = [f"checkpoint.dir={tmp}/ck_{tag}", f"checkpoint.save_interval={every}", f"train_iters={steps}",
                f"checkpoint.async_save={str(async_save).lower()}", "sample_tokens=0", "eval_interval=0",
                f"metrics_file={metrics}", "steps_per_print=1000"]
        p = ztlib.run(["train", "configs/demo.yaml"] + sum((["--set", s] for s in sets), []), ranks=2, timeout=1800,
                      env={"OMP_NUM_THREADS": "1"})
        if p.returncode != 0:
            sys.exit(f"run {tag} failed: {p.stderr[-800:]}")
        saves = [(int(m.group(1)), float(m.group(2))) for m in
                 re.finditer(r"^save step (\d+): blocked ([0-9.]+) ms, written ([0-9.]+) ms", p.stdout, re.M)]
        blocked[async_save] += [b for s, b in saves if s != steps]
        rows = ztlib.read_metrics(metrics)
        in_flight = set()
        for row in rows:  # a save of step S completed at the boundary of the step before the row naming it
            if async_save and "save_step" in row:
                in_flight |= set(range(row["save_step"] + 1, row["step"]))
        for row in rows[1:]:
            kind = "blocking" if not async_save else "async_in_flight" if row["step"] in in_flight else "async_idle"
            step_ms[kind].append(row["step_ms"])
        print(f"round {r} async_save={async_save}: {len(saves)} saves, blocked ms {[b for _, b in saves]}", flush=True)

mb, ma = statistics.median(blocked[False]), statistics.median(blocked[True])
print(f"blocked per save, median: blocking {mb:.1f} ms ({len(blocked[False])} saves), "
      f"async {ma:.1f} ms ({len(blocked[True])} saves): {100 * ma / mb:.1f} %")
med = {k: statistics.median(v) for k, v in step_ms.items() if v}
for k, v in step_ms.items():
    print(f"step_ms median {k}: {med.get(k, float('nan')):.2f} ms over {len(v)} steps")
if "async_in_flight" in med and "async_idle" in med:
    print(f"step time with a write in flight / without (same runs): {100 * (med['async_in_flight'] / med['async_idle'] - 1):+.1f} %")
