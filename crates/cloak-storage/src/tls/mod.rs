//! TLS for both of Cloak's links: clients to the proxy, and the proxy to `cloak server`.
//!
//! - [`pem`]: certificates and keys read from PEM files, with errors that name the file.
//! - [`server`]: the accepting side, its certificate reloadable while it runs, client
//!   certificates optionally required (mutual TLS).
//! - [`client`]: the connecting side, trusting a given CA, optionally presenting a certificate.
//! - [`certs`]: a test CA and certificates signed by it, for a quick start and for tests.
//!
//! Both sides bound the handshake with [`HANDSHAKE_TIMEOUT`]: a peer that connects and never
//! finishes the handshake (or a wrong peer that waits for the other to speak) fails with a clear
//! error instead of holding a connection, or a caller, forever.
//!
//! What TLS changes for the storage server: nothing it can learn from the elements. It still
//! sees every element it stores (TLS ends at the server), and the sizes and timing of TLS
//! records follow the sizes and timing of the requests inside them, which the scheme's fixed
//! schedule and fixed element size already make public. TLS hides the link from everyone else.

pub mod certs;
pub mod client;
pub mod pem;
pub mod server;

use std::path::PathBuf;
use std::time::Duration;

pub use client::ClientTls;
pub use server::ServerTls;

/// The longest a TLS handshake may take before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why TLS could not be set up, or a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read (or, making certificates, written).
    #[error("{path}: {error}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A private key file that others than its owner may read or change.
    #[error(
        "{path} has mode {mode:04o}: others than its owner may read or change this private key \
         (and with it pose as this side of the link); make it private with `chmod 600 {path}`"
    )]
    KeyNotPrivate {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A file holds no PEM item of the kind wanted, or a malformed one.
    #[error("{path}: {what}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// rustls refused the configuration (a key that does not match its certificate, say).
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// A CA file's certificates cannot verify anything.
    #[error("client CA: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// A client with no CA to check the server's certificate against.
    #[error("no CA to check the server's certificate against")]
    NoCa,
    /// No CA given, and the system's trusted CAs cannot be read.
    #[error("no CA given, and the system's trusted CAs cannot be used: {0}")]
    NoSystemCa(String),
    /// The host name cannot be a TLS server name.
    #[error("{0:?} is not a valid TLS server name")]
    ServerName(String),
    /// Certificate generation failed.
    #[error("cannot make a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The handshake failed: the peer's certificate was refused, or it refused ours.
    #[error("TLS handshake failed: {0}")]
    Handshake(std::io::Error),
    /// The peer did not finish the handshake within [`HANDSHAKE_TIMEOUT`].
    #[error("TLS handshake did not finish within {0:?}")]
    HandshakeTimeout(Duration),
}
