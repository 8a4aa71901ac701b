//! Whether a file that holds a secret (a TLS private key here; the master key, storage secret
//! and cluster secret in the `cloak` binary) is private to its owner, as ssh insists of a
//! private key: a secret others may read is no longer one, and one others may change lets them
//! put their own in its place.

use std::path::Path;

/// The permission bits of `path` (as `stat` gives them, `0o7777` masked) if its group or others
/// may read or change it; `None` if only its owner may, and always on systems without Unix
/// permissions.
pub fn exposed_mode(path: &Path) -> std::io::Result<Option<u32>> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)?.permissions().mode();
        Ok(exposed(mode).then_some(mode & 0o7777))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(None)
    }
}

/// Whether permission bits let the group or others read or write.
fn exposed(mode: u32) -> bool {
    mode & 0o077 != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_owner_only_modes_are_private() {
        for private in [0o100600, 0o100400, 0o100700] {
            assert!(!exposed(private), "{private:o}");
        }
        for open in [0o100644, 0o100640, 0o100604, 0o100620, 0o100602, 0o100666] {
            assert!(exposed(open), "{open:o}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn the_mode_is_read_from_the_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, b"secret").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(exposed_mode(&path).unwrap(), Some(0o640));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(exposed_mode(&path).unwrap(), None);
    }
}
