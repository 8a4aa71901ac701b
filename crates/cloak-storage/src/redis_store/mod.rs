//! Elements in Redis or a Redis Cluster: `--storage redis://…` and `redis+cluster://…`, or
//! `rediss://…` over TLS. TLS hides the link, not the elements from Redis: Redis still holds
//! every element, and the TLS records' sizes and timing follow the commands', which the scheme's
//! fixed schedule and element size already make public.
//!
//! Each request is one command: a read one MGET, a write one MSET, a delete one DEL. On a single
//! Redis each is applied whole (and logged whole in the AOF, whose torn last command Redis drops
//! at load), so a batch is never half written. In a cluster the `redis` crate splits them by
//! hash slot and sends every node its share. Nodes cannot be updated atomically together, so a
//! write or delete of several keys first stores the whole request under one key (the intent),
//! then applies it, then deletes the intent; a proxy that dies mid-write leaves the intent, and
//! the next [`RedisStorage::connect`] applies it again, so the batch ends whole. That costs a
//! second copy of every cluster write. The intent is the last multi-key write attempted: Cloak
//! has one batch write in flight at a time and repeats a failed one before anything else, so it
//! is always the write that may be partial.
//!
//! Scans: Redis cannot iterate in key order. A scan from the start lists the store's keys with
//! SCAN (on every master of a cluster), sorts the addresses and keeps that list; each scan
//! request then MGETs the next addresses of the list. The cost is one pass over the keyspace and
//! 16 bytes per element at the proxy while recovery runs. Elements written after the listing
//! are not in it; only recovery scans, before anything writes.
//!
//! A Redis that is down or restarting fails requests with its error (schemes retry with
//! backoff); the connections reconnect by themselves.
//!
//! A single Redis is reached through a connection of our own ([`pipe`]) that sends commands
//! packed beforehand, so that a timed request leaves at its release with nothing left to do
//! but one write; a cluster through the `redis` crate, which routes each key to its node.
//!
//! A single Redis's answers are bounded by what each command calls for ([`answer_size`]): an
//! MGET's by its key count and the largest element the scheme writes
//! ([`RedisStorage::with_max_element`]), a write's by a status line. A longer answer fails its
//! connection before it is buffered. A cluster's answers are read by the `redis` crate, which
//! does not bound them: its parser takes whatever length an answer announces, and none of
//! `ClusterClientBuilder`'s settings limits it. Our pipe could serve as its node connection only
//! through `ClusterClient::get_async_generic_connection` (`#[doc(hidden)]`), whose
//! `Connect::connect_with_config` is handed a `ConnectionInfo` and an `AsyncConnectionConfig`
//! whose TLS parameters and timeouts it cannot read (their fields are private to the crate).

mod answer_scan;
mod answer_size;
mod pipe;
mod url;

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, FromRedisValue, RedisError, Value};

use crate::tls::ClientTls;
use crate::tls::client::ClientTlsFiles;
use crate::wire;
use crate::{Addr, Release, Storage, StorageError, StorageOp, StorageReply};
use answer_scan::BadAnswer;
use answer_size::SHORT_ANSWER;
use pipe::{Pipe, PipeError};
pub use url::{DEFAULT_PREFIX, RedisTarget, UrlError};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Generous: a batch of 4,000 elements of 32 KiB is a 128 MiB command.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);
const RECONNECT_RETRIES: usize = 3;
/// Keys asked for per SCAN call.
const SCAN_COUNT: usize = 10_000;

enum Connection {
    Single(Box<Pipe>),
    Cluster(ClusterConnection),
}

/// A command ready to go: packed already for a single Redis (a timed request then has nothing
/// left to do after its release but the write), with the longest answer it allows; as it is
/// for a cluster (the `redis` crate splits it by key and packs each node's share as it sends
/// them).
enum Ready {
    Packed { bytes: Vec<u8>, max_answer: usize },
    Routed(Cmd),
}

/// Elements in a Redis server or a Redis Cluster, one string key per address under a prefix.
pub struct RedisStorage {
    target: RedisTarget,
    connection: Connection,
    /// The sorted addresses of the scan in progress.
    listing: tokio::sync::Mutex<Option<Vec<Addr>>>,
    /// Cluster writes of several keys share the one intent key, so they go one at a time.
    cluster_writes: tokio::sync::Mutex<()>,
    /// The largest element an MGET answer may hold, in bytes.
    max_element: usize,
}

