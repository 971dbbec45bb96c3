"""t_keep_last.py — checkpoint.keep_last prunes across a requeue chain (issue 48, item 3).
Each save records its lineage (index.h5 attribute lineage: its run id, then the runs it descends
from); keep_last counts and removes the steps of the saving run's lineage, never another run's:
  - the issue's reproduction: five jobs that each resume from `latest` and save once (train_iters
    3, 6, 9, 12, 15, keep_last 2, save_interval 0) leave step_12 and step_15, not all five; step_15's
    lineage names the five runs, its own first, and `info` counts them;
  - kill -9 cycles under `run --restarts`: a rank killed right after each attempt's first new
    checkpoint, four times; the job finishes with keep_last's two steps (28, 30), not every
    attempt's leftovers;
  - a step directory another run saved (copied in) stays and does not count: the run saves twice
    and says so once (an info line naming it);
  - a damaged lineage attribute warns, naming the index, and is taken as its run alone (pruning
    only less); an index without one (saved before lineages) is its run alone without a warning:
    the steps of the runs before it stay.
configs/tiny.yaml on 1 rank (2 under `run`); every wait is on a state (a checkpoint written, a rank running)."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import h5py

import ztlib

ztlib.ensure_shakespeare()
TINY = "configs/tiny.yaml"
tmp = tempfile.mkdtemp(prefix="zt_keep_last_")
OTHER_RUNS = "outside this run's lineage"


def job(ck, iters, extra=()):
    """one queued job: resumes from ck's `latest`, trains to ITERS, saves at the end (keep_last 2)"""
    args = ["train", TINY, "--set", f"checkpoint.dir={ck}", "--set", f"train_iters={iters}", "--set",
            "checkpoint.keep_last=2", "--set", "checkpoint.save_interval=0", "--set", "steps_per_print=1000"]
    for s in extra:
        args += ["--set", s]
    return ztlib.run(args)


def steps(ck):
    return sorted(d for d in os.listdir(ck) if d.startswith("step_"))


def latest_of(ck):
    p = os.path.join(ck, "latest")
    return open(p).read().strip() if os.path.exists(p) else None


def attrs(ck, step):
    with h5py.File(os.path.join(ck, step, "index.h5"), "r") as h:
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in h.attrs.items()}


