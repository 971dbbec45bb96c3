#!/usr/bin/env bash
# t_layout.sh — scripts/check-layout: the tree keeps docs/architecture.md's Layout (no file over 800 lines, no
# include from a lower floor to a higher one, no include circle of more than two files, no circle
# between units — x.c with x.h — of includes and calls, no call up a floor), and the checker itself
# fails, naming FILE:LINE, on a small tree with one of each planted.
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
# units (x.c with x.h): a circle of calls, a circle of an include and a call, a call up a floor
plant src/io/shelf.h 'int shelf_put(void);'
plant src/io/shelf.c '#include "io/shelf.h"' 'int shelf_put(void) {' '    return ledger_count();' '}'
plant src/io/ledger.c 'int ledger_count(void) { return 0; }' 'int ledger_sync(void) {' '    return shelf_put();' '}'
plant src/model/norm.h 'int norm_rows(int n);'
plant src/model/norm.c 'int norm_rows(int n) {' '    return layer_forward(n);' '}'
plant src/model/layer.c '#include "model/norm.h"' 'int layer_forward(int n) { return n; }'
plant src/engine/engine.c 'void engine_go(void) {}'
plant src/util/util.c '/* engine_go() named in a comment is no use */' 'void util_go(void) { engine_go(); }'
# no circle: a static function of the same name, a field of the same name, a shared private
# header that declares what two files define (one calls the other)
plant src/comm/lane_a.c 'struct s { int (*lane_b_run)(void); };' 'static int helper(void) { return 1; }' \
      'int lane_a_run(struct s *p) { return helper() + p->lane_b_run(); }'
plant src/comm/lane_b.c 'int helper(void) { return 2; }' 'int lane_b_run(void) { return lane_a_run(0); }'
plant src/comm/duo_internal.h 'int duo_low(void);' 'int duo_high(void);'
plant src/comm/duo_low.c '#include "comm/duo_internal.h"' 'int duo_low(void) { return 0; }'
plant src/comm/duo_high.c '#include "comm/duo_internal.h"' 'int duo_high(void)' '{' '    return duo_low();' '}'
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
expect "unit circle of calls named, each use" '^src/io/shelf\.c:3: uses ledger_count \(src/io/ledger\.c\), in a unit circle of 2 units: ledger, shelf$'
expect "unit circle's other use named" '^src/io/ledger\.c:3: uses shelf_put \(src/io/shelf\.c\), in a unit circle'
expect "unit circle of an include and a call" '^src/model/layer\.c:1: includes src/model/norm\.h, in a unit circle of 2 units: layer, norm$'
expect "unit circle's call named" '^src/model/norm\.c:2: uses layer_forward \(src/model/layer\.c\), in a unit circle'
expect "call up a floor named" '^src/util/util\.c:2: uses engine_go, defined in src/engine/engine\.c: engine is a floor above util$'
expect "summary counts" '^check-layout: 25 files, 13 includes: 11 violations'
refuse "a static function or a field of a same name is no use" 'lane_'
refuse "a shared private header makes no circle" 'duo_'
refuse "800 lines is allowed" 'just_fits'
refuse "a pair including each other is allowed" 'pair'
refuse "cuda may include comm" '^cuda/'
refuse "a lower floor may be included" 'model/gpt2\.h'
