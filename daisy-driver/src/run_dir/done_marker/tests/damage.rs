//! Damaged markers are refused with what to do, and a marker killed
//! mid-write loses no mark it returned.

use super::daisy_layout::{
    write_daisy_marker, write_legacy_marker, DAISY_DONE_JSON, DAISY_GROUP_JSON,
};
use super::*;

/// Removes `metadata` (a `zarr.json` of the marker) after a block was
/// marked, then expects every open to refuse, keeping the done byte.
fn assert_lost_metadata_is_refused(metadata: &str) {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    marker.mark_done(&block(&spec, &[0, 1])).unwrap();
    drop(marker);
    fs::remove_file(dir.join(metadata)).unwrap();
    for err in [
        DoneMarker::open_existing(&dir, &spec).unwrap_err(),
        DoneMarker::open(&dir, &spec).unwrap_err(),
    ] {
        assert!(
            matches!(&err, DoneMarkerError::MetadataMissing { .. }),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("no zarr.json"), "{message}");
        assert!(
            message.contains(&format!("rm -rf {}", dir.display())),
            "{message}"
        );
    }
    let marked = chunk_bytes(&dir, 2).iter().filter(|&&b| b != 0).count();
    assert_eq!(marked, 1, "the done byte is kept");
}

#[test]
fn done_bytes_without_the_groups_zarr_json_are_refused() {
    assert_lost_metadata_is_refused("zarr.json");
}

#[test]
fn done_bytes_without_the_arrays_zarr_json_are_refused() {
    assert_lost_metadata_is_refused("done/zarr.json");
}

#[test]
fn done_bytes_of_an_earlier_marker_without_zarr_json_are_refused() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    write_legacy_marker(&dir, &hash::legacy_task_hash(&spec), &[3]);
    fs::remove_file(dir.join("zarr.json")).unwrap();
    let err = DoneMarker::open(&dir, &spec).unwrap_err();
    assert!(
        matches!(&err, DoneMarkerError::MetadataMissing { chunk, .. } if *chunk == chunk_of(&dir, "", 2)),
        "{err:?}"
    );
}

#[test]
fn interrupted_creation_is_redone_from_scratch() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    DoneMarker::open(&dir, &spec).unwrap();
    // As if killed after the arrays were written, before the group's
    // zarr.json was renamed into place: chunks are still zeroed.
    fs::remove_file(dir.join("zarr.json")).unwrap();
    fs::write(dir.join(zarr::ZARR_JSON_TMP), "{ half").unwrap();
    assert!(DoneMarker::open_existing(&dir, &spec).unwrap().is_none());
    let marker = DoneMarker::open(&dir, &spec).unwrap();
    assert_eq!(marker.count_done(), 0);
    assert!(!dir.join(zarr::ZARR_JSON_TMP).exists());
    assert_eq!(
        fs::read_to_string(dir.join("zarr.json")).unwrap(),
        DAISY_GROUP_JSON
    );
}

#[test]
fn chunks_lost_before_the_first_flush_come_back_as_zeros() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    drop(DoneMarker::open(&dir, &spec).unwrap());
    // As a power loss before the first flush may leave it: creation
    // leaves the chunks' directory entries to that flush to sync.
    fs::remove_dir_all(dir.join("done").join("c")).unwrap();
    fs::remove_file(chunk_of(&dir, "failures", 2)).unwrap();
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    assert_eq!(marker.count_done(), 0);
    assert_eq!(chunk_bytes(&dir, 2), vec![0; 12]);
    assert_eq!(failure_counts(&dir, 2), vec![0; 12]);
    marker.mark_done(&block(&spec, &[1, 2])).unwrap();
    marker.flush().unwrap();
    drop(marker);
    assert_eq!(DoneMarker::open(&dir, &spec).unwrap().count_done(), 1);
}

#[test]
fn a_big_endian_failures_array_is_refused() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    DoneMarker::open(&dir, &spec).unwrap();
    let path = dir.join("failures/zarr.json");
    let mut meta = read_json(&path);
    meta["codecs"][0]["configuration"]["endian"] = json!("big");
    fs::write(&path, meta.to_string()).unwrap();
    let err = DoneMarker::open(&dir, &spec).unwrap_err();
    assert!(
        matches!(&err, DoneMarkerError::Invalid { path: p, .. } if *p == path),
        "{err:?}"
    );
    assert!(err.to_string().contains("little-endian"), "{err}");
}

