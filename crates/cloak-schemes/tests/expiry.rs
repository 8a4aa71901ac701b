//! The reaper frees the slots of expired keys with bounded work per tick, through the scheme.
//!
//! Driven step by step (no simulator), so each tick's storage traffic is counted on its own: a
//! hundred keys that expire together are deleted [`REAP_PER_TICK`] at a time. Shown to fail when
//! the bound is removed (checked by replacing both `REAP_PER_TICK` bounds in `Engine::reap` with
//! `usize::MAX`: the first tick then wrote all 100, and the test failed).

use std::time::{Duration, Instant};

use bytes::Bytes;
use cloak_core::engine::REAP_PER_TICK;
use cloak_core::{
    Command, Db, Deadline, Engine, KeyDirectory, Limits, MemoryStore, Outcome, RecordLayout,
    SetCondition, SetExpiry, StorageOp,
};
use cloak_crypto::{KeyHasher, MasterKey};
use cloak_schemes::{SchemeName, SchemeOptions, Start, StoreSpec, build};

const KEYS: usize = 100;

/// Answers every storage and journal request until the engine is quiet; returns how many
/// elements storage was asked to write.
fn settle(engine: &mut Engine, store: &mut MemoryStore, now: Instant) -> usize {
    let mut written = 0;
    loop {
        let mut busy = false;
        while let Some(request) = engine.poll_storage() {
            busy = true;
            if let StorageOp::Write(writes) = &request.op {
                written += writes.len();
            }
            let reply = store.apply(request.op);
            engine.handle_storage(now, now, request.id, Ok(reply));
        }
        while let Some(request) = engine.poll_journal() {
            busy = true;
            engine.handle_journaled(now, request.id, Ok(()));
        }
        if !busy {
            return written;
        }
    }
}

#[test]
fn expired_keys_are_deleted_a_bounded_number_per_tick() {
    let master = MasterKey::from_bytes([5; 32]);
    let store_spec = StoreSpec {
        capacity: 128,
        layout: RecordLayout {
            max_key: 16,
            max_value: 16,
        },
        seed: Some(1),
    };
    let scheme = build(
        SchemeName::Unsafe,
        &store_spec,
        &SchemeOptions::default(),
        &master,
        Start::default(),
    )
    .unwrap();
    let limits = Limits {
        max_key: 16,
        max_value: 16,
        max_keys_per_command: 8,
    };
    let start = Instant::now();
    let mut engine = Engine::new(
        scheme,
        KeyDirectory::new(KeyHasher::new(&master), 128),
        limits,
    )
    .with_wall_clock(start, 1_000_000);
    let mut store = MemoryStore::default();
    for i in 0..KEYS {
        let command = Command::SetExpiring {
            key: Bytes::from(format!("k{i}")),
            value: Bytes::from_static(b"v"),
            condition: SetCondition::Always,
            expiry: SetExpiry::At(Deadline::In(50)),
            name: "set",
        };
        engine.submit(start, 1, i as u64, command);
    }
    settle(&mut engine, &mut store, start);
    while engine.poll_outcome().is_some() {}
    assert_eq!(engine.expiring_keys(), KEYS);
    let due = engine.poll_timeout().expect("the reaper has a deadline");
    assert_eq!(due, start + Duration::from_millis(50));

    let later = start + Duration::from_millis(60);
    let mut per_tick = Vec::new();
    while engine.poll_timeout().is_some_and(|at| at <= later) {
        engine.handle_timeout(later);
        per_tick.push(settle(&mut engine, &mut store, later));
    }
    assert!(
        per_tick.iter().all(|&n| n <= REAP_PER_TICK),
        "a tick deleted more than {REAP_PER_TICK}: {per_tick:?}"
    );
    assert_eq!(per_tick.iter().sum::<usize>(), KEYS, "{per_tick:?}");
    assert_eq!(engine.expiring_keys(), 0);
    engine.submit(later, 1, 1_000, Command::DbSize(Db::default()));
    let (_, size) = engine.poll_outcome().unwrap();
    assert_eq!(size, Outcome::Integer(0));
    // The slots came back: the store takes as many new keys again.
    for i in 0..KEYS {
        let command = Command::Set {
            key: Bytes::from(format!("n{i}")),
            value: Bytes::from_static(b"v"),
            condition: SetCondition::Always,
        };
        engine.submit(later, 1, 2_000 + i as u64, command);
    }
    settle(&mut engine, &mut store, later);
    while let Some((_, outcome)) = engine.poll_outcome() {
        assert!(
            matches!(outcome, Outcome::Ok | Outcome::Integer(_)),
            "{outcome:?}"
        );
    }
}
