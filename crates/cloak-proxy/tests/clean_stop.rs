//! A clean stop waits for the scheme's own storage requests in flight, not only for the
//! acknowledged writes. A write-back moves elements between addresses; a proxy that exits while
//! one is on its way can cut it off midway (a Redis Cluster applies each node's share on its
//! own), and storage is then left with some element at no address at all.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cloak_core::{JournalOp, Record, Slot};
use cloak_proxy::{Journal, JournalError};
use cloak_schemes::SchemeName;
use common::{Setup, Tampering};

/// Long beside the 2 ms batch interval of [`Setup`], short beside its drain timeout (5 s) and
/// its storage client's timeout (2 s).
const SLOW_WRITE: Duration = Duration::from_millis(30);

/// A journal that takes a while to commit, counting the commits it began and finished.
#[derive(Default)]
struct SlowJournal {
    begun: AtomicUsize,
    done: AtomicUsize,
}

impl Journal for SlowJournal {
    fn commit(&self, _ops: &[JournalOp]) -> Result<(), JournalError> {
        self.begun.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(SLOW_WRITE);
        self.done.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn records(&self) -> Result<Vec<(Slot, Record)>, JournalError> {
        Ok(Vec::new())
    }
}

/// Stops a proxy of `scheme` while its storage (and its journal, if `journal`) is slow to
/// apply writes and clients' commands are still coming in, and checks that it exits only once
/// storage has answered every write it was sent and every journal commit is over, and well
/// before the drain timeout.
async fn a_clean_stop_waits_for_every_write_it_sent(scheme: SchemeName, journal: bool) {
    let storage = Arc::new(Tampering::new());
    let journaled = Arc::new(SlowJournal::default());
    let mut setup = Setup::new(scheme, 64);
    setup.storage = Some(storage.clone());
    if journal {
        setup.journal = Some(journaled.clone());
    }
    // Pancake sends an idle batch every interval whatever storage is doing: faster than
    // storage applies them, they would queue past the storage client's timeout. At 20 ms one
    // write or another is always in flight, so a stop whose schedule does not end never ends.
    setup.options.pancake.idle_batch_interval = Duration::from_millis(20);
    let proxy = setup.start().await;
    let mut con = proxy.connection().await;
    let _: () = redis::cmd("SET")
        .arg("key")
        .arg("value")
        .query_async(&mut con)
        .await
        .unwrap();

    // From now on every write takes a while to land. A read makes every scheme that hides its
    // accesses write something back (the path, the label, the batch) after the read is
    // answered; the batch schemes also keep writing back dummy batches on their own.
    storage
        .write_delay_ms
        .store(SLOW_WRITE.as_millis() as u64, Ordering::SeqCst);
    let before = storage.writes_begun.load(Ordering::SeqCst);
    // Commands whose second step comes only after the first is answered (an INCR reads, then
    // writes), still running when the stop begins: the scheme must keep serving them.
    let mut incrs = proxy.connection().await;
    let counting = tokio::spawn(async move {
        let mut last = 0;
        for _ in 0..5 {
            match redis::cmd("INCR")
                .arg("counter")
                .query_async::<i64>(&mut incrs)
                .await
            {
                Ok(value) => last = value,
                Err(_) => break,
            }
        }
        last
    });
    let value: Option<String> = redis::cmd("GET")
        .arg("key")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(value.as_deref(), Some("value"));
    drop(con);
    let stopping = Instant::now();
    proxy.shutdown().await;
    let took = stopping.elapsed();
    let counted = counting.await.unwrap();

    let begun = storage.writes_begun.load(Ordering::SeqCst);
    let done = storage.writes_done.load(Ordering::SeqCst);
    let commits_begun = journaled.begun.load(Ordering::SeqCst);
    let commits_done = journaled.done.load(Ordering::SeqCst);
    assert_eq!(
        commits_begun, commits_done,
        "the proxy stopped in the middle of a journal commit"
    );
    if journal {
        assert!(
            commits_begun > 0,
            "nothing was journaled: this test shows nothing"
        );
    }
    if !matches!(scheme, SchemeName::Unsafe | SchemeName::Encrypted) {
        assert!(
            begun > before,
            "no write reached storage after the read, so this test shows nothing"
        );
    }
    assert_eq!(
        begun, done,
        "the proxy stopped while storage was still applying a write it had sent \
         (INCRs answered: {counted})"
    );
    // The proxy's drain timeout is 5 s: a stop that took that long gave up waiting.
    assert!(
        took < Duration::from_secs(4),
        "the stop ended only at the drain timeout ({took:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloak() {
    a_clean_stop_waits_for_every_write_it_sent(SchemeName::Cloak, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waffle() {
    a_clean_stop_waits_for_every_write_it_sent(SchemeName::Waffle, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pancake() {
    a_clean_stop_waits_for_every_write_it_sent(SchemeName::Pancake, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_oram() {
    a_clean_stop_waits_for_every_write_it_sent(SchemeName::PathOram, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curious() {
    a_clean_stop_waits_for_every_write_it_sent(SchemeName::Curious, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_and_unsafe() {
    a_clean_stop_waits_for_every_write_it_sent(SchemeName::Encrypted, false).await;
    a_clean_stop_waits_for_every_write_it_sent(SchemeName::Unsafe, false).await;
}

/// Path ORAM sends a path's write-back only once a journal commit says the blocks it moves are
/// durable: a stop must wait for that commit and the write-back after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_oram_with_a_journal() {
    a_clean_stop_waits_for_every_write_it_sent(SchemeName::PathOram, true).await;
}
