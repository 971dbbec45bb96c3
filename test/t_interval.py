"""t_interval.py — `zerotrain interval`: the checkpoint interval of Young (sqrt(2CM)) and Daly
(sqrt(2CM)[1 + sqrt(C/2M)/3 + C/18M] - C, or M once C >= 2M) against the formulas computed here;
the save and step times read from a training log (the mean of its "checkpoint: saved" lines and its
step lines); asynchronous saves' "save step" lines (C the blocked time, a failure during the write losing it too, never more often than a write takes); save_interval in steps; bad arguments are one error line and exit 2."""
import math
import os
import tempfile

import ztlib


def numbers(out):
    got = {}
    for line in out.splitlines():
        key, _, rest = line.partition(":")
        got[key] = rest.split()[0] if rest.split() else ""
    return got


def young(c, m):
    return math.sqrt(2 * c * m)


def daly(c, m):
    if c >= 2 * m:
        return m
    return math.sqrt(2 * c * m) * (1 + math.sqrt(c / (2 * m)) / 3 + c / (18 * m)) - c


for c, m in ((0.5, 45), (10, 3600), (2, 60), (300, 100)):
    p = ztlib.run(["interval", "--mtbf", str(m), "--save-seconds", str(c)])
    got = numbers(p.stdout)
    ok = p.returncode == 0 and math.isclose(float(got.get("young interval", "nan")), young(c, m), rel_tol=1e-3) \
        and math.isclose(float(got.get("daly interval", "nan")), daly(c, m), rel_tol=1e-3)
    ztlib.check(ok, f"young_daly_C{c}_M{m}", p.stdout + p.stderr)

# from a log: saves of 0.2 and 0.4 s (mean 0.3), steps of 100 and 300 ms (mean 0.2 s)
tmp = tempfile.mkdtemp()
log = os.path.join(tmp, "train.log")
with open(log, "w") as f:
    f.write("step     1/100 (  1%) | loss 10.8 | lr 0.00e+00 | norm 1.654 |   100.0 ms |      544 tok/s | 0.1 GFLOP/s | eta 1m\n"
            "checkpoint: saved /x/step_00000001 (0.02 GB in 0.20 s, 0.10 GB/s)\n"
            "step     2/100 (  2%) | loss 10.7 | lr 0.00e+00 | norm 1.654 |   300.0 ms |      544 tok/s | 0.1 GFLOP/s | eta 1m\n"
            "checkpoint: saved /x/step_00000002 (0.02 GB in 0.40 s, 0.10 GB/s)\n")
p = ztlib.run(["interval", "--mtbf", "60", log])
got = numbers(p.stdout)
want_steps = round(daly(0.3, 60) / 0.2)
ztlib.check(p.returncode == 0 and "the mean of 2 saves" in p.stdout
            and math.isclose(float(got.get("daly interval", "nan")), daly(0.3, 60), rel_tol=1e-3)
            and got.get("checkpoint.save_interval") == str(want_steps), "interval_from_a_training_log",
            f"want save_interval {want_steps}; " + p.stdout + p.stderr)

# asynchronous saves: C is what a save blocked, W when it was complete; a failure during the write loses
# the save in flight too: goodput 1 - C/tau - (tau/2 + W - C)/M
with open(log, "w") as f:
    f.write("save step 10: blocked 15.0 ms, written 300.0 ms\n"
            "step    11/100 ( 11%) | loss 10.7 | lr 0.00e+00 | norm 1.654 |   200.0 ms |      544 tok/s | 0.1 GFLOP/s | eta 1m\n"
            "save step 20: blocked 25.0 ms, written 500.0 ms\n")
p = ztlib.run(["interval", "--mtbf", "60", log])
got = numbers(p.stdout)
tau = daly(0.02, 60)
want = 100 * (1 - 0.02 / tau - (tau / 2 + 0.38) / 60)
ztlib.check(p.returncode == 0 and "the mean blocked time of 2 saves" in p.stdout and "write time W = 0.4 s" in p.stdout
            and math.isclose(float(got.get("daly interval", "nan")), tau, rel_tol=1e-3)
            and abs(float(got.get("expected goodput at that interval", "nan").rstrip("%")) - want) < 0.06,
            "interval_from_asynchronous_save_lines", f"want goodput {want:.2f}; " + p.stdout + p.stderr)
p = ztlib.run(["interval", "--mtbf", "60", "--save-seconds", "0.001", "--write-seconds", "5"])
got = numbers(p.stdout)
ztlib.check(p.returncode == 0 and math.isclose(float(got.get("daly interval", "nan")), 5, rel_tol=1e-3)
            and "one waits for the last" in p.stdout, "interval_not_below_an_asynchronous_write", p.stdout + p.stderr)

for name, args in {"no_mtbf": ["--save-seconds", "1"], "bad_mtbf": ["--mtbf", "-3", "--save-seconds", "1"],
                   "no_save_time": ["--mtbf", "60"], "missing_log": ["--mtbf", "60", os.path.join(tmp, "none")]}.items():
    p = ztlib.run(["interval"] + args)
    errs = [l for l in p.stderr.splitlines() if l.startswith("zerotrain: error:")]
    ztlib.check(p.returncode == 2 and len(errs) == 1, f"interval_{name}", p.stderr)
ztlib.finish()
