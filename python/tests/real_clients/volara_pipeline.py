"""A volara 1.0.5 segmentation pipeline on synthetic affinities, run in the
current directory: ExtractFrags -> AffAgglom -> GraphMWS, three dependent
daisy tasks in one run. What it produced (fragments, the region adjacency
graph and the segmentation the fragment -> segment table gives) goes to
result.npz, for test_real_clients.py to compare between ways of running
it.

    python volara_pipeline.py serial|multiprocessing|local-worker

serial: volara's run_blockwise(multiprocessing=False), daisy.SerialServer
in this process. multiprocessing: volara's default, daisy workers (two per
task, but one for GraphMWS's one block) running volara's worker loop.
local-worker: the same, but with worker_config=LocalWorker() for
ExtractFrags and AffAgglom, so each of their worker functions starts
`volara-cli blockwise-worker`, a process of its own that calls
daisy.Client().

volara's Relabel is left out on purpose: every process running it
compiles numba code first (seconds each), which tests nothing of the
engine, and its serial pipeline cannot run it after GraphMWS (it loads the
table before any task ran); the table is applied to the fragments here.
"""

import sys
from pathlib import Path

import daisy
import numpy as np
from funlib.geometry import Coordinate
from funlib.persistence.arrays import prepare_ds
from volara.blockwise import AffAgglom, ExtractFrags, GraphMWS
from volara.datasets import Affs, Labels
from volara.dbs import SQLite
from volara.logging import set_log_basedir
from volara.lut import LUT
from volara.segment_utils import seg_to_affgraph
from volara.workers import LocalWorker

MODE = sys.argv[1]
# The test asks for the switch; a real daisy answering here would make
# every comparison say nothing about this engine.
assert daisy.__name__ == "daisy_rs", daisy.__name__

NEIGHBORHOOD = [[1, 0], [0, 1]]
SIZE, REGION = 40, 8  # 5 x 5 regions of 8 x 8 voxels ...
BLOCK = Coordinate(10, 10)  # ... that blocks of 10 x 10 cut through
here = Path.cwd()  # volara-cli workers read these paths back from a config file
set_log_basedir(here / "volara_logs")


def synthetic_affs():
    """Affinities of a grid of square regions. Blocks cut the regions into
    several fragments, which only the agglomeration across blocks merges
    back; noise keeps edge scores from tying, which would leave the
    merge order, and so the table, to chance."""
    labels = np.zeros((SIZE, SIZE), dtype=np.uint64)
    for i, (y, x) in enumerate(np.ndindex(SIZE // REGION, SIZE // REGION)):
        labels[y * REGION : (y + 1) * REGION, x * REGION : (x + 1) * REGION] = i + 1
    clean = seg_to_affgraph(labels, nhood=NEIGHBORHOOD).astype(np.float32)
    noise = np.random.default_rng(7).random(clean.shape, dtype=np.float32)
    affs = clean * 0.75 + noise * 0.25
    path = here / "data.zarr" / "affs"
    array = prepare_ds(path, shape=affs.shape, voxel_size=Coordinate(1, 1), dtype=affs.dtype, mode="w")
    array[:] = affs
    array._source_data.attrs["neighborhood"] = NEIGHBORHOOD
    return path


affs = Affs(store=synthetic_affs())
frags = Labels(store=here / "data.zarr" / "frags")
db = SQLite(path=here / "data.zarr" / "rag.sqlite", node_attrs={"size": "int"},
            edge_attrs={"aff": "float"}, ndim=2)
lut = LUT(path=here / "data.zarr" / "lut.npz")

workers = {}
if MODE != "serial":
    workers["num_workers"] = 2  # blocks of one task processed side by side
if MODE == "local-worker":
    workers["worker_config"] = LocalWorker()

extract_frags = ExtractFrags(db=db, affs_data=affs, frags_data=frags, block_size=BLOCK,
                             context=Coordinate(2, 2), bias=[-0.5, -0.5], **workers)
aff_agglom = AffAgglom(db=db, affs_data=affs, frags_data=frags, block_size=BLOCK,
                       context=Coordinate(2, 2), scores={"aff": [Coordinate(1, 0), Coordinate(0, 1)]},
                       **workers)
# A single block by design (the whole graph at once), so one worker, and
# that worker runs volara's loop itself: a volara-cli process for it would
# only repeat what the other two tasks show, at seconds of start-up.
graph_mws = GraphMWS(db=db, lut=lut, weights={"aff": (1.0, -0.5)}, roi=affs.array("r").roi)

(extract_frags + aff_agglom + graph_mws).run_blockwise(multiprocessing=MODE != "serial")

fragments = frags.array("r")[:]
graph = db.open("r").read_graph()
# Which id names a segment is the agglomeration's choice and follows the
# order the database returns edges in; which fragments it joins is the
# result. Each segment is named by its smallest fragment here.
table = lut.load()
segment_of = dict(zip(table[0].tolist(), table[1].tolist()))
name = {}
for fragment in sorted(segment_of):
    name.setdefault(segment_of[fragment], fragment)
segments = np.vectorize(lambda f: name[segment_of[int(f)]] if f else 0, otypes=[np.uint64])(fragments)
np.savez(
    "result.npz",
    frags=fragments,
    segs=segments,
    nodes=np.array(sorted((int(n), *map(int, a["position"]), int(a["size"]))
                          for n, a in graph.nodes(data=True)), dtype=np.int64),
    edges=np.array(sorted((min(int(u), int(v)), max(int(u), int(v)), float(a["aff"]))
                          for u, v, a in graph.edges(data=True)), dtype=np.float64),
)
print("DONE", MODE)
