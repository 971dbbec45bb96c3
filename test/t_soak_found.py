"""t_soak_found.py — what scripts/soak found, each its own case.
A stop signal that comes while the job is still starting (the soak aims its SIGTERM and Ctrl-C
faults at restarts):
  - a rank inside MPI_Init (an Open MPI component loaded, train's handler not yet in place) that gets
    SIGTERM: it used to end on the signal (status 143; 138 for the SIGUSR1 that mpirun passes on from
    run's Ctrl-C); now the signal is held from main's first line and acted on once the handler is in
    place: every rank trains one step, saves it and exits 99;
  - Ctrl-C to `run --restarts` while the launcher has not started the ranks (mpirun passes a signal
    only to the ranks it has started, so one still to come would never see it): it used to forward
    SIGUSR1 into the launch, which ended on it (status 138, an error line); now, before the banner,
    nothing is trained and nothing needs saving, so run stops the launch at once and exits 99 with
    one line, leaving no process behind, and `latest` as it was.
A launcher that does not end after the job failed (mpirun hung once both ranks were SIGKILLed at
once; here a launcher that stays after its mpirun ended, held as a hung one would be):
  - run used to wait for it forever; now, once the launcher said the job failed or every rank on
    run's node has ended, it gets ZEROTRAIN_LAUNCHER_GRACE seconds, then run stops it and restarts.
Each case waits on a state it reads from /proc or the file system, not on a clock."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import ztlib

ztlib.ensure_shakespeare()
tiny = "configs/tiny.yaml"
tmp = tempfile.mkdtemp()
SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def sets(name, iters=20):
    ck = os.path.join(tmp, name + "_ck")
    return ck, ["--set", f"train_iters={iters}", "--set", f"checkpoint.dir={ck}", "--set", "checkpoint.save_interval=5",
                "--set", f"metrics_file={os.path.join(tmp, name + '.jsonl')}"]


def latest_of(ck):
    p = os.path.join(ck, "latest")
    return open(p).read().strip() if os.path.exists(p) else None


def in_mpi_init(pid):
    """the rank is inside MPI_Init (it has loaded an Open MPI component, which happens there, after
    main) and train has not installed its stop handler yet (SigCgt lacks SIGTERM)"""
    try:
        caught = next(l for l in open(f"/proc/{pid}/status") if l.startswith("SigCgt:"))
        maps = open(f"/proc/{pid}/maps").read()
    except (OSError, StopIteration):
        return False
    return "/mca_" in maps and not int(caught.split()[1], 16) & SIGTERM_BIT


def finish(proc, timeout=300):
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        ztlib.kill_tree(proc.pid)
        return proc.communicate()


try:
    # ---- SIGTERM to a rank inside MPI_Init: the job trains a step, saves it, exits 99. The window is
    # a fraction of a second on a quiet machine: a launch where no rank was caught in it is tried again.
    caught, tries, rc, err, ck = None, 0, None, "", ""
    while caught is None and tries < 8:
        tries += 1
        ck, s = sets(f"sigterm_in_init_{tries}")
        proc = subprocess.Popen(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", ztlib.BIN, "train", tiny] + s,
                                cwd=ztlib.ROOT, env=ztlib.ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        ztlib.started.append(proc)
        while proc.poll() is None and caught is None:
            for pid in ztlib.rank_pids(ck):
                if in_mpi_init(pid):
                    os.kill(pid, signal.SIGTERM)
                    caught = pid
                    break
            else:
                if os.path.exists(os.path.join(tmp, f"sigterm_in_init_{tries}.jsonl")):
                    ztlib.kill_tree(proc.pid)  # past start-up (a step was written) without a catch: again
                    break
        out, err = finish(proc)
        rc = proc.returncode
    ztlib.check(caught is not None, "a_rank_caught_inside_mpi_init", f"{tries} launches, none caught in MPI_Init")
    ztlib.check(caught is None or (rc == 99 and latest_of(ck) == "step_00000001" and not ztlib.processes_with(ck)),
                "sigterm_during_rank_startup_saves_and_exits_99",
                f"rc {rc} (143: the rank died of it), latest {latest_of(ck)}; {err[-600:]}")

    # ---- Ctrl-C to run --restarts while the launcher has not started the ranks yet: a launcher held
    # before it starts (an mpirun first on PATH that waits for a file), as a slow one would be
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir)
    held = os.path.join(tmp, "launcher_held")
    with open(os.path.join(bindir, "mpirun"), "w") as f:
        f.write(f"#!/bin/sh\ntouch {held}\nwhile [ ! -e {held}.go ]; do sleep 0.05; done\n"
                f"exec {shutil.which('mpirun')} \"$@\"\n")
    os.chmod(os.path.join(bindir, "mpirun"), 0o755)
    ck, s = sets("ctrl_c_before_start")
    p = ztlib.run(["run", "-n", "2", tiny] + s + ["--set", "train_iters=5"])  # a checkpoint to keep
    before = latest_of(ck)
    env = dict(ztlib.ENV, PATH=bindir + ":" + os.environ["PATH"], ZEROTRAIN_RESTART_BACKOFF="0.2")
    proc = subprocess.Popen([ztlib.BIN, "run", "-n", "2", "--restarts", "3", tiny] + s, cwd=ztlib.ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    ztlib.started.append(proc)
    while proc.poll() is None and not os.path.exists(held):
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc, timeout=120)
    open(held + ".go", "w").close()  # nothing may be waiting on it any more; if it were, it must not hang
    lines = [l for l in err.splitlines() if l.startswith("zerotrain")]
    ztlib.check(p.returncode == 0 and before == "step_00000005" and proc.returncode == 99 and latest_of(ck) == before
                and len(lines) == 1 and "before the ranks started" in lines[0] and not ztlib.processes_with(held)
                and not ztlib.processes_with(ck), "ctrl_c_to_run_before_the_ranks_start_exits_99",
                f"rc {proc.returncode} (138: the launch died of the forwarded SIGUSR1), latest {before} -> "
                f"{latest_of(ck)}, lines {lines}; {err[-600:]}")

    # ---- both ranks SIGKILLed at once, and the launcher does not end (the first time), silent as a
    # hung one is (its stderr, where Open MPI reports a killed rank, goes nowhere): run learns it from
    # the ranks of its node, all gone
    with open(os.path.join(bindir, "mpirun"), "w") as f:
        f.write(f"#!/bin/sh\nif [ ! -e {tmp}/hung_once ]; then touch {tmp}/hung_once; {shutil.which('mpirun')} \"$@\" 2>/dev/null; "
                f"exec sleep 613.5; fi\nexec {shutil.which('mpirun')} \"$@\"\n")
    ck, s = sets("launcher_hangs")
    env = dict(env, ZEROTRAIN_LAUNCHER_GRACE="3")
    proc = subprocess.Popen([ztlib.BIN, "run", "-n", "2", "--restarts", "3", tiny] + s, cwd=ztlib.ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    ztlib.started.append(proc)
    while proc.poll() is None and not (latest_of(ck) and len(ztlib.rank_pids(ck)) == 2):
        time.sleep(0.02)
    for pid in ztlib.rank_pids(ck):
        os.kill(pid, signal.SIGKILL)
    out, err = finish(proc, timeout=240)
    restarts = [l for l in err.splitlines() if l.startswith("zerotrain run: restart ")]
    ztlib.check(proc.returncode == 0 and len(restarts) == 1 and "LAUNCHER_GRACE" in err
                and latest_of(ck) == "step_00000020" and not ztlib.processes_with("613.5"),
                "launcher_that_does_not_end_after_both_ranks_killed_is_stopped_and_restarted",
                f"rc {proc.returncode} (None/-9: run waited on the launcher), restarts {restarts}; {err[-600:]}")
finally:
    ztlib.kill_started()
    shutil.rmtree(tmp, ignore_errors=True)

ztlib.finish()
