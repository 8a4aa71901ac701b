//! A proxy and a storage server on loopback ports, as tests need them.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use cloak_core::{
    Command, Engine, KeyDirectory, Limits, Outcome, Record, RecordLayout, RecoveredRecords,
    SetCondition, Slot,
};
use cloak_crypto::{KeyHasher, MasterKey};
use cloak_proxy::{Journal, ProxyOptions, StatsHandle};
use cloak_schemes::{SchemeName, SchemeOptions, Start, StoreSpec};
use cloak_storage::{
    MemoryStorage, Observing, Storage, StorageError, StorageOp, StorageReply, TcpStorage,
    TraceHandle, server,
};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub const MAX_KEY: usize = 24;
pub const MAX_VALUE: usize = 64;

/// A storage server that, while `on`, flips a byte of every element it returns; and that can
/// be made slow to apply writes, counting those it began and those it finished.
pub struct Tampering {
    inner: MemoryStorage,
    pub on: AtomicBool,
    /// Milliseconds each write waits before it is applied and answered.
    pub write_delay_ms: AtomicU64,
    pub writes_begun: AtomicUsize,
    pub writes_done: AtomicUsize,
}

impl Tampering {
    /// An empty, honest store.
    pub fn new() -> Self {
        Self {
            inner: MemoryStorage::new(),
            on: AtomicBool::new(false),
            write_delay_ms: AtomicU64::new(0),
            writes_begun: AtomicUsize::new(0),
            writes_done: AtomicUsize::new(0),
        }
    }

    /// Elements it holds.
    pub fn elements(&self) -> usize {
        self.inner.usage().0
    }
}

#[async_trait::async_trait]
impl Storage for Tampering {
    async fn call(&self, op: StorageOp) -> Result<StorageReply, StorageError> {
        if matches!(op, StorageOp::Write(_)) {
            self.writes_begun.fetch_add(1, Ordering::SeqCst);
            // A zero sleep would still wait for the timer's next tick, about a millisecond.
            let delay = self.write_delay_ms.load(Ordering::SeqCst);
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            let reply = self.inner.call(op).await;
            self.writes_done.fetch_add(1, Ordering::SeqCst);
            return reply;
        }
        let reply = self.inner.call(op).await?;
        if !self.on.load(Ordering::Relaxed) {
            return Ok(reply);
        }
        Ok(match reply {
            StorageReply::Values(values) => StorageReply::Values(
                values
                    .into_iter()
                    .map(|v| {
                        v.map(|v| {
                            let mut bytes = v.to_vec();
                            let middle = bytes.len() / 2;
                            bytes[middle] ^= 0x40;
                            Bytes::from(bytes)
                        })
                    })
                    .collect(),
            ),
            other => other,
        })
    }

    async fn fence(&self) -> Result<(), StorageError> {
        self.inner.fence().await
    }

    fn describe(&self) -> String {
        "tampering memory".into()
    }
}

pub struct TestProxy {
    pub addr: SocketAddr,
    /// The storage server, which tests can turn malicious.
    pub server: Arc<Tampering>,
    pub trace: TraceHandle,
    pub stats: StatsHandle,
    stop_proxy: Option<oneshot::Sender<()>>,
    stop_storage: Option<oneshot::Sender<()>>,
    proxy: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

pub struct Setup {
    pub scheme: SchemeName,
    pub capacity: u64,
    pub options: SchemeOptions,
    pub password: Option<String>,
    pub max_clients: usize,
    pub auth_timeout: Duration,
    pub reply_limit: usize,
    pub total_reply_limit: usize,
    pub pending_limit: usize,
    pub script_time_limit: Duration,
    /// Records the store starts with, as a recovery after a restart would hand them over.
    pub recovered: Vec<(Slot, Record)>,
    /// See [`ProxyOptions::after_start`].
    pub after_start: Option<fn()>,
    /// The storage to use; a fresh one if `None`.
    pub storage: Option<Arc<Tampering>>,
    /// The journal (see [`ProxyOptions::journal`]); none by default.
    pub journal: Option<Arc<dyn Journal>>,
}

impl Setup {
    pub fn new(scheme: SchemeName, capacity: u64) -> Self {
        let mut options = SchemeOptions::default();
        options.cloak.first_budget = 12;
        options.cloak.cache_size = 4;
        options.cloak.batch_interval = Duration::from_millis(2);
        options.pancake.idle_batch_interval = Duration::from_millis(2);
        options.waffle.batch_interval = Duration::from_millis(2);
        Self {
            scheme,
            capacity,
            options,
            password: None,
            max_clients: cloak_proxy::DEFAULT_MAX_CLIENTS,
            auth_timeout: cloak_proxy::DEFAULT_AUTH_TIMEOUT,
            reply_limit: cloak_proxy::DEFAULT_REPLY_LIMIT,
            total_reply_limit: cloak_proxy::DEFAULT_TOTAL_REPLY_LIMIT,
            pending_limit: cloak_proxy::DEFAULT_PROXY_PENDING_BYTES,
            script_time_limit: cloak_proxy::DEFAULT_SCRIPT_TIME_LIMIT,
            recovered: Vec::new(),
            after_start: None,
            storage: None,
            journal: None,
        }
    }

