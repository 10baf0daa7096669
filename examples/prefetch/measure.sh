#!/usr/bin/env bash
# Runs the same I/O-bound pipeline (60 blocks, 1 worker, worker.py)
# through the real driver with prefetch 0 and prefetch 2, each at
# batch_size 1 and 8, and prints blocks/s and the prefetch speed-up.
#
# blocks/s counts from the worker's connection to the last block_done in
# events.jsonl, so driver start-up and the Python start-up are left out.
#
# Usage: examples/prefetch/measure.sh [blocks]   (from anywhere)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
blocks=${1:-60}
cargo build -q --release --manifest-path "$root/Cargo.toml" -p daisy-driver -p daisy-worker
export DAISY_WORKER_BIN="$root/target/release/daisy-worker"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/worker.py" "$work/"

# Writes the pipeline, runs it, prints blocks/s.
run() {
    local batch=$1 prefetch=$2 name="p${2}b${1}"
    cat > "$work/$name.toml" <<TOML
name = "$name"
[[task]]
id = "io"
total_roi = { offset = [0], shape = [$blocks] }
read_roi = { offset = [0], shape = [1] }
write_roi = { offset = [0], shape = [1] }
max_workers = 1
batch_size = $batch
prefetch = $prefetch
command = ["python3", "worker.py"]
TOML
    (cd "$work" && "$root/target/release/daisy-driver" run "$name.toml" > /dev/null 2>&1)
    python3 - "$work/daisy_run/$name/events.jsonl" "$blocks" <<'PY'
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
start = min(e["time"] for e in events if e["event"] == "worker_connected")
done = [e["time"] for e in events if e["event"] == "block_done"]
assert len(done) == int(sys.argv[2]), f"{len(done)} blocks done"
print(f"{len(done) / (max(done) - start):.2f}")
PY
}

for batch in 1 8; do
    p0=$(run "$batch" 0)
    p2=$(run "$batch" 2)
    ratio=$(python3 -c "print(f'{$p2 / $p0:.2f}')")
    echo "batch_size $batch: prefetch 0: $p0 blocks/s, prefetch 2: $p2 blocks/s, ratio ${ratio}x"
done
