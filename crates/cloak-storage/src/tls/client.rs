//! The connecting side of TLS: the CA the server's certificate must chain to, and optionally a
//! certificate of our own for servers that require one (mutual TLS).

use std::path::PathBuf;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::{HANDSHAKE_TIMEOUT, TlsError, pem};

/// Where the connecting side's trust anchor and own certificate are.
#[derive(Clone, Debug)]
pub struct ClientTlsFiles {
    /// The CA that signed the server's certificate; the `redis` crate falls back on the
    /// system's CAs without one, [`ClientTls`] refuses.
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
        let builder = ClientConfig::builder().with_root_certificates(pem::roots(ca)?);
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
