#!/usr/bin/env python3
"""t_predict_calibrate.py — `zerotrain calibrate` (cmd/calibrate.c) and `estimate --hw` (the
predicted step time beside the memory, and the Twin-Flow ratio sweep). No figure a wall clock gives
is checked: calibrate's numbers depend on the machine, so only what it writes and that the profile
works are; estimate's step times are predictions, deterministic, and are checked against predict's.
  - calibrate writes a profile that predict accepts, whose every key says how it was measured,
    with this machine's core count and the long-GEMM curves (long_rows too); the rates its real step
    sets (element-wise, cross-entropy, operand widening and rounding) are positive, finite and say
    so, and the step leaves no file under --dir; a --dir that cannot be written to is one line
    naming it;
  - calibrate --tp 2 (a tensor-parallel rank's profile: its real step is a tp-2 step of two processes
    at once, each rank's op table read) writes the same step-set rates, positive and finite, says its
    step was tp 2 and that the machine is one node of 2 GPUs, leaves no file (no rank's op table
    either), and predict --ranks 2 --tp 2 with it runs as one node of 2; --tp 3 is refused in one line;
  - a GEMM with one long dimension is priced at the lower of the square curve's and the long
    curve's efficiency: a long_out curve below the square one slows the tiny config's prediction
    (its LM head), one at 1 changes nothing, and a bad one is refused with its position;
  - estimate --hw prints the config's own predicted step time, equal to predict's; with the optimizer
    on the host it predicts auto and six ratios of the window that fits, auto's equal to predict's,
    and names the fastest of them; more than one rank points to `predict --ranks N`; an unknown
    profile is refused naming it."""
import os
import re
import shutil
import tempfile

import ztlib

ztlib.ensure_shakespeare()
cfg = os.path.join(ztlib.ROOT, "configs", "tiny.yaml")
TF = os.path.join(ztlib.ROOT, "configs", "gpu_twinflow.yaml")
work = tempfile.mkdtemp(prefix="zt_calibrate_")


def step_ms(text, pattern=r"step time\s+([0-9.]+) ms"):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


# ---- calibrate
prof = os.path.join(work, "here.yaml")
p = ztlib.run(["calibrate", "-o", prof, "--dir", work], timeout=600)
text = ztlib.read_text(prof)
ztlib.check(p.stderr.startswith("calibrate: measuring this machine for about a minute (the disk under " + work)
            and "the profile goes to " + prof in p.stderr.splitlines()[0], "calibrate_says_what_it_will_do",
            p.stderr[:400])
ztlib.check(p.returncode == 0 and "calibrate: measured in" in p.stderr and "name: calibrated" in text,
            "calibrate_writes_a_profile", p.stderr[-400:])
# every key says how it was measured: on its own line, or in a comment above it in its section
keys, unexplained, said = 0, [], False
for ln in text.splitlines():
    if re.match(r"^[a-z]", ln):  # a section starts: what was said above it does not carry over
        said = False
    elif ln.strip().startswith("#"):
        said = said or "measured" in ln
    elif re.match(r"^\s+[a-z_0-9]+: [\[{0-9]", ln):
        keys += 1
        if not ("#" in ln and "measured" in ln.split("#", 1)[1]) and not said:
            unexplained.append(ln.strip()[:60])
ztlib.check(keys >= 20 and not unexplained, "calibrate_every_key_says_how", f"{keys} keys, unexplained: {unexplained}")
m = re.search(r"(?m)^  cores: (\d+)", text)
ztlib.check(m is not None and int(m.group(1)) == os.cpu_count(), "calibrate_counts_this_machines_cores",
            m.group(0) if m else text[-300:])
pp = ztlib.run(["predict", cfg, "--hw", prof, "--steps", "2"], timeout=600)
ms = step_ms(pp.stdout)
ztlib.check(pp.returncode == 0 and ms is not None and ms > 0 and "on calibrated" in pp.stdout,
            "calibrated_profile_predicts", (pp.stderr or pp.stdout)[-400:])
ztlib.check(all(re.search(rf"(?m)^    {dt}: {{.*long_out: \[\[32, .*long_k: \[\[32, .*long_rows: \[\[32, ", text)
                for dt in ("bf16", "fp16", "fp32")), "calibrate_measures_long_gemms", text[-1500:])


