#!/usr/bin/env bash
# bench_gpu.sh — the GPU part of `make bench` (run by test/bench.sh when nvidia-smi finds a GPU), and
# the timed items of scripts/gpu-check, which runs them one at a time under its budget:
#   ops-bf16, ops-fp16   every CUDA op at GPT-2 124M shapes and the GEMM peak (8192^3),
#                        `zerotrain selftest --bench [--fp16]`;
#   mfu-bf16, mfu-fp16   GPT-2 124M at B16 T1024 (configs/gpu_124m.yaml): tokens/s and MFU against the
#                        GEMM peak of the same dtype measured by ops-DTYPE (run that first);
#   tf-RATIO             Twin-Flow step time of a 5.6B GPT-2 that needs offload on one GPU
#                        (configs/gpu_twinflow.yaml) at offload ratio RATIO (a number or auto): the
#                        median of the timed steps (the first is warm-up), the device's idle share and
#                        the seconds outside the steps (setup: start, allocation, pinning; and exit);
#   tf-summary           the best ratio's speed-up over ratio 1, from the tf-* lines so far.
# Usage: test/bench_gpu.sh [ITEM...]; with none, ZT_BENCH_GPU_PARTS (default "ops mfu twinflow")
# picks whole parts as `make bench` runs them. ZT_BENCH_SETS adds `--set` arguments to every run
# (gpu-check's rehearsal shrinks the shapes with it), ZT_BENCH_ITERS sets train_iters, and
# ZT_BENCH_DEVICE the device (default: the configs' cuda).
set -u
cd "$(dirname "$0")/.."
out=build/bench; mkdir -p "$out"
read -r -a extra <<<"${ZT_BENCH_SETS:-}"
[ -n "${ZT_BENCH_ITERS:-}" ] && extra+=(--set "train_iters=$ZT_BENCH_ITERS")
[ -n "${ZT_BENCH_DEVICE:-}" ] && extra+=(--set "device=$ZT_BENCH_DEVICE")
median() { # median of field $2 over the metrics rows of file $1 after the first
  python3 -c "import json,sys,statistics as s; r=[json.loads(l) for l in open(sys.argv[1])]; r=r[1:] or r; print('%.1f' % s.median(x.get(sys.argv[2], 0) for x in r))" "$1" "$2"
}
peak_of() { sed -n 's/^BENCH gemm peak.* \([0-9.]*\) TFLOP\/s$/\1/p' "$1"; }

ops() { # ops DTYPE
  local args=()
  [ "$1" = fp16 ] && args=(--fp16)
  [ -n "${ZT_BENCH_DEVICE:-}" ] && args+=(--device "$ZT_BENCH_DEVICE" ${ZT_BENCH_OPS_ARGS:-})
  ./zerotrain selftest --bench "${args[@]}" | tee "$out/gpu_ops_$1.txt"
}

mfu() { # mfu DTYPE
  local dt=$1 sets=()
  [ "$dt" = fp16 ] && sets=(--set bf16.enabled=false --set fp16.enabled=true)
  ./zerotrain train configs/gpu_124m.yaml "${sets[@]}" "${extra[@]}" --set metrics_file="$out/gpu_124m_$dt.jsonl" \
    >"$out/gpu_124m_$dt.log" 2>&1 || { echo "124M $dt: failed"; tail -3 "$out/gpu_124m_$dt.log"; return 1; }
  local tps shape
  tps=$(median "$out/gpu_124m_$dt.jsonl" tokens_per_s)
  shape=$(./zerotrain config configs/gpu_124m.yaml "${extra[@]}" 2>/dev/null |
    awk '/^  n_layer:/ {L=$2} /^  n_embd:/ {C=$2} /^  vocab_size:/ {V=$2} /^  seq_len:/ {T=$2} /^train_micro_batch_size_per_gpu:/ {B=$2} END {print L, C, V, T, B}')
  python3 - "$tps" "$(peak_of "$out/gpu_ops_$dt.txt" 2>/dev/null)" "$dt" $shape <<'PY'
import sys
tps, peak, dt = float(sys.argv[1]), float(sys.argv[2] or 0), sys.argv[3]
L, C, V, T, B = (int(x) for x in sys.argv[4:9])
flops = (6 * (L * 12 * C * C + V * C) + 6 * L * T * C) * tps / 1e12
mfu = f" = {100 * flops / peak:.1f}% MFU against the {peak:.0f} TFLOP/s {dt} GEMM peak of this run" if peak else ""
name = "GPT-2 124M" if (L, C) == (12, 768) else f"GPT-2 L{L} C{C}"
print(f"{name}, B{B} T{T}, {dt}: {tps:.0f} tokens/s, {flops:.1f} TFLOP/s model FLOPs{mfu}")
PY
}

