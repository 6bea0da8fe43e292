#!/usr/bin/env bash
# Runs every gnix test: unit tests of the sans-IO machines and the matching
# engine, and the multi-process integration tests that load the provider
# into the real libfabric (tests/), once per wire.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/deps.sh
cargo build --release
# A test that cannot run here (a missing tool, no root for the two-host
# namespaces) prints SKIPPED and passes, or fails under CI=true (.ci/run);
# the skipped ones are listed again at the end, whatever the outcome.
export GNIX_TEST_SKIPPED_LOG=$PWD/target/skipped-tests.txt
rm -f "$GNIX_TEST_SKIPPED_LOG"
trap 'if [ -s "$GNIX_TEST_SKIPPED_LOG" ]; then
        echo "== $(wc -l <"$GNIX_TEST_SKIPPED_LOG") test(s) SKIPPED on this machine:"
        cat "$GNIX_TEST_SKIPPED_LOG"
      fi' EXIT
venv=${GNIX_MPICH_VENV:-$PWD/target/mpich-venv}
[ -x "$venv/bin/mpiexec" ] && export GNIX_MPICH_BIN="$venv/bin"
# Everything once on the default wires (shm between local peers) ...
cargo test --release -- --test-threads=2 "$@"
# ... then the process-level scenarios again on the shm copy fallback
# (no cross-memory attach) and on the udp wire (FI_GNIX_SHM=0).
for wire in copy udp; do
    echo "== integration tests on the $wire wire (GNIX_TEST_WIRE=$wire)"
    # (tests/mpi.rs runs its own matrix of wires, MPI libraries and references)
    GNIX_TEST_WIRE=$wire cargo test --release --test single --test pair --test large --test onesided --test collective \
        -- --test-threads=2 "$@"
done
