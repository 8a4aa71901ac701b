//! A Redis Cluster through connections of our own: one [`Pipe`] to each master of its slot map,
//! so that the cluster is held to the rule a single Redis is (every answer no longer than its
//! command calls for, see [`super::answer_size`]), and a timed request is packed before its
//! release.
//!
//! Why not the `redis` crate's cluster client: its parser takes whatever length an answer
//! announces, so a hostile node could make the proxy buffer as much as it liked, and it packed
//! each node's share of a batch only after the release, work whose duration follows the load.
//!
//! Routing. Each key goes to the master that serves its hash slot ([`slot::key_slot`]), from
//! the slot map `CLUSTER SLOTS` gave. Redis refuses a command whose keys hash to two slots, so a
//! command of many keys is split into one command per slot, and each master's commands go out in
//! one write, pipelined; the masters are written to one after the other, from one task, with
//! everything packed beforehand.
//!
//! When the cluster changes. A master that answers `MOVED` no longer serves that slot: the
//! command goes at once to the master it names (a master of the map, read again first if the map
//! does not know it), and the map is read again before the next request. A redirection that is
//! answered by another one fails the request by name (the schemes repeat a failed request after
//! a backoff; what they send again is what they sent). A master that cannot be
//! reached, or that refuses a write as a replica (`READONLY`) or a cluster that is down
//! (`CLUSTERDOWN`), has the map read again too (a replica may have taken over). `ASK` (a slot half
//! way through a migration) is followed once: the command goes again to the node named, after
//! `ASKING`, as Redis Cluster clients do.
//!
//! What a hostile node can make of this. Its slot map is bounded (4 MiB, at most
//! [`MOST_NODES`] masters, every slot served once, hosts that are names or addresses), the proxy
//! connects only to the masters of the current map (an `ASK` naming another node is refused),
//! and drops its connections to masters a new map no longer names; so the connections it holds
//! are bounded by the map. A whole request, redirections included, ends within
//! [`REQUEST_LIMIT`]. What it cannot stop: a node can name, as a master, any host it likes (the
//! proxy then sends it the password of the URL, as to every master; with TLS it must show a
//! certificate of the CA the proxy trusts for its name).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{Cmd, Value};
use tokio::sync::OnceCell;

use super::answer_size::SHORT_ANSWER;
use super::pipe::{Answer, Pipe, PipeError, pack_all};
use super::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT, RedisTarget};
use crate::StorageError;
use crate::slot::{SLOTS, key_slot};
use crate::tls::ClientTls;

/// The longest answer to `CLUSTER SLOTS`: a few hundred bytes a node and an entry per slot
/// range; a cluster whose every slot range is an entry of its own stays under 2 MiB.
pub(super) const TOPOLOGY_ANSWER: usize = 4 << 20;

/// Most masters a slot map may name (Redis Cluster's own suggested ceiling is 1,000 nodes): each
/// costs a connection, so a hostile map naming thousands of hosts is refused.
const MOST_NODES: usize = 1000;

/// The longest a request may take across its masters, connections and redirections included:
/// a master's answer may take the response timeout, after a connect.
const REQUEST_LIMIT: Duration = RESPONSE_TIMEOUT.saturating_add(CONNECT_TIMEOUT);

/// Masters of the last map tried when the map is read again, before the seeds: they are the
/// cluster as it was last seen (the seeds may be gone), but a hostile map could name many that
/// never answer.
const KNOWN_MASTERS_ASKED: usize = 8;

/// A master, as the slot map names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Node {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Which master serves each hash slot.
#[derive(Debug)]
struct SlotMap {
    /// An index into `nodes` for every slot.
    owner: Vec<u16>,
    nodes: Vec<Node>,
}

/// How the answers of a routed request make its one answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gather {
    /// Each command answers an array of one value per key (MGET): the values, in key order.
    Values,
    /// Each command answers a status or a count (MSET, DEL): `OK` once all have.
    Done,
    /// One command of one key (GET, SET): its answer.
    One,
}

/// How a master sent a command elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Redirect {
    /// `ASK`: this once, to a node importing the slot.
    Ask,
    /// `MOVED`: the slot has a new master.
    Moved,
}

/// A command split by slot and packed for the masters that serve its keys.
pub(super) struct Routed {
    shares: Vec<Share>,
    keys: usize,
    gather: Gather,
}

/// One master's commands, packed back to back.
struct Share {
    node: Node,
    packed: Vec<u8>,
    commands: Vec<Part>,
}

