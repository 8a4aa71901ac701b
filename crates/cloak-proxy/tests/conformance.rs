//! The conformance suite through real sockets: RESP clients → proxy → TCP storage server.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cloak_core::{Command, Outcome, SetCondition};
use cloak_schemes::SchemeName;
use cloak_testkit::linearizability::{self, Event, Kind};
use cloak_testkit::workload::ClientModel;
use common::{MAX_VALUE, Setup, run};
use futures::future::join_all;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const CLIENTS: u64 = 8;
const KEYS: usize = 20;

async fn model_workload(scheme: SchemeName, commands: usize, depth: usize, seed: u64) {
    let proxy = Setup::new(scheme, 300).start().await;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let mut con = proxy.connection().await;
        tasks.push(tokio::spawn(async move {
            let mut model = ClientModel::new(c, KEYS, MAX_VALUE, seed);
            let mut sent = 0;
            while sent < commands {
                // Up to `depth` commands pipelined on this connection, sent in order.
                let window: Vec<(Command, Outcome)> = (0..depth.min(commands - sent))
                    .map(|_| model.next_command())
                    .collect();
                sent += window.len();
                let replies = join_all(window.iter().map(|(command, _)| {
                    let mut con = con.clone();
                    async move { run(&mut con, command).await }
                }))
                .await;
                for ((command, want), got) in window.into_iter().zip(replies) {
                    assert_eq!(got, Ok(want), "client {c}: {command:?}");
                }
            }
            let _ = &mut con;
            model
        }));
    }
    let mut models = Vec::new();
    for task in tasks {
        models.push(task.await.unwrap());
    }

    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut con = proxy.connection().await;
    for model in &models {
        for i in 0..KEYS {
            let key = model.key(i);
            let got = run(&mut con, &Command::Get(key.clone())).await;
            assert_eq!(
                got,
                Ok(Outcome::Value(model.value(&key))),
                "{key:?} after settling"
            );
        }
    }
    let total: usize = models.iter().map(ClientModel::len).sum();
    assert_eq!(
        run(&mut con, &Command::DbSize(Default::default())).await,
        Ok(Outcome::Integer(total as i64))
    );
    proxy.shutdown().await;
}

async fn shared_registers(scheme: SchemeName, seed: u64) {
    let proxy = Setup::new(scheme, 100).start().await;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let mut con = proxy.connection().await;
        tasks.push(tokio::spawn(async move {
            let mut rng = ChaCha8Rng::seed_from_u64(seed * 100 + c);
            let mut events = Vec::new();
            for i in 0..60 {
                let k = rng.random_range(0..6);
                let key = Bytes::from(format!("register{k}"));
                tokio::time::sleep(Duration::from_micros(rng.random_range(0..3000))).await;
                let invoked = start.elapsed().as_nanos() as u64;
                let (command, write) = if rng.random_bool(0.4) {
                    let value = format!("c{c}-{i}").into_bytes();
                    let command = Command::Set {
                        key,
                        value: Bytes::from(value.clone()),
                        condition: SetCondition::Always,
                    };
                    (command, Some(value))
                } else {
                    (Command::Get(key), None)
                };
                let outcome = run(&mut con, &command).await.unwrap();
                let returned = start.elapsed().as_nanos() as u64;
                let kind = match (write, outcome) {
                    (Some(v), Outcome::Ok) => Kind::Write(v),
                    (None, Outcome::Value(v)) => Kind::Read(v.map(|b| b.to_vec())),
                    (w, o) => panic!("unexpected {o:?} for {w:?}"),
                };
                events.push((
                    k,
                    Event {
                        invoked,
                        returned,
                        kind,
                    },
                ));
            }
            events
        }));
    }
    let mut histories: HashMap<usize, Vec<Event>> = HashMap::new();
    for task in tasks {
        for (k, event) in task.await.unwrap() {
            histories.entry(k).or_default().push(event);
        }
    }
    for (k, history) in histories {
        if let Err(violation) = linearizability::check(&history) {
            panic!("register{k} is not linearizable: {violation}");
        }
    }
    proxy.shutdown().await;
}

macro_rules! over_tcp {
    ($module:ident, $name:expr) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn random_concurrent_workload_matches_the_model() {
                model_workload($name, 120, 4, 1).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn shared_keys_are_linearizable() {
                shared_registers($name, 2).await;
            }
        }
    };
}

over_tcp!(cloak, SchemeName::Cloak);
over_tcp!(waffle, SchemeName::Waffle);
over_tcp!(pancake, SchemeName::Pancake);
over_tcp!(curious, SchemeName::Curious);
over_tcp!(encrypted, SchemeName::Encrypted);
over_tcp!(plaintext, SchemeName::Unsafe);
over_tcp!(path_oram, SchemeName::PathOram);
