//! The proxy's list of connected clients: what `CLIENT LIST`, `CLIENT INFO` and `CLIENT KILL`
//! read, kept by the connections themselves.
//!
//! Only fields the proxy really knows are listed (Redis's buffer and memory fields have no
//! counterpart here and are left out rather than made up). Nothing here reaches the storage
//! server.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;
use cloak_core::ClientId;
use tokio::sync::Notify;

use crate::cmd::KillFilter;
use crate::resp::Protocol;

/// One connected client.
pub struct Client {
    pub id: ClientId,
    pub addr: SocketAddr,
    pub laddr: SocketAddr,
    connected: Instant,
    state: Mutex<ClientState>,
    /// Signalled by `CLIENT KILL`; the connection closes when it sees it.
    pub killed: Notify,
}

/// What a client's commands change.
#[derive(Default)]
pub struct ClientState {
    pub name: Option<Bytes>,
    pub lib_name: Option<Bytes>,
    pub lib_ver: Option<Bytes>,
    pub protocol: Protocol,
    pub db: i64,
    pub no_evict: bool,
    pub no_touch: bool,
    /// The last command's name (`client|list` for a subcommand), as Redis shows it.
    last_command: String,
    last_active: Option<Instant>,
}

impl Client {
    pub fn state(&self) -> MutexGuard<'_, ClientState> {
        // A panic while holding the lock cannot leave the plain fields inconsistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Notes a command, for `cmd=` and `idle=`.
    pub fn saw(&self, command: &str) {
        let mut state = self.state();
        state.last_command = command.to_string();
        state.last_active = Some(Instant::now());
    }

    /// The client's line in `CLIENT LIST` (and `CLIENT INFO`), newline included.
    pub fn describe(&self) -> String {
        let state = self.state();
        let now = Instant::now();
        let idle = now.saturating_duration_since(state.last_active.unwrap_or(self.connected));
        let text = |value: &Option<Bytes>| {
            value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        let mut flags = String::new();
        if state.no_evict {
            flags.push('e');
        }
        if state.no_touch {
            flags.push('T');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        format!(
            "id={} addr={} laddr={} name={} age={} idle={} flags={flags} db={} cmd={} \
             user=default resp={} lib-name={} lib-ver={}\n",
            self.id,
            self.addr,
            self.laddr,
            text(&state.name),
            now.saturating_duration_since(self.connected).as_secs(),
            idle.as_secs(),
            state.db,
            if state.last_command.is_empty() {
                "NULL"
            } else {
                &state.last_command
            },
            state.protocol.version(),
            text(&state.lib_name),
            text(&state.lib_ver),
        )
    }

    fn matches(&self, filter: &KillFilter, caller: ClientId) -> bool {
        let spared = filter.skip_me && self.id == caller;
        !spared
            && !filter.no_normal
            && filter.id.is_none_or(|id| id == self.id)
            && filter
                .addr
                .as_ref()
                .is_none_or(|addr| *addr == self.addr.to_string())
            && filter
                .laddr
                .as_ref()
                .is_none_or(|laddr| *laddr == self.laddr.to_string())
            && filter.user.as_ref().is_none_or(|user| user == "default")
            && filter
                .max_age
                .is_none_or(|age| self.connected.elapsed().as_secs() >= age)
    }
}

/// Every connected client, by id.
#[derive(Default)]
pub struct ClientList {
    clients: Mutex<BTreeMap<ClientId, Arc<Client>>>,
}

/// Keeps a client listed while it lives.
pub struct Registration<'a> {
    list: &'a ClientList,
    pub client: Arc<Client>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.list.lock().remove(&self.client.id);
    }
}

impl ClientList {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<ClientId, Arc<Client>>> {
        self.clients
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Lists a new connection until the returned registration is dropped.
    pub fn register(&self, id: ClientId, addr: SocketAddr, laddr: SocketAddr) -> Registration<'_> {
        let client = Arc::new(Client {
            id,
            addr,
            laddr,
            connected: Instant::now(),
            state: Mutex::new(ClientState::default()),
            killed: Notify::new(),
        });
        self.lock().insert(id, client.clone());
        Registration { list: self, client }
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// `CLIENT LIST`: every client, or those with the given ids, in id order.
    pub fn describe(&self, ids: &[ClientId]) -> String {
        let clients: Vec<Arc<Client>> = self.lock().values().cloned().collect();
        clients
            .iter()
            .filter(|client| ids.is_empty() || ids.contains(&client.id))
            .map(|client| client.describe())
            .collect()
    }

    /// Signals every client `filter` matches to close; returns how many, and whether the
    /// caller is one of them (it closes after its reply instead).
    pub fn kill(&self, filter: &KillFilter, caller: ClientId) -> (usize, bool) {
        let mut killed = 0;
        let mut caller_killed = false;
        for client in self.lock().values() {
            if client.matches(filter, caller) {
                killed += 1;
                if client.id == caller {
                    caller_killed = true;
                } else {
                    client.killed.notify_one();
                }
            }
        }
        (killed, caller_killed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn lists_kills_and_forgets_clients() {
        let list = ClientList::default();
        let first = list.register(1, addr(5001), addr(6380));
        let second = list.register(2, addr(5002), addr(6380));
        first.client.state().name = Some(Bytes::from_static(b"worker"));
        first.client.saw("client|list");
        let all = list.describe(&[]);
        assert!(
            all.starts_with(
                "id=1 addr=127.0.0.1:5001 laddr=127.0.0.1:6380 name=worker age=0 idle=0 \
                 flags=N db=0 cmd=client|list user=default resp=2 lib-name= lib-ver=\n"
            ),
            "{all}"
        );
        assert_eq!(all.lines().count(), 2);
        assert_eq!(list.describe(&[2]).lines().count(), 1);

        let by_addr = KillFilter {
            addr: Some("127.0.0.1:5002".into()),
            skip_me: true,
            ..KillFilter::default()
        };
        assert_eq!(list.kill(&by_addr, 1), (1, false));
        assert_eq!(
            list.kill(&by_addr, 2),
            (0, false),
            "SKIPME spares the caller"
        );
        let me = KillFilter {
            id: Some(1),
            ..KillFilter::default()
        };
        assert_eq!(list.kill(&me, 1), (1, true));

        drop(second);
        assert_eq!(list.len(), 1);
    }
}
