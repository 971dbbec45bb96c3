#!/usr/bin/env bash
# t_layout.sh — scripts/check-layout: the tree keeps docs/architecture.md's Layout (no file over 800 lines, no
# include from a lower floor to a higher one, no include circle of more than two files), and the
# checker itself fails, naming FILE:LINE, on a small tree with one of each planted.
set -u
cd "$(dirname "$0")/.."
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

if out=$(scripts/check-layout 2>&1); then pass "source tree keeps the layout"
else fail "source tree keeps the layout" "$(grep -v '^check-layout:' <<<"$out" | head -5 | tr '\n' ';')"; fi
echo "$out" | tail -1

tree=$(mktemp -d); trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree"/src/{util,engine,comm,model,io,unfiled} "$tree"/cuda
plant() { printf '%s\n' "${@:2}" >"$tree/$1"; }
plant src/engine/engine.h '#pragma once'
plant src/util/util.h '#pragma once' '' '#include "engine/engine.h"'         # upward, line 3
plant src/comm/ring_a.h '#include "comm/ring_b.h"'                          # a circle of three
plant src/comm/ring_b.h '#include "ring_c.h"'                               # (same-folder form)
plant src/comm/ring_c.h '#include "comm/ring_a.h"'
plant src/io/pair.h '#include "io/pair_private.h"'                          # a pair: allowed
plant src/io/pair_private.h '#include "io/pair.h"' '#include "model/gpt2.h"' # io and model: one floor
plant src/model/gpt2.h '#include "util/util.h"' '#include <stdio.h>'
plant cuda/k.cuh '#include "comm/ring_a.h"'                                 # cuda on comm's floor
plant src/unfiled/x.c '/* no floor */'
seq 801 | sed 's/^/int v/; s/$/;/' >"$tree/src/model/long.c"
seq 800 | sed 's/^/int v/; s/$/;/' >"$tree/src/model/just_fits.c"

out=$(scripts/check-layout "$tree" 2>&1); rc=$?
expect() { # expect NAME PATTERN: the planted tree's report has a line matching PATTERN
  if grep -qE "$2" <<<"$out"; then pass "$1"; else fail "$1" "no line matching '$2' in: $(tr '\n' ';' <<<"$out")"; fi
}
refuse() { # refuse NAME PATTERN: no line of the report matches PATTERN
  if grep -qE "$2" <<<"$out"; then fail "$1" "reported: $(grep -E "$2" <<<"$out" | head -1)"; else pass "$1"; fi
}
if ((rc == 1)); then pass "planted tree fails"; else fail "planted tree fails" "exit status $rc"; fi
expect "upward include named" '^src/util/util\.h:3: includes "engine/engine\.h": engine is a floor above util$'
expect "circle named, each edge" '^src/comm/ring_b\.h:1: includes src/comm/ring_c\.h, in an include circle of 3 files'
expect "circle lists its files" 'circle of 3 files: src/comm/ring_a\.h, src/comm/ring_b\.h, src/comm/ring_c\.h$'
expect "long file named" '^src/model/long\.c:801: 801 lines, over 800$'
expect "folder without a floor named" "^src/unfiled/x\.c:1: folder 'unfiled' is on no floor"
expect "summary counts" '^check-layout: 12 files, 9 includes: 6 violations'
refuse "800 lines is allowed" 'just_fits'
refuse "a pair including each other is allowed" 'pair'
refuse "cuda may include comm" '^cuda/'
refuse "a lower floor may be included" 'model/gpt2\.h'
