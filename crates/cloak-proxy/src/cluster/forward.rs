//! Forwarding (`cloak proxy --cluster-forward`): a command for a slot another proxy hosts is sent
//! to that proxy and its reply relayed, for clients that are not cluster-aware and would not
//! follow `-MOVED`.
//!
//! Only single commands are forwarded, each on its own: a transaction, a WATCH or a script
//! keeps state in the session of the proxy that runs it, which a forwarded command does not
//! have, so those get [`Remote::not_forwarded`] (use a cluster-aware client). Blocking and
//! pub/sub commands do not exist in Cloak and are refused before routing.
//!
//! Each peer gets a small pool of connections ([`MAX_IN_FLIGHT`] at most, each carrying one
//! command at a time), opened as the probes open theirs ([`PeerLink`]: TLS with `--cluster-ca`,
//! `AUTH` with the client password), then switched to RESP3 so that a reply decodes into the
//! same [`Reply`] the owner built and is encoded for the client exactly as the owner would have
//! encoded it, and marked `CLOAK NOFORWARD` so that the owner never forwards it again: two
//! proxies whose maps disagree during a move would otherwise pass a command back and forth.
//! A slow or dead peer holds only its own pool's slots and the sessions that wait on it:
//! commands for local slots and for other peers do not wait behind it, and a command that
//! finds the pool full waits at most [`FORWARD_TIMEOUT`] for a slot, like one in flight.
//!
//! An owner that answers `-MOVED` (the map changed meanwhile) has its answer relayed, not
//! retried: this proxy learns the new map through the move itself, and retrying against an
//! address a peer names would forward beyond the map this proxy holds.
//!
//! The storage servers see nothing of this: which proxy a command reaches is decided between
//! proxies, in their memory, and each partition's storage traffic stays its own fixed schedule.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::Semaphore;

use super::peer::{PeerConnection, PeerLink};
use crate::resp::{Protocol, Reply};

/// Commands in flight to one peer at most (so connections to it at most): enough to keep a
/// pipelining client busy, few enough that a peer that stops answering holds little.
pub const MAX_IN_FLIGHT: usize = 16;

/// How long a forwarded command may take, waiting for a slot in the pool, connecting and the
/// peer's answer included: a command there runs on that partition's batch schedule, which can
/// take a few batch intervals under load.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// A slot hosted by another proxy: where a command for it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    pub slot: u16,
    /// The owner's address, `host:port`, from the map.
    pub address: String,
}

impl Remote {
    /// What a Redis Cluster node answers: the client should ask the owner.
    pub fn moved(&self) -> Reply {
        Reply::Error(format!("MOVED {} {}", self.slot, self.address))
    }

    /// The refusal of a command that cannot be forwarded, on a proxy that forwards: it needs
    /// session state (a transaction, a watch, a script) on the proxy that would run it.
    pub fn not_forwarded(&self) -> Reply {
        Reply::err(format!(
            "slot {} is hosted by the proxy at {}; this proxy forwards single commands there, but \
             not transactions (MULTI/EXEC), WATCH or scripts, which keep state on the proxy that \
             runs them: use a cluster-aware client (e.g. redis-cli -c, redis-py RedisCluster), \
             or connect to {} for these keys",
            self.slot, self.address, self.address
        ))
    }
}

/// The connections to the other proxies that forwarded commands travel on.
pub struct Forwarder {
    link: PeerLink,
    /// By address: the pools of the peers forwarded to so far (a cluster's proxies, a handful).
    peers: Mutex<HashMap<String, Arc<Pool>>>,
}

/// One peer's connections.
struct Pool {
    /// A permit per command in flight.
    slots: Semaphore,
    /// Connections between commands.
    idle: Mutex<Vec<PeerConnection>>,
}

impl Forwarder {
    /// Forwards over `link`, reading replies of at most `limit` bytes.
    pub fn new(link: PeerLink, limit: usize) -> Self {
        Self {
            link: link.with_limit(limit),
            peers: Mutex::new(HashMap::new()),
        }
    }

