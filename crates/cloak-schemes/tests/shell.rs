//! What the shell guarantees every scheme, checked on the schemes themselves (not through the
//! engine, whose own check would hide a scheme's): storage cannot make a scheme answer a read
//! with a value it never stored, by answering the read with the acknowledgement of a write.
//!
//! Before the shell, `unsafe` and `encrypted` took a `Done` answering a read for a write's
//! acknowledgement and answered the read `Written` (nil to a Redis client); this test fails on
//! that code (checked by running it against 639ca91's `src`).

use std::time::{Duration, Instant};

use cloak_core::{
    Op, OpId, Record, RecordLayout, Reply, Scheme, SchemeError, StorageOp, StorageReply,
};
use cloak_crypto::MasterKey;
use cloak_schemes::{SchemeName, SchemeOptions, Start, StoreSpec, build};

fn scheme(name: SchemeName) -> Box<dyn Scheme> {
    let store = StoreSpec {
        capacity: 64,
        layout: RecordLayout {
            max_key: 16,
            max_value: 16,
        },
        seed: Some(5),
    };
    let mut options = SchemeOptions::default();
    // No cache: the read must go to storage.
    options.cloak.cache_size = 0;
    let master = MasterKey::from_bytes([3; 32]);
    build(name, &store, &options, &master, Start::default()).expect("valid scheme")
}

/// Plays a storage server that acknowledges everything, reads included, until `done` says what
/// it waited for has happened; returns that.
fn serve_until<T>(
    scheme: &mut dyn Scheme,
    mut done: impl FnMut(&mut dyn Scheme) -> Option<T>,
) -> T {
    let mut now = Instant::now();
    for _ in 0..10_000 {
        while let Some(request) = scheme.poll_storage() {
            let reply = match request.op {
                StorageOp::Scan { .. } => StorageReply::Entries(Vec::new()),
                _ => StorageReply::Done,
            };
            scheme.handle_storage(now, now, request.id, Ok(reply));
        }
        while let Some(journal) = scheme.outbox().poll_journal() {
            scheme.handle_journaled(now, journal.id, Ok(()));
        }
        if let Some(done) = done(scheme) {
            return done;
        }
        now = scheme
            .poll_timeout()
            .unwrap_or(now + Duration::from_millis(1))
            .max(now);
        scheme.handle_timeout(now);
    }
    panic!("never done");
}

/// The answer to `op`, storage acknowledging everything meanwhile.
fn answer_reads_with_done(scheme: &mut dyn Scheme, op: OpId) -> Reply {
    serve_until(scheme, |scheme| {
        std::iter::from_fn(|| scheme.outbox().poll_reply())
            .find_map(|(id, reply)| (id == op).then_some(reply))
    })
}

fn a_done_answering_a_read_fails_it(name: SchemeName) {
    let mut scheme = scheme(name);
    // Until the initial fill is done, Cloak answers reads from the records the start recovered
    // (none here), with no storage request.
    serve_until(scheme.as_mut(), |scheme| {
        scheme.stats().filling.is_none().then_some(())
    });
    let now = Instant::now();
    scheme.submit(now, OpId(1), Op::Write(7, Record::empty()));
    scheme.submit(now, OpId(2), Op::Read(3));
    let reply = answer_reads_with_done(scheme.as_mut(), OpId(2));
    assert!(
        matches!(reply, Reply::Failed(SchemeError::StorageUnavailable(_))),
        "{name}: a read answered by a write's acknowledgement must fail, got {reply:?}"
    );
}

/// Every scheme whose read of a never-written slot goes to storage. Path ORAM is left out: it
/// knows such a slot has no block (no leaf), so it answers the read itself, and only its
/// position-less dummy access goes to storage.
#[test]
fn every_scheme_fails_a_read_answered_done() {
    for name in SchemeName::ALL {
        if name != SchemeName::PathOram {
            a_done_answering_a_read_fails_it(name);
        }
    }
}

#[test]
fn a_slot_beyond_the_store_is_refused() {
    for name in SchemeName::ALL {
        let mut scheme = scheme(name);
        let slots = scheme.slots();
        scheme.submit(Instant::now(), OpId(9), Op::Read(slots));
        let reply = answer_reads_with_done(scheme.as_mut(), OpId(9));
        assert!(
            matches!(reply, Reply::Failed(SchemeError::Overloaded(ref m)) if m.contains("does not exist")),
            "{name}: {reply:?}"
        );
    }
}
