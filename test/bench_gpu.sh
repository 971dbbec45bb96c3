#!/usr/bin/env bash
# bench_gpu.sh — the GPU part of `make bench` (run by test/bench.sh when nvidia-smi finds a GPU):
#   1. every CUDA op at GPT-2 124M shapes and the GEMM peak (8192^3), bf16 and fp16,
#      `zerotrain selftest --bench [--fp16]`;
#   2. GPT-2 124M at B16 T1024 (configs/gpu_124m.yaml), bf16 and fp16: tokens/s and MFU against the
#      GEMM peak of the same dtype measured in step 1;
#   3. Twin-Flow step time of a 5.6B GPT-2 that needs offload on one GPU (configs/gpu_twinflow.yaml)
#      for offload ratios 0, 0.25, 0.5, 0.75, 1 and auto (median of the timed steps; the first is
#      warm-up), and the best ratio's speed-up over ratio 1.
# ZT_BENCH_GPU_PARTS (default "ops mfu twinflow") picks parts.
set -u
cd "$(dirname "$0")/.."
out=build/bench; mkdir -p "$out"
parts=${ZT_BENCH_GPU_PARTS:-ops mfu twinflow}
median() { # median of field $2 over the metrics rows of file $1 after the first
  /usr/bin/python3 -c "import json,sys,statistics as s; r=[json.loads(l) for l in open(sys.argv[1])][1:]; print(s.median(x[sys.argv[2]] for x in r))" "$1" "$2"
}
peak_of() { sed -n 's/^BENCH gemm peak.* \([0-9.]*\) TFLOP\/s$/\1/p' "$1"; }

if [[ " $parts " == *" ops "* || " $parts " == *" mfu "* ]]; then
  ./zerotrain selftest --bench | tee "$out/gpu_ops_bf16.txt"
  ./zerotrain selftest --bench --fp16 | tee "$out/gpu_ops_fp16.txt"
fi
if [[ " $parts " == *" mfu "* ]]; then
  for dt in bf16 fp16; do
    sets=()
    [ $dt = fp16 ] && sets=(--set bf16.enabled=false --set fp16.enabled=true)
    ./zerotrain train configs/gpu_124m.yaml "${sets[@]}" --set metrics_file="$out/gpu_124m_$dt.jsonl" \
      > "$out/gpu_124m_$dt.log" 2>&1 || { echo "124M $dt: failed"; tail -3 "$out/gpu_124m_$dt.log"; continue; }
    tps=$(median "$out/gpu_124m_$dt.jsonl" tokens_per_s)
    /usr/bin/python3 - "$tps" "$(peak_of "$out/gpu_ops_$dt.txt")" "$dt" <<'PY'
import sys
tps, peak, dt = float(sys.argv[1]), float(sys.argv[2] or 0), sys.argv[3]
L, C, V, T = 12, 768, 50257, 1024
flops = (6 * (L * 12 * C * C + V * C) + 6 * L * T * C) * tps / 1e12
mfu = f" = {100 * flops / peak:.1f}% MFU against the {peak:.0f} TFLOP/s {dt} GEMM peak of this run" if peak else ""
print(f"GPT-2 124M, B16 T1024, {dt}: {tps:.0f} tokens/s, {flops:.1f} TFLOP/s model FLOPs{mfu}")
PY
  done
fi
if [[ " $parts " == *" twinflow "* ]]; then
  for r in 0 0.25 0.5 0.75 1 auto; do
    ./zerotrain train configs/gpu_twinflow.yaml --set zero_optimization.offload_optimizer.ratio=$r \
      --set metrics_file="$out/tf_$r.jsonl" > "$out/tf_$r.log" 2>&1 || {
        echo "Twin-Flow 5.6B, ratio $r: failed: $(grep -m1 'error' "$out/tf_$r.log" | cut -c1-400)"; continue; }
    chosen=$(grep -o "ratio auto = [0-9.]*" "$out/tf_$r.log" | head -1)
    echo "Twin-Flow 5.6B, ratio $r: $(median "$out/tf_$r.jsonl" step_ms) ms/step ${chosen:+($chosen)}"
  done | tee "$out/twinflow.txt"
  /usr/bin/python3 - "$out/twinflow.txt" <<'PY'
import re, sys
ms = {m.group(1): float(m.group(2)) for m in re.finditer(r"ratio (\S+): ([0-9.]+) ms/step", open(sys.argv[1]).read())}
if "1" in ms and len(ms) > 1:
    best = min(ms, key=ms.get)
    print(f"Twin-Flow 5.6B: best ratio {best} ({ms[best]:.0f} ms) is {ms['1'] / ms[best]:.2f}x faster than ratio 1 ({ms['1']:.0f} ms)")
PY
fi
