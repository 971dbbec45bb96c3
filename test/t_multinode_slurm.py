"""t_multinode_slurm.py — Slurm across hosts: scripts/netns-slurm starts 2 hosts (network namespaces with
their own addresses), one slurmd in each, slurmctld on the bridge and munged, and stops them at the
end (finally, also on failure). Jobs are scripts/slurm/train-multi-node.sbatch as written, launched by
sbatch (srun --mpi=pmix), configs/tiny.yaml with ZeRO-3 and checkpoints:
  - the cluster: both nodes idle; a job step runs on node1 and node2 under their own hostnames;
  - 2 nodes x 2 ranks: the job completes and its losses equal the 4-rank single-host run's bit for bit;
  - slow link: the veths shaped to 200 Mbit/s (tc tbf): the job completes at the default comm_timeout
    with the same losses, no watchdog error (step times printed, not checked);
  - node loss, two ways, each while the job runs (after KILL_AFTER steps): node2's link down (its
    switch port: node2, its slurmd and its ranks keep running, nobody reaches them), and everything on
    node2 killed (slurmd too). Each time: every surviving rank exits non-zero once Slurm marks node2
    DOWN (SlurmdTimeout 10 s; the test allows BOUND = 50 s), one line names node2, the last
    checkpoint is intact (`zerotrain info`), the job requeues itself, comes back on node1 with 2
    ranks (counted from the allocation), resumes resharded from 4 ranks, and its losses continue the
    straight run's within 1e-5 (t_checkpoint.py's resharding tolerance). After the link comes back
    up node2 returns to idle and none of the old job's ranks are left on it.
SKIP line when not root, no network namespaces, or no Slurm binaries after install-deps.sh --with-slurm."""
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
SCRIPT = os.path.join(ROOT, "scripts", "netns-slurm")
MULTI = "scripts/slurm/train-multi-node.sbatch"
STEPS = 24
KILL_AFTER = 10  # metrics rows seen before node2 is lost (checkpoints every 4 steps)
BOUND = 50  # seconds from node2's loss until the ranks on node1 have exited (SlurmdTimeout 10 s)
# T_MULTINODE_ONLY=link|kill: only that node loss (after the reference run), for working on it
ONLY = os.environ.get("T_MULTINODE_ONLY", "")
link_down = False
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}

