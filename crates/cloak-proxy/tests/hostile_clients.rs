//! Clients that do not play by the rules: floods before AUTH, clients that never read their
//! replies, more clients than allowed. Each costs the proxy bounded memory, and well-behaved
//! clients keep being served.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cloak_core::Outcome;
use cloak_schemes::SchemeName;
use cloak_testkit::commands::{get, set};
use common::{MAX_VALUE, Setup, TestProxy, run};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::timeout;

/// How long the unauthenticated flood lasts.
const FLOOD: Duration = Duration::from_secs(3);
/// Unauthenticated connections flooding at once (the measurement in issue 13 used 40).
const FLOODERS: usize = 40;
/// What each flooder's AUTH argument announces: the 60 MB of the measurement in issue 13.
const ANNOUNCED: usize = 60_000_000;
/// Growth of this process's RSS the flood may cause. Unbounded, 40 connections streaming
/// toward 60 MB each reach gigabytes within a second; bounded, each holds at most a few KiB.
const FLOOD_RSS_BOUND: u64 = 64 << 20;

/// The tests here run one at a time. Two measure this process's memory, in which every test's
/// proxy and clients run: another test's connections would show in their figures (once, 267 MiB
/// of RSS did). And each test here loads its proxy on purpose; beside another's load, the
/// timeouts that tell a refused client from a slow one would be measuring that instead.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The password of the tests' proxies that ask for one.
const PASSWORD: &str = "s3cret";

/// A client of `proxy` that authenticates with [`PASSWORD`] as it connects.
fn client_with_password(proxy: &TestProxy) -> redis::Client {
    redis::Client::open(format!("redis://:{PASSWORD}@{}/", proxy.addr)).unwrap()
}

