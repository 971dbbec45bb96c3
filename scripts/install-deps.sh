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
  python3-venv             # the PyPI venv below
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
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "install-deps: done"
fi

# ---- PyPI packages (monitors: TensorBoard reads our event files in test/t_monitors.py) ----
# In a venv at a fixed path that also sees Debian's python3 packages (numpy, torch, ...), so Debian's
# own python stays untouched. Pinned; skipped when the pinned versions are already there.
ZT_PYENV=${ZT_PYENV:-/opt/zerotrain-py}
pypi_pins=(
  tensorboard==2.21.0 tensorboard-data-server==0.7.2 protobuf==7.36.2 grpcio==1.85.1 absl-py==2.5.1
  Markdown==3.11.3 Werkzeug==3.1.9 MarkupSafe==3.0.4
)
pins_present() { # every pin installed at its version in the venv
  "$ZT_PYENV/bin/python3" - "${pypi_pins[@]}" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(any(version(name) != want for name, want in (pin.split("==") for pin in sys.argv[1:])))
PY
}
if ! pins_present; then
  echo "install-deps: installing into $ZT_PYENV: ${pypi_pins[*]}"
  [[ -x $ZT_PYENV/bin/python3 ]] || $SUDO /usr/bin/python3 -m venv --system-site-packages "$ZT_PYENV"
  $SUDO "$ZT_PYENV/bin/python3" -m pip install -q --disable-pip-version-check "${pypi_pins[@]}"
else
  echo "install-deps: PyPI packages present in $ZT_PYENV"
fi
