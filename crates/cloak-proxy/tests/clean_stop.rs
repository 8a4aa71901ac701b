//! A clean stop waits for the scheme's own storage requests in flight, not only for the
//! acknowledged writes. A write-back moves elements between addresses; a proxy that exits while
//! one is on its way can cut it off midway (a Redis Cluster applies each node's share on its
//! own), and storage is then left with some element at no address at all.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cloak_schemes::SchemeName;
use common::{Setup, Tampering};

/// Long beside the 2 ms batch interval of [`Setup`], short beside its drain timeout (5 s) and
/// its storage client's timeout (2 s).
const SLOW_WRITE: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_waits_until_storage_has_answered_every_write_it_was_sent() {
    for scheme in SchemeName::ALL {
        let storage = Arc::new(Tampering::new());
        let mut setup = Setup::new(scheme, 64);
        setup.storage = Some(storage.clone());
        // Pancake sends an idle batch every interval whatever storage is doing, and this
        // storage applies one write at a time: at 2 ms they would queue past the storage
        // client's timeout. Slower ticks leave the read's write-back as the one in flight.
        setup.options.pancake.idle_batch_interval = Duration::from_secs(1);
        let proxy = setup.start().await;
        let mut con = proxy.connection().await;
        let _: () = redis::cmd("SET")
            .arg("key")
            .arg("value")
            .query_async(&mut con)
            .await
            .unwrap();

        // From now on every write takes a while to land. A read makes every scheme that hides
        // its accesses write something back (the path, the label, the batch) after the read is
        // answered; the batch schemes also keep writing back dummy batches on their own.
        storage
            .write_delay_ms
            .store(SLOW_WRITE.as_millis() as u64, Ordering::SeqCst);
        let before = storage.writes_begun.load(Ordering::SeqCst);
        let value: Option<String> = redis::cmd("GET")
            .arg("key")
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(value.as_deref(), Some("value"), "{scheme}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(con);
        let stopping = std::time::Instant::now();
        proxy.shutdown().await;
        // The proxy's drain timeout is 5 s: a stop that took that long gave up waiting.
        assert!(
            stopping.elapsed() < Duration::from_secs(4),
            "{scheme}: the stop ended only at the drain timeout ({:?})",
            stopping.elapsed()
        );

        let begun = storage.writes_begun.load(Ordering::SeqCst);
        let done = storage.writes_done.load(Ordering::SeqCst);
        if !matches!(scheme, SchemeName::Unsafe | SchemeName::Encrypted) {
            assert!(
                begun > before,
                "{scheme}: no write reached storage after the read, so this test shows nothing"
            );
        }
        assert_eq!(
            begun, done,
            "{scheme}: the proxy stopped while storage was still applying a write it had sent"
        );
    }
}
