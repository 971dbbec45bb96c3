#!/usr/bin/env bash
# t_sanitize.sh — every subcommand under AddressSanitizer and UBSan, over the test inputs its own tests
# use (issue 48): builds build/sanitize/zerotrain (the CPU backend only, -O1 -g, ASan + UBSan with
# no recovery), then runs the fast tests below with ZEROTRAIN_BIN pointing at it. A sanitizer report
# ends its process with status 86 and leaves a file under build/sanitize/reports/ (ASan writes it
# itself, to log_path; UBSan inside ASan writes to stderr only, so ztlib.run keeps what it sees as a
# file, and the shell tests compare stderr exactly); any report file fails this test, whatever status
# the test that ran it expected (a bad input's "exit 1" check would take a sanitizer's exit for a
# clean refusal). Leak checking is off: an error exit frees
# nothing on purpose (the process ends), and OpenMPI's own allocations would drown the rest.
# What it covers: config (every error case), train (stages 0-3, 1 and 2 ranks, offload, resume,
# checkpoints, faults), info, export, sample, eval, tokenize, estimate, predict, interval, run.
# Not here: calibrate (a minute of benchmarking; its parser is the same as the other commands'),
# selftest on a GPU, the CUDA library (nvcc's code is not instrumented).
set -u
cd "$(dirname "$0")/.."
san=build/sanitize
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
# -O1's warnings differ from the release build's -O3 (format-truncation guesses): not errors here
flags+=" -Wno-format-truncation -Wno-stringop-truncation -Wno-maybe-uninitialized"
start=$SECONDS
if ! make -s -j"$(nproc)" BUILD=$san BIN=$san/zerotrain CUDA=0 OPT="-O1 -g" CFLAGS="$flags" $san/zerotrain \
     >$san.build.log 2>&1; then
  echo "FAIL sanitize_build: $(grep -m3 error $san.build.log)"; exit 1
fi
echo "PASS sanitize_build ($((SECONDS - start)) s)"
reports=$PWD/$san/reports
rm -rf "$reports" && mkdir -p "$reports"
export ZEROTRAIN_BIN=$PWD/$san/zerotrain ZEROTRAIN_SANITIZE_REPORTS=$reports
export ZT_FUZZ_SECONDS=${ZT_FUZZ_SECONDS:-15} # the fuzz test already ran its full box on the release build
export ASAN_OPTIONS="detect_leaks=0:exitcode=86:log_path=$reports/asan:abort_on_error=0"
export UBSAN_OPTIONS="halt_on_error=1:exitcode=86:print_stacktrace=1"
for t in ${SANITIZE_TESTS:-t_config_errors.sh t_sample.py t_checkpoint_faults.py t_checkpoint_fuzz.py t_tokenizer_ref.py t_estimate.py t_interval.py t_cli_help.py}; do
  t0=$SECONDS
  if [[ $t == *.sh ]]; then out=$(bash "test/$t" 2>&1); else out=$(/usr/bin/python3 "test/$t" 2>&1); fi
  rc=$?
  nfail=$(grep -c '^FAIL ' <<<"$out")
  if (( rc == 0 && nfail == 0 )); then echo "PASS sanitize_${t%.*} ($((SECONDS - t0)) s)"
  else echo "FAIL sanitize_${t%.*}: rc $rc, $nfail failed: $(grep -m3 '^FAIL ' <<<"$out")"; fi
done
found=$(ls "$reports")
if [[ -z $found ]]; then echo "PASS sanitize_no_reports"
else
  echo "FAIL sanitize_no_reports: $(ls "$reports" | wc -l) report(s), first:"
  head -30 "$reports/$(ls "$reports" | head -1)"
fi
echo "sanitize: $((SECONDS - start)) s in all"
