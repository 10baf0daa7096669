//! Why a done marker could not be opened, checked or written. Every error
//! that means "this marker cannot be used as it is" ends with the way to
//! start the task over, because that is what the user needs next.

use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DoneMarkerError {
    /// The file system refused an operation; the cause is the source.
    #[error("done marker i/o failed on {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The stored marker belongs to other ROIs or another fit: its bytes
    /// would skip the wrong blocks, so it is refused, never reused.
    #[error(
        "done marker {dir} was written for a different task layout \
         (stored hash {stored}, expected {expected}); to start this task \
         over, remove it: rm -rf {dir}"
    )]
    LayoutMismatch {
        dir: PathBuf,
        stored: String,
        expected: String,
    },
    /// A marker file exists but is not what this layout needs.
    #[error(
        "done marker file {path} is invalid: {reason}; to start this task \
         over, remove the marker: rm -rf {dir}"
    )]
    Invalid {
        path: PathBuf,
        reason: String,
        dir: PathBuf,
    },
    /// Blocks are marked done but the metadata that says what the bytes
    /// mean is gone: trusting them could skip the wrong blocks, starting
    /// over would silently rerun them, so neither happens without the
    /// user.
    #[error(
        "done marker {dir} has blocks marked done in {chunk} but no zarr.json \
         at {metadata} (deleted or lost?); restore it, or to start this task \
         over, remove the marker: rm -rf {dir}"
    )]
    MetadataMissing {
        dir: PathBuf,
        chunk: PathBuf,
        metadata: PathBuf,
    },
    /// `reset` found a file no marker holds: a recursive delete of a
    /// computed path must not take it.
    #[error("{dir} holds {name:?}, so it is not a done marker; not removing it")]
    NotAMarker { dir: PathBuf, name: String },
    /// The task's ROIs admit no block grid (the pipeline validation
    /// normally catches this first).
    #[error("done marker {dir} for task {task:?}: {reason}")]
    Geometry {
        dir: PathBuf,
        task: String,
        reason: String,
    },
    /// [`super::DoneMarker::mark_done`] or
    /// [`super::DoneMarker::note_failure`] on a marker from
    /// [`super::DoneMarker::open_existing`], which never writes.
    #[error("done marker {dir} was opened read-only and cannot be written")]
    ReadOnly { dir: PathBuf },
}

pub(super) fn io_error(path: &Path) -> impl FnOnce(io::Error) -> DoneMarkerError + '_ {
    move |source| DoneMarkerError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `path`, a file of the marker at `dir`, is not what the layout needs.
pub(super) fn invalid(dir: &Path, path: &Path, reason: impl Into<String>) -> DoneMarkerError {
    DoneMarkerError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
        dir: dir.to_path_buf(),
    }
}
