//! The first bytes on every connection to `cloak server`: the server's greeting, and when it
//! has a storage secret, a challenge–response in which each side proves it knows the secret
//! without sending it.
//!
//! ```text
//! server → proxy   greeting = "CLOAK-STORAGE-01" ‖ mode (u8: 0 open, 1 secret, 2 full) ‖ nonce_s (32)
//! proxy  → server  (mode 1) nonce_p (32) ‖ HMAC-SHA256(secret, "cloak proxy"  ‖ nonce_s ‖ nonce_p)
//! server → proxy   (mode 1) verdict (u8: 1 accepted, 0 refused)
//!                           ‖ HMAC-SHA256(secret, "cloak server" ‖ nonce_s ‖ nonce_p)  (zeros if refused)
//! ```
//!
//! A server at its connection limit greets with mode 2 (and a zero nonce) and closes, so the proxy
//! can say why instead of reporting a reset.
//!
//! Every message has a fixed size, so nothing a peer announces makes the other side allocate,
//! and each side reads with [`HANDSHAKE_TIMEOUT`]. Both nonces are fresh and random, so a
//! recorded exchange cannot be replayed to either side; the two MACs use different labels, so
//! the server cannot be made to answer its own challenge for a proxy that does not know the
//! secret. MACs are compared in constant time (`ring::hmac::verify`). The proxy refuses a server
//! that does not check a secret when it has one: such a server has proved nothing.
//!
//! What the server learns here: that a proxy knowing the secret connected. The nonces and MACs
//! are random-looking and carry nothing about the store.

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::tls::HANDSHAKE_TIMEOUT;

const MAGIC: &[u8; 16] = b"CLOAK-STORAGE-01";
const NONCE: usize = 32;
const MAC: usize = 32;
const GREETING: usize = MAGIC.len() + 1 + NONCE;
const OPEN: u8 = 0;
const SECRET: u8 = 1;
const FULL: u8 = 2;
const ACCEPTED: u8 = 1;
const REFUSED: u8 = 0;

/// The shortest storage secret accepted: 256 bits as `cloak keygen` writes them (hex).
pub const MIN_SECRET_BYTES: usize = 32;

/// Why a storage connection's handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The secret is too short to resist guessing.
    #[error(
        "the storage secret in {0} is shorter than {MIN_SECRET_BYTES} bytes; make one with `cloak keygen`"
    )]
    TooShort(String),
    /// The peer sent something other than this protocol, or closed without greeting. A TLS
    /// server waits for a hello that never comes and closes after its own handshake timeout,
    /// which races ours: so this error, too, names `tls://`.
    #[error(
        "the storage server did not greet as a cloak server does (is it one, of this version? a \
         server that speaks TLS is reached with tls://)"
    )]
    NotCloak,
    /// The server requires a secret and this proxy has none.
    #[error("the storage server requires a storage secret: pass --storage-secret-file")]
    SecretRequired,
    /// This proxy has a secret and the server does not check one.
    #[error(
        "the storage server does not check a storage secret, so it has not proved it knows \
         ours: refusing it (start it with --storage-secret-file, or drop ours)"
    )]
    ServerUnproven,
    /// The server has as many connections as it allows.
    #[error(
        "the storage server is at its connection limit (its --max-connections): close other \
         connections to it or raise the limit"
    )]
    Full,
    /// The server refused our proof.
    #[error("the storage server refused this proxy's storage secret (the secrets differ)")]
    Refused,
    /// The server's proof was wrong.
    #[error("the storage server does not know the storage secret (the secrets differ)")]
    ServerWrong,
    /// The peer took longer than [`HANDSHAKE_TIMEOUT`].
    #[error(
        "the storage handshake did not finish within {HANDSHAKE_TIMEOUT:?} (a server that \
         speaks TLS is reached with tls://)"
    )]
    Timeout,
    /// The connection failed.
    #[error("the storage handshake failed: {0}")]
    Io(#[from] std::io::Error),
    /// No randomness for a nonce.
    #[error("no randomness for a nonce")]
    Random,
}

/// A secret shared by `cloak server` and the proxies it serves.
#[derive(Clone)]
pub struct StorageSecret(hmac::Key);

impl StorageSecret {
    /// The secret from `bytes` (leading and trailing whitespace dropped).
    pub fn new(bytes: &[u8], source: &str) -> Result<Self, HandshakeError> {
        let trimmed = bytes.trim_ascii();
        if trimmed.len() < MIN_SECRET_BYTES {
            return Err(HandshakeError::TooShort(source.to_string()));
        }
        Ok(Self(hmac::Key::new(hmac::HMAC_SHA256, trimmed)))
    }

