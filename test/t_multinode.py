"""t_multinode.py — zerotrain across hosts: a cluster of network namespaces (scripts/netns-cluster,
2 hosts with their own addresses and hostnames, Open MPI over TCP between them), torn down at the end:
  - 2 hosts x 2 ranks, ZeRO-3 with checkpoints: the losses equal the 4-rank single-host run's;
  - node loss (everything on node2 killed mid-run): mpirun and every surviving rank exit non-zero
    within 15 s, one line names the lost host, the last checkpoint is intact;
  - elastic resume: the job comes back on the host that is left (2 ranks), resumes from that
    checkpoint resharded from 4 ranks, and its losses continue the straight run's within 1e-5
    (t_checkpoint.py's resharding tolerance);
  - dropped packets (node2's traffic silently blackholed): the watchdog (comm_timeout 4 s) names a
    rank, its host and the collective; the job ends non-zero within comm_timeout + 30 s (Linux
    gives up on the lost connections after tcp_retries2=5, which the cluster sets);
  - bad input: a host list naming a host that is not there, and fewer slots than ranks: a clear
    error from mpirun within 30 s, no hang.
Skips (SKIP line) when not root or network namespaces cannot be made."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import ztlib

SCRIPT = os.path.join(ztlib.ROOT, "scripts", "netns-cluster")



if not ztlib.can_netns("unshare"):
    print("SKIP t_multinode: needs root and `ip netns` (network namespaces)")
    sys.exit(0)

ztlib.ensure_shakespeare()
tiny = "configs/tiny.yaml"
tmp = tempfile.mkdtemp(prefix="zt-mn-")
ENV = dict(ztlib.ENV, NETNS_CLUSTER_DIR=os.path.join(tmp, "cluster"), NETNS_CLUSTER_NET=str(100 + os.getpid() % 150))


def cluster(*args, timeout=60):
    return subprocess.run([SCRIPT, *args], env=ENV, capture_output=True, text=True, timeout=timeout)


def mpirun_cmd(hosts, sets, env_extra=()):
    cmd = [SCRIPT, "mpirun", hosts, "--wdir", ztlib.ROOT, "-x", "OMP_NUM_THREADS", ztlib.BIN, "train", tiny]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def read_metrics(path):
    with open(path) as f:
        return [__import__("json").loads(line) for line in f if line.strip()]


def run_until(cmd, trigger, action, limit=120):
    """Starts cmd, calls action() once trigger(output so far) holds; returns (rc, output, seconds
    from the action to the end)."""
    p = subprocess.Popen(cmd, env=ENV, cwd=ztlib.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, t_act, start = "", None, time.time()
    try:
        for line in p.stdout:
            out += line
            if t_act is None and trigger(out):
                action()
                t_act = time.time()
            if time.time() - start > limit:
                break
        p.wait(timeout=max(1, limit - (time.time() - start)))
    except subprocess.TimeoutExpired:
        pass
    finally:
        if p.poll() is None:
            p.kill()
            out += p.communicate()[0]
    return p.returncode, out, (time.time() - t_act) if t_act else float("inf")


try:
    r = cluster("start", "2")
    ztlib.check(r.returncode == 0 and "node2" in r.stdout, "netns_cluster_start", r.stderr + r.stdout)
    r = subprocess.run([SCRIPT, "exec", "node2", "hostname"], env=ENV, capture_output=True, text=True, timeout=30)
    ztlib.check(r.stdout.strip() == "node2", "netns_cluster_host_has_its_name", r.stdout + r.stderr)

    # 2 hosts x 2 ranks vs 4 ranks on one host, ZeRO-3, with checkpoints
    straight = os.path.join(tmp, "straight.jsonl")
    p, ref = ztlib.train(tiny, ["zero_optimization.stage=3", "train_iters=12", f"checkpoint.dir={tmp}/ck1",
                                "checkpoint.save_interval=4"], ranks=4, metrics=straight)
    mn = os.path.join(tmp, "mn.jsonl")
    r = subprocess.run(mpirun_cmd("node1:2,node2:2", ["zero_optimization.stage=3", "train_iters=12", f"metrics_file={mn}",
                                                      f"checkpoint.dir={tmp}/ck2", "checkpoint.save_interval=4"]),
                       env=ENV, cwd=ztlib.ROOT, capture_output=True, text=True, timeout=180)
    got = read_metrics(mn) if os.path.exists(mn) else []
    ztlib.check(r.returncode == 0 and p.returncode == 0 and len(ref) == 12 and
                ztlib.losses(got) == ztlib.losses(ref), "two_hosts_zero3_equals_single_host",
                f"rc {r.returncode}/{p.returncode}: {ztlib.losses(got)} vs {ztlib.losses(ref)} {r.stderr[-400:]}")
    ztlib.check(os.path.exists(f"{tmp}/ck2/step_00000012"), "two_hosts_checkpoints", str(os.listdir(tmp)))

    # node loss mid-run: kill everything on node2 after the step-4 checkpoint
    ck = f"{tmp}/ck3"
    lost = os.path.join(tmp, "lost.jsonl")
    rc, out, took = run_until(mpirun_cmd("node1:2,node2:2", ["zero_optimization.stage=3", "train_iters=100000",
                                                             f"checkpoint.dir={ck}", "checkpoint.save_interval=4",
                                                             "steps_per_print=1", f"metrics_file={lost}"]),
                              lambda o: re.search(r"^step +6/", o, re.M), lambda: cluster("kill", "node2"))
    ztlib.check(rc not in (0, None) and took < 15, "node_loss_everyone_exits_nonzero_bounded", f"rc {rc}, {took:.1f}s")
    ztlib.check(re.search(r"^\s*Remote daemon: .* on node node2$", out, re.M) is not None, "node_loss_names_lost_host",
                out[-600:])
    step_dir = open(f"{ck}/latest").read().strip() if os.path.exists(f"{ck}/latest") else ""
    ztlib.check(step_dir >= "step_00000004", "node_loss_last_checkpoint_kept", step_dir)
    saved = int(step_dir[5:]) if step_dir else 0

    # elastic resume on the host that is left: 2 ranks, resharded from the 4-rank checkpoint
    rows_before = read_metrics(lost)[:saved] if os.path.exists(lost) else []
    shutil.copy(lost, lost + ".resumed")
    with open(lost + ".resumed", "w") as f:
        f.writelines(__import__("json").dumps(r) + "\n" for r in rows_before)
    r = subprocess.run(mpirun_cmd("node1:2", ["zero_optimization.stage=3", "train_iters=12", f"checkpoint.dir={ck}",
                                              f"metrics_file={lost}.resumed"]),
                       env=ENV, cwd=ztlib.ROOT, capture_output=True, text=True, timeout=180)
    rows = read_metrics(lost + ".resumed")
    ok = (r.returncode == 0 and f"resumed from {ck}/{step_dir}" in r.stdout and "resharded from 4 ranks" in r.stdout
          and len(rows) == 12 and ztlib.max_rel_diff(ztlib.losses(rows), ztlib.losses(ref)) <= 1e-5)
    ztlib.check(ok, "elastic_resume_on_fewer_ranks_continues_straight_run",
                f"rc {r.returncode}: {ztlib.losses(rows)} vs {ztlib.losses(ref)}\n{r.stdout[-300:]}{r.stderr[-300:]}")

    # dropped packets: node2's traffic vanishes; the watchdog names a rank, its host and the collective
    cluster("stop")
    cluster("start", "2")
    rc, out, took = run_until(mpirun_cmd("node1:2,node2:2", ["zero_optimization.stage=3", "train_iters=100000",
                                                             "comm_timeout=4", "steps_per_print=1"]),
                              lambda o: re.search(r"^step +3/", o, re.M), lambda: cluster("drop", "node2"))
    m = re.search(r"zerotrain: error: rank \d \(host node\d\): [a-z -]+ #\d+ \(\d+ bytes\) made no progress for \d+s "
                  r"\(waiting on the other 3 ranks; comm_timeout 4s\); aborting the job", out)
    ztlib.check(m is not None, "dropped_packets_watchdog_names_rank_host_collective", out[-800:])
    ztlib.check(rc not in (0, None) and took < 4 + 30, "dropped_packets_job_ends_nonzero_bounded", f"rc {rc}, {took:.1f}s")

    # bad input: an unknown host, and fewer slots than ranks
    cluster("stop")
    cluster("start", "2")
    t0 = time.time()
    r = subprocess.run(mpirun_cmd("node1:1,node7:1", ["train_iters=2"]), env=ENV, cwd=ztlib.ROOT,
                       capture_output=True, text=True, timeout=60)
    ztlib.check(r.returncode != 0 and "node7" in r.stdout + r.stderr and time.time() - t0 < 30,
                "bad_hostlist_unknown_host_clear_error", (r.stdout + r.stderr)[-400:])
    env_noover = {k: v for k, v in ENV.items() if k != "OMPI_MCA_rmaps_base_oversubscribe"}
    t0 = time.time()
    r = subprocess.run(mpirun_cmd("node1:1,node2:1", ["train_iters=2"])[:3] + ["-np", "4"] +
                       mpirun_cmd("node1:1,node2:1", ["train_iters=2"])[3:], env=env_noover, cwd=ztlib.ROOT,
                       capture_output=True, text=True, timeout=60)
    ztlib.check(r.returncode != 0 and "slots" in r.stdout + r.stderr and time.time() - t0 < 30,
                "bad_hostlist_too_few_slots_clear_error", (r.stdout + r.stderr)[-400:])
finally:
    r = cluster("stop")
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    ztlib.check(r.returncode == 0 and f"zt{ENV['NETNS_CLUSTER_NET']}-" not in left, "netns_cluster_torn_down", left)
    shutil.rmtree(tmp, ignore_errors=True)
ztlib.finish()
