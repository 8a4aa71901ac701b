//! Files that hold a secret: the master key (`--key-file`), the storage secret
//! (`--storage-secret-file`) and the cluster secret (`--cluster-secret-file`). Each is refused,
//! before it is read, when its group or anyone else may read or change it, as ssh refuses such a
//! private key: whoever reads the key reads every record, whoever reads a secret may pose as a
//! proxy to storage or move partitions, and whoever may write one may make the proxy trust their
//! own. `cloak keygen -o FILE` and a proxy's state directory make them mode 0600.

use std::path::Path;

use anyhow::Context;
use cloak_cluster::ClusterSecret;
use cloak_crypto::MasterKey;
use cloak_storage::handshake::StorageSecret;

/// What a secret file holds, for its error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holds {
    /// `--key-file`.
    MasterKey,
    /// `--storage-secret-file`.
    StorageAccess,
    /// `--cluster-secret-file`.
    ClusterAdmin,
}

impl Holds {
    fn name(self) -> &'static str {
        match self {
            Holds::MasterKey => "key file",
            Holds::StorageAccess => "storage secret file",
            Holds::ClusterAdmin => "cluster secret file",
        }
    }

    /// What someone who reads the file can do.
    fn grants(self) -> &'static str {
        match self {
            Holds::MasterKey => "every record stored under it",
            Holds::StorageAccess => "a proxy's access to the storage server",
            Holds::ClusterAdmin => "the right to move partitions",
        }
    }
}

/// The master key in `path` (`--key-file`).
pub fn master_key(path: &Path) -> anyhow::Result<MasterKey> {
    let bytes = read(path, Holds::MasterKey)?;
    let text = String::from_utf8_lossy(&bytes);
    MasterKey::from_hex(&text).with_context(|| format!("the key file {}", path.display()))
}

/// The storage secret in `path` (`--storage-secret-file`).
pub fn storage_secret(path: &Path) -> anyhow::Result<StorageSecret> {
    let bytes = read(path, Holds::StorageAccess)?;
    Ok(StorageSecret::new(&bytes, &path.display().to_string())?)
}

/// The cluster secret in `path` (`--cluster-secret-file`), for a proxy and for the tools alike.
pub fn cluster_secret(path: &Path) -> anyhow::Result<ClusterSecret> {
    let bytes = read(path, Holds::ClusterAdmin)?;
    Ok(ClusterSecret::new(&bytes, &path.display().to_string())?)
}

/// The bytes of the secret file `path`, once its permissions are checked.
fn read(path: &Path, holds: Holds) -> anyhow::Result<Vec<u8>> {
    let shown = path.display();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let metadata = std::fs::metadata(path)
            .with_context(|| format!("cannot read the {} {shown}", holds.name()))?;
        check_private(path, metadata.permissions().mode(), holds)?;
    }
    std::fs::read(path).with_context(|| format!("cannot read the {} {shown}", holds.name()))
}

/// Refuses permission bits (`mode`, as `stat` gives them) that let the group or others read or
/// write the file.
fn check_private(path: &Path, mode: u32, holds: Holds) -> anyhow::Result<()> {
    if mode & 0o077 == 0 {
        return Ok(());
    }
    let shown = path.display();
    anyhow::bail!(
        "the {} {shown} has mode {:04o}: others than its owner may read or change it (and with \
         it {}); make it private with `chmod 600 {shown}`",
        holds.name(),
        mode & 0o7777,
        holds.grants()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_its_group_or_others_may_read_or_change_is_refused_naming_the_fix() {
        let path = Path::new("/etc/cloak/key");
        for private in [0o100600, 0o100400, 0o100700] {
            assert!(check_private(path, private, Holds::MasterKey).is_ok());
        }
        for exposed in [0o100644, 0o100640, 0o100604, 0o100620, 0o100602, 0o100666] {
            let error = check_private(path, exposed, Holds::MasterKey)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains(&format!(
                    "the key file /etc/cloak/key has mode {:04o}",
                    exposed & 0o7777
                )) && error.contains("every record")
                    && error.contains("chmod 600 /etc/cloak/key"),
                "{error}"
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn read_checks_the_mode_before_it_reads() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, b"0123456789abcdef0123").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = read(&path, Holds::StorageAccess).unwrap_err().to_string();
        assert!(
            error.contains("storage secret file") && error.contains("mode 0644"),
            "{error}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            read(&path, Holds::StorageAccess).unwrap(),
            b"0123456789abcdef0123"
        );
    }
}
