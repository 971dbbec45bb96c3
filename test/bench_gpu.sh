#!/usr/bin/env bash
# bench_gpu.sh — the GPU part of `make bench` (run by test/bench.sh when nvidia-smi finds a GPU):
#   1. every CUDA op at GPT-2 124M shapes and the bf16 GEMM peak (8192^3), `zerotrain selftest --bench`;
#   2. GPT-2 124M at B16 T1024 (configs/gpu_124m.yaml): tokens/s and MFU against that measured peak;
#   3. Twin-Flow step time of GPT-2 large (configs/gpu_twinflow.yaml) for offload ratios
#      0, 0.25, 0.5, 0.75, 1 and auto (median of the timed steps; the first is warm-up).
set -u
cd "$(dirname "$0")/.."
out=build/bench; mkdir -p "$out"
./zerotrain selftest --bench | tee "$out/gpu_ops.txt"
peak=$(sed -n 's/^BENCH gemm peak.* \([0-9.]*\) TFLOP\/s$/\1/p' "$out/gpu_ops.txt")
median() { # median of field $2 over the metrics rows of file $1 after the first
  /usr/bin/python3 -c "import json,sys,statistics as s; r=[json.loads(l) for l in open(sys.argv[1])][1:]; print(s.median(x[sys.argv[2]] for x in r))" "$1" "$2"
}
./zerotrain train configs/gpu_124m.yaml --set metrics_file="$out/gpu_124m.jsonl" > "$out/gpu_124m.log" 2>&1
tps=$(median "$out/gpu_124m.jsonl" tokens_per_s)
/usr/bin/python3 - "$tps" "${peak:-0}" <<'PY'
import sys
tps, peak = float(sys.argv[1]), float(sys.argv[2])
L, C, V, T = 12, 768, 50257, 1024
flops = (6 * (L * 12 * C * C + V * C) + 6 * L * T * C) * tps / 1e12
mfu = f" = {100 * flops / peak:.1f}% MFU against the {peak:.0f} TFLOP/s bf16 GEMM peak of this run" if peak else ""
print(f"GPT-2 124M, B16 T1024, bf16: {tps:.0f} tokens/s, {flops:.1f} TFLOP/s model FLOPs{mfu}")
PY
for r in 0 0.25 0.5 0.75 1 auto; do
  ./zerotrain train configs/gpu_twinflow.yaml --set zero_optimization.offload_optimizer.ratio=$r \
    --set metrics_file="$out/tf_$r.jsonl" > "$out/tf_$r.log" 2>&1 || { echo "ratio $r: failed"; tail -3 "$out/tf_$r.log"; continue; }
  chosen=$(grep -o "ratio auto = [0-9.]*" "$out/tf_$r.log" | head -1)
  echo "Twin-Flow GPT-2 large, ratio $r: $(median "$out/tf_$r.jsonl" step_ms) ms/step ${chosen:+($chosen)}"
done
