//! Real Redis client libraries, in their default configuration and with a client name, run the
//! same script against a real `redis-server` and against `cloak up`, and must print the same
//! transcript: the expected results come from Redis itself, not from a model of it.
//!
//! The programs are redis-py (its default RESP3, and `protocol=2`), go-redis v9, node-redis
//! (`tests/clients/`), and the Rust `redis` crate (below, RESP2 by default and RESP3). The first
//! three are installed, pinned, into `target/client-libs/` by `scripts/install-client-libs`,
//! which this test runs first: it reaches PyPI, the npm registry and the Go module proxy, and a
//! failed install fails the test (it never skips).
//!
//! To add a step, add one line to each program (and to `rust_script` below); a step that only
//! the real Redis gets right fails here until Cloak does too.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Once;
use std::time::Duration;

use cloak_testkit::redis_server::{RedisCluster, RedisServer};
use redis::{ConnectionLike, Value};

mod common;

use common::{Running, free_port, free_ports, wait_timeout};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn libs() -> PathBuf {
    root().join("target/client-libs")
}

/// Runs `scripts/install-client-libs` once per test binary; a failure fails every test.
fn install() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let out = Command::new(root().join("scripts/install-client-libs"))
            .output()
            .expect("scripts/install-client-libs runs");
        assert!(
            out.status.success(),
            "scripts/install-client-libs failed (it needs python3, npm, go and the package \
             registries):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// One client program: its name and the command that runs it against a port.
struct Program {
    name: &'static str,
    command: fn(u16) -> Command,
}

fn python(port: u16, extra: &[&str]) -> Command {
    let mut command = Command::new(libs().join("python/bin/python"));
    command
        .arg(root().join("tests/clients/python/client.py"))
        .arg(port.to_string())
        .args(extra);
    command
}

const PROGRAMS: &[Program] = &[
    Program {
        name: "redis-py (RESP3, its default)",
        command: |port| python(port, &[]),
    },
    Program {
        name: "redis-py (protocol=2)",
        command: |port| python(port, &["--protocol", "2"]),
    },
    Program {
        name: "go-redis",
        command: |port| {
            let mut command = Command::new(libs().join("bin/go-client"));
            command.arg(port.to_string());
            command
        },
    },
    Program {
        name: "node-redis",
        command: |port| {
            let mut command = Command::new("node");
            command
                .env("NODE_PATH", libs().join("node/node_modules"))
                .arg(root().join("tests/clients/node/client.js"))
                .arg(port.to_string());
            command
        },
    },
];

/// What a program printed; it must finish within a minute and exit cleanly.
fn transcript(program: &Program, port: u16) -> String {
    let mut child = (program.command)(port)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", program.name));
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).map(|_| text)
    });
    let status = wait_timeout(&mut child, Duration::from_secs(60));
    let mut stderr = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
    let text = reader.join().unwrap().unwrap();
    assert!(
        status.success(),
        "{} failed on port {port}: {stderr}\n{text}",
        program.name
    );
    text
}

/// The Rust `redis` crate with default options (plus `protocol=resp3` for the RESP3 run).
fn rust_script(port: u16, resp3: bool) -> String {
    let query = if resp3 { "?protocol=resp3" } else { "" };
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/{query}")).unwrap();
    let mut con = client.get_connection().unwrap();
    con.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let c = redis::cmd;
    let steps = [
        (
            "client setname",
            c("CLIENT").arg("SETNAME").arg("cloak-client-rs").to_owned(),
        ),
        ("client getname", c("CLIENT").arg("GETNAME").to_owned()),
        ("ping", c("PING")),
        ("set", c("SET").arg("greeting").arg("hello").to_owned()),
        ("get", c("GET").arg("greeting").to_owned()),
        ("get missing", c("GET").arg("missing").to_owned()),
        ("mset", c("MSET").arg(&["a", "1", "b", "2"]).to_owned()),
        ("mget", c("MGET").arg(&["a", "missing", "b"]).to_owned()),
        ("exists", c("EXISTS").arg(&["a", "missing"]).to_owned()),
        (
            "config get",
            c("CONFIG").arg("GET").arg("maxclients").to_owned(),
        ),
        ("unknown", c("NOSUCHCOMMAND").arg("x").to_owned()),
        ("wrong arity", c("GET")),
    ];
    let mut out = String::new();
    for (name, command) in steps {
        out.push_str(&line(name, command.query::<Value>(&mut con)));
    }
    let pipeline = redis::pipe()
        .set("p1", "v1")
        .get("p1")
        .del("p1")
        .exists("p1")
        .query::<Value>(&mut con);
    out.push_str(&line("pipeline", pipeline));
    let info = c("INFO").query::<redis::InfoDict>(&mut con).unwrap();
    for field in ["redis_mode", "role", "loading"] {
        out.push_str(&line(field, Ok(info.get::<String>(field))));
    }
    let list = c("CLIENT").arg("LIST").query::<String>(&mut con);
    let named = list.map(|list| list.contains(" name=cloak-client-rs "));
    out.push_str(&line("client list names me", named));
    let more = [
        ("incr", c("INCR").arg("counter").to_owned()),
        ("incrby", c("INCRBY").arg("counter").arg(5).to_owned()),
        ("incr not an integer", c("INCR").arg("greeting").to_owned()),
        (
            "set ex",
            c("SET").arg(&["temp", "x", "EX", "100"]).to_owned(),
        ),
        ("ttl", c("TTL").arg("temp").to_owned()),
    ];
    for (name, command) in more {
        out.push_str(&line(name, command.query::<Value>(&mut con)));
    }
    let transaction = redis::pipe()
        .atomic()
        .incr("counter", 1)
        .set("tx", "1")
        .get("tx")
        .expire("tx", 100)
        .query::<Value>(&mut con);
    out.push_str(&line("transaction", transaction));
    out.push_str(&line(
        "ttl of a transaction's key",
        c("TTL").arg("tx").query::<Value>(&mut con),
    ));
    let cleanup = c("DEL")
        .arg(&["greeting", "a", "b", "counter", "tx", "temp"])
        .query::<Value>(&mut con);
    out.push_str(&line("cleanup", cleanup));
    out.push_str(&line("dbsize", c("DBSIZE").query::<Value>(&mut con)));
    assert!(con.is_open());
    out
}

