#!/usr/bin/env bash
# t_gemm_coretypes.sh — the CPU backend's ops are bit-identical for any OpenMP thread count on more
# than one code path: test_ops's determinism checks run once under each OpenBLAS core type
# (OPENBLAS_CORETYPE, Debian's OpenBLAS is a DYNAMIC_ARCH build) whose instructions this CPU has.
# Each kernel family handles the edges of a GEMM differently, which is what made the old thread-
# count-dependent panels give different bits on an AVX2 Zen. A type the CPU lacks is not tried (its
# kernels would die of SIGILL) and is listed in a SKIP line; a requested type that OpenBLAS does not
# switch to fails.
set -u
cd "$(dirname "$0")/.."
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { local f; for f in "$@"; do [[ $flags == *" $f "* ]] || return 1; done; }

# core type and the cpuinfo flags its kernels need (OpenBLAS 0.3.21, kernel/x86_64/KERNEL.*)
types=("Core2 ssse3" "Nehalem ssse3 sse4_1 sse4_2" "Sandybridge avx" "Haswell avx2 fma" "Zen avx2 fma"
       "SkylakeX avx512f avx512bw avx512dq avx512vl avx512cd")
skipped=(); tried=0
for entry in "${types[@]}"; do
  read -r type need <<<"$entry"
  # shellcheck disable=SC2086
  if ! has $need; then skipped+=("$type"); continue; fi
  tried=$((tried + 1))
  out=$(OPENBLAS_CORETYPE=$type build/test/test_ops --determinism 2>&1); rc=$?
  if ! grep -q " on $type\$" <<<"$(grep '^PASS\|^FAIL' <<<"$out")"; then
    echo "FAIL coretype $type: OpenBLAS did not switch to it: $(grep -m1 '^PASS\|^FAIL' <<<"$out")"
    continue
  fi
  echo "$out" | grep '^\(PASS\|FAIL\) '
  ((rc == 0)) || grep -q '^FAIL ' <<<"$out" || echo "FAIL coretype $type: test_ops exited $rc"
done
((${#skipped[@]})) && echo "SKIP coretypes this CPU cannot run: ${skipped[*]}"
((tried >= 2)) || echo "FAIL coretypes: fewer than two OpenBLAS code paths could be tried on this CPU"
exit 0
