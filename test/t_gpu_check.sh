#!/usr/bin/env bash
# t_gpu_check.sh — scripts/gpu-check (the GPU check a bare GPU machine runs): `pack` makes the folder
# from Debian's packages under its 64 MiB limit, and the folder's `run` works where the system's own
# copies of everything the pack carries (Open MPI with its plugins and help files, OpenBLAS, HDF5 and
# its chain, libyaml, pcre2, liburing, ...) are hidden: a mount namespace with /dev/null bound over
# each of their files, as on a machine that never had them. There `run` checks the libraries with
# ldd, runs selftest's CPU harness on 1 and 2 ranks (the packed mpirun), a smoke case's reference
# side on 1 and on 2 ranks and the 10B estimate, and reports "no GPU" for the GPU parts; with one
# packed library removed, its ldd check names it and the run fails. CUDA's libraries and NCCL are
# moved, as far as the binary can tell, into a pip wheel's layout, where run must find them. Needs root (unshare -m) and
# Debian's mirrors or the debs cached in ~/.cache/zerotrain/debs by an earlier pack.
set -u
cd "$(dirname "$0")/.." || exit 1
mkdir -p build && tmp=$(mktemp -d build/t_gpu_check.XXXXXX)
tmp=$(cd "$tmp" && pwd)
trap 'rm -rf "$tmp"' EXIT
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
expect() { # expect NAME TEXT PATTERN: PASS when TEXT matches the extended regex PATTERN
    if [[ $2 =~ $3 ]]; then pass "$1"; else fail "$1" "expected /$3/ in: $(tail -c 600 <<<"$2")"; fi
}

pack=$tmp/pack
out=$(scripts/gpu-check pack "$pack" 2>&1); rc=$?
if ((rc != 0)); then fail gpu_check_pack "exit $rc: $(tail -n 5 <<<"$out")"; exit 1; fi
bytes=$(du -sb "$pack" | cut -f1)
if ((bytes <= 64 * 1048576)) && [[ $out == *"MiB (limit 64 MiB"* ]]; then pass "gpu_check_pack_under_64MiB ($((bytes / 1048576)) MiB)"
else fail gpu_check_pack_under_64MiB "$bytes bytes: $out"; fi
for p in libopenmpi3 openmpi-bin openmpi-common libpmix2 libopenblas0-pthread libhdf5-103-1 libyaml-0-2 libpcre2-8-0 liburing2; do
    if grep -qE "^${p}[: ]" "$pack/MANIFEST"; then pass "gpu_check_pack_carries_$p"; else fail "gpu_check_pack_carries_$p" "not in $pack/MANIFEST"; fi
done
if grep -qE '^(libc6|libstdc\+\+6)[: ]' "$pack/MANIFEST"; then fail gpu_check_pack_leaves_glibc "listed in MANIFEST"
else pass gpu_check_pack_leaves_glibc; fi

# the system's copies of every carried package's files, and the libraries the shell tools below need
# from them (grep, sed and tar link pcre2): copies of those go to a directory only the tools see
# (the pack's wrappers put the pack's own directories first, and run's ldd check names any library
# that does not come from the pack)
mapfile -t hide < <(awk '/^## Debian packages/ { f = 1; next } /^$/ { f = 0 } f { print $1 }' "$pack/MANIFEST" |
    xargs dpkg -L 2>/dev/null | sort -u | while read -r f; do [[ -f $f && ! -L $f ]] && echo "$f"; done |
    grep -vE '^/usr/share/(doc|man|lintian|bug|locale|info)/')
mkdir -p "$tmp/toollibs" "$tmp/tmpdir"
for t in bash grep sed awk tar gzip timeout mount ldd find cp mv ln rm mkdir touch chmod ls cat head tail cut wc tr \
    du od cksum paste sort readlink dirname basename env id date uname nproc xargs; do
    ldd "$(command -v "$t")" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
    real=$(readlink -f "$lib")
    printf '%s\n' "${hide[@]}" | grep -qxF "$real" && cp "$real" "$tmp/toollibs/$(basename "$lib")"
done
printf '%s\n' "${hide[@]}" >"$tmp/hidden"
# the CUDA libraries the binary links (none in a CUDA=0 build), and NCCL, which a CUDA build loads at
# run time (cuda/comm_nccl.cu): "soname real-path"
{
    [ -f ./libzerotrain-cuda.so ] && ldd ./libzerotrain-cuda.so | awk '$1 ~ /^lib(cudart|cublas|cublasLt)\.so/ && $3 ~ /^\// { print $1, $3 }'
    if [ -f ./libzerotrain-cuda.so ]; then
        ldconfig -p | awk '$1 == "libnccl.so.2" { print $1, $NF; exit }'
    fi
} | while read -r so path; do echo "$so $(readlink -f "$path")"; done >"$tmp/cudalibs"
echo "hiding ${#hide[@]} files of $(grep -c . <<<"$(awk '/^## Debian packages/ { f = 1; next } /^$/ { f = 0 } f' "$pack/MANIFEST")") packages"

