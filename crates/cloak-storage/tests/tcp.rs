//! The TCP server and client together, including bad input and a server that goes away.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cloak_storage::handshake::StorageSecret;
use cloak_storage::tls::ClientTls;
use cloak_storage::tls::client::ClientTlsFiles;
use cloak_storage::{
    Link, MemoryStorage, Observing, Storage, StorageOp, StorageReply, TcpStorage, server, wire,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

mod common;

async fn start_server(listener: TcpListener) -> oneshot::Sender<()> {
    let (stop, stopped) = oneshot::channel::<()>();
    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    tokio::spawn(server::serve(listener, storage, async {
        let _ = stopped.await;
    }));
    stop
}

#[tokio::test]
async fn reads_writes_and_deletes_over_tcp() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let _stop = start_server(listener).await;
    let client = Arc::new(TcpStorage::connect(&addr, 3).await.unwrap());

    let write = StorageOp::Write(vec![
        (1, Bytes::from_static(b"one")),
        (2, Bytes::from_static(b"two")),
    ]);
    assert_eq!(client.call(write).await.unwrap(), StorageReply::Done);
    assert_eq!(
        client.call(StorageOp::Read(vec![2, 1, 3])).await.unwrap(),
        StorageReply::Values(vec![Some("two".into()), Some("one".into()), None])
    );
    assert_eq!(
        client.call(StorageOp::Delete(vec![1])).await.unwrap(),
        StorageReply::Done
    );
    assert_eq!(
        client.call(StorageOp::Read(vec![1])).await.unwrap(),
        StorageReply::Values(vec![None])
    );

    // Many concurrent requests over the pooled, pipelined connections.
    let tasks: Vec<_> = (0..200u128)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let value = Bytes::from(vec![i as u8; 1000]);
                client
                    .call(StorageOp::Write(vec![(100 + i, value.clone())]))
                    .await
                    .unwrap();
                let read = client.call(StorageOp::Read(vec![100 + i])).await.unwrap();
                assert_eq!(read, StorageReply::Values(vec![Some(value)]));
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn a_malformed_client_does_not_disturb_others() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let _stop = start_server(listener).await;
    let client = TcpStorage::connect(&addr, 1).await.unwrap();

    let mut rogue = TcpStream::connect(&addr).await.unwrap();
    rogue
        .write_all(&[9, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 99])
        .await
        .unwrap();
    let mut answer = Vec::new();
    rogue.read_to_end(&mut answer).await.unwrap();
    assert!(String::from_utf8_lossy(&answer).contains("protocol error"));

    let mut huge = TcpStream::connect(&addr).await.unwrap();
    huge.write_all(&u32::MAX.to_le_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = huge.read_to_end(&mut answer).await;

    assert_eq!(
        client.call(StorageOp::Read(vec![1])).await.unwrap(),
        StorageReply::Values(vec![None])
    );
}

#[tokio::test]
async fn requests_fail_clearly_while_the_server_is_down_and_work_after_it_returns() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = start_server(listener).await;
    let client = TcpStorage::connect(&addr.to_string(), 1)
        .await
        .unwrap()
        .with_timeout(Duration::from_secs(2));
    client.call(StorageOp::Read(vec![1])).await.unwrap();

    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let error = client.call(StorageOp::Read(vec![1])).await.unwrap_err();
    assert!(
        error.0.contains("storage server") || error.0.contains("connection"),
        "unclear error: {error}"
    );
    let error = client.call(StorageOp::Read(vec![1])).await.unwrap_err();
    assert!(
        error.0.contains("cannot connect to storage server"),
        "{error}"
    );

    let listener = TcpListener::bind(addr).await.unwrap();
    let _stop = start_server(listener).await;
    let mut recovered = false;
    for _ in 0..50 {
        if client.call(StorageOp::Read(vec![1])).await.is_ok() {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(recovered, "the client reconnects when the server is back");
}

#[tokio::test]
async fn observing_records_what_the_server_sees() {
    let (storage, trace) = Observing::new(MemoryStorage::new());
    storage
        .call(StorageOp::Write(vec![(5, Bytes::from_static(b"abc"))]))
        .await
        .unwrap();
    storage.call(StorageOp::Read(vec![5, 6])).await.unwrap();
    let seen = trace.take();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].addrs, vec![5]);
    assert_eq!(seen[0].values, vec![Bytes::from_static(b"abc")]);
    assert_eq!(seen[1].addrs, vec![5, 6]);
    assert!(seen[1].values.is_empty());
    for request in &seen {
        let answered = request.answered.expect("every request was answered");
        assert!(answered >= request.at, "{request:?}");
    }
    assert!(
        seen[1].at >= seen[0].answered.unwrap(),
        "sent after the first was answered"
    );
}

