//! Elements in Redis or a Redis Cluster: `--storage redis://…` and `redis+cluster://…`, or
//! `rediss://…` over TLS. TLS hides the link, not the elements from Redis: Redis still holds
//! every element, and the TLS records' sizes and timing follow the commands', which the scheme's
//! fixed schedule and element size already make public.
//!
//! Each request is one command: a read one MGET, a write one MSET, a delete one DEL. On a single
//! Redis each is applied whole (and logged whole in the AOF, whose torn last command Redis drops
//! at load), so a batch is never half written. In a cluster they are split by hash slot and
//! every master gets its share ([`cluster`]). Nodes cannot be updated atomically together, so a
//! write or delete of several keys first stores the whole request under one key (the intent),
//! then applies it, then deletes the intent; a proxy that dies mid-write leaves the intent, and
//! the next proxy's fence ([`Storage::fence`]) applies it again, so the batch ends whole. That costs a
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
//! Fencing: every connection a proxy opens to a Redis names itself after the store
//! ([`RedisTarget::client_name`]). A proxy that starts first ends, on every master, the
//! connections of that name other than its own (`CLIENT KILL ID`): Redis runs one command at a
//! time and drops a killed client's commands not yet run, so once the kills are answered,
//! nothing the proxy before it left on its way (a write-back still in the network or in Redis's
//! input buffer) can land in the middle of the recovery's scan. On a single Redis the fence
//! also writes a random token under the store's fence key ([`RedisTarget::fence_key`]) before
//! the kills, and every connection the proxy opens after checks that the key still holds it:
//! a proxy that is still running when another fences it off (a paused machine that comes back)
//! connects again, finds another token, and is refused by name instead of writing on. A Redis
//! Cluster has no such check (the key would live on one master only). Redis sees the name, a hash of
//! the prefix and the database it already sees in every command. An ACL user needs `CLIENT
//! SETNAME`, `CLIENT ID`, `CLIENT LIST` and `CLIENT KILL`; without them the proxy says so and
//! does not start.
//!
//! A Redis that is down or restarting fails requests with its error (schemes retry with
//! backoff); the connections reconnect by themselves.
//!
//! A Redis is reached through connections of our own ([`pipe`]), one to a single Redis or one to
//! each master of a cluster, that send commands packed beforehand, so that a timed request
//! leaves at its release with nothing left to do but its writes.
//!
//! Every answer is bounded by what its command calls for ([`answer_size`]): an MGET's by its key
//! count and the largest element the scheme writes ([`RedisStorage::with_max_element`]), a
//! write's by a status line, a cluster's slot map by [`cluster::TOPOLOGY_ANSWER`]. A longer
//! answer fails its connection before it is buffered, in a cluster as on a single Redis.

mod answer_scan;
mod answer_size;
mod cluster;
mod pipe;
mod url;

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use redis::{Cmd, FromRedisValue, RedisError, Value};

use crate::tls::ClientTls;
use crate::tls::client::ClientTlsFiles;
use crate::wire;
use crate::{Addr, Release, Storage, StorageError, StorageOp, StorageReply};
use answer_scan::BadAnswer;
use answer_size::SHORT_ANSWER;
use cluster::{Cluster, Gather, Node, Routed};
use pipe::{Pipe, PipeError};
pub use url::{DEFAULT_PREFIX, RedisTarget, UrlError};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Generous: a batch of 4,000 elements of 32 KiB is a 128 MiB command.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest `CLIENT LIST` answer a fence reads: some 40,000 clients' lines.
const CLIENT_LIST_ANSWER: usize = 16 << 20;
/// `CLIENT KILL`s a fence pipelines at once.
const KILLS_AT_ONCE: usize = 1000;
/// Keys asked for per SCAN call.
const SCAN_COUNT: usize = 10_000;

enum Connection {
    Single(Box<Pipe>),
    Cluster(Box<Cluster>),
}

/// A write or delete ready to go: the command, and in a cluster, for a change of several keys,
/// the intent's SET before it and DEL after it (see the module's docs), all packed beforehand.
struct Change {
    command: Ready,
    intent: Option<(Ready, Ready)>,
}

