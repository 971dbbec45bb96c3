"""bench_multinode.py — `make bench` part: ZeRO across hosts on shaped links. A 2-host cluster of network
namespaces (scripts/netns-cluster, torn down at the end), 2 ranks per host, configs/tiny.yaml with a
wider model (n_embd 128, 4 layers: 0.8M non-embedding + 6.4M embedding parameters), every host link
shaped to 10 Gbit/s and then 1 Gbit/s (tc tbf on both ends). For each ZeRO stage with overlap_comm off
and on: median step time and median comm wait (`comm_ms`, time blocked on collectives) over steps 2..N,
the bytes each host sends per step (`comm_sent_bytes` summed over its ranks), the link time those
bytes need (off-host share (ranks on the other host)/(ranks-1) of them, at the link rate), and the
fraction of that link time hidden behind compute: 1 - comm wait / link time (clamped to 0..1).
Prints a table; writes build/bench/multinode.txt. Bounded: 120 s per run, about 3 minutes in all."""
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import ztlib  # noqa: E402

SCRIPT = os.path.join(ztlib.ROOT, "scripts", "netns-cluster")
STEPS = 6
MODEL = ["n_layer=4", "n_embd=128", "n_head=4"]
RATES = [("10gbit", 10e9), ("1gbit", 1e9)]
STAGES = (0, 1, 2, 3)
NODES = (8, 16, 32, 64)


def marginal(measured, out):
    """How much of the extra link time between the two rates the step pays: (step at 1 Gbit/s - step at
    10 Gbit/s) / (link time at 1 - at 10). Unlike comm wait, this does not count waiting on slower
    ranks' compute; 1 = nothing hidden, 0 = all hidden, above 1 = the link is slower than its rate."""
    out("exposed share of the extra link time, 10 -> 1 Gbit/s:")
    for stage in STAGES:
        for overlap in ("false", "true"):
            a, b = measured.get((RATES[0][0], stage, overlap)), measured.get((RATES[1][0], stage, overlap))
            if a and b:
                la, lb = (m[2] * 8 / r * 1e3 for m, r in ((a, RATES[0][1]), (b, RATES[1][1])))
                out(f"  stage {stage} overlap {overlap:>5}: +{b[0] - a[0]:7.1f} ms step for +{lb - la:7.1f} ms link: {(b[0] - a[0]) / (lb - la):.2f}")


def project(measured, out):
    """Step time on N nodes (2 ranks each, same micro batch per rank) from the 2-node measurement:
    compute per rank T_c = step - comm wait (overlap on); bytes a node sends off-host per step grow as
    a ring's 2(N-1)/N of the data (so B_N = B_2 * 2(N-1)/N); the same fraction h of link time stays
    hidden; latency terms left out (buckets of MBs are bandwidth-bound). step_N = T_c + (1-h) B_N / rate."""
    out(f"projection (overlap_comm on): step ms for N nodes x 2 ranks; model in docs/predict.md")
    out(f"{'link':>7} {'stage':>5} " + " ".join(f"{'N=' + str(n):>8}" for n in NODES))
    for rate_name, rate in RATES:
        for stage in STAGES:
            m = measured.get((rate_name, stage, "true"))
            if not m:
                continue
            step, comm, off_bytes, hidden = m
            t_c = step - comm
            cols = [t_c + (1 - hidden) * off_bytes * (2 * (n - 1) / n) * 8 / rate * 1e3 for n in NODES]
            out(f"{rate_name:>7} {stage:>5} " + " ".join(f"{c:8.1f}" for c in cols))


def main():
    if os.geteuid() != 0 or subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        print("bench_multinode: skipped (needs root and network namespaces)")
        return
    ztlib.ensure_shakespeare()
    tmp = tempfile.mkdtemp(prefix="zt-bmn-", dir="/tmp")
    env = dict(ztlib.ENV, NETNS_CLUSTER_DIR=os.path.join(tmp, "net"), NETNS_CLUSTER_NET=str(100 + (os.getpid() + 33) % 150))
    lines = []
    measured = {}

    def out(s):
        print(s, flush=True)
        lines.append(s)

    try:
        r = subprocess.run([SCRIPT, "start", "2"], env=env, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            print("bench_multinode: cluster did not start: " + r.stderr[-300:])
            return
        out("2 hosts x 2 ranks, tiny.yaml with " + " ".join(MODEL) + f", {STEPS} steps (medians of steps 2..{STEPS})")
        out(f"{'link':>7} {'stage':>5} {'overlap':>7} {'step ms':>8} {'comm ms':>8} {'MB/host':>8} {'link ms':>8} {'hidden':>6}")
        for rate_name, rate in RATES:
            subprocess.run([SCRIPT, "shape", rate_name], env=env, capture_output=True, timeout=30)
            for stage in STAGES:
                for overlap in ("false", "true"):
                    metrics = os.path.join(tmp, f"m_{rate_name}_{stage}_{overlap}.jsonl")
                    sets = [f"model.{m}" for m in MODEL] + [f"zero_optimization.stage={stage}", f"train_iters={STEPS}",
                                                             f"zero_optimization.overlap_comm={overlap}", f"metrics_file={metrics}"]
                    cmd = [SCRIPT, "mpirun", "node1:2,node2:2", "--wdir", ztlib.ROOT, "-x", "OMP_NUM_THREADS", ztlib.BIN,
                           "train", "configs/tiny.yaml"]
                    for s in sets:
                        cmd += ["--set", s]
                    try:
                        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
                    except subprocess.TimeoutExpired:
                        out(f"{rate_name:>7} {stage:>5} {overlap:>7}  timed out after 120 s")
                        continue
                    rows = [json.loads(x) for x in open(metrics)] if os.path.exists(metrics) else []
                    if p.returncode != 0 or len(rows) < STEPS:
                        out(f"{rate_name:>7} {stage:>5} {overlap:>7}  failed: {p.stderr.strip()[-200:]}")
                        continue
                    rows = rows[1:]
                    step = statistics.median(x["step_ms"] for x in rows)
                    comm = statistics.median(x["comm_ms"] for x in rows)
                    # bytes host node1 (ranks 0, 1) sends per step; 2 of each rank's 3 peers are off-host
                    sent = statistics.median(sum(v[0] + v[1] for v in x["comm_sent_bytes"].values()) for x in rows)
                    link_ms = sent * 2 / 3 * 8 / rate * 1e3
                    hidden = min(1.0, max(0.0, 1 - comm / link_ms)) if link_ms > 0 else 0.0
                    out(f"{rate_name:>7} {stage:>5} {overlap:>7} {step:8.1f} {comm:8.1f} {sent / 1e6:8.2f} {link_ms:8.1f} {hidden:6.2f}")
                    measured[(rate_name, stage, overlap)] = (step, comm, sent * 2 / 3, hidden)
        marginal(measured, out)
        project(measured, out)
    finally:
        subprocess.run([SCRIPT, "stop"], env=env, capture_output=True, timeout=60)
        os.makedirs(os.path.join(ztlib.ROOT, "build", "bench"), exist_ok=True)
        with open(os.path.join(ztlib.ROOT, "build", "bench", "multinode.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