#[tokio::test]
async fn a_server_at_its_connection_limit_says_so_and_serves_again_once_one_closes() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let guard = server::Guard {
        max_connections: Some(2),
        ..Default::default()
    };
    tokio::spawn(server::serve_guarded(
        listener,
        storage,
        guard,
        std::future::pending(),
    ));

    // Two connections fill it; a third is told why, not reset.
    // (A client opens its first connection at once, the rest when needed.)
    let first = TcpStorage::connect(&addr, 1).await.unwrap();
    let second = TcpStorage::connect(&addr, 1).await.unwrap();
    let refused = TcpStorage::connect(&addr, 1).await.err().unwrap();
    assert!(
        refused.to_string().contains("connection limit"),
        "{refused}"
    );
    // The two still work.
    let read = StorageOp::Read(vec![1]);
    for client in [&first, &second] {
        assert_eq!(
            client.call(read.clone()).await.unwrap(),
            StorageReply::Values(vec![None])
        );
    }

    // Once one closes, there is room again.
    drop(first);
    let start = std::time::Instant::now();
    let one = loop {
        match TcpStorage::connect(&addr, 1).await {
            Ok(client) => break client,
            Err(error) => {
                assert!(start.elapsed() < Duration::from_secs(10), "{error}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert_eq!(
        one.call(read).await.unwrap(),
        StorageReply::Values(vec![None])
    );
}

/// A guarded server on a fresh port: at most `max_connections` admitted, with a storage secret
/// (and TLS when given).
async fn start_guarded(
    max_connections: usize,
    tls: Option<Arc<cloak_storage::tls::ServerTls>>,
) -> (String, StorageSecret) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let secret = StorageSecret::new(&[7; 32], "test").unwrap();
    let guard = server::Guard {
        tls,
        secret: Some(secret.clone()),
        max_connections: Some(max_connections),
        ..Default::default()
    };
    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    tokio::spawn(server::serve_guarded(
        listener,
        storage,
        guard,
        std::future::pending(),
    ));
    (addr, secret)
}

/// Sockets that connect and never handshake: far more than the server's places and its budget
/// of handshaking connections.
const IDLE_SOCKETS: usize = 4 * cloak_storage::PENDING_HANDSHAKES + 100;

#[tokio::test]
async fn idle_sockets_that_never_handshake_cannot_keep_a_proxy_out() {
    let (addr, secret) = start_guarded(2, None).await;
    let mut idle = Vec::with_capacity(IDLE_SOCKETS);
    for _ in 0..IDLE_SOCKETS {
        idle.push(TcpStream::connect(&addr).await.unwrap());
    }
    let link = Link {
        tls: None,
        secret: Some(secret),
    };
    let proxy = tokio::time::timeout(
        Duration::from_secs(10),
        TcpStorage::connect_with(&addr, 1, link),
    )
    .await
    .expect("connecting waited over 10 s")
    .expect("a proxy with the secret gets in while idle sockets wait");
    assert_eq!(
        proxy.call(StorageOp::Read(vec![1])).await.unwrap(),
        StorageReply::Values(vec![None])
    );
    // The oldest idle socket was closed to make room for newer handshakes.
    let mut oldest = idle.swap_remove(0);
    common::closed_by_peer(&mut oldest, "the oldest handshaking socket is closed").await;
}

#[tokio::test]
async fn a_full_tls_server_closes_without_writing_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let (files, tls) = common::quick_start_tls(dir.path());
    let (addr, secret) = start_guarded(1, Some(Arc::new(tls))).await;
    let link = || Link {
        tls: Some(
            ClientTls::load(&ClientTlsFiles {
                ca: Some(files.ca.clone()),
                identity: None,
            })
            .unwrap(),
        ),
        secret: Some(secret.clone()),
    };
    let first = TcpStorage::connect_with(&addr, 1, link()).await.unwrap();

    // Full: a raw socket gets nothing at all, a TLS client a clear error at once.
    let mut raw = TcpStream::connect(&addr).await.unwrap();
    let mut sent = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut sent))
        .await
        .expect("closed at once")
        .unwrap();
    assert!(sent.is_empty(), "plaintext written on a TLS port: {sent:?}");
    let refused = tokio::time::timeout(
        Duration::from_secs(5),
        TcpStorage::connect_with(&addr, 1, link()),
    )
    .await
    .expect("refused at once");
    assert!(refused.is_err());
    assert_eq!(
        first.call(StorageOp::Read(vec![1])).await.unwrap(),
        StorageReply::Values(vec![None])
    );
}

