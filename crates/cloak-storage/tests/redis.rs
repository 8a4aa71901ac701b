//! The Redis backends against real `redis-server` processes: a standalone server and a local
//! cluster of three masters, started by the tests themselves (see `cloak_testkit::redis_server`).

use std::time::Duration;

use bytes::Bytes;
use cloak_storage::{RedisStorage, RedisTarget, Storage, StorageOp, StorageReply, wire};
use cloak_testkit::redis_server::{RedisCluster, RedisServer};

mod common;

fn target(url: &str) -> RedisTarget {
    RedisTarget::parse(url).unwrap().unwrap()
}

fn value(addr: u128, round: u8) -> Bytes {
    Bytes::from(format!("element {addr} round {round}").repeat(8))
}

/// Every address in order, read back with scans of `limit`.
async fn scan_all(storage: &dyn Storage, limit: u32) -> Vec<(u128, Bytes)> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let reply = storage
            .call(StorageOp::Scan { after, limit })
            .await
            .unwrap();
        let StorageReply::Entries(entries) = reply else {
            panic!("a scan answers entries, got {reply:?}")
        };
        let done = entries.len() < limit as usize;
        after = entries.last().map(|(a, _)| *a).or(after);
        all.extend(entries);
        if done {
            return all;
        }
    }
}

/// Writes, reads, deletes and scans, checked against what was written; two prefixes share
/// the server without seeing each other.
async fn behaves_like_storage(url: &str) {
    let first = RedisStorage::connect(target(&format!("{url}?prefix=one:")), None)
        .await
        .unwrap();
    let second = RedisStorage::connect(target(&format!("{url}?prefix=two:")), None)
        .await
        .unwrap();
    // Dense addresses and pseudorandom labels, in a batch spread over every hash slot.
    let addrs: Vec<u128> = (0..600u128)
        .map(|i| {
            if i % 2 == 0 {
                i
            } else {
                i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c)
            }
        })
        .collect();
    let writes: Vec<(u128, Bytes)> = addrs.iter().map(|&a| (a, value(a, 1))).collect();
    assert_eq!(
        first.call(StorageOp::Write(writes.clone())).await.unwrap(),
        StorageReply::Done
    );
    second
        .call(StorageOp::Write(vec![(
            7,
            Bytes::from_static(b"other store"),
        )]))
        .await
        .unwrap();

    let mut read = addrs[..10].to_vec();
    read.push(1_000_000);
    let StorageReply::Values(values) = first.call(StorageOp::Read(read.clone())).await.unwrap()
    else {
        panic!("a read answers values")
    };
    let want: Vec<Option<Bytes>> = read
        .iter()
        .map(|&a| (a != 1_000_000).then(|| value(a, 1)))
        .collect();
    assert_eq!(values, want);

    let deleted: Vec<u128> = addrs.iter().copied().step_by(3).collect();
    first
        .call(StorageOp::Delete(deleted.clone()))
        .await
        .unwrap();
    let mut expected: Vec<(u128, Bytes)> = writes
        .into_iter()
        .filter(|(a, _)| !deleted.contains(a))
        .collect();
    expected.sort_by_key(|(a, _)| *a);
    assert_eq!(
        scan_all(&first, 64).await,
        expected,
        "scans go in address order"
    );
    assert_eq!(scan_all(&first, 100_000).await, expected);
    assert_eq!(
        scan_all(&second, 10).await,
        vec![(7, Bytes::from_static(b"other store"))]
    );
}

#[tokio::test]
async fn a_standalone_redis_stores_and_scans_elements() {
    let redis = RedisServer::start();
    behaves_like_storage(&redis.url()).await;
}

#[tokio::test]
async fn a_redis_cluster_stores_and_scans_elements_across_its_masters() {
    let cluster = RedisCluster::start(3);
    behaves_like_storage(&cluster.url()).await;
    // The elements really are spread: every master holds some.
    for node in &cluster.nodes {
        let keys: u64 = node.cli(&["DBSIZE"]).trim().parse().unwrap();
        assert!(keys > 50, "node {} holds only {keys} keys", node.port);
    }
}