/// One command of a share.
struct Part {
    /// Its bytes in the share's `packed`.
    bytes: Range<usize>,
    /// The longest answer it allows.
    bound: usize,
    /// The positions, in the whole request, of the keys it names.
    keys: Vec<usize>,
}

/// The slot map, and whether a node said it is out of date.
struct Topology {
    map: Arc<SlotMap>,
    stale: bool,
    /// A connection to each master of `map`, opened when first used.
    pipes: HashMap<Node, Arc<OnceCell<Pipe>>>,
}

/// A Redis Cluster: its slot map and a connection to each master.
pub(super) struct Cluster {
    target: RedisTarget,
    tls: Option<ClientTls>,
    topology: Mutex<Topology>,
    /// Held while the map is read again, so that requests that find it stale together read it
    /// once.
    reading: tokio::sync::Mutex<()>,
}

impl Cluster {
    /// Reads the slot map from the first seed node of `target` that answers.
    pub async fn connect(
        target: RedisTarget,
        tls: Option<ClientTls>,
    ) -> Result<Self, StorageError> {
        let map = read_map(&target, &tls, &[]).await?;
        Ok(Self {
            target,
            tls,
            topology: Mutex::new(Topology {
                pipes: HashMap::new(),
                map: Arc::new(map),
                stale: false,
            }),
            reading: tokio::sync::Mutex::new(()),
        })
    }

    /// The slot map, read again first if a node said it is out of date.
    async fn map(&self) -> Result<Arc<SlotMap>, StorageError> {
        if let Some(map) = self.current() {
            return Ok(map);
        }
        let _one_reader = self.reading.lock().await;
        // Another request may have read it meanwhile.
        if let Some(map) = self.current() {
            return Ok(map);
        }
        let known = self.lock().map.nodes.clone();
        let map = Arc::new(read_map(&self.target, &self.tls, &known).await?);
        let mut topology = self.lock();
        // Connections to masters the new map no longer names are dropped (closing them).
        topology.pipes.retain(|node, _| map.nodes.contains(node));
        topology.map = map.clone();
        topology.stale = false;
        Ok(map)
    }