/// What a hostile `cloak server` sends back for one request: the whole answer frame's bytes,
/// or nothing at all (the connection stays open, unanswered).
type FakeAnswer = Option<Vec<u8>>;

/// A `cloak server` that greets as one (open mode, over TLS when given) and reads requests as
/// one, but answers as `answer` says, given each request's id, the request and the number of
/// its connection (from 0). The number of each connection the proxy closes comes on the
/// receiver, once the server reads its end.
async fn fake_cloak_server(
    tls: Option<cloak_storage::tls::ServerTls>,
    answer: impl Fn(u64, &StorageOp, usize) -> FakeAnswer + Send + Sync + 'static,
) -> (String, tokio::sync::mpsc::UnboundedReceiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (closed, closes) = tokio::sync::mpsc::unbounded_channel();
    let (answer, tls) = (Arc::new(answer), tls.map(Arc::new));
    tokio::spawn(async move {
        for connection in 0.. {
            let (stream, _) = listener.accept().await.unwrap();
            let (answer, tls, closed) = (answer.clone(), tls.clone(), closed.clone());
            tokio::spawn(async move {
                let served = match tls {
                    None => serve_as_told(stream, connection, &*answer).await,
                    Some(tls) => {
                        let stream = tls.accept(stream).await.unwrap();
                        serve_as_told(stream, connection, &*answer).await
                    }
                };
                if served.is_err() {
                    let _ = closed.send(connection);
                }
            });
        }
    });
    (addr, closes)
}

/// Serves one connection of [`fake_cloak_server`] until reading fails (the proxy closed it).
async fn serve_as_told<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut stream: S,
    connection: usize,
    answer: &(dyn Fn(u64, &StorageOp, usize) -> FakeAnswer + Send + Sync),
) -> Result<(), wire::WireError> {
    cloak_storage::handshake::admit(&mut stream, None)
        .await
        .unwrap();
    let mut buf = bytes::BytesMut::new();
    loop {
        let (id, op) = wire::decode_request(wire::read_frame(&mut stream, &mut buf).await?)?;
        if let Some(frame) = answer(id, &op, connection) {
            stream.write_all(&frame).await?;
            stream.flush().await?;
        }
    }
}

/// The answer frame to request `id` that an honest server would send with `reply`.
fn answer_frame(id: u64, reply: StorageReply) -> FakeAnswer {
    Some(wire::encode_response(id, &Ok(reply)).to_bytes().to_vec())
}