    pub async fn start(self) -> TestProxy {
        let master = MasterKey::generate().unwrap();
        let elements = self.storage.unwrap_or_else(|| Arc::new(Tampering::new()));
        let storage_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let storage_addr = storage_listener.local_addr().unwrap().to_string();
        let (stop_storage, storage_stopped) = oneshot::channel::<()>();
        tokio::spawn(server::serve(
            storage_listener,
            elements.clone() as Arc<dyn Storage>,
            async {
                let _ = storage_stopped.await;
            },
        ));
        let client = TcpStorage::connect(&storage_addr, 2)
            .await
            .unwrap()
            .with_timeout(Duration::from_secs(2));
        let (observed, trace) = Observing::new(client);

        let spec = StoreSpec {
            capacity: self.capacity,
            layout: RecordLayout {
                max_key: MAX_KEY,
                max_value: MAX_VALUE,
            },
            seed: None,
        };
        let keys: Vec<(Slot, Bytes)> = self
            .recovered
            .iter()
            .map(|(slot, record)| (*slot, record.key.clone()))
            .collect();
        let start = Start {
            records: RecoveredRecords::from(self.recovered),
            generation_base: 0,
            fill_clock: None,
        };
        let scheme =
            cloak_schemes::build(self.scheme, &spec, &self.options, &master, start).unwrap();
        let directory = KeyDirectory::restore(
            KeyHasher::new(&master),
            self.capacity as usize,
            keys.iter().map(|(slot, key)| (*slot, &key[..])),
        );
        let limits = Limits {
            max_key: MAX_KEY,
            max_value: MAX_VALUE,
            max_keys_per_command: 64,
        };
        let engine = Engine::new(scheme, directory, limits);

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (stop_proxy, proxy_stopped) = oneshot::channel::<()>();
        let (ready_tx, ready) = oneshot::channel();
        let options = ProxyOptions {
            password: self.password,
            drain_timeout: Some(Duration::from_secs(5)),
            max_clients: self.max_clients,
            auth_timeout: self.auth_timeout,
            reply_limit: self.reply_limit,
            total_reply_limit: self.total_reply_limit,
            pending_limit: self.pending_limit,
            script_time_limit: self.script_time_limit,
            after_start: self.after_start,
            journal: self.journal,
            ..ProxyOptions::default()
        };
        let proxy = tokio::spawn(cloak_proxy::run(
            vec![listener.into()],
            engine,
            Arc::new(observed),
            options,
            move |p| {
                let _ = ready_tx.send(p);
            },
            async {
                let _ = proxy_stopped.await;
            },
        ));
        let ready = ready.await.unwrap();
        TestProxy {
            addr: ready.local_addr,
            server: elements,
            trace,
            stats: ready.stats,
            stop_proxy: Some(stop_proxy),
            stop_storage: Some(stop_storage),
            proxy: Some(proxy),
        }
    }
}

impl TestProxy {
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// A client connection that waits up to 10 s for an answer: the `redis` crate's default,
    /// half a second, was once too short for a command behind slow storage writes while the
    /// whole suite ran on two cores (`clean_stop::pancake`, a GET, timed out). Tests here check
    /// answers, not latency.
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        let patient = redis::AsyncConnectionConfig::new()
            .set_response_timeout(Some(std::time::Duration::from_secs(10)));
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection_with_config(&patient)
            .await
            .unwrap()
    }

    /// Stops the storage server (its elements are kept for a restart).
    pub fn stop_storage(&mut self) {
        if let Some(stop) = self.stop_storage.take() {
            let _ = stop.send(());
        }
    }

    /// Waits (at most `limit`) for a proxy stopped by a client's `SHUTDOWN` to finish draining.
    pub async fn stopped(mut self, limit: Duration) {
        if let Some(proxy) = self.proxy.take() {
            tokio::time::timeout(limit, proxy)
                .await
                .expect("the proxy stops")
                .unwrap()
                .unwrap();
        }
    }

    /// Stops the proxy and waits until it has drained.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop_proxy.take() {
            let _ = stop.send(());
        }
        if let Some(proxy) = self.proxy.take() {
            proxy.await.unwrap().unwrap();
        }
    }
}

