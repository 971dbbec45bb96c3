#!/usr/bin/env bash
# demo.sh — tokenize the bundled tiny Shakespeare corpus (once), train configs/demo.yaml on
# 2 CPU ranks with ZeRO stage 2, print a sample of generated text, and save the trained model in
# runs/demo/ck (each demo starts it afresh), so that sample, info, export and a resume have a model.
# Run through `make demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x ./zerotrain ]] || make -j2 zerotrain
if [[ ! -f data/tinyshakespeare_val.bin ]]; then
  ./zerotrain tokenize --vocab data/gpt2 data/tinyshakespeare.txt -o data/tinyshakespeare
fi
mkdir -p runs/demo
rm -rf runs/demo/ck # the demo trains from scratch each time (a kept checkpoint would resume at its end)
ranks=${DEMO_RANKS:-2}
root_flags=()
[[ $(id -u) -eq 0 ]] && root_flags=(--allow-run-as-root)
set -x
OMP_NUM_THREADS=$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 )) \
  mpirun -np "$ranks" --oversubscribe "${root_flags[@]}" --bind-to none \
  ./zerotrain train configs/demo.yaml --set checkpoint.dir=runs/demo/ck "$@"
{ set +x; } 2>/dev/null
cat <<'NEXT'

The trained model is in runs/demo/ck. Next:
  ./zerotrain sample runs/demo/ck --prompt 'ROMEO:'          # more text from it
  ./zerotrain info runs/demo/ck                              # what the checkpoint holds, verified
  ./zerotrain export runs/demo/ck -o runs/demo/hf            # a Hugging Face GPT-2 directory
  ./zerotrain train configs/demo.yaml --set checkpoint.dir=runs/demo/ck --set train_iters=800   # resume, 200 steps more
NEXT
