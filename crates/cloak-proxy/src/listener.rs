//! The ports the proxy serves clients on: plain TCP, TLS, or both side by side.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;

use cloak_storage::tls::ServerTls;
use tokio::net::{TcpListener, TcpStream};

/// One listening port, and the TLS its clients must speak (none on a plain port).
pub struct Listener {
    tcp: TcpListener,
    tls: Option<Arc<ServerTls>>,
}

impl Listener {
    /// A port that speaks RESP in the clear.
    pub fn plain(tcp: TcpListener) -> Self {
        Self { tcp, tls: None }
    }

    /// A port that speaks RESP inside TLS.
    pub fn tls(tcp: TcpListener, tls: Arc<ServerTls>) -> Self {
        Self {
            tcp,
            tls: Some(tls),
        }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// Whether clients must speak TLS here.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Whether every client here must authenticate before it is served: with a client
    /// certificate during the handshake (a password is the front end's business).
    pub fn requires_client_certificate(&self) -> bool {
        self.tls
            .as_ref()
            .is_some_and(|tls| tls.requires_client_certificate())
    }
}

impl From<TcpListener> for Listener {
    fn from(tcp: TcpListener) -> Self {
        Self::plain(tcp)
    }
}

/// The next connection on any of `listeners`, with the TLS it must speak. Cancel-safe, like
/// [`TcpListener::accept`].
pub(crate) async fn accept_any(
    listeners: &[Listener],
) -> (std::io::Result<TcpStream>, Option<Arc<ServerTls>>) {
    std::future::poll_fn(|cx| {
        for listener in listeners {
            if let Poll::Ready(accepted) = listener.tcp.poll_accept(cx) {
                return Poll::Ready((accepted.map(|(stream, _)| stream), listener.tls.clone()));
            }
        }
        Poll::Pending
    })
    .await
}
