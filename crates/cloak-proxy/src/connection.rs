//! One client connection: requests in, replies out, in order.
//!
//! The reading half decodes requests and starts each one at once, so a pipelining client keeps
//! many commands in flight; the writing half answers them strictly in the order they came, as
//! RESP requires, writing pipelined replies together. A protocol error gets its `Protocol error`
//! reply and closes only this connection.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::{Buf, Bytes, BytesMut};
use cloak_core::{ClientId, Command, Outcome};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::{mpsc, oneshot};

use crate::FrontEnd;
use crate::cmd::{self, CommandQuery, Request};
use crate::info;
use crate::resp::{Reply, RequestDecoder, RequestLimits};
use crate::session::{Session, Step};

/// Most requests of one client in flight at once; a client pipelining deeper waits.
const PIPELINE: usize = 1024;

/// Replies gathered before a write is tried even though more are ready. A client that keeps
/// sending never lets the queue run dry, so waiting for that would hold its replies back (and
/// in memory) until it paused.
pub const FLUSH_BYTES: usize = 64 * 1024;

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
    let mut writing = tokio::spawn(write_replies(writer, queue, front.reply_limit));
    let mut session = Session::default();
    tokio::select! {
        // The client stopped sending (or sent its last request): its replies still go out.
        () = read_requests(reader, &front, client, replies, &mut session) => {
            let _ = writing.await;
        }
        // The writer gave up (the client stopped reading, or the socket failed): stop reading
        // too, which drops the read half and so closes the connection.
        _ = &mut writing => {}
    }
    if session.watched {
        // The engine would otherwise keep this client's watches forever.
        let _ = front.core.submit(client, Command::Unwatch).await;
    }
    front.connected.fetch_sub(1, Ordering::Relaxed);
}

