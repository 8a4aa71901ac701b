//! The conformance suite against the in-process simulator. Each check panics with a precise
//! message on the first wrong outcome.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use cloak_core::{Command, CommandError, Outcome, SchemeError, SetCondition, Simulator};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::commands::{get, scheme_error, set, value};
use crate::linearizability::{self, Event, Kind};
use crate::workload::ClientModel;

/// Generous bound on virtual time for any single wait.
const PATIENCE: Duration = Duration::from_secs(600);

pub(crate) fn wait_for_outcomes(sim: &mut Simulator) {
    assert!(
        sim.run_until(PATIENCE, Simulator::has_outcomes),
        "no command completed within {PATIENCE:?} of virtual time"
    );
}

/// The shape of a model-checked workload.
#[derive(Clone, Copy, Debug)]
pub struct ModelRun {
    pub clients: u64,
    /// Keys each client owns.
    pub keys: usize,
    /// Commands each client sends.
    pub commands: usize,
    /// Commands each client keeps in flight.
    pub depth: usize,
    pub max_value: usize,
    /// Idle time before everything is read back.
    pub settle: Duration,
    pub seed: u64,
}

/// Every client sends its commands on its own keys, every outcome checked against the model;
/// then every key is read back by a fresh client after the settle time, and `DBSIZE` is checked.
pub fn model_workload(sim: &mut Simulator, run: ModelRun) {
    let ModelRun {
        clients,
        keys,
        commands,
        depth,
        max_value,
        settle,
        seed,
    } = run;
    let mut models: Vec<ClientModel> = (0..clients)
        .map(|c| ClientModel::new(c, keys, max_value, seed))
        .collect();
    let mut sent = vec![0usize; clients as usize];
    let mut in_flight = vec![0usize; clients as usize];
    let mut expected: HashMap<u64, (u64, Command, Outcome)> = HashMap::new();
    loop {
        for c in 0..clients as usize {
            while sent[c] < commands && in_flight[c] < depth {
                let (command, outcome) = models[c].next_command();
                let token = sim.submit(c as u64, command.clone());
                expected.insert(token, (c as u64, command, outcome));
                sent[c] += 1;
                in_flight[c] += 1;
            }
        }
        if expected.is_empty() {
            break;
        }
        wait_for_outcomes(sim);
        for (token, _, outcome) in sim.drain_outcomes() {
            let (client, command, want) = expected.remove(&token).expect("known token");
            assert_eq!(
                outcome, want,
                "client {client}: {command:?} gave {outcome:?}, the model says {want:?}"
            );
            in_flight[client as usize] -= 1;
        }
    }

    sim.run_for(settle);
    let reader = clients + 1;
    for model in &models {
        for i in 0..keys {
            let key = model.key(i);
            let got = sim.execute(reader, Command::Get(key.clone()));
            assert_eq!(
                got,
                Some(Outcome::Value(model.value(&key))),
                "key {key:?} after settling"
            );
        }
    }
    let total: usize = models.iter().map(ClientModel::len).sum();
    assert_eq!(
        sim.execute(reader, Command::DbSize(Default::default())),
        Some(Outcome::Integer(total as i64))
    );
}

/// Pipelined commands of one client on one key take effect in the order sent.
pub fn pipelined_order(sim: &mut Simulator) {
    let key = Bytes::from_static(b"pipelined");
    let set = |v: &'static str| Command::Set {
        key: key.clone(),
        value: Bytes::from_static(v.as_bytes()),
        condition: SetCondition::Always,
    };
    let script = vec![
        (Command::Get(key.clone()), Outcome::Value(None)),
        (set("1"), Outcome::Ok),
        (Command::Get(key.clone()), Outcome::Value(Some("1".into()))),
        (set("2"), Outcome::Ok),
        (set("3"), Outcome::Ok),
        (Command::Get(key.clone()), Outcome::Value(Some("3".into()))),
        (Command::Del(vec![key.clone()]), Outcome::Integer(1)),
        (Command::Get(key.clone()), Outcome::Value(None)),
        (Command::Exists(vec![key.clone()]), Outcome::Integer(0)),
        (set("4"), Outcome::Ok),
        (
            Command::MGet(vec![key.clone(), key.clone()]),
            Outcome::Values(vec![Some("4".into()); 2]),
        ),
    ];
    let tokens: Vec<u64> = script
        .iter()
        .map(|(c, _)| sim.submit(7, c.clone()))
        .collect();
    for (token, (command, want)) in tokens.into_iter().zip(script) {
        assert!(
            sim.run_until(PATIENCE, |s| s.has_outcome(token)),
            "{command:?} never completed"
        );
        assert_eq!(sim.outcome(token), Some(want), "{command:?}");
    }
}

