//! A task's `writes`: the Zarr arrays (v2 or v3) its blocks write into,
//! read at load and placed in world units as daisy-core's [`WriteGrid`]s,
//! so that the scheduler keeps two blocks from writing into one shard (or
//! chunk) at once.
//!
//! An array's spatial dimensions are its last ones, as many as the
//! task's (the leading ones are channels, written whole by every block).
//! funlib.persistence's `voxel_size` (or the older `resolution`) and
//! `offset` attributes place it: an array without them starts at 0 with
//! voxels of 1.
//!
//! Blocks that write parts of one chunk are safe under the lock, but
//! they run one after another where they could have run side by side: a
//! task whose blocks split chunks is refused unless it says
//! `share_chunks = true`, and the refusal names the write shape that
//! aligns.

use daisy_core::coordinate::MAX_COORDINATE;
use daisy_core::geometry::{geometry_problems, BlockGrid};
use daisy_core::{Coordinate, Roi, TaskIdx, TaskSpec, WriteGrid, WriteLayout};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The grids of the arrays at `paths` (relative to `base`), placed on
/// `spec`'s dimensions; blocks splitting chunks are refused unless
/// `share_chunks`.
pub(super) fn write_grids(
    paths: &[String],
    share_chunks: bool,
    spec: &TaskSpec,
    base: impl Fn(&Path) -> PathBuf,
) -> Result<Vec<WriteGrid>, String> {
    if paths.is_empty() || !geometry_problems(spec).is_empty() {
        // Regions refused already: there is no block grid to check.
        return Ok(Vec::new());
    }
    let dims = spec.total_roi.dims();
    let blocks = BlockGrid::new(TaskIdx(0), spec);
    let mut grids = Vec::with_capacity(paths.len());
    for path in paths {
        let at = base(Path::new(path));
        let grid = read_grid(&at, dims).map_err(|why| format!("writes = {path:?}: {why}"))?;
        let layout = WriteLayout::of(&blocks, &grid);
        if layout.blocks_sharing_chunks > 0 && !share_chunks {
            return Err(splitting_chunks(path, spec, &grid, &layout, &blocks));
        }
        grids.push(grid);
    }
    Ok(grids)
}

/// The refusal of blocks that split chunks, with the shape that aligns.
fn splitting_chunks(
    path: &str,
    spec: &TaskSpec,
    grid: &WriteGrid,
    layout: &WriteLayout,
    blocks: &BlockGrid,
) -> String {
    let total = blocks.cells().iter().map(|n| n as u64).product::<u64>();
    let mut message = format!(
        "writes = {path:?}: {} of {total} blocks write parts of chunks that other blocks \
         also write (write_roi shape {} on chunks of {}), and such writes are lost when \
         they run at once. A write_roi shape of {} aligns with the chunks",
        layout.blocks_sharing_chunks,
        spec.write_roi.shape(),
        grid.chunk,
        layout.aligned_write_shape,
    );
    if !layout.origin_aligned {
        let off = blocks.total_write.offset() - grid.region.offset();
        message += &format!(
            ", once the first block's write region begins on a chunk boundary (it \
             begins {off} from the array's offset {})",
            grid.region.offset()
        );
    }
    message + "; or set share_chunks = true to run blocks that share a chunk one at a time"
}

/// The grid of the Zarr array at `path`, on `dims` spatial dimensions.
fn read_grid(path: &Path, dims: usize) -> Result<WriteGrid, String> {
    let array = ArrayMeta::read(path)?;
    let voxel = array.attribute(&["voxel_size", "resolution"], dims, 1)?;
    if !voxel.all(|v| v > 0) {
        return Err(format!(
            "its voxel size {voxel} must be positive in every dimension"
        ));
    }
    let offset = array.attribute(&["offset"], dims, 0)?;
    if let Some(v) = offset.iter().find(|v| v.unsigned_abs() > MAX_COORDINATE) {
        return Err(format!(
            "its offset {offset} has an entry {v}, beyond the supported ±{MAX_COORDINATE}"
        ));
    }
    // Extents in world units: the last `dims` values times the voxel size.
    let world = |values: &[u64], what: &str| -> Result<Coordinate, String> {
        let skip = values.len().checked_sub(dims).ok_or_else(|| {
            format!("its {what} {values:?} has fewer dimensions than the task's {dims}")
        })?;
        let scaled = (values[skip..].iter().zip(voxel.iter()))
            .map(|(&v, w)| v.checked_mul(w as u64).filter(|&e| e <= MAX_COORDINATE))
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| {
                format!("its {what} {values:?} in world units (voxel size {voxel}) is beyond the supported {MAX_COORDINATE}")
            })?;
        Ok(Coordinate::new(
            &scaled.iter().map(|&e| e as i64).collect::<Vec<_>>(),
        ))
    };
    let shard = array.shard.as_deref().map(|s| world(s, "shard shape"));
    let grid = WriteGrid {
        array: canonical_name(path),
        region: Roi::new(offset, world(&array.shape, "shape")?),
        chunk: world(&array.chunk, "chunk shape")?,
        shard: shard.transpose()?,
    };
    match grid.problem(dims) {
        Some(problem) => Err(problem),
        None => Ok(grid),
    }
}

