#!/usr/bin/env bash
# t_config_errors.sh — config errors as a user sees them: one "zerotrain: error: FILE:LINE:COL: ..."
# line on stderr and a non-zero exit, both through the config driver in build/test/test_config
# (exact text) and through `zerotrain train CONFIG [--set ...]` (the line must appear, nothing
# may start training). Also: the effective config printed by the driver loads back unchanged.
set -u
cd "$(dirname "$0")/.."
drv=build/test/test_config
bin=${ZEROTRAIN_BIN:-./zerotrain}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/zt_t_config.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

if [[ ! -x $drv ]]; then fail config_driver "$drv not built (make all)"; exit 1; fi

# case NAME FILE-TEXT EXPECTED-STDERR [--set K=V]...   (FILE is $tmp/NAME.yaml; EXPECTED uses @ for it)
case_() {
  local name=$1 text=$2 want=$3; shift 3
  local f="$tmp/$name.yaml"
  printf '%s' "$text" >"$f"
  want=${want//@/$f}
  local err rc
  err=$("$drv" --load "$f" "$@" 2>&1 >/dev/null); rc=$?
  if (( rc != 0 )) && [[ $err == "$want" ]]; then pass "$name"
  else fail "$name" "rc $rc; got [$err]; want [$want]"; fi
}

case_ unknown_top_key $'model:\n  n_layer: 2\nzero_optimisation:\n  stage: 1\n' \
  "zerotrain: error: @:3:1: unknown key 'zero_optimisation' (did you mean 'zero_optimization'?)"
case_ unknown_key_case $'Train_Iters: 10\n' \
  "zerotrain: error: @:1:1: unknown key 'Train_Iters' (did you mean 'train_iters'?)"
case_ wrong_type_bool $'zero_optimization:\n  overlap_comm: 1\n' \
  "zerotrain: error: @:2:17: zero_optimization.overlap_comm: expected true or false, got 1"
case_ wrong_type_scalar_for_section $'optimizer: AdamW\n' \
  "zerotrain: error: @:1:12: optimizer: expected a mapping, got string 'AdamW'"
case_ negative_clip $'gradient_clipping: -1\n' \
  "zerotrain: error: @:1:20: gradient_clipping: expected a number >= 0, got -1"
case_ betas_range $'optimizer:\n  params:\n    betas: [0.9, 1.0]\n' \
  "zerotrain: error: @:3:18: optimizer.params.betas: beta2: expected a number in [0, 1), got 1.0"
case_ int_overflow $'model:\n  n_embd: 99999999999\n' \
  "zerotrain: error: @:2:11: model.n_embd: expected an integer >= 1, got 99999999999"
case_ duplicate_top $'train_iters: 10\nseed: 1\ntrain_iters: 20\n' \
  "zerotrain: error: @:3:1: duplicate key 'train_iters' (first at line 1)"
case_ yaml_tab_indent $'model:\n\tn_layer: 2\n' \
  "zerotrain: error: @:2:1: found character that cannot start any token (while scanning for the next token that starts at 2:1)"
case_ two_documents $'seed: 1\n---\nseed: 2\n' \
  "zerotrain: error: @:3:1: expected one YAML document, found a second one"
case_ ds_unsupported_top $'{"amp": {"enabled": true}}\n' \
  "zerotrain: error: @:1:21: amp.enabled: true is not supported by zerotrain (NVIDIA Apex mixed precision is not implemented; use bf16 or fp16)"
case_ ds_unsupported_scheduler $'{"scheduler": {"type": "OneCycle"}}\n' \
  "zerotrain: error: @:1:24: scheduler.type: OneCycle is a DeepSpeed scheduler zerotrain does not support (expected WarmupLR, WarmupDecayLR or WarmupCosineLR)"
case_ nvme_offload $'zero_optimization:\n  offload_optimizer: {device: nvme}\n' \
  "zerotrain: error: @:2:31: zero_optimization.offload_optimizer.device: device nvme needs zero_optimization.offload_optimizer.nvme_path (a directory on the NVMe drive for the swap files)"
case_ host_memory_negative $'zero_optimization:\n  offload_optimizer: {device: cpu, ratio: auto, host_memory: -1}\n' \
  "zerotrain: error: @:2:62: zero_optimization.offload_optimizer.host_memory: expected a byte count >= 0 (a number or a string like \"40GiB\"), got -1"
case_ host_memory_bad_unit $'zero_optimization:\n  offload_optimizer:\n    host_memory: 12 parsecs\n' \
  "zerotrain: error: @:3:18: zero_optimization.offload_optimizer.host_memory: expected a byte count >= 0 (a number or a string like \"40GiB\"), got string '12 parsecs'"
case_ number_checkpoints_over_layers $'model: {n_layer: 2}\nactivation_checkpointing: {number_checkpoints: 3}\n' \
  "zerotrain: error: @:2:48: activation_checkpointing.number_checkpoints: expected an integer in [0, model.n_layer = 2], got 3"
case_ set_unknown $'seed: 1\n' \
  "zerotrain: error: --set optimizer.param.lr: unknown key 'param' in optimizer (did you mean 'params'?)" \
  --set optimizer.param.lr=1e-3
case_ set_wrong_type $'seed: 1\n' \
  "zerotrain: error: --set zero_optimization.stage: expected an integer in [0, 3], got string 'three'" \
  --set zero_optimization.stage=three
case_ set_bad_flow $'seed: 1\n' \
  "zerotrain: error: --set optimizer.params.betas: cannot parse value '[0.9,': did not find expected node content" \
  --set 'optimizer.params.betas=[0.9,'
case_ set_cross_check_blames_last $'model: {n_head: 12}\n' \
  "zerotrain: error: --set model.n_embd: expected a multiple of model.n_head (12), got 100" \
  --set model.n_embd=100
# a decay that ends before its warm-up (issue 48, 8): blamed where the later of the two was set
case_ decay_ends_before_warmup $'scheduler:\n  type: WarmupCosineLR\n  params: {warmup_num_steps: 100, total_num_steps: 50}\n' \
  "zerotrain: error: @:3:52: scheduler.params.total_num_steps: total_num_steps 50 is below warmup_num_steps 100: WarmupCosineLR would end its decay before the warm-up ends and keep the floor rate for the rest of the run"
case_ decay_warmup_raised_by_set $'scheduler:\n  type: WarmupDecayLR\n  params: {total_num_steps: 50}\n' \
  "zerotrain: error: --set scheduler.params.warmup_num_steps: total_num_steps 50 is below warmup_num_steps 60: WarmupDecayLR would end its decay before the warm-up ends and keep the floor rate for the rest of the run" \
  --set scheduler.params.warmup_num_steps=60
case_ empty_checkpoint_dir $'checkpoint:\n  dir: ""\n' \
  "zerotrain: error: @:2:8: checkpoint.dir: expected a string, got an empty one (null means none)"

# config_and_train NAME FILE-TEXT EXPECTED [--set K=V]...: `zerotrain config` and `zerotrain train` both
# refuse with the same one error line (EXPECTED is a glob, @ stands for the file), non-zero, no step
config_and_train() {
  local name=$1 text=$2 want=$3; shift 3
  local f="$tmp/$name.yaml"
  [[ $text == @* ]] && f=${text#@} || printf '%s' "$text" >"$f"
  want=${want//@/$f}
  local cmd err rc lines
  for cmd in config train; do
    err=$(OMPI_MCA_btl=self timeout 60 "$bin" $cmd "$f" "$@" 2>&1 >"$tmp/$name.out"); rc=$?
    lines=$(grep -c '^zerotrain: error:' <<<"$err")
    if (( rc != 0 && rc != 124 && lines == 1 )) && [[ $(grep '^zerotrain: error:' <<<"$err") == $want ]] &&
       ! grep -q '^step ' "$tmp/$name.out"; then pass "${name}_$cmd"
    else fail "${name}_$cmd" "rc $rc; stderr [$(head -c 600 <<<"$err")]; want [$want]"; fi
  done
}
small=$'model: {n_layer: 2, n_head: 2, n_embd: 32, n_positions: 64}\ndata: {seq_len: 32, train: build/testdata/shakespeare_train_000000.bin, val: null}\ndevice: cpu\n'
config_and_train micro_batch_1e9 "${small}train_micro_batch_size_per_gpu: 1e9"$'\n' \
  "zerotrain: error: @:4:33: train_micro_batch_size_per_gpu: the activations of a micro-batch of 1000000000 x 32 tokens need * GiB per rank, more than the * GiB of cpu memory in all (*)"
config_and_train stage3_max_live_1 "${small}zero_optimization: {stage: 3, stage3_max_live_parameters: 1}"$'\n' \
  "zerotrain: error: @:4:59: zero_optimization.stage3_max_live_parameters: 1 is below the least stage-3 working set, * elements (*)"
config_and_train stage3_max_live_set "$small" \
  "zerotrain: error: --set zero_optimization.stage3_max_live_parameters: 1 is below the least stage-3 working set, *" \
  --set zero_optimization.stage=3 --set zero_optimization.stage3_max_live_parameters=1
config_and_train param_buffer_size_1 "${small}zero_optimization: {stage: 3, offload_param: {device: nvme, nvme_path: $tmp, buffer_size: 1}}"$'\n' \
  "zerotrain: error: @:4:*: zero_optimization.offload_param.buffer_size: 1 is smaller than the largest piece of a segment a rank holds on 1 rank, * elements (*)"
config_and_train config_dev_zero @/dev/zero \
  "zerotrain: error: /dev/zero: larger than 16777216 bytes, the most this file may hold"
python3 -c "print('seed: ' + '[' * 200000 + ']' * 200000)" >"$tmp/deep.yaml"
config_and_train config_nested_200k "@$tmp/deep.yaml" \
  "zerotrain: error: @:1:70: nested deeper than 64 levels, the most a config may be"
head -c $((17 << 20)) /dev/zero | tr '\0' ' ' >"$tmp/big.yaml"
config_and_train config_over_16mib "@$tmp/big.yaml" \
  "zerotrain: error: @: larger than 16777216 bytes, the most this file may hold"
# a simulated GPU of 1 MiB (issue 31: the sizes read "0.0 GiB"): both in the unit that shows them
export ZEROTRAIN_SIM_MEM=1MiB
config_and_train sim_mem_1mib "${small}train_micro_batch_size_per_gpu: 2"$'\n' \
  "zerotrain: error: @:4:33: train_micro_batch_size_per_gpu: the activations of a micro-batch of 2 x 32 tokens need [1-9]*.[0-9][0-9] MiB per rank, more than the 1.00 MiB of sim memory in all (*)" \
  --set device=sim
unset ZEROTRAIN_SIM_MEM

# a config that is a named pipe nobody writes to (issue 31): one line after ZEROTRAIN_PIPE_TIMEOUT
# seconds, from config and train; the same pipe with a writer, and process substitution, still read
mkfifo "$tmp/fifo.yaml"
export ZEROTRAIN_PIPE_TIMEOUT=2
config_and_train config_fifo_no_writer "@$tmp/fifo.yaml" \
  "zerotrain: error: @: no data within 2 s (a named pipe nobody writes to; ZEROTRAIN_PIPE_TIMEOUT sets the wait)"
( printf 'seed: 77\n' >"$tmp/fifo.yaml" ) &
writer=$!
out=$(timeout 60 "$bin" config "$tmp/fifo.yaml" 2>&1); rc=$?
wait "$writer"
if (( rc == 0 )) && grep -q '^seed: 77$' <<<"$out"; then pass config_fifo_with_writer_reads
else fail config_fifo_with_writer_reads "rc $rc; [$(tail -c 400 <<<"$out")]"; fi
out=$(timeout 60 "$bin" config <(printf 'seed: 78\n') 2>&1); rc=$?
if (( rc == 0 )) && grep -q '^seed: 78$' <<<"$out"; then pass config_process_substitution_reads
else fail config_process_substitution_reads "rc $rc; [$(tail -c 400 <<<"$out")]"; fi
unset ZEROTRAIN_PIPE_TIMEOUT

# the effective config loads back to itself (through the driver, i.e. the printed text)
f="$tmp/rt.yaml"
printf '%s' $'{"train_batch_size": 16, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},\n "scheduler": {"type": "WarmupLR"}, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu", "ratio": "auto", "device_memory": "2GiB", "host_memory": "100 GB"}},\n "data": {"train": "a \\"quoted\\" path*.bin"}}\n' >"$f"
if "$drv" --load "$f" --set seed=7 >"$tmp/rt1.yaml" 2>"$tmp/rt.err" && "$drv" --load "$tmp/rt1.yaml" >"$tmp/rt2.yaml" 2>>"$tmp/rt.err" &&
   diff <(tail -n +2 "$tmp/rt1.yaml") <(tail -n +2 "$tmp/rt2.yaml") >"$tmp/rt.diff"; then
  pass effective_config_round_trip
else
  fail effective_config_round_trip "$(cat "$tmp/rt.err" "$tmp/rt.diff" | head -5)"
fi

# through the real command: the same line, a non-zero status, and no training
if [[ ! -x $bin ]]; then
  fail zerotrain_train_config_error "$bin not built (make all)"
else
  f="$tmp/cli.yaml"
  printf 'model:\n  n_layer: 2\nzero_optimisation:\n  stage: 1\n' >"$f"
  err=$(OMPI_MCA_btl=self timeout 60 "$bin" train "$f" 2>&1 >"$tmp/cli.out"); rc=$?
  want="zerotrain: error: $f:3:1: unknown key 'zero_optimisation' (did you mean 'zero_optimization'?)"
  if (( rc != 0 && rc != 124 )) && grep -qxF "$want" <<<"$err"; then pass zerotrain_train_config_error
  else fail zerotrain_train_config_error "rc $rc; stderr [$(head -3 <<<"$err")]"; fi

  printf 'seed: 1\n' >"$f"
  err=$(OMPI_MCA_btl=self timeout 60 "$bin" train "$f" --set optimizer.params.lr=-1 2>&1 >"$tmp/cli.out"); rc=$?
  want="zerotrain: error: --set optimizer.params.lr: expected a number >= 0, got -1"
  if (( rc != 0 && rc != 124 )) && grep -qxF "$want" <<<"$err"; then pass zerotrain_train_set_error
  else fail zerotrain_train_set_error "rc $rc; stderr [$(head -3 <<<"$err")]"; fi

  # a command line train cannot read exits 2 with its usage, as every command's does (issue 48, 8)
  for case in "none:" "two_configs:$f extra" "unknown_option:--frobnicate"; do
    name=${case%%:*} args=${case#*:}
    err=$(OMPI_MCA_btl=self timeout 60 "$bin" train $args 2>&1 >/dev/null); rc=$?
    if (( rc == 2 )) && grep -q "usage: zerotrain train CONFIG" <<<"$err"; then pass "zerotrain_train_usage_$name"
    else fail "zerotrain_train_usage_$name" "rc $rc; stderr [$(head -3 <<<"$err")]"; fi
  done
fi