ENV = {k: v for k, v in ztlib.ENV.items() if not k.startswith("SLURM_")}
ENV.update(OMP_NUM_THREADS="1", PATH=ENV.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin")


def have_slurm():
    return all(shutil.which(p, path=ENV["PATH"]) for p in ("slurmctld", "slurmd", "munged", "sbatch"))



if not ztlib.can_netns("nsenter"):
    print("SKIP t_multinode_slurm: needs root and `ip netns` (network namespaces)")
    sys.exit(0)
if not have_slurm():
    print("t_multinode_slurm: slurm-wlm/munge missing: running scripts/install-deps.sh --with-slurm", flush=True)
    subprocess.run([os.path.join(ROOT, "scripts", "install-deps.sh"), "--with-slurm"], cwd=ROOT)
if not have_slurm():
    print("SKIP t_multinode_slurm: no Slurm binaries (scripts/install-deps.sh --with-slurm did not install them)")
    sys.exit(0)

ztlib.ensure_shakespeare()
state = tempfile.mkdtemp(prefix="zt-mns-", dir="/tmp")  # short: munged's socket lives here
work = os.path.join(state, "work")
os.makedirs(work)
ENV.update(NETNS_SLURM_DIR=state, NETNS_CLUSTER_NET=str(100 + (os.getpid() + 77) % 150))


def sh(*args, timeout=60):
    return subprocess.run(list(args), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout)


def slurm(*args, timeout=60):
    return sh(SCRIPT, "run", *args, timeout=timeout)


def job_field(job, key):
    m = re.search(rf"\b{key}=(\S*)", slurm("scontrol", "show", "job", "-o", str(job)).stdout)
    return m.group(1) if m else ""


def wait_job(job, timeout):
    return ztlib.wait_slurm_job(lambda: job_field(job, "JobState"), TERMINAL, timeout, poll=0.5)


rows_of = ztlib.read_metrics


read = ztlib.read_text


def submit(name, sbatch_args=(), sets=()):
    """train-multi-node.sbatch as written, 2 ranks per node; returns (job, log, metrics, ckdir)."""
    log, metrics, ck = (os.path.join(work, name + s) for s in (".out", ".jsonl", ".ck"))
    args = ["sbatch", "--parsable", "--ntasks-per-node=2", "--job-name=zt-" + name, "--output=" + log,
            *sbatch_args, MULTI, "configs/tiny.yaml"]
    for s in ["zero_optimization.stage=3", f"train_iters={STEPS}", f"metrics_file={metrics}", f"checkpoint.dir={ck}",
              "checkpoint.save_interval=4", "steps_per_print=1", *sets]:
        args += ["--set", s]
    p = slurm(*args)
    return (p.stdout.strip().split(";")[0] if p.returncode == 0 else None), log, metrics, ck


def merged(rows):
    by_step = {r["step"]: r["loss"] for r in rows}  # a step logged twice counts as logged last
    return [by_step[s] for s in sorted(by_step)], sorted(by_step)


def main():
    st = sh(SCRIPT, "status")
    ztlib.check(st.returncode == 0 and "node1 idle" in st.stdout and "node2 idle" in st.stdout, "cluster_nodes_idle",
                st.stdout)
    p = slurm("srun", "--nodes=2", "--ntasks-per-node=1", "--mpi=none", "hostname", timeout=60)
    ztlib.check(sorted(p.stdout.split()) == ["node1", "node2"], "job_step_runs_on_both_hosts", p.stdout + p.stderr)

    # the reference: 4 ranks on this host
    pr, ref = ztlib.train("configs/tiny.yaml", ["zero_optimization.stage=3", f"train_iters={STEPS}"], ranks=4)
    reference = ztlib.losses(ref)
    if not ztlib.check(pr.returncode == 0 and len(reference) == STEPS, "reference_run", pr.stderr[-400:]):
        return

    if ONLY:
        return node_losses(reference)
    # 2 nodes x 2 ranks, as written
    job, log, metrics, ck = submit("straight")
    st = wait_job(job, 180) if job else "NOT_SUBMITTED"
    losses, _ = merged(rows_of(metrics))
    ztlib.check(st == "COMPLETED" and "4 ranks on 2 nodes" in read(log) and "srun --mpi=pmix" in read(log),
                "sbatch_2_nodes_x_2_ranks_completes", f"state {st}: {read(log)[-800:]}")
    ztlib.check(losses == reference, "sbatch_2_nodes_equals_single_host_4_ranks", f"{losses[-3:]} vs {reference[-3:]}")
    ztlib.check(os.path.exists(os.path.join(ck, f"step_{STEPS:08d}")), "sbatch_2_nodes_checkpoints", str(os.listdir(work)))

    # slow link: 200 Mbit/s on every veth, default comm_timeout
    env_net = dict(ENV, NETNS_CLUSTER_DIR=os.path.join(state, "net"))
    r = subprocess.run([SCRIPT.replace("netns-slurm", "netns-cluster"), "shape", "200mbit"], env=env_net,
                       capture_output=True, text=True, timeout=30)
    ztlib.check(r.returncode == 0, "slow_link_shaped", r.stderr)
    job, log, metrics, ck = submit("slow", sets=["train_iters=8"])
    st = wait_job(job, 240) if job else "NOT_SUBMITTED"
    rows = rows_of(metrics)
    ms = [round(x.get("step_ms", x.get("time_ms", 0))) for x in rows]
    print(f"t_multinode_slurm: step times at 200 Mbit/s (ms): {ms}", flush=True)
    ztlib.check(st == "COMPLETED" and "no progress" not in read(log) and merged(rows)[0] == reference[:8],
                "slow_link_only_slows_training", f"state {st}: {read(log)[-600:]}")
    subprocess.run([SCRIPT.replace("netns-slurm", "netns-cluster"), "shape", "off"], env=env_net,
                   capture_output=True, timeout=30)

    node_losses(reference)


def node_losses(reference):
    """node2's link down (it keeps running, unreachable), back up, then everything on node2 killed;
    each time the job requeues and comes back on node1"""
    if ONLY in ("", "link"):
        node_loss("link", reference)
        link("up")
        t_up = time.time()
        idle = wait_idle("node2", 120)  # measured 16-56 s (Slurm asks a DOWN node to register again now and then)
        print(f"t_multinode_slurm: node2 idle again {time.time() - t_up:.1f}s after its link came back up", flush=True)
        ztlib.check(idle, "link_up_node2_idle_again", slurm("sinfo", "-N").stdout)
        ns = f"zt{ENV['NETNS_CLUSTER_NET']}-node2"
        left = []
        for _ in range(120):  # slurmd kills the old job's steps once it hears from slurmctld again
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            left = [p for p in pids if read(f"/proc/{p}/comm").strip() == "zerotrain"]
            if not left:
                break
            time.sleep(0.5)
        print(f"t_multinode_slurm: old ranks on node2 gone {time.time() - t_up:.1f}s after the link came back up",
              flush=True)
        ztlib.check(not left, "link_up_no_ranks_left_on_node2", f"zerotrain pids {left} still in {ns}")
    if ONLY in ("", "kill"):
        node_loss("kill", reference)


def link(updown):
    """node2's switch port down or up (scripts/netns-cluster link)"""
    global link_down
    r = subprocess.run([SCRIPT.replace("netns-slurm", "netns-cluster"), "link", "node2", updown],
                       env=dict(ENV, NETNS_CLUSTER_DIR=os.path.join(state, "net")), capture_output=True, text=True,
                       timeout=30)
    link_down = updown == "down" and r.returncode == 0
    return r


def wait_idle(node, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if slurm("sinfo", "-h", "-n", node, "-o", "%t").stdout.strip() == "idle":
            return True
        time.sleep(0.5)
    return False


def node_loss(how, reference):
    """node2 lost mid-run, by `how`: "kill" (SIGKILL everything on it, slurmd too) or "link" (its
    switch port down: node2 and its slurmd keep running but nobody reaches them)."""
    name = "node_loss" if how == "kill" else "link_down"
    # comm_timeout 20 s: ranks cut off behind a dead link end themselves even if slurmd's kill of the
    # old step comes late (it does once node2 is heard from again; in one CI run that took over 20 s)
    job, log, metrics, ck = submit("lost-" + how, ["--nodes=1-2"], ["comm_timeout=20"] if how == "link" else [])
    end = time.time() + 120
    while job and time.time() < end and len(rows_of(metrics)) < KILL_AFTER and job_field(job, "JobState") not in TERMINAL:
        time.sleep(0.1)
    lost = len(rows_of(metrics)) >= KILL_AFTER
    took = -1.0
    if lost:
        r = sh(SCRIPT, "kill", "node2") if how == "kill" else link("down")
        t_lost = time.time()
        while time.time() - t_lost < 90 and "zerotrain exited with status" not in read(log):
            time.sleep(0.2)
        took = time.time() - t_lost
        what = "killed" if how == "kill" else "link down"
        print(f"t_multinode_slurm: node2 {what} ({(r.stdout + r.stderr).strip()}); the ranks on node1 exited after "
              f"{took:.1f}s", flush=True)
    ztlib.check(lost, f"{name}_job_ran", read(log)[-600:])
    m = re.search(r"zerotrain exited with status (\d+)", read(log))
    ztlib.check(lost and m is not None and m.group(1) != "0" and took < BOUND, f"{name}_ranks_exit_nonzero_bounded",
                f"{m and m.group(0)} after {took:.1f}s (bound {BOUND}s)")
    st = wait_job(job, 180) if job else "NOT_SUBMITTED"
    out = read(log)
    # how the job noticed and came back: the launcher's lines and the error lines, as they came
    print("\n".join(l for l in out.splitlines() if re.search(r"^\[launch|error|srun: ", l))[-3000:], flush=True)
    ztlib.check(re.search(r"zerotrain: error: lost node\(s\) node2 of job", out) is not None,
                f"{name}_names_lost_node", out[-800:])
    mr = re.search(r"resumed from (\S+) at step (\d+) .*\(SLURM_RESTART_COUNT=1\)", out)
    ztlib.check(st == "COMPLETED" and job_field(job, "Restarts") == "1" and "2 ranks on 1 nodes" in out,
                f"{name}_job_requeued_on_remaining_node", f"state {st}, Restarts={job_field(job, 'Restarts')}: {out[-800:]}")
    saved = mr.group(1) if mr else ""
    info = sh(ztlib.BIN, "info", saved) if saved else None
    ztlib.check(mr is not None and 0 < int(mr.group(2)) <= KILL_AFTER and "resharded from 4 ranks" in out
                and info.returncode == 0 and "integrity: OK" in info.stdout, f"{name}_resumes_resharded_from_intact_checkpoint",
                out[-600:])
    losses, steps = merged(rows_of(metrics))
    ztlib.check(steps == list(range(1, STEPS + 1)) and ztlib.max_rel_diff(losses, reference) <= 1e-5,
                f"{name}_elastic_resume_continues_straight_run", f"{len(steps)} steps; {losses[-3:]} vs {reference[-3:]}")


def stop_on_signal(sig, frame):
    ztlib.check(False, "not_interrupted", f"got signal {sig}; stopping the cluster")
    raise SystemExit(1)


for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, stop_on_signal)
try:
    p = sh(SCRIPT, "start", "2", state, timeout=120)
    print(p.stdout + p.stderr, end="", flush=True)
    if ztlib.check(p.returncode == 0, "netns_slurm_starts", p.stderr[-2000:]):
        main()
finally:
    if link_down:
        link("up")
    p = sh(SCRIPT, "stop", state, timeout=120)
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    ztlib.check(p.returncode == 0 and f"zt{ENV['NETNS_CLUSTER_NET']}-" not in left and sh(SCRIPT, "status", state).returncode != 0,
                "netns_slurm_torn_down", p.stderr[-400:] + left)
    if ztlib.failed:
        print(f"t_multinode_slurm: logs kept in {state}", flush=True)
    else:
        shutil.rmtree(state, ignore_errors=True)
ztlib.finish()