/// A command ready to go, packed already (a timed request then has nothing left to do after its
/// release but its writes): for a single Redis, with the longest answer it allows; for a
/// cluster, split by slot and packed for each master (see [`cluster`]).
enum Ready {
    Packed { bytes: Vec<u8>, max_answer: usize },
    Routed(Routed),
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
    /// Connects to the Redis or cluster `target` names, checking it answers now. A proxy then
    /// fences ([`Storage::fence`]) before anything else.
    ///
    /// With a `rediss` target, `tls` gives the CA that signed the servers' certificates (the
    /// system's trusted CAs without it) and a client certificate for servers that want one.
    pub async fn connect(
        target: RedisTarget,
        tls: Option<&ClientTlsFiles>,
    ) -> Result<Self, StorageError> {
        let tls = tls
            .map(ClientTls::load_or_system_roots)
            .transpose()
            .map_err(|e| StorageError(format!("{}: {e}", target.describe())))?;
        let connection = if target.cluster {
            Connection::Cluster(Box::new(Cluster::connect(target.clone(), tls).await?))
        } else {
            let name = Some(target.client_name());
            let pipe = Pipe::connect(
                &target.nodes[0],
                tls,
                name,
                CONNECT_TIMEOUT,
                RESPONSE_TIMEOUT,
            )
            .await
            .map_err(|e| StorageError(format!("cannot connect to {}: {e}", target.describe())))?;
            Connection::Single(Box::new(pipe))
        };
        Ok(Self {
            target,
            connection,
            listing: tokio::sync::Mutex::new(None),
            cluster_writes: tokio::sync::Mutex::new(()),
            max_element: usize::MAX,
        })
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

    /// `what` went wrong on `node` (a cluster's master), or on the single Redis (`None`).
    fn error_at(&self, node: &Option<Node>, what: &str) -> StorageError {
        let node = node
            .as_ref()
            .map_or(String::new(), |node| format!(" ({node})"));
        StorageError(format!("{}{node}: {what}", self.target.describe()))
    }

    /// `COMMAND` of the intent key (a cluster's, see the module's docs), with `value` if given,
    /// ready to send; its answer may be `max_answer` bytes of RESP at most.
    async fn intent_command(
        &self,
        command: &str,
        value: Option<&[u8]>,
        max_answer: usize,
    ) -> Result<Ready, StorageError> {
        let key = [self.target.intent_key()];
        let cmd = |_: &[usize]| {
            let mut cmd = redis::cmd(command);
            cmd.arg(&key[0]);
            if let Some(value) = value {
                cmd.arg(value);
            }
            (cmd, max_answer)
        };
        self.ready(&key, Gather::One, cmd).await
    }

    /// The command of `keys` that `command` makes from the positions of the keys it names (all
    /// of them for a single Redis; those of one hash slot in a cluster, see
    /// [`Cluster::route`]), with the longest answer it allows, ready to send.
    async fn ready(
        &self,
        keys: &[Vec<u8>],
        gather: Gather,
        command: impl Fn(&[usize]) -> (Cmd, usize),
    ) -> Result<Ready, StorageError> {
        Ok(match &self.connection {
            Connection::Single(_) => {
                let all: Vec<usize> = (0..keys.len()).collect();
                let (cmd, max_answer) = command(&all);
                Ready::Packed {
                    bytes: cmd.get_packed_command(),
                    max_answer,
                }
            }
            Connection::Cluster(cluster) => {
                Ready::Routed(cluster.route(keys, gather, command).await?)
            }
        })
    }

    /// Sends a command made ready by [`RedisStorage::ready`] and waits for its answer.
    async fn send<T: FromRedisValue>(&self, command: Ready) -> Result<T, StorageError> {
        let value = match (&self.connection, command) {
            (Connection::Single(pipe), Ready::Packed { bytes, max_answer }) => pipe
                .request(&bytes, max_answer)
                .await
                .map_err(|e| self.pipe_error(e))?,
            (Connection::Cluster(cluster), Ready::Routed(routed)) => cluster.send(routed).await?,
            _ => unreachable!("commands are made ready for the connection they are sent on"),
        };
        redis::from_redis_value(value).map_err(|e| self.error(e.into()))
    }

    /// The keys of `addrs`.
    fn keys(&self, addrs: impl IntoIterator<Item = Addr>) -> Vec<Vec<u8>> {
        addrs.into_iter().map(|a| self.target.key(a)).collect()
    }

    /// The MGET of `addrs`, ready to send (`None` for no address: nothing to ask).
    async fn read_command(&self, addrs: &[Addr]) -> Result<Option<Ready>, StorageError> {
        if addrs.is_empty() {
            return Ok(None);
        }
        let keys = self.keys(addrs.iter().copied());
        let mget = |positions: &[usize]| {
            let mget = of_keys("MGET", &keys, positions);
            (mget, answer_size::mget(positions.len(), self.max_element))
        };
        Ok(Some(self.ready(&keys, Gather::Values, mget).await?))
    }

    async fn read(&self, addrs: &[Addr]) -> Result<Vec<Option<Bytes>>, StorageError> {
        let mget = self.read_command(addrs).await?;
        self.send_read(mget, addrs.len()).await
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

    /// The command that applies a write or delete, ready to send; in a cluster, with the
    /// intent's commands around it when it changes several keys.
    async fn change_command(&self, op: &StorageOp) -> Result<Option<Change>, StorageError> {
        let Some(command) = self.command(op).await? else {
            return Ok(None);
        };
        let intent = if self.target.cluster && op.len() > 1 {
            let intent = wire::encode_request(0, op).to_bytes();
            let set = self
                .intent_command("SET", Some(&intent), SHORT_ANSWER)
                .await?;
            let delete = self.intent_command("DEL", None, SHORT_ANSWER).await?;
            Some((set, delete))
        } else {
            None
        };
        Ok(Some(Change { command, intent }))
    }

    /// The command that applies a write or delete, ready to send.
    async fn command(&self, op: &StorageOp) -> Result<Option<Ready>, StorageError> {
        Ok(match op {
            StorageOp::Write(writes) if !writes.is_empty() => {
                let keys = self.keys(writes.iter().map(|(addr, _)| *addr));
                let mset = |positions: &[usize]| {
                    let mut mset = redis::cmd("MSET");
                    for &i in positions {
                        mset.arg(&keys[i]).arg(writes[i].1.as_ref());
                    }
                    (mset, SHORT_ANSWER)
                };
                Some(self.ready(&keys, Gather::Done, mset).await?)
            }
            StorageOp::Delete(addrs) if !addrs.is_empty() => {
                let keys = self.keys(addrs.iter().copied());
                let del = |positions: &[usize]| (of_keys("DEL", &keys, positions), SHORT_ANSWER);
                Some(self.ready(&keys, Gather::Done, del).await?)
            }
            _ => None,
        })
    }

    async fn change(&self, op: StorageOp) -> Result<StorageReply, StorageError> {
        let change = self.change_command(&op).await?;
        self.apply(change).await
    }

    /// Sends a write or delete made ready by [`RedisStorage::change_command`] (`None`: nothing
    /// to change). In a cluster, several keys are not changed by one atomic command, so the
    /// change goes through the intent key.
    async fn apply(&self, change: Option<Change>) -> Result<StorageReply, StorageError> {
        let Some(change) = change else {
            return Ok(StorageReply::Done);
        };
        match change.intent {
            Some((set, delete)) => {
                let _one_at_a_time = self.cluster_writes.lock().await;
                self.send::<()>(set).await?;
                self.send::<()>(change.command).await?;
                self.send::<()>(delete).await?;
            }
            None => self.send::<()>(change.command).await?,
        }
        Ok(StorageReply::Done)
    }

    /// Applies the intent a proxy that died mid-write left in a cluster, then removes it.
    async fn finish_interrupted_write(&self) -> Result<(), StorageError> {
        // The intent holds a whole write of the scheme's, whose size storage does not know: it
        // is bounded by the pipe's cap on any answer (512 MiB, Redis's own limit on a value).
        let get = self.intent_command("GET", None, usize::MAX).await?;
        let intent: Option<Vec<u8>> = self.send(get).await?;
        let Some(intent) = intent else {
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
        if let Some(command) = self.command(&op).await? {
            self.send::<()>(command).await?;
        }
        let delete = self.intent_command("DEL", None, SHORT_ANSWER).await?;
        self.send(delete).await
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
            Connection::Cluster(cluster) => {
                // A master that cannot be reached fails the scan (its keys would be missing).
                for node in cluster.masters().await? {
                    self.scan_node(Some(node), &mut addrs).await?;
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
        node: Option<Node>,
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
                return Err(self.error_at(
                    &node,
                    &format!(
                        "SCAN did not finish as Redis does: {calls} calls returned {keys_seen} \
                         keys from a database of {size} (DBSIZE); refusing to go on (a server \
                         that is not Redis, or one that is lying)"
                    ),
                ));
            }
            addrs.extend(keys.iter().filter_map(|k| self.target.addr(k)));
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// Runs `cmd`, whose answer may be `max_answer` bytes at most, on one master of a cluster
    /// (`node`), or on the single Redis (`None`).
    async fn query_on<T: FromRedisValue>(
        &self,
        node: &Option<Node>,
        cmd: Cmd,
        max_answer: usize,
    ) -> Result<T, StorageError> {
        let value = self
            .query_all_on(node, &[(cmd, max_answer)])
            .await?
            .pop()
            .expect("one answer a command");
        redis::from_redis_value(value).map_err(|e| self.error(e.into()))
    }

    /// Runs `commands` pipelined on one connection, to one master of a cluster (`node`) or to
    /// the single Redis (`None`), each answer as long as its command's bound at most: their
    /// answers, or the first error.
    async fn query_all_on(
        &self,
        node: &Option<Node>,
        commands: &[(Cmd, usize)],
    ) -> Result<Vec<Value>, StorageError> {
        match (&self.connection, node) {
            (Connection::Cluster(cluster), Some(node)) => cluster.query_node(node, commands).await,
            (Connection::Single(pipe), None) => {
                let (packed, bounds) = pipe::pack_all(commands);
                pipe.request_all(&packed, &bounds)
                    .await
                    .map_err(|e| self.pipe_error(e))?
                    .into_iter()
                    .map(|answer| answer.map_err(|e| self.pipe_error(e)))
                    .collect()
            }
            _ => unreachable!("a node is named exactly for a cluster"),
        }
    }

    /// The ids of the connections, on one Redis (a master of a cluster when `node` is given),
    /// named as this store's proxies name theirs, other than this proxy's own: the proxy before
    /// it (see the module notes).
    async fn other_proxies(&self, node: &Option<Node>) -> Result<Vec<u64>, StorageError> {
        let mut own = redis::cmd("CLIENT");
        own.arg("ID");
        let mut list = redis::cmd("CLIENT");
        list.arg("LIST").arg("TYPE").arg("normal");
        // Pipelined, so both are answered on one connection: the one CLIENT ID names.
        let answers = self
            .query_all_on(node, &[(own, SHORT_ANSWER), (list, CLIENT_LIST_ANSWER)])
            .await
            .map_err(|e| self.fence_refused(e))?;
        let [own, list] = <[Value; 2]>::try_from(answers).expect("two answers to two commands");
        let own: u64 = redis::from_redis_value(own).map_err(|e| self.error(e.into()))?;
        let list: String = redis::from_redis_value(list).map_err(|e| self.error(e.into()))?;
        let name = self.target.client_name();
        Ok(clients_named(&list, &name)
            .filter(|id| *id != own)
            .collect())
    }

    /// Ends the connections `ids` on one Redis (a master of a cluster when `node` is given).
    async fn end_connections(&self, node: &Option<Node>, ids: &[u64]) -> Result<(), StorageError> {
        // In pipelines of a bounded size: a hostile Redis may list as many as its answer's
        // bound allows (some 500,000), and a tenant of a shared one may open that many
        // connections under the store's name, which must not keep a proxy from starting.
        for ids in ids.chunks(KILLS_AT_ONCE) {
            let kills: Vec<(Cmd, usize)> = ids
                .iter()
                .map(|id| {
                    let mut kill = redis::cmd("CLIENT");
                    kill.arg("KILL").arg("ID").arg(id);
                    (kill, SHORT_ANSWER)
                })
                .collect();
            // Each answers how many it killed: 0 for a client that left meanwhile.
            self.query_all_on(node, &kills)
                .await
                .map_err(|e| self.fence_refused(e))?;
        }
        Ok(())
    }

    /// A fence's command failed: said so, and when Redis refused the command (an ACL user
    /// without it, or a Redis that renamed or disabled it), what the fence needs.
    fn fence_refused(&self, error: StorageError) -> StorageError {
        let refused = ["NOPERM", "unknown command", "unknown subcommand"]
            .iter()
            .any(|refusal| error.0.contains(refusal));
        let needs = if refused {
            " (a Redis ACL user needs CLIENT SETNAME, CLIENT ID, CLIENT LIST and CLIENT KILL)"
        } else {
            ""
        };
        StorageError(format!(
            "{error}: cannot end the connections of the proxy that used this store before, so \
             a write it left on its way could land in the middle of recovery{needs}"
        ))
    }
}

/// The ids of the clients a `CLIENT LIST` answer names `name` (one line per client, fields
/// `key=value` separated by spaces; a name holds no space).
fn clients_named<'a>(list: &'a str, name: &'a str) -> impl Iterator<Item = u64> + 'a {
    list.lines().filter_map(move |line| {
        let field = |key: &str| {
            line.split(' ')
                .find_map(|field| field.strip_prefix(key)?.strip_prefix('='))
        };
        (field("name")? == name).then(|| field("id")?.parse().ok())?
    })
}

/// `NAME` of the keys at `positions` in `keys`.
fn of_keys(name: &str, keys: &[Vec<u8>], positions: &[usize]) -> Cmd {
    let mut cmd = redis::cmd(name);
    for &i in positions {
        cmd.arg(&keys[i]);
    }
    cmd
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

    /// Makes the command ready before the release: packed (for a cluster, split by slot and
    /// packed for each master), so the release is followed by its writes of ready bytes, the
    /// same work whatever the load (see `pipe`).
    async fn call_at(&self, op: StorageOp, release: Release) -> Result<StorageReply, StorageError> {
        match op {
            StorageOp::Read(addrs) => {
                let mget = self.read_command(&addrs).await?;
                release.await;
                Ok(StorageReply::Values(
                    self.send_read(mget, addrs.len()).await?,
                ))
            }
            StorageOp::Write(_) | StorageOp::Delete(_) => {
                let change = self.change_command(&op).await?;
                release.await;
                self.apply(change).await
            }
            op => {
                release.await;
                self.call(op).await
            }
        }
    }

    /// Ends the connections of the proxy before on every master, then finishes a cluster write
    /// it left half done (see the module notes).
    async fn fence(&self) -> Result<(), StorageError> {
        let nodes = match &self.connection {
            Connection::Single(pipe) => {
                // Whether Redis lets this proxy fence at all, before the token is written: a
                // token written by a start that then fails would lock the running proxy out
                // with none to take its place.
                self.other_proxies(&None).await?;
                // The token first: a connection the proxy before opens from now on finds it,
                // and one it opened before is in the CLIENT LIST below, and ended. A second
                // fence of this proxy's writes the same token again.
                let token = match pipe.fence_token() {
                    Some(token) => token,
                    None => crate::fence::fresh_token()?.to_vec(),
                };
                let mut set = redis::cmd("SET");
                set.arg(self.target.fence_key()).arg(&token);
                self.query_on::<()>(&None, set, SHORT_ANSWER).await?;
                pipe.join_fence(self.target.fence_key(), token);
                vec![None]
            }
            Connection::Cluster(cluster) => {
                cluster.masters().await?.into_iter().map(Some).collect()
            }
        };
        let mut ended = 0;
        for node in nodes {
            let others = self.other_proxies(&node).await?;
            self.end_connections(&node, &others).await?;
            ended += others.len();
        }
        if ended > 0 {
            tracing::info!(
                ended,
                "fence: connections of the proxy before this one ended"
            );
        }
        if self.target.cluster {
            self.finish_interrupted_write().await?;
        }
        Ok(())
    }

    fn describe(&self) -> String {
        self.target.describe()
    }
}