#[test]
fn reset_removes_a_marker_daisy_wrote_with_resource_arrays() {
    let (_tmp, dir) = marker_dir();
    write_daisy_marker(&dir);
    fs::create_dir_all(dir.join("wall_seconds/c/0")).unwrap();
    reset(&dir).unwrap();
    assert!(!dir.exists());
}

#[test]
fn layout_change_is_refused_with_the_rm_rf_hint() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    marker.mark_done(&block(&spec, &[1, 1])).unwrap();
    drop(marker);
    let changed = simple_task(&[40, 30], &[5, 5]);
    let err = DoneMarker::open(&dir, &changed).unwrap_err();
    assert!(
        matches!(err, DoneMarkerError::LayoutMismatch { .. }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("different task layout"), "{message}");
    assert!(message.contains(&task_hash(&spec)), "{message}");
    assert!(message.contains(&task_hash(&changed)), "{message}");
    assert!(
        message.contains(&format!("rm -rf {}", dir.display())),
        "{message}"
    );
    let peek = DoneMarker::open_existing(&dir, &changed).unwrap_err();
    assert!(matches!(peek, DoneMarkerError::LayoutMismatch { .. }));
    let kept = DoneMarker::open(&dir, &spec).unwrap();
    assert!(
        kept.is_done(&block(&spec, &[1, 1])),
        "refusing changes nothing"
    );
}

#[test]
fn garbage_zarr_json_is_invalid_and_named() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    DoneMarker::open(&dir, &spec).unwrap();
    let path = dir.join("zarr.json");
    fs::write(&path, "{ not json").unwrap();
    for err in [
        DoneMarker::open(&dir, &spec).unwrap_err(),
        DoneMarker::open_existing(&dir, &spec).unwrap_err(),
    ] {
        assert!(matches!(&err, DoneMarkerError::Invalid { path: p, .. } if *p == path));
        let message = err.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        let hint = format!("rm -rf {}", dir.display());
        assert!(message.contains(&hint), "{message}");
    }
}

#[test]
fn wrong_shape_in_zarr_json_is_invalid() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    DoneMarker::open(&dir, &spec).unwrap();
    let path = dir.join("done").join("zarr.json");
    let mut meta = read_json(&path);
    meta["shape"] = json!([5, 3]);
    fs::write(&path, meta.to_string()).unwrap();
    let err = DoneMarker::open(&dir, &spec).unwrap_err();
    assert!(matches!(&err, DoneMarkerError::Invalid { path: p, .. } if *p == path));
    assert!(
        err.to_string().contains("shape is [5,3], expected [4,3]")
            && err
                .to_string()
                .contains(&format!("rm -rf {}", dir.display())),
        "{err}"
    );
}

#[test]
fn truncated_chunk_is_invalid_and_named() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    DoneMarker::open(&dir, &spec).unwrap();
    let chunk = chunk_of(&dir, "done", 2);
    File::options()
        .write(true)
        .open(&chunk)
        .unwrap()
        .set_len(5)
        .unwrap();
    let err = DoneMarker::open(&dir, &spec).unwrap_err();
    assert!(matches!(&err, DoneMarkerError::Invalid { path, .. } if *path == chunk));
    assert!(err.to_string().contains("5 bytes, expected 12"), "{err}");
}

#[test]
fn a_done_byte_other_than_0_or_1_is_damage_not_done() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    DoneMarker::open(&dir, &spec).unwrap();
    let chunk = chunk_of(&dir, "done", 2);
    let mut bytes = chunk_bytes(&dir, 2);
    bytes[3] = 0x7f;
    bytes[5] = 1;
    bytes[9] = 0xff;
    fs::write(&chunk, &bytes).unwrap();
    for err in [
        DoneMarker::open(&dir, &spec).unwrap_err(),
        DoneMarker::open_existing(&dir, &spec).err().unwrap(),
    ] {
        assert!(matches!(&err, DoneMarkerError::Invalid { path, .. } if *path == chunk));
        let text = err.to_string();
        assert!(
            text.contains("cell 3 holds byte 0x7f, and 2 cells"),
            "{text}"
        );
        assert!(
            text.ends_with(&format!("rm -rf {}", dir.display())),
            "{text}"
        );
    }
}

