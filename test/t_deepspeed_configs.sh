#!/usr/bin/env bash
# t_deepspeed_configs.sh — DeepSpeed configs as they are found in the wild (test/configs/deepspeed/,
# written by us in the shapes of DeepSpeed's and Hugging Face's example configs) through
# `zerotrain config FILE`: each loads, or — for the few that ask for a feature zerotrain does not
# have — fails with exactly the one-line error below. A loaded config's effective text must load
# back to the same text. Also: "auto" values are named in one line, and a typo near a key is still
# an error with a suggestion.
set -u
cd "$(dirname "$0")/.."
bin=${ZEROTRAIN_BIN:-./zerotrain}
dir=test/configs/deepspeed
tmp=$(mktemp -d "${TMPDIR:-/tmp}/zt_t_dsconf.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
if [[ ! -x $bin ]]; then fail deepspeed_configs "$bin not built (make all)"; exit 1; fi

# the refused ones and their errors (@ = the file)
declare -A refused=(
  [amp_enabled.json]="@:4:16: amp.enabled: true is not supported by zerotrain (NVIDIA Apex mixed precision is not implemented; use bf16 or fp16)"
  [bing_bert_lamb.json]="@:7:13: optimizer.type: Lamb is a DeepSpeed optimizer zerotrain does not support (expected AdamW or Adam)"
  [max_grad_norm.json]="@:8:7: optimizer.params.max_grad_norm is not an optimizer parameter (DeepSpeed refuses it too); clip with the top-level gradient_clipping"
  [megatron_lamb_max_grad_norm.json]="@:6:13: optimizer.type: Lamb is a DeepSpeed optimizer zerotrain does not support (expected AdamW or Adam)"
  [megatron_curriculum_on.json]="@:6:16: curriculum_learning.enabled: true is not supported by zerotrain (curriculum learning is not implemented)"
)

n=0
for f in "$dir"/*.json; do
  name=$(basename "$f" .json); n=$((n + 1))
  # device cpu: the CPU backend decides data_types.grad_accum_dtype whether or not a GPU is here
  out=$("$bin" config "$f" --set device=cpu 2>"$tmp/err" >"$tmp/eff.yaml"); rc=$?
  err=$(grep -F 'zerotrain: error:' "$tmp/err")
  if [[ -n ${refused[$name.json]+x} ]]; then
    want="zerotrain: error: ${refused[$name.json]//@/$f}"
    if (( rc == 1 )) && [[ $err == "$want" ]]; then pass "refused_$name"
    else fail "refused_$name" "rc $rc; got [$err]; want [$want]"; fi
    continue
  fi
  if (( rc != 0 )); then fail "loads_$name" "rc $rc: $err"; continue; fi
  if "$bin" config "$tmp/eff.yaml" >"$tmp/eff2.yaml" 2>"$tmp/err2" &&
     diff <(tail -n +2 "$tmp/eff.yaml") <(tail -n +2 "$tmp/eff2.yaml") >/dev/null; then pass "loads_$name"
  else fail "loads_$name" "effective config does not load back to itself: $(head -2 "$tmp/err2")"; fi
done
(( n >= 20 )) && pass corpus_size || fail corpus_size "only $n configs in $dir"

# "auto" is filled in and named in one line
f=$dir/hf_zero2_auto.json
"$bin" config "$f" --ranks 4 --set device=cpu >"$tmp/eff.yaml" 2>"$tmp/err"
line=$(grep -F 'config: "auto" filled in:' "$tmp/err")
if [[ $line == *"train_batch_size = 16, train_micro_batch_size_per_gpu = 4, gradient_accumulation_steps = 1,"* &&
      $line == *"scheduler.params.warmup_max_lr = 0.0006,"* && $line == *"zero_optimization.reduce_bucket_size = 589824"* ]] &&
   grep -qx '  reduce_bucket_size: 589824' "$tmp/eff.yaml"; then pass auto_values_named_and_filled
else fail auto_values_named_and_filled "[$line]"; fi

# a key DeepSpeed ignores but that is one typo from ours is still an error
printf '{"zero_optimization": {"stage": 1}, "train_iter": 10}\n' >"$tmp/typo.json"
err=$("$bin" config "$tmp/typo.json" 2>&1 >/dev/null); rc=$?
want="zerotrain: error: $tmp/typo.json:1:37: unknown key 'train_iter' (did you mean 'train_iters'?)"
if (( rc == 1 )) && [[ $err == "$want" ]]; then pass typo_still_caught; else fail typo_still_caught "rc $rc [$err]"; fi

# "auto" where nothing can be derived is a plain type error
printf '{"zero_optimization": {"stage": "auto"}}\n' >"$tmp/auto_stage.json"
err=$("$bin" config "$tmp/auto_stage.json" 2>&1 >/dev/null); rc=$?
want="zerotrain: error: $tmp/auto_stage.json:1:33: zero_optimization.stage: expected an integer in [0, 3], got string 'auto'"
if (( rc == 1 )) && [[ $err == "$want" ]]; then pass auto_not_derivable; else fail auto_not_derivable "rc $rc [$err]"; fi

# grad_accum_dtype must be what the backend does
printf 'data_types: {grad_accum_dtype: bf16}\ndevice: cpu\n' >"$tmp/accum.yaml"
err=$("$bin" config "$tmp/accum.yaml" 2>&1 >/dev/null); rc=$?
want="zerotrain: error: data_types.grad_accum_dtype: bf16 is not implemented yet on the cpu backend, which accumulates gradients in fp32 (set fp32 or leave the key out)"
if (( rc == 1 )) && [[ $err == "$want" ]]; then pass grad_accum_dtype_other_than_backend; else fail grad_accum_dtype_other_than_backend "rc $rc [$err]"; fi
