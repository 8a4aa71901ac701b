//! The proxy's list of connected clients: what `CLIENT LIST`, `CLIENT INFO` and `CLIENT KILL`
//! read, kept by the connections themselves.
//!
//! Only fields the proxy really knows are listed (Redis's buffer and memory fields have no
//! counterpart here and are left out rather than made up). Nothing here reaches the storage
//! server.
//!
//! The list also keeps the unauthenticated clients apart (oldest first): they may hold only a
//! share of the places, and a new one crowds out the oldest once that share is taken, so idle
//! sockets that never authenticate cannot keep a real client out (see `connection`). Clients
//! are listed as they are accepted, so "oldest" is the order they connected in, not the order
//! their connections' tasks happened to start. One crowded out holds no place from then on
//! (against `--max-clients` or the unauthenticated share) while its connection closes, but stays
//! listed until it has: its unread replies still count toward the proxy-wide limit, and that
//! limit can still cut it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    /// Signalled when newer unauthenticated clients crowd this one out; it closes (with an
    /// error, if it has room for one).
    pub crowded_out: Notify,
    /// Bytes of replies waiting to be written (see `unread`).
    unread: AtomicUsize,
    /// Disconnected for holding the most unread replies; its replies no longer count.
    pub cut: AtomicBool,
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
pub struct ClientList {
    listed: Mutex<Listed>,
    /// Most unauthenticated clients at once.
    max_unauthenticated: usize,
    /// Bytes of replies all clients leave unread together.
    unread: AtomicUsize,
    /// Beyond this many, the client leaving the most is disconnected.
    max_unread: usize,
}

#[derive(Default)]
struct Listed {
    all: BTreeMap<ClientId, Arc<Client>>,
    /// The clients that have not authenticated; ids grow, so the first is the oldest.
    unauthenticated: BTreeSet<ClientId>,
    /// Clients crowded out and closing: listed, holding no place.
    crowded_out: BTreeSet<ClientId>,
}

/// Keeps a client listed while it lives.
pub struct Registration {
    list: Arc<ClientList>,
    pub client: Arc<Client>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut listed = self.list.lock();
        listed.all.remove(&self.client.id);
        listed.unauthenticated.remove(&self.client.id);
        listed.crowded_out.remove(&self.client.id);
    }
}

impl ClientList {
    /// An empty list that lets at most `max_unauthenticated` (at least one) clients wait
    /// unauthenticated, and all clients together leave at most `max_unread` bytes of replies
    /// unread.
    pub fn new(max_unauthenticated: usize, max_unread: usize) -> Self {
        Self {
            listed: Mutex::default(),
            max_unauthenticated: max_unauthenticated.max(1),
            unread: AtomicUsize::new(0),
            max_unread,
        }
    }

    /// Notes that `client` leaves `bytes` of replies unread now; if that takes the total past
    /// the limit, disconnects the client leaving the most. Each swap hands over exactly what it
    /// replaces, so the total stays the sum of the clients' counts whoever changes them.
    pub fn note_unread(&self, client: &Client, bytes: usize) {
        let before = client.unread.swap(bytes, Ordering::Relaxed);
        if bytes <= before {
            self.unread.fetch_sub(before - bytes, Ordering::Relaxed);
            return;
        }
        let total = self.unread.fetch_add(bytes - before, Ordering::Relaxed) + bytes - before;
        if total > self.max_unread {
            self.cut_the_largest(total);
        }
    }

    fn cut_the_largest(&self, total: usize) {
        let listed = self.lock();
        let Some(largest) = listed
            .all
            .values()
            .filter(|client| !client.cut.load(Ordering::Relaxed))
            .max_by_key(|client| client.unread.load(Ordering::Relaxed))
        else {
            return;
        };
        largest.cut.store(true, Ordering::Relaxed);
        let unread = largest.unread.swap(0, Ordering::Relaxed);
        self.unread.fetch_sub(unread, Ordering::Relaxed);
        tracing::warn!(
            id = largest.id,
            addr = %largest.addr,
            unread,
            total,
            limit = self.max_unread,
            "replies left unread by all clients passed --total-reply-limit: disconnected the \
             client leaving the most"
        );
        largest.killed.notify_one();
    }

