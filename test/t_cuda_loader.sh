#!/usr/bin/env bash
# t_cuda_loader.sh — the CUDA backend is a library of its own (libzerotrain-cuda.so beside
# ./zerotrain, src/backend/backend_cuda_loader.c) that only a command asking for a GPU loads: a CPU
# run, `config`, `estimate` and `tokenize` map none of CUDA's libraries (the loader's own record of
# what it opens, LD_DEBUG=files, says so), the binary itself links none, and a backend that cannot be
# loaded is named in the same one line as a missing driver (device: auto goes on on the CPU).
set -u
cd "$(dirname "$0")/.." || exit 1
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
if [ ! -f ./libzerotrain-cuda.so ]; then
    echo "SKIP cuda_loader: built without CUDA (no libzerotrain-cuda.so)"
    exit 0
fi
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
opened() { LD_DEBUG=files "$@" 2>&1 >/dev/null | grep -oE 'file=[^ ]*(cudart|cublas|cublasLt|zerotrain-cuda)[^ ]*' | sort -u | paste -sd' '; }
# a corpus of its own (a fresh clone has no build/testdata before the Python tests make it)
head -c 200000 data/tinyshakespeare.txt >"$tmp/text.txt"
./zerotrain tokenize --vocab data/gpt2 "$tmp/text.txt" -o "$tmp/text" >/dev/null 2>&1 || { echo "FAIL cuda_loader_tokenize: cannot tokenize"; exit 1; }
data=(--set "data.train=$tmp/text_train_*.bin" --set "data.val=$tmp/text_val.bin")

if ldd ./zerotrain | grep -qE 'libcu(dart|blas)'; then fail cuda_loader_binary_links_no_cuda "$(ldd ./zerotrain | grep -E 'libcu')"
else pass cuda_loader_binary_links_no_cuda; fi
if ldd ./libzerotrain-cuda.so | grep -q libcudart; then pass cuda_loader_library_links_cuda
else fail cuda_loader_library_links_cuda "$(ldd ./libzerotrain-cuda.so | head -5)"; fi

for cmd in "config configs/tiny.yaml" "estimate configs/gpt2_10b_offload.yaml --ranks 1" \
    "train configs/tiny.yaml --set train_iters=1 --set device=cpu --set checkpoint.dir=$tmp/ck --set metrics_file=null"; do
    name=cuda_loader_$(awk '{print $1}' <<<"$cmd")_maps_no_cuda
    # shellcheck disable=SC2086
    got=$(opened ./zerotrain $cmd "${data[@]}")
    # shellcheck disable=SC2086
    if ./zerotrain $cmd "${data[@]}" >/dev/null 2>&1 && [ -z "$got" ]; then pass "$name"; else fail "$name" "exit status or opened: $got"; fi
done
# asking for the GPU loads the backend (and with it the CUDA runtime); no GPU here, so it says why
got=$(opened ./zerotrain config configs/tiny.yaml --set device=cuda)
if [[ $got == *zerotrain-cuda* && $got == *cudart* ]]; then pass cuda_loader_gpu_loads_backend
else fail cuda_loader_gpu_loads_backend "opened: '$got'"; fi
# a backend that cannot be loaded: one line naming it; device: auto trains on the CPU
out=$(ZEROTRAIN_CUDA_BACKEND=$tmp/none.so ./zerotrain config configs/tiny.yaml --set device=cuda 2>&1); rc=$?
if ((rc != 0)) && [[ $(grep -c 'error' <<<"$out") == 1 && $out == *"the CUDA backend could not be loaded: $tmp/none.so: cannot open shared object file"* ]]; then
    pass cuda_loader_missing_backend_named
else fail cuda_loader_missing_backend_named "rc $rc: $out"; fi
echo 'not an ELF file' >"$tmp/bad.so"
out=$(ZEROTRAIN_CUDA_BACKEND=$tmp/bad.so ./zerotrain train configs/tiny.yaml --set train_iters=1 --set device=auto \
    --set checkpoint.dir="$tmp/ck2" --set metrics_file=null "${data[@]}" 2>&1); rc=$?
if ((rc == 0)) && [[ $out == *"step     1/1"* ]]; then pass cuda_loader_auto_falls_back_to_cpu
else fail cuda_loader_auto_falls_back_to_cpu "rc $rc: $(tail -n 3 <<<"$out")"; fi
