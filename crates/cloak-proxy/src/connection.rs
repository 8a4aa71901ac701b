//! One client connection: requests in, replies out, in order.
//!
//! The reading half decodes requests and starts each one at once, so a pipelining client keeps
//! many commands in flight; the writing half answers them strictly in the order they came, as
//! RESP requires, writing pipelined replies together. A protocol error gets its `Protocol error`
//! reply and closes only this connection.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use cloak_core::{ClientId, Outcome};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::{mpsc, oneshot};

use crate::FrontEnd;
use crate::cmd::{self, CommandQuery, Request};
use crate::info;
use crate::resp::{Reply, RequestDecoder};

/// Most requests of one client in flight at once; a client pipelining deeper waits.
const PIPELINE: usize = 1024;

/// Replies gathered for one write at most. A client that keeps sending never lets the queue run
/// dry, so waiting for that would hold its replies back (and in memory) until it paused.
const FLUSH_BYTES: usize = 64 * 1024;

/// A reply, ready now or once the engine answers.
enum Pending {
    Now(Reply),
    Later(oneshot::Receiver<Outcome>),
    /// The last reply on this connection.
    Close(Reply),
}

pub async fn serve(stream: TcpStream, front: Arc<FrontEnd>) {
    let client = front.next_client.fetch_add(1, Ordering::Relaxed);
    front.connected.fetch_add(1, Ordering::Relaxed);
    let _ = stream.set_nodelay(true);
    let (reader, writer) = stream.into_split();
    let (replies, queue) = mpsc::channel(PIPELINE);
    let writing = tokio::spawn(write_replies(writer, queue));
    read_requests(reader, &front, client, replies).await;
    let _ = writing.await;
    front.connected.fetch_sub(1, Ordering::Relaxed);
}

async fn read_requests(
    mut reader: OwnedReadHalf,
    front: &FrontEnd,
    client: ClientId,
    replies: mpsc::Sender<Pending>,
) {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut decoder = RequestDecoder::default();
    let mut authenticated = front.password.is_none();
    loop {
        loop {
            let pending = match decoder.decode(&mut buf) {
                Ok(Some(args)) => respond(front, client, &mut authenticated, args).await,
                Ok(None) => break,
                Err(error) => Pending::Close(Reply::err(error)),
            };
            let last = matches!(pending, Pending::Close(_));
            if replies.send(pending).await.is_err() || last {
                return;
            }
        }
        match reader.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

async fn respond(
    front: &FrontEnd,
    client: ClientId,
    authenticated: &mut bool,
    args: Vec<Bytes>,
) -> Pending {
    let request = match cmd::parse(args) {
        Ok(request) => request,
        Err(reply) => return Pending::Now(reply),
    };
    if !*authenticated && !request.allowed_before_auth() {
        return Pending::Now(Reply::Error("NOAUTH Authentication required.".into()));
    }
    let reply = match request {
        Request::Data(command) => {
            return match front.core.submit(client, command).await {
                Ok(outcome) => Pending::Later(outcome),
                Err(stopped) => Pending::Now(Reply::err(stopped)),
            };
        }
        Request::Ping(None) => Reply::Status("PONG"),
        Request::Ping(Some(message)) | Request::Echo(message) => Reply::Bulk(Some(message)),
        Request::Auth { user, password } => match &front.password {
            None => Reply::err(
                "AUTH <password> called without any password configured for the default user. \
                 Are you sure your configuration is correct?",
            ),
            Some(expected) => {
                let user_ok = user.as_deref().is_none_or(|u| u == b"default");
                if user_ok && constant_time_eq(&password, expected.as_bytes()) {
                    *authenticated = true;
                    Reply::ok()
                } else {
                    Reply::Error(
                        "WRONGPASS invalid username-password pair or user is disabled.".into(),
                    )
                }
            }
        },
        Request::Quit => return Pending::Close(Reply::ok()),
        Request::Select(0) => Reply::ok(),
        Request::Select(_) => Reply::err("DB index is out of range"),
        Request::Info(section) => match front.core.snapshot().await {
            Ok(snapshot) => Reply::Bulk(Some(Bytes::from(info::render(
                front,
                &snapshot,
                section.as_deref(),
            )))),
            Err(stopped) => Reply::err(stopped),
        },
        Request::Command(CommandQuery::Docs) => Reply::Array(Vec::new()),
        Request::Command(CommandQuery::Count) => Reply::Integer(cmd::NAMES.len() as i64),
        Request::Command(CommandQuery::List) => Reply::Array(
            cmd::NAMES
                .iter()
                .map(|n| Reply::Bulk(Some(Bytes::from_static(n.as_bytes()))))
                .collect(),
        ),
    };
    Pending::Now(reply)
}

async fn write_replies(mut writer: impl AsyncWrite + Unpin, mut queue: mpsc::Receiver<Pending>) {
    let mut out = BytesMut::with_capacity(16 * 1024);
    while let Some(pending) = queue.recv().await {
        let (reply, last) = match pending {
            Pending::Now(reply) => (reply, false),
            Pending::Later(outcome) => (
                outcome
                    .await
                    .map_or_else(|_| Reply::err("the proxy is shutting down"), to_reply),
                false,
            ),
            Pending::Close(reply) => (reply, true),
        };
        reply.encode(&mut out);
        if last || queue.is_empty() || out.len() >= FLUSH_BYTES {
            if writer.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        if last {
            let _ = writer.shutdown().await;
            return;
        }
    }
}

fn to_reply(outcome: Outcome) -> Reply {
    match outcome {
        Outcome::Value(value) => Reply::Bulk(value),
        Outcome::Values(values) => Reply::Array(values.into_iter().map(Reply::Bulk).collect()),
        Outcome::Ok => Reply::ok(),
        Outcome::Integer(n) => Reply::Integer(n),
        Outcome::Error(error) => Reply::err(error),
    }
}

/// Compares without an early exit, so response time does not reveal how much of a guessed
/// password was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::Mutex;
    use std::task::{Context, Poll};

    use super::*;

    /// Takes every write whole and remembers its size.
    #[derive(Clone, Default)]
    struct Writes(Arc<Mutex<Vec<usize>>>);

    impl AsyncWrite for Writes {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.0.lock().unwrap().push(buf.len());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn replies_go_out_while_the_client_keeps_sending() {
        // A full queue stands for a client that never pauses: replies must not wait for it
        // to run dry.
        let (replies, queue) = mpsc::channel(PIPELINE);
        let value = Bytes::from(vec![b'v'; 2048]);
        for _ in 0..PIPELINE {
            replies
                .send(Pending::Now(Reply::Bulk(Some(value.clone()))))
                .await
                .unwrap();
        }
        let writes = Writes::default();
        let writer = tokio::spawn(write_replies(writes.clone(), queue));
        drop(replies);
        writer.await.unwrap();
        let sizes = writes.0.lock().unwrap().clone();
        assert!(sizes.len() > 1, "{sizes:?}");
        assert!(
            sizes.iter().all(|&n| n < FLUSH_BYTES + 4096),
            "no write holds much more than {FLUSH_BYTES} bytes: {sizes:?}"
        );
        assert_eq!(sizes.iter().sum::<usize>(), PIPELINE * (2048 + 9));
    }
}
