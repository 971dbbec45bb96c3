"""bench_train.py — training throughput for `make bench`:
  (a) GPT-2 124M, B4 T64 and (b) small L6 C384, B8 T128 on one rank with all threads: ms/step,
      forward and backward separately, tokens/s and GFLOP/s as a fraction of the OpenBLAS SGEMM peak
      and of the FMA peak measured by bench_ops in the same `make bench` run, and the OpenBLAS
      kernels the run's log says it ran on; (b) again on OpenBLAS's SSE3 Prescott kernels, as a
      ratio to the kernels chosen;
  ZeRO: config (b) on 2 ranks x 1 thread for stages 0-3 relative to 1 rank x 2 threads, with the
      time spent waiting on collectives per step;
  tensor parallelism: config (b) with 8 heads on 1, 2 and 4 ranks x 1 thread, tokens/s and the
      tensor-parallel bytes per step against Megatron's formula;
  ZeRO-Infinity: config (b) at stage 3 with offload_param cpu / nvme and offload_optimizer nvme
      against no offload, and the swap files' throughput during the steps against the disk
      bandwidth bench_swap measured in this run; with parameters on NVMe, how long the gathers still
      waited for their reads and how many pieces were read ahead;
  super_offload: config (b) with the optimizer on the host, the speculative step against the
      validated one, alternated.
Medians over the timed steps (the first step, warm-up, is dropped)."""
import os
import re
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ztlib  # noqa: E402

ztlib.ensure_shakespeare()
threads = os.cpu_count() or 2


def bench_ops_figure(pattern):
    """a number bench_ops printed in this `make bench` run (None without it)"""
    m = re.search(pattern, ztlib.read_text(os.path.join(ztlib.ROOT, "build/bench/bench_ops.txt")))
    return float(m.group(1)) if m else None


def flops_per_token(L, C, V, T):
    return 6.0 * (L * 12.0 * C * C + V * C) + 6.0 * L * T * C


kernels = None  # the first run's "cpu kernels:" line


def bench(config, sets=(), ranks=0, omp=threads):
    global kernels
    ztlib.ENV["OMP_NUM_THREADS"] = str(omp)
    p, rows = ztlib.train(config, sets, ranks=ranks, timeout=900)
    m = re.search(r"^cpu kernels: .*$", p.stdout, re.M)
    if m and not kernels:
        kernels = m.group(0)
        print(kernels)
    if p.returncode != 0 or len(rows) < 2:
        print(p.stdout[-2000:], p.stderr[-2000:])
        return None
    timed = rows[1:]
    med = lambda k: statistics.median(r.get(k, 0.0) for r in timed)
    res = {k: med(k) for k in ("step_ms", "tokens_per_s", "forward_ms", "backward_ms", "optimizer_ms", "comm_ms",
                                "nvme_read_bytes", "nvme_written_bytes", "nvme_read_ms", "nvme_write_ms",
                                "host_adam_ms", "device_idle_ms", "nvme_param_pieces", "nvme_param_hits",
                                "nvme_param_wait_ms")}
    tp_sent = [r.get("tp_comm_sent_bytes") for r in timed]
    res["tp_bytes"] = statistics.median(sum(s[k][0] for k in s) for s in tp_sent) if all(tp_sent) else 0.0
    return res


peak = bench_ops_figure(r"SGEMM peak \(best of the above\): ([0-9.]+)")
fma = bench_ops_figure(r"FMA peak \(.*?\): 1 core [0-9.]+ GFLOP/s, \d+ threads ([0-9.]+)")
print(f"OpenBLAS SGEMM peak (bench_ops, this run): {peak if peak else 'n/a'} GFLOP/s; "
      f"FMA peak: {fma if fma else 'n/a'} GFLOP/s")
shapes = {"a": ("configs/bench_124m.yaml", 12, 768, 50257, 64, 4),
          "b": ("configs/bench_small.yaml", 6, 384, 50257, 128, 8)}
