"""t_offload_auto.py — Twin-Flow `ratio: auto` within both memories, on the CPU backend (where
offload_optimizer.device_memory bounds the device part and host_memory the host part): a host budget
that decides the ratio (the host part's bytes, counted from the info line's numbers, stay within it,
and the run trains exactly as without offload); device and host budgets whose window the ratio lands
in; without budgets the host bound comes from MemAvailable shared by the ranks of this machine;
budgets that no ratio fits stop every rank with one error naming both amounts. No timing is checked (the calibrated speeds are only printed)."""
import re
import subprocess
import time

import ztlib

ztlib.ensure_shakespeare()
cfg = "configs/tiny.yaml"
BASE = ["train_iters=6", "zero_optimization.stage=1"]
RANKS = 2
B_HOST = 16  # CPU backend (fp32): host master, m, v (12 B) + gradient landing buffer (4 B) per element
MIB = 1 << 20


def auto(**budgets):
    extra = "".join(f", {k}: {v}" for k, v in budgets.items())
    return f"zero_optimization.offload_optimizer={{device: cpu, ratio: auto{extra}}}"


def choice(stdout):
    """(ratio, bound, r_min, r_max, host_n, N) from the info lines of rank 0, or None"""
    m = re.search(r"twin-flow: ratio auto = ([0-9.]+) \(decided by ([a-z ]+)\):.*-> ratio >= ([0-9.]+); "
                  r"host: .*-> ratio <= (-?[0-9.]+)", stdout)
    u = re.search(r"twin-flow: rank 0 updates ([0-9]+) of ([0-9]+) optimizer elements on the host", stdout)
    if not m or not u:
        return None
    return float(m.group(1)), m.group(2), float(m.group(3)), float(m.group(4)), int(u.group(1)), int(u.group(2))


p, rows = ztlib.train(cfg, BASE, ranks=RANKS)
base = ztlib.losses(rows)
ztlib.check(p.returncode == 0 and len(base) == 6, "baseline_runs", p.stderr[-1500:])

# --- (a) the host budget decides: host_n * 16 B fits in it, and the ratio is at most budget / (N * 16)
host_budget = 4 * MIB
p, rows = ztlib.train(cfg, BASE + [auto(host_memory="4MiB")], ranks=RANKS)
c = choice(p.stdout)
ok = ztlib.check(p.returncode == 0 and c is not None, "host_bound_runs_and_logs", (p.stdout + p.stderr)[-1500:])
if ok:
    r, bound, r_min, r_max, host_n, n = c
    r_max_test = host_budget / (n * B_HOST)
    ztlib.check(bound == "host memory", "host_bound_named", f"decided by {bound}")
    ztlib.check(0 < r <= r_max_test + 5e-4 and abs(r_max - r_max_test) < 1e-3, "host_bound_ratio_within_budget",
                f"ratio {r}, printed r_max {r_max}, budget / (N * 16) = {r_max_test:.4f} (N = {n})")
    ztlib.check(0 < host_n * B_HOST <= host_budget, "host_bound_host_part_bytes_within_budget",
                f"{host_n} elements * {B_HOST} B = {host_n * B_HOST} > {host_budget}")
    ztlib.check(ztlib.losses(rows) == base, "host_bound_trains_bit_identical_to_no_offload",
                f"{ztlib.losses(rows)} vs {base}")

# --- both budgets, with room between them: the ratio lies in the window they print
p, rows = ztlib.train(cfg, BASE + [auto(host_memory="12MiB", device_memory="20MiB")], ranks=RANKS)
c = choice(p.stdout)
ok = ztlib.check(p.returncode == 0 and c is not None and len(rows) == 6, "window_runs",
                 (p.stdout + p.stderr)[-1500:])
if ok:
    r, bound, r_min, r_max, host_n, n = c
    ztlib.check(0 < r_min <= r <= r_max < 1 and host_n * B_HOST <= 12 * MIB, "window_ratio_inside",
                f"ratio {r} ({bound}), window [{r_min}, {r_max}], host part {host_n * B_HOST} B")

# --- no budget: the host bound is MemAvailable shared by the ranks on this machine
p, rows = ztlib.train(cfg, BASE + [auto()], ranks=RANKS)
ztlib.check(p.returncode == 0 and f"(MemAvailable / {RANKS} rank(s) on this machine)" in p.stdout,
            "no_budget_shares_memavailable_among_node_ranks", (p.stdout + p.stderr)[-1500:])

# --- (b) no ratio fits both: one error line with both amounts, every rank exits non-zero, quickly.
# Each rank runs under a shell that reports its exit status (and exits 0, so that mpirun lets the
# other rank finish and report too).
args = ["train", cfg, "--set", "metrics_file=/dev/null"]
for s in BASE + [auto(host_memory="4MiB", device_memory="16MiB")]:
    args += ["--set", s]
t0 = time.time()
cmd = ["mpirun", "-np", str(RANKS), "--oversubscribe", "--bind-to", "none", "sh", "-c",
       '"$@"; echo "rank-exit $OMPI_COMM_WORLD_RANK $?" >&2', "sh", ztlib.BIN] + args
try:
    p = subprocess.run(cmd, cwd=ztlib.ROOT, env=ztlib.ENV, capture_output=True, text=True, timeout=120)
    out, err, elapsed = p.stdout, p.stderr, time.time() - t0
except subprocess.TimeoutExpired as e:
    out, err, elapsed = "", f"timed out after 120 s: {e}", 120
lines = [l for l in err.splitlines() if l.startswith("zerotrain: error:")]
exits = sorted(re.findall(r"rank-exit ([0-9]+) ([0-9]+)", err))
ztlib.check(len(exits) == RANKS and all(rc != "0" for _, rc in exits), "no_fit_every_rank_exits_nonzero",
            f"exits {exits}\n{err[-1500:]}")
ztlib.check(len(lines) == 1 and "no offload ratio fits both memories" in lines[0], "no_fit_one_error_line",
            f"{len(lines)} error lines\n{err[-1500:]}")
msg = lines[0] if lines else ""
ztlib.check(re.search(r"need [0-9.]+ MiB on the device at ratio 0 and [0-9.]+ MiB on the host at ratio 1", msg)
            and re.search(r"the device has [0-9.]+ MiB .*budget 16\.0 MiB \(device_memory\)", msg)
            and re.search(r"the host [0-9.]+ MiB \(budget 4\.0 MiB \(host_memory\)", msg)
            and "zerotrain estimate CONFIG --ranks N" in msg and "higher ZeRO stage or more ranks" in msg,
            "no_fit_error_names_both_amounts_and_options", msg)
ztlib.check("step " not in out and elapsed < 60, "no_fit_stops_before_training",
            f"{elapsed:.1f} s\n{out[-500:]}")

# --- (c) a bad host_memory is a config error with its file position: test/t_config_errors.sh
ztlib.finish()
