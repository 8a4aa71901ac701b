//! Connections to the proxies of a cluster, from another proxy (health probes, reading the map at
//! a start, asking who holds a partition during a move) or from an operator's tool (`cloak
//! cluster move`).
//!
//! Plain TCP, or, when the proxies serve clients over TLS, TLS checked against the cluster's CA
//! (the peer's certificate must carry the host of its address in the map), so that neither the
//! client password nor the cluster secret ever crosses the network in the clear to a proxy that
//! asks its own clients for TLS. Then `AUTH` as the given user, if any; a link made with
//! [`PlainLogin::LoopbackOnly`] (an operator's tool, whose login is the cluster secret) sends
//! it in the clear only to a loopback address. Answers are read as
//! RESP2 and bounded ([`PeerLink::new`]'s `limit`): a peer, or whoever answers at its address,
//! cannot make the asker hold more.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use cloak_storage::tls::ClientTls;
use cloak_storage::tls::client::host_of;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::resp::{self, Reply};

/// A byte stream to a peer, plain or TLS.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// How to reach the proxies of a cluster.
#[derive(Clone)]
pub struct PeerLink {
    /// `Some`: over TLS, checking the peer's certificate.
    tls: Option<ClientTls>,
    /// `AUTH user password` after connecting, if any.
    login: Option<(String, String)>,
    /// Where the login may go without TLS.
    plain_login: PlainLogin,
    /// The longest answer read.
    limit: usize,
}

/// Where a link without TLS may send its login.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlainLogin {
    /// To any address: the proxies' own probes, whose login is the client password every
    /// application has anyway (the README asks to keep plain client ports on a trusted
    /// network).
    Anywhere,
    /// Only to loopback addresses (one machine's cluster): anywhere else, whoever is on the
    /// path would read it. A refusal ends with `remedy`, what the caller can do instead.
    LoopbackOnly {
        /// What to do instead, in the caller's terms (its flags).
        remedy: &'static str,
    },
}

/// An open connection to one proxy.
pub struct PeerConnection {
    stream: BufReader<Box<dyn Stream>>,
    limit: usize,
}

impl PeerLink {
    /// Reaches peers over TLS with `tls` (else in the clear), authenticates as `login` (user,
    /// password), and reads answers of at most `limit` bytes.
    pub fn new(tls: Option<ClientTls>, login: Option<(String, String)>, limit: usize) -> Self {
        Self {
            tls,
            login,
            plain_login: PlainLogin::Anywhere,
            limit,
        }
    }

    /// The same link, sending its login without TLS only where `plain_login` allows.
    pub fn with_plain_login(self, plain_login: PlainLogin) -> Self {
        Self {
            plain_login,
            ..self
        }
    }

    /// The TLS it reaches peers with, if any.
    pub fn tls(&self) -> Option<&ClientTls> {
        self.tls.as_ref()
    }

    /// The same link, reading answers of at most `limit` bytes.
    pub fn with_limit(self, limit: usize) -> Self {
        Self { limit, ..self }
    }

    /// Connects (and authenticates) to the proxy at `address` (`host:port`).
    pub async fn connect(&self, address: &str) -> Result<PeerConnection, String> {
        let tcp = match (&self.tls, &self.login, self.plain_login) {
            (None, Some((user, _)), PlainLogin::LoopbackOnly { remedy }) => {
                // Resolved once, checked, and connected to exactly what was checked: a name
                // that resolves elsewhere the second time cannot slip past.
                let resolved = loopback_only(address, user, remedy).await?;
                TcpStream::connect(&resolved[..]).await
            }
            _ => TcpStream::connect(address).await,
        };
        let tcp = tcp.map_err(|error| {
            if error.kind() == std::io::ErrorKind::ConnectionRefused {
                "connection refused".to_string()
            } else {
                format!("cannot connect: {error}")
            }
        })?;
        let _ = tcp.set_nodelay(true);
        let stream: Box<dyn Stream> = match &self.tls {
            None => Box::new(tcp),
            Some(tls) => Box::new(
                tls.connect(host_of(address), tcp)
                    .await
                    .map_err(|error| format!("{error} (is it of this cluster's CA?)"))?,
            ),
        };
        let mut connection = PeerConnection {
            stream: BufReader::new(stream),
            limit: self.limit,
        };
        if let Some((user, password)) = &self.login {
            connection
                .ask(&["AUTH", user, password])
                .await
                .map_err(|why| format!("refused to authenticate {user}: {why}"))?;
        }
        Ok(connection)
    }

    /// Connects to `address`, sends one command and reads its answer, all within `timeout`.
    pub async fn ask(
        &self,
        address: &str,
        args: &[&str],
        timeout: Duration,
    ) -> Result<String, String> {
        let asked = async { self.connect(address).await?.ask(args).await };
        tokio::time::timeout(timeout, asked)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {}s", timeout.as_secs_f64())))
    }
}

