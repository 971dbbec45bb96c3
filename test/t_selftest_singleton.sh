#!/usr/bin/env bash
# t_selftest_singleton.sh — the selftest's hang check spawns a child that must start MPI as a
# singleton of its own (src/selftest/selftest_watchdog.c). On a machine without ssh (the lent GPU
# machines), Open MPI 4.1's default launcher ends a singleton's daemon unless it is told to launch
# nothing remote; such a machine's own configuration says so in an OMPI_MCA_* variable, which the
# child once lost with the job's variables (the first H200 run of gpu-check). Here, in a mount
# namespace where /usr/bin/ssh is an empty file that cannot run, `selftest --singleton-probe` spawns
# that child the way the hang check does, from a singleton and from each rank of `mpirun -np 2`
# (whose job variables the child must drop), and the child must start MPI as a world of one.
cd "$(dirname "$0")/.."
if ! unshare -m true 2>/dev/null; then
  echo "SKIP t_selftest_singleton: no mount namespace here (unshare -m needs root)"
  exit 0
fi
noexec=$(mktemp /tmp/zt-noexec-XXXXXX)
trap 'rm -f "$noexec"' EXIT
# the machine's own way around the missing ssh, as an image would set it; the rest is a bare env
base=(env -i PATH=/usr/bin:/bin HOME="${HOME:-/root}" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_plm=isolated)
out=$(unshare -m bash -c '
  # a machine without ssh needs nothing hidden
  if [ -e /usr/bin/ssh ]; then mount --bind "$1" /usr/bin/ssh || exit 3; fi
  shift
  "$@" sh -c "ssh -V" >/dev/null 2>&1 && { echo "FAIL ssh still runs in the namespace"; exit 1; }
  echo "--- singleton"
  "$@" ./zerotrain selftest --singleton-probe; a=$?
  echo "--- mpirun -np 2"
  "$@" mpirun -np 2 --oversubscribe --bind-to none ./zerotrain selftest --singleton-probe; b=$?
  exit $((a || b))' _ "$noexec" "${base[@]}" 2>&1)
rc=$?
echo "$out"
pass=$(grep -c '^PASS a singleton child' <<<"$out")
if [ $rc -ne 0 ] || [ "$pass" -ne 3 ]; then
  echo "FAIL t_selftest_singleton: exit $rc, $pass of 3 singleton children started MPI"
  exit 1
fi
echo "PASS t_selftest_singleton: 3 of 3 singleton children started MPI without ssh"