/// Set (to the marker dir) in the child that `kill_9_loses_no_returned_mark`
/// starts: it turns `crash_child_marks_until_killed` into the child.
const CRASH_CHILD_ENV: &str = "DAISY_DONE_MARKER_CRASH_CHILD";

/// A million blocks, so the child is killed long before it runs out.
fn crash_task() -> TaskSpec {
    simple_task(&[1000, 1000], &[1, 1])
}

/// Not a test by itself: without `CRASH_CHILD_ENV` it returns at once;
/// with it, it marks blocks and reports each one after `mark_done`
/// returns, until killed.
#[test]
fn crash_child_marks_until_killed() {
    let Some(dir) = std::env::var_os(CRASH_CHILD_ENV) else {
        return;
    };
    let spec = crash_task();
    let mut marker = DoneMarker::open(Path::new(&dir), &spec).unwrap();
    for k in GridWalk::new(Coordinate::zeros(2), Coordinate::from([1000, 1000])) {
        marker.mark_done(&block(&spec, k.as_slice())).unwrap();
        println!("marked {} {}", k[0], k[1]);
    }
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Kills (SIGKILL) and reaps the child however the test ends, so a
/// failed assert leaves no process behind.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs this test binary as the crash child, writing to `dir`.
fn spawn_crash_child(dir: &Path) -> KillOnDrop {
    let (_, module) = module_path!().split_once("::").unwrap();
    let name = format!("{module}::crash_child_marks_until_killed");
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &name, "--nocapture", "--test-threads=1"])
        .env(CRASH_CHILD_ENV, dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

/// The first `n` grid indices the child reports, waiting at most a
/// minute for each.
fn reported_marks(child: &mut Child, n: usize) -> Vec<[i64; 2]> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut marks = Vec::new();
    while marks.len() < n {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("child stopped reporting after {} marks: {e}", marks.len()));
        if let Some(rest) = line.strip_prefix("marked ") {
            let (i, j) = rest.split_once(' ').unwrap();
            marks.push([i.parse().unwrap(), j.parse().unwrap()]);
        }
    }
    marks
}

#[test]
fn kill_9_loses_no_returned_mark() {
    let (_tmp, dir) = marker_dir();
    let mut child = spawn_crash_child(&dir);
    let marks = reported_marks(&mut child.0, 2000);
    drop(child);
    let spec = crash_task();
    let marker = DoneMarker::open(&dir, &spec).unwrap();
    for index in &marks {
        assert!(marker.is_done(&block(&spec, index)), "{index:?} lost");
    }
    assert!(marker.count_done() >= marks.len() as u64);
}

#[test]
fn a_batch_of_marks_lands_like_one_mark_each() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let blocks: Vec<Block> = [[0, 0], [0, 1], [0, 2], [2, 1], [0, 1]]
        .iter()
        .map(|index| block(&spec, index))
        .collect();
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    marker.mark_done_many(&blocks).unwrap();
    assert_eq!(marker.count_done(), 4, "a block given twice counts once");
    let reopened = DoneMarker::open(&dir, &spec).unwrap();
    assert!(blocks.iter().all(|b| reopened.is_done(b)));
    assert_eq!(chunk_bytes(&dir, 2).iter().filter(|&&b| b == 1).count(), 4);
}

fn cost(wall: f32, rss: u64) -> StoredCost {
    StoredCost {
        wall_seconds: wall,
        cpu_seconds: wall / 2.0,
        peak_rss_bytes: rss,
        io_read_bytes: 3,
        io_write_bytes: 4,
        gpu_util_pct: None,
        gpu_mem_bytes: 0,
    }
}

/// The stored cost of each block of `spec`, by grid index, as `status`
/// reads it (read-only).
fn stored_costs(dir: &Path, spec: &TaskSpec) -> Vec<Option<StoredCost>> {
    let marker = DoneMarker::open_existing(dir, spec).unwrap().unwrap();
    let table = marker.read_costs().unwrap().expect("cost arrays");
    (0..table.cells()).map(|cell| table.get(cell)).collect()
}