/// Many clients write distinct values to a few shared keys and read them concurrently,
/// starting at staggered instants so operations overlap in every way; the history of every key
/// must be linearizable. Use more keys than the scheme caches so reads also reach storage.
pub fn shared_registers(
    sim: &mut Simulator,
    keys: usize,
    clients: u64,
    ops_per_client: usize,
    seed: u64,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut histories: Vec<Vec<Event>> = vec![Vec::new(); keys];
    struct InFlight {
        client: usize,
        key: usize,
        invoked: u64,
        /// The value written, for a write.
        write: Option<Vec<u8>>,
    }
    let mut pending: HashMap<u64, InFlight> = HashMap::new();
    let mut remaining = vec![ops_per_client; clients as usize];
    let mut busy = vec![false; clients as usize];
    let mut written = 0u64;
    while !pending.is_empty() || remaining.iter().any(|&r| r > 0) {
        for c in 0..clients as usize {
            if busy[c] || remaining[c] == 0 || rng.random_bool(0.3) {
                continue;
            }
            let k = rng.random_range(0..keys);
            let key = Bytes::from(format!("register{k}"));
            let invoked = sim.elapsed().as_nanos() as u64;
            let (command, write) = if rng.random_bool(0.4) {
                written += 1;
                let value = format!("v{written}").into_bytes();
                let command = Command::Set {
                    key,
                    value: Bytes::from(value.clone()),
                    condition: SetCondition::Always,
                };
                (command, Some(value))
            } else {
                (Command::Get(key), None)
            };
            let token = sim.submit(c as u64, command);
            pending.insert(
                token,
                InFlight {
                    client: c,
                    key: k,
                    invoked,
                    write,
                },
            );
            busy[c] = true;
            remaining[c] -= 1;
        }
        sim.run_for(Duration::from_micros(rng.random_range(100..5_000)));
        for (token, at, outcome) in sim.drain_outcomes() {
            let InFlight {
                client,
                key: k,
                invoked,
                write,
            } = pending.remove(&token).expect("known token");
            busy[client] = false;
            let kind = match (write, outcome) {
                (Some(value), Outcome::Ok) => Kind::Write(value),
                (None, Outcome::Value(v)) => Kind::Read(v.map(|b| b.to_vec())),
                (w, o) => panic!("unexpected outcome {o:?} (write: {w:?})"),
            };
            histories[k].push(Event {
                invoked,
                returned: at.as_nanos() as u64,
                kind,
            });
        }
    }
    for (k, history) in histories.iter().enumerate() {
        if let Err(violation) = linearizability::check(history) {
            panic!(
                "register{k}: history of {} ops is not linearizable: {violation}",
                history.len()
            );
        }
    }
}