/// The array's name across tasks: its path made absolute, so that two
/// tasks naming it from different places share its locks.
fn canonical_name(path: &Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    path.display().to_string()
}

/// What an array's metadata says about its layout.
struct ArrayMeta {
    shape: Vec<u64>,
    /// The chunk shape: inside shards, for a sharded array.
    chunk: Vec<u64>,
    shard: Option<Vec<u64>>,
    attributes: Value,
}

impl ArrayMeta {
    /// Reads `zarr.json` (v3) or `.zarray` and `.zattrs` (v2).
    fn read(dir: &Path) -> Result<Self, String> {
        let v3 = dir.join("zarr.json");
        if v3.is_file() {
            return Self::v3(&read_json(&v3)?).map_err(|why| format!("{}: {why}", v3.display()));
        }
        let v2 = dir.join(".zarray");
        if v2.is_file() {
            let attributes = dir.join(".zattrs");
            let attributes = match attributes.is_file() {
                true => read_json(&attributes)?,
                false => Value::Null,
            };
            return Self::v2(&read_json(&v2)?, attributes)
                .map_err(|why| format!("{}: {why}", v2.display()));
        }
        match dir.exists() {
            true => Err(format!(
                "{} is not a Zarr array (it has no zarr.json nor .zarray)",
                dir.display()
            )),
            false => Err(format!("{} does not exist", dir.display())),
        }
    }

    fn v3(meta: &Value) -> Result<Self, String> {
        if meta["node_type"] != "array" {
            return Err("it is not an array (node_type is not \"array\")".into());
        }
        let outer = shape_at(&meta["chunk_grid"]["configuration"]["chunk_shape"])
            .ok_or("it has no regular chunk grid (chunk_grid.configuration.chunk_shape)")?;
        let codecs = meta["codecs"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let sharding = codecs.iter().find(|c| c["name"] == "sharding_indexed");
        let inner = sharding.map(|codec| {
            shape_at(&codec["configuration"]["chunk_shape"])
                .ok_or("its sharding_indexed codec has no chunk_shape")
        });
        let (chunk, shard) = match inner.transpose()? {
            Some(inner) => (inner, Some(outer)),
            None => (outer, None),
        };
        Ok(Self {
            shape: shape_at(&meta["shape"]).ok_or("it has no shape")?,
            chunk,
            shard,
            attributes: meta["attributes"].clone(),
        })
    }

    fn v2(meta: &Value, attributes: Value) -> Result<Self, String> {
        Ok(Self {
            shape: shape_at(&meta["shape"]).ok_or("it has no shape")?,
            chunk: shape_at(&meta["chunks"]).ok_or("it has no chunks")?,
            shard: None,
            attributes,
        })
    }

    /// The attribute first found of `names`, `dims` numbers long, or
    /// `default` in every dimension where there is none.
    fn attribute(&self, names: &[&str], dims: usize, default: i64) -> Result<Coordinate, String> {
        let Some((name, value)) = (names.iter()).find_map(|n| Some((n, self.attributes.get(*n)?)))
        else {
            return Ok(Coordinate::splat(dims, default));
        };
        let values: Option<Vec<i64>> = value
            .as_array()
            .and_then(|values| values.iter().map(integer).collect());
        match values {
            Some(values) if values.len() == dims => Ok(Coordinate::new(&values)),
            _ => Err(format!(
                "its attribute {name} = {value} is not {dims} whole numbers (one per \
                 dimension of the task)"
            )),
        }
    }
}

/// A whole number, also where it was written as a float (`4.0`).
fn integer(value: &Value) -> Option<i64> {
    value.as_i64().or_else(|| {
        let float = value.as_f64()?;
        (float.fract() == 0.0).then_some(float as i64)
    })
}

fn shape_at(value: &Value) -> Option<Vec<u64>> {
    let values = value.as_array()?;
    values.iter().map(Value::as_u64).collect()
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Metadata as zarr-python 3.1.6 writes it for
    /// `create_array(shape=(128, 128), chunks=(8, 8), shards=(64, 64))`.
    const SHARDED_V3: &str = r#"{"shape": [128, 128], "data_type": "int32", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [64, 64]}}, "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}}, "fill_value": 0, "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [8, 8], "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 0, "checksum": false}}], "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}], "index_location": "end"}}], "attributes": {}, "zarr_format": 3, "node_type": "array", "storage_transformers": []}"#;

    /// A (channel, y, x) array placed by funlib.persistence's attributes.
    const CHANNELS_V3: &str = r#"{"shape": [3, 128, 128], "data_type": "int32", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3, 8, 8]}}, "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}}, "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}], "attributes": {"voxel_size": [2, 2], "offset": [4.0, 0]}, "zarr_format": 3, "node_type": "array", "storage_transformers": []}"#;

    const V2: &str = r#"{"shape": [128, 128], "chunks": [8, 8], "dtype": "<i4", "fill_value": 0, "order": "C", "filters": null, "dimension_separator": ".", "compressor": {"id": "zstd", "level": 0}, "zarr_format": 2}"#;

    fn array(dir: &Path, name: &str, files: &[(&str, &str)]) -> PathBuf {
        let path = dir.join(name);
        std::fs::create_dir_all(&path).expect("mkdir");
        for (file, text) in files {
            std::fs::write(path.join(file), text).expect("write");
        }
        path
    }

    fn task(total: i64, block: i64) -> TaskSpec {
        let block = Roi::from_slices(&[0, 0], &[block, block]);
        TaskSpec::new(
            "t",
            Roi::from_slices(&[0, 0], &[total, total]),
            block,
            block,
        )
    }

    fn grids(
        dir: &Path,
        paths: &[&str],
        share: bool,
        spec: &TaskSpec,
    ) -> Result<Vec<WriteGrid>, String> {
        let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
        write_grids(&paths, share, spec, |p| dir.join(p))
    }

    #[test]
    fn a_sharded_v3_array_gives_chunks_in_shards() {
        let dir = tempfile::tempdir().expect("tempdir");
        array(dir.path(), "out.zarr/labels", &[("zarr.json", SHARDED_V3)]);
        let grids = grids(dir.path(), &["out.zarr/labels"], false, &task(128, 8)).expect("reads");
        assert_eq!(grids[0].chunk, Coordinate::from([8, 8]));
        assert_eq!(grids[0].shard, Some(Coordinate::from([64, 64])));
        assert_eq!(grids[0].region, Roi::from_slices(&[0, 0], &[128, 128]));
        assert!(
            grids[0].array.ends_with("out.zarr/labels"),
            "{}",
            grids[0].array
        );
    }

    #[test]
    fn channels_are_left_out_and_voxel_size_and_offset_place_the_array() {
        let dir = tempfile::tempdir().expect("tempdir");
        array(dir.path(), "affs", &[("zarr.json", CHANNELS_V3)]);
        let spec = TaskSpec::new(
            "t",
            Roi::from_slices(&[4, 0], &[256, 256]),
            Roi::from_slices(&[0, 0], &[16, 16]),
            Roi::from_slices(&[0, 0], &[16, 16]),
        );
        let grids = grids(dir.path(), &["affs"], false, &spec).expect("aligned");
        assert_eq!(grids[0].chunk, Coordinate::from([16, 16]));
        assert_eq!(grids[0].region, Roi::from_slices(&[4, 0], &[256, 256]));
        assert_eq!(grids[0].shard, None);
    }

    #[test]
    fn a_v2_array_is_read_with_its_zattrs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let attrs = r#"{"resolution": [4, 4], "offset": [0, 0]}"#;
        array(
            dir.path(),
            "v2.zarr",
            &[(".zarray", V2), (".zattrs", attrs)],
        );
        let grids = grids(dir.path(), &["v2.zarr"], false, &task(512, 32)).expect("reads");
        assert_eq!(grids[0].chunk, Coordinate::from([32, 32]));
    }

