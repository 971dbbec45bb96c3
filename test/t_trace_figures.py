"""t_trace_figures.py — `scripts/plot --trace` (scripts/trace_figures.py) against what the run did.

A traced run on the simulated GPU (stage 3, optimizer offload with a ratio, parameter offload,
cpu_checkpointing; its lanes are real threads and its transfers real copies), then its figures'
numbers for the last step against the run's own metrics (written by train.c, not read from the
trace):
  - the bytes under each transfer curve (H2D, D2H) equal the bytes the engine counted as the
    device copied them that step (h2d_bytes, d2h_bytes), and both directions moved something;
  - the memory curve's peak equals the allocator's peak in the step (device_peak_bytes), under the
    capacity the sim was given (ZEROTRAIN_SIM_MEM);
  - the phase bars add up to the step time within the trace's resolution, forward and backward
    equal the metrics' forward_ms and backward_ms, the named phases overlap nothing ("other" >= 0);
  - the summary's step time is the metrics' step_ms; the four PNGs are written;
  - the device's compute stream and every CPU Adam thread were seen busy (threads within their lane);
  - the sweep chart over three Twin-Flow ratios: each point's step time is that run's own;
  - a run killed mid-step (SIGKILL while its trace is being written) still gives the figures of its
    last complete step, whose numbers are those of its metrics line;
  - a trace cut before its first step ended is a clear error;
  - two ranks' traces drawn side by side (--rank all), rank 0's bytes those of its metrics; and
    merged on one time axis: each rank's step overlaps the other's there (neither can finish a step
    whose gradients need the other's before the other started it), the summed bytes are the ranks' own;
  - the casts of the host part have their own marker, with the bytes cast;
  - NVMe optimizer offload: the NVMe lane's bytes in the step equal the swap's counters for that step
    (the metrics' nvme_read_bytes, nvme_written_bytes), with sub-phase bars of their own;
  - a CPU-backend trace plots too and says it has no PCIe;
  - the sim reporting its items after the fact, at each synchronize (ZEROTRAIN_SIM_LATE_REPORTS, the
    path the CUDA backend's event timing feeds): the same byte and busy checks hold;
  - trace_nvml_ms: where NVML cannot be loaded (this machine), one warning line and the run goes on
    without NVML counters; where it can, the trace has them. With a stand-in libnvidia-ml.so.1 (fixed
    answers) the sampler's whole path: its counters in the trace and in the figures' summary, the GPU
    it asks for as CUDA_VISIBLE_DEVICES maps it.
"""
import os
import re
import signal
import subprocess
import tempfile
import time

import ctypes

import ztlib

ztlib.ensure_shakespeare()
cfg = os.path.join(ztlib.ROOT, "configs", "tiny.yaml")
work = tempfile.mkdtemp(prefix="zt_trace_fig_")
PLOT = os.path.join(ztlib.ROOT, "scripts", "plot")
SIM_MEM = 256 * 1048576
ENV = {"ZEROTRAIN_SIM_MEM": "256MiB", "ZEROTRAIN_SIM_JITTER": "7"}
OFFLOAD = ["device=sim", "zero_optimization.stage=3", "zero_optimization.offload_param={device: cpu, pin_memory: true}",
           "activation_checkpointing={enabled: true, cpu_checkpointing: true}", "wall_clock_breakdown=true",
           "steps_per_print=100"]


def opt(ratio):
    return f"zero_optimization.offload_optimizer={{device: cpu, ratio: {ratio}, pin_memory: true, overlap_step: false}}"


def traced_run(name, sets, iters=4, env=ENV):
    trace = os.path.join(work, name, "trace.json")
    metrics = os.path.join(work, name, "metrics.jsonl")
    os.makedirs(os.path.dirname(trace), exist_ok=True)
    args = ["train", cfg, "--set", f"trace={trace}", "--set", f"metrics_file={metrics}", "--set", f"train_iters={iters}"]
    for s in sets:
        args += ["--set", s]
    p = ztlib.run(args, env=env)
    return p, trace, ztlib.read_metrics(metrics)


def plot(*args):
    p = subprocess.run([PLOT, "--trace"] + list(args), capture_output=True, text=True, timeout=120)
    return p, p.stdout + p.stderr


