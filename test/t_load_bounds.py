"""t_load_bounds.py — every phase before the first step ends in bounded time (issue 48 item 6): a
resume whose checkpoint load is stuck (ZEROTRAIN_INJECT_LOAD_STALL: as on a hung file system) ends
on its own, without a signal from outside, and so does `run --restarts`' health check of `latest`.
  - one rank alone (no peer to wait on it, no mpirun): it ends with one line "rank 0 (host H): resume
    load of step_00000002 did not finish in 1 s (ZEROTRAIN_LOAD_TIMEOUT); aborting the job", exit 1;
  - two ranks, both stuck outside any collective: each has its own bound; the first rank past it ends
    the job with that line (mpirun ends the other);
  - two ranks, rank 1's load stuck while rank 0 waits on it in a collective: rank 1 itself ends the job;
  - the bound a run gets without ZEROTRAIN_LOAD_TIMEOUT is sized from the step's bytes on disk at a
    conservative rate plus a floor, and says so (the stall hook's line prints it; SIGTERM ends it);
  - `run --restarts 1`: the stuck attempt ends on its bound, the health check's `zerotrain info` of
    latest (stuck too) ends on the same bound with one line saying the file system may be stuck and
    the checkpoint is not taken as damaged, the restart resumes from latest as it is, and run gives
    up when its restarts are used up, instead of waiting forever.
ZEROTRAIN_LOAD_TIMEOUT=1 keeps each case to seconds; every case waits on process exit or a log line."""
import os
import re
import shutil
import signal
import subprocess
import tempfile

import ztlib

ztlib.ensure_shakespeare()
TINY = "configs/tiny.yaml"
tmp = tempfile.mkdtemp(prefix="zt_loadb_")
ck = os.path.join(tmp, "ck")
STALL = {"ZEROTRAIN_INJECT_LOAD_STALL": "1", "ZEROTRAIN_LOAD_TIMEOUT": "1"}
WANT = "resume load of step_00000002 did not finish in 1 s (ZEROTRAIN_LOAD_TIMEOUT); aborting the job"


def train_args(iters):
    return ["train", TINY, "--set", f"checkpoint.dir={ck}", "--set", f"train_iters={iters}",
            "--set", "checkpoint.save_interval=2", "--set", "steps_per_print=1000"]


try:
    p = ztlib.run(train_args(2), timeout=120)
    ztlib.check(p.returncode == 0 and os.path.isdir(os.path.join(ck, "step_00000002")), "checkpoint_made", p.stderr[-600:])

    # ---- one rank alone: before, nothing bounded its load (no peer waits on it)
    r = ztlib.finish_ranked(ztlib.start_ranked(train_args(4), ranks=0, env=STALL), timeout=60)
    ztlib.check(not r.timed_out and r.rc == 1 and len(r.errors) == 1 and "rank 0 (host " in r.errors[0]
                and WANT in r.errors[0], "stuck_load_of_one_rank_ends_on_its_bound", r.why())

    # ---- two ranks, each stuck in its own read: each rank's own bound ends it
    r = ztlib.finish_ranked(ztlib.start_ranked(train_args(4), ranks=2, env=STALL), timeout=60)
    ztlib.check(not r.timed_out and r.rc != 0 and 0 not in r.rank_status.values() and r.errors
                and all(WANT in e for e in r.errors), "stuck_load_of_two_ranks_ends_on_its_bound", r.why())

    # ---- one rank's load stuck while the other waits on it in the load's collective: the stuck rank
    # itself ends the job (its peer's wait is bounded by the load's bound too, comm_timeout being shorter)
    r = ztlib.finish_ranked(ztlib.start_ranked(train_args(4), ranks=2, env=dict(STALL, ZEROTRAIN_INJECT_LOAD_STALL="rank:1")),
                            timeout=60)
    ztlib.check(not r.timed_out and r.rc != 0 and len(r.errors) == 1 and "rank 1 (host " in r.errors[0]
                and WANT in r.errors[0], "stuck_load_of_one_of_two_ranks_ends_it", r.why())

    # ---- the default bound: the step's bytes at the conservative rate plus the floor, in the line
    p = ztlib.start_ranked(train_args(4), ranks=0, env={"ZEROTRAIN_INJECT_LOAD_STALL": "1"})
    line = ""
    for line in p.stdout:  # the state: the load has begun, with its bound
        if "stalled by ZEROTRAIN_INJECT_LOAD_STALL" in line:
            break
    p.send_signal(signal.SIGTERM)
    r = ztlib.finish_ranked(p, timeout=30)
    size = sum(os.path.getsize(os.path.join(ck, "step_00000002", n)) for n in os.listdir(os.path.join(ck, "step_00000002"))
               if os.path.isfile(os.path.join(ck, "step_00000002", n)))
    m = re.search(r"bounded at ([0-9.]+) s: .* at 20 MB/s \+ 120 s floor; ZEROTRAIN_LOAD_TIMEOUT sets it\)", line)
    ztlib.check(m is not None and abs(float(m.group(1)) - (120 + size / 20e6)) < 0.01 and r.rc == 99,
                "default_bound_is_sized_from_the_checkpoint", f"{line!r}; {size} bytes; {r.why()}")

    # ---- run --restarts: the attempt and the health check's `info` both end on their bound
    proc = subprocess.Popen([ztlib.BIN, "run", "-n", "2", "--restarts", "1"] + train_args(4)[1:], cwd=ztlib.ROOT,
                            env=dict(ztlib.ENV, ZEROTRAIN_RESTART_BACKOFF="0.2", **STALL), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    ztlib.started.append(proc)  # killed with what it started if it outlives the test
    err = ztlib.finish_ranked(proc, timeout=120).stderr
    restarts = [l for l in err.splitlines() if l.startswith("zerotrain run: restart ")]
    info_lines = [l for l in err.splitlines() if "`zerotrain info " in l and "did not finish in 1 s" in l]
    ztlib.check(proc.returncode != 0 and len(restarts) == 1 and "resuming from it as it is" in restarts[0]
                and len(info_lines) >= 1 and "step_00000002` did not finish in 1 s (ZEROTRAIN_LOAD_TIMEOUT): its file "
                "system may be stuck; not taken as damaged" in info_lines[0] and "no restarts left" in err
                and err.count(WANT) >= 2, "restarts_bound_the_stuck_load_and_its_health_check",
                f"rc {proc.returncode}; {restarts}; {info_lines}; {err[-1500:]}")
finally:
    ztlib.kill_started()
    shutil.rmtree(tmp, ignore_errors=True)
ztlib.finish()