#[test]
fn costs_are_stored_per_block_and_read_back() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    assert!(marker.read_costs().unwrap().is_none(), "none before a cost");
    let gpu = StoredCost {
        gpu_util_pct: Some(75.0),
        gpu_mem_bytes: 1 << 30,
        ..cost(3.0, 9)
    };
    let (a, b, c) = (
        block(&spec, &[0, 1]),
        block(&spec, &[0, 2]),
        block(&spec, &[3, 2]),
    );
    marker
        .record_costs([(&a, cost(1.5, 7)), (&c, gpu), (&b, cost(2.5, 8))])
        .unwrap();
    let costs = stored_costs(&dir, &spec);
    assert_eq!(costs[1], Some(cost(1.5, 7)));
    assert_eq!(costs[2], Some(cost(2.5, 8)));
    assert_eq!(costs[11], Some(gpu));
    assert_eq!(
        costs.iter().flatten().count(),
        3,
        "the others are not measured"
    );
    let wall = fs::read(chunk_of(&dir, "wall_seconds", 2)).unwrap();
    assert_eq!(wall.len(), 12 * 4, "float32 per block");
    assert_eq!(wall[4..8], 1.5f32.to_le_bytes());
    let util = fs::read(chunk_of(&dir, "gpu_util_pct", 2)).unwrap();
    assert!(
        f32::from_le_bytes(util[4..8].try_into().unwrap()).is_nan(),
        "no GPU: NaN"
    );
    let rss = fs::read(chunk_of(&dir, "peak_rss_bytes", 2)).unwrap();
    assert_eq!((rss.len(), &rss[8..16]), (12 * 8, &7u64.to_le_bytes()[..]));
}

/// A marker of a 4×3 grid whose block (0, 0) has its costs stored.
fn marker_with_one_cost() -> (tempfile::TempDir, PathBuf, TaskSpec) {
    let (tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    marker
        .record_costs([(&block(&spec, &[0, 0]), cost(1.0, 1))])
        .unwrap();
    (tmp, dir, spec)
}

#[test]
fn cost_arrays_have_daisy_2_0_0s_metadata() {
    let (_tmp, dir, _) = marker_with_one_cost();
    let read = |name: &str| fs::read_to_string(dir.join(name).join("zarr.json")).unwrap();
    let float = DAISY_DONE_JSON
        .replace("\"uint8\"", "\"float32\"")
        .replace("\"fill_value\": 0,", "\"fill_value\": 0.0,");
    let unsigned = DAISY_DONE_JSON.replace("\"uint8\"", "\"uint64\"");
    for name in ["wall_seconds", "cpu_seconds", "gpu_util_pct"] {
        assert_eq!(read(name), float, "{name}");
    }
    for name in [
        "peak_rss_bytes",
        "io_read_bytes",
        "io_write_bytes",
        "gpu_mem_bytes",
    ] {
        assert_eq!(read(name), unsigned, "{name}");
    }
}

#[test]
fn a_reopened_marker_keeps_the_costs_stored_before() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let first = block(&spec, &[1, 1]);
    DoneMarker::open(&dir, &spec)
        .unwrap()
        .record_costs([(&first, cost(1.0, 1))])
        .unwrap();
    let mut again = DoneMarker::open(&dir, &spec).unwrap();
    again
        .record_costs([(&block(&spec, &[2, 2]), cost(2.0, 2))])
        .unwrap();
    let costs = stored_costs(&dir, &spec);
    assert_eq!(
        (costs[4], costs[8]),
        (Some(cost(1.0, 1)), Some(cost(2.0, 2)))
    );
}

#[test]
fn a_cost_array_of_another_type_is_refused_naming_it() {
    let (_tmp, dir, spec) = marker_with_one_cost();
    let path = dir.join("wall_seconds/zarr.json");
    let text = fs::read_to_string(&path)
        .unwrap()
        .replace("float32", "float64");
    fs::write(&path, text).unwrap();
    let marker = DoneMarker::open_existing(&dir, &spec).unwrap().unwrap();
    let error = marker.read_costs().unwrap_err().to_string();
    assert!(
        error.contains("wall_seconds/zarr.json") && error.contains("data_type"),
        "{error}"
    );
}
