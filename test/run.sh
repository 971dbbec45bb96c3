#!/usr/bin/env bash
# run.sh — runs every test and ends with "N passed, N failed".
# C tests (build/test/test_*) and script tests (test/t_*.sh) print "PASS name" / "FAIL name: why"
# lines; a test program that exits non-zero without printing a FAIL line counts as one failure.
# Usage: test/run.sh [PATTERN]   (only tests whose file name contains PATTERN)
set -u
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
pattern=${1:-}
passed=0; failed=0; failed_names=()
logdir=build/test-logs; mkdir -p "$logdir"

run_one() { # run_one NAME CMD...
  local name=$1; shift
  local log="$logdir/$name.log" start=$SECONDS
  [[ -n $pattern && $name != *"$pattern"* ]] && return
  "$@" >"$log" 2>&1; local rc=$?
  local p f
  p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log")
  if (( rc != 0 && f == 0 )); then f=1; echo "FAIL $name: exit status $rc" >>"$log"; fi
  passed=$((passed + p)); failed=$((failed + f))
  printf '%-28s %4d passed %3d failed  (%ds)\n' "$name" "$p" "$f" $((SECONDS - start))
  grep '^SKIP ' "$log" | sed 's/^/    /'
  if (( f > 0 )); then
    failed_names+=("$name"); grep -E '^FAIL ' "$log" | head -20 | sed 's/^/    /'
    tail -n 15 "$log" | grep -v '^\(PASS\|FAIL\) ' | sed 's/^/    | /'
  fi
}

for t in build/test/test_*; do [[ -x $t ]] && run_one "$(basename "$t")" "$t"; done
for t in test/t_*.sh; do [[ -f $t ]] && run_one "$(basename "$t" .sh)" bash "$t"; done
for t in test/t_*.py; do [[ -f $t ]] && run_one "$(basename "$t" .py)" /usr/bin/python3 "$t"; done

echo
((${#failed_names[@]})) && echo "failed: ${failed_names[*]}"
echo "$passed passed, $failed failed"
((failed == 0))
