//! Deadlines, types and hashes survive a restart of the proxy over the same storage: they live
//! in each element's envelope, and recovery rebuilds them. After a clean stop (Cloak) and after
//! SIGKILL (Path ORAM, where the journal holds what storage does not yet), TTLs go on counting
//! down from where they were, a key whose deadline passed is gone, and `INFO` counts the keys
//! that still have one.

mod common;

use std::time::{Duration, Instant};

use common::{Running, connect, server_and_proxy_args};

fn int(con: &mut redis::Connection, words: &[&str]) -> i64 {
    let mut command = redis::cmd(words[0]);
    command.arg(&words[1..]);
    command.query(con).unwrap()
}

/// The short key's deadline: long enough that a restart on a loaded machine (both tests of this
/// file at once, each with a server and a proxy) is over well before it.
const SHORT_MS: u64 = 10_000;

fn deadlines_survive(store_args: &[&str], kill: bool) {
    let state = tempfile::tempdir().unwrap();
    let (_server, proxy_args, proxy_port) = server_and_proxy_args(state.path(), store_args);
    let proxy_args: Vec<&str> = proxy_args.iter().map(String::as_str).collect();

    let proxy = Running::start(&proxy_args, "listening");
    let mut con = connect(proxy_port);
    let _: () = redis::cmd("SET")
        .arg("long")
        .arg("v")
        .arg("EX")
        .arg(100)
        .query(&mut con)
        .unwrap();
    let short_set = Instant::now();
    let _: () = redis::cmd("SET")
        .arg("short")
        .arg("v")
        .arg("PX")
        .arg(SHORT_MS)
        .query(&mut con)
        .unwrap();
    assert_eq!(int(&mut con, &["HSET", "h", "f", "v"]), 1);
    assert_eq!(int(&mut con, &["EXPIRE", "h", "200"]), 1);
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let before = int(&mut con, &["PTTL", "long"]);
    drop(con);
    if kill {
        proxy.kill();
    } else {
        assert!(proxy.stop().success());
    }

    let _proxy = Running::start(&proxy_args, "listening");
    let mut con = connect(proxy_port);
    let after = int(&mut con, &["PTTL", "long"]);
    let after_at = Instant::now();
    assert!(
        after > 90_000 && after <= before,
        "the deadline survived and counts on: {before} ms before the restart, {after} after"
    );
    assert!((190..=200).contains(&int(&mut con, &["TTL", "h"])));
    assert_eq!(int(&mut con, &["TTL", "plain"]), -1);
    let kind: String = redis::cmd("TYPE").arg("h").query(&mut con).unwrap();
    assert_eq!(kind, "hash");
    let field: String = redis::cmd("HGET")
        .arg("h")
        .arg("f")
        .query(&mut con)
        .unwrap();
    assert_eq!(field, "v");

    let info: String = redis::cmd("INFO").arg("keyspace").query(&mut con).unwrap();
    assert!(info.contains("keys=4,expires=3"), "{info}");
    // Past the short key's deadline, and at least 2.1 s after `after` was read (however long
    // the restart took), so the countdown below shows.
    let short_gone = Duration::from_millis(SHORT_MS + 200).saturating_sub(short_set.elapsed());
    let counted = Duration::from_millis(2_100).saturating_sub(after_at.elapsed());
    std::thread::sleep(short_gone.max(counted));
    let short: Option<String> = redis::cmd("GET").arg("short").query(&mut con).unwrap();
    assert_eq!(short, None, "an expired key is gone after the restart");
    assert_eq!(int(&mut con, &["EXISTS", "short"]), 0);
    assert_eq!(int(&mut con, &["TTL", "short"]), -2);
    let info: String = redis::cmd("INFO").arg("keyspace").query(&mut con).unwrap();
    assert!(info.contains("keys=3,expires=2"), "{info}");
    let later = int(&mut con, &["PTTL", "long"]);
    assert!(
        later <= after - 2_000,
        "still counting down: {after}, then {later}"
    );
}

#[test]
fn deadlines_survive_a_clean_restart_of_a_cloak_proxy() {
    deadlines_survive(
        &[
            "--scheme",
            "cloak",
            "--capacity",
            "2000",
            "--batch-interval",
            "5ms",
        ],
        false,
    );
}

#[test]
fn deadlines_survive_sigkill_of_a_path_oram_proxy() {
    deadlines_survive(&["--scheme", "path-oram", "--capacity", "2000"], true);
}