/// Review finding 12, for `cloak server`: a hostile server could make the proxy buffer up to
/// the 512 MiB frame limit for any request (it announced a frame, and the proxy waited for all
/// of it). Each answer is now bounded by what its request calls for; a longer one is refused
/// by name as soon as its length is read, and fails only its connection.
#[tokio::test]
async fn an_answer_longer_than_its_request_allows_is_refused_and_the_next_request_reconnects() {
    const ELEMENT: usize = 100;
    let (addr, _closes) = fake_cloak_server(None, |id, op, connection| match (op, connection) {
        // The length of a frame near the limit, and a few bytes of it: a write's answer is a
        // status, so this must be refused at once, not waited for.
        (StorageOp::Write(_), 0) => {
            let mut announced = (wire::MAX_FRAME as u32 - 1).to_le_bytes().to_vec();
            announced.extend_from_slice(&id.to_le_bytes());
            Some(announced)
        }
        // Whole elements, one byte longer than the store writes.
        (StorageOp::Read(addrs), 1) => answer_frame(
            id,
            StorageReply::Values(vec![Some(vec![b'v'; ELEMENT + 1].into()); addrs.len()]),
        ),
        (StorageOp::Read(addrs), _) => answer_frame(
            id,
            StorageReply::Values(vec![Some(vec![b'v'; ELEMENT].into()); addrs.len()]),
        ),
        _ => answer_frame(id, StorageReply::Done),
    })
    .await;
    let client = TcpStorage::connect(&addr, 1)
        .await
        .unwrap()
        .with_max_element(ELEMENT);
    let started = std::time::Instant::now();
    let write = StorageOp::Write(vec![(1, Bytes::from_static(b"e"))]);
    let error = client.call(write).await.expect_err("no answer to a write");
    let allowed = 9 + wire::MAX_ERROR_MESSAGE;
    assert!(
        error.0.contains(&format!(
            "an answer of {} bytes to a request whose answer is at most {allowed} bytes",
            wire::MAX_FRAME - 1
        )),
        "the error says what was sent and allowed: {error}"
    );
    // A read of 100 addresses may bring 100 elements of 100 bytes, not of 101.
    let read = || client.call(StorageOp::Read((0..100).collect()));
    let error = read().await.expect_err("elements longer than allowed");
    let allowed = 9 + 4 + 100 * (1 + 4 + ELEMENT);
    assert!(
        error.0.contains(&format!(
            "a request whose answer is at most {allowed} bytes"
        )),
        "the error says what was allowed: {error}"
    );
    assert!(
        error
            .0
            .contains("storage holds elements longer than this store writes"),
        "{error}"
    );
    common::refused_at_once_then_answered(started, read(), 100, ELEMENT).await;
}

/// Review finding 13, for `cloak server`: over TLS, a retired connection was never closed. Both
/// halves of the split stream share the socket, and the reader task, waiting for the server to
/// close first, kept it (and itself) for as long as the server did: forever, for a server that
/// never closes. Here the first connection leaves an answer out, which retires it: the server
/// must see it closed, and the storage dropped must close the connection that replaced it.
#[tokio::test]
async fn a_retired_tls_connection_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (files, tls) = common::quick_start_tls(dir.path());
    // Every connection after the first answers reads as an empty store does.
    let (addr, mut closes) = fake_cloak_server(Some(tls), |id, op, connection| match connection {
        0 => None,
        _ => answer_frame(id, StorageReply::Values(vec![None; op.len()])),
    })
    .await;
    let link = Link {
        tls: Some(
            ClientTls::load(&ClientTlsFiles {
                ca: Some(files.ca.clone()),
                identity: None,
            })
            .unwrap(),
        ),
        secret: None,
    };
    let client = TcpStorage::connect_with(&addr, 1, link)
        .await
        .unwrap()
        .with_timeout(Duration::from_millis(300));
    let read = || client.call(StorageOp::Read(vec![1]));
    let error = read()
        .await
        .expect_err("the first connection answers nothing");
    assert!(error.0.contains("did not answer within"), "{error}");
    assert_eq!(
        read().await.expect("answered on a new connection"),
        StorageReply::Values(vec![None])
    );
    let closed = tokio::time::timeout(Duration::from_secs(10), closes.recv()).await;
    assert_eq!(
        closed,
        Ok(Some(0)),
        "the retired connection stayed open while the proxy kept its storage"
    );
    drop(client);
    let closed = tokio::time::timeout(Duration::from_secs(10), closes.recv()).await;
    assert_eq!(
        closed,
        Ok(Some(1)),
        "dropping the storage closes its connection"
    );
}

/// A server over a [`SlowWrites`] storage taking 400 ms a write, on a free port: its address,
/// and what stops it once dropped.
async fn serve_slow_writes() -> (String, oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let storage: Arc<dyn Storage> = Arc::new(SlowWrites {
        inner: MemoryStorage::new(),
        delay: Duration::from_millis(400),
    });
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(server::serve(listener, storage, async {
        let _ = stopped.await;
    }));
    (addr, stop)
}

