//! The start hook (`ProxyOptions::after_start`, where the binary returns recovery's memory to the
//! operating system) runs once per start, and only once storage holds every recovered record
//! again: run earlier, recovery's records are still alive and nothing is returned.
//!
//! Shown to fail: with `unsafe` reporting no unwritten records while it restores them (as it did
//! before the hook), the hook ran after the first of its restore requests landed, with 1024 of
//! the 3000 records in storage.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use cloak_core::{Entry, Kind, Record, Slot};
use cloak_schemes::SchemeName;
use common::{Setup, Tampering};
use redis::AsyncCommands;

/// Enough records for several of `unsafe`'s restore requests (1024 records each).
const RECORDS: usize = 3000;
const CAPACITY: u64 = 4096;

/// The storage of the proxy under test, for the hook to look at.
static STORAGE: Mutex<Option<Arc<Tampering>>> = Mutex::new(None);
/// How often the hook ran, and how many elements storage held when it last did.
static CALLS: AtomicUsize = AtomicUsize::new(0);
static STORED_AT_CALL: AtomicUsize = AtomicUsize::new(0);

fn hook() {
    CALLS.fetch_add(1, Ordering::SeqCst);
    let storage = STORAGE.lock().unwrap_or_else(|e| e.into_inner());
    let stored = storage.as_ref().map_or(0, |s| s.elements());
    STORED_AT_CALL.store(stored, Ordering::SeqCst);
}

fn key(i: usize) -> Bytes {
    Bytes::from(format!("key{i}"))
}

fn recovered() -> Vec<(Slot, Record)> {
    (0..RECORDS)
        .map(|i| {
            let value = Entry {
                kind: Kind::String,
                deadline: None,
                data: Bytes::from(format!("value{i}")),
            }
            .seal();
            let record = Record {
                version: 1,
                key: key(i),
                value,
            };
            (i as Slot, record)
        })
        .collect()
}

/// One test for both schemes: the hook and what it saw are process-wide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_hook_runs_once_after_every_recovered_record_is_stored() {
    for scheme in [SchemeName::Unsafe, SchemeName::Cloak] {
        CALLS.store(0, Ordering::SeqCst);
        STORED_AT_CALL.store(0, Ordering::SeqCst);
        let storage = Arc::new(Tampering::new());
        *STORAGE.lock().unwrap() = Some(storage.clone());
        let mut setup = Setup::new(scheme, CAPACITY);
        setup.recovered = recovered();
        setup.after_start = Some(hook);
        setup.storage = Some(storage);
        let proxy = setup.start().await;

        let mut con = proxy.connection().await;
        for i in [0, RECORDS / 2, RECORDS - 1] {
            let value: Option<String> = con.get(&key(i)[..]).await.unwrap();
            assert_eq!(value.as_deref(), Some(&*format!("value{i}")), "{scheme}");
        }
        let () = con.set("after", "the start").await.unwrap();
        let value: Option<String> = con.get("after").await.unwrap();
        assert_eq!(value.as_deref(), Some("the start"), "{scheme}");

        // Cloak answers reads during its fill, from the recovered records: the hook runs when
        // the fill is done, which the reads above need not wait for.
        let waited = std::time::Instant::now();
        while CALLS.load(Ordering::SeqCst) == 0 && waited.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(CALLS.load(Ordering::SeqCst), 1, "{scheme}: calls");
        // Cloak's fill writes every address; unsafe restores the records it was handed.
        assert!(
            STORED_AT_CALL.load(Ordering::SeqCst) >= RECORDS,
            "{scheme}: the hook ran with {} of {RECORDS} records in storage",
            STORED_AT_CALL.load(Ordering::SeqCst)
        );
        proxy.shutdown().await;
    }
}
