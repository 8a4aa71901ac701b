//! A pipelined RESP client for load generation: commands are encoded straight into a write
//! buffer and replies are parsed in place, so the client spends little CPU (on a 2-core machine
//! it shares the cores with the proxy and the storage server it measures).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use cloak_storage::tls::ClientTls;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// A reply, reduced to what a benchmark needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Ok,
    Value(Option<Vec<u8>>),
    Integer(i64),
    /// An array of this many elements (their contents are skipped).
    Array(usize),
    Error(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connection to {addr}: {source}")]
    Io {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{addr} sent a malformed reply")]
    Malformed { addr: SocketAddr },
    #[error("{addr} closed the connection")]
    Closed { addr: SocketAddr },
    #[error(
        "{addr} sent no reply for {waited:?} while requests were waiting (a stalled server; \
         --reply-timeout sets how long to wait)"
    )]
    NoReply { addr: SocketAddr, waited: Duration },
    #[error("{addr} answered {error}")]
    Refused { addr: SocketAddr, error: String },
    #[error(
        "{addr}'s initial fill wrote nothing for {waited:?} (storage failing? the proxy's log \
         says)"
    )]
    FillStalled { addr: SocketAddr, waited: Duration },
    #[error("{addr}: {error}")]
    Tls {
        addr: SocketAddr,
        error: cloak_storage::tls::TlsError,
    },
}

/// A connection whose two directions can be driven apart: see [`Connection::split`].
pub struct Connection {
    requests: Requests,
    replies: Replies,
}

/// Where a benchmark's clients connect: an address, and the TLS to speak there if any.
#[derive(Clone)]
pub struct Target {
    pub addr: SocketAddr,
    pub tls: Option<ClientTls>,
}

impl From<SocketAddr> for Target {
    fn from(addr: SocketAddr) -> Self {
        Self { addr, tls: None }
    }
}

type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

impl Connection {
    pub async fn connect(target: impl Into<Target>) -> Result<Self, ClientError> {
        let Target { addr, tls } = target.into();
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| ClientError::Io { addr, source })?;
        let _ = stream.set_nodelay(true);
        let (read, write): (Reader, Writer) = match tls {
            None => {
                let (read, write) = stream.into_split();
                (Box::new(read), Box::new(write))
            }
            Some(tls) => {
                let stream = tls
                    .connect(&addr.ip().to_string(), stream)
                    .await
                    .map_err(|error| ClientError::Tls { addr, error })?;
                let (read, write) = tokio::io::split(stream);
                (Box::new(read), Box::new(write))
            }
        };
        Ok(Self {
            requests: Requests {
                addr,
                write,
                output: Vec::with_capacity(64 * 1024),
            },
            replies: Replies {
                addr,
                read,
                input: BytesMut::with_capacity(64 * 1024),
            },
        })
    }

    /// The sending and the receiving half. A load generator must drive both at once: a server
    /// that blocks writing replies nobody reads stops reading requests, and a client that only
    /// reads once its write is done then waits forever with both directions full.
    pub fn split(self) -> (Requests, Replies) {
        (self.requests, self.replies)
    }

    /// Sends one command and waits for its reply.
    pub async fn call(&mut self, args: &[&[u8]]) -> Result<Reply, ClientError> {
        self.requests.queue(args);
        self.requests.flush().await?;
        self.replies.next().await
    }
}

/// The sending half of a [`Connection`].
pub struct Requests {
    addr: SocketAddr,
    write: Writer,
    output: Vec<u8>,
}