/// A raw connection to the server at `addr`, past its handshake: a proxy's as the server sees
/// it.
async fn admitted(addr: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    cloak_storage::handshake::join(&mut stream, None)
        .await
        .unwrap();
    stream
}

/// The frame of request `id`, a write of `value` at `addr`.
fn write_frame(id: u64, addr: u128, value: &'static [u8]) -> Bytes {
    wire::encode_request(
        id,
        &StorageOp::Write(vec![(addr, Bytes::from_static(value))]),
    )
    .to_bytes()
}

/// A storage that takes `delay` to apply each write, as a durable server does until its fsync.
struct SlowWrites {
    inner: MemoryStorage,
    delay: Duration,
}

#[async_trait::async_trait]
impl Storage for SlowWrites {
    async fn call(&self, op: StorageOp) -> Result<StorageReply, cloak_storage::StorageError> {
        if matches!(op, StorageOp::Write(_)) {
            tokio::time::sleep(self.delay).await;
        }
        self.inner.call(op).await
    }

    async fn fence(&self) -> Result<(), cloak_storage::StorageError> {
        self.inner.fence().await
    }

    fn describe(&self) -> String {
        "slow writes".into()
    }
}

/// The restart race a fence ends, found by a CI run of
/// `faults::sigkill_of_the_durable_storage_server_loses_no_acknowledged_write`: a proxy killed
/// with one write-back received by the server and not yet applied (a durable server applies it
/// after its fsync), and another right behind it in the connection. Applied in the middle of
/// the next proxy's recovery scan, such a write moves elements from addresses not yet scanned
/// to addresses already scanned, and their keys read as missing. The next proxy's fence is
/// answered only once the first write is applied, and the second is never applied: the scan
/// after the fence sees the store as it stays.
#[tokio::test]
async fn a_fence_waits_out_what_another_connection_started_and_drops_the_rest() {
    let (addr, _stop) = serve_slow_writes().await;

    // The proxy about to die: two writes in one go; the server starts the first.
    let mut old = admitted(&addr).await;
    let both = [write_frame(1, 1, b"started"), write_frame(2, 2, b"queued")].concat();
    old.write_all(&both).await.unwrap();
    let sent = std::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(100)).await;

    let new = TcpStorage::connect(&addr, 1).await.unwrap();
    new.fence().await.unwrap();
    // The first write started after it was sent and takes 400 ms: a fence that waited for it
    // returns no sooner (measured from the send, so a test thread that ran late cannot make a
    // fence that waited look too quick).
    assert!(
        sent.elapsed() >= Duration::from_millis(400),
        "the fence waited for the write the old connection had started ({:?} after it was sent)",
        sent.elapsed()
    );
    let read = || new.call(StorageOp::Read(vec![1, 2]));
    let after_fence = StorageReply::Values(vec![Some(Bytes::from_static(b"started")), None]);
    assert_eq!(read().await.unwrap(), after_fence);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        read().await.unwrap(),
        after_fence,
        "the write queued behind it is never applied"
    );
    common::closed_by_peer(&mut old, "the fence closed the old connection").await;
}

/// Found by review: a peer that stops reading its answers (the old proxy's host paused or cut
/// off while a batch's answer was on its way) held every fence until TCP gave up on it, some
/// fifteen minutes, so no proxy could start in its place. Writing answers is no request: the
/// fence stops it.
#[tokio::test]
async fn a_peer_that_does_not_read_its_answers_does_not_hold_a_fence_up() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let _stop = start_server(listener).await;
    let writer = TcpStorage::connect(&addr, 1).await.unwrap();
    writer
        .call(StorageOp::Write(vec![(1, Bytes::from(vec![0u8; 4 << 20]))]))
        .await
        .unwrap();
    drop(writer);

    // 64 reads of 4 MiB each, never read: the server's answers fill the socket and wait.
    let mut deaf = admitted(&addr).await;
    let reads: Vec<u8> = (0..64)
        .flat_map(|id| wire::encode_request(id, &StorageOp::Read(vec![1])).to_bytes())
        .collect();
    deaf.write_all(&reads).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let fencing = std::time::Instant::now();
    TcpStorage::connect(&addr, 1)
        .await
        .unwrap()
        .fence()
        .await
        .expect("the fence is raised");
    assert!(
        fencing.elapsed() < Duration::from_secs(5),
        "raised at once: {:?}",
        fencing.elapsed()
    );
}