/// Storage that serves reads but refuses writes, as a server with a full disk does. No read
/// waits for the disk: each answers within a few seconds, with the value or a clear
/// "storage unavailable" error, even one queued behind a write-back storage keeps refusing.
/// Once storage accepts writes again every acknowledged write is there, and no key holds a
/// value nobody wrote.
pub fn full_disk(sim: &mut Simulator, keys: usize) {
    let key = |i: usize| format!("disk{i}");
    for i in 0..keys {
        let old = format!("old{i}");
        assert_eq!(sim.execute(1, set(&key(i), &old)), Some(Outcome::Ok));
    }
    sim.run_for(Duration::from_secs(2));

    sim.set_storage_full(true);
    let mut reads = Vec::new();
    let mut writes = Vec::new();
    for i in 0..keys {
        reads.push((i, sim.submit(10 + (i % 4) as u64, get(&key(i)))));
        if i % 2 == 0 {
            let new = format!("new{i}");
            writes.push((i, sim.submit(20, set(&key(i), &new))));
        }
    }
    let all_answered = sim.run_until(Duration::from_secs(10), |sim| {
        reads.iter().all(|(_, token)| sim.has_outcome(*token))
    });
    assert!(
        all_answered,
        "a read kept waiting while storage refused writes"
    );
    for (i, token) in reads {
        let outcome = sim.outcome(token);
        let expected = [value(&format!("old{i}")), value(&format!("new{i}"))];
        let unavailable = matches!(
            scheme_error(&outcome),
            Some(SchemeError::StorageUnavailable(_))
        );
        assert!(
            expected.contains(&outcome) || unavailable,
            "reading {} with a full disk gave {outcome:?}",
            key(i)
        );
    }
    sim.run_for(Duration::from_secs(3));
    let acknowledged: Vec<(usize, bool)> = writes
        .into_iter()
        .map(|(i, token)| (i, sim.outcome(token) == Some(Outcome::Ok)))
        .collect();

    sim.set_storage_full(false);
    sim.run_for(Duration::from_secs(10));
    for i in 0..keys {
        let got = sim.execute(30, get(&key(i)));
        let old = value(&format!("old{i}"));
        let new = value(&format!("new{i}"));
        match acknowledged.iter().find(|(w, _)| *w == i) {
            Some((_, true)) => assert_eq!(got, new, "{} after the disk had room", key(i)),
            Some((_, false)) => assert!(got == old || got == new, "{}: {got:?}", key(i)),
            None => assert_eq!(got, old, "{} after the disk had room", key(i)),
        }
    }
}

/// Storage that answers with replies of the wrong kind (`Done` to a read, values to a write)
/// makes commands fail or wait, never answer wrongly: no read comes back empty or with another
/// value. Once storage answers properly again, every key reads back what was written.
pub fn wrong_reply_kinds(sim: &mut Simulator, keys: usize) {
    let key = |i: usize| format!("kind{i}");
    let written = |i: usize| format!("v{i}");
    for i in 0..keys {
        assert_eq!(sim.execute(1, set(&key(i), &written(i))), Some(Outcome::Ok));
    }
    sim.run_for(Duration::from_secs(2));

    sim.set_storage_confused(true);
    let reads: Vec<(usize, u64)> = (0..keys)
        .map(|i| (i, sim.submit(10 + (i % 4) as u64, get(&key(i)))))
        .collect();
    sim.run_for(Duration::from_secs(5));
    let mut answered = Vec::new();
    for (i, token) in &reads {
        answered.push((*i, sim.outcome(*token)));
    }
    sim.set_storage_confused(false);
    sim.run_for(Duration::from_secs(10));
    for (i, early) in answered {
        let token = reads[i].1;
        let outcome = early.or_else(|| sim.outcome(token));
        let failed = matches!(outcome, Some(Outcome::Error(_)));
        assert!(
            outcome == value(&written(i)) || failed,
            "reading {} while storage gave wrong kinds of replies gave {outcome:?}",
            key(i)
        );
    }
    for i in 0..keys {
        assert_eq!(
            sim.execute(30, get(&key(i))),
            value(&written(i)),
            "{} once storage answered properly again",
            key(i)
        );
    }
}