def step_set_rates(text):
    """the rates calibrate's real step sets: {key: (value, says it was measured in the real step)}"""
    out = {}
    for key in ("memory_bandwidth_gbs", "xent_gbs", "operand_gbs", "round_gbs"):
        m = re.search(rf"(?m)^  {key}: ([0-9.e+-]+)\s+#(.*)$", text)
        out[key] = (float(m.group(1)), "real step" in m.group(2)) if m else (None, False)
    for key in ("bf16", "fp16", "fp32"):
        m = re.search(rf"(?m)^  attention_tflops: {{.*\b{key}: ([0-9.e+-]+)", text)
        out["attention " + key] = (float(m.group(1)) if m else None, True)
    return out


# the real step: its rates are there, positive and finite, each saying it was measured in the step, and
# the step's files under --dir are gone
step_keys = step_set_rates(text)
ztlib.check(all(v is not None and 0 < v < float("inf") and said for v, said in step_keys.values())
            and "# The real step: `train` of a fixed GPT-2" in text
            and re.search(r"(?m)^    # blocks' \([0-9.]+x\), long_out by the LM head forward's \([0-9.]+x\)", text),
            "calibrate_prices_from_a_real_step", f"{step_keys}\n{text[:3000]}")
ztlib.check(not [f for f in os.listdir(work) if f.startswith("zerotrain-calibrate.")], "calibrate_step_leaves_no_files",
            str(os.listdir(work)))


# ---- calibrate --tp 2: one rank of a tensor-parallel pair, its real step two processes at once
rank_prof = os.path.join(work, "rank.yaml")
p = ztlib.run(["calibrate", "--tp", "2", "-o", rank_prof, "--dir", work], timeout=900)
rank_text = ztlib.read_text(rank_prof)
rates = step_set_rates(rank_text)
ztlib.check(p.returncode == 0 and all(v is not None and 0 < v < float("inf") and said for v, said in rates.values())
            and "# The real step ran at tensor_parallel.tp_size 2 as 2 processes at once" in rank_text
            and re.search(r"(?m)^  gpus_per_node: 2 .*# measured", rank_text),
            "calibrate_tp_prices_from_a_two_process_step", f"{p.stderr[-400:]}\n{rates}\n{rank_text[:1500]}")
ztlib.check(not [f for f in os.listdir(work) if f.startswith("zerotrain-calibrate.")], "calibrate_tp_leaves_no_files",
            str(os.listdir(work)))
TINY = ["--set", "model.n_layer=2", "--set", "model.n_embd=64", "--set", "model.n_head=2"]
pp = ztlib.run(["predict", cfg, "--hw", rank_prof, "--steps", "2", "--ranks", "2", "--tp", "2"] + TINY, timeout=600)
ms = step_ms(pp.stdout)
ztlib.check(pp.returncode == 0 and ms is not None and ms > 0 and "on calibrated" in pp.stdout
            and "tensor-parallel 2, 2 per node, 1 node" in pp.stdout,
            "calibrate_tp_profile_predicts_tp_as_one_node", (pp.stderr or pp.stdout)[-600:])
p = ztlib.run(["calibrate", "--tp", "3", "-o", os.path.join(work, "x.yaml"), "--dir", work])
lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
ztlib.check(p.returncode == 2 and len(lines) == 1 and "calibrate --tp" in lines[0] and "'3'" in lines[0],
            "calibrate_tp_bad_count_one_line", p.stderr[-300:])

# ---- the long-GEMM curves, priced (h100-sxm with a long_out curve added: deterministic)
h100 = ztlib.read_text(os.path.join(ztlib.ROOT, "configs", "hw", "h100-sxm.yaml"))


def with_long_out(curve):
    path = os.path.join(work, f"long-{len(curve)}-{curve[-1]}.yaml")
    with open(path, "w") as f:
        f.write(re.sub(r"(?m)^(    bf16: \{.*)\}$", rf"\1, long_out: {curve}}}", h100, count=1))
    return path


