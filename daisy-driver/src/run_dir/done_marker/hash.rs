//! The task hash that ties a marker to the layout it was written for:
//! lowercase hex SHA-256 over the task's ROIs and fit, bit-exact with
//! daisy 2.0.0's `compute_task_hash`, so a marker written by either is
//! recognised by both. Anything that moves blocks to other bytes changes
//! it; the task id does not.

use daisy_core::{Coordinate, Fit, Roi, TaskSpec};
use sha2::{Digest, Sha256};

/// daisy 2.0.0's domain separator, hashed first.
const PREFIX: &[u8] = b"daisy-tracking:v1\n";

/// The separator this project used before it wrote daisy 2.0.0's group
/// layout (a bare array, see [`super::legacy`]); the rest of the input
/// is the same.
const LEGACY_PREFIX: &[u8] = b"daisy-done-marker:v1\n";

/// The hash stored in the group's `attributes.daisy_task_hash`.
pub fn task_hash(spec: &TaskSpec) -> String {
    hash_with(PREFIX, spec)
}

/// The hash a marker of this project's earlier layout stores.
pub(super) fn legacy_task_hash(spec: &TaskSpec) -> String {
    hash_with(LEGACY_PREFIX, spec)
}

fn hash_with(prefix: &[u8], spec: &TaskSpec) -> String {
    let mut hasher = Sha256::new();
    hasher.update(prefix);
    let rois = [
        ("total", &spec.total_roi),
        ("read", &spec.read_roi),
        ("write", &spec.write_roi),
    ];
    for (label, roi) in rois {
        hash_roi(&mut hasher, label, roi);
    }
    hasher.update(b"fit=");
    hasher.update(fit_name(spec.fit));
    format!("{:x}", hasher.finalize())
}

fn hash_roi(hasher: &mut Sha256, label: &str, roi: &Roi) {
    hasher.update(label.as_bytes());
    hasher.update(b":offset=");
    hash_coordinate(hasher, &roi.offset());
    hasher.update(b";shape=");
    hash_coordinate(hasher, &roi.shape());
    hasher.update(b";");
}

fn hash_coordinate(hasher: &mut Sha256, coordinate: &Coordinate) {
    for value in coordinate.iter() {
        hasher.update(value.to_le_bytes());
        hasher.update(b",");
    }
}

/// The fit as daisy 2.0 hashes it (its `Debug` name), spelled out so that
/// renaming a variant here cannot silently change every hash.
fn fit_name(fit: Fit) -> &'static [u8] {
    match fit {
        Fit::Valid => b"Valid",
        Fit::Overhang => b"Overhang",
        Fit::Shrink => b"Shrink",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_dir::done_marker::tests::context_task;

    /// Computed independently in Python, `prefix` being the separator:
    ///   m = hashlib.sha256(prefix)
    ///   for label, (off, shape) in [("total", ([-8, 0], [100, 200])),
    ///           ("read", ([0, 0], [30, 30])), ("write", ([10, 10], [10, 10]))]:
    ///       m.update(label.encode() + b":offset="
    ///           + b"".join(struct.pack("<q", v) + b"," for v in off)
    ///           + b";shape=" + b"".join(struct.pack("<q", v) + b"," for v in shape)
    ///           + b";")
    ///   m.update(b"fit=Shrink"); m.hexdigest()
    #[test]
    fn hashes_match_python_hashlib() {
        let spec = context_task();
        assert_eq!(
            task_hash(&spec),
            "68b58e88ff7b045b49c2fdfb9cab43d8bc1d82f73f723817f0ec924e054042b6"
        );
        assert_eq!(
            legacy_task_hash(&spec),
            "462ec7f0471392f5482f120513d516b4297959624d6e27d816f54cadf497cc7b"
        );
    }

    /// daisy 2.0.0 wrote this hash for a 40x30 total region of valid 10x10
    /// blocks (read off a marker it made).
    #[test]
    fn hash_matches_a_marker_written_by_daisy_2_0_0() {
        let roi = Roi::from_slices;
        let spec = TaskSpec::new(
            "t",
            roi(&[0, 0], &[40, 30]),
            roi(&[0, 0], &[10, 10]),
            roi(&[0, 0], &[10, 10]),
        );
        assert_eq!(
            task_hash(&spec),
            "e9dba174c67a47594f5a0b2fd25f774761b7341cc898e91fdb5d5dc4b5c786c9"
        );
    }

    #[test]
    fn the_id_is_not_layout_but_the_fit_is() {
        let spec = context_task();
        let renamed = TaskSpec {
            id: "other".into(),
            ..spec.clone()
        };
        assert_eq!(task_hash(&renamed), task_hash(&spec));
        let refit = TaskSpec {
            fit: Fit::Overhang,
            ..spec.clone()
        };
        assert_ne!(task_hash(&refit), task_hash(&spec));
    }
}
