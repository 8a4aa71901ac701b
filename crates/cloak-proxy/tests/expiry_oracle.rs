//! Expiry, TYPE, hashes and WRONGTYPE, checked against a real `redis-server`: the same commands
//! go to both, and every reply must be the one Redis gives (the replies that count time, within
//! a tolerance). Run for `unsafe` and `cloak`, and for Path ORAM, whose cover reads take another
//! path through the engine.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cloak_schemes::SchemeName;
use cloak_testkit::redis_server::RedisServer;
use common::Setup;

enum Step {
    /// The reply must equal Redis's.
    Same(&'static [&'static str]),
    /// An integer reply within this much of Redis's (TTL and its relatives).
    Near(&'static [&'static str], i64),
    Sleep(u64),
}

use Step::*;

const SCRIPT: &[Step] = &[
    // SET's expiry options and KEEPTTL.
    Same(&["SET", "s", "v", "EX", "100"]),
    Near(&["TTL", "s"], 1),
    Near(&["PTTL", "s"], 1500),
    Same(&["SET", "s", "v2", "KEEPTTL"]),
    Near(&["TTL", "s"], 1),
    Same(&["SET", "s", "v3"]),
    Same(&["TTL", "s"]),
    Same(&["PTTL", "nothing"]),
    Same(&["SET", "s", "v4", "NX", "EX", "10"]),
    Same(&["SET", "s", "v4", "XX", "PX", "100000"]),
    Near(&["PTTL", "s"], 1500),
    Same(&["SET", "s", "v5", "EXAT", "+s:200"]),
    Near(&["EXPIRETIME", "s"], 2),
    Same(&["SET", "s", "v6", "PXAT", "+ms:300000"]),
    Near(&["PEXPIRETIME", "s"], 2000),
    // EXPIRE's conditions.
    Same(&["PERSIST", "s"]),
    Same(&["PERSIST", "s"]),
    Same(&["EXPIRE", "s", "50", "XX"]),
    Same(&["EXPIRE", "s", "50", "GT"]),
    Same(&["EXPIRE", "s", "50", "NX"]),
    Same(&["EXPIRE", "s", "60", "NX"]),
    Same(&["EXPIRE", "s", "60", "GT"]),
    Same(&["EXPIRE", "s", "40", "GT"]),
    Same(&["EXPIRE", "s", "40", "LT"]),
    Same(&["EXPIRE", "s", "100", "LT"]),
    Same(&["PEXPIRE", "s", "30000", "XX", "LT"]),
    Near(&["TTL", "s"], 1),
    Same(&["EXPIREAT", "s", "+s:500"]),
    Near(&["EXPIRETIME", "s"], 2),
    Same(&["PEXPIREAT", "s", "+ms:400000", "lt"]),
    Near(&["PEXPIRETIME", "s"], 2000),
    Same(&["EXPIRE", "nothing", "10"]),
    Same(&["PERSIST", "nothing"]),
    // GETEX.
    Same(&["GETEX", "s", "EX", "30"]),
    Near(&["TTL", "s"], 1),
    Same(&["GETEX", "s", "PERSIST"]),
    Same(&["TTL", "s"]),
    Same(&["GETEX", "s"]),
    Same(&["GETEX", "nothing", "PX", "5"]),
    Same(&["SETEX", "e", "100", "x"]),
    Near(&["TTL", "e"], 1),
    Same(&["PSETEX", "p", "100000", "x"]),
    Near(&["PTTL", "p"], 1500),
    // Expiry takes keys away.
    Same(&["SET", "t", "1", "PX", "100"]),
    Same(&["HSET", "th", "f", "1"]),
    Same(&["PEXPIRE", "th", "100"]),
    Same(&["EXPIRE", "e", "-1"]),
    Same(&["GET", "e"]),
    Same(&["EXISTS", "e"]),
    Same(&["GETEX", "p", "EXAT", "1"]),
    Same(&["EXISTS", "p"]),
    Sleep(300),
    Same(&["GET", "t"]),
    Same(&["TTL", "t"]),
    Same(&["EXISTS", "t", "th"]),
    Same(&["HGETALL", "th"]),
    Same(&["TYPE", "t"]),
    // Hashes.
    Same(&["HSET", "h", "a", "1", "b", "2"]),
    Same(&["HSET", "h", "a", "3", "c", "4"]),
    Same(&["HGET", "h", "a"]),
    Same(&["HGET", "h", "zz"]),
    Same(&["HGET", "nothing", "a"]),
    Same(&["HMGET", "h", "a", "x", "c"]),
    Same(&["HGETALL", "h"]),
    Same(&["HKEYS", "h"]),
    Same(&["HVALS", "h"]),
    Same(&["HLEN", "h"]),
    Same(&["HLEN", "nothing"]),
    Same(&["HEXISTS", "h", "a"]),
    Same(&["HEXISTS", "h", "z"]),
    Same(&["HSTRLEN", "h", "a"]),
    Same(&["HINCRBY", "h", "n", "5"]),
    Same(&["HINCRBY", "h", "n", "-7"]),
    Same(&["HINCRBY", "h", "n", "x"]),
    Same(&["HSET", "big", "n", "9223372036854775000"]),
    Same(&["HINCRBY", "big", "n", "1000"]),
    Same(&["HINCRBY", "big", "n", "-1000"]),
    Same(&["HGET", "big", "n"]),
    Same(&["HSET", "h", "s", "str"]),
    Same(&["HINCRBY", "h", "s", "1"]),
    Same(&["HSETNX", "h", "a", "9"]),
    Same(&["HSETNX", "h", "z", "9"]),
    Same(&["HDEL", "h", "a", "b", "x", "a"]),
    Same(&["HGETALL", "h"]),
    Same(&["HGETALL", "nothing"]),
    Same(&["HINCRBY", "counter", "f", "2"]),
    // Types.
    Same(&["TYPE", "h"]),
    Same(&["TYPE", "s"]),
    Same(&["TYPE", "nothing"]),
    Same(&["GET", "h"]),
    Same(&["GETEX", "h", "EX", "5"]),
    Same(&["HGET", "s", "a"]),
    Same(&["HSET", "s", "a", "1"]),
    Same(&["HDEL", "s", "a"]),
    Same(&["MGET", "s", "h", "nothing"]),
    Same(&["EXPIRE", "h", "100"]),
    Same(&["HSET", "h", "q", "1"]),
    Near(&["TTL", "h"], 1),
    Same(&["SET", "h", "now a string"]),
    Same(&["TYPE", "h"]),
    Same(&["TTL", "h"]),
    Same(&["HDEL", "counter", "f"]),
    Same(&["EXISTS", "counter"]),
    Same(&["TYPE", "counter"]),
    // The string read-modify-writes and the key commands against types and deadlines.
    Same(&["SET", "n", "10", "EX", "100"]),
    Same(&["INCR", "n"]),
    Near(&["TTL", "n"], 1),
    Same(&["INCRBYFLOAT", "n", "1.5"]),
    Near(&["TTL", "n"], 1),
    Same(&["APPEND", "n", "0"]),
    Same(&["SETRANGE", "n", "0", "9"]),
    Near(&["TTL", "n"], 1),
    Same(&["SET", "n", "1", "GET"]),
    Same(&["TTL", "n"]),
    Same(&["SET", "n", "2", "GET", "EX", "50"]),
    Near(&["TTL", "n"], 1),
    Same(&["SET", "n", "3", "KEEPTTL", "GET"]),
    Near(&["TTL", "n"], 1),
    Same(&["GETSET", "n", "4"]),
    Same(&["TTL", "n"]),
    Same(&["SET", "m", "1", "PX", "100000"]),
    Same(&["RENAME", "m", "m2"]),
    Near(&["PTTL", "m2"], 1500),
    Same(&["COPY", "m2", "m3"]),
    Near(&["PTTL", "m3"], 1500),
    Same(&["RENAMENX", "m3", "h"]),
    Same(&["GETDEL", "m2"]),
    Same(&["TTL", "m2"]),
    Same(&["SETNX", "m2", "x"]),
    Same(&["TTL", "m2"]),
    Same(&["DEL", "h"]),
    Same(&["HSET", "h", "f", "1"]),
    Same(&["EXPIRE", "h", "100"]),
    Same(&["INCR", "h"]),
    Same(&["APPEND", "h", "x"]),
    Same(&["STRLEN", "h"]),
    Same(&["GETDEL", "h"]),
    Same(&["SET", "h", "x", "GET"]),
    Same(&["GETSET", "h", "x"]),
    Same(&["SETNX", "h", "x"]),
    Same(&["TYPE", "h"]),
    Same(&["COPY", "h", "h2"]),
    Same(&["TYPE", "h2"]),
    Same(&["HGETALL", "h2"]),
    Same(&["RENAME", "h2", "h3"]),
    Same(&["TYPE", "h3"]),
    Near(&["TTL", "h3"], 1),
    Same(&["HINCRBY", "n", "f", "1"]),
    // Errors.
    Same(&["SET", "x", "1", "EX", "0"]),
    Same(&["SET", "x", "1", "PX", "-5"]),
    Same(&["SET", "x", "1", "EX", "abc"]),
    Same(&["SET", "x", "1", "EX", "1", "PX", "1"]),
    Same(&["SET", "x", "1", "KEEPTTL", "EX", "1"]),
    Same(&["SET", "x", "1", "EX"]),
    Same(&["SET", "x", "1", "EX", "9223372036854775807"]),
    Same(&["SET", "x", "1", "NX", "XX"]),
    Same(&["GETEX", "s", "KEEPTTL"]),
    Same(&["GETEX", "s", "EX", "0"]),
    Same(&["GETEX", "s", "EX", "1", "PERSIST"]),
    Same(&["EXPIRE", "s", "1", "foo"]),
    Same(&["EXPIRE", "s", "1", "NX", "XX"]),
    Same(&["EXPIRE", "s", "1", "GT", "LT"]),
    Same(&["EXPIRE", "s", "x"]),
    Same(&["EXPIRE", "s", "9223372036854775807"]),
    Same(&["EXPIRE", "s"]),
    Same(&["SETEX", "x", "0", "v"]),
    Same(&["SETEX", "x", "1"]),
    Same(&["PSETEX", "x", "-1", "v"]),
    Same(&["TTL"]),
    Same(&["TYPE", "a", "b"]),
    Same(&["HSET", "x", "f"]),
    Same(&["HSET", "x", "f", "v", "g"]),
    Same(&["HGET", "x"]),
    Same(&["HMGET", "x"]),
    Same(&["HINCRBY", "x", "f"]),
];

