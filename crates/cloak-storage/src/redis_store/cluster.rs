//! A Redis Cluster through connections of our own: one [`Pipe`] to each master, so that the
//! cluster is held to the rule a single Redis is (every answer no longer than its command calls
//! for, see [`super::answer_size`]), and a timed request is packed before its release.
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
//! When the cluster changes. A master that answers `MOVED` no longer serves that slot: the map
//! is read again before the next request, and this one fails (the schemes repeat a failed
//! request after a backoff; what they send again is what they sent). A master that cannot be
//! reached has the map read again too (a replica may have taken over). `ASK` (a slot half way
//! through a migration) is followed once: the command goes again to the node named, after
//! `ASKING`, as Redis Cluster clients do.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use redis::{Cmd, Value};

use super::answer_size::SHORT_ANSWER;
use super::pipe::{Answer, Pipe, PipeError};
use super::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT, RedisTarget};
use crate::StorageError;
use crate::slot::{SLOTS, key_slot};
use crate::tls::ClientTls;

/// The longest answer to `CLUSTER SLOTS` or `CLUSTER NODES`: a few hundred bytes a node and a
/// line per slot range; a cluster whose every slot range is on its own line stays under 2 MiB.
pub(super) const TOPOLOGY_ANSWER: usize = 4 << 20;

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
    owner: Vec<usize>,
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

/// A Redis Cluster: its slot map and a connection to each master.
pub(super) struct Cluster {
    target: RedisTarget,
    tls: Option<ClientTls>,
    /// `None` once a node said the map is out of date: read again before the next request.
    map: Mutex<Option<Arc<SlotMap>>>,
    pipes: tokio::sync::Mutex<HashMap<Node, Arc<Pipe>>>,
}

impl Cluster {
    /// Reads the slot map from the first seed node of `target` that answers.
    pub async fn connect(
        target: RedisTarget,
        tls: Option<ClientTls>,
    ) -> Result<Self, StorageError> {
        let cluster = Self {
            target,
            tls,
            map: Mutex::new(None),
            pipes: tokio::sync::Mutex::new(HashMap::new()),
        };
        cluster.map().await?;
        Ok(cluster)
    }

    /// The slot map, read again first if a node said it is out of date.
    async fn map(&self) -> Result<Arc<SlotMap>, StorageError> {
        if let Some(map) = self.lock_map().as_ref() {
            return Ok(map.clone());
        }
        let map = Arc::new(self.read_map().await?);
        *self.lock_map() = Some(map.clone());
        Ok(map)
    }

    fn lock_map(&self) -> std::sync::MutexGuard<'_, Option<Arc<SlotMap>>> {
        // The map is replaced whole; a panic elsewhere cannot leave it half written.
        self.map
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Has the map read again before the next request.
    fn forget_map(&self) {
        *self.lock_map() = None;
    }

    /// `CLUSTER SLOTS` from the seed nodes in turn (the masters known so far first), until one
    /// answers a map that covers every slot.
    async fn read_map(&self) -> Result<SlotMap, StorageError> {
        let mut errors = Vec::new();
        for url in &self.target.nodes {
            let answer = async {
                let pipe = Pipe::connect(url, self.tls.clone(), CONNECT_TIMEOUT, RESPONSE_TIMEOUT)
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
                Err(error) => errors.push(format!("{}: {error}", self.target.node_host(url))),
            }
        }
        Err(self.error(&format!(
            "no seed node gave a slot map ({})",
            errors.join("; ")
        )))
    }