#[tokio::test]
async fn a_cluster_write_a_dead_proxy_left_half_done_is_finished_by_the_next_fence() {
    let cluster = RedisCluster::start(3);
    let url = format!("{}?prefix=half:", cluster.url());
    let storage = RedisStorage::connect(target(&url), None).await.unwrap();
    let old: Vec<(u128, Bytes)> = (0..200u128).map(|a| (a, value(a, 1))).collect();
    storage.call(StorageOp::Write(old)).await.unwrap();
    drop(storage);

    // What a proxy killed between storing its intent and finishing the MSET leaves: the intent,
    // and the new batch applied on one node only.
    let new: Vec<(u128, Bytes)> = (0..200u128).map(|a| (a, value(a, 2))).collect();
    let intent = wire::encode_request(0, &StorageOp::Write(new.clone())).to_bytes();
    let t = target(&url);
    let client = redis::cluster::ClusterClient::new(t.nodes.clone()).unwrap();
    let mut con = client.get_async_connection().await.unwrap();
    let _: () = redis::cmd("SET")
        .arg(t.intent_key())
        .arg(intent.as_ref())
        .query_async(&mut con)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(t.key(5))
        .arg(value(5, 2).as_ref())
        .query_async(&mut con)
        .await
        .unwrap();

    let storage = RedisStorage::connect(t.clone(), None).await.unwrap();
    storage.fence().await.unwrap();
    assert_eq!(
        scan_all(&storage, 50).await,
        new,
        "the whole new batch, never a mix"
    );
    let intent: Option<Vec<u8>> = redis::cmd("GET")
        .arg(t.intent_key())
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(intent.is_none(), "the intent is gone once applied");
}