/// Oversized keys and values and too-long commands are refused without effect; a full store
/// refuses new keys but still updates and deletes.
pub fn limits(sim: &mut Simulator, max_key: usize, max_value: usize, capacity: usize) {
    let long_key = Bytes::from(vec![b'k'; max_key + 1]);
    let big_value = Bytes::from(vec![b'v'; max_value + 1]);
    let set = |key: Bytes, value: Bytes| Command::Set {
        key,
        value,
        condition: SetCondition::Always,
    };
    assert_eq!(
        sim.execute(1, set(long_key.clone(), "v".into())),
        Some(Outcome::Error(CommandError::KeyTooLong {
            len: max_key + 1,
            max: max_key
        }))
    );
    assert_eq!(
        sim.execute(1, set("k".into(), big_value.clone())),
        Some(Outcome::Error(CommandError::ValueTooLarge {
            len: max_value + 1,
            max: max_value
        }))
    );
    assert!(matches!(
        sim.execute(
            1,
            Command::MSet(vec![("ok".into(), "v".into()), ("bad".into(), big_value)])
        ),
        Some(Outcome::Error(CommandError::ValueTooLarge { .. }))
    ));
    assert_eq!(
        sim.execute(1, Command::Exists(vec!["ok".into()])),
        Some(Outcome::Integer(0))
    );

    for i in 0..capacity {
        assert_eq!(
            sim.execute(1, set(format!("f{i}").into(), "v".into())),
            Some(Outcome::Ok)
        );
    }
    let full = Some(Outcome::Error(CommandError::StoreFull { capacity }));
    assert_eq!(sim.execute(1, set("one-more".into(), "v".into())), full);
    assert_eq!(
        sim.execute(
            1,
            Command::MSet(vec![("f0".into(), "w".into()), ("new".into(), "w".into())])
        ),
        full,
        "MSET with a new key is refused as a whole"
    );
    assert_eq!(
        sim.execute(1, Command::Get("f0".into())),
        Some(Outcome::Value(Some("v".into())))
    );
    assert_eq!(
        sim.execute(1, set("f0".into(), "updated".into())),
        Some(Outcome::Ok)
    );
    assert_eq!(
        sim.execute(1, Command::Del(vec!["f1".into()])),
        Some(Outcome::Integer(1))
    );
    assert_eq!(
        sim.execute(1, set("one-more".into(), "v".into())),
        Some(Outcome::Ok)
    );
    assert_eq!(
        sim.execute(1, Command::Get("one-more".into())),
        Some(Outcome::Value(Some("v".into())))
    );
    assert_eq!(
        sim.execute(1, Command::DbSize(Default::default())),
        Some(Outcome::Integer(capacity as i64))
    );
}

/// Rebuilds a crashed simulation the way the proxy does after a crash: scan storage, add the
/// journal, restore the key directory, and start a new scheme instance from the records.
pub struct Restart<'a> {
    /// How the scheme's elements are encoded (a fresh decoder for each recovery).
    pub format: &'a dyn Fn() -> cloak_core::ElementFormat,
    pub hasher: cloak_crypto::KeyHasher,
    pub capacity: usize,
    pub limits: cloak_core::Limits,
    /// Builds the new scheme instance from the recovered records and a generation base.
    pub build: &'a dyn Fn(cloak_core::RecoveredRecords, u64) -> Box<dyn cloak_core::Scheme>,
    pub journal_delay: Duration,
    pub storage_delay: Duration,
}

impl Restart<'_> {
    /// A new simulator over what `crashed` left behind, in its `incarnation`.
    pub fn recover(
        &self,
        crashed: (cloak_core::MemoryStore, cloak_core::JournalMap),
        incarnation: u64,
    ) -> (Simulator, cloak_core::Recovered) {
        let (mut store, journal) = crashed;
        // Scanned twice: the new instance takes the records (their values from the spool, as
        // in the proxy), and the caller keeps what was found to check.
        let handed = self.scan(&mut store, &journal);
        let recovered = self.scan(&mut store, &journal);
        let directory =
            cloak_core::KeyDirectory::restore(self.hasher.clone(), self.capacity, recovered.keys());
        let scheme = (self.build)(handed.records, incarnation << 40);
        let engine = cloak_core::Engine::new(scheme, directory, self.limits)
            .with_next_version(recovered.next_version)
            .with_acknowledged(recovered.versions());
        let sim = Simulator::resume(engine, store, journal)
            .with_storage_delay(self.storage_delay)
            .with_journal_delay(self.journal_delay);
        (sim, recovered)
    }

    /// What recovery finds in `store` and `journal`.
    fn scan(
        &self,
        store: &mut cloak_core::MemoryStore,
        journal: &cloak_core::JournalMap,
    ) -> cloak_core::Recovered {
        let mut recovery = cloak_core::Recovery::new((self.format)());
        while let Some(op) = recovery.next_request() {
            recovery
                .handle(store.apply(op))
                .expect("a memory store scans correctly");
        }
        recovery
            .finish(
                journal
                    .records()
                    .map(|(slot, record)| (slot, record.clone())),
            )
            .expect("the spool works")
    }
}