/// Found by review: the fence ended a proxy's connections, but a proxy still running (a paused
/// machine that comes back, a rolling update that overlaps) connected again and its writes went
/// on landing in the store another proxy had fenced. Its new connection names its own fence's
/// token, and is refused by name; a tool that never fences is served as before.
#[tokio::test]
async fn a_proxy_fenced_off_by_a_later_one_is_refused_when_it_connects_again() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let _stop = start_server(listener).await;
    let write = |value: &'static [u8]| StorageOp::Write(vec![(1, Bytes::from_static(value))]);
    let old = TcpStorage::connect(&addr, 1).await.unwrap();
    old.fence().await.unwrap();
    old.call(write(b"before")).await.unwrap();

    let new = TcpStorage::connect(&addr, 1).await.unwrap();
    new.fence().await.unwrap();
    common::fenced_off(|| old.call(write(b"late"))).await;
    let before = StorageReply::Values(vec![Some(Bytes::from_static(b"before"))]);
    assert_eq!(new.call(StorageOp::Read(vec![1])).await.unwrap(), before);
    let tool = TcpStorage::connect(&addr, 1).await.unwrap();
    assert_eq!(tool.call(StorageOp::Read(vec![1])).await.unwrap(), before);
}

/// A proxy gives up on a request that is not answered in time, closes its connection and sends
/// the request again on another, then goes on. A request still unstarted on the closed
/// connection (queued behind a slow one) was applied once the slow one was done: after the
/// requests that replaced it, overwriting them. It is now dropped unstarted.
#[tokio::test]
async fn a_request_on_a_connection_its_peer_closed_is_not_applied_after_its_replacement() {
    let (addr, _stop) = serve_slow_writes().await;
    let mut given_up = admitted(&addr).await;
    // A slow write, and one behind it.
    let both = [write_frame(1, 1, b"slow"), write_frame(2, 2, b"stale")].concat();
    given_up.write_all(&both).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    given_up.shutdown().await.unwrap();
    drop(given_up);

    let retry = TcpStorage::connect(&addr, 1).await.unwrap();
    retry
        .call(StorageOp::Write(vec![(2, Bytes::from_static(b"newer"))]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        retry.call(StorageOp::Read(vec![1, 2])).await.unwrap(),
        StorageReply::Values(vec![
            Some(Bytes::from_static(b"slow")),
            Some(Bytes::from_static(b"newer"))
        ]),
        "the started write is applied, the one behind it never"
    );
}

/// Found by a review: a restarted `cloak server` knew no fence, and let a proxy fenced off
/// before the restart back in. With a place to keep the token (`--data-dir`), it still refuses
/// it; the proxy that fenced it off joins as before.
#[tokio::test]
async fn a_server_restarted_with_its_token_file_still_refuses_the_fenced_off_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let guard = server::Guard {
        fence_token_file: Some(dir.path().join("fence-token")),
        ..Default::default()
    };
    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let serve = |listener: TcpListener| {
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(server::serve_guarded(
            listener,
            storage.clone(),
            guard.clone(),
            async {
                let _ = stopped.await;
            },
        ));
        (stop, server)
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, server) = serve(listener);
    let old = TcpStorage::connect(&addr, 1).await.unwrap();
    old.fence().await.unwrap();
    let new = TcpStorage::connect(&addr, 1).await.unwrap();
    new.fence().await.unwrap();
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();

    let (_stop, _server) = serve(TcpListener::bind(&addr).await.unwrap());
    let write = || old.call(StorageOp::Write(vec![(1, Bytes::from_static(b"late"))]));
    common::fenced_off(write).await;
    let read = || new.call(StorageOp::Read(vec![1]));
    // The first try may find its connection gone with the old server.
    let got = match read().await {
        Ok(got) => got,
        Err(_) => read().await.unwrap(),
    };
    assert_eq!(
        got,
        StorageReply::Values(vec![None]),
        "the late write never landed"
    );
}