/// An argument: `+s:N` and `+ms:N` are N after now, in Unix seconds or milliseconds.
fn argument(arg: &str) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    if let Some(n) = arg.strip_prefix("+s:") {
        return (now.as_secs() as i64 + n.parse::<i64>().unwrap()).to_string();
    }
    if let Some(n) = arg.strip_prefix("+ms:") {
        return (now.as_millis() as i64 + n.parse::<i64>().unwrap()).to_string();
    }
    arg.to_string()
}

async fn reply(
    con: &mut redis::aio::MultiplexedConnection,
    words: &[&str],
) -> Result<redis::Value, String> {
    let mut command = redis::cmd(words[0]);
    for word in &words[1..] {
        command.arg(argument(word));
    }
    command
        .query_async::<redis::Value>(con)
        .await
        .map_err(|e| e.to_string())
}

async fn matches_redis(scheme: SchemeName) {
    let redis = RedisServer::start_with(&[], false);
    let mut oracle = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let proxy = Setup::new(scheme, 64).start().await;
    let mut cloak = proxy.connection().await;
    let mut differences = Vec::new();
    for step in SCRIPT {
        let (words, tolerance) = match step {
            Sleep(ms) => {
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                continue;
            }
            Same(words) => (words, None),
            Near(words, tolerance) => (words, Some(*tolerance)),
        };
        let want = reply(&mut oracle, words).await;
        let got = reply(&mut cloak, words).await;
        let same = match (tolerance, &want, &got) {
            (Some(tolerance), Ok(redis::Value::Int(a)), Ok(redis::Value::Int(b))) => {
                *a >= 0 && (a - b).abs() <= tolerance
            }
            _ => want == got,
        };
        if !same {
            differences.push(format!("{words:?}: redis {want:?}, cloak {got:?}"));
        }
    }
    assert!(
        differences.is_empty(),
        "{scheme:?} differs from redis-server:\n{}",
        differences.join("\n")
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn unsafe_answers_as_redis_does() {
    matches_redis(SchemeName::Unsafe).await;
}

#[tokio::test]
async fn cloak_answers_as_redis_does() {
    matches_redis(SchemeName::Cloak).await;
}

#[tokio::test]
async fn path_oram_answers_as_redis_does() {
    matches_redis(SchemeName::PathOram).await;
}

/// A hash is one value: one that would outgrow `--value-size` is refused, and unchanged.
#[tokio::test]
async fn a_hash_beyond_the_value_size_is_refused() {
    let proxy = Setup::new(SchemeName::Unsafe, 16).start().await;
    let mut con = proxy.connection().await;
    let added: i64 = redis::cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("v")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(added, 1);
    let big = "x".repeat(common::MAX_VALUE);
    let error = redis::cmd("HSET")
        .arg("h")
        .arg("g")
        .arg(&big)
        .query_async::<i64>(&mut con)
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("hash would take 83 bytes, the limit is 64"),
        "{error}"
    );
    let len: i64 = redis::cmd("HLEN")
        .arg("h")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(len, 1);
    proxy.shutdown().await;
}
