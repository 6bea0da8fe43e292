#!/usr/bin/env bash
# The main job: build gnix, show that libfabric loads it, and move data
# between two processes over it, with latency and bandwidth printed next to
# libfabric's tcp;ofi_rxm (same client, same run).
set -euo pipefail
cd "$(dirname "$0")"
./scripts/deps.sh
cargo build --release
dir=target/release/fi-provider
mkdir -p "$dir"
ln -sf ../libgnix_fi.so "$dir/libgnix-fi.so"
export FI_PROVIDER_PATH=$PWD/$dir
echo "== fi_info -p gnix"
fi_info -p gnix
echo
echo "== two processes over gnix (udp wire), next to tcp;ofi_rxm"
exec python3 bench/run --quick --providers gnix-udp,tcp --sizes 8,1k,64k,1m "$@"
