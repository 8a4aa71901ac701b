//! Forwarding (`cloak proxy --cluster-forward`), through the built binary over a real
//! `redis-server`: two proxies with a client password, the first forwarding. Plain clients
//! (the `redis` crate's non-cluster connection, `redis-cli` without `-c`) connected to the
//! first read and write keys of every partition, MGET keys of one slot the other proxy hosts,
//! and get CROSSSLOT, and a clear refusal for a transaction, a WATCH or a script on the other
//! proxy's keys; the second, not forwarding, answers `-MOVED` as before.

use cloak_cluster::{ClusterMap, key_slot};
use cloak_testkit::redis_server::RedisServer;

mod common;

use common::{Running, keys_of};

const KEY: &str = "8c6a1f0b2d4e6a8c0e2f4a6c8e0a2c4e6f8a0c2e4a6c8e0f2a4c6e8a0c2e4f6a";
const PASSWORD: &str = "forward-test-password";

fn start(file: &std::path::Path, name: &str, forward: bool) -> Running {
    let mut extra = vec!["--batch-interval", "20ms", "--password", PASSWORD];
    if forward {
        extra.push("--cluster-forward");
    }
    let args = common::cluster_proxy_args(file, name, &extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Running::start_with_env(&args, &[("CLOAK_KEY", KEY)], "cloak proxy listening")
}

fn client(port: u16) -> redis::Connection {
    client_speaking(port, "")
}

/// A client of the proxy at `port` with `query` in its URL (`?protocol=resp3`).
fn client_speaking(port: u16, query: &str) -> redis::Connection {
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{port}/{query}");
    let client = redis::Client::open(url).unwrap();
    let connection = client.get_connection().unwrap();
    let timeout = Some(std::time::Duration::from_secs(20));
    connection.set_read_timeout(timeout).unwrap();
    connection
}

/// `redis-cli` without `-c` (it does not follow `-MOVED`) on the proxy at `port`.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let port = port.to_string();
    let login = ["-p", &port, "-a", PASSWORD, "--no-auth-warning"];
    common::redis_cli(&[&login[..], args].concat())
}

/// The error text of a command that must fail.
fn refused<T: redis::FromRedisValue + std::fmt::Debug>(
    con: &mut redis::Connection,
    cmd: &mut redis::Cmd,
) -> String {
    let error = cmd.query::<T>(con).expect_err("refused");
    // The code (MOVED, CROSSSLOT, …) and the rest of the line, as a client prints them.
    format!(
        "{} {}",
        error.code().unwrap_or("?"),
        error.detail().unwrap_or("")
    )
}

/// A hash key in a slot p1 hosts.
fn remote_hash(map: &ClusterMap) -> String {
    format!("{}hash", tag_on(map, 1))
}

/// A hash tag whose slot is in a partition proxy `proxy` hosts.
fn tag_on(map: &ClusterMap, proxy: usize) -> String {
    (0..)
        .map(|i| format!("{{tag{i}}}"))
        .find(|tag| map.partition_of(key_slot(tag.as_bytes())).proxy == proxy)
        .unwrap()
}

#[test]
fn plain_clients_use_every_partition_through_a_forwarding_proxy() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("{}?prefix=fwd:p{{partition}}:", redis.url());
    let (map, file, ports) = common::proxy_cluster(dir.path(), &storage, 2, 4);
    let _p0 = start(&file, "p0", true);
    let _p1 = start(&file, "p1", false);
    let mut con = client(ports[0]);

    // Keys of every partition, two of them on p1, through p0.
    let mut written = Vec::new();
    for partition in 0..4 {
        for key in keys_of(&map, partition, 3) {
            let value = format!("value of {key}");
            let _: () = redis::cmd("SET")
                .arg(&key)
                .arg(&value)
                .query(&mut con)
                .unwrap();
            written.push((key, value));
        }
    }
    for (key, value) in &written {
        let got: Option<String> = redis::cmd("GET").arg(key).query(&mut con).unwrap();
        assert_eq!(got.as_deref(), Some(value.as_str()), "{key}");
    }
    // Really on p1: it answers them itself.
    let remote = keys_of(&map, 3, 1).remove(0);
    let mut direct = client(ports[1]);
    let got: String = redis::cmd("GET").arg(&remote).query(&mut direct).unwrap();
    assert_eq!(got, format!("value of {remote}"));

    // Several keys of one slot p1 hosts, and keys of two slots.
    let tag = tag_on(&map, 1);
    let (a, b) = (format!("{tag}a"), format!("{tag}b"));
    let _: () = redis::cmd("MSET")
        .arg(&a)
        .arg("1")
        .arg(&b)
        .arg("2")
        .query(&mut con)
        .unwrap();
    let both: Vec<Option<String>> = redis::cmd("MGET").arg(&a).arg(&b).query(&mut con).unwrap();
    assert_eq!(both, [Some("1".to_string()), Some("2".to_string())]);
    let local = keys_of(&map, 0, 1).remove(0);
    let cross = refused::<()>(&mut con, redis::cmd("MGET").arg(&a).arg(&local));
    assert!(cross.starts_with("CROSSSLOT"), "{cross}");

    // What needs session state on p1 is refused, saying what to do.
    let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
    let queued = refused::<()>(&mut con, redis::cmd("SET").arg(&remote).arg("x"));
    assert!(queued.contains("use a cluster-aware client"), "{queued}");
    let exec = refused::<()>(&mut con, &mut redis::cmd("EXEC"));
    assert!(exec.starts_with("EXECABORT"), "{exec}");
    let watch = refused::<()>(&mut con, redis::cmd("WATCH").arg(&remote));
    assert!(watch.contains("use a cluster-aware client"), "{watch}");
    let script = refused::<()>(
        &mut con,
        redis::cmd("EVAL")
            .arg("return redis.call('GET', KEYS[1])")
            .arg(1)
            .arg(&remote),
    );
    assert!(script.contains("use a cluster-aware client"), "{script}");
    // The transaction was not run.
    let got: String = redis::cmd("GET").arg(&remote).query(&mut con).unwrap();
    assert_eq!(got, format!("value of {remote}"));

    // A RESP3 client gets the reply the owner would give it: a map, not RESP2's flat array.
    let _: () = redis::cmd("HSET")
        .arg(remote_hash(&map))
        .arg("f")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let hgetall = |port| -> redis::Value {
        let mut con = client_speaking(port, "?protocol=resp3");
        redis::cmd("HGETALL")
            .arg(remote_hash(&map))
            .query(&mut con)
            .unwrap()
    };
    let (forwarded, direct) = (hgetall(ports[0]), hgetall(ports[1]));
    assert_eq!(forwarded, direct);
    assert!(matches!(forwarded, redis::Value::Map(_)), "{forwarded:?}");

    // redis-cli without -c, through the forwarding proxy; the other one redirects it.
    assert_eq!(
        redis_cli(ports[0], &["GET", &remote]),
        format!("value of {remote}")
    );
    assert_eq!(redis_cli(ports[0], &["MGET", &a, &b]), "1\n2");
    let slot = key_slot(local.as_bytes());
    assert_eq!(
        redis_cli(ports[1], &["GET", &local]),
        format!("MOVED {slot} 127.0.0.1:{}", ports[0])
    );
}