twinflow() { # twinflow RATIO
  local r=$1 t0=$SECONDS
  ./zerotrain train configs/gpu_twinflow.yaml --set zero_optimization.offload_optimizer.ratio="$r" "${extra[@]}" \
    --set metrics_file="$out/tf_$r.jsonl" >"$out/tf_$r.log" 2>&1 || {
      echo "Twin-Flow 5.6B, ratio $r: failed: $(grep -m1 'error' "$out/tf_$r.log" | cut -c1-400)" | tee -a "$out/twinflow.txt"
      return 1; }
  local chosen idle steps_s setup
  chosen=$(grep -o "ratio auto = [0-9.]*" "$out/tf_$r.log" | head -1)
  idle=$(median "$out/tf_$r.jsonl" device_idle_pct)
  # the run's seconds outside its steps: start, allocation and pinning the host buffers (most of a
  # large run's time at ratio 1), and exit
  steps_s=$(python3 -c "import json,sys; print(int(sum(json.loads(l).get('step_ms', 0) for l in open(sys.argv[1])) / 1000))" "$out/tf_$r.jsonl")
  setup=$((SECONDS - t0 - steps_s))
  echo "Twin-Flow 5.6B, ratio $r: $(median "$out/tf_$r.jsonl" step_ms) ms/step, device idle $idle%, setup ${setup}s${chosen:+ ($chosen)}" |
    tee -a "$out/twinflow.txt"
}

tf_summary() {
  python3 - "$out/twinflow.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read() if __import__("os").path.exists(sys.argv[1]) else ""
ms = {m.group(1): float(m.group(2)) for m in re.finditer(r"ratio (\S+): ([0-9.]+) ms/step", text)}
if "1" in ms and len(ms) > 1:
    best = min(ms, key=ms.get)
    print(f"Twin-Flow 5.6B: best ratio {best} ({ms[best]:.0f} ms) is {ms['1'] / ms[best]:.2f}x faster than ratio 1 ({ms['1']:.0f} ms)")
PY
}

items=("$@")
if ((${#items[@]} == 0)); then
  parts=${ZT_BENCH_GPU_PARTS:-ops mfu twinflow}
  [[ " $parts " == *" ops "* || " $parts " == *" mfu "* ]] && items+=(ops-bf16 ops-fp16)
  [[ " $parts " == *" mfu "* ]] && items+=(mfu-bf16 mfu-fp16)
  if [[ " $parts " == *" twinflow "* ]]; then
    : >"$out/twinflow.txt"
    items+=(tf-0 tf-0.25 tf-0.5 tf-0.75 tf-1 tf-auto tf-summary)
  fi
fi
rc=0
for it in "${items[@]}"; do
  case $it in
  ops-bf16 | ops-fp16) ops "${it#ops-}" || rc=1 ;;
  mfu-bf16 | mfu-fp16) mfu "${it#mfu-}" || rc=1 ;;
  tf-summary) tf_summary ;;
  tf-*) twinflow "${it#tf-}" || rc=1 ;;
  *) echo "bench_gpu.sh: unknown item '$it'" >&2; exit 2 ;;
  esac
done
exit $rc