impl Requests {
    /// Adds a command to the next [`Requests::flush`].
    pub fn queue(&mut self, args: &[&[u8]]) {
        let out = &mut self.output;
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for arg in args {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
    }

    /// Bytes queued and not yet flushed.
    pub fn queued(&self) -> usize {
        self.output.len()
    }

    pub async fn flush(&mut self) -> Result<(), ClientError> {
        if !self.output.is_empty() {
            let addr = self.addr;
            self.write
                .write_all(&self.output)
                .await
                .map_err(|source| ClientError::Io { addr, source })?;
            self.output.clear();
        }
        Ok(())
    }
}

/// The receiving half of a [`Connection`].
pub struct Replies {
    addr: SocketAddr,
    read: Reader,
    input: BytesMut,
}

impl Replies {
    /// The next reply, reading from the socket only when none is buffered. Cancel-safe: bytes
    /// read stay in the buffer for the next call.
    pub async fn next(&mut self) -> Result<Reply, ClientError> {
        loop {
            if let Some(reply) = self.buffered()? {
                return Ok(reply);
            }
            let addr = self.addr;
            let read = self
                .read
                .read_buf(&mut self.input)
                .await
                .map_err(|source| ClientError::Io { addr, source })?;
            if read == 0 {
                return Err(ClientError::Closed { addr });
            }
        }
    }

    /// The next reply, or [`ClientError::NoReply`] when none comes within `patience`.
    pub async fn next_within(&mut self, patience: Duration) -> Result<Reply, ClientError> {
        match tokio::time::timeout(patience, self.next()).await {
            Ok(reply) => reply,
            Err(_) => Err(ClientError::NoReply {
                addr: self.addr,
                waited: patience,
            }),
        }
    }

    /// A reply already read from the socket, if there is one (no I/O).
    pub fn buffered(&mut self) -> Result<Option<Reply>, ClientError> {
        match parse(&self.input).ok_or(ClientError::Malformed { addr: self.addr })? {
            Some((reply, used)) => {
                self.input.advance(used);
                Ok(Some(reply))
            }
            None => Ok(None),
        }
    }
}

/// A whole reply at the start of `buf` and its length; `Some(None)` if more bytes are needed;
/// `None` if the bytes are not RESP.
fn parse(buf: &[u8]) -> Option<Option<(Reply, usize)>> {
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Some(None);
    };
    let (&kind, line) = buf[..end].split_first()?;
    let text = std::str::from_utf8(line).ok()?;
    let after = end + 2;
    Some(Some(match kind {
        b'+' => (Reply::Ok, after),
        b'-' => (Reply::Error(text.to_string()), after),
        b':' => (Reply::Integer(text.parse().ok()?), after),
        b'$' => {
            let len: i64 = text.parse().ok()?;
            if len < 0 {
                (Reply::Value(None), after)
            } else {
                let len = len as usize;
                if buf.len() < after + len + 2 {
                    return Some(None);
                }
                (
                    Reply::Value(Some(buf[after..after + len].to_vec())),
                    after + len + 2,
                )
            }
        }
        b'*' => {
            let n: i64 = text.parse().ok()?;
            let mut used = after;
            for _ in 0..n.max(0) {
                match parse(&buf[used..])? {
                    Some((_, len)) => used += len,
                    None => return Some(None),
                }
            }
            (Reply::Array(n.max(0) as usize), used)
        }
        _ => return None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_replies_whole_or_waits() {
        assert_eq!(parse(b"+OK\r\n"), Some(Some((Reply::Ok, 5))));
        assert_eq!(
            parse(b"$3\r\nabc\r\n:1"),
            Some(Some((Reply::Value(Some(b"abc".to_vec())), 9)))
        );
        assert_eq!(parse(b"$-1\r\n"), Some(Some((Reply::Value(None), 5))));
        assert_eq!(parse(b"$3\r\nab"), Some(None));
        assert_eq!(
            parse(b"*2\r\n$1\r\na\r\n$-1\r\n"),
            Some(Some((Reply::Array(2), 16)))
        );
        assert_eq!(parse(b"*2\r\n$1\r\na\r\n"), Some(None));
        assert_eq!(
            parse(b"-ERR no\r\n"),
            Some(Some((Reply::Error("ERR no".into()), 9)))
        );
        assert_eq!(parse(b"?\r\n"), None);
    }
}
