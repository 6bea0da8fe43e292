#!/usr/bin/env bash
# Runs every gnix test: unit tests of the sans-IO machines and the matching
# engine, and the multi-process integration tests that load the provider
# into the real libfabric (tests/).
set -euo pipefail
cd "$(dirname "$0")"
./scripts/deps.sh
cargo build --release
venv=${GNIX_MPICH_VENV:-$PWD/target/mpich-venv}
[ -x "$venv/bin/mpiexec" ] && export GNIX_MPICH_BIN="$venv/bin"
cargo test --release -- --test-threads=2 "$@"
