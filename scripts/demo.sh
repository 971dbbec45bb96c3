#!/usr/bin/env bash
# demo.sh — tokenize the bundled tiny Shakespeare corpus (once), train configs/demo.yaml on
# 2 CPU ranks with ZeRO stage 2, and print a sample of generated text. Run through `make demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x ./zerotrain ]] || make -j2 zerotrain
if [[ ! -f data/tinyshakespeare_val.bin ]]; then
  ./zerotrain tokenize --vocab data/gpt2 data/tinyshakespeare.txt -o data/tinyshakespeare
fi
mkdir -p runs/demo
ranks=${DEMO_RANKS:-2}
root_flags=()
[[ $(id -u) -eq 0 ]] && root_flags=(--allow-run-as-root)
set -x
OMP_NUM_THREADS=$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 )) \
  mpirun -np "$ranks" --oversubscribe "${root_flags[@]}" --bind-to none \
  ./zerotrain train configs/demo.yaml "$@"