try:
    # ---- the reproduction: five requeued jobs, each saving once
    ck = os.path.join(tmp, "requeue")
    runs = [job(ck, it) for it in (3, 6, 9, 12, 15)]
    ztlib.check(all(r.returncode == 0 for r in runs), "requeue_jobs_run", "".join(r.stderr[-400:] for r in runs))
    ztlib.check(steps(ck) == ["step_00000012", "step_00000015"] and latest_of(ck) == "step_00000015",
                "requeue_chain_keeps_keep_last_steps", str(steps(ck)))
    a = attrs(ck, "step_00000015")
    lineage = a.get("lineage", "").split(" ")
    ztlib.check(len(lineage) == 5 and lineage[0] == a["run_id"] and len(set(lineage)) == 5
                and lineage[1] == attrs(ck, "step_00000012")["run_id"], "lineage_names_the_chain_newest_first", str(a.get("lineage")))
    ztlib.check(not any(OTHER_RUNS in r.stdout + r.stderr for r in runs), "requeue_chain_says_nothing_of_other_runs")
    r = ztlib.run(["info", ck])
    parent = lineage[1] if len(lineage) > 1 else "(none)"
    ztlib.check(r.returncode == 0 and f"lineage: 5 runs (resumed from a checkpoint of run {parent})" in r.stdout,
                "info_counts_the_lineage", r.stdout[:600] + r.stderr[-400:])

    # ---- kill -9 cycles under `run --restarts`: each attempt killed after its first new checkpoint
    kck = os.path.join(tmp, "kill9")
    cmd = [ztlib.BIN, "run", "-n", "2", "--restarts", "5", TINY, "--set", "train_iters=30", "--set", f"checkpoint.dir={kck}",
           "--set", "checkpoint.save_interval=2", "--set", "checkpoint.keep_last=2", "--set", "steps_per_print=1000"]
    proc = subprocess.Popen(cmd, cwd=ztlib.ROOT, env=dict(ztlib.ENV, ZEROTRAIN_RESTART_BACKOFF="0.2"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    ztlib.started.append(proc)
    killed, seen, kills = set(), None, 0

    def attempt_saved():
        pids = ztlib.rank_pids(kck)
        return len(pids) == 2 and not killed & set(pids) and latest_of(kck) not in (None, seen)

    for _ in range(4):
        while proc.poll() is None and not attempt_saved():
            time.sleep(0.05)
        if proc.poll() is not None:
            break
        seen, victims = latest_of(kck), ztlib.rank_pids(kck)
        killed |= set(victims)
        os.kill(victims[-1], signal.SIGKILL)
        kills += 1
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        ztlib.kill_tree(proc.pid)
        out, err = proc.communicate()
    restarts = [l for l in err.splitlines() if l.startswith("zerotrain run: restart ")]
    ztlib.check(proc.returncode == 0 and kills >= 3 and len(restarts) == kills and latest_of(kck) == "step_00000030",
                "kill9_cycles_finish", f"rc {proc.returncode}, {kills} kills, restarts {restarts}; {err[-600:]}")
    ztlib.check(steps(kck) == ["step_00000028", "step_00000030"], "kill9_cycles_keep_keep_last_steps",
                f"{steps(kck)} after {kills} kills")

    # ---- another run's step directory (copied in) stays, does not count, and is named once
    shutil.copytree(os.path.join(kck, "step_00000030"), os.path.join(ck, "step_00000001"))
    r = job(ck, 21, ["checkpoint.save_interval=3"])  # saves 18 and 21
    told = [l for l in (r.stdout + r.stderr).splitlines() if OTHER_RUNS in l]
    ztlib.check(r.returncode == 0 and steps(ck) == ["step_00000001", "step_00000018", "step_00000021"],
                "other_runs_step_stays_and_does_not_count", f"{steps(ck)}; {r.stderr[-400:]}")
    ztlib.check(len(told) == 1 and "step_00000001" in told[0] and "1 step directory" in told[0],
                "other_runs_step_named_once", str(told))

    # ---- a damaged lineage: a warning naming the index; the run goes on with that run alone
    with h5py.File(os.path.join(ck, "step_00000021", "index.h5"), "r+") as h:
        h.attrs["lineage"] = "not a lineage"
    os.unlink(os.path.join(ck, "step_00000021", "manifest"))  # as an older zerotrain saved it: the manifest would refuse the edit
    r = job(ck, 24)
    warned = [l for l in r.stderr.splitlines() if "step_00000021/index.h5: attribute lineage" in l]
    ztlib.check(r.returncode == 0 and len(warned) == 1 and "zerotrain: warning:" in warned[0]
                and steps(ck) == ["step_00000001", "step_00000021", "step_00000024"],
                "damaged_lineage_warns_and_is_its_run_alone", f"{warned} {steps(ck)}; {r.stderr[-400:]}")

    # ---- an index saved before lineages (no attribute): its run alone, no warning; the step of the
    # run before it (21) is not this lineage's: it stays, and is named with the copied one
    with h5py.File(os.path.join(ck, "step_00000024", "index.h5"), "r+") as h:
        del h.attrs["lineage"]
    os.unlink(os.path.join(ck, "step_00000024", "manifest"))
    r = job(ck, 27)
    told = [l for l in (r.stdout + r.stderr).splitlines() if OTHER_RUNS in l]
    warnings = [l for l in r.stderr.splitlines() if "warning" in l and "has no manifest" not in l]
    ztlib.check(r.returncode == 0 and not warnings
                and steps(ck) == ["step_00000001", "step_00000021", "step_00000024", "step_00000027"]
                and len(told) == 1 and "2 step directories" in told[0], "index_without_lineage_is_its_run_alone",
                f"{steps(ck)} {told}; {r.stderr[-400:]}")
finally:
    ztlib.kill_started()
    shutil.rmtree(tmp, ignore_errors=True)
ztlib.finish()
