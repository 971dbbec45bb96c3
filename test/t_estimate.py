"""t_estimate.py — `zerotrain estimate`'s offload rows and Twin-Flow ratio window (issues 13, 14)
against numbers computed here by hand for configs/tiny.yaml on 2 ranks (bf16: P = 2, K = 12):
  - stage 3 + params cpu: the device drops the parameter shard PΨ/N, the host takes it;
  - optimizer cpu (ratio 1) at stages 2-3: the gradient shard stays on the device where that row fits
    --device-mem (offload_optimizer.gradients auto, as engine.c decides); where it does not, the
    gradients go to the host bucket by bucket, so the device drops the gradient shard PΨ/N and its
    shard-sized landing zone for one of a bucket's piece, and the host adds two staging buffers of a
    piece (zero_comm.c, grads_lane.c); the line under the table says which path each row took;
  - optimizer nvme: KΨ/N on NVMe, the host keeps min(buffer_count, groups) groups of
    min(sub_group_size, Ψ/N) (rounded up to 2048) x 12 B of staging plus gradients and 16-bit
    parameters, as engine_infinity.c allocates; with sub_group_size above and below the shard;
  - optimizer + params nvme: PΨ/N on NVMe too, buffer_count staging buffers of the largest piece on the host;
  - --nvme-size decides which NVMe rows fit (per node, shared by its ranks);
  - the ratio window [r_min, r_max] (r_min from device memory, r_max from host memory), a device
    that does not fit even at ratio 1, and a host too small for the least ratio the device needs.
The other estimate checks (every stage fits / none fits, bad arguments) are in t_zero_launch.py."""
import re

import ztlib

