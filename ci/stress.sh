#!/usr/bin/env bash
# Runs the whole Rust suite RUNS times in a row (default 20), as CI runs
# it (CI=1: a test whose requirement is missing fails instead of
# skipping), stopping at the first red run; each run's log is kept in
# target/stress/. For flakes that only show under load, run it while the
# machine is busy, e.g. with a release build looping beside it:
#   bash ci/stress.sh 20 & while [ -e /proc/$! ]; do touch daisy-core/src/lib.rs; cargo build --release; done
# Needs what .ci/run starts: SLURM (and slurmrestd), Chromium, DAISY2_PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
export CI=1
mkdir -p target/stress
cargo nextest run --workspace --no-run
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  if cargo nextest run --workspace --no-fail-fast >"target/stress/run-$i.log" 2>&1; then
    verdict=green
  else
    verdict=red
  fi
  summary=$(grep 'Summary' "target/stress/run-$i.log" | tail -1)
  echo "run $i of $runs: $verdict in $(($(date +%s) - start)) s; $summary"
  [ "$verdict" = green ] || exit 1
done