    /// Bytes of replies all clients leave unread (for tests).
    #[cfg(test)]
    pub fn unread(&self) -> usize {
        self.unread.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Listed> {
        self.listed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Lists a new connection until the returned registration is dropped.
    pub fn register(
        self: &Arc<Self>,
        id: ClientId,
        addr: SocketAddr,
        laddr: SocketAddr,
        authenticated: bool,
    ) -> Registration {
        let client = Arc::new(Client {
            id,
            addr,
            laddr,
            connected: Instant::now(),
            state: Mutex::new(ClientState::default()),
            killed: Notify::new(),
            crowded_out: Notify::new(),
            unread: AtomicUsize::new(0),
            cut: AtomicBool::new(false),
        });
        self.lock().all.insert(id, client.clone());
        self.set_authenticated(id, authenticated);
        Registration {
            list: self.clone(),
            client,
        }
    }

    /// Notes whether client `id` is authenticated (`AUTH` makes it so, `RESET` undoes it). One
    /// more unauthenticated client than allowed crowds out the oldest, which holds no place
    /// from then on, whatever it does before it has closed (an `AUTH` already on its way
    /// included: it closes at its next read all the same).
    pub fn set_authenticated(&self, id: ClientId, authenticated: bool) {
        let mut guard = self.lock();
        let listed = &mut *guard;
        if listed.crowded_out.contains(&id) {
            return;
        }
        if authenticated {
            listed.unauthenticated.remove(&id);
            return;
        }
        listed.unauthenticated.insert(id);
        if listed.unauthenticated.len() > self.max_unauthenticated
            && let Some(oldest) = listed.unauthenticated.pop_first()
            && let Some(client) = listed.all.get(&oldest)
        {
            client.crowded_out.notify_one();
            listed.crowded_out.insert(oldest);
        }
    }

    /// Clients holding a place: those connected, less those crowded out and closing.
    pub fn len(&self) -> usize {
        let listed = self.lock();
        listed.all.len() - listed.crowded_out.len()
    }

    /// Clients connected, those crowded out and closing included (`INFO`'s count, which agrees
    /// with `CLIENT LIST`).
    pub fn connected(&self) -> usize {
        self.lock().all.len()
    }

    /// Whether client `id` was crowded out (it holds no place, whatever it did since).
    pub fn is_crowded_out(&self, id: ClientId) -> bool {
        self.lock().crowded_out.contains(&id)
    }

    /// `CLIENT LIST`: every client, or those with the given ids, in id order.
    pub fn describe(&self, ids: &[ClientId]) -> String {
        let clients: Vec<Arc<Client>> = self.lock().all.values().cloned().collect();
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
        for client in self.lock().all.values() {
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
        let list = Arc::new(ClientList::new(10, usize::MAX));
        let first = list.register(1, addr(5001), addr(6380), true);
        let second = list.register(2, addr(5002), addr(6380), true);
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

    #[test]
    fn past_the_total_the_client_leaving_most_unread_is_cut() {
        let list = Arc::new(ClientList::new(10, 1000));
        let small = list.register(1, addr(5001), addr(6380), true);
        let big = list.register(2, addr(5002), addr(6380), true);
        list.note_unread(&small.client, 300);
        list.note_unread(&big.client, 600);
        assert!(!big.client.cut.load(Ordering::Relaxed));
        list.note_unread(&small.client, 500);
        assert!(big.client.cut.load(Ordering::Relaxed), "the largest is cut");
        assert!(!small.client.cut.load(Ordering::Relaxed));
        assert_eq!(list.unread(), 500, "the cut client no longer counts");
        list.note_unread(&small.client, 0);
        assert_eq!(list.unread(), 0);
    }

    #[test]
    fn a_new_unauthenticated_client_beyond_the_share_crowds_out_the_oldest() {
        let list = Arc::new(ClientList::new(2, usize::MAX));
        let oldest = list.register(1, addr(5001), addr(6380), false);
        let second = list.register(2, addr(5002), addr(6380), false);
        let _authenticated = list.register(3, addr(5003), addr(6380), true);
        let notified = |client: &Client| {
            let waiting = client.crowded_out.notified();
            tokio::pin!(waiting);
            // True if a notification was stored (`notify_one` keeps one when nobody waits).
            waiting.as_mut().enable()
        };
        assert!(!notified(&oldest.client), "no room needed yet");
        let _third = list.register(4, addr(5004), addr(6380), false);
        assert!(
            notified(&oldest.client),
            "the oldest unauthenticated client is crowded out"
        );
        assert_eq!(list.len(), 3, "and no longer holds a place");
        assert!(list.is_crowded_out(1) && !list.is_crowded_out(2));
        assert_eq!(
            (list.describe(&[]).lines().count(), list.connected()),
            (4, 4),
            "but is listed and counted connected until it has closed"
        );
        list.set_authenticated(1, true);
        list.set_authenticated(1, false);
        assert_eq!(
            list.len(),
            3,
            "an AUTH or RESET after it gives no place back"
        );
        let _fifth = list.register(5, addr(5005), addr(6380), false);
        assert!(
            notified(&second.client),
            "the share is the same two: the next oldest goes"
        );
    }

    /// A crowded-out client that does not read keeps its unread replies counted, so the
    /// proxy-wide limit cuts it, not the clients still holding places.
    #[test]
    fn a_crowded_out_client_is_cut_at_the_total_reply_limit() {
        let list = Arc::new(ClientList::new(1, 1000));
        let reading = list.register(1, addr(5001), addr(6380), true);
        let stuck = list.register(2, addr(5002), addr(6380), false);
        list.note_unread(&stuck.client, 900);
        let _newer = list.register(3, addr(5003), addr(6380), false);
        list.note_unread(&reading.client, 200);
        assert!(stuck.client.cut.load(Ordering::Relaxed));
        assert!(!reading.client.cut.load(Ordering::Relaxed));
    }
}
