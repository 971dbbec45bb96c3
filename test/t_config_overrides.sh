#!/usr/bin/env bash
# t_config_overrides.sh — `--set` is applied before the file's values are judged, so an override
# repairs any value a file would be refused for, and `--set KEY=null` removes KEY (its value in the
# file is never read; a key that takes no null returns to its default). Checked through
# `zerotrain config` (exit status, one error line, the effective config) and, for the Megatron-style
# JSON with `optimizer.type: Lamb` and `optimizer.params.max_grad_norm`, through 2 training steps.
set -u
cd "$(dirname "$0")/.."
# the tokenized tiny Shakespeare the training case reads (made once, as the Python tests make it)
/usr/bin/python3 -c 'import sys; sys.path.insert(0, "test"); import ztlib; ztlib.ensure_shakespeare()' ||
  echo "FAIL test_data: cannot make build/testdata"
bin=${ZEROTRAIN_BIN:-./zerotrain}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/zt_t_overrides.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
if [[ ! -x $bin ]]; then fail config_overrides "$bin not built (make all)"; exit 1; fi
ds=test/configs/deepspeed

# loads NAME FILE [--set K=V]...: exit 0; the effective config is kept in $tmp/NAME.yaml
loads() {
  local name=$1 f=$2; shift 2
  if "$bin" config "$f" --set device=cpu "$@" >"$tmp/$name.yaml" 2>"$tmp/$name.err"; then pass "$name"
  else fail "$name" "$(grep 'zerotrain: error' "$tmp/$name.err")"; fi
}
# refused NAME WANT FILE [--set K=V]...: exit 1 and exactly the one error line WANT
refused() {
  local name=$1 want=$2 f=$3; shift 3
  local err rc
  "$bin" config "$f" --set device=cpu "$@" >/dev/null 2>"$tmp/$name.err"; rc=$?
  err=$(grep 'zerotrain: error' "$tmp/$name.err")
  (( rc == 1 )) && [[ $err == "$want" ]] && pass "$name" || fail "$name" "rc $rc; got [$err], want [$want]"
}

lamb=$ds/megatron_lamb_max_grad_norm.json
repair=(--set optimizer.type=AdamW --set optimizer.params.max_grad_norm=null --set optimizer.params.max_coeff=null
        --set optimizer.params.min_coeff=null)
loads set_repairs_lamb_and_max_grad_norm "$lamb" "${repair[@]}"
grep -qx '  type: AdamW' "$tmp/set_repairs_lamb_and_max_grad_norm.yaml" &&
  grep -qx '    weight_decay: 0.01' "$tmp/set_repairs_lamb_and_max_grad_norm.yaml" &&
  pass set_repair_keeps_the_rest || fail set_repair_keeps_the_rest "$(grep -A4 '^optimizer' "$tmp/set_repairs_lamb_and_max_grad_norm.yaml")"
# one repair short: the next refused value, at its place in the file
refused set_repair_one_short "zerotrain: error: $lamb:10:7: optimizer.params.max_grad_norm is not an optimizer parameter (DeepSpeed refuses it too); clip with the top-level gradient_clipping" \
  "$lamb" --set optimizer.type=AdamW
loads set_mapping_repairs "$ds/max_grad_norm.json" --set 'optimizer={params: {max_grad_norm: null}}'
loads set_repairs_feature_section "$ds/amp_enabled.json" --set amp.enabled=false
loads set_null_removes_section "$ds/megatron_curriculum_on.json" --set curriculum_learning=null

# null: a key that takes no null returns to its default and is not blamed by cross-key checks
printf 'optimizer: {type: Adam, params: {lr: 0.001, adam_w_mode: false, weight_decay: 0.1}}\n' >"$tmp/l2.yaml"
refused l2_adam_refused "zerotrain: error: $tmp/l2.yaml:1:79: optimizer.params.weight_decay: adam_w_mode false with weight_decay 0.1 asks for L2-coupled Adam, which zerotrain does not support (use adam_w_mode true or type AdamW for decoupled weight decay, or weight_decay 0)" "$tmp/l2.yaml"
loads set_null_removes_cross_key_value "$tmp/l2.yaml" --set optimizer.params.adam_w_mode=null
printf 'optimizer: {params: {lr: -5}}\n' >"$tmp/lr.yaml"
loads set_null_restores_default "$tmp/lr.yaml" --set optimizer.params.lr=null
grep -qx '    lr: 0.0006' "$tmp/set_null_restores_default.yaml" && pass set_null_default_value ||
  fail set_null_default_value "$(grep ' lr:' "$tmp/set_null_restores_default.yaml")"
# null keeps its meaning where a key takes it (data.val: no validation)
loads set_null_value_kept configs/tiny.yaml --set data.val=null
grep -qx '  val: null' "$tmp/set_null_value_kept.yaml" && pass set_null_string_is_none || fail set_null_string_is_none "$(grep ' val:' "$tmp/set_null_value_kept.yaml")"
# removing a key that is in neither the table nor the file is still an unknown key
refused set_null_unknown_key "zerotrain: error: --set optimizer.params.max_coeff: unknown key 'max_coeff' in optimizer.params" \
  configs/tiny.yaml --set optimizer.params.max_coeff=null
# an override's own bad value is still judged, after the file
refused set_bad_value_still_refused "zerotrain: error: --set optimizer.params.lr: expected a number >= 0, got -1" \
  "$tmp/lr.yaml" --set optimizer.params.lr=-1

# the repaired Megatron JSON trains (a tiny model, 2 steps, on the CPU)
out=$(OMP_NUM_THREADS=1 timeout 300 "$bin" train "$lamb" "${repair[@]}" --set device=cpu --set bf16.enabled=false \
      --set 'model={n_layer: 2, n_head: 2, n_embd: 32, n_positions: 64}' --set data.seq_len=32 --set train_iters=2 \
      --set 'data.train=build/testdata/shakespeare_train_*.bin' --set data.val=null 2>&1); rc=$?
if (( rc == 0 )) && grep -q '^step *2/2' <<<"$out"; then pass set_repaired_json_trains
else fail set_repaired_json_trains "rc $rc: $(tail -3 <<<"$out")"; fi
