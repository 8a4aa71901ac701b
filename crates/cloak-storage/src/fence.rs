//! The fence a proxy raises in `cloak server` before it recovers a store.
//!
//! A proxy killed while a write-back was on its way leaves that write-back in the server: fully
//! received and not yet applied (a durable server applies it after its fsync), or still in the
//! connection's buffers. Applied while the next proxy scans the store, between two chunks of
//! the scan, it moves elements from addresses not yet scanned to addresses already scanned: the
//! scan sees them nowhere, and their keys would read as missing. A fence ends that: every other
//! connection stops taking requests (what it has received and not started is dropped, as if it
//! had never arrived), the requests they have started are waited out, and only then is the
//! fence answered. The scan that follows sees the store as the dead proxy left it, whole.
//!
//! A fence is named by a random token, and every connection the proxy opens after it names the
//! same token first (a JOIN). A proxy that is still running when another fences it off (a
//! paused machine that comes back, a rolling update that overlaps) connects again, and its JOIN
//! names an older token: it is refused by name, so its writes cannot land in the new proxy's
//! store. Connections that never JOIN (tools, proxies older than the fence) are served as
//! before. With a place to keep it (`cloak server --data-dir`), the token is written there,
//! synced, before the fence stops anything, and read back at start, so a restarted server
//! still refuses the proxy fenced off before the restart; without one, a restarted server
//! knows no token until the next fence, and takes any JOIN.
//!
//! The fence leaves the server nothing to learn: it says that a proxy is starting, which the
//! new connection and the full scan after it say anyway, and its token is random.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::StorageError;
use crate::wire::FenceToken;

/// A fresh random token for a fence a proxy raises (in `cloak server` or a Redis).
pub(crate) fn fresh_token() -> Result<FenceToken, StorageError> {
    let mut token = FenceToken::default();
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut token)
        .map_err(|_| StorageError("no randomness for a fence token".into()))?;
    Ok(token)
}

/// How long a fence waits for the other connections' started requests: a durable server's
/// fsync, or a read of a whole batch, takes well under this.
pub(crate) const FENCE_WAIT: Duration = Duration::from_secs(20);

/// The connections of one server, each of which a fence can stop, from their accept until they
/// end.
#[derive(Default)]
pub(crate) struct Fences {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Fenceable>>,
    /// Held by the fence in progress: a second one waits for it, then stops its connection (so
    /// two proxies starting at once do not stop each other's fence half way).
    one_at_a_time: tokio::sync::Mutex<()>,
    /// The last fence's token: a JOIN that names another is refused.
    token: Mutex<Option<FenceToken>>,
    /// Where the token is kept across restarts, if anywhere.
    token_file: Option<PathBuf>,
}

/// What a fence needs of a connection: a way to stop it, and to learn that it stopped.
///
/// A connection stays here until it has stopped, even once a fence has told it to: a fence that
/// gives up waiting (or is itself stopped) leaves it for the next fence to wait for.
struct Fenceable {
    stop: watch::Sender<bool>,
    /// Closed (its sender dropped) once the connection's [`Lease`] is gone: it has stopped.
    ended: watch::Receiver<()>,
}

/// A connection's place among the fenceable ones, given up when it is dropped.
pub(crate) struct Lease {
    id: u64,
    fences: Arc<Fences>,
    stop: watch::Receiver<bool>,
    _ended: watch::Sender<()>,
}

/// Why a fence could not be raised.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FenceError {
    /// Connections still inside a request when the wait ran out.
    #[error(
        "{0} other connection(s) still had a request in progress {FENCE_WAIT:?} after the fence \
         stopped them (is the server's disk stuck?); the next fence waits for them again"
    )]
    Timeout(usize),
    /// The token could not be kept where the server keeps it.
    #[error("the fence's token could not be kept in {0}: {1}")]
    Keep(String, std::io::Error),
}

