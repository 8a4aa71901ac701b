//! The connecting side of TLS: the CA the server's certificate must chain to, and optionally a
//! certificate of our own for servers that require one (mutual TLS).

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::{HANDSHAKE_TIMEOUT, TlsError, pem};

/// Where the connecting side's trust anchor and own certificate are.
#[derive(Clone, Debug)]
pub struct ClientTlsFiles {
    /// The CA that signed the server's certificate; without one, [`ClientTls::load`] refuses
    /// and [`ClientTls::load_or_system_roots`] (a Redis's) takes the system's CAs.
    pub ca: Option<PathBuf>,
    /// Our certificate and key, for servers that ask for one.
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// A TLS client configuration, read once.
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<ClientConfig>,
}

impl ClientTls {
    /// Reads the files.
    pub fn load(files: &ClientTlsFiles) -> Result<Self, TlsError> {
        let ca = files.ca.as_deref().ok_or(TlsError::NoCa)?;
        Self::with_roots(pem::roots(ca)?, files)
    }

    /// Reads the files; without a CA among them, the system's trusted CAs check the server's
    /// certificate (as for a Redis with a certificate from a public CA).
    pub fn load_or_system_roots(files: &ClientTlsFiles) -> Result<Self, TlsError> {
        match files.ca {
            Some(_) => Self::load(files),
            None => {
                let mut roots = RootCertStore::empty();
                let found = rustls_native_certs::load_native_certs();
                // Certificates the system holds but rustls cannot use are skipped, as the
                // `redis` crate does; none usable at all is an error.
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    return Err(TlsError::NoSystemCa(format!("{:?}", found.errors)));
                }
                Self::with_roots(roots, files)
            }
        }
    }

    fn with_roots(roots: RootCertStore, files: &ClientTlsFiles) -> Result<Self, TlsError> {
        let builder = ClientConfig::builder().with_root_certificates(roots);
        let config = match &files.identity {
            Some((cert, key)) => {
                builder.with_client_auth_cert(pem::certificates(cert)?, pem::private_key(key)?)?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(Self {
            config: Arc::new(config),
        })
    }

    /// The rustls configuration (for libraries that take one, like the `redis` crate).
    pub fn config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }

    /// The handshake with `host` (the name its certificate must carry) over `stream`.
    pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        host: &str,
        stream: S,
    ) -> Result<TlsStream<S>, TlsError> {
        let name = server_name(host)?;
        let connector = TlsConnector::from(self.config.clone());
        tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, stream))
            .await
            .map_err(|_| TlsError::HandshakeTimeout(HANDSHAKE_TIMEOUT))?
            .map_err(TlsError::Handshake)
    }
}

/// `host` (a DNS name or an IP address, without a port) as the name to check the certificate
/// against.
pub fn server_name(host: &str) -> Result<ServerName<'static>, TlsError> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(bare.to_string()).map_err(|_| TlsError::ServerName(host.to_string()))
}

/// `HOST` of `HOST:PORT` (IPv6 in brackets).
pub fn host_of(addr: &str) -> &str {
    match addr.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => addr,
    }
}