    /// Sends the request `args` to `remote`'s proxy and gives its reply, or an error that says
    /// why there is none. Runs in a task of its own, so that a client that goes away does not
    /// leave a connection with half a reply in the pool.
    pub fn forward(
        self: &Arc<Self>,
        remote: Remote,
        args: Vec<Bytes>,
    ) -> tokio::task::JoinHandle<Reply> {
        let forwarder = self.clone();
        tokio::spawn(async move {
            let pool = forwarder.pool(&remote.address);
            let asked = forwarder.ask(&pool, &remote.address, &args);
            match tokio::time::timeout(FORWARD_TIMEOUT, asked).await {
                Ok(Ok(reply)) => reply,
                Ok(Err(why)) => unreachable_owner(&remote, &why),
                Err(_) => unreachable_owner(
                    &remote,
                    &format!("no answer within {}s", FORWARD_TIMEOUT.as_secs()),
                ),
            }
        })
    }

    /// The pool of the peer at `address`, made on first use.
    fn pool(&self, address: &str) -> Arc<Pool> {
        let mut peers = match self.peers.lock() {
            Ok(peers) => peers,
            Err(poisoned) => poisoned.into_inner(),
        };
        peers
            .entry(address.to_string())
            .or_insert_with(|| {
                Arc::new(Pool {
                    slots: Semaphore::new(MAX_IN_FLIGHT),
                    idle: Mutex::new(Vec::new()),
                })
            })
            .clone()
    }

    /// One command on a connection of `pool`'s, which goes back to the pool only if the
    /// exchange went through whole.
    async fn ask(&self, pool: &Pool, address: &str, args: &[Bytes]) -> Result<Reply, String> {
        let _slot = pool
            .slots
            .acquire()
            .await
            .map_err(|_| "the forwarding pool is closed".to_string())?;
        let idle = pool.take_idle();
        let mut connection = match idle {
            Some(connection) => connection,
            None => self.open(address).await?,
        };
        let reply = connection.exchange(&encode(args)).await?;
        pool.put_idle(connection);
        Ok(reply)
    }

    /// A new connection to the peer at `address`, ready to forward on.
    async fn open(&self, address: &str) -> Result<PeerConnection, String> {
        let mut connection = self.link.connect(address).await?;
        for (args, what) in [
            (&["HELLO", "3"][..], "RESP3"),
            (&["CLOAK", "NOFORWARD"][..], "forwarded commands"),
        ] {
            let args: Vec<Bytes> = args
                .iter()
                .map(|a| Bytes::from_static(a.as_bytes()))
                .collect();
            if let Reply::Error(error) = connection.exchange(&encode(&args)).await? {
                return Err(format!(
                    "refused {what}: {error} (not a Cloak proxy of this version?)"
                ));
            }
        }
        Ok(connection)
    }
}

impl Pool {
    fn take_idle(&self) -> Option<PeerConnection> {
        self.idle_lock().pop()
    }

    fn put_idle(&self, connection: PeerConnection) {
        self.idle_lock().push(connection);
    }

    fn idle_lock(&self) -> std::sync::MutexGuard<'_, Vec<PeerConnection>> {
        match self.idle.lock() {
            Ok(idle) => idle,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// A request as a client sends it: an array of bulk strings.
fn encode(args: &[Bytes]) -> BytesMut {
    let mut out = BytesMut::new();
    let request = Reply::Array(args.iter().cloned().map(Reply::bulk).collect());
    request.encode(&mut out, Protocol::Resp2);
    out
}

/// What the client gets when the owner cannot be asked: `-CLUSTERDOWN`, as when the probes find
/// it down (the command may or may not have run there if the answer was lost on the way).
fn unreachable_owner(remote: &Remote, why: &str) -> Reply {
    Reply::Error(format!(
        "CLUSTERDOWN slot {} is hosted by the proxy at {}, which this proxy could not forward the \
         command to: {why}",
        remote.slot, remote.address
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_encoded_as_a_client_sends_it() {
        let args = [Bytes::from_static(b"GET"), Bytes::from_static(b"k")];
        assert_eq!(&encode(&args)[..], b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    }

    #[test]
    fn refusals_say_where_the_slot_is_and_what_to_do() {
        let remote = Remote {
            slot: 42,
            address: "10.0.0.2:7000".into(),
        };
        assert_eq!(
            remote.moved(),
            Reply::Error("MOVED 42 10.0.0.2:7000".into())
        );
        let Reply::Error(refusal) = remote.not_forwarded() else {
            panic!("an error");
        };
        assert!(refusal.contains("cluster-aware client"), "{refusal}");
        assert!(refusal.contains("10.0.0.2:7000"), "{refusal}");
    }
}
