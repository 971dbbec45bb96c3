"""t_run_launcher.py — `zerotrain run` as a user (or a batch system) drives it:
  - its arguments are read strictly: `-n 2abc`, `-n 0`, a huge `-n`, an unknown option, two configs
    and a missing `-n` are one `zerotrain: error:` line and exit 2, before anything starts; so is a
    --set train would refuse (`--set foo`, `--set =x`, an unknown key, a value of the wrong type);
  - every argument reaches `train`, also past the 126 the launcher used to keep;
  - Ctrl-C (SIGINT) or SIGTERM to `zerotrain run`: the ranks finish their step, write a checkpoint
    (a 2-rank model whose save outlasts Open MPI's one-second kill delay), and `run` exits 99 with
    the checkpoint complete (`zerotrain info` verifies it), no rank left running and none of mpirun's
    "non-zero exit code" notices (a clean stop is no failure; a failed job keeps them);
  - a rank run by hand (`zerotrain train`) takes SIGINT as SIGTERM: it saves and exits 99;
  - a second signal stops at once (exit 1, one line, nothing left running, `latest` untouched), and
    so does a save that outlasts ZEROTRAIN_STOP_GRACE."""
import os
import signal
import subprocess
import tempfile
import time

import ztlib

ztlib.ensure_shakespeare()
tiny = "configs/tiny.yaml"
tmp = tempfile.mkdtemp()


def error_lines(text):
    return [l for l in text.splitlines() if l.startswith("zerotrain: error:")]


# ---- strict arguments
bad = {
    "run_n_trailing_garbage": (["-n", "2abc", tiny], "'2abc'"),
    "run_n_zero": (["-n", "0", tiny], "[1, 65536]"),
    "run_n_huge": (["-n", "99999999999999", tiny], "[1, 65536]"),
    "run_n_over_max": (["-n", "65537", tiny], "[1, 65536]"),
    "run_n_missing_value": ([tiny, "-n"], "-n needs"),
    "run_unknown_option": (["-n", "2", "--bogus", tiny], "unknown option '--bogus'"),
    "run_two_configs": (["-n", "2", tiny, tiny], "one CONFIG expected"),
    "run_no_ranks": ([tiny], "-n N"),
    "run_no_config": (["-n", "2"], "CONFIG is required"),
    "run_tp_not_dividing_ranks": (["-n", "3", "--tp", "2", tiny], "--tp 2 does not divide the 3 ranks"),
    "run_tp_bad": (["-n", "2", "--tp", "0", tiny], "[1, 64]"),
    # every --set as train reads it (issue 31): before mpirun starts, not from two ranks 3 s later
    "run_set_without_equals": (["-n", "2", tiny, "--set", "foo"], "--set foo: expected KEY=VALUE"),
    "run_set_without_key": (["-n", "2", tiny, "--set", "=x"], "--set =x: expected KEY=VALUE"),
    "run_set_joined_without_equals": (["-n", "2", tiny, "--set=foo"], "--set foo: expected KEY=VALUE"),
    "run_set_unknown_key": (["-n", "2", tiny, "--set", "optimizer.params.lrr=1"], "unknown key 'lrr'"),
    "run_set_bad_value": (["-n", "2", tiny, "--set", "train_iters=abc"], "--set train_iters: expected an integer"),
}
for name, (args, want) in bad.items():
    t0 = time.time()
    p = ztlib.run(["run"] + args, timeout=60)
    lines = error_lines(p.stderr)
    ztlib.check(p.returncode == 2 and len(lines) == 1 and want in lines[0] and p.stderr.count("\n") == 1
                and "mpirun" not in p.stdout, name, f"rc {p.returncode}, stderr [{p.stderr[-400:]}], stdout [{p.stdout[-200:]}]")

# ---- every argument reaches train: 150 --set pairs (300 arguments), the last one decides
metrics = os.path.join(tmp, "many.jsonl")
args = ["run", "-n", "2", tiny, "--set", f"metrics_file={metrics}"]
for _ in range(150):
    args += ["--set", "train_iters=1"]
args += ["--set", "train_iters=3"]
p = ztlib.run(args)
rows = open(metrics).read().splitlines() if os.path.exists(metrics) else []
ztlib.check(p.returncode == 0 and len(rows) == 3, "run_passes_every_argument",
            f"rc {p.returncode}, {len(rows)} metric rows; " + p.stderr[-600:])

# ---- --tp T trains tensor-parallel (over the config's own tp_size)
p = ztlib.run(["run", "-n", "2", "--tp", "2", tiny, "--set", "model.n_head=4", "--set", "train_iters=2",
               "--set", "tensor_parallel.tp_size=1"])
ztlib.check(p.returncode == 0 and "tensor parallel: 2 ranks a group" in p.stderr + p.stdout, "run_tp_trains_tensor_parallel",
            f"rc {p.returncode}; " + p.stderr[-600:])


