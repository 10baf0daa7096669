//! The single chunk file of one array of a marker: created whole, then
//! changed in place by positioned writes of single elements, which sit in
//! the kernel page cache (and thus survive a kill of the process) once
//! the write returns.

use super::error::{invalid, io_error, DoneMarkerError};
use super::zarr::sync_dirs;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub(super) struct Chunk {
    path: PathBuf,
    /// `None`: the chunk does not exist and reads as the fill value, 0
    /// (a read-only marker never creates it).
    file: Option<File>,
}

impl Chunk {
    /// Writes `bytes` as the chunk at `path`, durable with the directory
    /// entries up to the marker at `dir`, replacing any chunk there.
    pub fn create(dir: &Path, path: &Path, bytes: &[u8]) -> Result<Self, DoneMarkerError> {
        let chunk = Self::write_new(dir, path, bytes)?;
        chunk.sync_contents()?;
        sync_dirs(path.parent().unwrap_or(dir), dir)?;
        Ok(chunk)
    }

    /// Writes `bytes` as the chunk at `path` of the marker at `dir`,
    /// replacing any chunk there; nothing synced yet.
    pub fn write_new(dir: &Path, path: &Path, bytes: &[u8]) -> Result<Self, DoneMarkerError> {
        let parent = path.parent().unwrap_or(dir);
        fs::create_dir_all(parent).map_err(io_error(parent))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(io_error(path))?;
        file.write_all_at(bytes, 0).map_err(io_error(path))?;
        Ok(Self {
            path: path.to_path_buf(),
            file: Some(file),
        })
    }

    /// Makes the chunk's bytes and size durable (not its directory entry).
    pub fn sync_contents(&self) -> Result<(), DoneMarkerError> {
        match &self.file {
            Some(file) => file.sync_all().map_err(self.io()),
            None => Ok(()),
        }
    }

    /// Opens the chunk at `path` of the marker at `dir`, checking that it
    /// holds `len` bytes; a missing chunk reads as zeros.
    pub fn open(dir: &Path, path: &Path, len: usize, write: bool) -> Result<Self, DoneMarkerError> {
        let opened = OpenOptions::new().read(true).write(write).open(path);
        let file = match opened {
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            file => Some(file.map_err(io_error(path))?),
        };
        if let Some(file) = &file {
            let found = file.metadata().map_err(io_error(path))?.len();
            if found != len as u64 {
                let reason = format!("chunk has {found} bytes, expected {len}");
                return Err(invalid(dir, path, reason));
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            file,
        })
    }

    /// A chunk that does not exist: it reads as zeros.
    pub fn absent(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            file: None,
        }
    }

    pub fn exists(&self) -> bool {
        self.file.is_some()
    }

    /// The whole chunk, `len` bytes.
    pub fn read_all(&self, len: usize) -> Result<Vec<u8>, DoneMarkerError> {
        let mut bytes = Vec::with_capacity(len);
        if let Some(mut file) = self.file.as_ref() {
            file.read_to_end(&mut bytes).map_err(self.io())?;
        }
        bytes.resize(len, 0);
        Ok(bytes)
    }

    pub fn read_at(&self, buf: &mut [u8], offset: usize) -> Result<(), DoneMarkerError> {
        match &self.file {
            Some(file) => file.read_exact_at(buf, offset as u64).map_err(self.io()),
            None => {
                buf.fill(0);
                Ok(())
            }
        }
    }

    /// Writes `bytes` at `offset`; the caller opened the chunk writable,
    /// which creates a missing one.
    pub fn write_at(&self, bytes: &[u8], offset: usize) -> Result<(), DoneMarkerError> {
        let file = self.file.as_ref().ok_or_else(|| {
            let missing = io::Error::new(io::ErrorKind::NotFound, "the chunk was never created");
            io_error(&self.path)(missing)
        })?;
        file.write_all_at(bytes, offset as u64).map_err(self.io())
    }

    /// Forces the chunk's writes to disk (power loss).
    pub fn sync(&self) -> Result<(), DoneMarkerError> {
        match &self.file {
            Some(file) => file.sync_data().map_err(self.io()),
            None => Ok(()),
        }
    }

    fn io(&self) -> impl FnOnce(io::Error) -> DoneMarkerError + '_ {
        io_error(&self.path)
    }
}

/// The first file below `path` (or `path` itself) holding a nonzero
/// byte, whatever the chunk layout; `None` if there is none. For nodes
/// whose `zarr.json` is missing: zeroes are what an interrupted creation
/// leaves, anything else was recorded.
pub(super) fn file_with_data(path: &Path) -> Result<Option<PathBuf>, DoneMarkerError> {
    let meta = match fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        meta => meta.map_err(io_error(path))?,
    };
    if meta.is_file() {
        let bytes = fs::read(path).map_err(io_error(path))?;
        return Ok(bytes.iter().any(|&b| b != 0).then(|| path.to_path_buf()));
    }
    for entry in fs::read_dir(path).map_err(io_error(path))? {
        let entry = entry.map_err(io_error(path))?;
        if let Some(found) = file_with_data(&entry.path())? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}
