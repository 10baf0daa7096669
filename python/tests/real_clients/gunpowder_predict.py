"""Blockwise prediction the way gunpowder users run it with daisy, in the
current directory: a daisy task whose worker function (no argument) builds
a gunpowder 1.4.4 pipeline

    ZarrSource -> Smooth (a prediction stand-in: a 3 x 3 box sum, which
    needs one voxel of context) -> IntensityScaleShift -> ZarrWrite
    -> DaisyRequestBlocks(num_workers=2)

and requests one empty batch; DaisyRequestBlocks forks two fetchers, each
with its own daisy.Client(), that loop over the worker's blocks. The input
and what was written go to result.npz, and each block's fetcher to
blocks/<block id>, for test_real_clients.py to check.

    python gunpowder_predict.py

python/bench/gunpowder_pipeline.py runs the same pipeline (`prepare`,
then `run`, with `fetched` as the check function of a re-run) on this
engine and on daisy 1.2.3.
"""

import os
from pathlib import Path

import daisy
import gunpowder as gp
import numpy as np
import zarr

STORE = "data.zarr"
SHAPE = (62, 82)  # raw; the output leaves out its outermost voxels ...
CONTEXT = gp.Coordinate(1, 1)
BLOCK = gp.Coordinate(10, 20)  # ... and is 6 x 4 blocks of these
RAW, PRED = gp.ArrayKey("RAW"), gp.ArrayKey("PRED")


class Smooth(gp.BatchFilter):
    """PRED is the sum of RAW over each voxel's 3 x 3 neighbourhood: like
    a network, it reads more than it writes."""

    def setup(self):
        spec = self.spec[RAW].copy()
        spec.roi = spec.roi.grow(-CONTEXT, -CONTEXT)
        self.provides(PRED, spec)

    def prepare(self, request):
        deps = gp.BatchRequest()
        deps[RAW] = gp.ArraySpec(roi=request[PRED].roi.grow(CONTEXT, CONTEXT))
        return deps

    def process(self, batch, request):
        raw = batch[RAW].data
        height, width = raw.shape[0] - 2, raw.shape[1] - 2
        box = sum(raw[dy : dy + height, dx : dx + width] for dy in range(3) for dx in range(3))
        spec = self.spec[PRED].copy()
        spec.roi = request[PRED].roi
        outputs = gp.Batch()
        outputs[PRED] = gp.Array(box.astype(np.float32), spec)
        return outputs


def record(block, start, duration):
    """Which process fetched the block, and the worker that forked it."""
    Path("blocks", str(block.block_id[1])).write_text(f"{os.getpid()} {os.getppid()}")


def fetched(block):
    """Whether a run fetched the block before (the check function of the
    benchmark's re-run)."""
    return Path("blocks", str(block.block_id[1])).exists()


def predict():
    """The worker function: one pipeline, built once, for all its blocks."""
    reference = gp.BatchRequest()
    reference[RAW] = gp.ArraySpec(roi=gp.Roi((0, 0), BLOCK + CONTEXT * 2))
    reference[PRED] = gp.ArraySpec(roi=gp.Roi(CONTEXT, BLOCK))
    pipeline = (
        gp.ZarrSource(STORE, {RAW: "raw"})
        + Smooth()
        + gp.IntensityScaleShift(PRED, 2, 1)
        + gp.ZarrWrite({PRED: "pred"}, store=STORE)
        + gp.DaisyRequestBlocks(reference, {RAW: "read_roi", PRED: "write_roi"}, num_workers=2,
                                block_done_callback=record)
    )
    with gp.build(pipeline):
        pipeline.request_batch(gp.BatchRequest())


def prepare():
    """The input, the output array and the blocks' directory, here."""
    root = zarr.open_group(STORE, mode="w")
    raw = root.create_dataset("raw", data=np.random.default_rng(3).integers(1, 100, SHAPE).astype(np.float32),
                              chunks=(16, 16))
    raw.attrs.update(offset=[0, 0], resolution=[1, 1])
    # Made here, before any worker: ZarrWrite would otherwise create it in
    # whichever fetcher comes first, racing the others. Chunks are blocks,
    # so no two fetchers write to one chunk.
    output = gp.Roi(CONTEXT, gp.Coordinate(SHAPE) - CONTEXT * 2)
    pred = root.create_dataset("pred", shape=output.shape, chunks=BLOCK, dtype=np.float32, fill_value=0)
    pred.attrs.update(offset=list(output.offset), resolution=[1, 1])
    Path("blocks").mkdir()
    return root


def run(check_function=None):
    """The daisy task, run: whether every block completed."""
    task = daisy.Task(
        "predict",
        total_roi=daisy.Roi((0, 0), SHAPE),
        read_roi=daisy.Roi((0, 0), BLOCK + CONTEXT * 2),
        write_roi=daisy.Roi(CONTEXT, BLOCK),
        process_function=predict,
        check_function=check_function,
        read_write_conflict=False,
        num_workers=2,
    )
    return daisy.run_blockwise([task])


def main():
    # The test asks for the switch; a real daisy answering here would make
    # the checks say nothing about this engine.
    assert daisy.__name__ == "daisy_rs", daisy.__name__
    root = prepare()
    assert run(), "not every block completed"
    np.savez("result.npz", raw=root["raw"][:], pred=root["pred"][:])
    print("DONE")


if __name__ == "__main__":
    main()