    #[test]
    fn blocks_splitting_chunks_are_refused_with_the_shape_that_aligns_unless_shared() {
        let dir = tempfile::tempdir().expect("tempdir");
        array(dir.path(), "v2.zarr", &[(".zarray", V2)]);
        let refusal = grids(dir.path(), &["v2.zarr"], false, &task(120, 12)).expect_err("splits");
        assert!(
            refusal.contains("100 of 100 blocks write parts of chunks"),
            "{refusal}"
        );
        assert!(
            refusal.contains("write_roi shape of [16, 16] aligns"),
            "{refusal}"
        );
        assert!(refusal.contains("share_chunks = true"), "{refusal}");
        assert!(grids(dir.path(), &["v2.zarr"], true, &task(120, 12)).is_ok());
    }

    #[test]
    fn a_missing_or_unreadable_array_says_which_and_why() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing =
            grids(dir.path(), &["nowhere.zarr"], false, &task(128, 8)).expect_err("missing");
        assert!(
            missing.starts_with("writes = \"nowhere.zarr\": "),
            "{missing}"
        );
        assert!(missing.contains("does not exist"), "{missing}");
        array(
            dir.path(),
            "group.zarr",
            &[("zarr.json", r#"{"zarr_format": 3, "node_type": "group"}"#)],
        );
        let group = grids(dir.path(), &["group.zarr"], false, &task(128, 8)).expect_err("group");
        assert!(group.contains("not an array"), "{group}");
        array(dir.path(), "broken.zarr", &[(".zarray", "{")]);
        let broken = grids(dir.path(), &["broken.zarr"], false, &task(128, 8)).expect_err("broken");
        assert!(broken.contains("is not JSON"), "{broken}");
        let attrs = r#"{"voxel_size": [1, 1, 1]}"#;
        array(
            dir.path(),
            "three.zarr",
            &[(".zarray", V2), (".zattrs", attrs)],
        );
        let three = grids(dir.path(), &["three.zarr"], false, &task(128, 8)).expect_err("dims");
        assert!(
            three.contains("voxel_size = [1,1,1] is not 2 whole numbers"),
            "{three}"
        );
    }
}