/// This process's resident memory (the proxy under test runs in it).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Until `stop`: connects, announces a huge AUTH argument, and streams bytes toward it until
/// the proxy closes the connection; then again. Counts the refusals that name the limit.
async fn flood(proxy: std::net::SocketAddr, stop: Arc<AtomicBool>, refused: Arc<AtomicU64>) {
    let chunk = vec![b'x'; 64 * 1024];
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = TcpStream::connect(proxy).await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let header = format!("*2\r\n$4\r\nAUTH\r\n${ANNOUNCED}\r\n");
        if stream.write_all(header.as_bytes()).await.is_err() {
            continue;
        }
        let mut reply = [0u8; 256];
        if let Ok(Ok(n)) = timeout(Duration::from_millis(300), stream.read(&mut reply)).await {
            let expected = format!(
                "-ERR Protocol error: invalid bulk length {ANNOUNCED}: at most 16384 bytes (before AUTH)\r\n"
            );
            if reply[..n] == *expected.as_bytes() {
                refused.fetch_add(1, Ordering::Relaxed);
            }
        }
        let mut left = ANNOUNCED;
        while left > 0 && !stop.load(Ordering::Relaxed) {
            let n = left.min(chunk.len());
            if stream.write_all(&chunk[..n]).await.is_err() {
                break;
            }
            left -= n;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_floods_of_huge_bulks_stay_bounded_and_others_are_served() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut setup = Setup::new(SchemeName::Cloak, 100);
    setup.password = Some(PASSWORD.into());
    let proxy = setup.start().await;
    let client = client_with_password(&proxy);
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    assert_eq!(run(&mut con, &set("k", "start")).await, Ok(Outcome::Ok));

    let baseline = rss_bytes();
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicU64::new(0));
    let flooders: Vec<_> = (0..FLOODERS)
        .map(|_| tokio::spawn(flood(proxy.addr, stop.clone(), refused.clone())))
        .collect();
    let mut peak = baseline;
    let mut served = 0;
    let until = Instant::now() + FLOOD;
    while Instant::now() < until {
        let value = format!("v{served}");
        let wrote = timeout(Duration::from_secs(2), run(&mut con, &set("k", &value)))
            .await
            .expect("an authenticated SET waited over 2 s during the flood");
        assert_eq!(wrote, Ok(Outcome::Ok));
        let read = timeout(Duration::from_secs(2), run(&mut con, &get("k")))
            .await
            .expect("an authenticated GET waited over 2 s during the flood");
        assert_eq!(read, Ok(Outcome::Value(Some(value.into()))));
        served += 1;
        peak = peak.max(rss_bytes());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for flooder in flooders {
        flooder.await.unwrap();
    }
    let grown = peak.saturating_sub(baseline);
    eprintln!(
        "flood: RSS {} MiB before, peak {} MiB; {served} authenticated SET+GET; {} refusals",
        baseline >> 20,
        peak >> 20,
        refused.load(Ordering::Relaxed)
    );
    assert!(
        grown < FLOOD_RSS_BOUND,
        "the flood grew RSS by {} MiB (bound {} MiB)",
        grown >> 20,
        FLOOD_RSS_BOUND >> 20
    );
    assert!(
        refused.load(Ordering::Relaxed) >= FLOODERS as u64,
        "every flooder is refused with the limit named"
    );
    assert!(served >= 10, "only {served} authenticated round trips");
    proxy.shutdown().await;
}

/// Sockets that connect and never send a byte, against a proxy with room for far fewer.
const IDLE_SOCKETS: usize = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_unauthenticated_sockets_cannot_keep_a_real_client_out() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut setup = Setup::new(SchemeName::Cloak, 100);
    setup.password = Some(PASSWORD.into());
    setup.max_clients = 64;
    let proxy = setup.start().await;
    let mut idle = Vec::with_capacity(IDLE_SOCKETS);
    for _ in 0..IDLE_SOCKETS {
        idle.push(TcpStream::connect(proxy.addr).await.unwrap());
    }
    let client = client_with_password(&proxy);
    let mut con = timeout(
        Duration::from_secs(10),
        client.get_multiplexed_async_connection(),
    )
    .await
    .expect("connecting waited over 10 s")
    .expect("a real client gets in while idle sockets wait");
    assert_eq!(run(&mut con, &set("k", "in")).await, Ok(Outcome::Ok));
    assert_eq!(
        run(&mut con, &get("k")).await,
        Ok(Outcome::Value(Some("in".into())))
    );
    // The idle sockets hold at most their share of the places (and transiently a few more, the
    // crowded-out ones still closing).
    let share = 64 / cloak_proxy::UNAUTHENTICATED_SHARE;
    let held = timeout(Duration::from_secs(10), async {
        loop {
            let connected = clients_field(&mut con, "connected_clients").await as usize;
            if connected <= share + 1 {
                return connected;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(held.is_ok(), "idle sockets hold more than {share} places");
    // The oldest idle socket was crowded out with an error naming why.
    let mut oldest = idle.swap_remove(0);
    let told = common::read_all(&mut oldest).await;
    assert!(
        told.starts_with("-ERR max number of unauthenticated clients reached"),
        "{told:?}"
    );
    drop(idle);
    proxy.shutdown().await;
}

/// Unauthenticated sockets that pipeline requests and never read their replies, each until
/// the proxy stops reading it: the proxy waits on them to take a reply, not on their next
/// request, when their time is up or newer ones crowd them out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_clients_that_never_read_are_closed_in_time() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut setup = Setup::new(SchemeName::Cloak, 100);
    setup.password = Some(PASSWORD.into());
    setup.auth_timeout = Duration::from_secs(1);
    setup.max_clients = 16;
    let proxy = setup.start().await;
    let pings = b"PING\r\n".repeat(10_000);
    let mut stuck = Vec::new();
    // More than the unauthenticated share (2 here): the first ones are crowded out, the last
    // ones time out.
    for _ in 0..6 {
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(proxy.addr).await.unwrap();
        while let Ok(Ok(())) = timeout(Duration::from_millis(300), stream.write_all(&pings)).await {
        }
        stuck.push(stream);
    }
    // Each one is gone within its timeout and the time its replies then get to be read: 2 s.
    let client = client_with_password(&proxy);
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let closed = timeout(Duration::from_secs(10), async {
        loop {
            let listed = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async::<String>(&mut con)
                .await
                .unwrap();
            if listed.lines().count() == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "clients that never read are still connected after 10 s"
    );
    drop(stuck);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_authenticate_in_time_is_told_and_closed() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut setup = Setup::new(SchemeName::Cloak, 100);
    setup.password = Some(PASSWORD.into());
    setup.auth_timeout = Duration::from_millis(300);
    let proxy = setup.start().await;
    let mut silent = TcpStream::connect(proxy.addr).await.unwrap();
    // A request allowed before AUTH does not extend the time.
    silent.write_all(b"PING\r\n").await.unwrap();
    let mut told = Vec::new();
    timeout(Duration::from_secs(10), silent.read_to_end(&mut told))
        .await
        .expect("an unauthenticated client is closed after its timeout")
        .unwrap();
    let told = String::from_utf8_lossy(&told);
    assert!(
        told.ends_with("-ERR authentication timeout: no AUTH within 0.3s of connecting\r\n"),
        "{told:?}"
    );

    // An authenticated client stays well past it.
    let client = client_with_password(&proxy);
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(run(&mut con, &set("k", "v")).await, Ok(Outcome::Ok));
    proxy.shutdown().await;
}

/// `count` pipelined `ECHO`s of a value-sized message (longer arguments are refused), and the
/// bytes of their replies.
fn echoes(count: usize) -> (Vec<u8>, usize) {
    let message = vec![b'e'; MAX_VALUE];
    let mut one = format!("*2\r\n$4\r\nECHO\r\n${MAX_VALUE}\r\n").into_bytes();
    one.extend_from_slice(&message);
    one.extend_from_slice(b"\r\n");
    let reply = format!("${MAX_VALUE}\r\n").len() + MAX_VALUE + 2;
    (one.repeat(count), reply * count)
}

async fn connected_clients(proxy: &TestProxy) -> u64 {
    clients_field(&mut proxy.connection().await, "connected_clients").await
}

/// A number from `INFO clients`.
async fn clients_field(con: &mut redis::aio::MultiplexedConnection, field: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query_async(con)
        .await
        .unwrap();
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap();
    line.trim().parse().unwrap()
}

const REPLY_LIMIT: usize = 256 * 1024;

/// Connects with a small receive buffer and pipelines `ECHO`s without ever reading, until the
/// proxy closes the connection; returns the bytes sent.
async fn never_read(proxy: std::net::SocketAddr) -> usize {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(proxy).await.unwrap();
    let (requests, _) = echoes(1000);
    let mut sent = 0usize;
    // Writes fail once the proxy has closed the connection.
    while stream.write_all(&requests).await.is_ok() {
        sent += requests.len();
        assert!(sent < 1 << 30, "1 GiB sent and the proxy still reads");
    }
    sent
}

/// Clients that never read, each allowed far more than the proxy-wide limit lets them hold.
const NON_READERS: usize = 4;
const TOTAL_REPLY_LIMIT: usize = 2 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_are_cut_at_the_total_reply_limit_and_others_are_served() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut setup = Setup::new(SchemeName::Cloak, 100);
    setup.reply_limit = 256 << 20;
    setup.total_reply_limit = TOTAL_REPLY_LIMIT;
    let proxy = setup.start().await;
    let mut con = proxy.connection().await;
    let non_readers: Vec<_> = (0..NON_READERS)
        .map(|_| tokio::spawn(never_read(proxy.addr)))
        .collect();
    let mut served = 0;
    while !non_readers.iter().all(|task| task.is_finished()) {
        let value = format!("v{served}");
        let wrote = timeout(Duration::from_secs(5), run(&mut con, &set("k", &value)))
            .await
            .expect("a SET waited over 5 s");
        assert_eq!(wrote, Ok(Outcome::Ok));
        served += 1;
        assert!(served < 3000, "clients that never read are still connected");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for task in non_readers {
        let sent = task.await.unwrap();
        // Each reply is shorter than its request: a client cut before sending its share of the
        // limit was closed for another reason.
        assert!(
            sent > TOTAL_REPLY_LIMIT / NON_READERS,
            "closed after {sent} bytes sent"
        );
    }
    assert_eq!(run(&mut con, &get("k")).await.map(|_| ()), Ok(()));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_disconnected_at_its_reply_limit() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut setup = Setup::new(SchemeName::Cloak, 100);
    setup.reply_limit = REPLY_LIMIT;
    let proxy = setup.start().await;
    let sent = timeout(Duration::from_secs(30), never_read(proxy.addr))
        .await
        .expect("a client that never reads was not disconnected");
    // Each reply is shorter than its request: less than this, and the proxy closed the
    // connection for another reason than the reply limit.
    assert!(sent > REPLY_LIMIT, "closed after only {sent} bytes sent");
    // Only the connection asking is left.
    let gone = timeout(Duration::from_secs(5), async {
        while connected_clients(&proxy).await != 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "the disconnected client is still counted");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_gets_far_more_than_the_reply_limit() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut setup = Setup::new(SchemeName::Cloak, 100);
    setup.reply_limit = REPLY_LIMIT;
    let proxy = setup.start().await;
    let stream = TcpStream::connect(proxy.addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let (requests, replies_len) = echoes(1000);
    let batches = 64 * REPLY_LIMIT / replies_len;
    let sending = tokio::spawn(async move {
        for _ in 0..batches {
            writer.write_all(&requests).await.unwrap();
        }
        writer
    });
    let mut received = 0;
    let mut buf = vec![0u8; 64 * 1024];
    let expected = batches * replies_len;
    timeout(Duration::from_secs(60), async {
        while received < expected {
            let n = reader.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed after {received} of {expected} reply bytes");
            received += n;
        }
    })
    .await
    .expect("all replies within 60 s");
    sending.await.unwrap();
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_over_max_clients_are_told_and_closed() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut setup = Setup::new(SchemeName::Cloak, 100);
    setup.max_clients = 2;
    let proxy = setup.start().await;
    let ping = |mut stream: TcpStream| async move {
        stream.write_all(b"PING\r\n").await.unwrap();
        let mut reply = [0u8; 64];
        let n = stream.read(&mut reply).await.unwrap();
        assert_eq!(&reply[..n], b"+PONG\r\n");
        stream
    };
    let first = ping(TcpStream::connect(proxy.addr).await.unwrap()).await;
    let mut second = ping(TcpStream::connect(proxy.addr).await.unwrap()).await;

    let mut third = TcpStream::connect(proxy.addr).await.unwrap();
    let mut reply = Vec::new();
    timeout(Duration::from_secs(5), third.read_to_end(&mut reply))
        .await
        .expect("closed at once")
        .unwrap();
    assert_eq!(reply, cloak_proxy::TOO_MANY_CLIENTS.as_bytes());
    drop(third);
    second.write_all(b"INFO stats\r\n").await.unwrap();
    let mut info = vec![0u8; 4096];
    let n = second.read(&mut info).await.unwrap();
    let info = String::from_utf8_lossy(&info[..n]);
    assert!(info.contains("rejected_connections:1\r\n"), "{info}");

    // A place frees up once a client leaves.
    drop(first);
    let admitted = timeout(Duration::from_secs(5), async {
        loop {
            let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
            stream.write_all(b"PING\r\n").await.unwrap();
            let mut reply = [0u8; 64];
            if let Ok(n) = stream.read(&mut reply).await
                && &reply[..n] == b"+PONG\r\n"
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(admitted.is_ok(), "no client admitted after one left");
    proxy.shutdown().await;
}

/// Connections pipelining large `MSET`s as fast as they can write, never reading.
const WRITERS: usize = 40;
/// The proxy-wide budget of request bytes the test sets.
const PENDING_LIMIT: usize = 2 << 20;

/// An `MSET` of as many value-sized pairs as one command may name.
fn large_mset(round: usize) -> Vec<u8> {
    let pairs = 64;
    let mut out = format!("*{}\r\n$4\r\nMSET\r\n", 1 + 2 * pairs).into_bytes();
    for i in 0..pairs {
        let key = format!("w{:03}-{i:02}", round % 1000);
        out.extend_from_slice(format!("${}\r\n{key}\r\n${MAX_VALUE}\r\n", key.len()).as_bytes());
        out.extend_from_slice(&[b'v'; MAX_VALUE]);
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticated_floods_of_large_writes_are_held_to_the_pending_budget() {
    let _alone = ONE_AT_A_TIME.lock().await;
    // Batches that write a dozen slots every 2 ms take a few hundred of these MSETs a second:
    // the rest wait in the proxy, as long as it keeps reading them.
    let mut setup = Setup::new(SchemeName::Cloak, 100);
    setup.pending_limit = PENDING_LIMIT;
    let proxy = setup.start().await;
    let baseline = rss_bytes();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let stop = stop.clone();
            let addr = proxy.addr;
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(addr).await.unwrap();
                let mut round = w * 1000;
                while !stop.load(Ordering::Relaxed) {
                    let request = large_mset(round);
                    // The proxy stops reading once the budget is spent: the write blocks.
                    if timeout(Duration::from_millis(100), stream.write_all(&request))
                        .await
                        .is_ok_and(|r| r.is_err())
                    {
                        return;
                    }
                    round += 1;
                }
            })
        })
        .collect();
    let mut peak = baseline;
    let mut most_pending = 0u64;
    // Every request, INFO too, waits its turn for the proxy-wide budget behind the flood's
    // (the pool is fair per request, not per client: see `budget.rs`), which can take longer
    // than the client library's default half-second answer timeout.
    let mut con = proxy.connection().await;
    con.set_response_timeout(Duration::from_secs(10));
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        peak = peak.max(rss_bytes());
        let pending = timeout(
            Duration::from_secs(5),
            clients_field(&mut con, "pending_request_bytes"),
        )
        .await
        .expect("INFO waited over 5 s during the flood");
        most_pending = most_pending.max(pending);
    }
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    let grown = peak.saturating_sub(baseline);
    eprintln!(
        "write flood: RSS {} MiB before, peak {} MiB; at most {} KiB of requests pending",
        baseline >> 20,
        peak >> 20,
        most_pending >> 10
    );
    assert!(
        most_pending as usize <= PENDING_LIMIT,
        "{most_pending} bytes pending, over the budget of {PENDING_LIMIT}"
    );
    // Unbounded, these writers park 1,024 MSETs each (about 200 MiB in all) within a second.
    assert!(
        grown < 48 << 20,
        "the flood grew RSS by {} MiB",
        grown >> 20
    );
    assert!(
        most_pending as usize > PENDING_LIMIT / 4,
        "the flood never filled the budget ({most_pending} bytes): it tests nothing"
    );
    // The budget frees up as the writes finish: a new client is served.
    let mut fresh = proxy.connection().await;
    fresh.set_response_timeout(Duration::from_secs(10));
    let reply = timeout(
        Duration::from_secs(10),
        run(&mut fresh, &set("after", "flood")),
    )
    .await
    .expect("a SET after the flood waited over 10 s");
    assert_eq!(reply, Ok(Outcome::Ok));
    proxy.shutdown().await;
}