/// Clients send commands one at a time on their own keys; the simulation crashes at a random
/// instant and is recovered; every write acknowledged before the crash must read back (a command
/// in flight at the crash may or may not have taken effect), and the recovered store keeps
/// working. Repeated for `crashes` crashes in a row.
pub fn crash_recovery(
    restart: &Restart,
    first: Simulator,
    clients: u64,
    keys: usize,
    crashes: usize,
    seed: u64,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut models: Vec<ClientModel> = (0..clients)
        .map(|c| ClientModel::new(c, keys, 16, seed))
        .collect();
    let mut sim = first;
    for incarnation in 1..=crashes as u64 {
        // token → (client, the model's state before the command)
        let mut in_flight: HashMap<u64, (usize, HashMap<Bytes, Bytes>)> = HashMap::new();
        let mut before: Vec<Option<HashMap<Bytes, Bytes>>> = vec![None; clients as usize];
        let crash_at = sim.elapsed() + Duration::from_millis(rng.random_range(20..400));
        while sim.elapsed() < crash_at {
            for (c, model) in models.iter_mut().enumerate() {
                if before[c].is_none() {
                    let state = model.state();
                    let (command, _) = model.next_command();
                    let token = sim.submit(c as u64, command);
                    in_flight.insert(token, (c, state.clone()));
                    before[c] = Some(state);
                }
            }
            sim.run_for(Duration::from_micros(rng.random_range(50..2_000)));
            for (token, _, outcome) in sim.drain_outcomes() {
                let (c, _) = in_flight.remove(&token).expect("known token");
                assert!(
                    !matches!(outcome, Outcome::Error(_)),
                    "client {c} before the crash: {outcome:?}"
                );
                before[c] = None;
            }
        }
        // Every write acknowledged before the crash is in storage or the journal, so a start
        // that checks storage against these versions must find nothing wrong.
        let acknowledged = sim
            .engine()
            .acknowledged()
            .expect("a simulation keeps versions");
        let (recovered_sim, recovered) = restart.recover(sim.crash(), incarnation);
        sim = recovered_sim;
        let findings = recovered.findings(&acknowledged);
        assert!(
            findings.is_clean(),
            "recovery after a crash found a damaged store: {findings}"
        );

        let reader = clients + 1;
        for (c, model) in models.iter_mut().enumerate() {
            let after = model.state();
            let mut actual = HashMap::new();
            for i in 0..model.keys() {
                let key = model.key(i);
                let Some(Outcome::Value(got)) = sim.execute(reader, Command::Get(key.clone()))
                else {
                    panic!("reading {key:?} after recovery failed");
                };
                let acked = before[c].as_ref().unwrap_or(&after).get(&key).cloned();
                let maybe = after.get(&key).cloned();
                assert!(
                    got == acked || got == maybe,
                    "crash {incarnation}, {key:?}: read {got:?}; acknowledged {acked:?}, \
                     unacknowledged {maybe:?}"
                );
                if let Some(value) = got {
                    actual.insert(key, value);
                }
            }
            model.set_state(actual);
        }
    }
    // The last incarnation works: a final round of checked commands.
    for (c, model) in models.iter_mut().enumerate() {
        for _ in 0..30 {
            let (command, want) = model.next_command();
            let got = sim.execute(c as u64, command.clone());
            assert_eq!(got, Some(want), "after recovery, client {c}: {command:?}");
        }
    }
}
