//! The done marker's unit tests: round trips and the byte layout here,
//! daisy 2.0.0's and our earlier layouts in [`daisy_layout`], damaged
//! markers and crash safety in [`damage`].

use super::costs::StoredCost;
use super::*;
use daisy_core::geometry::{BlockGrid, GridWalk};
use daisy_core::{BlockId, Coordinate, Fit, Roi, TaskIdx};
use serde_json::{json, Value};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod daisy_layout;
mod damage;

fn roi(offset: &[i64], shape: &[i64]) -> Roi {
    Roi::from_slices(offset, shape)
}

/// A task at the origin whose blocks read and write `block` voxels.
fn simple_task(total: &[i64], block: &[i64]) -> TaskSpec {
    let zeros = vec![0; total.len()];
    TaskSpec::new(
        "t",
        roi(&zeros, total),
        roi(&zeros, block),
        roi(&zeros, block),
    )
}

/// Blocks read 30, write the middle 10, in a total region off the origin.
pub(super) fn context_task() -> TaskSpec {
    let mut spec = TaskSpec::new(
        "t",
        roi(&[-8, 0], &[100, 200]),
        roi(&[0, 0], &[30, 30]),
        roi(&[10, 10], &[10, 10]),
    );
    spec.fit = Fit::Shrink;
    spec
}

/// The block `index` write shapes away from the first, as the
/// dependency graph makes it (fit rule applied).
fn block(spec: &TaskSpec, index: &[i64]) -> Block {
    let k = Coordinate::new(index) * spec.write_roi.shape();
    BlockGrid::new(TaskIdx(0), spec)
        .block_at(k)
        .expect("the fit rule keeps this block")
}

/// The chunk of the array `name` (`done`, `failures`) of the marker at
/// `dir`, or of the earlier layout's array with `name` = "".
fn chunk_of(dir: &Path, name: &str, dims: usize) -> PathBuf {
    let mut path = dir.join(name).join("c");
    path.extend(std::iter::repeat_n("0", dims));
    path
}

/// The `done` chunk's bytes.
fn chunk_bytes(dir: &Path, dims: usize) -> Vec<u8> {
    fs::read(chunk_of(dir, "done", dims)).unwrap()
}

/// The `failures` chunk as counts.
fn failure_counts(dir: &Path, dims: usize) -> Vec<u32> {
    let bytes = fs::read(chunk_of(dir, "failures", dims)).unwrap();
    let words = bytes.chunks_exact(4);
    words
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
}

/// Every file below `dir` and its contents, to show nothing changed.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            match path.is_dir() {
                true => todo.push(path),
                false => files.push((path.clone(), fs::read(&path).unwrap())),
            }
        }
    }
    files.sort();
    files
}

fn marker_dir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("done").join("t");
    (tmp, dir)
}

/// Marks `marked`, reopens, and checks that exactly those are done.
fn assert_round_trip(spec: &TaskSpec, marked: &[&[i64]]) {
    let (_tmp, dir) = marker_dir();
    let mut marker = DoneMarker::open(&dir, spec).unwrap();
    for index in marked {
        marker.mark_done(&block(spec, index)).unwrap();
        marker.mark_done(&block(spec, index)).unwrap();
    }
    marker.flush().unwrap();
    drop(marker);
    let marker = DoneMarker::open(&dir, spec).unwrap();
    assert_eq!(marker.count_done(), marked.len() as u64);
    let grid: Vec<i64> = marker.grid_shape().iter().map(|&n| n as i64).collect();
    let dims = grid.len();
    for index in GridWalk::new(Coordinate::zeros(dims), Coordinate::new(&grid)) {
        let expected = marked.contains(&index.as_slice());
        assert_eq!(
            marker.is_done(&block(spec, index.as_slice())),
            expected,
            "{index}"
        );
    }
}

#[test]
fn round_trip_2d_keeps_exactly_the_marked_blocks() {
    assert_round_trip(
        &simple_task(&[40, 30], &[10, 10]),
        &[&[0, 0], &[3, 2], &[1, 2]],
    );
}

#[test]
fn round_trip_3d_keeps_exactly_the_marked_blocks() {
    let spec = simple_task(&[20, 30, 40], &[10, 10, 10]);
    assert_round_trip(&spec, &[&[1, 2, 3], &[0, 1, 0], &[0, 0, 0]]);
}

