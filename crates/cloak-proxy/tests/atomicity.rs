//! Read-modify-writes and transactions are atomic with respect to every other client: many
//! clients incrementing one counter end at exactly the total, and transactions moving amounts
//! between two keys never let any reader (plain MGET, or a transaction of GETs) see their sum
//! change.
//!
//! Shown to fail on a broken engine: with the gate letting units start while another op on
//! their keys is in the scheme (`idle` always true in `Engine::advance`) and not holding keys
//! (`Gate::must_wait` answering false), the counter test loses increments under `cloak` and
//! the transfer test ends with balances that lost transfers (two transactions that read the
//! same balances both write theirs).

mod common;

use cloak_schemes::SchemeName;
use common::Setup;
use futures::future::join_all;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const CLIENTS: i64 = 8;
const INCREMENTS: i64 = 40;
/// Increments each client keeps in flight at once (pipelined on its connection).
const DEPTH: usize = 8;

async fn counter(scheme: SchemeName) {
    // INCR and INCRBY in turn.
    common::count_concurrently(scheme, CLIENTS, INCREMENTS, DEPTH, |i| {
        let mut cmd = redis::cmd(if i % 2 == 0 { "INCR" } else { "INCRBY" });
        cmd.arg("counter");
        if i % 2 == 1 {
            cmd.arg(1);
        }
        cmd
    })
    .await;
}

const START: i64 = 1000;
const MOVERS: u64 = 4;
const MOVES: usize = 25;

async fn transfers(scheme: SchemeName) {
    let proxy = Setup::new(scheme, 100).start().await;
    let mut con = proxy.connection().await;
    let _: () = redis::cmd("MSET")
        .arg(&["a", &START.to_string(), "b", &START.to_string()])
        .query_async(&mut con)
        .await
        .unwrap();
    let mut connections = Vec::new();
    for _ in 0..MOVERS + 2 {
        connections.push(proxy.connection().await);
    }
    let readers_connections = connections.split_off(MOVERS as usize);
    let movers = connections.into_iter().zip(0..).map(|(mut con, seed)| {
        async move {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            // What this mover moved from a to b, net.
            let mut moved = 0;
            for _ in 0..MOVES {
                let amount: i64 = rng.random_range(1..50);
                let (from, to) = if rng.random() { ("a", "b") } else { ("b", "a") };
                moved += if from == "a" { amount } else { -amount };
                // redis-rs's atomic pipeline: MULTI, the commands, EXEC.
                let (_, _): (i64, i64) = redis::pipe()
                    .atomic()
                    .cmd("DECRBY")
                    .arg(from)
                    .arg(amount)
                    .cmd("INCRBY")
                    .arg(to)
                    .arg(amount)
                    .query_async(&mut con)
                    .await
                    .unwrap();
            }
            moved
        }
    });
    let readers = readers_connections
        .into_iter()
        .zip(0..)
        .map(|(mut con, reader)| async move {
            for _ in 0..MOVES * 2 {
                let (a, b): (i64, i64) = if reader == 0 {
                    redis::cmd("MGET")
                        .arg(&["a", "b"])
                        .query_async(&mut con)
                        .await
                        .unwrap()
                } else {
                    redis::pipe()
                        .atomic()
                        .cmd("GET")
                        .arg("a")
                        .cmd("GET")
                        .arg("b")
                        .query_async(&mut con)
                        .await
                        .unwrap()
                };
                assert_eq!(
                    a + b,
                    2 * START,
                    "{scheme:?}: reader {reader} saw a={a} b={b}"
                );
            }
        });
    let movers = tokio::spawn(join_all(movers));
    join_all(readers).await;
    let moved: i64 = movers.await.unwrap().into_iter().sum();
    let (a, b): (i64, i64) = redis::cmd("MGET")
        .arg(&["a", "b"])
        .query_async(&mut con)
        .await
        .unwrap();
    // Every transfer counted once: none lost to another running at the same time.
    assert_eq!((a, b), (START - moved, START + moved), "{scheme:?}");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsafe_counts_every_increment() {
    counter(SchemeName::Unsafe).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloak_counts_every_increment() {
    counter(SchemeName::Cloak).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_oram_counts_every_increment() {
    counter(SchemeName::PathOram).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsafe_transfers_keep_the_sum() {
    transfers(SchemeName::Unsafe).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloak_transfers_keep_the_sum() {
    transfers(SchemeName::Cloak).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waffle_transfers_keep_the_sum() {
    transfers(SchemeName::Waffle).await;
}