async fn read_requests(
    mut reader: OwnedReadHalf,
    front: &FrontEnd,
    client: ClientId,
    replies: mpsc::Sender<Pending>,
    session: &mut Session,
) {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut authenticated = front.password.is_none();
    let mut decoder = RequestDecoder::new(if authenticated {
        front.request_limits
    } else {
        RequestLimits::UNAUTHENTICATED
    });
    loop {
        loop {
            let pending = match decoder.decode(&mut buf) {
                Ok(Some(args)) => {
                    let was_authenticated = authenticated;
                    let pending = respond(front, client, &mut authenticated, session, args).await;
                    if authenticated && !was_authenticated {
                        decoder.set_limits(front.request_limits);
                    }
                    pending
                }
                Ok(None) => break,
                Err(error) => Pending::Close(Reply::err(error)),
            };
            let last = matches!(pending, Pending::Close(_));
            if replies.send(pending).await.is_err() || last {
                return;
            }
        }
        // `read_buf` grows the buffer only by what arrives (doubling as it fills), never by
        // what a header announces.
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
    session: &mut Session,
    args: Vec<Bytes>,
) -> Pending {
    let parsed = cmd::parse(args);
    if !*authenticated
        && parsed
            .as_ref()
            .is_ok_and(|request| !request.allowed_before_auth())
    {
        return Pending::Now(Reply::Error("NOAUTH Authentication required.".into()));
    }
    let submit = |command| async move {
        match front.core.submit(client, command).await {
            Ok(outcome) => Pending::Later(outcome),
            Err(stopped) => Pending::Now(Reply::err(stopped)),
        }
    };
    let request = match session.step(parsed, front.max_key) {
        Step::Reply(reply) => return Pending::Now(reply),
        Step::Submit(command) => return submit(command).await,
        Step::Unwatch(reply) => {
            let _ = submit(Command::Unwatch).await;
            return Pending::Now(reply);
        }
        Step::Pass(request) => request,
    };
    let reply = match request {
        // The session takes these.
        Request::Data(_)
        | Request::Watch(_)
        | Request::Select(_)
        | Request::Multi
        | Request::Exec
        | Request::Discard => unreachable!("the session handles key and transaction commands"),
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

/// What the writer saw happen first.
enum Event {
    Wrote(std::io::Result<usize>),
    /// The next reply in order, and whether it is the last; `None` once the reader is gone.
    Reply(Option<(Reply, bool)>),
}

/// Writes replies in request order. Replies that are ready are gathered (up to [`FLUSH_BYTES`])
/// and written together; while the socket will not take more, replies keep being gathered, and
/// once `reply_limit` bytes wait unwritten the client is disconnected: it is not reading, and
/// would otherwise hold its replies (and the engine's outcomes behind them) forever. One reply
/// alone is always allowed, however large, so the limit never refuses a client that reads.
async fn write_replies(
    mut writer: impl AsyncWrite + Unpin,
    mut queue: mpsc::Receiver<Pending>,
    reply_limit: usize,
) {
    let mut out = BytesMut::with_capacity(16 * 1024);
    let mut head = None;
    let mut closing = false;
    loop {
        if closing && out.is_empty() {
            let _ = writer.shutdown().await;
            return;
        }
        // Both branches are cancel-safe: `write` writes nothing when cancelled, and the
        // reply being waited for stays in `head`.
        let event = if out.len() >= FLUSH_BYTES || closing {
            tokio::select! {
                biased;
                wrote = writer.write(&out) => Event::Wrote(wrote),
                next = next_reply(&mut queue, &mut head), if !closing => Event::Reply(next),
            }
        } else {
            // Below FLUSH_BYTES, replies are written once no more are queued: a client that
            // pipelines gets them in few large writes, not one write per outcome as it lands.
            let nothing_queued = head.is_none() && queue.is_empty();
            tokio::select! {
                biased;
                next = next_reply(&mut queue, &mut head) => Event::Reply(next),
                wrote = writer.write(&out), if nothing_queued && !out.is_empty() => {
                    Event::Wrote(wrote)
                }
            }
        };
        match event {
            Event::Wrote(Ok(0) | Err(_)) => return,
            Event::Wrote(Ok(n)) => out.advance(n),
            Event::Reply(None) => closing = true,
            Event::Reply(Some((reply, last))) => {
                if out.len() >= reply_limit {
                    tracing::warn!(
                        unread = out.len(),
                        reply_limit,
                        "disconnected a client that does not read its replies"
                    );
                    return;
                }
                reply.encode(&mut out);
                closing = last;
            }
        }
    }
}

/// The next reply in request order, waiting for the engine if needed. Cancel-safe: a request
/// taken from the queue waits in `head` until its outcome is there.
async fn next_reply(
    queue: &mut mpsc::Receiver<Pending>,
    head: &mut Option<Pending>,
) -> Option<(Reply, bool)> {
    let pending = match head {
        Some(pending) => pending,
        None => head.insert(queue.recv().await?),
    };
    if let Pending::Later(outcome) = pending {
        let reply = outcome
            .await
            .map_or_else(|_| Reply::err("the proxy is shutting down"), to_reply);
        *pending = Pending::Now(reply);
    }
    match head.take() {
        Some(Pending::Now(reply)) => Some((reply, false)),
        Some(Pending::Close(reply)) => Some((reply, true)),
        Some(Pending::Later(_)) | None => unreachable!("the head was taken or resolved above"),
    }
}

fn to_reply(outcome: Outcome) -> Reply {
    match outcome {
        Outcome::Value(value) => Reply::Bulk(value),
        Outcome::Values(values) => Reply::Array(values.into_iter().map(Reply::Bulk).collect()),
        Outcome::Ok => Reply::ok(),
        Outcome::Integer(n) => Reply::Integer(n),
        Outcome::Error(error) => Reply::err(error),
        Outcome::Multi(outcomes) => Reply::Array(outcomes.into_iter().map(to_reply).collect()),
        Outcome::Aborted => Reply::NilArray,
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
        let writer = tokio::spawn(write_replies(writes.clone(), queue, usize::MAX));
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