#[test]
fn byte_position_is_the_row_major_grid_index() {
    let (_tmp, dir) = marker_dir();
    let spec = context_task();
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    assert_eq!(marker.grid_shape(), &[10, 20]);
    // Block (2, 5) writes at [2 + 20, 10 + 50] = [22, 60] (the write
    // region starts 10 into the read region, which starts at -8 + 20):
    // grid index ([22, 60] - [-8, 0]) / 10 = (3, 6), byte 3 * 20 + 6.
    let b = block(&spec, &[2, 5]);
    assert_eq!(b.write_roi.offset(), Coordinate::from([22, 60]));
    marker.mark_done(&b).unwrap();
    let bytes = chunk_bytes(&dir, 2);
    assert_eq!(bytes.len(), 200);
    let set: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] != 0).collect();
    assert_eq!(set, [66]);
    assert_eq!(bytes[66], 1);
}

#[test]
fn open_existing_on_an_absent_dir_returns_none_and_creates_nothing() {
    let (tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    assert!(DoneMarker::open_existing(&dir, &spec).unwrap().is_none());
    assert!(!tmp.path().join("done").exists());
}

#[test]
fn open_existing_sees_marks_and_refuses_to_mark() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    marker.mark_done(&block(&spec, &[2, 1])).unwrap();
    let mut peek = DoneMarker::open_existing(&dir, &spec).unwrap().unwrap();
    assert!(peek.is_done(&block(&spec, &[2, 1])));
    assert_eq!(peek.count_done(), 1);
    let err = peek.mark_done(&block(&spec, &[0, 0])).unwrap_err();
    assert!(matches!(err, DoneMarkerError::ReadOnly { .. }), "{err:?}");
    let err = peek.note_failure(&block(&spec, &[0, 0])).unwrap_err();
    assert!(matches!(err, DoneMarkerError::ReadOnly { .. }), "{err:?}");
    peek.flush().unwrap();
    assert_eq!(chunk_bytes(&dir, 2).iter().filter(|&&b| b != 0).count(), 1);
}

#[test]
fn shrink_fit_border_block_counts_in_task_write_shapes() {
    let (_tmp, dir) = marker_dir();
    let mut spec = simple_task(&[25, 30], &[10, 10]);
    spec.fit = Fit::Shrink;
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    assert_eq!(marker.grid_shape(), &[3, 3]);
    let border = block(&spec, &[2, 2]);
    assert_eq!(border.write_roi, roi(&[20, 20], &[5, 10]), "shrunk");
    marker.mark_done(&border).unwrap();
    assert!(marker.is_done(&border));
    let mut expected = vec![0; 9];
    expected[2 * 3 + 2] = 1;
    assert_eq!(chunk_bytes(&dir, 2), expected);
}

#[test]
fn blocks_outside_the_grid_are_not_addressable() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[30, 30], &[10, 10]);
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    // Built by hand: the graph never makes these, but a caller may pass them.
    let at = |offset: &[i64]| {
        let r = roi(offset, &vec![10; offset.len()]);
        let id = BlockId {
            task: TaskIdx(0),
            spatial: 0,
        };
        Block {
            id,
            read_roi: r,
            write_roi: r,
        }
    };
    for outside in [
        at(&[-10, 0]),
        at(&[-1, 0]),
        at(&[30, 0]),
        at(&[0, 30]),
        at(&[0, 0, 0]),
    ] {
        assert!(!marker.is_done(&outside));
        marker.mark_done(&outside).unwrap();
        assert!(!marker.is_done(&outside));
    }
    assert_eq!(marker.count_done(), 0);
    assert_eq!(chunk_bytes(&dir, 2), vec![0; 9]);
}

#[test]
fn reset_removes_a_marker_and_nothing_else() {
    let (tmp, dir) = marker_dir();
    reset(&dir).unwrap();
    DoneMarker::open(&dir, &simple_task(&[40, 30], &[10, 10])).unwrap();
    reset(&dir).unwrap();
    assert!(!dir.exists());
    let not_a_marker = tmp.path().join("done");
    fs::write(not_a_marker.join("notes.txt"), "keep").unwrap();
    let err = reset(&not_a_marker).unwrap_err();
    assert!(matches!(err, DoneMarkerError::NotAMarker { .. }), "{err:?}");
    assert!(not_a_marker.join("notes.txt").exists());
}

#[test]
fn impossible_geometry_is_an_error_and_creates_nothing() {
    let (tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[0, 10]);
    let err = DoneMarker::open(&dir, &spec).unwrap_err();
    assert!(matches!(err, DoneMarkerError::Geometry { .. }), "{err:?}");
    assert!(err.to_string().contains("must be positive"), "{err}");
    assert!(!tmp.path().join("done").exists());
}