check = ztlib.check
MiB = 1048576.0
P, K, N = 2, 12, 2
# tiny.yaml: L2, C32, V50257, n_positions 64
C, V, T = 32, 50257, 64
embed = V * C + T * C                                               # wte + wpe: segment 0
block = 2 * 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + (C * 4 * C + 4 * C) + (4 * C * C + C)
total = embed + 2 * block + 2 * C
shard = -(-(-(-total // N)) // 128) * 128                            # ceil(total / N) up to 128 elements
ROW = re.compile(r"^(\d)\s+(\S+)\s+(\S+)\s+([\d.]+) MiB\s+([\d.]+) MiB\s+([\d.]+) MiB\s+([\d.]+) MiB\s+(yes|no)$")


def estimate(*args):
    p = ztlib.run(["estimate", "configs/tiny.yaml", "--ranks", str(N)] + list(args))
    rows = {}
    for line in p.stdout.splitlines():
        m = ROW.match(line)
        if m:
            rows[(int(m[1]), m[2], m[3])] = dict(states=float(m[4]) * MiB, device=float(m[5]) * MiB,
                                                 host=float(m[6]) * MiB, nvme=float(m[7]) * MiB, fits=m[8] == "yes")
    acts = re.search(r"activations ([\d.]+) MiB/rank", p.stdout)
    return p, rows, float(acts[1]) * MiB if acts else None


def near(a, b, tol=0.011 * MiB):  # the table prints MiB with 2 decimals
    return a is not None and abs(a - b) <= tol


def window(out, stage):
    m = re.search(rf"stage {stage}: \[([\d.]+), ([\d.]+)\]", out)
    return (float(m[1]), float(m[2])) if m else None


# ---- the rows, by hand
SUB, BUFC, PBUF, PBUFC = 100000, 2, 1000, 3
p, rows, acts = estimate("--set", f"zero_optimization.sub_group_size={SUB}",
                         "--set", f"zero_optimization.offload_optimizer.buffer_count={BUFC}",
                         "--set", f"zero_optimization.offload_param.buffer_size={PBUF}",
                         "--set", f"zero_optimization.offload_param.buffer_count={PBUFC}")
check(p.returncode == 0 and len(rows) == 10 and acts, "estimate_ten_rows", p.stdout[-2500:] + p.stderr[-500:])
grad_buffers = P * (embed + 2 * block) + P * shard                  # gradient segment buffers + landing zone
depth = min(4, max(1, int(5e7 // block)))                            # stage3_prefetch_bucket_size / block, at most 4
gather = P * (embed + (1 + depth) * block)                            # embeddings + (1 + prefetch depth) blocks
device3 = 16 * shard + grad_buffers + gather + (acts or 0)
def staging(sub, bufc):  # what engine_infinity.c allocates: groups of G rounded up to 2048, min(bufc, groups) of them
    g = -(-min(sub, shard) // 2048) * 2048
    return min(bufc, -(-shard // g)) * g * 12


opt_staging = staging(SUB, BUFC)
# ratio 1 at stages 2-3: a bucket's piece is at most reduce_bucket_size (5e8), the largest segment
# (the embedding) and the shard; one landing zone of it (overlap_comm off), two staging buffers
piece = min(5 * 10**8, embed, shard)
grads_off = P * shard + P * shard - P * piece
grads_staged = 2 * P * piece + 12 * -(-shard // 4096)  # staging buffers; per 4096-element chunk its sum and count
# what infinity_params.c allocates: buffer_count buffers of the largest piece in 4 KiB blocks, one block more each side
param_staging = PBUFC * (-(-P * min(embed, shard) // 4096) + 2) * 4096
# super_offload (on by default): beside a host part of n elements its speculation window, 12 B each, all
# of it where host memory holds it (here: the default 512 GiB)
SPEC = 12
want = {
    (3, "device", "device"): (device3, 0, 0),
    (3, "cpu", "device"): (device3 - K * shard, (16 + SPEC) * shard, 0),  # 80 GiB: the gradient shard stays on the device
    (3, "cpu", "cpu"): (device3 - K * shard - P * shard, (16 + SPEC) * shard + P * shard, 0),
    (3, "nvme", "device"): (device3 - K * shard, opt_staging + 2 * P * shard, K * shard),
    (3, "nvme", "nvme"): (device3 - K * shard - P * shard, opt_staging + 2 * P * shard + param_staging,
                          K * shard + P * shard),
}
for key, (dev, host, nvme) in want.items():
    r = rows.get(key)
    ok = r is not None and near(r["device"], dev) and near(r["host"], host) and near(r["nvme"], nvme) \
        and near(r["states"], 16 * shard)
    check(ok, "row_" + "_".join(map(str, key)),
          f"got {r}; want device {dev / MiB:.3f} host {host / MiB:.3f} nvme {nvme / MiB:.3f} MiB")

# without super_offload no window; with less host memory the window shrinks to what is left (less the
# engine's 1 GiB), so it never makes a row not fit
_, rows_off, _ = estimate("--set", "zero_optimization.offload_optimizer.super_offload=false")
r = rows_off.get((3, "cpu", "device"))
check(r is not None and near(r["host"], 16 * shard), "no_window_without_super_offload", str(r))
room = 16 * shard + 4 * shard  # a third of the window fits beside the host part
_, rows_small, _ = estimate("--host-mem", f"{N * (room + 2**30):.0f}")
r = rows_small.get((3, "cpu", "device"))
check(r is not None and near(r["host"], room, 0.02 * MiB) and r["fits"], "window_shrinks_to_host_memory", str(r))

GRADS_LINE = re.compile(r"^gradients at ratio 1 \(offload_optimizer.gradients auto, at [\d.]+ MiB of device memory\): "
                        r"stage 2 (.*); stage 3 (.*), with the parameters on the host (.*)$", re.M)
m = GRADS_LINE.search(p.stdout)
check(m is not None and m.groups() == ("the shard on the device",) * 3, "gradients_line_fits", p.stdout[-1500:])
# a device that holds the stage-3 cpu row without the gradient shard, not with it: that row sends the
# gradients to the host; with the parameters on the host too the shard fits again and stays
mem = device3 - K * shard - P * shard / 2
p, rows, _ = estimate("--device-mem", f"{mem:.0f}")
for key, (dev, host) in {(3, "cpu", "device"): (device3 - K * shard - grads_off, (16 + SPEC) * shard + grads_staged),
                         (3, "cpu", "cpu"): (device3 - K * shard - P * shard, (16 + SPEC) * shard + P * shard)}.items():
    r = rows.get(key)
    check(r is not None and near(r["device"], dev) and near(r["host"], host) and r["fits"],
          "short_row_" + "_".join(map(str, key)), f"got {r}; want device {dev / MiB:.3f} host {host / MiB:.3f} MiB")
m = GRADS_LINE.search(p.stdout)
check(m is not None and m[2] == "to the host bucket by bucket" and m[3] == "the shard on the device",
      "gradients_line_short", p.stdout[-1500:])

# sub_group_size at its default (1e9) is larger than the shard: the staging holds the whole shard
p, rows, _ = estimate()
r = rows.get((3, "nvme", "device"))
check(r is not None and near(r["host"], staging(10**9, 4) + 2 * P * shard), "nvme_staging_capped_at_shard", str(r))

# ---- --nvme-size (per node: 2 ranks share it): 10 MiB per rank holds KΨ/N (9.36 MiB), not (K+P)Ψ/N
p, rows, _ = estimate("--nvme-size", "20MiB")
check(p.returncode == 0 and rows.get((3, "nvme", "device"), {}).get("fits") is True
      and rows.get((3, "nvme", "nvme"), {}).get("fits") is False and "NVMe 10.0 MiB/rank" in p.stdout,
      "nvme_size_decides_fit", p.stdout[-2000:])
p, rows, _ = estimate("--nvme-size", "1 MB")
check(all(not r["fits"] for k, r in rows.items() if "nvme" in k) and rows[(3, "cpu", "cpu")]["fits"],
      "nvme_size_parsed_with_units", str(rows))
p = ztlib.run(["estimate", "configs/tiny.yaml", "--ranks", "2", "--nvme-size", "lots"])
check(p.returncode == 2 and "--nvme-size" in p.stderr, "nvme_size_bad_value", p.stderr[-300:])

# ---- the Twin-Flow ratio window, stage 1: device(r) = D0 - r K Ψ/N, host(r) = r 16 Ψ/N
p, rows, acts = estimate()
D0 = rows[(1, "device", "device")]["device"]
dev_mem, host_rank = D0 - 0.5 * K * shard, 0.75 * 16 * shard      # r_min 0.5, r_max 0.75
p, _, _ = estimate("--device-mem", f"{dev_mem:.0f}", "--host-mem", f"{N * host_rank:.0f}")
w = window(p.stdout, 1)
check(w is not None and abs(w[0] - 0.5) < 0.002 and abs(w[1] - 0.75) < 0.002, "ratio_window_inside", p.stdout[-900:])
p, _, _ = estimate()
check(window(p.stdout, 1) == (0.0, 1.0) and window(p.stdout, 3) == (0.0, 1.0), "ratio_window_all_fit", p.stdout[-900:])
# the device does not fit even with the whole optimizer shard on the host
p, rows, _ = estimate("--device-mem", "1MiB")
m = re.search(r"stage 1: none: the device is ([\d.]+) MiB short even at ratio 1", p.stdout)
check(m is not None and near(float(m[1]) * MiB, rows[(1, "cpu", "device")]["device"] - MiB, 0.02 * MiB),
      "ratio_window_device_short", p.stdout[-900:])
# the device needs r >= 0.5 but the host takes r <= 0.25: short 0.25 x 16 Ψ/N at r = 0.5
p, _, _ = estimate("--device-mem", f"{dev_mem:.0f}", "--host-mem", f"{N * 0.25 * 16 * shard:.0f}")
m = re.search(r"stage 1: none: the device needs r >= ([\d.]+), the host takes r <= ([\d.]+) \(([\d.]+) MiB short",
              p.stdout)
check(m is not None and abs(float(m[1]) - 0.5) < 0.002 and abs(float(m[2]) - 0.25) < 0.002
      and near(float(m[3]) * MiB, 0.25 * 16 * shard, 0.02 * MiB), "ratio_window_host_short", p.stdout[-900:])
# ---- --ratio (issue 31: only ratio 1 had rows): rows for Twin-Flow ratios 0.3 and 0.5 at stages 1-3,
# device = no offload - r KΨ/N, host = r x 16 B per shard element, i.e. between the ratio-1 row and none
p, rows = estimate("--ratio", "0.3,0.5")[:2]
RATIO_ROW = re.compile(r"^(\d)\s+cpu r=([\d.]+)\s+device\s+([\d.]+) MiB\s+([\d.]+) MiB\s+([\d.]+) MiB\s+([\d.]+) MiB\s+(yes|no)$")
ratio_rows = [m for m in map(RATIO_ROW.match, p.stdout.splitlines()) if m]
check(p.returncode == 0 and len(ratio_rows) == 6, "estimate_ratio_rows_printed", p.stdout[-1500:] + p.stderr[-400:])
for m in ratio_rows:
    stage, r = int(m[1]), float(m[2])
    dev0, dev1 = rows[(stage, "device", "device")]["device"], rows[(stage, "cpu", "device")]["device"]
    host1 = rows[(stage, "cpu", "device")]["host"]
    want_dev, want_host = dev0 - r * K * shard, r * (16 + SPEC) * shard
    check(near(float(m[4]) * MiB, want_dev) and near(float(m[5]) * MiB, want_host)
          and near(want_dev, dev0 - r * (dev0 - dev1), 0.02 * MiB) and near(want_host, r * host1, 0.02 * MiB),
          f"estimate_ratio_{r}_stage{stage}_row", f"{m[0]}; want device {want_dev / MiB:.2f} host {want_host / MiB:.2f}")
# ---- checkpoint.async_save: every row's host total holds the snapshot of the shard, 12 B an element
_, plain = estimate("--set", "checkpoint.dir=/tmp/zt_estimate_ck")[:2]
p, async_rows = estimate("--set", "checkpoint.dir=/tmp/zt_estimate_ck", "--set", "checkpoint.async_save=true")[:2]
diffs = [async_rows[k]["host"] - plain[k]["host"] for k in plain if k in async_rows]
check(p.returncode == 0 and len(diffs) == len(plain) > 5 and all(near(d, 12 * shard) for d in diffs)
      and "checkpoint.async_save:" in p.stdout, "estimate_counts_the_async_save_staging",
      f"{[round(d / MiB, 2) for d in diffs]} want {12 * shard / MiB:.2f} MiB; " + p.stdout[:600])
for bad in ("1.5", "0", "0.3,", "x"):
    p = ztlib.run(["estimate", "configs/tiny.yaml", "--ranks", "2", "--ratio", bad])
    check(p.returncode == 2 and f"bad value '{bad}' for --ratio" in p.stderr, f"estimate_ratio_refuses_{bad}", p.stderr[-300:])
ztlib.finish()