    fn proof(&self, label: &[u8], server: &[u8], proxy: &[u8]) -> hmac::Tag {
        let mut context = hmac::Context::with_key(&self.0);
        for part in [label, server, proxy] {
            context.update(part);
        }
        context.sign()
    }

    fn verify(&self, label: &[u8], server: &[u8], proxy: &[u8], mac: &[u8]) -> bool {
        let mut message = Vec::with_capacity(label.len() + 2 * NONCE);
        for part in [label, server, proxy] {
            message.extend_from_slice(part);
        }
        hmac::verify(&self.0, &message, mac).is_ok()
    }
}

const PROXY_LABEL: &[u8] = b"cloak proxy";
const SERVER_LABEL: &[u8] = b"cloak server";

fn nonce() -> Result<[u8; NONCE], HandshakeError> {
    let mut nonce = [0; NONCE];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| HandshakeError::Random)?;
    Ok(nonce)
}

async fn timed<T>(
    step: impl Future<Output = Result<T, HandshakeError>>,
) -> Result<T, HandshakeError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, step)
        .await
        .map_err(|_| HandshakeError::Timeout)?
}

/// The server's side: greets, and with a secret, admits only a peer that proves it.
pub async fn admit<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    secret: Option<&StorageSecret>,
) -> Result<(), HandshakeError> {
    timed(async {
        let server_nonce = nonce()?;
        let mut greeting = Vec::with_capacity(GREETING);
        greeting.extend_from_slice(MAGIC);
        greeting.push(if secret.is_some() { SECRET } else { OPEN });
        greeting.extend_from_slice(&server_nonce);
        stream.write_all(&greeting).await?;
        stream.flush().await?;
        let Some(secret) = secret else {
            return Ok(());
        };
        let mut answer = [0; NONCE + MAC];
        stream.read_exact(&mut answer).await?;
        let (proxy_nonce, mac) = answer.split_at(NONCE);
        let mut verdict = [REFUSED; 1 + MAC];
        let admitted = secret.verify(PROXY_LABEL, &server_nonce, proxy_nonce, mac);
        if admitted {
            verdict[0] = ACCEPTED;
            let proof = secret.proof(SERVER_LABEL, &server_nonce, proxy_nonce);
            verdict[1..].copy_from_slice(proof.as_ref());
        }
        stream.write_all(&verdict).await?;
        stream.flush().await?;
        if admitted {
            Ok(())
        } else {
            Err(HandshakeError::Refused)
        }
    })
    .await
}

/// The greeting of a server at its connection limit: written without waiting (a peer that does
/// not read it just misses it), so turning a connection away costs no task and no buffer.
pub fn turn_away(stream: &tokio::net::TcpStream) {
    let mut greeting = [0; GREETING];
    greeting[..MAGIC.len()].copy_from_slice(MAGIC);
    greeting[MAGIC.len()] = FULL;
    let _ = stream.try_write(&greeting);
}

