#!/usr/bin/env bash
# bench.sh — `make bench`: timing figures against this machine's own limits, measured in the same
# run (timing never lives in tests). Prints each bench's output, then a summary.
set -u
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
threads=$(nproc)
out=build/bench; mkdir -p "$out"
/usr/bin/python3 - <<'PY'
import sys; sys.path.insert(0, "test"); import ztlib; ztlib.ensure_shakespeare()
PY

for b in build/test/bench_*; do
  [[ -x $b ]] || continue
  echo "== $(basename "$b")"
  OMP_NUM_THREADS=$threads "$b" | tee "$out/$(basename "$b").txt"
done

echo "== training step time (CPU backend, fp32, $threads threads)"
OMP_NUM_THREADS=$threads /usr/bin/python3 test/bench_train.py | tee "$out/bench_train.txt"

echo "== a Llama-shaped model's step (121M, B4 T64) against PyTorch's LlamaForCausalLM on the same threads (goal >= 2x)"
/usr/bin/python3 test/bench_llama_cpu.py | tee "$out/bench_llama_cpu.txt"

echo "== trace overhead: the same runs with and without the Chrome trace (goal <= 2% of the step)"
OMP_NUM_THREADS=$threads /usr/bin/python3 test/bench_trace.py

echo "== the predictor against measurement: calibrate, then a matrix of configs on the simulated GPU, measured and predicted"
/usr/bin/python3 test/bench_predict.py

echo "== data shards: memory per rank against the corpus size"
/usr/bin/python3 test/bench_data.py

echo "== tokenize: peak memory and tokens/s on a 1 GB text with -j 1 and -j $threads, beside tiktoken's batch encoder"
/usr/bin/python3 test/bench_tokenize.py | tee "$out/bench_tokenize.txt"

echo "== multi-node: 2 hosts (network namespaces), links shaped to 10 and 1 Gbit/s"
OMP_NUM_THREADS=1 /usr/bin/python3 test/bench_multinode.py

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "== GPU"
  test/bench_gpu.sh
else
  echo "== GPU: no NVIDIA GPU on this machine, GPU benchmarks skipped"
fi

echo "== summary: which CPU kernels ran, this machine's FMA peak, the GPT-2 step's GEMMs as a share of it and the"
echo "   time of its other ops (bench_ops), the small config's step on the kernels chosen and on Prescott's (bench_train)"
grep -E '^cpu kernels|^FMA peak|^SGEMM peak|^GEMMs of the step|^the step.s other ops|^(gelu|softmax_xent|sumsq|attention|layernorm)' \
  "$out/bench_ops.txt"
grep -E '^\(b\) ' "$out/bench_train.txt"
grep -E '^tokenize: -j' "$out/bench_tokenize.txt"