base = step_ms(ztlib.run(["predict", cfg, "--hw", "h100-sxm", "--steps", "2"] + TINY, timeout=600).stdout)
slow = step_ms(ztlib.run(["predict", cfg, "--hw", with_long_out("[[32, 0.001], [256, 0.001]]"), "--steps", "2"] + TINY,
                         timeout=600).stdout)
same = step_ms(ztlib.run(["predict", cfg, "--hw", with_long_out("[[32, 1], [256, 1]]"), "--steps", "2"] + TINY,
                         timeout=600).stdout)
ztlib.check(None not in (base, slow, same) and slow > base and same == base, "long_gemm_curve_priced",
            f"h100-sxm {base} ms, long_out at 0.001: {slow}, at 1: {same}")
p = ztlib.run(["predict", cfg, "--hw", with_long_out("[[64, 0.5], [32, 0.6]]"), "--steps", "2"] + TINY, timeout=600)
ztlib.check(p.returncode != 0 and "long_out" in p.stderr and ":" in p.stderr.split("long_out")[0],
            "long_gemm_bad_curve_refused", p.stderr[-300:])
p = ztlib.run(["calibrate", "-o", os.path.join(work, "x.yaml"), "--dir", os.path.join(work, "no", "such")])
lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
ztlib.check(p.returncode == 1 and len(lines) == 1 and "calibrate --dir" in lines[0] and "no/such" in lines[0],
            "calibrate_bad_dir_one_line", p.stderr[-300:])
p = ztlib.run(["calibrate", "--frobnicate"])
ztlib.check(p.returncode == 2 and "unknown option '--frobnicate'" in p.stderr, "calibrate_bad_argument",
            p.stderr[-300:])

# ---- estimate --hw
p = ztlib.run(["estimate", cfg, "--ranks", "1", "--hw", "h100-sxm"], timeout=600)
pp = ztlib.run(["predict", cfg, "--hw", "h100-sxm"], timeout=600)
est, pred = step_ms(p.stdout, r"predicted on h100-sxm .*?: ([0-9.]+) ms a step"), step_ms(pp.stdout)
ztlib.check(p.returncode == 0 and est is not None and est == pred and "fits" in p.stdout,
            "estimate_hw_step_time_equals_predict", f"{est} vs {pred}: {(p.stderr or p.stdout)[-300:]}")
ztlib.check("Twin-Flow ratios in the window" not in p.stdout, "estimate_hw_no_sweep_without_offload", p.stdout[-300:])

p = ztlib.run(["estimate", TF, "--ranks", "1", "--hw", "h100-sxm"], timeout=600)
pa = ztlib.run(["predict", TF, "--hw", "h100-sxm", "--set", "zero_optimization.offload_optimizer.ratio=auto"],
               timeout=600)
rows = re.findall(r"(?m)^  ratio (\S+)\s+([0-9.]+) ms", p.stdout)
auto = dict(rows).get("auto")
fastest = re.search(r"fastest of these: ratio ([0-9.]+), ([0-9.]+) ms", p.stdout)
swept = [(float(r), float(t)) for r, t in rows if r != "auto"]
ztlib.check(p.returncode == 0 and auto is not None and float(auto) == step_ms(pa.stdout) and len(swept) >= 4
            and fastest is not None and float(fastest.group(2)) == min(t for _, t in swept),
            "estimate_hw_ratio_sweep", p.stdout[-900:] + p.stderr[-300:])
ztlib.check(all(swept[i][1] < swept[i + 1][1] for i in range(len(swept) - 1)),
            "estimate_hw_sweep_slower_as_more_goes_to_the_host", str(swept))

p = ztlib.run(["estimate", cfg, "--ranks", "2", "--hw", "h100-sxm"], timeout=600)
ztlib.check(p.returncode == 0 and "estimate prices one rank; for 2 ranks: zerotrain predict" in p.stdout
            and "--ranks 2" in p.stdout, "estimate_hw_one_rank_only", p.stdout[-300:])
p = ztlib.run(["estimate", cfg, "--ranks", "1", "--hw", "b200"])
ztlib.check(p.returncode == 1 and "no b200.yaml" in p.stderr, "estimate_hw_unknown_profile", p.stderr[-300:])

shutil.rmtree(work, ignore_errors=True)
ztlib.finish()
