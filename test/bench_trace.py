"""bench_trace.py — what the Chrome trace (config key `trace`) costs a training step, for `make bench`:
the same run with and without it, on the simulated GPU with everything the offload figures trace
(stage 3, optimizer offload ratio 0.5, parameter offload, cpu_checkpointing: every copy, the compute
stream's busy intervals, memory counters) and on the CPU backend (the engine's phases only).
Runs alternate (off, on, off, on, ...) so that a change in the machine's load hits both; each run
gives the median of its timed steps (the first, warm-up, is dropped) and each side its best run (the
least disturbed by other work on a shared machine). Beside that difference, which a busy machine
blurs, two steadier ones: the CPU seconds (user + system, all threads) of the runs with and without
the trace (medians), and the cost the trace adds by construction: its events per step times what one event costs the
writing thread (bench_trace_events, same `make bench` run), over the step time.
Goal: at most 2 % of the step time (issue 33)."""
import re
import os
import resource
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ztlib  # noqa: E402

ztlib.ensure_shakespeare()
CFG = os.path.join(ztlib.ROOT, "configs", "tiny.yaml")
PAIRS, ITERS = 4, 10
SIM = ["device=sim", "zero_optimization.stage=3", "zero_optimization.offload_param.device=cpu",
       "zero_optimization.offload_optimizer={device: cpu, ratio: 0.5, overlap_step: false}",
       "activation_checkpointing={enabled: true, cpu_checkpointing: true}"]
CPU = ["device=cpu", "zero_optimization.stage=2", "zero_optimization.offload_optimizer={device: cpu, ratio: 0.5}"]
work = tempfile.mkdtemp(prefix="zt_bench_trace_")


def event_cost_ns():
    """mean ns of a written event (transfer, busy, counters) from bench_trace_events' output"""
    try:
        text = open(os.path.join(ztlib.ROOT, "build/bench/bench_trace_events.txt")).read()
    except OSError:
        return None
    m = re.search(r"transfer (\d+) \| busy written (\d+) \| busy merged \d+ \| counters (\d+)", text)
    return sum(float(x) for x in m.groups()) / 3 if m else None


def step_times(sets, traced, i):
    extra = [f"trace={work}/run{i}.json"] if traced else []
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p, rows = ztlib.train(CFG, list(sets) + extra + [f"train_iters={ITERS}", "steps_per_print=1000"], timeout=900)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0 or len(rows) < 2:
        print(p.stdout[-1500:], p.stderr[-1500:])
        return [], 0
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return [r["step_ms"] for r in rows[1:]], cpu


for name, sets in (("simulated GPU, stage 3 + optimizer/parameter offload + cpu_checkpointing", SIM),
                   ("CPU backend, stage 2 + optimizer offload 0.5", CPU)):
    off, on, cpu_off, cpu_on = [], [], [], []
    for i in range(PAIRS):
        (a, ca), (b, cb) = step_times(sets, False, i), step_times(sets, True, i)
        off += [statistics.median(a)] if a else []
        on += [statistics.median(b)] if b else []
        cpu_off += [ca] if a else []
        cpu_on += [cb] if b else []
    if not off or not on:
        print(f"  {name}: failed")
        continue
    m_off, m_on = min(off), min(on)
    events = 0
    for i in range(PAIRS):
        try:
            events += open(f"{work}/run{i}.rank0.json").read().count("\n{")
        except OSError:
            pass
    per_step = events / (PAIRS * ITERS)
    cost = event_cost_ns()
    model = f"; by construction {per_step:.0f} events per step x {cost:.0f} ns = " \
            f"{100 * per_step * cost * 1e-9 / (m_off * 1e-3):.3f}% of the step" if cost else ""
    verdict = "within" if (m_on - m_off) / m_off <= 0.02 else "ABOVE"
    load = os.getloadavg()[0]  # what the with/without difference is measured against
    print(f"  {name}: {m_off:.1f} ms/step without the trace, {m_on:.1f} ms with it (best run medians of "
          f"{PAIRS} alternating pairs of {ITERS} steps): {100 * (m_on - m_off) / m_off:+.2f}% ({verdict} the 2% goal)"
          f"; CPU seconds per run {statistics.median(cpu_off):.2f} without, {statistics.median(cpu_on):.2f} with "
          f"({100 * (statistics.median(cpu_on) - statistics.median(cpu_off)) / statistics.median(cpu_off):+.2f}%)"
          f"{model}; load average {load:.1f} on {os.cpu_count()} cores")