    /// The connection to `node`, opened if there is none.
    async fn pipe(&self, node: &Node) -> Result<Arc<Pipe>, StorageError> {
        let mut pipes = self.pipes.lock().await;
        if let Some(pipe) = pipes.get(node) {
            return Ok(pipe.clone());
        }
        let url = self.target.node_url(&node.host, node.port);
        let pipe = Pipe::connect(&url, self.tls.clone(), CONNECT_TIMEOUT, RESPONSE_TIMEOUT)
            .await
            .map_err(|e| {
                self.forget_map();
                self.error(&format!("cannot connect to the master {node}: {e}"))
            })?;
        let pipe = Arc::new(pipe);
        pipes.insert(node.clone(), pipe.clone());
        Ok(pipe)
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
        // Keys of one slot, in the order they first come.
        let mut by_slot: HashMap<u16, Vec<usize>> = HashMap::new();
        let mut slots = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let slot = key_slot(key);
            by_slot
                .entry(slot)
                .or_insert_with(|| {
                    slots.push(slot);
                    Vec::new()
                })
                .push(i);
        }
        let mut shares: Vec<Share> = Vec::new();
        let mut share_of: HashMap<usize, usize> = HashMap::new();
        for slot in slots {
            let positions = by_slot.remove(&slot).unwrap_or_default();
            let owner = map.owner[usize::from(slot)];
            let share = *share_of.entry(owner).or_insert_with(|| {
                shares.push(Share {
                    node: map.nodes[owner].clone(),
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

    /// Sends a routed command to its masters and gathers their answers into one.
    pub async fn send(&self, routed: Routed) -> Result<Value, StorageError> {
        let sent = futures::future::join_all(routed.shares.iter().map(|share| async move {
            let bounds: Vec<usize> = share.commands.iter().map(|c| c.bound).collect();
            let pipe = self.pipe(&share.node).await?;
            pipe.request_all(&share.packed, &bounds)
                .await
                .map_err(|e| self.node_failed(&share.node, e))
        }))
        .await;
        let mut values = vec![Value::Nil; routed.keys];
        let mut one = None;
        for (share, answers) in routed.shares.iter().zip(sent) {
            for (part, answer) in share.commands.iter().zip(answers?) {
                let answer = match answer {
                    Err(PipeError::Answer(error)) if error.starts_with("ASK ") => {
                        self.ask(&error, &share.packed[part.bytes.clone()], part.bound)
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
        Ok(match routed.gather {
            Gather::Values => Value::Array(values),
            Gather::Done => Value::Okay,
            Gather::One => one.unwrap_or(Value::Nil),
        })
    }

    /// Follows an `ASK SLOT HOST:PORT` answer: the command again, on that node, after `ASKING`.
    async fn ask(&self, error: &str, command: &[u8], bound: usize) -> Result<Answer, StorageError> {
        let node = error
            .split_whitespace()
            .nth(2)
            .and_then(parse_node)
            .ok_or_else(|| self.error(&format!("a master answered {error:?}")))?;
        let mut packed = redis::cmd("ASKING").get_packed_command();
        packed.extend_from_slice(command);
        let pipe = self.pipe(&node).await?;
        let mut answers = pipe
            .request_all(&packed, &[SHORT_ANSWER, bound])
            .await
            .map_err(|e| self.node_failed(&node, e))?;
        Ok(answers.pop().expect("two answers for two commands"))
    }

    /// A connection to `node` failed: maybe the node did (a replica may take over), so the map
    /// is read again before the next request.
    fn node_failed(&self, node: &Node, error: PipeError) -> StorageError {
        self.forget_map();
        self.error(&format!("the master {node}: {error}"))
    }

    /// What a master answered instead of a result: `MOVED` (the map is read again before the
    /// next request), another error, or a broken connection.
    fn answer_failed(&self, node: &Node, error: PipeError) -> StorageError {
        match &error {
            PipeError::Answer(text) if text.starts_with("MOVED ") => {
                self.forget_map();
                self.error(&format!(
                    "the master {node} answered {text:?}: the slot moved; the slot map is read \
                     again and the request repeated"
                ))
            }
            PipeError::Answer(_) => self.error(&format!("the master {node}: {error}")),
            _ => self.node_failed(node, error),
        }
    }

    /// Runs `cmd` on `node` (its answer `max_answer` bytes at most).
    pub async fn query_node(
        &self,
        node: &Node,
        cmd: &Cmd,
        max_answer: usize,
    ) -> Result<Value, StorageError> {
        let pipe = self.pipe(node).await?;
        pipe.request(&cmd.get_packed_command(), max_answer)
            .await
            .map_err(|e| self.answer_failed(node, e))
    }

    /// A master of the cluster, to ask about the cluster.
    pub async fn any_node(&self) -> Result<Node, StorageError> {
        let map = self.map().await?;
        Ok(map.nodes[0].clone())
    }
}

/// `CLUSTER SLOTS`, packed.
fn slots_command() -> Vec<u8> {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("SLOTS");
    cmd.get_packed_command()
}

/// `HOST:PORT` as a node.
pub(super) fn parse_node(text: &str) -> Option<Node> {
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
    let mut owner = vec![usize::MAX; usize::from(SLOTS)];
    let mut nodes: Vec<Node> = Vec::new();
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
        let index = match nodes.iter().position(|n| *n == node) {
            Some(index) => index,
            None => {
                nodes.push(node);
                nodes.len() - 1
            }
        };
        owner[slots.0..=slots.1].fill(index);
    }
    if let Some(slot) = owner.iter().position(|&o| o == usize::MAX) {
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
        assert_eq!(map.nodes[map.owner[0]].to_string(), "10.0.0.1:7000");
        assert_eq!(map.nodes[map.owner[16383]].to_string(), "10.0.0.9:7001");

        let holed = Value::Array(vec![range(0, 8191, "10.0.0.1", 7000)]);
        assert!(slot_map(&holed, "x").unwrap_err().contains("slot 8192"));
        let past = Value::Array(vec![range(0, 16384, "10.0.0.1", 7000)]);
        assert!(slot_map(&past, "x").unwrap_err().contains("0-16384"));
        assert!(slot_map(&Value::Okay, "x").is_err());
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
