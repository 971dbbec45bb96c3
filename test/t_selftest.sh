#!/usr/bin/env bash
# t_selftest.sh — the GPU self-test (every CUDA op against the CPU backend, tiny training on the GPU
# against the CPU trajectory) when a GPU is present; on machines without one it says clearly that it
# skipped, and counts as neither passed nor failed. The harness itself runs on every machine:
# `selftest --device cpu` checks the CPU backend against itself, the stage-3 training variant
# (parameter offload, embedding row blocks) included, so the code a GPU session will run is kept working;
# and `selftest --device sim` runs it all on the simulated GPU (bf16 and fp16, 16-bit tolerances), alone
# and on 2 ranks (the host-staged device comm against MPI), and on 4 ranks (also the group comms of
# comm.h: MPI and host-staged, split by rank % 2 and by rank / 2).
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
harness() { # harness LABEL CMD...: the selftest's check lines, labelled; a FAIL line if it exits non-zero
  local label=$1; shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  grep -E "^(PASS|FAIL) " <<<"$out" | sed "s/^\(PASS\|FAIL\) /\1 $label: /"
  [ $rc -eq 0 ] || { echo "FAIL $label: $* exited $rc"; echo "$out" | tail -5; }
  return $rc
}
harness "cpu harness" ./zerotrain selftest --device cpu; crc=$?
harness "sim" ./zerotrain selftest --device sim || crc=1
harness "sim 2 ranks" mpirun -np 2 --oversubscribe --bind-to none ./zerotrain selftest --device sim || crc=1
harness "sim 4 ranks" mpirun -np 4 --oversubscribe --bind-to none ./zerotrain selftest --device sim || crc=1
out=$(./zerotrain selftest --allow-skip 2>&1); rc=$?
if grep -q "SKIPPED" <<<"$out"; then
  echo "SKIP selftest: $(grep SKIPPED <<<"$out" | head -1)"
  exit $crc
fi
echo "$out"
[ $crc -eq 0 ] && exit $rc || exit $crc