# another PMIx's plugin where the system's PMIx keeps its own, as on the GPU machines (whose PMIx is
# another version: "undefined symbol: pmix_output_info"): the packed PMIx must not load it
zlib_plugin=/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix/pmix_mca_pcompress_zlib.so
printf 'extern int pmix_output_info(int);\nint foreign_plugin(void) { return pmix_output_info(0); }\n' >"$tmp/foreign.c"
[ -f "$zlib_plugin" ] && gcc -shared -fPIC -o "$tmp/foreign_plugin.so" "$tmp/foreign.c" && echo "$zlib_plugin" >"$tmp/foreign_at"

# everything below runs in the namespace; its output is the test's (PASS/FAIL lines)
cat >"$tmp/inside.sh" <<'EOF'
set -u
tmp=$1; pack=$tmp/pack
export LD_LIBRARY_PATH=$tmp/toollibs TMPDIR=$tmp/tmpdir OMP_NUM_THREADS=1
while read -r f; do mount --bind /dev/null "$f" || { echo "FAIL gpu_check_hide: mount over $f"; exit 1; }; done <"$tmp/hidden"
[ -f "$tmp/foreign_at" ] && mount --bind "$tmp/foreign_plugin.so" "$(cat "$tmp/foreign_at")"
# CUDA's libraries and NCCL (of a CUDA build) as pip's wheels lay them out (site-packages/nvidia/*/lib,
# on PYTHONPATH), and no longer where the binary was linked (its RUNPATH) nor in the loader's cache
while read -r so real; do
    case $so in libnccl*) w=nccl ;; libcublas*) w=cublas ;; *) w=cuda_runtime ;; esac
    mkdir -p "$tmp/site/nvidia/$w/lib" && touch "$tmp/site/nvidia/$w/lib/$so" &&
        mount --bind "$real" "$tmp/site/nvidia/$w/lib/$so" || { echo "FAIL gpu_check_wheel_layout: $so"; exit 1; }
done <"$tmp/cudalibs"
for d in $(awk '{ sub(/\/[^\/]*$/, "", $2); print $2 }' "$tmp/cudalibs" | sort -u); do
    mount -t tmpfs none "$d" || { echo "FAIL gpu_check_hide_cuda: $d"; exit 1; }
done
export PYTHONPATH=$tmp/site
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
expect() { if [[ $2 =~ $3 ]]; then pass "$1"; else fail "$1" "expected /$3/ in: $(tail -c 600 <<<"$2")"; fi; }
# the system's copies are gone: the unpacked binary cannot load, the system's mpirun cannot start
expect gpu_check_system_libraries_hidden "$(ldd ./zerotrain 2>&1)" "file too short|not found"
if mpirun --version >/dev/null 2>&1; then fail gpu_check_system_mpirun_hidden "mpirun still runs"; else pass gpu_check_system_mpirun_hidden; fi

# 1 rank: libraries, selftest (CPU harness on 1 and 2 ranks), a smoke case, the 10B estimate
o1=$tmp/out1
log=$("$pack/run" --out "$o1" --parts selftest,smoke,10b,largest,selftest2 --cases '^s3-param-nvme-opt-nvme-overlap-on$' --steps 2 2>&1); rc=$?
report=$(cat "$o1/report.md" 2>/dev/null)
if ((rc == 0)) && [ -n "$report" ]; then pass gpu_check_run_1rank; else fail gpu_check_run_1rank "exit $rc: $(tail -n 8 <<<"$log")"; fi
expect gpu_check_libs_resolve_in_pack "$(cat "$o1/parts/libs.verdict" 2>/dev/null)" "^PASS: all [0-9]+ libraries resolve"
if grep -q libnccl "$tmp/cudalibs"; then
    expect gpu_check_nccl_found_in_wheel "$report" "libnccl.so.2: found in $tmp/site/nvidia/nccl/lib \(wheel\)"
    expect gpu_check_nccl_where_in_verdict "$(cat "$o1/parts/libs.verdict" 2>/dev/null)" "NCCL from $tmp/site/nvidia/nccl/lib"
else
    echo "SKIP gpu_check_nccl_found_in_wheel: ./zerotrain is built without CUDA (CUDA=0)"