def start(name, extra=(), env=None):
    """zerotrain run -n 2 with a checkpoint dir of its own; returns (proc, ckdir, metrics)."""
    ck = os.path.join(tmp, name + "_ck")
    m = os.path.join(tmp, name + ".jsonl")
    cmd = [ztlib.BIN, "run", "-n", "2", tiny, "--set", "train_iters=1000000", "--set", f"checkpoint.dir={ck}",
           "--set", f"metrics_file={m}", "--set", "steps_per_print=1000"] + list(extra)
    proc = subprocess.Popen(cmd, cwd=ztlib.ROOT, env=dict(ztlib.ENV, **(env or {})), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return proc, ck, m


def wait_rows(m, n, proc):
    """waits until the run has recorded n steps (or ended)"""
    while proc.poll() is None and (not os.path.exists(m) or len(open(m).read().splitlines()) < n):
        time.sleep(0.1)


def latest_of(ck):
    p = os.path.join(ck, "latest")
    return open(p).read().strip() if os.path.exists(p) else None


# ---- one signal: the save completes, exit 99. SIGINT with a model whose save outlasts by far Open
# MPI's one-second kill delay after a forwarded SIGTERM (8 x 512, 51M parameters: a 0.6 GB
# checkpoint plus its 16-bit Hugging Face copy, about 3.5 s here); SIGTERM with a smaller one.
big = ["--set", "model.n_layer=4", "--set", "model.n_embd=256", "--set", "model.n_head=4"]
slow_save = ["--set", "model.n_layer=8", "--set", "model.n_embd=512", "--set", "model.n_head=8",
             "--set", "zero_optimization.stage3_gather_16bit_weights_on_model_save=true"]
for sig, extra in ((signal.SIGINT, slow_save), (signal.SIGTERM, big)):
    name = f"run_{signal.Signals(sig).name.lower()}_saves_and_exits_99"
    proc, ck, m = start(name, extra)
    wait_rows(m, 2, proc)
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    info = ztlib.run(["info", ck], timeout=120)
    leftovers = ztlib.processes_with(ck)
    tmps = [d for d in os.listdir(ck) if d.startswith(".tmp")] if os.path.isdir(ck) else ["no dir"]
    banner = [x for x in ("non-zero exit code", "non-zero status") if x in err]  # mpirun's: a clean stop is none
    ztlib.check(proc.returncode == 99 and latest_of(ck) and info.returncode == 0 and not leftovers and not tmps
                and "checkpoint saved" in out + err and not banner, name,
                f"mpirun's failure notice {banner}; "
                f"rc {proc.returncode}, latest {latest_of(ck)}, info rc {info.returncode} {info.stderr[-300:]}, "
                f"left running {leftovers}, tmp {tmps}; " + err[-800:])

# ---- a failed job keeps the launcher's notice of it (only a clean stop's is dropped)
p = ztlib.run(["run", "-n", "2", tiny, "--set", f"data.train={tmp}/no_such_shard_*.bin"], timeout=120)
ztlib.check(p.returncode not in (0, 99) and "no token shard" in p.stderr and
            ("non-zero exit code" in p.stderr or "non-zero status" in p.stderr), "run_failure_keeps_mpirun_notice",
            f"rc {p.returncode}: {p.stderr[-600:]}")

# ---- a rank run by hand takes SIGINT as SIGTERM: saves and exits 99
ck = os.path.join(tmp, "alone_ck")
m = os.path.join(tmp, "alone.jsonl")
proc = subprocess.Popen([ztlib.BIN, "train", tiny, "--set", "train_iters=1000000", "--set", f"checkpoint.dir={ck}",
                         "--set", f"metrics_file={m}", "--set", "steps_per_print=1000"], cwd=ztlib.ROOT, env=ztlib.ENV,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
wait_rows(m, 2, proc)
proc.send_signal(signal.SIGINT)
out, err = proc.communicate(timeout=300)
info = ztlib.run(["info", ck], timeout=120)
ztlib.check(proc.returncode == 99 and latest_of(ck) and info.returncode == 0, "train_alone_sigint_saves_and_exits_99",
            f"rc {proc.returncode}, latest {latest_of(ck)}, info rc {info.returncode}; {err[-600:]}")

# ---- a second signal stops at once; latest stays what it was
proc, ck, m = start("run_second_sigint", ["--set", "checkpoint.save_interval=2"] + big)
wait_rows(m, 3, proc)
while proc.poll() is None and not latest_of(ck):
    time.sleep(0.1)
before = latest_of(ck)
proc.send_signal(signal.SIGINT)
seen = []  # two signals sent at once merge into one: the second follows the first's acknowledgement
for line in proc.stderr:
    seen.append(line)
    if line.startswith("zerotrain run: interrupted"):
        break
proc.send_signal(signal.SIGINT)
out, err = proc.communicate(timeout=120)
err = "".join(seen) + err
info = ztlib.run(["info", ck], timeout=120)
lines = error_lines(err)
ztlib.check(proc.returncode == 1 and len(lines) == 1 and "second signal" in lines[0] and not ztlib.processes_with(ck)
            and before and info.returncode == 0, "run_second_sigint_stops_at_once",
            f"rc {proc.returncode}, before {before}, info rc {info.returncode}, left {ztlib.processes_with(ck)}; {err[-600:]}")

# ---- a save that outlasts the grace period (0 s here) is stopped, with one line
proc, ck, m = start("run_grace_expired", env={"ZEROTRAIN_STOP_GRACE": "0"})
wait_rows(m, 2, proc)
proc.send_signal(signal.SIGTERM)
out, err = proc.communicate(timeout=120)
lines = error_lines(err)
ztlib.check(proc.returncode == 1 and len(lines) == 1 and "ZEROTRAIN_STOP_GRACE" in lines[0] and not ztlib.processes_with(ck),
            "run_grace_period_expired", f"rc {proc.returncode}, left {ztlib.processes_with(ck)}; {err[-600:]}")

ztlib.finish()