    /// The map unless it is stale.
    fn current(&self) -> Option<Arc<SlotMap>> {
        let topology = self.lock();
        (!topology.stale).then(|| topology.map.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Topology> {
        // The topology is replaced field by field under the lock, each whole; a panic elsewhere
        // cannot leave one half written.
        self.topology
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Has the map read again before the next request.
    fn forget_map(&self) {
        self.lock().stale = true;
    }

    fn error(&self, what: &str) -> StorageError {
        StorageError(format!("{}: {what}", self.target.describe()))
    }

    /// Splits a command of `keys` by slot and packs each master's share: `command` makes the
    /// command for the keys at the positions given (all of one slot) and says how long its
    /// answer may be.
    pub async fn route(
        &self,
        keys: &[Vec<u8>],
        gather: Gather,
        command: impl Fn(&[usize]) -> (Cmd, usize),
    ) -> Result<Routed, StorageError> {
        let map = self.map().await?;
        // The positions of each slot's keys, slots in the order their first key comes.
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        let mut group_of: HashMap<u16, usize> = HashMap::new();
        for (i, key) in keys.iter().enumerate() {
            let slot = key_slot(key);
            let group = *group_of.entry(slot).or_insert_with(|| {
                groups.push((slot, Vec::new()));
                groups.len() - 1
            });
            groups[group].1.push(i);
        }
        let mut shares: Vec<Share> = Vec::new();
        let mut share_of: HashMap<u16, usize> = HashMap::new();
        for (slot, positions) in groups {
            let owner = map.owner[usize::from(slot)];
            let share = *share_of.entry(owner).or_insert_with(|| {
                shares.push(Share {
                    node: map.nodes[usize::from(owner)].clone(),
                    packed: Vec::new(),
                    commands: Vec::new(),
                });
                shares.len() - 1
            });
            let (cmd, bound) = command(&positions);
            let share = &mut shares[share];
            let start = share.packed.len();
            cmd.write_packed_command(&mut share.packed);
            share.commands.push(Part {
                bytes: start..share.packed.len(),
                bound,
                keys: positions,
            });
        }
        Ok(Routed {
            shares,
            keys: keys.len(),
            gather,
        })
    }

    /// Sends a routed command to its masters and gathers their answers into one, within
    /// [`REQUEST_LIMIT`].
    pub async fn send(&self, routed: Routed) -> Result<Value, StorageError> {
        tokio::time::timeout(REQUEST_LIMIT, self.send_within(routed))
            .await
            .unwrap_or_else(|_| {
                self.forget_map();
                Err(self.error(&format!(
                    "the masters did not answer within {REQUEST_LIMIT:?}"
                )))
            })
    }

    async fn send_within(&self, routed: Routed) -> Result<Value, StorageError> {
        let sent = futures::future::join_all(routed.shares.iter().map(|share| async move {
            let bounds: Vec<usize> = share.commands.iter().map(|c| c.bound).collect();
            self.request_all(&share.node, &share.packed, &bounds).await
        }))
        .await;
        let mut values = vec![Value::Nil; routed.keys];
        let mut one = None;
        let mut moved = false;
        for (share, answers) in routed.shares.iter().zip(sent) {
            for (part, answer) in share.commands.iter().zip(answers?) {
                let command = &share.packed[part.bytes.clone()];
                let answer = match answer {
                    Err(PipeError::Answer(error)) if error.starts_with("ASK ") => {
                        self.redirect(&error, command, part.bound, Redirect::Ask)
                            .await?
                    }
                    Err(PipeError::Answer(error)) if error.starts_with("MOVED ") => {
                        moved = true;
                        self.redirect(&error, command, part.bound, Redirect::Moved)
                            .await?
                    }
                    other => other,
                };
                let value = answer.map_err(|e| self.answer_failed(&share.node, e))?;
                match routed.gather {
                    Gather::Values => {
                        let Value::Array(items) = value else {
                            return Err(self.error(&format!(
                                "the master {} answered an MGET with {value:?}",
                                share.node
                            )));
                        };
                        if items.len() != part.keys.len() {
                            return Err(self.error(&format!(
                                "the master {} answered {} values to an MGET of {} keys",
                                share.node,
                                items.len(),
                                part.keys.len()
                            )));
                        }
                        for (&position, item) in part.keys.iter().zip(items) {
                            values[position] = item;
                        }
                    }
                    Gather::Done => {}
                    Gather::One => one = Some(value),
                }
            }
        }
        if moved {
            // The next request goes by a map read again, not slot by slot through redirections.
            self.forget_map();
        }
        Ok(match routed.gather {
            Gather::Values => Value::Array(values),
            Gather::Done => Value::Okay,
            Gather::One => one.unwrap_or(Value::Nil),
        })
    }

    /// Follows an `ASK SLOT HOST:PORT` or `MOVED SLOT HOST:PORT` answer once: the command again,
    /// on that node (after `ASKING` for an `ASK`), which must be a master of the slot map (read
    /// again first when a `MOVED` names a node it does not know). A second redirection is not
    /// followed: it fails the request (see [`Cluster::answer_failed`]).
    async fn redirect(
        &self,
        error: &str,
        command: &[u8],
        bound: usize,
        redirect: Redirect,
    ) -> Result<Answer, StorageError> {
        let node = error
            .split_whitespace()
            .nth(2)
            .and_then(parse_node)
            .ok_or_else(|| self.error(&format!("a master answered {error:?}")))?;
        let (mut packed, mut bounds) = (Vec::new(), Vec::new());
        match redirect {
            Redirect::Ask => {
                redis::cmd("ASKING").write_packed_command(&mut packed);
                bounds.push(SHORT_ANSWER);
            }
            Redirect::Moved if !self.lock().map.nodes.contains(&node) => {
                self.forget_map();
                self.map().await?;
            }
            Redirect::Moved => {}
        }
        packed.extend_from_slice(command);
        bounds.push(bound);
        let mut answers = self.request_all(&node, &packed, &bounds).await?;
        Ok(answers.pop().expect("an answer for each command"))
    }

    /// [`Pipe::request_all`] on the connection to `node`, a master of the current map, opened
    /// if there is none (outside any lock that other masters' requests wait on).
    async fn request_all(
        &self,
        node: &Node,
        packed: &[u8],
        bounds: &[usize],
    ) -> Result<Vec<Answer>, StorageError> {
        let cell = {
            let mut topology = self.lock();
            if !topology.map.nodes.contains(node) {
                return Err(
                    self.error(&format!("{node} is not a master of the cluster's slot map"))
                );
            }
            topology.pipes.entry(node.clone()).or_default().clone()
        };
        let url = self.target.node_url(&node.host, node.port);
        let pipe = cell
            .get_or_try_init(|| {
                let name = Some(self.target.client_name());
                Pipe::connect(
                    &url,
                    self.tls.clone(),
                    name,
                    CONNECT_TIMEOUT,
                    RESPONSE_TIMEOUT,
                )
            })
            .await
            .map_err(|e| {
                self.forget_map();
                self.error(&format!("cannot connect to the master {node}: {e}"))
            })?;
        pipe.request_all(packed, bounds)
            .await
            .map_err(|e| self.node_failed(node, e))
    }

    /// A connection to `node` failed: maybe the node did (a replica may take over), so the map
    /// is read again before the next request.
    fn node_failed(&self, node: &Node, error: PipeError) -> StorageError {
        self.forget_map();
        self.error(&format!("the master {node}: {error}"))
    }

    /// What a master answered instead of a result: `MOVED` after a redirection (the map is read
    /// again before the next request), another error, or a broken connection.
    fn answer_failed(&self, node: &Node, error: PipeError) -> StorageError {
        match &error {
            PipeError::Answer(text) if text.starts_with("MOVED ") => {
                self.forget_map();
                self.error(&format!(
                    "the master {node} answered {text:?}: the slot moved again; the slot map is \
                     read again and the request repeated"
                ))
            }
            PipeError::Answer(text)
                if text.starts_with("READONLY ") || text.starts_with("CLUSTERDOWN ") =>
            {
                self.forget_map();
                self.error(&format!(
                    "the master {node} answered {text:?}; the slot map is read again and the \
                     request repeated"
                ))
            }
            PipeError::Answer(_) => self.error(&format!("the master {node}: {error}")),
            _ => self.node_failed(node, error),
        }
    }

    /// Runs `commands` on `node`, a master of the current map, pipelined on one connection
    /// (each answer as many bytes at most as its command's bound): their answers, or the first
    /// error.
    pub async fn query_node(
        &self,
        node: &Node,
        commands: &[(Cmd, usize)],
    ) -> Result<Vec<Value>, StorageError> {
        let (packed, bounds) = pack_all(commands);
        self.request_all(node, &packed, &bounds)
            .await?
            .into_iter()
            .map(|answer| answer.map_err(|e| self.answer_failed(node, e)))
            .collect()
    }

    /// The masters that serve the slots, from a map read now: those a scan of the whole store
    /// must visit.
    pub async fn masters(&self) -> Result<Vec<Node>, StorageError> {
        self.forget_map();
        Ok(self.map().await?.nodes.clone())
    }
}

/// `CLUSTER SLOTS` from the masters of the last map (`known`, a few of them) and then the seed
/// nodes of `target`, in turn, until one answers a map that covers every slot.
async fn read_map(
    target: &RedisTarget,
    tls: &Option<ClientTls>,
    known: &[Node],
) -> Result<SlotMap, StorageError> {
    let known = known
        .iter()
        .take(KNOWN_MASTERS_ASKED)
        .map(|node| target.node_url(&node.host, node.port));
    let mut errors = Vec::new();
    for url in known.chain(target.nodes.iter().cloned()) {
        let answer = async {
            // Unnamed, so a fence leaves it be: it only reads the slot map, and a fence ends
            // connections that may still be writing.
            let pipe = Pipe::connect(&url, tls.clone(), None, CONNECT_TIMEOUT, RESPONSE_TIMEOUT)
                .await
                .map_err(|e| e.to_string())?;
            let asked = pipe.host().to_string();
            let slots = pipe
                .request(&slots_command(), TOPOLOGY_ANSWER)
                .await
                .map_err(|e| e.to_string())?;
            slot_map(&slots, &asked)
        }
        .await;
        match answer {
            Ok(map) => return Ok(map),
            Err(error) => errors.push(format!("{}: {error}", target.node_host(&url))),
        }
    }
    Err(StorageError(format!(
        "{}: no node gave a slot map ({})",
        target.describe(),
        errors.join("; ")
    )))
}

/// `CLUSTER SLOTS`, packed.
fn slots_command() -> Vec<u8> {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("SLOTS");
    cmd.get_packed_command()
}

/// `HOST:PORT` as a node.
fn parse_node(text: &str) -> Option<Node> {
    let (host, port) = text.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some(Node {
        host: host.to_string(),
        port: port.parse().ok()?,
    })
}

/// The slot map a `CLUSTER SLOTS` answer gives: ranges of slots, each with its master first
/// (`[start, end, [host, port, id, …], replicas…]`). A master named without an address (an empty
/// host, or `?`) is the node that was asked, `asked`. Every slot must be served.
fn slot_map(answer: &Value, asked: &str) -> Result<SlotMap, String> {
    let bad = |what: &str| format!("CLUSTER SLOTS answered {what}");
    let Value::Array(ranges) = answer else {
        return Err(bad("something other than a list of slot ranges"));
    };
    if ranges.len() > usize::from(SLOTS) {
        return Err(bad(&format!("{} slot ranges", ranges.len())));
    }
    let mut owner = vec![u16::MAX; usize::from(SLOTS)];
    let mut nodes: Vec<Node> = Vec::new();
    let mut index_of: HashMap<Node, u16> = HashMap::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            return Err(bad("a slot range that is not a list"));
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return Err(bad("a slot range without its bounds and master"));
        };
        let host = match master.first() {
            Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
            Some(Value::SimpleString(host)) => host.clone(),
            _ => return Err(bad("a master without a host")),
        };
        let host = if host.is_empty() || host == "?" {
            asked.to_string()
        } else {
            host
        };
        // A name or an address, nothing that would change the URL it is put in.
        if !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'))
        {
            return Err(bad(&format!(
                "a master at {host:?}, not a host name or address"
            )));
        }
        let Some(Value::Int(port)) = master.get(1) else {
            return Err(bad("a master without a port"));
        };
        let port = u16::try_from(*port).map_err(|_| bad("a port out of range"))?;
        let slots = usize::try_from(*start)
            .ok()
            .zip(usize::try_from(*end).ok())
            .filter(|&(start, end)| start <= end && end < usize::from(SLOTS))
            .ok_or_else(|| bad(&format!("the slot range {start}-{end}")))?;
        let node = Node { host, port };
        let index = match index_of.get(&node) {
            Some(&index) => index,
            None if nodes.len() == MOST_NODES => {
                return Err(bad(&format!("more than {MOST_NODES} masters")));
            }
            None => {
                let index = nodes.len() as u16;
                index_of.insert(node.clone(), index);
                nodes.push(node);
                index
            }
        };
        let served = &mut owner[slots.0..=slots.1];
        if let Some(taken) = served.iter().position(|&o| o != u16::MAX) {
            return Err(bad(&format!("slot {} twice", slots.0 + taken)));
        }
        served.fill(index);
    }
    if let Some(slot) = owner.iter().position(|&o| o == u16::MAX) {
        return Err(format!(
            "slot {slot} is served by no master (is the cluster whole? CLUSTER INFO says)"
        ));
    }
    Ok(SlotMap { owner, nodes })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: i64, end: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::Int(start),
            Value::Int(end),
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ]),
        ])
    }

    #[test]
    fn a_slot_map_covers_every_slot_or_is_refused() {
        let whole = Value::Array(vec![
            range(0, 8191, "10.0.0.1", 7000),
            range(8192, 16383, "", 7001),
        ]);
        let map = slot_map(&whole, "10.0.0.9").unwrap();
        assert_eq!(map.nodes.len(), 2);
        let at = |slot: usize| map.nodes[usize::from(map.owner[slot])].to_string();
        assert_eq!(at(0), "10.0.0.1:7000");
        assert_eq!(at(16383), "10.0.0.9:7001");

        let holed = Value::Array(vec![range(0, 8191, "10.0.0.1", 7000)]);
        assert!(slot_map(&holed, "x").unwrap_err().contains("slot 8192"));
        let past = Value::Array(vec![range(0, 16384, "10.0.0.1", 7000)]);
        assert!(slot_map(&past, "x").unwrap_err().contains("0-16384"));
        assert!(slot_map(&Value::Okay, "x").is_err());
        let twice = Value::Array(vec![
            range(0, 16383, "10.0.0.1", 7000),
            range(5, 5, "10.0.0.2", 7000),
        ]);
        assert!(slot_map(&twice, "x").unwrap_err().contains("slot 5 twice"));
        let url_bending = Value::Array(vec![range(0, 16383, "x@evil/5?", 7000)]);
        assert!(
            slot_map(&url_bending, "x")
                .unwrap_err()
                .contains("not a host name")
        );
        let many: Vec<Value> = (0..=1000)
            .map(|i| range(i, i, "10.0.0.1", 7000 + i))
            .collect();
        assert!(
            slot_map(&Value::Array(many), "x")
                .unwrap_err()
                .contains("more than 1000 masters")
        );
    }

    #[test]
    fn nodes_parse_with_and_without_brackets() {
        assert_eq!(
            parse_node("127.0.0.1:7000"),
            Some(Node {
                host: "127.0.0.1".into(),
                port: 7000
            })
        );
        assert_eq!(parse_node("[::1]:7000").map(|n| n.host), Some("::1".into()));
        assert_eq!(parse_node("no port"), None);
    }
}
