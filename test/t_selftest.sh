#!/usr/bin/env bash
# t_selftest.sh — the GPU self-test (every CUDA op against the CPU backend, tiny training on the GPU
# against the CPU trajectory) when a GPU is present; on machines without one it says clearly that it
# skipped, and counts as neither passed nor failed. The harness itself runs on every machine:
# `selftest --device cpu` checks the CPU backend against itself, the stage-3 training variant
# (parameter offload, embedding row blocks) included, so the code a GPU session will run is kept working.
cd "$(dirname "$0")/.."
cpu=$(./zerotrain selftest --device cpu 2>&1); crc=$?
grep -E "^(PASS|FAIL) " <<<"$cpu" | sed 's/^\(PASS\|FAIL\) /\1 cpu harness: /'
[ $crc -eq 0 ] || { echo "FAIL cpu harness: selftest --device cpu exited $crc"; echo "$cpu" | tail -5; }
out=$(./zerotrain selftest --allow-skip 2>&1); rc=$?
if grep -q "SKIPPED" <<<"$out"; then
  echo "SKIP selftest: $(grep SKIPPED <<<"$out" | head -1)"
  exit $crc
fi
echo "$out"
[ $crc -eq 0 ] && exit $rc || exit $crc
