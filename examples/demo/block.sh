#!/bin/sh
# One block of the demo: record which region this block wrote, in
# <run dir>/output/<task>/<block id>.txt. $DAISY_READ_ROI and
# $DAISY_WRITE_ROI hold the block's regions as JSON as well.
set -eu
task=$1 block_id=$2 offset=$3 shape=$4
out=daisy_run/demo/output/$task
mkdir -p "$out"
printf 'block %s of %s writes offset %s shape %s (reads %s)\n' \
    "$block_id" "$task" "$offset" "$shape" "$DAISY_READ_ROI" > "$out/$block_id.txt"