fi
if grep -q 'from the system, not the pack' <<<"$report"; then fail gpu_check_nothing_from_system "$(grep 'from the system' <<<"$report")"
else pass gpu_check_nothing_from_system; fi
# PMIx's plugins come from the pack too: the system's (here the foreign one above) were loaded by
# every singleton and its orted, which warned in every log
pmix_warned=$(grep -l 'pmix_mca_base_component_repository_open' "$o1"/logs/*.log 2>/dev/null | head -3)
if [ -n "$pmix_warned" ]; then fail gpu_check_pmix_plugins_from_pack "$(grep -h -m1 -A1 'pmix_mca_base_component_repository_open' $pmix_warned | head -2)"
else pass gpu_check_pmix_plugins_from_pack; fi
selftest=$(cat "$o1/parts/selftest.verdict" 2>/dev/null)
expect gpu_check_selftest_no_gpu "$selftest" "^no GPU"
selftest2=$(cat "$o1/parts/selftest2.verdict" 2>/dev/null)
expect gpu_check_selftest_cpu_1rank "$selftest2" "cpu harness 1 rank\(s\): PASS"
expect gpu_check_selftest_cpu_2ranks_packed_mpirun "$selftest2" "cpu harness 2 rank\(s\): PASS"
expect gpu_check_smoke_no_gpu_1rank "$(cat "$o1/parts/smoke.verdict" 2>/dev/null)" "^no GPU.*sim side of 1 cases trained on 1 rank"
expect gpu_check_smoke_losses_1rank "$(cat "$o1/smoke/s3-param-nvme-opt-nvme-overlap-on.sim.loss" 2>/dev/null)" "^[0-9]+\.[0-9]+"$'\n'"[0-9]+\.[0-9]+$"
expect gpu_check_10b_estimate "$(cat "$o1/logs/10b_estimate.log" 2>/dev/null)" "stage 2: "
# the largest GPT-2 for one 80 GiB GPU with parameter offload: estimate's answer, training skipped
expect gpu_check_largest_no_gpu "$(cat "$o1/parts/largest.verdict" 2>/dev/null)" "^no GPU.*params cpu: L[0-9]+ C[0-9]+ \([0-9.]+M parameters\), training skipped;params nvme: L[0-9]+ C[0-9]+"
expect gpu_check_report_verdict_table "$report" "\| libs \| [0-9]+ \([0-9]+\) \| PASS.*\| selftest \| [0-9]+ \([0-9]+\) \| no GPU.*\| smoke \| [^|]*\| no GPU.*\| 10b \| "

# 2 ranks under the packed mpirun: another smoke case, and a tensor-parallel one
o2=$tmp/out2
log=$("$pack/run" --out "$o2" --parts smoke --cases '^(s2-opt-cpu-overlap-off|tp2-s3-partition)$' --ranks 2 --steps 2 2>&1); rc=$?
if ((rc == 0)); then pass gpu_check_run_2ranks; else fail gpu_check_run_2ranks "exit $rc: $(tail -n 8 <<<"$log")"; fi
expect gpu_check_smoke_no_gpu_2ranks "$(cat "$o2/parts/smoke.verdict" 2>/dev/null)" "^no GPU.*sim side of 2 cases trained on 2 rank"
expect gpu_check_smoke_tp2_losses_2ranks "$(cat "$o2/smoke/tp2-s3-partition.sim.loss" 2>/dev/null)" "^[0-9]+\.[0-9]+"$'\n'"[0-9]+\.[0-9]+$"

# a library missing from the pack (here: removed from the unpacked runtime) is named, one line
# each, and the run fails
rt=$(ls -d "$TMPDIR"/zerotrain-gpu-check-runtime.* | head -1)
find "$rt" -name 'libyaml-0.so*' -exec rm -f {} +
touch "$rt/.unpacked"
log=$("$pack/run" --out "$tmp/out3" --parts libs 2>&1); rc=$?
verdict=$(cat "$tmp/out3/parts/libs.verdict" 2>/dev/null)
if ((rc != 0)) && [[ $verdict == "FAIL: 1 missing: libyaml-0.so.2"* ]] && grep -q '^- MISSING: libyaml-0.so.2' "$tmp/out3/report.md"; then
    pass gpu_check_missing_library_named
else
    fail gpu_check_missing_library_named "exit $rc, verdict '$verdict'"
fi
EOF
unshare -m --propagation private bash "$tmp/inside.sh" "$tmp"

# ---------------------------------------------------------------- the budget, rehearsed
# `run --device sim`: the simulated GPU stands in for the GPU (shapes shrunk), and
# ZT_GPU_CHECK_VIRTUAL_CLOCK=5 charges 5 s a step whatever it took, so which parts run, are cut or
# are skipped is the budget logic's answer alone, not this machine's speed. With --budget 100:
# smoke gets its least (15 s: one case of two steps, the other two cut), mfu its least, 10b (least
# 120 s) is skipped, twinflow gets the rest; then `--parts rest` runs smoke and 10b into the same
# report, which keeps the first call's verdicts.
if ! ./zerotrain config configs/tiny.yaml --set device=sim >/dev/null 2>&1; then
    echo "SKIP gpu_check_budget: this binary has no simulated GPU"
    exit 0
fi
reh=$tmp/rehearsal
cases='^(s0-none|s1-none|s3-none)$'
log=$(ZT_GPU_CHECK_VIRTUAL_CLOCK=5 "$pack/run" --device sim --out "$reh" --budget 100 --parts smoke,mfu,10b,twinflow \
    --cases "$cases" --steps 2 2>&1); rc=$?
v() { cat "$reh/parts/$1.verdict" 2>/dev/null; }
if ((rc == 0)); then pass gpu_check_budget_run; else fail gpu_check_budget_run "exit $rc: $(tail -n 8 <<<"$log")"; fi
expect gpu_check_budget_cut_names_what "$(v smoke)" "^CUT \(budget: 2 case\(s\) not run\): PASS: 1 cases, sim within"
expect gpu_check_budget_least_time "$(v mfu)" "^PASS: GPT-2 L2 C64"
expect gpu_check_budget_skipped "$(v 10b)" "^SKIPPED \(budget\): 75s of the 100s left, the part needs 205s at least"
expect gpu_check_budget_last_part_gets_rest "$(v twinflow)" "^PASS: Twin-Flow 5.6B: best ratio"
# twinflow in the time it had: ratio 1 first, then auto, 0 (the shrunk model fits) and 0.5, each with its setup
expect gpu_check_twinflow_ratio1_first "$(grep -h '^Twin-Flow' "$reh"/logs/twinflow_1.log "$reh"/logs/twinflow_auto.log "$reh"/logs/twinflow_0.log "$reh"/logs/twinflow_0.5.log 2>/dev/null | paste -sd' ')" \
    "ratio 1: [0-9.]+ ms/step, device idle [0-9.]+%, setup [0-9]+s .*ratio auto: .*ratio 0: .*ratio 0.5: "
expect gpu_check_twinflow_ratio0_fits "$(cat "$reh/report.md")" "ratio 0: the model states fit this 80GiB device \(estimate\), timed"
if [ -e "$reh/parts/selftest.verdict" ] || [ -e "$reh/parts/peer.verdict" ]; then fail gpu_check_budget_unselected_absent "$(ls "$reh/parts")"
else pass gpu_check_budget_unselected_absent; fi
expect gpu_check_budget_report_whole "$(cat "$reh/report.md")" "\| smoke \| 10 \(15\) \| CUT.*\| mfu \| 10 \(16\) \| PASS.*\| 10b \| 0 \(205\) \| SKIPPED.*\| twinflow \| 25 \(210\) \| PASS"
log=$(ZT_GPU_CHECK_VIRTUAL_CLOCK=5 "$pack/run" --device sim --out "$reh" --budget 1000 --parts rest --cases "$cases" \
    --steps 2 --bundle "$tmp/bundle" 2>&1); rc=$?
if ((rc == 0)); then pass gpu_check_budget_rest_run; else fail gpu_check_budget_rest_run "exit $rc: $(tail -n 8 <<<"$log")"; fi
expect gpu_check_budget_rest_runs_cut "$(v smoke)" "^PASS: 3 cases, sim within"
expect gpu_check_budget_rest_runs_skipped "$(v 10b)" "^(does not fit this machine|no GPU|PASS|ratio)"
expect gpu_check_budget_rest_keeps_done "$(v twinflow) $(v mfu)" "^PASS: Twin-Flow.* PASS: GPT-2"
expect gpu_check_budget_rest_only_rest "$log" "part smoke: .*part 10b: " 
if grep -q "part twinflow" <<<"$log"; then fail gpu_check_budget_rest_skips_done "twinflow ran again"; else pass gpu_check_budget_rest_skips_done; fi
if [ -f "$tmp/bundle/report.md" ] && tar -tzf "$tmp/bundle/gpu-check-out.tgz" | grep -q 'parts/twinflow.verdict'; then
    pass gpu_check_bundle
else fail gpu_check_bundle "no report.md or tgz in $tmp/bundle"; fi
# twinflow with its least time at 40 s a step: ratio 1 and auto do not fit together, so auto alone runs
# and the verdict is CUT with what it measured (best / ratio 1 needs ratio 1), not a failure
log=$(ZT_GPU_CHECK_VIRTUAL_CLOCK=40 "$pack/run" --device sim --out "$tmp/tf_cut" --budget 65 --parts twinflow 2>&1); rc=$?
expect gpu_check_twinflow_cut_without_ratio1 "rc=$rc $(cat "$tmp/tf_cut/parts/twinflow.verdict" 2>/dev/null)" \
    "^rc=0 CUT \(budget: ratio 1 not run: planned 150s and ratio auto 60s, the part had 60s\): ratio auto: [0-9.]+ ms, idle [0-9.]+%, setup [0-9]+s; best ÷ ratio 1 needs ratio 1$"
log=$("$pack/run" --device sim --out "$reh" --parts rest 2>&1); rc=$?
expect gpu_check_budget_nothing_left "rc=$rc $log" "^rc=0 .*nothing left"
log=$("$pack/run" --device sim --out "$tmp/r0" --budget 3 --parts smoke,peer 2>&1); rc=$?
expect gpu_check_budget_zero "rc=$rc $(cat "$tmp/r0/parts/smoke.verdict" "$tmp/r0/parts/peer.verdict" 2>/dev/null)" \
    "^rc=0 SKIPPED \(budget\).*SKIPPED \(budget\)"

# ---------------------------------------------------------------- the peer: DeepSpeed from the same config
# zerotrain's effective config -> DeepSpeed's JSON -> zerotrain again: every key kept comes back equal
eff=$tmp/peer_eff.yaml
./zerotrain config configs/gpu_peer_1p5b.yaml --set device=sim --set zero_optimization.stage=3 \
    --set zero_optimization.offload_optimizer.ratio=0.5 >"$eff" 2>/dev/null
/usr/bin/python3 test/peer_deepspeed.py translate "$eff" >"$tmp/ds.json"
./zerotrain config "$tmp/ds.json" --set device=sim >"$tmp/peer_eff2.yaml" 2>"$tmp/peer_eff2.err"
if [ -s "$tmp/ds.json" ] && /usr/bin/python3 test/peer_deepspeed.py translate "$tmp/peer_eff2.yaml" | diff -q - "$tmp/ds.json" >/dev/null; then
    pass gpu_check_peer_config_round_trip
else fail gpu_check_peer_config_round_trip "$(head -c 400 "$tmp/peer_eff2.err")"; fi
expect gpu_check_peer_config_keys "$(cat "$tmp/ds.json")" '"stage": 3,.*"offload_optimizer": \{[^}]*"device": "cpu",[^}]*"ratio": 0.5'
if grep -qE '"(model|data|train_iters|overlap_step|device_memory)"' "$tmp/ds.json"; then
    fail gpu_check_peer_config_only_deepspeed_keys "$(grep -oE '"(model|data|train_iters|overlap_step|device_memory)"' "$tmp/ds.json" | head -3)"
else pass gpu_check_peer_config_only_deepspeed_keys; fi
# the packed peer: DeepSpeed's source and the wheels for CPython 3.12 (the GPU machine's Python)
expect gpu_check_peer_packed "$(tar -tzf "$pack/peer/peer.tar.gz" 2>/dev/null | grep -E '^\./(deepspeed/__init__.py|pydantic_core/_pydantic_core\.cpython-312-x86_64-linux-gnu\.so|hjson/__init__.py)$' | sort | paste -sd' ')" \
    "deepspeed/__init__.py .*hjson/__init__.py .*pydantic_core/_pydantic_core.cpython-312"
py312=$(ls -d "$HOME"/.pyenv/versions/3.12*/bin/python3 2>/dev/null | head -1)
if [ -n "$py312" ]; then
    mkdir -p "$tmp/site" && tar -C "$tmp/site" -xzf "$pack/peer/peer.tar.gz"
    out=$(cd "$tmp" && PYTHONPATH="$tmp/site" "$py312" -c 'import pydantic, hjson; print("pydantic", pydantic.VERSION)' 2>&1 &&
        "$py312" -m compileall -q -x 'deepspeed/(ops/csrc|inference/v2/kernels)' "$tmp/site/deepspeed" >/dev/null 2>&1 && echo compiled)
    expect gpu_check_peer_imports_on_py312 "$out" "pydantic 2\..*compiled"
else
    echo "SKIP gpu_check_peer_imports_on_py312: no CPython 3.12 here"
fi
