"""t_slurm.py — the Slurm batch scripts (scripts/slurm/) on a real Slurm: a single-node cluster started
for this test on localhost by scripts/slurm-local (munged + slurmctld + slurmd, its own state dir
under /tmp and its own port pair), stopped at the end, also on failure or SIGTERM/SIGINT.
Every job is configs/tiny.yaml on 2 ranks (CPU), 60 steps, run one after another (2 CPUs):
  - scripts: `bash -n` on every script; each batch script has --requeue, --open-mode=append and
    --signal=B:USR1@T and goes through launch.sh; configs/gpt2_10b_offload.yaml loads (estimate);
  - complete: train-single-node.sbatch ends COMPLETED with all 60 steps in its metrics (the reference);
  - multi-node: train-multi-node.sbatch (on this one node, with the mpirun launcher) ends COMPLETED;
  - timelimit: SIGUSR1 to the batch shell mid-run (what --signal=B:USR1@120 delivers before the time
    limit; sent here by `scancel --batch --signal=USR1`): the ranks checkpoint and exit 99, the job
    requeues itself, resumes ("resumed from DIR at step N (SLURM_RESTART_COUNT=1)") and ends
    COMPLETED; its merged metrics (appended across restarts) equal the reference's losses bit for bit;
  - preempt: a job in partition `high` preempts it (PreemptMode=REQUEUE): the same checks;
  - scancel: SIGTERM mid-run: the job ends CANCELLED and stays so, the ranks saved a checkpoint, and
    checkpoint.dir holds only complete step directories (`zerotrain info` verifies each) and a
    `latest` naming the newest one — no half-written checkpoint.
slurm-wlm and munge come from scripts/install-deps.sh --with-slurm when missing; this test fails
(it does not skip) when they cannot be installed or the cluster does not start."""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import ztlib

ROOT = ztlib.ROOT
SLURM_LOCAL = os.path.join(ROOT, "scripts", "slurm-local")
SINGLE = "scripts/slurm/train-single-node.sbatch"
MULTI = "scripts/slurm/train-multi-node.sbatch"
TP = "scripts/slurm/train-tp.sbatch"
STEPS = 60
INTERRUPT_AT = 15  # metrics rows seen before interrupting a job
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}