#[tokio::test]
async fn a_dead_redis_gives_clear_errors_and_reconnects_when_it_returns() {
    let mut redis = RedisServer::start();
    let storage = RedisStorage::connect(target(&redis.url()), None)
        .await
        .unwrap();
    storage
        .call(StorageOp::Write(vec![(1, Bytes::from_static(b"kept"))]))
        .await
        .unwrap();
    redis.kill();
    let error = storage
        .call(StorageOp::Read(vec![1]))
        .await
        .expect_err("Redis is down");
    assert!(
        error.0.contains(&format!("127.0.0.1:{}", redis.port)),
        "the error names the server: {error}"
    );

    redis.restart();
    let start = std::time::Instant::now();
    loop {
        match storage.call(StorageOp::Read(vec![1])).await {
            Ok(reply) => {
                assert_eq!(
                    reply,
                    StorageReply::Values(vec![Some(Bytes::from_static(b"kept"))]),
                    "the append-only file kept the write"
                );
                break;
            }
            Err(error) => {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "never reconnected: {error}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The fence on a Redis: a proxy that starts ends every connection the proxy before it left
/// (found by the name each gives itself), so that a write still on its way from that proxy (here
/// half a command in Redis's input buffer) never lands in the middle of the recovery's scan;
/// and it ends only those: another store's proxy on the same Redis keeps its connection.
#[tokio::test]
async fn a_fence_ends_the_connections_of_the_proxy_before_and_only_those() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let redis = RedisServer::start();
    let url = format!("{}?prefix=fenced:", redis.url());
    let t = target(&url);
    let old = RedisStorage::connect(t.clone(), None).await.unwrap();
    old.call(StorageOp::Write(vec![(1, value(1, 1))]))
        .await
        .unwrap();
    // Another store's proxy on the same Redis, and a client that is no proxy.
    let other_name = target(&format!("{}?prefix=other:", redis.url())).client_name();
    let mut other_store = named_connection(redis.port, Some(&other_name)).await;
    let mut no_proxy = named_connection(redis.port, None).await;

    // A write of the old proxy on its way: its first half is in Redis's input buffer.
    let mut late = named_connection(redis.port, Some(&t.client_name())).await;
    let key = t.key(2);
    let set = [
        format!("*3\r\n$3\r\nSET\r\n${}\r\n", key.len()).into_bytes(),
        key,
        b"\r\n$6\r\nlanded\r\n".to_vec(),
    ]
    .concat();
    let (first, second) = set.split_at(set.len() / 2);
    late.write_all(first).await.unwrap();

    let new = RedisStorage::connect(t.clone(), None).await.unwrap();
    new.fence().await.unwrap();
    // The rest arrives after the fence: the connection is gone, and the write with it.
    let _ = late.write_all(second).await;
    common::closed_by_peer(&mut late, "the fence closed the late connection").await;
    assert_eq!(
        new.call(StorageOp::Read(vec![1, 2])).await.unwrap(),
        StorageReply::Values(vec![Some(value(1, 1)), None]),
        "what the old proxy had written, and not the write cut off"
    );
    // The other store's connection and the other client's are still open.
    for connection in [&mut other_store, &mut no_proxy] {
        connection.write_all(b"PING\r\n").await.unwrap();
        let mut pong = [0; 7];
        connection.read_exact(&mut pong).await.unwrap();
        assert_eq!(&pong, b"+PONG\r\n");
    }
    drop(old);
}

/// Found by review: on Redis a proxy still running when another fenced it off (a paused
/// machine that comes back) connected again, and its writes went on landing in the other's
/// store. Its new connection finds another token under the store's fence key, and is refused
/// by name.
#[tokio::test]
async fn a_proxy_fenced_off_on_redis_is_refused_when_it_connects_again() {
    let redis = RedisServer::start();
    let t = target(&redis.url());
    let old = RedisStorage::connect(t.clone(), None).await.unwrap();
    old.fence().await.unwrap();
    old.call(StorageOp::Write(vec![(1, value(1, 1))]))
        .await
        .unwrap();
    let new = RedisStorage::connect(t.clone(), None).await.unwrap();
    new.fence().await.unwrap();
    common::fenced_off(|| old.call(StorageOp::Write(vec![(1, value(1, 2))]))).await;
    assert_eq!(
        new.call(StorageOp::Read(vec![1])).await.unwrap(),
        StorageReply::Values(vec![Some(value(1, 1))])
    );
    // The fence key is no element: a scan does not list it.
    assert_eq!(scan_all(&new, 10).await, vec![(1, value(1, 1))]);
}

/// Found by a review: a proxy that fenced twice kept the first token while Redis held the
/// second, and its own next connection was refused as fenced off; and a fence key lost with
/// Redis's data (a restart without persistence) refused every connection of the proxy. Its
/// reconnects now survive both.
#[tokio::test]
async fn a_proxy_survives_its_own_second_fence_and_a_lost_fence_key() {
    let redis = RedisServer::start();
    let t = target(&redis.url());
    let storage = RedisStorage::connect(t.clone(), None).await.unwrap();
    storage.fence().await.unwrap();
    storage.fence().await.unwrap();
    let mut owner = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let end_its_connections = |owner: &mut redis::Connection| {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(owner).unwrap();
        let name = format!("name={}", t.client_name());
        for line in list
            .lines()
            .filter(|line| line.split(' ').any(|f| f == name))
        {
            let id = line.split(' ').next().unwrap().trim_start_matches("id=");
            let _: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(id)
                .query(owner)
                .unwrap();
        }
    };
    let read_again = async |storage: &RedisStorage| {
        // The first try may find its connection ended without knowing it yet.
        if storage.call(StorageOp::Read(vec![1])).await.is_err() {
            storage.call(StorageOp::Read(vec![1])).await.unwrap();
        }
    };
    end_its_connections(&mut owner);
    read_again(&storage).await;
    let _: () = redis::cmd("DEL")
        .arg(t.fence_key())
        .query(&mut owner)
        .unwrap();
    end_its_connections(&mut owner);
    read_again(&storage).await;
}

/// A server that lists more connections named as the store's proxies than one pipeline of
/// kills holds (a tenant of a shared Redis may open them) has them all ended, a thousand at a
/// time; a server that refuses the fence's commands (an ACL user without them) refuses the
/// start, saying what the fence needs: a fence that did not happen is not taken for one.
#[tokio::test]
async fn a_fence_ends_any_number_of_connections_and_says_why_when_refused() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let name = target("redis://x:1").client_name();
    let kills = Arc::new(AtomicUsize::new(0));
    let crowded = {
        let kills = kills.clone();
        fake_redis(move |args, _| match args.get(..2) {
            Some([client, id]) if client == "CLIENT" && id == "ID" => b":1\r\n".to_vec(),
            Some([client, list]) if client == "CLIENT" && list == "LIST" => {
                let list: String = (1..2503)
                    .map(|id| format!("id={id} name={name}\n"))
                    .collect();
                format!("${}\r\n{list}\r\n", list.len()).into_bytes()
            }
            Some([client, kill]) if client == "CLIENT" && kill == "KILL" => {
                kills.fetch_add(1, Ordering::SeqCst);
                b":1\r\n".to_vec()
            }
            _ => ping_or(args, b"+OK\r\n"),
        })
        .await
    };
    let storage = RedisStorage::connect(target(&format!("redis://{crowded}")), None)
        .await
        .unwrap();
    storage.fence().await.unwrap();
    assert_eq!(kills.load(Ordering::SeqCst), 2501, "all but its own");

    let refusing = fake_redis(|args, _| match args.get(..2) {
        Some([client, id]) if client == "CLIENT" && id == "ID" => {
            b"-NOPERM User cloak has no permissions to run the 'client|id' command\r\n".to_vec()
        }
        _ => ping_or(args, b"+OK\r\n"),
    })
    .await;
    let storage = RedisStorage::connect(target(&format!("redis://{refusing}")), None)
        .await
        .unwrap();
    let error = storage.fence().await.expect_err("no fence");
    assert!(
        error
            .0
            .contains("needs CLIENT SETNAME, CLIENT ID, CLIENT LIST and CLIENT KILL"),
        "{error}"
    );
}

/// A plain connection to the Redis on `port`, named `name` if given.
async fn named_connection(port: u16, name: Option<&str>) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut connection = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    if let Some(name) = name {
        connection
            .write_all(format!("CLIENT SETNAME {name}\r\n").as_bytes())
            .await
            .unwrap();
        let mut ok = [0; 5];
        connection.read_exact(&mut ok).await.unwrap();
        assert_eq!(&ok, b"+OK\r\n");
    }
    connection
}

#[tokio::test]
async fn an_unreachable_redis_fails_at_connect_with_the_address() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = RedisStorage::connect(target(&format!("redis://127.0.0.1:{port}")), None)
        .await
        .err()
        .expect("nothing listens there");
    assert!(error.0.contains("cannot connect"), "{error}");
    assert!(error.0.contains(&port.to_string()), "{error}");
}

