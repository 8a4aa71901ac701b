//! `--tls`: both links of a measured proxy over TLS, as the README deploys them (the storage
//! link with mutual TLS), with a CA and certificates made for the run.

use cloak_storage::Link;
use cloak_storage::tls::certs::{QuickStart, write_quick_start};
use cloak_storage::tls::client::ClientTlsFiles;
use cloak_storage::tls::{ClientTls, TlsError};

/// The run's certificates, and the client configurations that trust them.
pub struct BenchTls {
    files: QuickStart,
    /// The benchmark's clients towards the proxy: they check its certificate, present none.
    clients: ClientTls,
    /// The preload's link to `cloak server`: with the client certificate the server requires.
    storage: ClientTls,
    _dir: tempfile::TempDir,
}

impl BenchTls {
    /// A new CA and certificates in a temporary directory, removed when this is dropped.
    pub fn new() -> Result<Self, TlsError> {
        let dir = tempfile::tempdir().map_err(|error| TlsError::File {
            path: std::env::temp_dir(),
            error,
        })?;
        let files = write_quick_start(dir.path(), &[])?;
        let clients = ClientTls::load(&ClientTlsFiles {
            ca: Some(files.ca.clone()),
            identity: None,
        })?;
        let storage = ClientTls::load(&ClientTlsFiles {
            ca: Some(files.ca.clone()),
            identity: Some(files.client.clone()),
        })?;
        Ok(Self {
            files,
            clients,
            storage,
            _dir: dir,
        })
    }

    /// `cloak server`'s flags: TLS, and only proxies with the run's client certificate.
    pub fn server_args(&self) -> Vec<String> {
        flags(&[
            ("--tls-cert", &self.files.server.0),
            ("--tls-key", &self.files.server.1),
            ("--client-ca", &self.files.ca),
        ])
    }

    /// `cloak proxy`'s flags: TLS towards storage with its client certificate, and TLS only
    /// on the client port.
    pub fn proxy_args(&self) -> Vec<String> {
        flags(&[
            ("--storage-ca", &self.files.ca),
            ("--storage-cert", &self.files.client.0),
            ("--storage-key", &self.files.client.1),
            ("--tls-cert", &self.files.server.0),
            ("--tls-key", &self.files.server.1),
        ])
    }

    /// What the benchmark's clients speak to the proxy.
    pub fn clients(&self) -> ClientTls {
        self.clients.clone()
    }

    /// The preload's link to `cloak server`.
    pub fn storage_link(&self) -> Link {
        Link {
            tls: Some(self.storage.clone()),
            secret: None,
        }
    }
}

fn flags(pairs: &[(&str, &std::path::PathBuf)]) -> Vec<String> {
    pairs
        .iter()
        .flat_map(|(flag, path)| [flag.to_string(), path.display().to_string()])
        .collect()
}

impl std::fmt::Debug for BenchTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BenchTls")
            .field("ca", &self.files.ca)
            .finish_non_exhaustive()
    }
}
