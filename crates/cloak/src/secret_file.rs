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
    let exposed = cloak_storage::private_file::exposed_mode(path)
        .with_context(|| format!("cannot read the {} {shown}", holds.name()))?;
    if let Some(mode) = exposed {
        return Err(refusal(path, mode, holds));
    }
    std::fs::read(path).with_context(|| format!("cannot read the {} {shown}", holds.name()))
}

/// Why a secret file of permission bits `mode` (which let the group or others read or write
/// it) is refused, and how to fix it.
fn refusal(path: &Path, mode: u32, holds: Holds) -> anyhow::Error {
    let shown = path.display();
    anyhow::anyhow!(
        "the {} {shown} has mode {mode:04o}: others than its owner may read or change it (and \
         with it {}); make it private with `chmod 600 {shown}`",
        holds.name(),
        holds.grants()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_file_its_mode_what_it_grants_and_the_fix() {
        let error = refusal(Path::new("/etc/cloak/key"), 0o644, Holds::MasterKey).to_string();
        assert!(
            error.contains("the key file /etc/cloak/key has mode 0644")
                && error.contains("every record")
                && error.contains("chmod 600 /etc/cloak/key"),
            "{error}"
        );
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