/// A server that speaks just enough RESP to look like Redis: `answer` gets each request's
/// arguments (upper-cased) and the number of the connection it came on (from 0), and gives the
/// bytes to send back.
async fn fake_redis(
    answer: impl Fn(&[String], usize) -> Vec<u8> + Send + Sync + 'static,
) -> std::net::SocketAddr {
    fake_redis_dripping(usize::MAX, answer).await
}

/// [`fake_redis`], sending each answer in writes of 1 KiB, at most `per_ms` bytes a
/// millisecond.
async fn fake_redis_dripping(
    per_ms: usize,
    answer: impl Fn(&[String], usize) -> Vec<u8> + Send + Sync + 'static,
) -> std::net::SocketAddr {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = std::sync::Arc::new(answer);
    tokio::spawn(async move {
        let mut connections = 0;
        while let Ok((stream, _)) = listener.accept().await {
            let (answer, connection) = (answer.clone(), connections);
            connections += 1;
            tokio::spawn(async move {
                // Each piece leaves as it is written.
                stream.set_nodelay(true).unwrap();
                let (reader, mut writer) = stream.into_split();
                let mut reader = BufReader::new(reader);
                let mut line = String::new();
                loop {
                    // A request: *N, then N bulk strings ($len, bytes).
                    line.clear();
                    if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let Some(count) = line.trim().strip_prefix('*') else {
                        return;
                    };
                    let mut args = Vec::new();
                    for _ in 0..count.parse::<usize>().unwrap() {
                        line.clear();
                        reader.read_line(&mut line).await.unwrap();
                        let len: usize = line.trim()[1..].parse().unwrap();
                        let mut arg = vec![0; len + 2];
                        reader.read_exact(&mut arg).await.unwrap();
                        arg.truncate(len);
                        args.push(String::from_utf8_lossy(&arg).to_uppercase());
                    }
                    for burst in answer(&args, connection).chunks(per_ms) {
                        for piece in burst.chunks(1024) {
                            if writer.write_all(piece).await.is_err() {
                                return;
                            }
                        }
                        if burst.len() == per_ms {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// Answers `PING` and a connection's naming (`CLIENT SETNAME`) as Redis does and everything
/// else with `other`.
fn ping_or(args: &[String], other: &[u8]) -> Vec<u8> {
    match args.first().map(String::as_str) {
        Some("PING") => b"+PONG\r\n".to_vec(),
        Some("CLIENT") => b"+OK\r\n".to_vec(),
        _ => other.to_vec(),
    }
}

/// A hostile storage server holding recovery forever: SCAN answers a cursor that never
/// returns to 0.
async fn endless_scan_server() -> std::net::SocketAddr {
    fake_redis(|args, _| match args.first().map(String::as_str) {
        Some("SCAN") => b"*2\r\n$1\r\n7\r\n*0\r\n".to_vec(),
        Some("DBSIZE") => b":3\r\n".to_vec(),
        _ => ping_or(args, b"+OK\r\n"),
    })
    .await
}

/// Found by review: an answer with an empty line (and nested arrays whose counts overflow)
/// panicked the connection's reader, and the connection stayed in use with nobody reading it:
/// every request after it waited 30 s for nothing. Now the bad answer fails the connection at
/// once with an error that names it, and the next request opens a new one.
#[tokio::test]
async fn an_answer_that_is_not_resp_fails_its_connection_and_the_next_request_reconnects() {
    let addr = fake_redis(|args, connection| match connection {
        0 => ping_or(args, b"\r\n"),
        _ => ping_or(args, b"+OK\r\n"),
    })
    .await;
    let storage = RedisStorage::connect(target(&format!("redis://{addr}")), None)
        .await
        .unwrap();
    let write = || storage.call(StorageOp::Write(vec![(1, value(1, 0))]));
    let started = std::time::Instant::now();
    let error = write().await.expect_err("an empty line is not an answer");
    assert!(
        error.to_string().contains("empty RESP line"),
        "the error names what was wrong: {error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "failed at once, not by timeout: {:?}",
        started.elapsed()
    );
    write()
        .await
        .expect("the next request is answered on a new connection");
}

/// An answer of `count` bulk strings of `len` bytes each.
fn values(count: usize, len: usize) -> Vec<u8> {
    let mut answer = format!("*{count}\r\n").into_bytes();
    for _ in 0..count {
        answer.extend_from_slice(format!("${len}\r\n").as_bytes());
        answer.extend_from_slice(&vec![b'v'; len]);
        answer.extend_from_slice(b"\r\n");
    }
    answer
}

/// Review finding 12: a hostile Redis could make the proxy buffer up to 512 MiB for any
/// request (a megabyte in answer to a write was taken as its answer). Each answer is now
/// bounded by what its request calls for; a longer one is refused by name, at once, and fails
/// only its connection.
#[tokio::test]
async fn an_answer_longer_than_its_request_allows_is_refused_and_the_connection_replaced() {
    // Connection 0 answers too much, the next ones exactly what was asked.
    let addr = fake_redis(|args, connection| match args.first().map(String::as_str) {
        Some("MSET") if connection == 0 => values(1, 1 << 20)[4..].to_vec(),
        Some("MGET") if connection == 1 => values(args.len() - 1, 101),
        Some("MGET") => values(args.len() - 1, 100),
        _ => ping_or(args, b"+OK\r\n"),
    })
    .await;
    let storage = RedisStorage::connect(target(&format!("redis://{addr}")), None)
        .await
        .unwrap()
        .with_max_element(100);
    let started = std::time::Instant::now();
    let write = storage.call(StorageOp::Write(vec![(1, value(1, 0))]));
    let error = write.await.expect_err("a megabyte is no answer to a write");
    assert!(
        error.to_string().contains("at most 4096 bytes"),
        "the error says what was allowed: {error}"
    );
    // An MGET of 100 keys may bring 100 elements of 100 bytes, not of 101.
    let read = || storage.call(StorageOp::Read((0..100).collect()));
    let error = read().await.expect_err("elements longer than allowed");
    let allowed = 6 + 100 * (6 + 100 + 2);
    assert!(
        error.to_string().contains(&format!(
            "to a request whose answer is at most {allowed} bytes"
        )),
        "the error says what was allowed: {error}"
    );
    common::refused_at_once_then_answered(started, read(), 100, 100).await;
}

/// A fake cluster node that serves every slot itself (`CLUSTER SLOTS` names it with an empty
/// host, "the node asked", and its own port), answers `MGET` as `mget` says (given the key count
/// and how many MGETs came before), nothing for `GET` and `+OK` to the rest.
async fn fake_cluster_node(
    mget: impl Fn(usize, usize) -> Vec<u8> + Send + Sync + 'static,
) -> std::net::SocketAddr {
    let mgets = std::sync::atomic::AtomicUsize::new(0);
    let port = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(0));
    let own = port.clone();
    let addr = fake_redis(move |args, _| match args.first().map(String::as_str) {
        Some("CLUSTER") => {
            let port = own.load(std::sync::atomic::Ordering::SeqCst);
            format!("*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$0\r\n\r\n:{port}\r\n$2\r\nid\r\n")
                .into_bytes()
        }
        Some("MGET") => mget(
            args.len() - 1,
            mgets.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
        ),
        Some("GET") => b"$-1\r\n".to_vec(),
        _ => ping_or(args, b"+OK\r\n"),
    })
    .await;
    port.store(addr.port(), std::sync::atomic::Ordering::SeqCst);
    addr
}

/// A Redis Cluster's answers were read by the `redis` crate, which takes whatever length an
/// answer announces: a hostile node could make the proxy buffer as much as it liked. Its
/// masters are now reached through the same bounded connections as a single Redis: an answer
/// longer than its command allows is refused by name, at once, and fails only its connection.
#[tokio::test]
async fn a_cluster_answer_longer_than_its_request_allows_is_refused_and_the_connection_replaced() {
    // The first MGET is answered with too much, the next ones with what was asked.
    let addr = fake_cluster_node(|keys, before| match before {
        0 => values(keys, 1 << 20),
        _ => values(keys, 100),
    })
    .await;
    let storage = RedisStorage::connect(target(&format!("redis+cluster://{addr}")), None)
        .await
        .unwrap()
        .with_max_element(100);
    let started = std::time::Instant::now();
    let read = || storage.call(StorageOp::Read((0..100).collect()));
    let error = read()
        .await
        .expect_err("elements of a megabyte are not allowed");
    assert!(
        error
            .to_string()
            .contains("to a request whose answer is at most"),
        "the error says what was allowed: {error}"
    );
    common::refused_at_once_then_answered(started, read(), 100, 100).await;
}

/// `CLUSTER SLOTS` naming one master, at `port` on this host, for every slot.
fn every_slot_at(port: u16) -> Vec<u8> {
    slots_at(&[(0, 16383, port)])
}

/// `CLUSTER SLOTS` naming, for each `(first, last, port)`, a master at `port` on this host.
fn slots_at(ranges: &[(u16, u16, u16)]) -> Vec<u8> {
    let mut answer = format!("*{}\r\n", ranges.len());
    for (first, last, port) in ranges {
        answer += &format!(
            "*3\r\n:{first}\r\n:{last}\r\n*3\r\n$9\r\n127.0.0.1\r\n:{port}\r\n$2\r\nid\r\n"
        );
    }
    answer.into_bytes()
}

/// A cluster whose slots move while the proxy uses it: an `ASK` (a slot half way through a
/// migration) is followed at once, on the node named, after `ASKING`; a `MOVED` is followed at
/// once to the new master, and the slot map is read again for the next request, which goes
/// straight there. (A first version failed the request on `MOVED`: on a real cluster resharded
/// under load, clients got errors for as long as slots kept moving.)
#[tokio::test]
async fn a_cluster_follows_ask_and_moved_at_once_and_reads_the_map_again() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
    let (a_port, b_port) = (Arc::new(AtomicU16::new(0)), Arc::new(AtomicU16::new(0)));
    let moved = Arc::new(AtomicBool::new(false));
    let b_asked = Arc::new(AtomicUsize::new(0));
    let (a_mgets, b_mgets) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let key_slot = cloak_storage::slot::key_slot(&target("redis+cluster://x:1").key(7));
    let b = {
        let (b_port, b_asked, b_mgets) = (b_port.clone(), b_asked.clone(), b_mgets.clone());
        fake_redis(move |args, _| match args.first().map(String::as_str) {
            Some("CLUSTER") => every_slot_at(b_port.load(Ordering::SeqCst)),
            Some("ASKING") => {
                b_asked.fetch_add(1, Ordering::SeqCst);
                b"+OK\r\n".to_vec()
            }
            Some("MGET") => {
                b_mgets.fetch_add(1, Ordering::SeqCst);
                values(args.len() - 1, 100)
            }
            _ => ping_or(args, b"+OK\r\n"),
        })
        .await
    };
    b_port.store(b.port(), Ordering::SeqCst);
    let a = {
        let (a_port, moved) = (a_port.clone(), moved.clone());
        let mgets = a_mgets.clone();
        fake_redis(move |args, _| match args.first().map(String::as_str) {
            Some("CLUSTER") if moved.load(Ordering::SeqCst) => every_slot_at(b.port()),
            // A serves every slot but one, which B serves: B is a master of the map, as the
            // node a slot migrates to is.
            Some("CLUSTER") => {
                let (a, b) = (a_port.load(Ordering::SeqCst), b.port());
                let theirs = (key_slot + 1) % 16384;
                let mut ranges = vec![(theirs, theirs, b)];
                if theirs > 0 {
                    ranges.push((0, theirs - 1, a));
                }
                if theirs < 16383 {
                    ranges.push((theirs + 1, 16383, a));
                }
                slots_at(&ranges)
            }
            Some("MGET") => match mgets.fetch_add(1, Ordering::SeqCst) {
                0 => format!("-ASK 1 127.0.0.1:{}\r\n", b.port()).into_bytes(),
                _ => {
                    moved.store(true, Ordering::SeqCst);
                    format!("-MOVED 1 127.0.0.1:{}\r\n", b.port()).into_bytes()
                }
            },
            Some("GET") => b"$-1\r\n".to_vec(),
            _ => ping_or(args, b"+OK\r\n"),
        })
        .await
    };
    a_port.store(a.port(), Ordering::SeqCst);
    let storage = RedisStorage::connect(target(&format!("redis+cluster://{a}")), None)
        .await
        .unwrap();
    let read = || storage.call(StorageOp::Read(vec![7]));
    let expected = StorageReply::Values(vec![Some(Bytes::from(vec![b'v'; 100]))]);

    assert_eq!(read().await.unwrap(), expected, "ASK is followed at once");
    assert_eq!(
        b_asked.load(Ordering::SeqCst),
        1,
        "after ASKING, on the node named"
    );

    assert_eq!(read().await.unwrap(), expected, "MOVED is followed at once");
    assert_eq!(a_mgets.load(Ordering::SeqCst), 2);
    assert_eq!(
        b_mgets.load(Ordering::SeqCst),
        2,
        "the ASK's and the MOVED's"
    );
    assert_eq!(read().await.unwrap(), expected);
    assert_eq!(
        (
            a_mgets.load(Ordering::SeqCst),
            b_mgets.load(Ordering::SeqCst)
        ),
        (2, 3),
        "the map was read again: the next request went straight to the new master"
    );
}

/// A hostile node cannot send the proxy to a host of its choosing with `ASK`: only masters of
/// the slot map get a connection (and so the password), and the connections are bounded by the
/// map (at most 1,000 masters; `slot_map`'s unit test holds that).
#[tokio::test]
async fn an_ask_to_a_node_outside_the_slot_map_is_refused_without_connecting() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
    let stranger_reached = Arc::new(AtomicUsize::new(0));
    let stranger = {
        let reached = stranger_reached.clone();
        fake_redis(move |args, _| {
            reached.fetch_add(1, Ordering::SeqCst);
            ping_or(args, b"+OK\r\n")
        })
        .await
    };
    let port = Arc::new(AtomicU16::new(0));
    let own = port.clone();
    let node = fake_redis(move |args, _| match args.first().map(String::as_str) {
        Some("CLUSTER") => every_slot_at(own.load(Ordering::SeqCst)),
        Some("MGET") => format!("-ASK 1 127.0.0.1:{}\r\n", stranger.port()).into_bytes(),
        Some("GET") => b"$-1\r\n".to_vec(),
        _ => ping_or(args, b"+OK\r\n"),
    })
    .await;
    port.store(node.port(), Ordering::SeqCst);
    let storage = RedisStorage::connect(target(&format!("redis+cluster://{node}")), None)
        .await
        .unwrap();
    let error = storage
        .call(StorageOp::Read(vec![7]))
        .await
        .expect_err("an ASK to a stranger is not followed");
    assert!(
        error
            .to_string()
            .contains("is not a master of the cluster's slot map"),
        "the error says why: {error}"
    );
    assert_eq!(
        stranger_reached.load(Ordering::SeqCst),
        0,
        "never contacted"
    );
}

/// The cluster's slot map is bounded too: a node that announces a gigabyte in answer to
/// `CLUSTER SLOTS` is refused before anything is buffered, and the connect fails by name.
#[tokio::test]
async fn a_slot_map_longer_than_allowed_is_refused() {
    let addr = fake_redis(|args, _| match args.first().map(String::as_str) {
        Some("CLUSTER") => b"$1073741824\r\n".to_vec(),
        _ => ping_or(args, b"+OK\r\n"),
    })
    .await;
    let started = std::time::Instant::now();
    let error = RedisStorage::connect(target(&format!("redis+cluster://{addr}")), None)
        .await
        .err()
        .expect("a gigabyte is no slot map");
    assert!(
        error.to_string().contains("no node gave a slot map")
            && error.to_string().contains("at most 4194304 bytes"),
        "the error says what was allowed: {error}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Review finding 13: over TLS, a retired connection was never closed. Both halves of the
/// split stream share the socket, and the reader task, waiting for Redis to close first, kept
/// it (and itself) for as long as Redis did: forever, for a Redis that never closes. Here a
/// write is abandoned while Redis does not read it (the caller gave up), which retires the
/// connection: Redis must see it closed.
#[tokio::test]
async fn a_retired_tls_connection_is_closed() {
    use cloak_storage::tls::client::ClientTlsFiles;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let dir = tempfile::tempdir().unwrap();
    let (files, tls) = common::quick_start_tls(dir.path());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (give_up, given_up) = tokio::sync::oneshot::channel::<()>();
    // Answers the greeting (the connection's name, then PING), reads nothing more until the
    // client has given up, then reads on: whether the client's side closes.
    let name = target(&format!("rediss://{addr}")).client_name();
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut stream = tls.accept(stream).await.unwrap();
        let mut greeting = redis::cmd("CLIENT");
        greeting.arg("SETNAME").arg(name);
        let greeting = [
            (greeting.get_packed_command(), b"+OK\r\n".as_slice()),
            (redis::cmd("PING").get_packed_command(), b"+PONG\r\n"),
        ];
        for (command, answer) in greeting {
            let mut request = vec![0; command.len()];
            stream.read_exact(&mut request).await.unwrap();
            assert_eq!(request, command);
            stream.write_all(answer).await.unwrap();
            stream.flush().await.unwrap();
        }
        given_up.await.unwrap();
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest)).await
    });
    let tls_files = ClientTlsFiles {
        ca: Some(files.ca.clone()),
        identity: None,
    };
    let storage = RedisStorage::connect(target(&format!("rediss://{addr}")), Some(&tls_files))
        .await
        .unwrap();
    // More than the socket buffers hold while Redis does not read.
    let big = vec![(1, Bytes::from(vec![b'x'; 32 << 20]))];
    let abandoned = tokio::time::timeout(
        Duration::from_millis(300),
        storage.call(StorageOp::Write(big)),
    )
    .await;
    assert!(
        abandoned.is_err(),
        "the write cannot finish while Redis reads nothing"
    );
    give_up.send(()).unwrap();
    let closed = server.await.unwrap();
    assert!(
        closed.is_ok(),
        "the retired connection stayed open while the proxy kept its storage"
    );
    drop(storage);
}

#[tokio::test]
async fn a_scan_that_never_ends_is_refused_by_name() {
    let addr = endless_scan_server().await;
    let storage = RedisStorage::connect(target(&format!("redis://{addr}")), None)
        .await
        .unwrap();
    let scan = tokio::time::timeout(
        Duration::from_secs(30),
        storage.call(StorageOp::Scan {
            after: None,
            limit: 100,
        }),
    )
    .await
    .expect("the scan of a hostile server must end");
    let error = scan.expect_err("an endless SCAN is an error").to_string();
    assert!(error.contains("SCAN did not finish"), "{error}");
    assert!(error.contains("(DBSIZE)"), "{error}");
}

/// A measurement, not a check: the time and the CPU an MGET answer of 1 to 64 MiB takes when
/// Redis drips it in writes of 1 KiB, 64 KiB a millisecond. Reading it costs CPU linear in
/// its size when the reader resumes where it stopped, quadratic when it checks the answer from
/// its start at every read (the CPU shows it; the time less, as reads then bring more at once).
/// The CPU is the process's, the fake Redis's included. Run by hand:
/// `cargo test -p cloak-storage --test redis -- --ignored --nocapture drip_fed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement of 80 MiB of answers, run by hand"]
async fn a_drip_fed_answer_is_read_in_time_linear_in_its_size() {
    // Small elements: the old scan's cost per read grew with the values received so far.
    const ELEMENT: usize = 64;
    // "$64\r\n", the element, CRLF.
    const ON_THE_WIRE: u128 = 4 + ELEMENT as u128 + 2;
    let addr = fake_redis_dripping(64 << 10, |args, _| match args.first().map(String::as_str) {
        Some("MGET") => {
            let mut answer = format!("*{}\r\n", args.len() - 1).into_bytes();
            for _ in 1..args.len() {
                answer.extend_from_slice(format!("${ELEMENT}\r\n").as_bytes());
                answer.extend_from_slice(&[b'e'; ELEMENT]);
                answer.extend_from_slice(b"\r\n");
            }
            answer
        }
        _ => ping_or(args, b"+OK\r\n"),
    })
    .await;
    let storage = RedisStorage::connect(target(&format!("redis://{addr}")), None)
        .await
        .unwrap();
    for mib in [1u128, 4, 16, 64] {
        let count = (mib << 20) / ON_THE_WIRE;
        let addrs: Vec<u128> = (0..count).collect();
        let (started, cpu) = (std::time::Instant::now(), cpu_time());
        let reply = storage.call(StorageOp::Read(addrs)).await.unwrap();
        let (elapsed, cpu) = (started.elapsed(), cpu_time() - cpu);
        let StorageReply::Values(values) = reply else {
            panic!("a read answers values")
        };
        assert_eq!(values.len() as u128, count);
        println!("{mib} MiB answer dripped: {elapsed:.2?}, CPU {cpu:.2?}");
    }
}

/// The CPU time this process has used (Linux), at the clock tick's resolution.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // The fields after the command's name (in parentheses): utime and stime are the 12th and
    // 13th, in ticks of 1/100 s.
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<u64> = after_name
        .split(' ')
        .skip(11)
        .take(2)
        .map(|f| f.parse().unwrap())
        .collect();
    Duration::from_millis((fields[0] + fields[1]) * 10)
}