/// The proxy's side: reads the greeting, and proves (and checks) the secret when there is one.
pub async fn join<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    secret: Option<&StorageSecret>,
) -> Result<(), HandshakeError> {
    timed(async {
        let mut greeting = [0; GREETING];
        match stream.read_exact(&mut greeting).await {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(HandshakeError::NotCloak);
            }
            Err(error) => return Err(error.into()),
        }
        let (magic, rest) = greeting.split_at(MAGIC.len());
        if magic != MAGIC {
            return Err(HandshakeError::NotCloak);
        }
        let server_nonce = &rest[1..];
        let secret = match (rest[0], secret) {
            (OPEN, None) => return Ok(()),
            (OPEN, Some(_)) => return Err(HandshakeError::ServerUnproven),
            (SECRET, None) => return Err(HandshakeError::SecretRequired),
            (SECRET, Some(secret)) => secret,
            (FULL, _) => return Err(HandshakeError::Full),
            _ => return Err(HandshakeError::NotCloak),
        };
        let proxy_nonce = nonce()?;
        let mut answer = Vec::with_capacity(NONCE + MAC);
        answer.extend_from_slice(&proxy_nonce);
        answer.extend_from_slice(
            secret
                .proof(PROXY_LABEL, server_nonce, &proxy_nonce)
                .as_ref(),
        );
        stream.write_all(&answer).await?;
        stream.flush().await?;
        let mut verdict = [0; 1 + MAC];
        match stream.read_exact(&mut verdict).await {
            Ok(_) if verdict[0] == ACCEPTED => {}
            // A refusing server may close before we read its verdict.
            Ok(_) => return Err(HandshakeError::Refused),
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(HandshakeError::Refused);
            }
            Err(error) => return Err(error.into()),
        }
        if secret.verify(SERVER_LABEL, server_nonce, &proxy_nonce, &verdict[1..]) {
            Ok(())
        } else {
            Err(HandshakeError::ServerWrong)
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(text: &str) -> StorageSecret {
        StorageSecret::new(text.as_bytes(), "test").unwrap()
    }

    async fn both(
        server: Option<StorageSecret>,
        proxy: Option<StorageSecret>,
    ) -> (Result<(), HandshakeError>, Result<(), HandshakeError>) {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let server = tokio::spawn(async move { admit(&mut a, server.as_ref()).await });
        let proxy = join(&mut b, proxy.as_ref()).await;
        (server.await.unwrap(), proxy)
    }

    const ONE: &str = "0123456789abcdef0123456789abcdef-one";
    const TWO: &str = "0123456789abcdef0123456789abcdef-two";

    #[tokio::test]
    async fn the_same_secret_is_admitted_and_a_different_one_refused() {
        let (server, proxy) = both(Some(secret(ONE)), Some(secret(ONE))).await;
        assert!(server.is_ok() && proxy.is_ok(), "{server:?} {proxy:?}");
        let (server, proxy) = both(Some(secret(ONE)), Some(secret(TWO))).await;
        assert!(matches!(server, Err(HandshakeError::Refused)), "{server:?}");
        assert!(matches!(proxy, Err(HandshakeError::Refused)), "{proxy:?}");
    }

    #[tokio::test]
    async fn a_missing_secret_on_either_side_is_named() {
        let (_, proxy) = both(Some(secret(ONE)), None).await;
        assert!(
            matches!(proxy, Err(HandshakeError::SecretRequired)),
            "{proxy:?}"
        );
        let (_, proxy) = both(None, Some(secret(ONE))).await;
        assert!(
            matches!(proxy, Err(HandshakeError::ServerUnproven)),
            "{proxy:?}"
        );
        let (server, proxy) = both(None, None).await;
        assert!(server.is_ok() && proxy.is_ok());
    }

    /// A hand-written server's side up to the proxy's answer: greets with a fixed nonce and
    /// returns what the proxy sent back.
    async fn challenge(server: &mut tokio::io::DuplexStream) -> [u8; NONCE + MAC] {
        let mut greeting = Vec::from(&MAGIC[..]);
        greeting.push(SECRET);
        greeting.extend_from_slice(&[7; NONCE]);
        server.write_all(&greeting).await.unwrap();
        let mut answer = [0; NONCE + MAC];
        server.read_exact(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn the_secret_never_crosses_the_wire() {
        // Everything the proxy sends, captured: the secret is not in it.
        let (mut a, mut b) = tokio::io::duplex(4096);
        let server = tokio::spawn(async move {
            let answer = challenge(&mut a).await;
            a.write_all(&[REFUSED; 1 + MAC]).await.unwrap();
            answer
        });
        let _ = join(&mut b, Some(&secret(ONE))).await;
        let seen = server.await.unwrap();
        assert!(
            !seen
                .windows(16)
                .any(|w| ONE.as_bytes().windows(16).any(|s| s == w))
        );
    }

    #[tokio::test]
    async fn a_forged_server_proof_is_caught() {
        // A server that accepts anyone but cannot prove the secret: the proxy refuses it.
        let (mut a, mut b) = tokio::io::duplex(4096);
        tokio::spawn(async move {
            let answer = challenge(&mut a).await;
            let mut verdict = [0; 1 + MAC];
            verdict[0] = ACCEPTED;
            // Echoing the proxy's own MAC back must not pass: the labels differ.
            verdict[1..].copy_from_slice(&answer[NONCE..]);
            a.write_all(&verdict).await.unwrap();
        });
        let proxy = join(&mut b, Some(&secret(ONE))).await;
        assert!(
            matches!(proxy, Err(HandshakeError::ServerWrong)),
            "{proxy:?}"
        );
    }

    #[test]
    fn a_short_secret_is_refused() {
        assert!(matches!(
            StorageSecret::new(b"  short  \n", "f"),
            Err(HandshakeError::TooShort(_))
        ));
    }
}
