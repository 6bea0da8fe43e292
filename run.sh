#!/usr/bin/env bash
# The main job: build gnix, show that libfabric loads it, and move data
# between two processes over it — on the shm wire (the default between local
# processes) and on the udp wire — with latency and bandwidth printed next to
# libfabric's shm and tcp;ofi_rxm (same client, same run).
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
echo "== two processes over gnix (shm and udp wires), next to shm and tcp;ofi_rxm"
python3 bench/run --quick --no-mpi --providers gnix,shm,gnix-udp,tcp --sizes 8,1k,64k,1m "$@"
echo
echo "== real clients (upstream fabtests if built, fi_pingpong, Open MPI) next to shm and ob1+vader"
exec python3 bench/clients --quick --rounds 1