impl Fences {
    /// Fences that keep their token in `token_file` (read now, if it is there), or in memory
    /// only.
    pub(crate) fn open(token_file: Option<PathBuf>) -> std::io::Result<Self> {
        let token = match &token_file {
            Some(path) => match std::fs::read(path) {
                Ok(bytes) => Some(FenceToken::try_from(bytes.as_slice()).map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "{} holds {} bytes, not a fence's token of 16",
                            path.display(),
                            bytes.len()
                        ),
                    )
                })?),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
                Err(error) => return Err(error),
            },
            None => None,
        };
        Ok(Self {
            token: Mutex::new(token),
            token_file,
            ..Self::default()
        })
    }

    /// Registers a newly accepted connection.
    pub(crate) fn lease(self: &Arc<Self>) -> Lease {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (stop_tx, stop) = watch::channel(false);
        let (ended_tx, ended) = watch::channel(());
        self.lock().insert(
            id,
            Fenceable {
                stop: stop_tx,
                ended,
            },
        );
        Lease {
            id,
            fences: self.clone(),
            stop,
            _ended: ended_tx,
        }
    }

    /// Stops every connection but `own` and waits until all of them have ended, at most
    /// `wait` (after any fence in progress). Returns how many it stopped. From its start on, a
    /// JOIN must name `token`: a stopped proxy that connects again is refused at once, even
    /// while this fence still waits.
    async fn fence(
        &self,
        own: u64,
        token: FenceToken,
        wait: Duration,
    ) -> Result<usize, FenceError> {
        let _turn = self.one_at_a_time.lock().await;
        if let Some(path) = &self.token_file {
            let (path, kept) = (path.clone(), path.display().to_string());
            tokio::task::spawn_blocking(move || crate::dir::write_synced(&path, &token))
                .await
                .map_err(|e| FenceError::Keep(kept.clone(), std::io::Error::other(e)))?
                .map_err(|e| FenceError::Keep(kept, e))?;
        }
        *unpoisoned(&self.token) = Some(token);
        let others: Vec<watch::Receiver<()>> = self
            .lock()
            .iter()
            .filter(|(id, _)| **id != own)
            .map(|(_, other)| {
                other.stop.send_replace(true);
                other.ended.clone()
            })
            .collect();
        let count = others.len();
        let mut waiting = count;
        let all_ended = async {
            for mut ended in others {
                // Nothing is ever sent: `changed` fails once the lease is dropped.
                while ended.changed().await.is_ok() {}
                waiting -= 1;
            }
        };
        match tokio::time::timeout(wait, all_ended).await {
            Ok(()) => Ok(count),
            Err(_) => Err(FenceError::Timeout(waiting)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Fenceable>> {
        unpoisoned(&self.open)
    }
}

impl Lease {
    /// Raises a fence for this connection: stops every other one and waits, at most `wait`
    /// (after any fence in progress), until all of them have ended. Returns how many it
    /// stopped. Holds no borrow of the lease, so that its connection can wait for
    /// [`Lease::fenced`] meanwhile.
    pub(crate) fn fence(
        &self,
        token: FenceToken,
        wait: Duration,
    ) -> impl std::future::Future<Output = Result<usize, FenceError>> + use<> {
        let (fences, own) = (self.fences.clone(), self.id);
        async move { fences.fence(own, token, wait).await }
    }

    /// Whether a connection may join the fence named `token`: it is the last fence's, or no
    /// fence was raised since the server started.
    pub(crate) fn may_join(&self, token: &FenceToken) -> bool {
        let current = unpoisoned(&self.fences.token);
        current.is_none_or(|current| current == *token)
    }

    /// Completes when a fence stops this connection.
    pub(crate) async fn fenced(&mut self) {
        // Err: the sender is gone, which only the server's end does.
        let _ = self.stop.wait_for(|stopped| *stopped).await;
    }
}

/// `mutex` locked, poisoned or not: every update under these locks is a single insert, remove
/// or assignment, so a panic elsewhere cannot leave one half done.
fn unpoisoned<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.fences.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    #[tokio::test]
    async fn a_fence_stops_the_others_and_waits_until_they_are_done() {
        let fences = Arc::new(Fences::default());
        let mut old = fences.lease();
        let mut own = fences.lease();
        let (done_tx, done) = oneshot::channel();
        // The old connection is in a request: it notices the fence only when that ends.
        let old_task = tokio::spawn(async move {
            old.fenced().await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = done_tx.send(());
            drop(old);
        });
        let started = tokio::time::Instant::now();
        assert_eq!(own.fence([7; 16], FENCE_WAIT).await.unwrap(), 1);
        assert!(started.elapsed() >= Duration::from_millis(200));
        done.await.unwrap();
        old_task.await.unwrap();
        // Its own connection goes on, and a later fence finds nobody else.
        let own_stopped = tokio::time::timeout(Duration::from_millis(20), own.fenced()).await;
        assert!(
            own_stopped.is_err(),
            "a fence does not stop its own connection"
        );
        assert_eq!(own.fence([7; 16], FENCE_WAIT).await.unwrap(), 0);
    }

    /// A connection as the server runs one that asked for a fence: the fence, unless a fence
    /// stops the connection first (`None`); either way the connection then ends.
    fn fencing(mut lease: Lease, wait: Duration) -> tokio::task::JoinHandle<Option<usize>> {
        tokio::spawn(async move {
            tokio::select! {
                fenced = lease.fence([7; 16], wait) => Some(fenced.expect("the fence is raised")),
                () = lease.fenced() => None,
            }
        })
    }

    /// Found by review: a fence that gave up waiting forgot the connections it had stopped, and
    /// the next fence (the proxy started again) returned at once while one of them was still
    /// in a request. The next fence waits for it again.
    #[tokio::test]
    async fn a_connection_that_never_finishes_fails_the_fence_and_the_next_waits_for_it_again() {
        let fences = Arc::new(Fences::default());
        let stuck = fences.lease();
        let own = fences.lease();
        let error = own
            .fence([7; 16], Duration::from_millis(50))
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("1 other connection(s)"),
            "{error}"
        );
        drop(own);
        let next = fencing(fences.lease(), Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!next.is_finished(), "waits for the stuck connection again");
        drop(stuck);
        assert_eq!(next.await.unwrap(), Some(1));
    }

    /// A token file that is not a token is refused by name at start, not taken for no fence.
    #[test]
    fn a_token_file_that_is_not_a_token_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fence-token");
        assert!(Fences::open(Some(path.clone())).is_ok(), "no file yet");
        std::fs::write(&path, b"abc").unwrap();
        let error = Fences::open(Some(path))
            .err()
            .expect("3 bytes are no token");
        assert!(error.to_string().contains("not a fence's token"), "{error}");
    }

    /// A proxy fenced off that connects again names its own fence's token: refused, while the
    /// proxy that fenced it joins, and so would any connection of a server that knows no fence.
    #[tokio::test]
    async fn only_the_last_fences_token_may_join() {
        let fences = Arc::new(Fences::default());
        let anyone = fences.lease();
        assert!(anyone.may_join(&[1; 16]), "no fence yet");
        anyone.fence([2; 16], FENCE_WAIT).await.unwrap();
        drop(anyone);
        let again = fences.lease();
        assert!(again.may_join(&[2; 16]));
        assert!(!again.may_join(&[1; 16]));
        again.fence([3; 16], FENCE_WAIT).await.unwrap();
        assert!(
            !fences.lease().may_join(&[2; 16]),
            "the earlier proxy is fenced off"
        );
    }

    /// Found by review: two fences at once could each stop the other's connection half way,
    /// and both fail. One at a time: the fence in progress stops the second fence's connection
    /// (that proxy's start fails, by name), and completes.
    #[tokio::test]
    async fn a_fence_in_progress_stops_a_second_one_and_completes() {
        let fences = Arc::new(Fences::default());
        let stuck = fences.lease();
        let (first, second) = (fences.lease(), fences.lease());
        let first = fencing(first, Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let second = fencing(second, Duration::from_secs(5));
        assert_eq!(
            second.await.unwrap(),
            None,
            "stopped while it waited its turn"
        );
        assert!(!first.is_finished(), "still waits for the stuck connection");
        drop(stuck);
        assert_eq!(first.await.unwrap(), Some(2));
    }
}
