#!/usr/bin/env bash
# t_plot.sh — scripts/plot turns metrics JSONL into a PNG: from a real tiny run (with validation
# loss) and from two runs at once; a file with a restart (a step logged twice) and an unfinished
# last line still plots; a missing file is a clear error. Checks the PNG signature, the image size
# from its IHDR chunk and that the file is not trivially small.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
png_ok() { # png_ok FILE: PNG signature, 1200x800 (12x8 in at 100 dpi), > 20 kB
  /usr/bin/python3 - "$1" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
ok = d[:8] == b"\x89PNG\r\n\x1a\n" and d[12:16] == b"IHDR" and struct.unpack(">II", d[16:24]) == (1200, 800)
sys.exit(0 if ok and len(d) > 20000 else 1)
PY
}

/usr/bin/python3 -c 'import sys; sys.path.insert(0, "test"); import ztlib; ztlib.ensure_shakespeare()'
export OMP_NUM_THREADS=1
./zerotrain train configs/tiny.yaml --set metrics_file="$tmp/a.jsonl" --set eval_interval=5 --set eval_batches=2 \
  >"$tmp/train.log" 2>&1 || { fail plot_input_run "$(tail -5 "$tmp/train.log")"; exit 1; }

out=$(scripts/plot "$tmp/a.jsonl" 2>&1)
if [[ -f $tmp/a.png ]] && png_ok "$tmp/a.png"; then pass plot_one_run_png; else fail plot_one_run_png "$out"; fi

# a second run: resumed once (steps 9..10 logged twice) and still being written (partial last line)
head -n 10 "$tmp/a.jsonl" >"$tmp/b.jsonl"
sed -n '9,20p' "$tmp/a.jsonl" >>"$tmp/b.jsonl"
printf '{"step": 21, "loss": 6.' >>"$tmp/b.jsonl"
out=$(scripts/plot -o "$tmp/both.png" --title "two runs" first="$tmp/a.jsonl" resumed="$tmp/b.jsonl" 2>&1)
if [[ $out == *"resumed: 20 steps"* ]] && png_ok "$tmp/both.png"; then pass plot_two_runs_with_restart; else
  fail plot_two_runs_with_restart "$out"; fi

out=$(scripts/plot -o "$tmp/none.png" "$tmp/missing.jsonl" 2>&1)
rc=$?
if ((rc != 0)) && [[ $out == *missing.jsonl* && ! -e $tmp/none.png ]]; then pass plot_missing_file_error; else
  fail plot_missing_file_error "rc $rc: $out"; fi
