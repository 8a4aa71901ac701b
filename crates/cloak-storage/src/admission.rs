//! How many connections `cloak server` holds, and which ones count.
//!
//! Only connections that completed TLS and the handshake count against `--max-connections`:
//! they belong to proxies that proved who they are. Connections still handshaking have their
//! own small budget, [`PENDING_HANDSHAKES`]; one more closes the oldest of them. So idle sockets
//! from anyone who can reach the port neither take the places of proxies nor keep a proxy from
//! completing its handshake: that takes it a round trip or two, in which a flood would have to
//! open [`PENDING_HANDSHAKES`] connections to push it out (and the proxy retries).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Connections handshaking at once; one more closes the oldest.
pub const PENDING_HANDSHAKES: usize = 64;

/// Counts the connections admitted and handshaking.
pub(crate) struct Admission {
    max_admitted: Option<usize>,
    admitted: AtomicUsize,
    /// Handshaking connections by arrival (ids grow), each with what closes it.
    pending: Mutex<BTreeMap<u64, Arc<Notify>>>,
    next: AtomicU64,
    /// Handshakes that failed, warned about at most once a second.
    refused: Mutex<RateLimited>,
}

/// A connection handshaking; dropping it (the handshake ended) frees its place.
pub(crate) struct Handshaking {
    admission: Arc<Admission>,
    id: u64,
    /// Notified when newer connections crowd this one out.
    pub crowded_out: Arc<Notify>,
}

/// A connection admitted; dropping it (the connection ended) frees its place.
pub(crate) struct Admitted(Arc<Admission>);

impl Admission {
    pub fn new(max_admitted: Option<usize>) -> Arc<Self> {
        Arc::new(Self {
            max_admitted,
            admitted: AtomicUsize::new(0),
            pending: Mutex::default(),
            next: AtomicU64::new(0),
            refused: Mutex::default(),
        })
    }

    fn pending(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<Notify>>> {
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether every place for admitted connections is taken.
    pub fn is_full(&self) -> bool {
        self.max_admitted
            .is_some_and(|max| self.admitted.load(Ordering::Relaxed) >= max)
    }

    /// A new connection starts its handshake; the oldest handshaking one is crowded out if
    /// there are too many.
    pub fn start(self: &Arc<Self>) -> Handshaking {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let crowded_out = Arc::new(Notify::new());
        let mut pending = self.pending();
        pending.insert(id, crowded_out.clone());
        if pending.len() > PENDING_HANDSHAKES
            && let Some((_, oldest)) = pending.pop_first()
        {
            oldest.notify_one();
        }
        Handshaking {
            admission: self.clone(),
            id,
            crowded_out,
        }
    }

    /// The handshake succeeded: takes a place, or `None` if others took the last one meanwhile.
    pub fn admit(self: &Arc<Self>, handshaking: Handshaking) -> Option<Admitted> {
        drop(handshaking);
        let max = self.max_admitted.unwrap_or(usize::MAX);
        self.admitted
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Admitted(self.clone()))
    }

    /// Warns that `peer` was refused, unless a warning went out less than a second ago: anyone
    /// who can reach the port can fail handshakes, and must not be able to flood the log.
    pub fn note_refused(&self, peer: SocketAddr, error: &dyn std::fmt::Display) {
        let mut refused = self
            .refused
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match refused.note() {
            Some(refused) => {
                tracing::warn!(%peer, %error, refused, "storage connections refused")
            }
            None => tracing::debug!(%peer, %error, "storage connection refused"),
        }
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.admission.pending().remove(&self.id);
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.admitted.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts events so that a flood of them gives a warning a second, not a line each.
#[derive(Default)]
pub(crate) struct RateLimited {
    since_warning: u64,
    warned: Option<Instant>,
}

impl RateLimited {
    /// Counts one event; returns how many there were since the last warning if it is time for
    /// the next one.
    pub fn note(&mut self) -> Option<u64> {
        self.since_warning += 1;
        if self
            .warned
            .is_some_and(|at| at.elapsed() < Duration::from_secs(1))
        {
            return None;
        }
        self.warned = Some(Instant::now());
        Some(std::mem::take(&mut self.since_warning))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_admitted_connections_take_places_and_the_oldest_handshake_is_crowded_out() {
        let admission = Admission::new(Some(1));
        let handshakes: Vec<Handshaking> =
            (0..PENDING_HANDSHAKES).map(|_| admission.start()).collect();
        assert!(
            !admission.is_full(),
            "handshaking connections take no place"
        );
        let newest = admission.start();
        let crowded = handshakes[0].crowded_out.notified();
        tokio::pin!(crowded);
        assert!(crowded.as_mut().enable(), "the oldest handshake is closed");
        let admitted = admission.admit(newest);
        assert!(admitted.is_some());
        assert!(admission.is_full());
        assert!(
            admission.admit(admission.start()).is_none(),
            "no place left"
        );
        drop(admitted);
        assert!(!admission.is_full());
    }

    #[test]
    fn a_flood_of_events_warns_once() {
        let mut limited = RateLimited::default();
        assert_eq!(limited.note(), Some(1));
        assert_eq!(limited.note(), None);
        assert_eq!(limited.note(), None);
    }
}