for name, (cfg, L, C, V, T, B) in shapes.items():
    r = bench(cfg)
    if not r:
        print(f"({name}) failed")
        continue
    gflops = flops_per_token(L, C, V, T) * B * T / (r["step_ms"] / 1e3) / 1e9
    frac = f" = {100 * gflops / peak:.0f}% of SGEMM peak" if peak else ""
    frac += f" = {100 * gflops / fma:.0f}% of FMA peak" if fma else ""
    print(f"({name}) {cfg}: {r['step_ms']:.0f} ms/step (forward {r['forward_ms']:.0f} ms, backward "
          f"{r['backward_ms']:.0f} ms, optimizer {r['optimizer_ms']:.0f} ms), {r['tokens_per_s']:.0f} tokens/s, "
          f"{gflops:.1f} GFLOP/s{frac}")

# the same step on OpenBLAS's SSE3 fallback: what zerotrain's choice of kernels saves on this CPU (issue 37)
small_ms = r["step_ms"] if r else None
users_core = ztlib.ENV.get("OPENBLAS_CORETYPE")
ztlib.ENV["OPENBLAS_CORETYPE"] = "Prescott"
r = bench(shapes["b"][0])
ztlib.ENV.pop("OPENBLAS_CORETYPE")
if users_core is not None:
    ztlib.ENV["OPENBLAS_CORETYPE"] = users_core  # a user's own choice stays for the rest
if r and small_ms:
    print(f"(b) on Prescott kernels (OPENBLAS_CORETYPE=Prescott): {r['step_ms']:.0f} ms/step = "
          f"{r['step_ms'] / small_ms:.2f}x the {small_ms:.0f} ms of the kernels chosen above")
else:
    print("(b) on Prescott kernels: failed")

print("ZeRO on config (b): 2 ranks x 1 thread vs 1 rank x 2 threads")
one = bench(shapes["b"][0], omp=2)
for stage in (0, 1, 2, 3):
    r = bench(shapes["b"][0], [f"zero_optimization.stage={stage}", "train_batch_size=16",
                               "zero_optimization.overlap_comm=true"], ranks=2, omp=1)
    if not r or not one:
        print(f"  stage {stage}: failed")
        continue
    print(f"  stage {stage}: {r['tokens_per_s']:.0f} tokens/s = {r['tokens_per_s'] / one['tokens_per_s']:.2f}x of "
          f"1 rank x 2 threads ({one['tokens_per_s']:.0f}); waiting on collectives {r['comm_ms']:.0f} ms of "
          f"{r['step_ms']:.0f} ms/step")

# Tensor parallelism on config (b) with 8 heads (so that 1, 2 and 4 ranks divide them): one group of tp
# ranks x 1 thread against 1 rank x 1 thread, and the
# tensor-parallel bytes per step against Megatron's formula (per micro-step and rank, (4L + 2)
# all-reduces of B*T*C moving 2(tp-1)/tp of it, and the cross-entropy's all-gather of 3 floats a token)
print("Tensor parallelism on config (b) with n_head 8: tp ranks x 1 thread (one data-parallel group)")
L_b, C_b, T_b, B_b = 6, 384, 128, 8
tp_one = None
for tp in (1, 2, 4):
    r = bench(shapes["b"][0], ["model.n_head=8", f"tensor_parallel.tp_size={tp}", "train_iters=4"],
              ranks=tp if tp > 1 else 0, omp=1)
    if not r:
        print(f"  tp {tp}: failed")
        continue
    tp_one = tp_one or r
    N = B_b * T_b
    want = (4 * L_b + 2) * 2 * (tp - 1) / tp * N * C_b * 4 + (tp - 1) * 3 * N * 4
    got = r["tp_bytes"]
    print(f"  tp {tp}: {r['tokens_per_s']:.0f} tokens/s = {r['tokens_per_s'] / tp_one['tokens_per_s']:.2f}x of tp 1; "
          f"{r['step_ms']:.0f} ms/step; tensor-parallel bytes sent per rank per step {got / 1e6:.3f} MB, formula "
          f"{want / 1e6:.3f} MB ({'equal' if abs(got - want) < 0.5 else 'DIFFERENT'})")

