//! Read-modify-write commands (INCR, APPEND, GETDEL, SETNX, `SET … GET`, RENAME, EXEC) cause
//! the storage traffic of reads and writes of their keys and nothing else: for schemes whose
//! every op is an access of its own, an INCR looks exactly like a GET followed by a SET of the
//! key (requests by kind and size), and the traffic never depends on whether the key existed or
//! what the command decided (a SETNX that sets nothing, a GETDEL of an absent key).
//!
//! Pancake is left out: its batches carry real accesses by coin flip and also go out on a fixed
//! schedule, so how many batches a window of commands shows is chance, not the commands' doing.
//! `encrypted` shows storage whether an op reads or writes anyway (see `absent_keys.rs`), so for
//! it only the first property is checked.
//!
//! Shown to fail on a broken engine: with units writing only what changed and no cover for an
//! unchanged key (`covers` forced to 0 in `Engine::unit_read`), SETNX on a present key and
//! GETDEL on an absent one make one access fewer than on their counterparts.

use std::time::Duration;

use bytes::Bytes;
use cloak_core::{
    AccessKind, Command, Engine, KeyDirectory, Limits, Outcome, RecordLayout, SetCondition,
    Simulator, Update,
};
use cloak_crypto::{KeyHasher, MasterKey};
use cloak_schemes::{SchemeName, SchemeOptions, Start, StoreSpec, build};

const CAPACITY: u64 = 64;

fn simulator(name: SchemeName) -> Simulator {
    let master = MasterKey::from_bytes([5; 32]);
    let store = StoreSpec {
        capacity: CAPACITY,
        layout: RecordLayout {
            max_key: 16,
            max_value: 16,
        },
        seed: Some(7),
    };
    let scheme = build(
        name,
        &store,
        &SchemeOptions::default(),
        &master,
        Start::default(),
    )
    .expect("valid scheme");
    let directory = KeyDirectory::new(KeyHasher::new(&master), CAPACITY as usize);
    let limits = Limits {
        max_key: 16,
        max_value: 16,
        max_keys_per_command: 8,
    };
    Simulator::new(Engine::new(scheme, directory, limits))
        .with_storage_delay(Duration::from_micros(300))
}

fn key(name: &str) -> Bytes {
    Bytes::copy_from_slice(name.as_bytes())
}

/// What storage saw: requests by kind and size, sorted (concurrent requests interleave by
/// chance).
type Shape = Vec<(AccessKind, usize)>;

/// Runs commands one after the other on a settled store; what storage saw of all of them.
fn traffic(sim: &mut Simulator, commands: Vec<Command>) -> Shape {
    sim.run_until(Duration::from_secs(60), Simulator::storage_idle);
    sim.take_trace();
    for command in commands {
        let outcome = sim
            .execute(1, command.clone())
            .expect("the command completes");
        assert!(
            !matches!(outcome, Outcome::Error(_)),
            "{command:?}: {outcome:?}"
        );
    }
    sim.run_until(Duration::from_secs(60), Simulator::storage_idle);
    let mut shape: Shape = sim
        .take_trace()
        .iter()
        .map(|seen| (seen.kind, seen.addrs.len()))
        .collect();
    shape.sort_unstable_by_key(|&(kind, len)| (kind as u8, len));
    shape
}

fn update(name: &str, op: Update) -> Command {
    Command::Update { key: key(name), op }
}

fn set(name: &str, value: &str) -> Command {
    Command::Set {
        key: key(name),
        value: key(value),
        condition: SetCondition::Always,
    }
}

/// Checks that an INCR is a GET and a SET to storage, and, with `decisions`, that nothing a
/// command decides shows either.
fn check(name: SchemeName, decisions: bool) {
    let mut sim = simulator(name);
    for k in ["a", "b", "c", "d"] {
        assert_eq!(sim.execute(1, set(k, "1")), Some(Outcome::Ok));
    }
    sim.record();

    // An INCR is a GET and a SET of its key, to storage.
    let get_then_set = traffic(&mut sim, vec![Command::Get(key("a")), set("a", "2")]);
    assert!(!get_then_set.is_empty(), "{name:?}: no traffic");
    let incr = traffic(&mut sim, vec![update("a", Update::IncrBy(1))]);
    assert_eq!(incr, get_then_set, "{name:?}: INCR against GET + SET");
    if !decisions {
        return;
    }

    // What a command decides, and whether its key exists, does not show.
    let pairs = [
        (
            update("b", Update::IncrBy(1)),
            update("new", Update::IncrBy(1)),
        ),
        (
            update("b", Update::SetIfAbsent(key("x"))),
            update("new2", Update::SetIfAbsent(key("x"))),
        ),
        (
            update("c", Update::GetDel),
            update("absent", Update::GetDel),
        ),
        (
            update("b", Update::Append(key("x"))),
            update("new3", Update::Append(key("x"))),
        ),
        (
            update(
                "b",
                Update::Replace {
                    value: key("y"),
                    condition: SetCondition::IfAbsent,
                },
            ),
            update(
                "new4",
                Update::Replace {
                    value: key("y"),
                    condition: SetCondition::IfAbsent,
                },
            ),
        ),
        (
            Command::Rename {
                from: key("d"),
                to: key("e"),
                only_if_absent: true,
            },
            Command::Rename {
                from: key("e"),
                to: key("b"),
                only_if_absent: true,
            },
        ),
        (
            Command::Transaction(vec![update("b", Update::IncrBy(1)), Command::Get(key("e"))]),
            Command::Transaction(vec![
                update("absent2", Update::IncrBy(1)),
                Command::Get(key("absent3")),
            ]),
        ),
    ];
    for (first, second) in pairs {
        let described = format!("{first:?} against {second:?}");
        let seen_first = traffic(&mut sim, vec![first]);
        let seen_second = traffic(&mut sim, vec![second]);
        assert!(!seen_first.is_empty(), "{name:?}: {described}: no traffic");
        assert_eq!(
            seen_first, seen_second,
            "{name:?}: storage can tell {described}"
        );
    }
}

#[test]
fn path_oram_hides_what_updates_do() {
    check(SchemeName::PathOram, true);
}

#[test]
fn curious_hides_what_updates_do() {
    check(SchemeName::Curious, true);
}

#[test]
fn encrypted_shows_an_incr_as_a_get_and_a_set() {
    check(SchemeName::Encrypted, false);
}