/// One transcript line: a step's result or its error.
fn line(name: &str, result: redis::RedisResult<impl std::fmt::Debug>) -> String {
    match result {
        Ok(value) => format!("{name} -> {value:?}\n"),
        Err(error) => format!("{name} -> error: {error}\n"),
    }
}

/// Every program's transcript against `cloak up --scheme scheme` equals its transcript
/// against a real `redis-server`.
fn libraries_see_redis(scheme: &str) {
    install();
    let redis = RedisServer::start_with(&[], false);
    let port = free_port();
    let _cloak = Running::start(
        &[
            "up",
            "--port",
            &port.to_string(),
            "--capacity",
            "1000",
            "--batch-interval",
            "5ms",
            "--scheme",
            scheme,
        ],
        "Stop with Ctrl-C",
    );
    let mut differences = Vec::new();
    let mut compare = |name: &str, expected: String, got: String| {
        if expected != got {
            let first = expected
                .lines()
                .zip(got.lines().chain(std::iter::repeat("<missing>")))
                .find(|(e, g)| e != g)
                .map(|(e, g)| format!("first difference:\n  redis: {e}\n  cloak: {g}"))
                .unwrap_or_else(|| "cloak printed more".into());
            differences.push(format!(
                "{name} against the {scheme} scheme: {first}\n--- redis-server:\n{expected}\
                 --- cloak:\n{got}"
            ));
        }
    };
    for program in PROGRAMS {
        compare(
            program.name,
            transcript(program, redis.port),
            transcript(program, port),
        );
    }
    for resp3 in [false, true] {
        compare(
            if resp3 {
                "redis-rs (RESP3)"
            } else {
                "redis-rs"
            },
            rust_script(redis.port, resp3),
            rust_script(port, resp3),
        );
    }
    assert!(differences.is_empty(), "{}", differences.join("\n\n"));
}

#[test]
fn client_libraries_see_redis_through_the_unsafe_scheme() {
    libraries_see_redis("unsafe");
}

#[test]
fn client_libraries_see_redis_through_the_cloak_scheme() {
    libraries_see_redis("cloak");
}

/// The cluster clients (redis-py's `RedisCluster`, go-redis's `ClusterClient`), with default
/// options, print the same transcript against a 3-proxy `cloak cluster up` as against a real
/// 3-master Redis Cluster: they learn the slots, follow redirections, get CROSSSLOT errors for
/// multi-key commands across slots, and split pipelines by node.
#[test]
fn cluster_clients_see_a_cloak_cluster_as_a_redis_cluster() {
    install();
    let redis = RedisCluster::start(3);
    let port = free_ports(3);
    let _cloak = Running::start(
        &[
            "cluster",
            "up",
            "--proxies",
            "3",
            "--partitions",
            "6",
            "--port",
            &port.to_string(),
            "--capacity",
            "500",
            "--batch-interval",
            "10ms",
        ],
        "Cloak cluster is up",
    );
    let programs = [
        Program {
            name: "redis-py RedisCluster",
            command: |port| {
                let mut command = Command::new(libs().join("python/bin/python"));
                command
                    .arg(root().join("tests/clients/python/cluster.py"))
                    .arg(port.to_string());
                command
            },
        },
        Program {
            name: "go-redis ClusterClient",
            command: |port| {
                let mut command = Command::new(libs().join("bin/go-client"));
                command.arg("--cluster").arg(port.to_string());
                command
            },
        },
    ];
    let mut differences = Vec::new();
    for program in &programs {
        let name = program.name;
        let expected = transcript(program, redis.nodes[0].port);
        let got = transcript(program, port);
        if expected != got {
            differences.push(format!(
                "{name}:\n--- redis cluster:\n{expected}--- cloak cluster:\n{got}"
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n\n"));
}
