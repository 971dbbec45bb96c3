"""t_run_restarts.py — `zerotrain run --restarts N` starts a failed job again without a person:
  - a rank killed with SIGKILL: one "restart 1/N [killed]" line, the job resumes from `latest` and
    ends with the weights of a run that was never interrupted, bit for bit;
  - a rank preempted on its own (SIGTERM to the rank, not to run): it saves, exits 99, run restarts it;
  - a rank stopped (SIGSTOP): restarted well before comm_timeout (the watchdog reads its stopped stamps),
    without probing the hosts, and ends bit-identical;
  - Ctrl-C to run itself: exit 99, no restart;
  - gives up with one line, without a restart, on what a restart cannot cure: the config edited
    into an error meanwhile; a corrupt `latest` with no older good checkpoint; the same start-up
    error twice (a missing data file), after one restart;
  - a corrupt `latest` with an older good checkpoint: resumes from the older one and finishes;
  - growing back: a job started on the hosts that answer (2 of 4 ranks) saves, exits and starts again
    on all 4 once the missing host answers (one "[grow]" restart line);
  - restarts used up: "no restarts left" and the last cause, after exactly N restarts;
  - a host whose launch never starts (an rsh agent that hangs): with restarts, the launch fails after
    ZEROTRAIN_STARTUP_TIMEOUT and run gives up after its restarts, instead of waiting forever;
  - regression (found by scripts/soak): a rank killed outright left its NVMe swap file behind for
    good (no exit path of its own runs); now a swap file no process holds (flock) is removed by the
    next start on the directory, and a live run's (held) file is kept;
  - regression (found by scripts/soak): ranks killed before their exit path left the watchdog's roll
    file in /dev/shm; run names each attempt's roll (ZEROTRAIN_ROLL_TAG) and removes it after the
    attempt (checked after a job whose attempts were killed);
  - regression (found by scripts/soak): a rank killed with SIGKILL left its launch's Open MPI
    segments (vader_segment.*) in /dev/shm; run removes its own launch's (by the job id) after each
    attempt, and a planted segment of another job stays;
  - regression (found by scripts/soak): Ctrl-C to run while the launcher still waits for a host
    made mpirun end with 0, and run exited 0 beside its own error line, and left the launcher's rsh
    agent running (holding run's output open); now non-zero, and what the launcher orphaned is
    killed (run is a child subreaper).
Every case waits on the job's state (a checkpoint written, a rank running), not on a clock."""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import ztlib

ztlib.ensure_shakespeare()
tiny = "configs/tiny.yaml"
tmp = tempfile.mkdtemp()
ENV = dict(ztlib.ENV, ZEROTRAIN_RESTART_BACKOFF="0.2")
ITERS = 20


def sets(name, extra=()):
    ck = os.path.join(tmp, name + "_ck")
    return ck, ["--set", f"train_iters={ITERS}", "--set", f"checkpoint.dir={ck}", "--set", "checkpoint.save_interval=5",
                "--set", f"metrics_file={os.path.join(tmp, name + '.jsonl')}", "--set", "steps_per_print=1000"] + list(extra)


