//! Markers daisy 2.0.0 wrote (resumed, byte for byte the same files)
//! and markers of this project's earlier layout (read, migrated).

use super::*;

/// What daisy 2.0.0 (from PyPI) wrote for a task of 40x30 total, 10x10
/// valid blocks: `<dir>/zarr.json`, `<dir>/done/zarr.json` and
/// `<dir>/failures/zarr.json`, copied from its files.
pub(super) const DAISY_GROUP_JSON: &str = r#"{
  "attributes": {
    "daisy_task_hash": "e9dba174c67a47594f5a0b2fd25f774761b7341cc898e91fdb5d5dc4b5c786c9"
  },
  "node_type": "group",
  "zarr_format": 3
}
"#;

/// The `done` array's file; `failures` differs only in `data_type`.
pub(super) const DAISY_DONE_JSON: &str = r#"{
  "attributes": {},
  "chunk_grid": {
    "configuration": {
      "chunk_shape": [
        4,
        3
      ]
    },
    "name": "regular"
  },
  "chunk_key_encoding": {
    "configuration": {
      "separator": "/"
    },
    "name": "default"
  },
  "codecs": [
    {
      "configuration": {
        "endian": "little"
      },
      "name": "bytes"
    }
  ],
  "data_type": "uint8",
  "fill_value": 0,
  "node_type": "array",
  "shape": [
    4,
    3
  ],
  "storage_transformers": [],
  "zarr_format": 3
}
"#;

fn daisy_failures_json() -> String {
    DAISY_DONE_JSON.replace("\"uint8\"", "\"uint32\"")
}

#[test]
fn files_match_daisy_2_0_0_byte_for_byte() {
    let (_tmp, dir) = marker_dir();
    DoneMarker::open(&dir, &simple_task(&[40, 30], &[10, 10])).unwrap();
    let read = |path: PathBuf| fs::read_to_string(path).unwrap();
    assert_eq!(read(dir.join("zarr.json")), DAISY_GROUP_JSON);
    assert_eq!(read(dir.join("done/zarr.json")), DAISY_DONE_JSON);
    assert_eq!(read(dir.join("failures/zarr.json")), daisy_failures_json());
    assert_eq!(chunk_bytes(&dir, 2), vec![0; 12]);
    assert_eq!(failure_counts(&dir, 2), vec![0; 12]);
    let mut names: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["done", "failures", "zarr.json"]);
}

/// A marker as daisy 2.0.0 leaves it after blocks (0, 0), (0, 1) and
/// (1, 2) succeeded and (0, 2) failed three times.
pub(super) fn write_daisy_marker(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("zarr.json"), DAISY_GROUP_JSON).unwrap();
    for (name, json) in [
        ("done", DAISY_DONE_JSON.to_string()),
        ("failures", daisy_failures_json()),
    ] {
        fs::create_dir_all(dir.join(name).join("c/0")).unwrap();
        fs::write(dir.join(name).join("zarr.json"), json).unwrap();
    }
    let mut done = vec![0u8; 12];
    for i in [0, 1, 5] {
        done[i] = 1;
    }
    fs::write(chunk_of(dir, "done", 2), done).unwrap();
    let mut failures = vec![0u8; 48];
    failures[2 * 4] = 3;
    fs::write(chunk_of(dir, "failures", 2), failures).unwrap();
}

#[test]
fn a_marker_written_by_daisy_2_0_0_is_resumed() {
    let (_tmp, dir) = marker_dir();
    write_daisy_marker(&dir);
    let spec = simple_task(&[40, 30], &[10, 10]);
    let before = snapshot(&dir);
    let peek = DoneMarker::open_existing(&dir, &spec).unwrap().unwrap();
    assert_eq!(peek.count_done(), 3);
    assert_eq!(peek.failure_count(&block(&spec, &[0, 2])).unwrap(), 3);
    assert_eq!(snapshot(&dir), before, "reading changes nothing");
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    assert_eq!(snapshot(&dir), before, "opening to write changes nothing");
    for (index, done) in [
        ([0, 0], true),
        ([0, 1], true),
        ([1, 2], true),
        ([0, 2], false),
    ] {
        assert_eq!(marker.is_done(&block(&spec, &index)), done, "{index:?}");
    }
    marker.note_failure(&block(&spec, &[0, 2])).unwrap();
    marker.mark_done(&block(&spec, &[0, 2])).unwrap();
    assert_eq!(chunk_bytes(&dir, 2)[..6], [1, 1, 1, 0, 0, 1]);
    assert_eq!(failure_counts(&dir, 2)[2], 4);
}

#[test]
fn failed_attempts_are_counted_per_block_little_endian() {
    let (_tmp, dir) = marker_dir();
    let spec = context_task();
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    let b = block(&spec, &[2, 5]);
    for _ in 0..3 {
        marker.note_failure(&b).unwrap();
    }
    marker.note_failure(&block(&spec, &[0, 0])).unwrap();
    marker.mark_done(&b).unwrap();
    marker.flush().unwrap();
    drop(marker);
    let counts = failure_counts(&dir, 2);
    assert_eq!(counts.len(), 200);
    let counted: Vec<(usize, u32)> = (0..200)
        .filter(|&i| counts[i] != 0)
        .map(|i| (i, counts[i]))
        .collect();
    // The first block writes at [2, 10], grid index (1, 1): byte 21.
    assert_eq!(counted, [(21, 1), (66, 3)], "a success keeps the count");
    let marker = DoneMarker::open_existing(&dir, &spec).unwrap().unwrap();
    assert_eq!(marker.failure_count(&b).unwrap(), 3);
    assert!(marker.is_done(&b));
}

