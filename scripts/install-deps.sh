#!/usr/bin/env bash
# install-deps.sh: install the Debian packages zerotrain needs to build, test and run, and the
# PyPI packages the cross-check tests load (transformers, tokenizers, safetensors, tiktoken,
# tensorboard) into ONE virtual environment that also sees Debian's torch and numpy
# ($ZEROTRAIN_PYENV, default ~/.cache/zerotrain/pyenv; Debian's own python is left as it is; the
# tests enter it through test/ztlib.py's use_pypi_env).
# Idempotent: packages already present are skipped, apt-get is not touched when nothing is missing,
# and pip is not run when the environment already holds the pinned versions. Uses sudo (for apt)
# when not root. Usage: scripts/install-deps.sh [--with-slurm]
set -euo pipefail

packages=(
  build-essential make pkg-config
  libopenblas-dev          # SGEMM (cblas)
  libyaml-dev              # config parser
  libpcre2-dev             # GPT-2 pre-tokenizer regex
  libutf8proc-dev          # NFC normalizer of a tokenizer.json (Qwen2)
  libhdf5-dev hdf5-tools   # checkpoints (h5dump for tests)
  liburing-dev             # asynchronous I/O of the NVMe swap files (io_uring)
  libopenmpi-dev openmpi-bin
  python3 python3-numpy python3-torch python3-h5py python3-regex   # reference cross-checks
  python3-venv python3-yaml python3-requests   # the PyPI environment below
  python3-matplotlib       # scripts/plot
  iproute2 util-linux procps   # scripts/netns-cluster: ip netns, unshare, sysctl (test/t_multinode.py)
)
# a single-node Slurm for test/t_slurm.py (which calls this script with --with-slurm itself)
[[ " $* " == *" --with-slurm "* ]] && packages+=(slurm-wlm munge)

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} Debian packages present"
else
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# PyPI: versions that ship cp311 x86_64 wheels and work with Debian 12's torch 1.13 and numpy 1.24
# (test/t_hf_transformers.py, t_tiktoken.py and t_monitors.py check them). The stamp file records
# the pins an environment holds.
pypi=(transformers==4.40.2 tokenizers==0.19.1 safetensors==0.4.3 huggingface-hub==0.23.4 tiktoken==0.7.0
      filelock==3.15.4 fsspec==2024.6.1 tqdm==4.66.4
      tensorboard==2.21.0 tensorboard-data-server==0.7.2 protobuf==7.36.2 grpcio==1.85.1 absl-py==2.5.1
      Markdown==3.11.3 Werkzeug==3.1.9 MarkupSafe==3.0.4)
pyenv=${ZEROTRAIN_PYENV:-$HOME/.cache/zerotrain/pyenv}
if [[ -x $pyenv/bin/python && "$(cat "$pyenv/zerotrain-pins" 2>/dev/null)" == "${pypi[*]}" ]]; then
  echo "install-deps: $pyenv holds the ${#pypi[@]} pinned PyPI packages"
else
  echo "install-deps: installing ${pypi[*]} into $pyenv"
  rm -rf "$pyenv"
  /usr/bin/python3 -m venv --system-site-packages "$pyenv"
  "$pyenv/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: "${pypi[@]}"
  echo "${pypi[*]}" >"$pyenv/zerotrain-pins"
fi
echo "install-deps: done"