/// Whether anything accepts a TCP connection at `address` within `timeout`: `Ok(())` if it
/// does; the reason it did not (cannot resolve, refused, no answer in time) otherwise. A
/// takeover needs the old owner dead, and anything listening at its address, even a proxy that
/// fails TLS or authentication or answers nonsense, is not taken for dead.
pub async fn listens(address: &str, timeout: Duration) -> Result<(), String> {
    let connect = tokio::net::TcpStream::connect(address);
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(format!("{address}: {error}")),
        Err(_) => Err(format!(
            "{address}: no connection within {}s",
            timeout.as_secs_f64()
        )),
    }
}

/// The addresses `address` resolves to, if every one is a loopback address; otherwise the
/// refusal to send `user`'s password there in the clear, before any connection is made.
async fn loopback_only(address: &str, user: &str, remedy: &str) -> Result<Vec<SocketAddr>, String> {
    let resolved: Vec<SocketAddr> = tokio::net::lookup_host(address)
        .await
        .map_err(|error| format!("cannot resolve {address}: {error}"))?
        .collect();
    match resolved
        .iter()
        .find(|a| !a.ip().to_canonical().is_loopback())
    {
        None if !resolved.is_empty() => Ok(resolved),
        far => Err(format!(
            "refusing to send the password of {user} in the clear to {address}{}: without TLS \
             anyone on the path could read it; {remedy}",
            far.map_or_else(String::new, |far| format!(
                " ({}, not a loopback address)",
                far.ip()
            ))
        )),
    }
}

impl PeerConnection {
    /// Sends a command and reads its answer: a status line, an integer or a bulk string as
    /// text; an error reply (or a nil) as `Err`.
    pub async fn ask(&mut self, args: &[&str]) -> Result<String, String> {
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        let stream = self.stream.get_mut();
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|error| format!("connection lost: {error}"))?;
        stream
            .flush()
            .await
            .map_err(|error| format!("connection lost: {error}"))?;
        let line = self.read_line().await?;
        match line.split_at_checked(1) {
            Some(("+" | ":", text)) => Ok(text.to_string()),
            Some(("-", error)) => Err(error.to_string()),
            Some(("$", length)) => self.read_bulk(length).await,
            _ => Err(format!("answered {line:?} (not a Cloak proxy?)")),
        }
    }

    /// Sends `request` (one or more whole RESP requests) and reads one reply of any shape a
    /// proxy writes ([`resp::decode_reply`]), at most `limit` bytes: what forwarding relays.
    /// An error reply is a reply here, not an `Err`; `Err` is a lost or garbled connection, after
    /// which the connection must not be used again (part of a reply may be left unread).
    pub async fn exchange(&mut self, request: &[u8]) -> Result<Reply, String> {
        let stream = self.stream.get_mut();
        let lost = |error: std::io::Error| format!("connection lost: {error}");
        stream.write_all(request).await.map_err(lost)?;
        stream.flush().await.map_err(lost)?;
        let garbage = |error: resp::ProtocolError| format!("answered garbage: {error}");
        let mut read = BytesMut::new();
        let mut end = resp::ReplyEnd::default();
        loop {
            match end.scan(&read, self.limit).map_err(garbage)? {
                // Bytes past the reply would be the answer to nothing this side sent.
                Some(len) if len < read.len() => return Err("answered more than one reply".into()),
                Some(_) => match resp::decode_reply(&read, self.limit).map_err(garbage)? {
                    Some((reply, _)) => return Ok(reply),
                    None => return Err("answered a reply cut short".into()),
                },
                None => {}
            }
            let chunk = self.stream.fill_buf().await.map_err(lost)?;
            if chunk.is_empty() {
                return Err("closed the connection".into());
            }
            let taken = chunk
                .len()
                .min(self.limit.saturating_sub(read.len()).max(1));
            read.extend_from_slice(&chunk[..taken]);
            self.stream.consume(taken);
        }
    }

    /// One line of the answer, without its `\r\n`, at most `limit` bytes.
    async fn read_line(&mut self) -> Result<String, String> {
        let mut line = Vec::new();
        let read = (&mut self.stream)
            .take(self.limit as u64)
            .read_until(b'\n', &mut line)
            .await
            .map_err(|error| format!("connection lost: {error}"))?;
        if read == 0 {
            return Err("closed the connection".into());
        }
        if !line.ends_with(b"\r\n") {
            return Err("answered a line too long or cut short".into());
        }
        line.truncate(line.len() - 2);
        Ok(String::from_utf8_lossy(&line).into_owned())
    }

    /// The body of a bulk string whose header said `length`.
    async fn read_bulk(&mut self, length: &str) -> Result<String, String> {
        if length == "-1" {
            return Err("answered nil".into());
        }
        let length = length
            .parse::<usize>()
            .ok()
            .filter(|length| *length <= self.limit)
            .ok_or_else(|| format!("answered a bulk string of {length} bytes, over the limit"))?;
        let mut body = vec![0; length + 2];
        self.stream
            .read_exact(&mut body)
            .await
            .map_err(|error| format!("connection lost: {error}"))?;
        body.truncate(length);
        Ok(String::from_utf8_lossy(&body).into_owned())
    }
}
