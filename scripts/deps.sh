#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build and test gnix.
# Idempotent: does nothing when everything is there.
set -euo pipefail
need=()
for pkg in libfabric-dev libfabric-bin openmpi-bin libopenmpi-dev gcc pkg-config iproute2 iptables python3; do
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