impl RedisStorage {
    /// Connects to the Redis or cluster `target` names (checking it answers now) and finishes a
    /// cluster write a previous proxy left half done.
    ///
    /// With a `rediss` target, `tls` gives the CA that signed the servers' certificates (the
    /// system's trusted CAs without it) and a client certificate for servers that want one.
    pub async fn connect(
        target: RedisTarget,
        tls: Option<&ClientTlsFiles>,
    ) -> Result<Self, StorageError> {
        let failed =
            |e: RedisError| StorageError(format!("cannot connect to {}: {e}", target.describe()));
        let connection = if target.cluster {
            let certificates = tls.map(certificates).transpose()?;
            let mut builder = redis::cluster::ClusterClient::builder(target.nodes.clone());
            if let Some(certificates) = certificates {
                builder = builder.certs(certificates);
            }
            let client = builder
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT)
                .retries(RECONNECT_RETRIES as u32)
                .min_retry_wait(10)
                .max_retry_wait(1000)
                .build()
                .map_err(failed)?;
            Connection::Cluster(client.get_async_connection().await.map_err(failed)?)
        } else {
            let tls = tls
                .map(ClientTls::load_or_system_roots)
                .transpose()
                .map_err(|e| StorageError(format!("{}: {e}", target.describe())))?;
            let pipe = Pipe::connect(&target.nodes[0], tls, CONNECT_TIMEOUT, RESPONSE_TIMEOUT)
                .await
                .map_err(|e| {
                    StorageError(format!("cannot connect to {}: {e}", target.describe()))
                })?;
            Connection::Single(Box::new(pipe))
        };
        let storage = Self {
            target,
            connection,
            listing: tokio::sync::Mutex::new(None),
            cluster_writes: tokio::sync::Mutex::new(()),
            max_element: usize::MAX,
        };
        if storage.target.cluster {
            storage.finish_interrupted_write().await?;
        }
        Ok(storage)
    }

    /// Bounds every MGET answer by `max_element`, the largest element the store's scheme
    /// writes: a single Redis that answers an MGET of `n` keys with more than `n` such elements
    /// (as RESP) fails its connection, so memory stays bounded by what the reads call for.
    /// Without it, only the pipe's overall cap (512 MiB) bounds a read's answer.
    pub fn with_max_element(mut self, max_element: usize) -> Self {
        self.max_element = max_element;
        self
    }

    /// What went wrong on the single Redis's connection, with a hint when an answer was too
    /// long (see [`crate::LONGER_ELEMENTS_HINT`]).
    fn pipe_error(&self, error: PipeError) -> StorageError {
        let hint = match &error {
            PipeError::BadAnswer(BadAnswer::TooLong { .. }) => crate::LONGER_ELEMENTS_HINT,
            _ => "",
        };
        StorageError(format!("{}: {error}{hint}", self.target.describe()))
    }

    fn error(&self, error: RedisError) -> StorageError {
        StorageError(format!("{}: {error}", self.target.describe()))
    }

    /// Sends `cmd`, whose answer may be `max_answer` bytes of RESP at most, and waits for it.
    async fn query<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        max_answer: usize,
    ) -> Result<T, StorageError> {
        self.send(self.ready(cmd, max_answer)).await
    }

    /// `cmd`, whose answer may be `max_answer` bytes of RESP at most, ready to send.
    fn ready(&self, cmd: &Cmd, max_answer: usize) -> Ready {
        match &self.connection {
            Connection::Single(_) => Ready::Packed {
                bytes: cmd.get_packed_command(),
                max_answer,
            },
            Connection::Cluster(_) => Ready::Routed(cmd.clone()),
        }
    }

    /// Sends a command made ready by [`RedisStorage::ready`] and waits for its answer.
    async fn send<T: FromRedisValue>(&self, command: Ready) -> Result<T, StorageError> {
        let value = match (&self.connection, command) {
            (Connection::Single(pipe), Ready::Packed { bytes, max_answer }) => pipe
                .request(&bytes, max_answer)
                .await
                .map_err(|e| self.pipe_error(e))?,
            (Connection::Cluster(c), Ready::Routed(cmd)) => cmd
                .query_async(&mut c.clone())
                .await
                .map_err(|e| self.error(e))?,
            _ => unreachable!("commands are made ready for the connection they are sent on"),
        };
        redis::from_redis_value(value).map_err(|e| self.error(e.into()))
    }

    /// The MGET of `addrs`, ready to send (`None` for no address: nothing to ask).
    fn read_command(&self, addrs: &[Addr]) -> Option<Ready> {
        if addrs.is_empty() {
            return None;
        }
        let mut mget = redis::cmd("MGET");
        for &addr in addrs {
            mget.arg(self.target.key(addr));
        }
        Some(self.ready(&mget, answer_size::mget(addrs.len(), self.max_element)))
    }

    async fn read(&self, addrs: &[Addr]) -> Result<Vec<Option<Bytes>>, StorageError> {
        self.send_read(self.read_command(addrs), addrs.len()).await
    }

    /// Sends `mget`, the read of `count` addresses, and checks that each has its value.
    async fn send_read(
        &self,
        mget: Option<Ready>,
        count: usize,
    ) -> Result<Vec<Option<Bytes>>, StorageError> {
        let Some(mget) = mget else {
            return Ok(Vec::new());
        };
        let values: Vec<Option<Vec<u8>>> = self.send(mget).await?;
        if values.len() != count {
            return Err(StorageError(format!(
                "{} answered {} values to an MGET of {} keys",
                self.target.describe(),
                values.len(),
                count
            )));
        }
        Ok(values.into_iter().map(|v| v.map(Bytes::from)).collect())
    }

    /// The command that applies a write or delete, ready to send.
    fn command(&self, op: &StorageOp) -> Option<Ready> {
        match op {
            StorageOp::Write(writes) if !writes.is_empty() => {
                let mut mset = redis::cmd("MSET");
                for (addr, value) in writes {
                    mset.arg(self.target.key(*addr)).arg(value.as_ref());
                }
                Some(self.ready(&mset, SHORT_ANSWER))
            }
            StorageOp::Delete(addrs) if !addrs.is_empty() => {
                let mut del = redis::cmd("DEL");
                for &addr in addrs {
                    del.arg(self.target.key(addr));
                }
                Some(self.ready(&del, SHORT_ANSWER))
            }
            _ => None,
        }
    }

    async fn change(&self, op: StorageOp) -> Result<StorageReply, StorageError> {
        self.apply(self.command(&op), &op).await
    }

    /// Sends `command`, the write or delete `op` (`None`: nothing to change). In a cluster,
    /// several keys are not changed by one atomic command, so the change goes through the
    /// intent key.
    async fn apply(
        &self,
        command: Option<Ready>,
        op: &StorageOp,
    ) -> Result<StorageReply, StorageError> {
        let Some(command) = command else {
            return Ok(StorageReply::Done);
        };
        if self.target.cluster && op.len() > 1 {
            let _one_at_a_time = self.cluster_writes.lock().await;
            let intent = wire::encode_request(0, op).to_bytes();
            let mut set = redis::cmd("SET");
            set.arg(self.target.intent_key()).arg(intent.as_ref());
            self.query::<()>(&set, SHORT_ANSWER).await?;
            self.send::<Value>(command).await?;
            let mut del = redis::cmd("DEL");
            del.arg(self.target.intent_key());
            self.query::<()>(&del, SHORT_ANSWER).await?;
        } else {
            self.send::<Value>(command).await?;
        }
        Ok(StorageReply::Done)
    }

    /// Applies the intent a proxy that died mid-write left in a cluster, then removes it.
    async fn finish_interrupted_write(&self) -> Result<(), StorageError> {
        let mut get = redis::cmd("GET");
        get.arg(self.target.intent_key());
        // Only a cluster has an intent, and its answers are not bounded here.
        let Some(intent) = self.query::<Option<Vec<u8>>>(&get, usize::MAX).await? else {
            return Ok(());
        };
        let intent = Bytes::from(intent);
        // The intent is a whole wire frame: length, then the request.
        let decoded = (intent.len() >= 4).then(|| wire::decode_request(intent.slice(4..)));
        let op = match decoded {
            Some(Ok((_, op @ (StorageOp::Write(_) | StorageOp::Delete(_))))) => op,
            _ => {
                return Err(StorageError(format!(
                    "{}: the key {} holding an interrupted write is malformed",
                    self.target.describe(),
                    String::from_utf8_lossy(&self.target.intent_key())
                )));
            }
        };
        tracing::warn!(
            addresses = op.len(),
            "finishing a write a previous proxy left half done in the cluster"
        );
        if let Some(command) = self.command(&op) {
            self.send::<Value>(command).await?;
        }
        let mut del = redis::cmd("DEL");
        del.arg(self.target.intent_key());
        self.query::<()>(&del, SHORT_ANSWER).await
    }

    async fn scan(&self, after: Option<Addr>, limit: u32) -> Result<StorageReply, StorageError> {
        let mut listing = self.listing.lock().await;
        if after.is_none() || listing.is_none() {
            *listing = Some(self.list().await?);
        }
        let addrs = listing.as_ref().expect("listed above");
        let limit = limit as usize;
        let mut next = after.map_or(0, |after| addrs.partition_point(|&a| a <= after));
        let mut entries = Vec::with_capacity(limit.min(addrs.len() - next));
        // Keys deleted since the listing read as absent: read on so a short answer still means
        // the end.
        while entries.len() < limit && next < addrs.len() {
            let chunk = &addrs[next..(next + limit - entries.len()).min(addrs.len())];
            next += chunk.len();
            let values = self.read(chunk).await?;
            entries.extend(chunk.iter().zip(values).filter_map(|(&a, v)| Some((a, v?))));
        }
        if next >= addrs.len() && entries.len() < limit {
            *listing = None;
        }
        Ok(StorageReply::Entries(entries))
    }

    /// Every address of this store, sorted.
    async fn list(&self) -> Result<Vec<Addr>, StorageError> {
        let mut addrs = Vec::new();
        match &self.connection {
            Connection::Single(_) => self.scan_node(None, &mut addrs).await?,
            Connection::Cluster(_) => {
                for (host, port) in self.masters().await? {
                    self.scan_node(Some((host, port)), &mut addrs).await?;
                }
            }
        }
        addrs.sort_unstable();
        addrs.dedup();
        Ok(addrs)
    }

    /// SCANs one server (a cluster master when `node` is given) for this store's keys.
    ///
    /// A hostile server could answer SCAN forever (a cursor that never comes back to 0) or
    /// with endless keys, which would hold recovery and its memory without bound. A real Redis
    /// finishes a full iteration in about (keys in the database ÷ COUNT) calls, a few times more
    /// while its table is resizing, and returns each key a few times at most; past generous
    /// bounds on both, counted from its own DBSIZE, the scan is refused by name. What this does
    /// not bound: a server that lies about DBSIZE gets as many calls as it claims keys for, and a
    /// single reply is parsed whole before it is counted.
    async fn scan_node(
        &self,
        node: Option<(String, u16)>,
        addrs: &mut Vec<Addr>,
    ) -> Result<(), StorageError> {
        let size: u64 = self
            .query_on(&node, redis::cmd("DBSIZE"), SHORT_ANSWER)
            .await?;
        // Saturating: a lying DBSIZE near u64::MAX must not wrap the bounds to small numbers.
        let max_calls = (size / SCAN_COUNT as u64)
            .saturating_mul(8)
            .saturating_add(64);
        let max_keys = size.saturating_mul(4).saturating_add(SCAN_COUNT as u64);
        let (mut calls, mut keys_seen) = (0u64, 0u64);
        let mut cursor = 0u64;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(self.target.pattern())
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let max_answer = answer_size::scan(SCAN_COUNT, self.target.key_len());
            let (next, keys): (u64, Vec<Vec<u8>>) = self.query_on(&node, scan, max_answer).await?;
            calls += 1;
            keys_seen += keys.len() as u64;
            if calls > max_calls || keys_seen > max_keys {
                return Err(StorageError(format!(
                    "{}{}: SCAN did not finish as Redis does: {calls} calls returned {keys_seen} \
                    keys from a database of {size} (DBSIZE); refusing to go on (a server that \
                    is not Redis, or one that is lying)",
                    self.target.describe(),
                    node.as_ref()
                        .map_or(String::new(), |(host, port)| format!(" ({host}:{port})")),
                )));
            }
            addrs.extend(keys.iter().filter_map(|k| self.target.addr(k)));
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// Runs `cmd` on one server of a cluster (`node`), or on the server when `None` (its answer
    /// then `max_answer` bytes at most).
    async fn query_on<T: FromRedisValue>(
        &self,
        node: &Option<(String, u16)>,
        cmd: Cmd,
        max_answer: usize,
    ) -> Result<T, StorageError> {
        match (&self.connection, node) {
            (Connection::Cluster(c), Some((host, port))) => {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                });
                let value = c
                    .clone()
                    .route_command(cmd, routing)
                    .await
                    .map_err(|e| self.error(e))?;
                redis::from_redis_value(value).map_err(|e| self.error(e.into()))
            }
            _ => self.query(&cmd, max_answer).await,
        }
    }

    /// The cluster's masters, from CLUSTER NODES. A master that is failing would hide its keys
    /// from the scan, so that is an error rather than a partial answer.
    async fn masters(&self) -> Result<Vec<(String, u16)>, StorageError> {
        let mut nodes = redis::cmd("CLUSTER");
        nodes.arg("NODES");
        // Only a cluster has nodes, and its answers are not bounded here.
        let text: String = self.query(&nodes, usize::MAX).await?;
        let unhealthy = |line: &str| {
            StorageError(format!(
                "{}: cannot scan a cluster with a failing master ({line})",
                self.target.describe()
            ))
        };
        let mut masters = Vec::new();
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let Some(flags) = fields.get(2) else { continue };
            if !flags.split(',').any(|f| f == "master") {
                continue;
            }
            if flags.contains("fail") || flags.contains("noaddr") {
                return Err(unhealthy(line));
            }
            let node = fields
                .get(1)
                .and_then(|a| a.split('@').next())
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(host, port)| Some((host.to_string(), port.parse().ok()?)));
            masters.push(node.ok_or_else(|| unhealthy(line))?);
        }
        if masters.is_empty() {
            return Err(StorageError(format!(
                "{}: CLUSTER NODES lists no master",
                self.target.describe()
            )));
        }
        Ok(masters)
    }
}

