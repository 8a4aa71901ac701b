//! `--storage URL`: which backend the proxy keeps its elements in, and how the link to it is
//! secured.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use cloak_storage::tls::ClientTls;
use cloak_storage::tls::client::ClientTlsFiles;
use cloak_storage::{Link, MemoryStorage, RedisStorage, RedisTarget, Storage, TcpStorage};

pub const SCHEMES: &str = "tcp://HOST:PORT or tls://HOST:PORT (a cloak server), \
                           redis[s]://[USER:PASSWORD@]HOST:PORT[?prefix=P], \
                           redis[s]+cluster://HOST:PORT,HOST:PORT,…[?prefix=P] or memory";

/// The proxy's side of the storage link: `--storage-ca`, `--storage-cert`/`--storage-key`,
/// `--storage-secret-file`.
#[derive(Default)]
pub struct StorageCredentials {
    pub ca: Option<PathBuf>,
    pub identity: Option<(PathBuf, PathBuf)>,
    pub secret_file: Option<PathBuf>,
}

impl StorageCredentials {
    fn tls_files(&self) -> ClientTlsFiles {
        ClientTlsFiles {
            ca: self.ca.clone(),
            identity: self.identity.clone(),
        }
    }

    /// TLS towards a cloak server: its certificate must chain to --storage-ca.
    fn tls(&self, url: &str) -> anyhow::Result<ClientTls> {
        if self.ca.is_none() {
            bail!("{url} needs --storage-ca: the CA that signed the storage server's certificate");
        }
        ClientTls::load(&self.tls_files()).context("storage TLS")
    }

    /// Settings that only make sense with some URLs, refused with the others rather than
    /// silently ignored.
    fn refuse_unused(&self, url: &str, tls: bool, secret: bool) -> anyhow::Result<()> {
        if !tls && (self.ca.is_some() || self.identity.is_some()) {
            bail!(
                "--storage-ca/--storage-cert are for tls://, rediss:// and rediss+cluster://, not {url}"
            );
        }
        if !secret && self.secret_file.is_some() {
            bail!("--storage-secret-file is for a cloak server (tcp:// or tls://), not {url}");
        }
        Ok(())
    }
}

/// The backend `url` names. `max_element`, the largest element the store writes, bounds
/// storage's answers to reads (a Redis's, a Redis Cluster's or a cloak server's).
pub async fn connect(
    url: String,
    connections: usize,
    credentials: StorageCredentials,
    max_element: usize,
) -> anyhow::Result<Arc<dyn Storage>> {
    let url = url.as_str();
    if url == "memory" {
        credentials.refuse_unused(url, false, false)?;
        return Ok(Arc::new(MemoryStorage::new()));
    }
    if let Some(target) = RedisTarget::parse(url) {
        let target = target.context("--storage")?;
        credentials.refuse_unused(url, target.tls, false)?;
        // Without --storage-ca, the system's trusted CAs check the Redis's certificate.
        let tls = target.tls.then(|| credentials.tls_files());
        let storage = RedisStorage::connect(target, tls.as_ref())
            .await
            .context("storage")?
            .with_max_element(max_element);
        return Ok(Arc::new(storage));
    }
    let (tls, addr) = match url.split_once("://") {
        Some(("tcp", addr)) if !addr.is_empty() => (false, addr),
        Some(("tls", addr)) if !addr.is_empty() => (true, addr),
        _ => bail!("unsupported --storage {url:?}; use {SCHEMES}"),
    };
    credentials.refuse_unused(url, tls, true)?;
    let link = Link {
        tls: tls.then(|| credentials.tls(url)).transpose()?,
        secret: credentials
            .secret_file
            .as_deref()
            .map(crate::secret_file::storage_secret)
            .transpose()?,
    };
    let storage = TcpStorage::connect_with(addr, connections, link)
        .await
        .context("storage")?
        .with_max_element(max_element);
    Ok(Arc::new(storage))
}