def start(name, restarts=3, config=tiny, extra=()):
    ck, s = sets(name, extra)
    proc = subprocess.Popen([ztlib.BIN, "run", "-n", "2", "--restarts", str(restarts), config] + s, cwd=ztlib.ROOT,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    ztlib.started.append(proc)
    return proc, ck


def latest_of(ck):
    p = os.path.join(ck, "latest")
    return open(p).read().strip() if os.path.exists(p) else None


def wait_for(cond, proc):
    while proc.poll() is None and not cond():
        time.sleep(0.05)
    return proc.poll() is None


def finish(proc, timeout=300):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        ztlib.kill_tree(proc.pid)
        out, err = proc.communicate()
    return out, err


def restart_lines(err):
    return [l for l in err.splitlines() if l.startswith("zerotrain run: restart ")]


def errors(err):
    return [l for l in err.splitlines() if l.startswith("zerotrain: error:")]


def mpi_segments_of(rank_pid):
    """The Open MPI shared-memory segments (vader_segment.NODE.UID.JOBID.RANK) of the launch rank_pid belongs to."""
    env = open(f"/proc/{rank_pid}/environ", "rb").read().split(b"\0")
    jobid = next(int(v.split(b"=", 1)[1]) for v in env if v.startswith(b"OMPI_MCA_ess_base_jobid="))
    return [os.path.join("/dev/shm", n) for n in os.listdir("/dev/shm")
            if n.startswith("vader_segment.") and n.split(".")[-2] == f"{jobid:x}"]


try:
    # the reference: the same steps, never interrupted
    ref_ck, s = sets("reference")
    p = ztlib.run(["run", "-n", "2", tiny] + s, env={})
    reference = ztlib.weights_of(ref_ck, tmp) if p.returncode == 0 else None
    ztlib.check(reference is not None, "reference_run", p.stderr[-600:])

    # ---- SIGKILL of a rank after the first checkpoint
    proc, ck = start("kill9")
    wait_for(lambda: latest_of(ck) and len(ztlib.rank_pids(ck)) == 2, proc)
    victim = ztlib.rank_pids(ck)[-1]
    killed_job = mpi_segments_of(victim)
    other_job = f"/dev/shm/vader_segment.zt-test-other.0.{os.getpid() % 0xffff:x}ffff.0"  # not an Open MPI job id
    with open(other_job, "wb") as f:
        f.write(b"another job's segment")
    os.kill(victim, signal.SIGKILL)
    out, err = finish(proc)
    lines = restart_lines(err)
    ztlib.check(proc.returncode == 0 and len(lines) == 1 and "[killed]" in lines[0] and "signal 9" in lines[0]
                and latest_of(ck) == f"step_{ITERS:08d}" and ztlib.weights_of(ck, tmp) == reference
                and not ztlib.processes_with(ck), "restart_after_rank_sigkill_bit_identical",
                f"rc {proc.returncode}, restarts {lines}, latest {latest_of(ck)}; {err[-800:]}")
    # regression (found by scripts/soak): the killed launch's Open MPI segments stayed in /dev/shm
    left = [p for p in killed_job if os.path.exists(p)]
    ztlib.check(len(killed_job) >= 2 and not left and os.path.exists(other_job),
                "killed_launch_leaves_no_shm_segment_another_jobs_stays",
                f"segments of the killed launch {killed_job}, left {left}, other job's kept {os.path.exists(other_job)}")
    os.unlink(other_job)

    # ---- a rank preempted on its own: it saves, exits 99, and run starts it again
    proc, ck = start("preempt")
    wait_for(lambda: latest_of(ck) and len(ztlib.rank_pids(ck)) == 2, proc)
    os.kill(ztlib.rank_pids(ck)[0], signal.SIGTERM)
    out, err = finish(proc)
    lines = restart_lines(err)
    ztlib.check(proc.returncode == 0 and len(lines) == 1 and "[preempted]" in lines[0]
                and ztlib.weights_of(ck, tmp) == reference, "restart_after_rank_preempted_exit_99",
                f"rc {proc.returncode}, restarts {lines}; {err[-800:]}")

    # ---- a rank stopped (SIGSTOP): the others see its stamps in the roll stop and abort long before
    # comm_timeout (120 s); the restart skips the host probe (the roll that showed the stop is on a host
    # that answered) and the job ends with the uninterrupted run's weights
    local_hosts = os.path.join(tmp, "local_hosts")
    with open(local_hosts, "w") as f:
        f.write("localhost slots=2\n")
    ck, s = sets("sigstop", ["--set", "comm_timeout=120"])
    proc = subprocess.Popen([ztlib.BIN, "run", "-n", "2", "--hostfile", local_hosts, "--restarts", "3", tiny] + s,
                            cwd=ztlib.ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    ztlib.started.append(proc)
    wait_for(lambda: latest_of(ck) and len(ztlib.rank_pids(ck)) == 2, proc)
    victim = ztlib.rank_pids(ck)[-1]
    os.kill(victim, signal.SIGSTOP)
    out, err = finish(proc, timeout=100)
    for sig in (signal.SIGCONT, signal.SIGKILL):  # gone already when the restart worked
        try:
            os.kill(victim, sig)
        except ProcessLookupError:
            pass
    lines = restart_lines(err)
    ztlib.check(proc.returncode == 0 and len(lines) == 1 and "[hang]" in lines[0] and ") stopped answering " in lines[0]
                and "probe 0.0 s" in lines[0] and ztlib.weights_of(ck, tmp) == reference,
                "restart_after_rank_sigstop_before_comm_timeout_without_probe",
                f"rc {proc.returncode}, restarts {lines}; {err[-800:]}")

    # ---- Ctrl-C to run: the ranks save, run exits 99 and does not restart
    proc, ck = start("ctrl_c", extra=["--set", "train_iters=100000"])
    wait_for(lambda: latest_of(ck) and len(ztlib.rank_pids(ck)) == 2, proc)
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc)
    ztlib.check(proc.returncode == 99 and not restart_lines(err) and not ztlib.processes_with(ck),
                "ctrl_c_to_run_exits_99_without_restart", f"rc {proc.returncode}; {err[-600:]}")

    # ---- the config edited into an error while the job runs: a rank killed, then one give-up line
    config = os.path.join(tmp, "edited.yaml")
    shutil.copy(os.path.join(ztlib.ROOT, tiny), config)
    proc, ck = start("bad_config", config=config)
    wait_for(lambda: latest_of(ck) and len(ztlib.rank_pids(ck)) == 2, proc)
    with open(config, "a") as f:
        f.write("no_such_key: 1\n")
    os.kill(ztlib.rank_pids(ck)[-1], signal.SIGKILL)
    out, err = finish(proc)
    e = errors(err)
    ztlib.check(proc.returncode != 0 and not restart_lines(err) and len(e) == 1 and "giving up after 0 restarts" in e[0]
                and "no_such_key" in e[0], "gives_up_on_bad_config", f"rc {proc.returncode}, errors {e}; {err[-600:]}")

    # ---- a corrupt `latest`, nothing older: the resume fails, run gives up at once
    ck, s = sets("corrupt_only", ["--set", "train_iters=5"])
    p = ztlib.run(["run", "-n", "2", tiny] + s)
    rank_file = os.path.join(ck, "step_00000005", "rank_00001.h5")
    with open(rank_file, "r+b") as f:  # a byte in the middle of the shard's data
        f.seek(os.path.getsize(rank_file) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x40]))
    proc, ck = start("corrupt_only")
    out, err = finish(proc)
    e = errors(err)
    ztlib.check(p.returncode == 0 and proc.returncode != 0 and not restart_lines(err)
                and any("giving up" in l and "no older checkpoint" in l for l in e), "gives_up_on_corrupt_latest_without_older",
                f"rc {proc.returncode}, errors {e}; {err[-600:]}")

    # ---- a corrupt `latest` with an older good one: resumes from the older one, ends like the reference
    ck, s = sets("corrupt_older", ["--set", "train_iters=10"])
    p = ztlib.run(["run", "-n", "2", tiny] + s)
    rank_file = os.path.join(ck, "step_00000010", "rank_00000.h5")
    with open(rank_file, "r+b") as f:
        f.seek(os.path.getsize(rank_file) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x40]))
    proc, ck = start("corrupt_older")
    out, err = finish(proc)
    lines = restart_lines(err)
    ztlib.check(proc.returncode == 0 and len(lines) == 1 and "step_00000005" in lines[0]
                and latest_of(ck) == f"step_{ITERS:08d}" and ztlib.weights_of(ck, tmp) == reference,
                "resumes_from_older_good_checkpoint", f"rc {proc.returncode}, restarts {lines}; {err[-800:]}")

    # ---- the same start-up error twice (no data): one restart, then one give-up line
    proc, ck = start("no_data", extra=["--set", "data.train=" + os.path.join(tmp, "nothing_*.bin")])
    out, err = finish(proc)
    e = errors(err)
    ztlib.check(proc.returncode != 0 and len(restart_lines(err)) == 1
                and any("giving up after 1 restart:" in l and "the same error twice" in l for l in e),
                "gives_up_on_the_same_startup_error_twice", f"rc {proc.returncode}, errors {e}; {err[-600:]}")

    # ---- restarts used up: two kills with --restarts 1
    proc, ck = start("used_up", restarts=1, extra=["--set", "train_iters=100000"])
    wait_for(lambda: latest_of(ck) and len(ztlib.rank_pids(ck)) == 2, proc)
    first = ztlib.rank_pids(ck)
    os.kill(first[-1], signal.SIGKILL)
    wait_for(lambda: len([p for p in ztlib.rank_pids(ck) if p not in first]) == 2, proc)
    os.kill(ztlib.rank_pids(ck)[-1], signal.SIGKILL)
    out, err = finish(proc)
    e = errors(err)
    ztlib.check(proc.returncode != 0 and len(restart_lines(err)) == 1
                and any("giving up after 1 restart: no restarts left; last cause: a rank was killed" in l for l in e)
                and not ztlib.processes_with(ck), "gives_up_when_restarts_are_used_up",
                f"rc {proc.returncode}, errors {e}; {err[-600:]}")
    # regression (found by scripts/soak): the watchdog's roll of ranks all killed stayed in /dev/shm
    rolls = [n for n in os.listdir("/dev/shm") if n.startswith(f".zerotrain-roll-run{proc.pid}-")]
    ztlib.check(not rolls, "killed_job_leaves_no_roll_file", f"left {rolls}")

    # ---- regression: a killed rank's swap file goes at the restart; a live run's (held) stays
    import fcntl
    nvme = os.path.join(tmp, "nvme")
    os.makedirs(nvme)
    held_path = os.path.join(nvme, "zerotrain-swap-optimizer-rank0-1.bin")
    with open(held_path, "wb") as f:
        f.write(b"another run's states")
    held = open(held_path, "rb")
    fcntl.flock(held, fcntl.LOCK_EX)
    proc, ck = start("swap_sweep", extra=["--set", "zero_optimization.stage=3", "--set",
                                          "zero_optimization.offload_optimizer.device=nvme", "--set",
                                          f"zero_optimization.offload_optimizer.nvme_path={nvme}"])
    wait_for(lambda: latest_of(ck) and len(ztlib.rank_pids(ck)) == 2, proc)
    victim = ztlib.rank_pids(ck)[-1]
    victim_files = [n for n in os.listdir(nvme) if n.endswith(f"-{victim}.bin")]
    os.kill(victim, signal.SIGKILL)
    out, err = finish(proc)
    left = sorted(os.listdir(nvme))
    ztlib.check(proc.returncode == 0 and len(victim_files) == 1 and left == [os.path.basename(held_path)]
                and open(held_path, "rb").read() == b"another run's states", "killed_ranks_swap_file_swept_held_one_kept",
                f"rc {proc.returncode}, victim's {victim_files}, left {left}; {err[-600:]}")
    held.close()

    # ---- growing back: a host that does not answer at the start (its rsh agent hangs while a flag file
    # exists; "farhost" is this machine through a fake rsh agent) gets the job on 2 of 4 ranks; once it
    # answers, the ranks save and exit, and the job starts again on all 4
    grow_agent, down = os.path.join(tmp, "grow-agent"), os.path.join(tmp, "farhost-down")
    with open(grow_agent, "w") as f:  # sleeps a duration nothing else sleeps: the leftover check finds it
        f.write(f'#!/bin/sh\nwhile [ "$1" = -x ]; do shift; done\nshift\n[ -e {down} ] && exec sleep 613.75\n'
                'exec sh -c "$*"\n')
    os.chmod(grow_agent, 0o755)
    open(down, "w").close()
    grow_hosts = os.path.join(tmp, "grow_hosts")
    with open(grow_hosts, "w") as f:
        f.write("localhost slots=2\nfarhost slots=2\n")
    # the two "hosts" share this machine's name, so Open MPI's shared-memory segments would clash: TCP only
    # a probe timeout of 60 s: once localhost has answered, farhost's silence is taken as gone after 4 times
    # that answer (at least 2 s), not after the timeout (the soak's link-down restarts waited it out)
    grow_env = dict(ENV, OMPI_MCA_plm_rsh_agent=grow_agent, OMPI_MCA_plm_rsh_args="-x", OMPI_MCA_btl="self,tcp",
                    ZEROTRAIN_PROBE_TIMEOUT="60", ZEROTRAIN_GROW_INTERVAL="1")
    ck, s = sets("grow", ["--set", "train_iters=100000"])
    proc = subprocess.Popen([ztlib.BIN, "run", "-n", "4", "--hostfile", grow_hosts, "--restarts", "3", tiny] + s,
                            cwd=ztlib.ROOT, env=grow_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    ztlib.started.append(proc)
    wait_for(lambda: latest_of(ck) and len(ztlib.rank_pids(ck)) == 2, proc)  # training on the answering host
    os.unlink(down)
    answered_at = int(latest_of(ck).split("_")[1])
    # 4 ranks; or, without growing back, 300 more steps on 2 (a probe a second: scores of probes)
    wait_for(lambda: len(ztlib.rank_pids(ck)) == 4 or int(latest_of(ck).split("_")[1]) > answered_at + 300, proc)
    grown_from = latest_of(ck)
    wait_for(lambda: latest_of(ck) != grown_from, proc)  # a step saved on 4 ranks (or the 300 steps on)
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc)
    lines = restart_lines(err)
    probe = re.search(r"host farhost does not answer \(probe ([0-9.]+) s\): starting on 2 ranks", err)
    ztlib.check(probe is not None and float(probe.group(1)) < 30, "probe_takes_a_silent_host_as_gone_relative_to_the_answers",
                f"start line: {probe.group(0) if probe else None} (probe timeout 60 s); {err[-400:]}")
    ztlib.check(proc.returncode == 99 and probe is not None and len(lines) == 1
                and "[grow]" in lines[0] and lines[0].endswith("on 4 ranks") and not ztlib.processes_with(ck)
                and not ztlib.processes_with("613.75"), "shrunk_job_grows_back_when_the_host_answers",
                f"rc {proc.returncode}, restarts {lines}; {err[-800:]}")

    # ---- a full checkpoint disk (found by scripts/soak in CI: three attempts ended on it within 7 s
    # of a fault that held the disk full for 8 s, and run gave up): the disk that frees again is
    # waited for; the one that stays full over ZEROTRAIN_DISK_FULL_SECONDS gives up with one line
    def full_disk_run(name, stays_seconds):
        """A run whose checkpoint tmpfs is filled once its first save is in; its stderr lines are
        gathered as they come. Returns (proc, ck, fs, free, lines, full_at): full_at is `latest` once
        the disk is full (a loaded machine may let the run save again before the filler gets there)."""
        fs = ztlib.Tmpfs("size=256m", tmp)
        ck = os.path.join(fs.path, "ck")
        _, s = sets(name)
        env = dict(ENV, ZEROTRAIN_DISK_FULL_SECONDS=str(stays_seconds))
        proc = subprocess.Popen([ztlib.BIN, "run", "-n", "2", "--restarts", "12", tiny] + s + ["--set", f"checkpoint.dir={ck}"],
                                cwd=ztlib.ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        ztlib.started.append(proc)
        lines = []
        threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True).start()
        wait_for(lambda: latest_of(ck), proc)
        filler = os.path.join(fs.path, "filler")
        held = threading.Event()

        def keep_full():  # a failed save's partial files, removed, free space again: taken at once
            with open(filler, "wb") as f:
                while not held.is_set():
                    st = os.statvfs(fs.path)
                    try:
                        f.write(b"\0" * (st.f_bavail * st.f_frsize))
                        f.flush()
                    except OSError:
                        pass
                    time.sleep(0.02)
        filling = threading.Thread(target=keep_full, daemon=True)
        filling.start()
        while not os.path.exists(filler) or os.statvfs(fs.path).f_bavail:
            time.sleep(0.01)
        return proc, ck, fs, lambda: (held.set(), filling.join(), os.unlink(filler)), lines, latest_of(ck)

    def disk_full_restarts(lines):
        return [l for l in list(lines) if l.startswith("zerotrain run: restart ") and "[disk-full]" in l]

    proc, ck, fs, free, lines, _ = full_disk_run("disk_frees", 600)
    with fs:
        wait_for(lambda: len(disk_full_restarts(lines)) >= 3, proc)  # more than the old limit, in seconds
        free()
        proc.wait(timeout=300)
        e = [l for l in lines if l.startswith("zerotrain: error: run:")]
        ztlib.check(proc.returncode == 0 and len(disk_full_restarts(lines)) >= 3 and not e
                    and latest_of(ck) == f"step_{ITERS:08d}" and ztlib.weights_of(ck, tmp) == reference,
                    "full_disk_that_frees_is_waited_for_bit_identical",
                    f"rc {proc.returncode}, restarts {len(disk_full_restarts(lines))}, errors {e}, latest {latest_of(ck)}")
    proc, ck, fs, free, lines, full_at = full_disk_run("disk_stays_full", 1)
    with fs:
        proc.wait(timeout=300)
        e = [l for l in lines if l.startswith("zerotrain: error: run:")]
        saved = latest_of(ck)
        free()
        ztlib.check(proc.returncode not in (0, None) and len(e) == 1 and "the disk stays full (3 attempts in a row over" in e[0]
                    and "No space left on device" in e[0] and len(disk_full_restarts(lines)) == 3
                    and saved is not None and full_at is not None and saved >= full_at
                    and ztlib.weights_of(ck, tmp) is not None and not ztlib.processes_with(ck),
                    "gives_up_on_a_disk_that_stays_full_keeps_latest",
                    f"rc {proc.returncode}, errors {e}, restarts {len(disk_full_restarts(lines))}, latest {saved} "
                    f"({full_at} when the disk was full)")

    # ---- a host that never starts (its rsh agent hangs)
    agent = os.path.join(tmp, "hang-agent")
    with open(agent, "w") as f:
        # a duration nothing else sleeps: the leftover check finds it
        f.write(f"#!/bin/sh\ntouch {agent}.called\nexec sleep 613.25\n")
    os.chmod(agent, 0o755)
    hostfile = os.path.join(tmp, "hosts")
    with open(hostfile, "w") as f:
        f.write("farhost slots=2\n")
    hang_env = dict(ENV, OMPI_MCA_plm_rsh_agent=agent, OMPI_MCA_plm_rsh_args="-x", ZEROTRAIN_STARTUP_TIMEOUT="3",
                    ZEROTRAIN_PROBE_TIMEOUT="2")
    ck, s = sets("never_starts")
    proc = subprocess.Popen([ztlib.BIN, "run", "-n", "2", "--hostfile", hostfile, "--restarts", "1", tiny] + s,
                            cwd=ztlib.ROOT, env=hang_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    ztlib.started.append(proc)
    out, err = finish(proc, timeout=180)
    e = errors(err)
    ztlib.check(proc.returncode not in (0, None) and len(restart_lines(err)) == 1
                and any("giving up after 1 restart: no restarts left" in l for l in e) and not ztlib.processes_with("613.25"),
                "restarts_do_not_wait_forever_on_a_host_that_never_starts", f"rc {proc.returncode}, errors {e}; {err[-800:]}")

    # ---- regression: Ctrl-C while the launcher waits for a host is not a success
    ck, s = sets("ctrl_c_before_start")
    proc = subprocess.Popen([ztlib.BIN, "run", "-n", "2", "--hostfile", hostfile, tiny] + s, cwd=ztlib.ROOT, env=hang_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    ztlib.started.append(proc)
    if os.path.exists(agent + ".called"):
        os.unlink(agent + ".called")
    wait_for(lambda: os.path.exists(agent + ".called"), proc)  # the launcher is waiting for its host
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc, timeout=120)
    ztlib.check(proc.returncode not in (0, None) and len(errors(err)) == 1 and not ztlib.processes_with("613.25"),
                "ctrl_c_before_the_ranks_start_is_not_success",
                f"rc {proc.returncode}; {err[-600:]}")
finally:
    ztlib.kill_started()
    shutil.rmtree(tmp, ignore_errors=True)

ztlib.finish()