def summary(text):
    """{figure: {key: value}} from the summary lines ("rank 0 pcie: k=v ...")."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"rank \d+(.*?): (.*)", line)
        if not m:
            continue
        words = m.group(1).split()
        fig = words[-1] if words and words[-1] in ("memory", "pcie", "busy", "phases") else "head"
        out[fig] = {k: float(v) for k, v in re.findall(r"(\w+)=(-?[0-9.]+)\b", m.group(2))}
    return out


def close(a, b, tol):
    return abs(a - b) <= tol


# ---------------------------------------------------------------- one traced offloaded run
p, trace, rows = traced_run("ratio0.5", OFFLOAD + [opt(0.5)])
ztlib.check(p.returncode == 0 and len(rows) == 4, "traced_sim_run", p.stdout[-800:] + p.stderr[-800:])
last = rows[-1] if rows else {}
pp, text = plot(trace, "-o", os.path.join(work, "fig"))
s = summary(text)
ok = pp.returncode == 0 and {"head", "memory", "pcie", "busy", "phases"} <= set(s)
ztlib.check(ok, "plot_trace_runs", text[-1500:])
if ok:
    pc, mem, ph, head = s["pcie"], s["memory"], s["phases"], s["head"]
    ztlib.check(head["step"] == last["step"] == 4, "figures_of_the_last_step", f"{head} vs {last.get('step')}")
    ztlib.check(last["h2d_bytes"] > 0 and last["d2h_bytes"] > 0, "both_directions_moved", str(last))
    ztlib.check(pc["h2d_curve_bytes"] == last["h2d_bytes"] and pc["h2d_bytes"] == last["h2d_bytes"],
                "h2d_curve_bytes_equal_engine_count", f"{pc} vs {last['h2d_bytes']}")
    ztlib.check(pc["d2h_curve_bytes"] == last["d2h_bytes"] and pc["d2h_bytes"] == last["d2h_bytes"],
                "d2h_curve_bytes_equal_engine_count", f"{pc} vs {last['d2h_bytes']}")
    ztlib.check(mem["device_peak_bytes"] == last["device_peak_bytes"] and mem["capacity_bytes"] == SIM_MEM
                and 0 < mem["device_peak_bytes"] <= SIM_MEM and mem["headroom_update_bytes"] > 0,
                "memory_peak_equals_allocator_peak", f"{mem} vs {last['device_peak_bytes']}")
    bz = s["busy"]
    ztlib.check(bz["cpu_adam_threads"] >= 1 and 0 < bz["cpu_adam_threads_busy_update_pct"] <= bz["cpu_adam_busy_update_pct"] + 5
                and bz["device_busy_pct"] > 0, "busy_device_and_each_cpu_adam_thread", str(bz))
    ztlib.check(mem["host_pinned_bytes"] > 0 and mem["host_optimizer_bytes"] > 0, "host_memory_split", str(mem))
    res_ms = 0.002  # every event is written to the nanosecond; the summary rounds to the microsecond
    parts = sum(ph[k] for k in ("forward_ms", "backward_ms", "reduction_ms", "update_ms", "other_ms"))
    ztlib.check(close(parts, ph["step_ms"], res_ms) and ph["other_ms"] >= -res_ms,
                "phase_bars_add_up_to_step_time", str(ph))
    ztlib.check(close(ph["step_ms"], last["step_ms"], 0.002), "step_time_is_the_runs", f"{ph} vs {last['step_ms']}")
    ztlib.check(close(ph["forward_ms"], last["forward_ms"], 0.01) and close(ph["backward_ms"], last["backward_ms"], 0.01),
                "forward_backward_bars_equal_metrics", f"{ph} vs {last}")
    ztlib.check(ph["update_ms"] > 0 and "host adam" in text and "device adam" in text, "update_sub_phases", text[-600:])
    ztlib.check(re.search(r"casts \(fused in host adam\) [0-9.]+ ms at [0-9.]+ GB/s", text) is not None,
                "casts_marked_with_their_bytes", text[-600:])
    pngs = [os.path.join(work, f"fig.{n}.png") for n in ("memory", "pcie", "busy", "phases")]
    ztlib.check(all(os.path.exists(f) and open(f, "rb").read(8) == b"\x89PNG\r\n\x1a\n" for f in pngs),
                "four_pngs_written", text[-300:])

# ---------------------------------------------------------------- the sweep's points are the runs' own step times
runs = {"0.5": (trace, last)}
for ratio in ("0.25", "1"):
    p2, t2, r2 = traced_run("ratio" + ratio, OFFLOAD + [opt(ratio)], iters=3)
    runs[ratio] = (t2, r2[-1] if r2 else {})
pp, text = plot(*[f"{k}={v[0]}" for k, v in runs.items()], "-o", os.path.join(work, "sweep"))
points = {m.group(1): float(m.group(2)) for m in re.finditer(r"sweep: label=(\S+) .*?step_ms=([0-9.]+)", text)}
ztlib.check(pp.returncode == 0 and os.path.exists(os.path.join(work, "sweep.sweep.png")) and
            len(points) == 3 and all(close(points[k], runs[k][1].get("step_ms", -1), 0.002) for k in runs),
            "sweep_points_are_the_runs_step_times", f"{points} vs {[(k, v[1].get('step_ms')) for k, v in runs.items()]}"
            + text[-500:])

# ---------------------------------------------------------------- killed mid-step
kdir = os.path.join(work, "killed")
os.makedirs(kdir)
ktrace, kmetrics = os.path.join(kdir, "trace.json"), os.path.join(kdir, "metrics.jsonl")
kfile = os.path.join(kdir, "trace.rank0.json")
killed_ok = False
for attempt in range(3):
    args = [ztlib.BIN, "train", cfg, "--set", f"trace={ktrace}", "--set", f"metrics_file={kmetrics}",
            "--set", "train_iters=200"]
    for x in OFFLOAD + [opt(0.5)]:
        args += ["--set", x]
    proc = subprocess.Popen(args, cwd=ztlib.ROOT, env=dict(ztlib.ENV, **ENV), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and ztlib.read_text(kfile).count('"name":"step"') < 2:
        time.sleep(0.02)
    time.sleep(0.05)  # inside the next step's forward
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    text_k = ztlib.read_text(kfile)
    tail = text_k[text_k.rfind('"name":"step"'):]
    if tail.count('"ph":"') > 1:  # events after the last step's end (the engine writes them after): mid-step
        killed_ok = True
        break
ztlib.check(killed_ok and not text_k.rstrip().endswith("]"), "killed_mid_step", text_k[-300:])
pp, text = plot(ktrace, "-o", os.path.join(kdir, "fig"))
s = summary(text)
krows = {r["step"]: r for r in ztlib.read_metrics(kmetrics)}
n_steps = text_k.count('"name":"step"')
ok = pp.returncode == 0 and "head" in s and s["head"]["step"] == n_steps
if ok and n_steps in krows:  # the metrics line of that step may not have been written before the kill
    ok = s["pcie"]["h2d_curve_bytes"] == krows[n_steps]["h2d_bytes"] and \
         s["memory"]["device_peak_bytes"] == krows[n_steps]["device_peak_bytes"]
ztlib.check(ok, "killed_run_figures_of_last_complete_step", f"{n_steps} steps; " + text[-800:])

# a trace cut before its first step ended: a clear error, no figure
with open(kfile) as f:
    head = f.read()
cut = os.path.join(kdir, "cut.rank0.json")
with open(cut, "w") as f:
    f.write(head[:head.find('"name":"step"')].rsplit(",\n{", 1)[0])
pp, text = plot(cut, "-o", os.path.join(kdir, "cut"))
ztlib.check(pp.returncode != 0 and "no finished step" in text and not os.path.exists(os.path.join(kdir, "cut.memory.png")),
            "trace_without_a_finished_step_is_an_error", text[-400:])

# ---------------------------------------------------------------- two ranks, drawn side by side
mdir = os.path.join(work, "ranks2")
mtrace, mmetrics = os.path.join(mdir, "trace.json"), os.path.join(mdir, "metrics.jsonl")
args = ["train", cfg, "--set", f"trace={mtrace}", "--set", f"metrics_file={mmetrics}", "--set", "train_iters=2",
        "--set", "device=sim", "--set", "zero_optimization.stage=3", "--set", opt(0.5)]
p = ztlib.run(args, ranks=2, env=ENV)
mrows = ztlib.read_metrics(mmetrics)
pp, text = plot(mtrace, "--rank", "all", "-o", os.path.join(mdir, "fig"))
r0 = re.search(r"^rank 0 pcie: h2d_bytes=(\d+)", text, re.M)
ztlib.check(p.returncode == 0 and pp.returncode == 0 and "rank 1 pcie:" in text and r0 and mrows and
            float(r0.group(1)) == mrows[-1]["h2d_bytes"], "two_ranks_side_by_side", p.stderr[-500:] + text[-800:])
mg = re.search(r"^merged: (.*)$", text, re.M)
mv = {k: float(v) for k, v in re.findall(r"(\w+)=(-?[0-9.]+)", mg.group(1))} if mg else {}
per_rank = [float(x) for x in re.findall(r"^rank \d+ pcie: h2d_bytes=(\d+)", text, re.M)]
per_rank_d = [float(x) for x in re.findall(r"^rank \d+ pcie: h2d_bytes=\d+ d2h_bytes=(\d+)", text, re.M)]
ztlib.check(mv.get("ranks") == 2 and mv.get("overlap_ms", -1) > 0 and mv["h2d_bytes_sum"] == sum(per_rank) and
            mv["d2h_bytes_sum"] == sum(per_rank_d) and abs(mv["sum_curve_bytes"] - sum(per_rank) - sum(per_rank_d)) <= 2
            and os.path.exists(os.path.join(mdir, "fig.ranks.png")), "two_ranks_merged_on_one_axis", text[-800:])

# ---------------------------------------------------------------- NVMe optimizer offload: the NVMe lane
nvme_dir = os.path.join(work, "nvme")
os.makedirs(nvme_dir)
p, ntrace, nrows = traced_run("nvme", ["device=sim", "zero_optimization.stage=3", "wall_clock_breakdown=true",
                                       "zero_optimization.offload_optimizer={device: nvme, nvme_path: %s, ratio: 0.5, "
                                       "overlap_step: false}" % nvme_dir, "zero_optimization.sub_group_size=100000"],
                              iters=3)
pp, text = plot(ntrace, "-o", os.path.join(work, "nvme_fig"))
s = summary(text)
nlast = nrows[-1] if nrows else {}
bz = s.get("busy", {})
ztlib.check(p.returncode == 0 and pp.returncode == 0 and nlast.get("nvme_read_bytes", 0) > 0 and
            nlast.get("nvme_written_bytes", 0) > 0 and bz.get("nvme_read_bytes") == nlast["nvme_read_bytes"] and
            bz.get("nvme_write_bytes") == nlast["nvme_written_bytes"], "nvme_lane_bytes_equal_swap_counters",
            p.stderr[-500:] + text[-800:] + str(nlast))
ztlib.check(re.search(r"nvme reads \(in flight\) [0-9.]+ ms at [0-9.]+ GB/s", text) is not None and
            re.search(r"nvme writes \(in flight\) [0-9.]+ ms at [0-9.]+ GB/s", text) is not None,
            "nvme_sub_phases_with_gbps", text[-800:])

# ---------------------------------------------------------------- the CPU backend: no PCIe, said so
p, ctrace, crows = traced_run("cpu", ["device=cpu", "zero_optimization.stage=2", opt(0.5)], iters=2)
pp, text = plot(ctrace, "-o", os.path.join(work, "cpu"))
ztlib.check(p.returncode == 0 and pp.returncode == 0 and "no PCIe" in text and
            os.path.exists(os.path.join(work, "cpu.pcie.png")), "cpu_backend_trace_plots", text[-600:])

# ---------------------------------------------------------------- items reported after the fact (CUDA events' path)
p, ltrace, lrows = traced_run("late", OFFLOAD + [opt(0.5)], iters=3, env=dict(ENV, ZEROTRAIN_SIM_LATE_REPORTS="1"))
pp, text = plot(ltrace, "-o", os.path.join(work, "late"))
s = summary(text)
llast = lrows[-1] if lrows else {}
pc, bz, mem = s.get("pcie", {}), s.get("busy", {}), s.get("memory", {})
ztlib.check(p.returncode == 0 and pp.returncode == 0 and llast.get("h2d_bytes", 0) > 0 and llast.get("d2h_bytes", 0) > 0
            and pc.get("h2d_curve_bytes") == llast["h2d_bytes"] and pc.get("d2h_curve_bytes") == llast["d2h_bytes"]
            and bz.get("device_busy_pct", 0) > 0 and mem.get("device_peak_bytes") == llast["device_peak_bytes"],
            "late_reports_bytes_and_busy_as_reported_live", p.stderr[-500:] + text[-800:] + str(llast))

# That the items really wait for the synchronize, and come out once each in start order, is
# test_sim's deferred_reports (deterministic there: which copies of a step land after the trace's
# "update" event depends on the threads' timing).

# ---------------------------------------------------------------- the NVML sampler
p, vtrace, vrows = traced_run("nvml", ["device=sim", "trace_nvml_ms=5"], iters=2)
vtext = ztlib.read_text(vtrace.replace(".json", ".rank0.json"))
try:
    ctypes.CDLL("libnvidia-ml.so.1")
    have_nvml = True
except OSError:
    have_nvml = False
warned = [ln for ln in (p.stdout + p.stderr).splitlines() if "trace_nvml_ms:" in ln and "warning" in ln]
if have_nvml:
    ok = p.returncode == 0 and '"name":"nvml"' in vtext and not warned
else:
    ok = (p.returncode == 0 and len(vrows) == 2 and len(warned) == 1 and "cannot load libnvidia-ml.so.1" in warned[0]
          and "the run goes on" in warned[0] and '"name":"nvml"' not in vtext)
ztlib.check(ok, "nvml_sampler_" + ("samples" if have_nvml else "missing_is_one_line_and_the_run_goes_on"),
            p.stderr[-600:])
# a stand-in libnvidia-ml.so.1 (this machine has no NVIDIA driver): the sampler's whole path, from
# dlopen to the figures. Its answers are fixed, its memory in use tells which GPU was asked.
STAND_IN = r"""
#include <stdint.h>
typedef struct { unsigned long long total, free, used; } mem_t;
typedef struct { unsigned int gpu, memory; } util_t;
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) { return "stand-in"; }
int nvmlDeviceGetCount_v2(unsigned int *n) { *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **d) { *d = (void *)(uintptr_t)(i + 1); return 0; }
int nvmlDeviceGetHandleByUUID(const char *u, void **d) { return 13; }
int nvmlDeviceGetPcieThroughput(void *d, int counter, unsigned int *kb) { *kb = counter == 1 ? 2000000 : 1000000; return 0; }
int nvmlDeviceGetMemoryInfo(void *d, mem_t *m) { m->total = 1ull << 33; m->used = 500000000ull + (uintptr_t)d; m->free = m->total - m->used; return 0; }
int nvmlDeviceGetUtilizationRates(void *d, util_t *u) { u->gpu = 40; u->memory = 10; return 0; }
"""
if not have_nvml:
    libdir = os.path.join(work, "nvml_stand_in")
    os.makedirs(libdir)
    with open(os.path.join(libdir, "nvml.c"), "w") as f:
        f.write(STAND_IN)
    cc = subprocess.run(["cc", "-shared", "-fPIC", "-o", os.path.join(libdir, "libnvidia-ml.so.1"),
                         os.path.join(libdir, "nvml.c")], capture_output=True, text=True)
    for visible, gpu in ((None, 1), ("1", 2)):  # CUDA_VISIBLE_DEVICES=1: NVML's GPU 1, the stand-in's handle 2
        env = dict(ENV, LD_LIBRARY_PATH=libdir + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
        if visible:
            env["CUDA_VISIBLE_DEVICES"] = visible
        name = "nvml_stand_in_" + (visible or "all")
        p, strace, _ = traced_run(name, ["device=sim", "trace_nvml_ms=2"], iters=2, env=env)
        pp, text = plot(strace, "-o", os.path.join(work, name))
        pc = summary(text).get("pcie", {})
        ztlib.check(cc.returncode == 0 and p.returncode == 0 and "trace_nvml_ms:" not in p.stderr and
                    pp.returncode == 0 and pc.get("nvml_samples", 0) >= 1 and pc.get("nvml_rx_gbps") == 2.048 and
                    pc.get("nvml_tx_gbps") == 1.024 and pc.get("nvml_gpu_util_pct") == 40 and
                    pc.get("nvml_used_peak_bytes") == 500000000 + gpu and
                    os.path.exists(os.path.join(work, name + ".pcie.png")),
                    "nvml_sampler_stand_in_to_figures" + ("_visible_devices" if visible else ""),
                    cc.stderr + p.stderr[-400:] + text[-600:])

ztlib.finish()
