//! The accepting side of TLS: a certificate and key, and optionally a CA whose certificates
//! clients must present (mutual TLS). The files are read again on [`ServerTls::reload`], or on
//! [`ServerTls::reload_if_changed`] when one of them changed on disk: new connections get the new
//! certificate, established ones keep the session they have.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::{HANDSHAKE_TIMEOUT, TlsError, pem};

/// Where the accepting side's certificate, key and client CA are.
#[derive(Clone, Debug)]
pub struct ServerTlsFiles {
    /// The certificate (and its chain) presented to peers.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// When set, peers must present a certificate signed by this CA.
    pub client_ca: Option<PathBuf>,
}

/// When each file was last modified, as of the last read (nothing where it could not be read).
/// Writing or replacing a file changes it.
type Stamp = Vec<Option<(SystemTime, u32)>>;

/// When `path` last changed, and its permission bits: a key refused for its mode is tried
/// again once it is made private, which `chmod` does without changing the modification time.
fn file_stamp(path: &PathBuf) -> Option<(SystemTime, u32)> {
    let metadata = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let mode = std::os::unix::fs::PermissionsExt::mode(&metadata.permissions());
    #[cfg(not(unix))]
    let mode = 0;
    Some((metadata.modified().ok()?, mode))
}

impl ServerTlsFiles {
    fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()]
            .into_iter()
            .flatten()
    }

    fn stamp(&self) -> Stamp {
        self.paths().map(file_stamp).collect()
    }

    fn load(&self) -> Result<ServerConfig, TlsError> {
        let certs = pem::certificates(&self.cert)?;
        let key = pem::private_key(&self.key)?;
        let builder = ServerConfig::builder();
        let builder = match &self.client_ca {
            Some(ca) => builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder(Arc::new(pem::roots(ca)?)).build()?,
            ),
            None => builder.with_no_client_auth(),
        };
        Ok(builder.with_single_cert(certs, key)?)
    }
}

/// TLS for a listener, reloadable while it serves.
pub struct ServerTls {
    files: ServerTlsFiles,
    config: RwLock<Arc<ServerConfig>>,
    /// The files as they were at the last load or attempt.
    seen: Mutex<Stamp>,
    handshake_timeout: Duration,
}

impl ServerTls {
    /// Reads the files now, so a wrong path or a key that does not match fails at start.
    pub fn load(files: ServerTlsFiles) -> Result<Self, TlsError> {
        let seen = Mutex::new(files.stamp());
        let config = RwLock::new(Arc::new(files.load()?));
        Ok(Self {
            files,
            config,
            seen,
            handshake_timeout: HANDSHAKE_TIMEOUT,
        })
    }

    /// How long a client may take over the handshake (tests shorten it).
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// Whether peers must present a certificate.
    pub fn requires_client_certificate(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// Reads the files again. On an error the certificate in use stays, so a half-written file
    /// never takes the listener down.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = Arc::new(self.files.load()?);
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config;
        Ok(())
    }

    /// Reads the files again if any was modified since they were last read; `None`
    /// when none did. A file caught half-written fails to load and keeps the old certificate;
    /// finishing the write changes it again, so the next call tries again.
    pub fn reload_if_changed(&self) -> Option<Result<(), TlsError>> {
        let now = self.files.stamp();
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if *seen == now {
                return None;
            }
            *seen = now;
        }
        Some(self.reload())
    }

    /// The handshake on a freshly accepted connection, with the certificate in force now.
    pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: S,
    ) -> Result<TlsStream<S>, TlsError> {
        let config = self
            .config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        tokio::time::timeout(
            self.handshake_timeout,
            TlsAcceptor::from(config).accept(stream),
        )
        .await
        .map_err(|_| TlsError::HandshakeTimeout(self.handshake_timeout))?
        .map_err(TlsError::Handshake)
    }
}