ENV = {k: v for k, v in ztlib.ENV.items() if not k.startswith("SLURM_")}  # not a job of an outer Slurm
ENV.update(OMP_NUM_THREADS="1", PATH=ENV.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin")


def sh(args, check=False, timeout=60, **kw):
    return subprocess.run(args, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout, check=check, **kw)


def have_slurm():
    return all(shutil.which(p, path=ENV["PATH"]) for p in ("slurmctld", "slurmd", "munged", "sbatch"))


def job_field(job, key):
    p = sh(["scontrol", "show", "job", "-o", str(job)])
    m = re.search(rf"\b{key}=(\S*)", p.stdout)
    return m.group(1) if m else ""


def wait_job(job, timeout=120):
    return ztlib.wait_slurm_job(lambda: job_field(job, "JobState"), TERMINAL, timeout)


rows_of = ztlib.read_metrics


def wait_rows(path, job, n, timeout=60):
    """Waits until the metrics file has n rows while the job runs; False when it ended first."""
    end = time.time() + timeout
    while time.time() < end:
        if len(rows_of(path)) >= n:
            return True
        if job_field(job, "JobState") in TERMINAL:
            return False
        time.sleep(0.1)
    return False


def merged_losses(rows):
    """Losses by step after restarts: a restarted run appends from the step after its checkpoint, and
    any step logged twice (run past its last checkpoint before a hard kill) counts as logged last."""
    by_step = {}
    for r in rows:
        by_step[r["step"]] = r["loss"]
    return [by_step[s] for s in sorted(by_step)], sorted(by_step)


read = ztlib.read_text


class Run:
    """One training job of configs/tiny.yaml: its log, metrics and checkpoint dir under the work dir."""

    def __init__(self, work, name, script=SINGLE, sbatch_args=(), env=None, sets=()):
        self.name, self.work = name, work
        self.log = os.path.join(work, name + ".out")
        self.metrics = os.path.join(work, name + ".jsonl")
        self.ckdir = os.path.join(work, "ck_" + name)
        args = ["sbatch", "--parsable", "--job-name=zt-" + name, "--output=" + self.log] + list(sbatch_args)
        args += [script, "configs/tiny.yaml", "--set", f"train_iters={STEPS}", "--set", f"metrics_file={self.metrics}",
                 "--set", f"checkpoint.dir={self.ckdir}", "--set", "checkpoint.save_interval=25"]
        for s in sets:
            args += ["--set", s]
        p = subprocess.run(args, cwd=ROOT, env=dict(ENV, **(env or {})), capture_output=True, text=True, timeout=60)
        self.job = p.stdout.strip().split(";")[0] if p.returncode == 0 else None
        self.submit_error = p.stderr.strip()

    def tail(self):
        return f"[job {self.job}: {self.submit_error}] ..." + read(self.log)[-1500:]


def check_resumed(run, state, reference, name):
    """The interrupted job came back once, resumed mid-run from its checkpoint and trained the same."""
    log = read(run.log)
    m = re.search(r"resumed from (\S+) at step (\d+) .*\(SLURM_RESTART_COUNT=1\)", log)
    ztlib.check(state == "COMPLETED", f"{name}_completed", f"state {state}; {run.tail()}")
    ztlib.check(job_field(run.job, "Restarts") == "1", f"{name}_restarted_once",
                f"Restarts={job_field(run.job, 'Restarts')}")
    ztlib.check("exiting with status 99" in log and m is not None and 0 < int(m.group(2)) < STEPS,
                f"{name}_resumed_from_checkpoint", run.tail())
    losses, steps = merged_losses(rows_of(run.metrics))
    ztlib.check(steps == list(range(1, STEPS + 1)) and losses == reference, f"{name}_same_losses",
                f"steps {steps[:3]}..{steps[-3:]} ({len(steps)}); losses {losses[-3:]} vs {reference[-3:]}")


def check_checkpoints_complete(ckdir, name):
    """Only complete step directories and a `latest` naming the newest: nothing half-written."""
    entries = sorted(os.listdir(ckdir)) if os.path.isdir(ckdir) else []
    steps = [e for e in entries if re.fullmatch(r"step_\d+", e)]
    others = [e for e in entries if e not in steps and e not in ("latest", ".lock")]  # .lock: the run's dir lock
    bad = []
    for s in steps:
        d = os.path.join(ckdir, s)
        p = sh([ztlib.BIN, "info", d])
        if not os.path.exists(os.path.join(d, "index.h5")) or p.returncode != 0 or "integrity: OK" not in p.stdout:
            bad.append(f"{s}: rc {p.returncode} {p.stderr.strip()[-200:]}")
    latest = read(os.path.join(ckdir, "latest")).strip()
    ok = steps and not others and not bad and latest == steps[-1]
    ztlib.check(ok, f"{name}_no_half_written_checkpoint",
                f"entries {entries}, latest '{latest}', incomplete {bad}")


def main(work):
    # ---- the scripts parse, the 10B example config loads
    bad = [s for s in glob.glob(os.path.join(ROOT, "scripts/slurm/*")) if sh(["bash", "-n", s]).returncode != 0]
    ztlib.check(not bad, "scripts_parse", str(bad))
    need = ("#SBATCH --requeue", "#SBATCH --open-mode=append", "#SBATCH --signal=B:USR1@", "scripts/slurm/launch.sh")
    missing = [(os.path.basename(s), n) for s in glob.glob(os.path.join(ROOT, "scripts/slurm/*.sbatch"))
               for n in need if n not in read(s)]
    ztlib.check(len(glob.glob(os.path.join(ROOT, "scripts/slurm/*.sbatch"))) == 4 and not missing,
                "sbatch_scripts_requeue_append_signal", str(missing))
    p = sh([ztlib.BIN, "estimate", "configs/gpt2_10b_offload.yaml", "--ranks", "1"])
    ztlib.check(p.returncode == 0, "config_10b_offload_loads", p.stdout[-300:] + p.stderr[-600:])

    # ---- uninterrupted: the reference trajectory
    ref = Run(work, "complete")
    st = wait_job(ref.job) if ref.job else "NOT_SUBMITTED"
    ref_rows = rows_of(ref.metrics)
    reference = [r["loss"] for r in ref_rows]
    ztlib.check(st == "COMPLETED" and [r["step"] for r in ref_rows] == list(range(1, STEPS + 1)),
                "single_node_job_completes", f"state {st}, {len(ref_rows)} metrics rows; {ref.tail()}")
    if st != "COMPLETED":
        reason = job_field(ref.job, "Reason") if ref.job else ""
        ztlib.check(False, "remaining_checks", f"not run: the reference job did not complete (Reason={reason})")
        return

    # ---- the multi-node script on our one node, launched by mpirun instead of srun --mpi=pmix
    mn = Run(work, "multinode", MULTI, ["--nodes=1", "--ntasks-per-node=2"], env={"ZT_LAUNCHER": "mpirun"})
    st = wait_job(mn.job) if mn.job else "NOT_SUBMITTED"
    ztlib.check(st == "COMPLETED" and merged_losses(rows_of(mn.metrics))[0] == reference
                and "mpirun -np 2" in read(mn.log), "multi_node_script_mpirun_completes", f"state {st}; {mn.tail()}")

    # ---- tensor parallel x data parallel: tp = tasks per node (2 here), the losses of the reference
    # within fp32 rounding (the split reorders fp32 additions), checkpoints saved at tp 2
    tpr = Run(work, "tp", TP, ["--nodes=1", "--ntasks-per-node=2"], env={"ZT_LAUNCHER": "mpirun"})
    st = wait_job(tpr.job) if tpr.job else "NOT_SUBMITTED"
    got = merged_losses(rows_of(tpr.metrics))[0]
    ztlib.check(st == "COMPLETED" and len(got) == len(reference) and ztlib.max_rel_diff(got, reference) <= 1e-5
                and "tensor parallel: 2 ranks a group" in read(tpr.log), "tp_script_completes_with_reference_losses",
                f"state {st}; {tpr.tail()}")

    # ---- time-limit signal: SIGUSR1 to the batch shell, the job requeues itself
    tl = Run(work, "timelimit")
    running = tl.job and wait_rows(tl.metrics, tl.job, INTERRUPT_AT)
    if running:
        sh(["scancel", "--batch", "--signal=USR1", tl.job])
    ztlib.check(running, "timelimit_job_runs", tl.tail())
    check_resumed(tl, wait_job(tl.job) if tl.job else "NOT_SUBMITTED", reference, "timelimit")

    # ---- preemption by a job in the higher-priority partition
    pre = Run(work, "preempt")
    running = pre.job and wait_rows(pre.metrics, pre.job, INTERRUPT_AT)
    hi = None
    if running:
        p = sh(["sbatch", "--parsable", "--partition=high", "--ntasks=2", "--job-name=zt-high",
                "--output=" + os.path.join(work, "high.out"), "--wrap", "sleep 1"])
        hi = p.stdout.strip().split(";")[0] if p.returncode == 0 else None
    ztlib.check(running and hi, "preempt_job_runs_and_high_job_submitted", pre.tail())
    st = wait_job(pre.job) if pre.job else "NOT_SUBMITTED"
    ztlib.check(hi and job_field(hi, "JobState") == "COMPLETED", "preempting_job_completed",
                read(os.path.join(work, "high.out")))
    log = read(pre.log)
    ztlib.check("DUE TO PREEMPTION" in log, "preempt_was_a_preemption", pre.tail())
    check_resumed(pre, st, reference, "preempt")

    # ---- scancel: SIGTERM, checkpoint, stays cancelled, nothing half-written
    sc = Run(work, "scancel", sets=["checkpoint.save_interval=10"])
    running = sc.job and wait_rows(sc.metrics, sc.job, INTERRUPT_AT)
    if running:
        sh(["scancel", sc.job])
    ztlib.check(running, "scancel_job_runs", sc.tail())
    st = wait_job(sc.job) if sc.job else "NOT_SUBMITTED"
    time.sleep(2)  # a wrongly requeued job would show PENDING/RUNNING by now
    st2, restarts = job_field(sc.job, "JobState"), job_field(sc.job, "Restarts")
    ztlib.check(st == "CANCELLED" and st2 == "CANCELLED" and restarts == "0", "scancel_stays_cancelled",
                f"state {st} then {st2}, Restarts={restarts}; {sc.tail()}")
    ztlib.check("stopped by signal" in read(sc.log) and "exited with status 99" in read(sc.log),
                "scancel_saved_checkpoint", sc.tail())
    check_checkpoints_complete(sc.ckdir, "scancel")


def stop_on_signal(sig, frame):
    ztlib.check(False, "not_interrupted", f"got signal {sig}; stopping the cluster")
    raise SystemExit(1)


if __name__ == "__main__":
    if not have_slurm():
        print("t_slurm: slurm-wlm/munge missing: running scripts/install-deps.sh --with-slurm", flush=True)
        subprocess.run([os.path.join(ROOT, "scripts", "install-deps.sh"), "--with-slurm"], cwd=ROOT)
    if not ztlib.check(have_slurm(), "slurm_installed", "slurmctld/slurmd/munged/sbatch not found after install-deps.sh --with-slurm"):
        ztlib.finish()
    ztlib.ensure_shakespeare()
    state = tempfile.mkdtemp(prefix="zt-slurm-", dir="/tmp")  # short path: munged's socket lives here
    work = os.path.join(state, "work")
    os.makedirs(work)
    ENV["SLURM_CONF"] = os.path.join(state, "slurm.conf")
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, stop_on_signal)
    try:
        p = sh([SLURM_LOCAL, "start", state], timeout=120)
        print(p.stdout + p.stderr, end="", flush=True)
        if ztlib.check(p.returncode == 0, "cluster_starts", p.stderr[-2000:]):
            main(work)
    finally:
        p = sh([SLURM_LOCAL, "stop", state], timeout=120)
        print(p.stdout + p.stderr, end="", flush=True)
        ztlib.check(p.returncode == 0 and sh([SLURM_LOCAL, "status", state]).returncode == 3, "cluster_stopped",
                    p.stderr[-500:])
        if ztlib.failed:
            print(f"t_slurm: logs and job outputs kept in {state}", flush=True)
        else:
            shutil.rmtree(state, ignore_errors=True)
    ztlib.finish()