# Twin-Flow on config (b), 1 rank, ratio 0.5: the host part's update finishing during the next forward
# (overlap_step) against waiting for it at the end of the step. On the CPU backend both sides share the
# cores, so this shows the waiting moved, not a speed-up; the GPU figure is in bench_gpu.sh
print("Twin-Flow on config (b), ratio 0.5, 1 rank x 2 threads")
for ov in ("false", "true"):
    r = bench(shapes["b"][0], ["zero_optimization.offload_optimizer={device: cpu, ratio: 0.5}", "train_iters=6",
                               f"zero_optimization.offload_optimizer.overlap_step={ov}"], omp=2)
    if r:
        print(f"  overlap_step {ov}: {r['step_ms']:.0f} ms/step, host adam {r['host_adam_ms']:.0f} ms, device waited for "
              f"the host part {r['device_idle_ms']:.0f} ms per step")
    else:
        print(f"  overlap_step {ov}: failed")

# super_offload on config (b), 1 rank, optimizer on the host (ratio 1): the speculative step against the
# validated one, alternated 3 times each (medians of the medians), with clipping as configured (bench_small
# clips early steps: those roll back) and never (every speculation kept). On the CPU backend the
# "device" is the same cores, so the speculative lane competes with backward's GEMMs for them: this shows
# what the exactness costs here, not the GPU's overlap (zerotrain predict, docs/zero-and-offload.md's Super-offload)
print("super_offload on config (b), ratio 1, 1 rank x 2 threads: speculative vs validated step, alternated")
for clip in ("1.0", "0"):
    runs = {"true": [], "false": []}
    for _ in range(3):
        for so in ("true", "false"):
            r = bench(shapes["b"][0], ["zero_optimization.offload_optimizer={device: cpu, ratio: 1}", "train_iters=6",
                                       f"zero_optimization.offload_optimizer.super_offload={so}",
                                       f"gradient_clipping={clip}"], omp=2)
            if r:
                runs[so].append(r["step_ms"])
    if runs["true"] and runs["false"]:
        t, f = statistics.median(runs["true"]), statistics.median(runs["false"])
        print(f"  gradient_clipping {clip}: speculative {t:.0f} ms/step, validated {f:.0f} ms/step = {t / f:.2f}x "
              f"(runs {[round(x) for x in runs['true']]} / {[round(x) for x in runs['false']]})")
    else:
        print(f"  gradient_clipping {clip}: failed")

# ZeRO-Infinity on config (b), stage 3, 1 rank: what parameter offload and the NVMe tier cost per step
# on the CPU backend (where "device" and host are the same memory, so this is the bookkeeping and
# the I/O, not PCIe), and the swap throughput during the steps against bench_swap's disk figures
def disk_figures(bench_output, pattern):
    """(write, read) bandwidth a C bench of this `make bench` run measured, or None."""
    try:
        m = re.search(pattern, open(os.path.join(ztlib.ROOT, "build/bench", bench_output)).read())
    except OSError:
        return None
    return (float(m.group(1)), float(m.group(2))) if m else None


swap_disk = disk_figures("bench_swap.txt", r"disk baseline: write ([0-9.]+) GiB/s, read ([0-9.]+) GiB/s")
nvme_dir = tempfile.mkdtemp(dir=os.path.join(ztlib.ROOT, "build"))
infinity = {"no offload": [],
            "offload_param cpu": ["zero_optimization.offload_param.device=cpu"],
            "offload_param cpu, embedding in row blocks": ["zero_optimization.offload_param.device=cpu",
                                                           "zero_optimization.stage3_max_live_parameters=5e6"],
            "offload_optimizer nvme": [f"zero_optimization.offload_optimizer={{device: nvme, nvme_path: {nvme_dir}}}",
                                       "zero_optimization.sub_group_size=4000000"],
            "offload_param nvme + offload_optimizer nvme": [
                f"zero_optimization.offload_param={{device: nvme, nvme_path: {nvme_dir}}}",
                f"zero_optimization.offload_optimizer={{device: nvme, nvme_path: {nvme_dir}}}",
                "zero_optimization.sub_group_size=4000000"]}
