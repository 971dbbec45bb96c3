"""t_launch_bounds.py — a job's start is bounded in time, with nothing left running:
  - a rank that never reaches MPI_Init (stopped before it starts): every started rank ends within
    ZEROTRAIN_MPI_TIMEOUT with one line naming itself and the phase, mpirun exits non-zero, and the
    stopped rank is gone too;
  - a rank that stops as MPI_Init returns (ZEROTRAIN_INJECT_STOP_AFTER_INIT), before the first collective:
    the watchdog runs on ZEROTRAIN_MPI_TIMEOUT until the config's comm_timeout is read, so the other
    rank ends with one line, nothing left;
  - a rank that stops on its way into MPI_Finalize (ZEROTRAIN_INJECT_STOP_IN_FINALIZE), after the
    run's steps are all recorded: rank 0 names it within the deadline, one line, nothing left;
  - a hostfile host that accepts TCP but never answers ssh (a local listener that never speaks, reached
    through an ssh config file): `zerotrain run` gives ssh BatchMode and a connect timeout
    (ZEROTRAIN_SSH_TIMEOUT), so the start fails within it instead of hanging, and no ssh is left."""
import os
import socket
import subprocess
import tempfile
import threading
import time

import ztlib

ztlib.ensure_shakespeare()
tiny = "configs/tiny.yaml"
tmp = tempfile.mkdtemp()


def stopped_run(name, env, wrap=()):
    """A 2-rank job of 2 steps under ZEROTRAIN_MPI_TIMEOUT=5 with one rank stopped somewhere (ENV's
    hook, or WRAP's shell before exec): (CompletedProcess, seconds, its error lines, processes left,
    metrics rows)."""
    marker = os.path.join(tmp, f"{name}_marker")
    cmd = ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"] + list(wrap) + [
        ztlib.BIN, "train", tiny, "--set", "train_iters=2", "--set", f"metrics_file={marker}"]
    t0 = time.time()
    p = subprocess.run(cmd, cwd=ztlib.ROOT, env=dict(ztlib.ENV, ZEROTRAIN_MPI_TIMEOUT="5", **env), capture_output=True,
                       text=True, timeout=300)
    took = time.time() - t0
    errs = [l for l in (p.stdout + p.stderr).splitlines() if l.startswith("zerotrain: error:")]
    rows = open(marker).read().splitlines() if os.path.exists(marker) else []
    return p, took, errs, ztlib.processes_with(marker), rows


# ---- a rank stopped before MPI_Init: the other one ends within the deadline, with one line
p, took, errs, left, _ = stopped_run("init", {}, ["sh", "-c", 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then kill -STOP $$; fi; '
                                                              'exec "$0" "$@"'])
ztlib.check(p.returncode != 0 and len(errs) == 1 and "rank 0 of 2" in errs[0] and "MPI_Init did not complete in 5 s"
            in errs[0] and not left, "mpi_init_bounded_when_a_rank_never_starts",
            f"rc {p.returncode} after {took:.0f} s, errors {errs}, left {left}; {p.stderr[-600:]}")
print(f"# MPI_Init deadline 5 s: the job ended after {took:.1f} s")

# ---- a rank that stops as MPI_Init returns, before the first collective (before the config's comm_timeout
# is known): the watchdog, on start-up's timeout, ends the other one with one line
p, took, errs, left, _ = stopped_run("first", {"ZEROTRAIN_INJECT_STOP_AFTER_INIT": "1"})
ztlib.check(p.returncode != 0 and len(errs) == 1 and errs[0].startswith("zerotrain: error: rank 0 (host ") and
            "made no progress for" in errs[0] and not left, "first_collective_bounded_when_a_rank_stops",
            f"rc {p.returncode} after {took:.0f} s, errors {errs}, left {left}; {p.stderr[-600:]}")
print(f"# first collective, start-up timeout 5 s: the job ended after {took:.1f} s")

# ---- a rank that stops as it enters MPI_Finalize: the other one ends within the deadline
p, took, errs, left, rows = stopped_run("fin", {"ZEROTRAIN_INJECT_STOP_IN_FINALIZE": "1"})
ztlib.check(p.returncode != 0 and len(errs) == 1 and "rank 0 of 2" in errs[0] and
            "rank 1 did not reach the end within 5 s" in errs[0] and not left and len(rows) == 2,
            "mpi_finalize_bounded_when_a_rank_stops", f"rc {p.returncode} after {took:.0f} s, errors {errs}, "
            f"left {left}, {len(rows)} steps; {p.stderr[-600:]}")
print(f"# MPI_Finalize deadline 5 s: the job ended after {took:.1f} s")

# ---- a host that accepts TCP and never answers ssh
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(8)
port = listener.getsockname()[1]
held = []
threading.Thread(target=lambda: [held.append(listener.accept()) for _ in iter(int, 1)], daemon=True).start()
ssh_cfg = os.path.join(tmp, "ssh_config")
with open(ssh_cfg, "w") as f:
    f.write(f"Host silenthost\n  HostName 127.0.0.1\n  Port {port}\n  StrictHostKeyChecking no\n"
            "  UserKnownHostsFile /dev/null\n")
hostfile = os.path.join(tmp, "hostfile")
with open(hostfile, "w") as f:
    f.write("localhost slots=1\nsilenthost slots=1\n")
t0 = time.time()
p = ztlib.run(["run", "-n", "2", "--hostfile", hostfile, tiny, "--set", "train_iters=2"], timeout=300,
              env={"ZEROTRAIN_SSH_TIMEOUT": "5", "OMPI_MCA_plm_rsh_agent": f"ssh -F {ssh_cfg}"})
took = time.time() - t0
left = ztlib.processes_with(ssh_cfg)
ztlib.check(p.returncode != 0 and "ConnectTimeout=5" in p.stdout and "BatchMode=yes" in p.stdout and not left and
            took < 120, "run_ssh_to_silent_host_bounded",
            f"rc {p.returncode} after {took:.0f} s, left {left}; {p.stdout[-300:]} {p.stderr[-600:]}")
print(f"# ssh connect timeout 5 s: `zerotrain run` ended after {took:.1f} s")

ztlib.finish()