#[test]
fn a_group_without_hash_is_a_store_the_user_made() {
    let (_tmp, dir) = marker_dir();
    write_daisy_marker(&dir);
    fs::write(
        dir.join("zarr.json"),
        r#"{"zarr_format": 3, "node_type": "group"}"#,
    )
    .unwrap();
    fs::remove_dir_all(dir.join("failures")).unwrap();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let peek = DoneMarker::open_existing(&dir, &spec).unwrap().unwrap();
    assert_eq!(peek.count_done(), 3);
    assert_eq!(peek.failure_count(&block(&spec, &[0, 2])).unwrap(), 0);
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    marker.note_failure(&block(&spec, &[0, 2])).unwrap();
    assert_eq!(failure_counts(&dir, 2)[2], 1, "failures is created");
}

/// Writes a marker of this project's earlier layout, with `done` blocks
/// (row-major positions) set and `hash` as its task hash.
pub(super) fn write_legacy_marker(dir: &Path, hash: &str, done: &[usize]) {
    fs::create_dir_all(dir.join("c/0")).unwrap();
    let mut meta = read_json_str(DAISY_DONE_JSON);
    meta["attributes"] = json!({ "daisy_task_hash": hash });
    meta["codecs"] = json!([{ "name": "bytes" }]);
    fs::write(dir.join("zarr.json"), format!("{meta:#}\n")).unwrap();
    let mut bytes = vec![0u8; 12];
    for &i in done {
        bytes[i] = 1;
    }
    fs::write(chunk_of(dir, "", 2), bytes).unwrap();
}

fn read_json_str(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn an_earlier_marker_is_read_as_it_is_and_migrated_by_a_run() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    write_legacy_marker(&dir, &hash::legacy_task_hash(&spec), &[1, 7]);
    let before = snapshot(&dir);
    let peek = DoneMarker::open_existing(&dir, &spec).unwrap().unwrap();
    assert_eq!(peek.count_done(), 2);
    assert!(peek.is_done(&block(&spec, &[2, 1])));
    assert_eq!(snapshot(&dir), before, "reading changes nothing");
    let marker = DoneMarker::open(&dir, &spec).unwrap();
    assert_eq!(marker.count_done(), 2);
    drop(marker);
    assert_eq!(
        fs::read_to_string(dir.join("zarr.json")).unwrap(),
        DAISY_GROUP_JSON
    );
    assert_eq!(
        fs::read_to_string(dir.join("done/zarr.json")).unwrap(),
        DAISY_DONE_JSON
    );
    let mut expected = vec![0; 12];
    expected[1] = 1;
    expected[7] = 1;
    assert_eq!(chunk_bytes(&dir, 2), expected);
    assert_eq!(failure_counts(&dir, 2), vec![0; 12]);
    assert!(!dir.join("c").exists(), "the old chunk is gone");
}

#[test]
fn a_migration_killed_before_its_rename_is_done_again() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    write_legacy_marker(&dir, &hash::legacy_task_hash(&spec), &[4]);
    // As if killed after writing `done` (here: half of it), before the
    // group's zarr.json replaced the array's.
    fs::create_dir_all(dir.join("done/c/0")).unwrap();
    fs::write(chunk_of(&dir, "done", 2), [1u8; 5]).unwrap();
    let marker = DoneMarker::open(&dir, &spec).unwrap();
    assert_eq!(marker.count_done(), 1);
    let mut expected = vec![0; 12];
    expected[4] = 1;
    assert_eq!(chunk_bytes(&dir, 2), expected);
}

#[test]
fn a_migration_killed_after_its_rename_loses_nothing() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    marker.mark_done(&block(&spec, &[1, 1])).unwrap();
    drop(marker);
    // The earlier chunk left behind, as a kill before its removal leaves it.
    fs::create_dir_all(dir.join("c/0")).unwrap();
    fs::write(chunk_of(&dir, "", 2), [1u8; 12]).unwrap();
    let peek = DoneMarker::open_existing(&dir, &spec).unwrap().unwrap();
    assert_eq!(peek.count_done(), 1, "the group is the truth");
    let marker = DoneMarker::open(&dir, &spec).unwrap();
    assert_eq!(marker.count_done(), 1);
    assert!(!dir.join("c").exists());
}

#[test]
fn an_earlier_marker_of_another_layout_is_refused() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let other = simple_task(&[40, 30], &[5, 5]);
    write_legacy_marker(&dir, &hash::legacy_task_hash(&other), &[1]);
    for err in [
        DoneMarker::open(&dir, &spec).unwrap_err(),
        DoneMarker::open_existing(&dir, &spec).unwrap_err(),
    ] {
        assert!(
            matches!(err, DoneMarkerError::LayoutMismatch { .. }),
            "{err:?}"
        );
        assert!(err
            .to_string()
            .contains(&format!("rm -rf {}", dir.display())));
    }
    assert!(dir.join("c/0/0").exists(), "refusing changes nothing");
}
