#!/usr/bin/env bash
# install-deps.sh: install the Debian packages zerotrain needs to build, test and run.
# Idempotent: packages already present are skipped, and apt-get is not touched when nothing is
# missing. Uses sudo when not root. Usage: scripts/install-deps.sh [--with-slurm]
set -euo pipefail

packages=(
  build-essential make pkg-config
  libopenblas-dev          # SGEMM (cblas)
  libyaml-dev              # config parser
  libpcre2-dev             # GPT-2 pre-tokenizer regex
  libhdf5-dev hdf5-tools   # checkpoints (h5dump for tests)
  libopenmpi-dev openmpi-bin
  python3 python3-numpy python3-torch python3-h5py python3-regex   # reference cross-checks
  python3-matplotlib       # scripts/plot
  iproute2 util-linux procps   # scripts/netns-cluster: ip netns, unshare, sysctl (test/t_multinode.py)
)
# a single-node Slurm for test/t_slurm.py (which calls this script with --with-slurm itself)
[[ " $* " == *" --with-slurm "* ]] && packages+=(slurm-wlm munge)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
