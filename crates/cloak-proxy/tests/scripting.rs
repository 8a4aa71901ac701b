//! Lua scripts (EVAL) through the proxy: atomic against every other client, stopped when they
//! run too long while other clients are still served, and invisible to storage beyond the
//! accesses of the keys they declare. (What scripts return, and their errors, are compared with
//! a real redis-server in `crates/cloak/tests/client_libs.rs`.)
//!
//! Shown to fail on broken variants: with the gate letting a unit start on keys another running
//! unit holds (`Gate::ready_index` without its `held` check), both counter tests lose
//! increments; without the time limit in the instruction hook, the runaway script never answers
//! (the test's 20-second guard fires, and the spinning thread then keeps the test process from
//! exiting). The traffic test was not run against a broken variant.

mod common;

use std::time::{Duration, Instant};

use cloak_schemes::SchemeName;
use common::Setup;

const CLIENTS: i64 = 6;
const INCREMENTS: i64 = 25;
/// EVALs each client keeps in flight at once (pipelined on its connection).
const DEPTH: usize = 4;

/// A read-modify-write in Lua: atomic only if nothing of another client comes between the GET
/// and the SET.
/// (Short: a request's arguments are limited by the test store's small value size.)
const INCREMENT: &str =
    "local n=(redis.call('get',KEYS[1]) or 0)+1 redis.call('set',KEYS[1],n) return n";

async fn counter(scheme: SchemeName) {
    common::count_concurrently(scheme, CLIENTS, INCREMENTS, DEPTH, |_| {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(INCREMENT).arg(1).arg("counter");
        cmd
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsafe_scripts_count_every_increment() {
    counter(SchemeName::Unsafe).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloak_scripts_count_every_increment() {
    counter(SchemeName::Cloak).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_script_is_stopped_while_other_clients_are_served() {
    let mut setup = Setup::new(SchemeName::Cloak, 100);
    // Long enough for the other client's 20 round trips while the script takes a core and a
    // sibling test the other (1.5 s left little room on a loaded 2-core machine).
    setup.script_time_limit = Duration::from_secs(5);
    let proxy = setup.start().await;
    let mut runaway = proxy.connection().await;
    // Past the library's default half second: the script runs for the proxy's limit.
    runaway.set_response_timeout(Duration::from_secs(20));
    let started = Instant::now();
    let looping = tokio::spawn(async move {
        let reply: redis::RedisResult<()> = redis::cmd("EVAL")
            .arg("while true do end")
            .arg(0)
            .query_async(&mut runaway)
            .await;
        (reply, started.elapsed())
    });
    // Another client, on other keys, is served while the script spins.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut other = proxy.connection().await;
    for i in 0..10 {
        let _: () = redis::cmd("SET")
            .arg("other")
            .arg(i)
            .query_async(&mut other)
            .await
            .unwrap();
        let got: i64 = redis::cmd("GET")
            .arg("other")
            .query_async(&mut other)
            .await
            .unwrap();
        assert_eq!(got, i);
    }
    let served = started.elapsed();
    let (reply, stopped) = tokio::time::timeout(Duration::from_secs(20), looping)
        .await
        .expect("the runaway script is stopped")
        .unwrap();
    assert!(
        served < stopped,
        "the other client was served only after the script stopped ({served:?} ≥ {stopped:?})"
    );
    let error = reply.expect_err("the runaway script fails").to_string();
    assert!(error.contains("Script killed"), "{error}");
    // The proxy goes on serving scripts afterwards.
    let mut con = proxy.connection().await;
    let n: i64 = redis::cmd("EVAL")
        .arg("return 7")
        .arg(0)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(n, 7);
    proxy.shutdown().await;
}

/// Storage requests an EVAL of `script` on one key makes.
async fn requests_of(proxy: &common::TestProxy, script: &str) -> usize {
    let mut con = proxy.connection().await;
    let before = proxy.trace.len();
    let _: redis::Value = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("k")
        .arg("final")
        .query_async(&mut con)
        .await
        .unwrap();
    proxy.trace.len() - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_sees_the_declared_keys_not_the_calls() {
    // The unsafe scheme sends one storage request per op, so any extra op would show.
    let proxy = Setup::new(SchemeName::Unsafe, 100).start().await;
    let one_call = "redis.call('set',KEYS[1],ARGV[1])";
    let many_calls =
        "for i=1,50 do redis.call('set',KEYS[1],i) end redis.call('set',KEYS[1],ARGV[1])";
    let _ = requests_of(&proxy, one_call).await;
    let few = requests_of(&proxy, one_call).await;
    let many = requests_of(&proxy, many_calls).await;
    assert_eq!(few, many, "a script's calls reached storage");
    // A key the script did not declare is refused, not read.
    let mut con = proxy.connection().await;
    let error = redis::cmd("EVAL")
        .arg("return redis.call('get', 'undeclared')")
        .arg(0)
        .query_async::<redis::Value>(&mut con)
        .await
        .expect_err("an undeclared key is refused")
        .to_string();
    assert!(error.contains("not declared in KEYS"), "{error}");
    proxy.shutdown().await;
}
