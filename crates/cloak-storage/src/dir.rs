//! Directories that hold durable state: made when missing, and checked at start that they can
//! really take writes, so a read-only or full disk stops a start instead of losing data later.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

/// Why a data or state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// The operating system refused an operation on a file in it.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// It exists but cannot serve (not a directory, locked, from another store…).
    #[error("{path} is not usable: {reason}")]
    Unusable {
        /// The directory.
        path: String,
        /// Why not.
        reason: String,
    },
}

/// Creates `path` if needed and checks that a file written and synced there survives: it fails
/// when the directory is read-only, the disk is full, or `path` is not a directory.
pub fn prepare(path: &Path) -> Result<(), DirError> {
    let unusable = |reason: String| DirError::Unusable {
        path: path.display().to_string(),
        reason,
    };
    if path.exists() && !path.is_dir() {
        return Err(unusable("it is not a directory".into()));
    }
    fs::create_dir_all(path).map_err(|e| unusable(format!("cannot create it ({e})")))?;
    let probe = path.join(".probe");
    write_synced(&probe, &[0u8; 4096]).map_err(|e| {
        unusable(format!(
            "writing and syncing a test file failed ({e}); is the disk full or read-only?"
        ))
    })?;
    let _ = fs::remove_file(&probe);
    Ok(())
}

/// Takes `path/lock` for this process alone, so two servers never write one directory; the
/// lock lasts as long as the returned file is open.
pub fn lock(path: &Path) -> Result<File, DirError> {
    let file = path.join("lock");
    let handle = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(&file)
        .map_err(|source| DirError::Io {
            path: file.display().to_string(),
            source,
        })?;
    handle.try_lock().map_err(|e| DirError::Unusable {
        path: path.display().to_string(),
        reason: format!("another process is using it ({e})"),
    })?;
    Ok(handle)
}

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename, fsync the directory).
pub fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_in_place_of_directories_and_second_users_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        prepare(dir.path()).unwrap();
        let file = dir.path().join("not-a-dir");
        fs::write(&file, b"x").unwrap();
        assert!(prepare(&file).is_err());
        assert!(prepare(&file.join("below-a-file")).is_err());
        let _held = lock(dir.path()).unwrap();
        let error = lock(dir.path()).unwrap_err();
        assert!(error.to_string().contains("another process"), "{error}");
    }
}
