#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build and test gnix.
# Idempotent: does nothing when everything is there.
set -euo pipefail
need=()
for pkg in libfabric-dev libfabric-bin openmpi-bin libopenmpi-dev gcc libc6-dev pkg-config iproute2 iptables python3 python3-venv; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "cargo (Rust toolchain) is required" >&2; exit 1; }

# MPICH from PyPI: its wheel bundles libfabric 2.x, the second libfabric
# gnix must load into (tests/mpi.rs runs the MPICH programs through it).
venv=${GNIX_MPICH_VENV:-$(dirname "$0")/../target/mpich-venv}
# Under CI (CI=true) every test must run, so a failure here is fatal.
mpich_missing() {
  echo "$1: MPICH tests will be skipped"
  if [ "${CI:-}" = true ]; then exit 1; fi
}
if [ ! -x "$venv/bin/mpiexec" ]; then
  if python3 -m venv "$venv" >/dev/null 2>&1; then
    "$venv/bin/pip" install -q mpich >/dev/null 2>&1 || mpich_missing "pip install mpich failed"
  else
    mpich_missing "python3 -m venv failed"
  fi
fi