print("ZeRO-Infinity on config (b), stage 3, 1 rank x 2 threads")
ref = None
for name, sets in infinity.items():
    r = bench(shapes["b"][0], ["zero_optimization.stage=3", "train_iters=6"] + sets, omp=2)
    if not r:
        print(f"  {name}: failed")
        continue
    ref = ref or r
    line = f"  {name}: {r['step_ms']:.0f} ms/step = {r['step_ms'] / ref['step_ms']:.2f}x of no offload"
    if r["nvme_read_bytes"]:
        rd = r["nvme_read_bytes"] / 2**30 / max(r["nvme_read_ms"] / 1e3, 1e-9)
        wr = r["nvme_written_bytes"] / 2**30 / max(r["nvme_write_ms"] / 1e3, 1e-9)
        line += (f"; swap {r['nvme_read_bytes'] / 1e6:.0f} MB read at {rd:.2f} GiB/s, "
                 f"{r['nvme_written_bytes'] / 1e6:.0f} MB written at {wr:.2f} GiB/s while I/O was in flight")
        if swap_disk:
            line += f" = {100 * rd / swap_disk[1]:.0f}% / {100 * wr / swap_disk[0]:.0f}% of the disk (goal >= 70%)"
    if r["nvme_param_pieces"]:  # offload_param nvme: how much of the parameter reads the gathers still waited for
        line += (f"; gathers waited {r['nvme_param_wait_ms']:.0f} ms for parameter reads, "
                 f"{r['nvme_param_hits']:.0f} of {r['nvme_param_pieces']:.0f} pieces read ahead")
    print(line)
shutil.rmtree(nvme_dir, ignore_errors=True)

# checkpoint save/load of GPT-2 124M on 2 ranks (stage 2) against the disk bandwidth bench_checkpoint
# measured in this run (plain write()+fsync / read() of the same number of bytes)

base = disk_figures("bench_checkpoint.txt",
                    r"disk baseline: write\+fsync [0-9.]+ s \(([0-9.]+) GB/s\), read [0-9.]+ s \(([0-9.]+) GB/s\)")
d = tempfile.mkdtemp(dir=os.path.join(ztlib.ROOT, "build"))
ztlib.ENV["OMP_NUM_THREADS"] = "1"
sets = ["train_iters=1", f"checkpoint.dir={d}", "zero_optimization.stage=2", "train_batch_size=8"]
p, _ = ztlib.train(shapes["a"][0], sets, ranks=2, timeout=900)
save = re.search(r"checkpoint: saved \S+ \(([0-9.]+) GB in ([0-9.]+) s", p.stdout)
p2, _ = ztlib.train(shapes["a"][0], sets[:-1] + ["train_batch_size=8", "train_iters=2", "checkpoint.save_interval=0"],
                    ranks=2, timeout=900)
load = re.search(r"checkpoint: loaded \S+ in ([0-9.]+) s", p2.stdout)
shutil.rmtree(d, ignore_errors=True)
if save and load:
    gb, ts, tl = float(save.group(1)), float(save.group(2)), float(load.group(1))
    line = f"checkpoint 124M, 2 ranks: save {gb:.2f} GB in {ts:.2f} s ({gb / ts:.2f} GB/s), load {tl:.2f} s ({gb / tl:.2f} GB/s)"
    if base:
        line += f"; disk write {base[0]:.2f} GB/s, read {base[1]:.2f} GB/s -> save {100 * gb / ts / base[0]:.0f}%, " \
                f"load {100 * gb / tl / base[1]:.0f}% of the disk"
    print(line)
else:
    print("checkpoint bench failed:", p.stderr[-800:], p2.stderr[-800:])