/// Sends raw bytes on a fresh connection and reads what comes back until the proxy closes or
/// goes quiet.
pub async fn raw(proxy: &TestProxy, bytes: &[u8]) -> String {
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, bytes)
        .await
        .unwrap();
    read_all(&mut stream).await
}

/// What comes back on `stream` until the proxy closes it or goes quiet for a second (long
/// enough that a loaded machine's stall between two replies does not cut the answer short).
pub async fn read_all(stream: &mut tokio::net::TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let read = tokio::io::AsyncReadExt::read(stream, &mut buf);
        match tokio::time::timeout(Duration::from_secs(1), read).await {
            Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The RESP form of an engine command.
pub fn to_redis(command: &Command) -> redis::Cmd {
    let mut cmd;
    match command {
        Command::Get(k) => {
            cmd = redis::cmd("GET");
            cmd.arg(&k[..]);
        }
        Command::Set {
            key,
            value,
            condition,
        } => {
            cmd = redis::cmd("SET");
            cmd.arg(&key[..]).arg(&value[..]);
            match condition {
                SetCondition::Always => {}
                SetCondition::IfAbsent => {
                    cmd.arg("NX");
                }
                SetCondition::IfPresent => {
                    cmd.arg("XX");
                }
            }
        }
        Command::MGet(keys) => {
            cmd = redis::cmd("MGET");
            for k in keys {
                cmd.arg(&k[..]);
            }
        }
        Command::MSet(pairs) => {
            cmd = redis::cmd("MSET");
            for (k, v) in pairs {
                cmd.arg(&k[..]).arg(&v[..]);
            }
        }
        Command::Del(keys) => {
            cmd = redis::cmd("DEL");
            for k in keys {
                cmd.arg(&k[..]);
            }
        }
        Command::Exists(keys) => {
            cmd = redis::cmd("EXISTS");
            for k in keys {
                cmd.arg(&k[..]);
            }
        }
        Command::DbSize(_) => cmd = redis::cmd("DBSIZE"),
        other => panic!("no RESP form for {other:?} in these tests"),
    }
    cmd
}

/// The engine outcome a RESP reply stands for (errors as their text).
pub fn from_redis(value: redis::Value) -> Result<Outcome, String> {
    use redis::Value;
    Ok(match value {
        Value::Nil => Outcome::Value(None),
        Value::BulkString(b) => Outcome::Value(Some(Bytes::from(b))),
        Value::Okay => Outcome::Ok,
        Value::SimpleString(s) if s == "OK" => Outcome::Ok,
        Value::Int(n) => Outcome::Integer(n),
        Value::Array(items) => Outcome::Values(
            items
                .into_iter()
                .map(|v| match v {
                    Value::Nil => Ok(None),
                    Value::BulkString(b) => Ok(Some(Bytes::from(b))),
                    other => Err(format!("unexpected array item {other:?}")),
                })
                .collect::<Result<_, _>>()?,
        ),
        Value::ServerError(e) => return Err(format!("{e:?}")),
        other => return Err(format!("unexpected reply {other:?}")),
    })
}

/// Sends a command and returns the reply as an outcome.
pub async fn run(
    con: &mut redis::aio::MultiplexedConnection,
    command: &Command,
) -> Result<Outcome, String> {
    match to_redis(command).query_async::<redis::Value>(con).await {
        Ok(value) => from_redis(value),
        Err(error) => Err(error.to_string()),
    }
}

/// Clients that each increment `counter` `increments` times, `depth` increments in flight at
/// once on each connection, through `increment(i)` (the i-th of a batch, answering the new
/// value); the counter must end at exactly the total: no increment lost to another running at
/// the same time.
pub async fn count_concurrently(
    scheme: SchemeName,
    clients: i64,
    increments: i64,
    depth: usize,
    increment: fn(usize) -> redis::Cmd,
) {
    let proxy = Setup::new(scheme, 100).start().await;
    let mut tasks = Vec::new();
    for client in 0..clients {
        let con = proxy.connection().await;
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while done < increments {
                let batch = depth.min((increments - done) as usize);
                let replies = futures::future::join_all((0..batch).map(|i| {
                    let mut con = con.clone();
                    async move { increment(i).query_async::<i64>(&mut con).await }
                }))
                .await;
                for reply in replies {
                    let value = reply.unwrap_or_else(|e| panic!("client {client}: {e}"));
                    assert!((1..=clients * increments).contains(&value));
                }
                done += batch as i64;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut con = proxy.connection().await;
    let total: i64 = redis::cmd("GET")
        .arg("counter")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(total, clients * increments, "{scheme:?} lost increments");
    proxy.shutdown().await;
}