#[async_trait]
impl Storage for RedisStorage {
    async fn call(&self, op: StorageOp) -> Result<StorageReply, StorageError> {
        match op {
            StorageOp::Read(addrs) => Ok(StorageReply::Values(self.read(&addrs).await?)),
            StorageOp::Write(_) | StorageOp::Delete(_) => self.change(op).await,
            StorageOp::Scan { after, limit } => self.scan(after, limit).await,
        }
    }

    /// Makes the command ready before the release: for a single Redis, packed, so the release
    /// is followed by one write of ready bytes, the same work whatever the load (see [`pipe`]).
    /// In a cluster the `redis` crate still packs each node's share after the release.
    async fn call_at(&self, op: StorageOp, release: Release) -> Result<StorageReply, StorageError> {
        match op {
            StorageOp::Read(addrs) => {
                let mget = self.read_command(&addrs);
                release.await;
                Ok(StorageReply::Values(
                    self.send_read(mget, addrs.len()).await?,
                ))
            }
            StorageOp::Write(_) | StorageOp::Delete(_) => {
                let command = self.command(&op);
                release.await;
                self.apply(command, &op).await
            }
            op => {
                release.await;
                self.call(op).await
            }
        }
    }

    fn describe(&self) -> String {
        self.target.describe()
    }
}

/// The PEM files of `tls`, as the `redis` crate takes them.
fn certificates(tls: &ClientTlsFiles) -> Result<redis::TlsCertificates, StorageError> {
    let read = |path: &std::path::Path| {
        std::fs::read(path)
            .map_err(|e| StorageError(format!("cannot read {}: {e}", path.display())))
    };
    let client_tls = match &tls.identity {
        Some((cert, key)) => Some(redis::ClientTlsConfig {
            client_cert: read(cert)?,
            client_key: {
                // The `redis` crate parses the key itself; its permissions are checked here,
                // as for every other private key.
                crate::tls::pem::refuse_exposed_key(key)
                    .map_err(|e| StorageError(e.to_string()))?;
                read(key)?
            },
        }),
        None => None,
    };
    Ok(redis::TlsCertificates {
        client_tls,
        root_cert: tls.ca.as_deref().map(read).transpose()?,
    })
}
