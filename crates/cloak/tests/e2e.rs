//! The built `cloak` binary, started the way the README says, spoken to over RESP.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod common;

use common::{CLOAK, Running, connect, fails, free_port, server_and_proxy_args};

/// Runs a Redis command-line tool if it is installed; CI installs it, so there it must be.
fn redis_tool(name: &str, args: &[&str]) -> Option<String> {
    match Command::new(name).args(args).output() {
        Ok(out) => {
            assert!(
                out.status.success(),
                "{name} {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Some(String::from_utf8_lossy(&out.stdout).into_owned())
        }
        Err(_) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("{name} is missing in CI: .ci/run must install redis-tools")
        }
        Err(_) => {
            eprintln!("{name} not installed; skipping that part (CI runs it)");
            None
        }
    }
}

/// Asserts that `INFO section` shows each of `fields` (whole `name:value` lines or their start).
fn assert_info_shows(con: &mut redis::Connection, section: &str, fields: &[&str]) {
    let info: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    for field in fields {
        assert!(
            info.contains(field),
            "{field} missing from INFO {section}: {info}"
        );
    }
}

/// Sets `k0`, `k1`, … `k{count - 1}` to `value(i)`.
fn set_numbered<V: redis::ToRedisArgs>(
    con: &mut redis::Connection,
    count: usize,
    value: impl Fn(usize) -> V,
) {
    for i in 0..count {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(value(i))
            .query(con)
            .unwrap();
    }
}

/// Reads back `k{i}` for each `i` in `indices` and checks it is `v{i}`.
fn expect_numbered(con: &mut redis::Connection, indices: impl IntoIterator<Item = usize>) {
    for i in indices {
        let got: String = redis::cmd("GET").arg(format!("k{i}")).query(con).unwrap();
        assert_eq!(got, format!("v{i}"));
    }
}

#[test]
fn cloak_up_serves_redis_clients() {
    let (port, metrics) = (free_port(), free_port());
    let metrics_addr = format!("127.0.0.1:{metrics}");
    let up = Running::start(
        &[
            "up",
            "--port",
            &port.to_string(),
            "--capacity",
            "20000",
            "--batch-interval",
            "5ms",
            "--metrics",
            &metrics_addr,
        ],
        "Stop with Ctrl-C",
    );
    let mut con = connect(port);
    let _: () = redis::cmd("SET").arg("a").arg("b").query(&mut con).unwrap();
    let got: String = redis::cmd("GET").arg("a").query(&mut con).unwrap();
    assert_eq!(got, "b");
    assert_info_shows(&mut con, "all", &["scheme:cloak", "capacity:20000"]);

    let mut http = std::net::TcpStream::connect(&metrics_addr).unwrap();
    std::io::Write::write_all(&mut http, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut page = String::new();
    std::io::Read::read_to_string(&mut http, &mut page).unwrap();
    assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
    assert!(page.contains("cloak_keys{scheme=\"cloak\"} 1"), "{page}");
    assert!(page.contains("cloak_latency_microseconds{scheme=\"cloak\",quantile=\"0.99\"}"));

    redis_tools_work(port, "5000");
    assert!(up.stop().success(), "cloak up exits cleanly on SIGTERM");
}

/// `SHUTDOWN` from a client stops `cloak up` the way Ctrl-C does: it drains and exits cleanly.
#[test]
fn shutdown_from_a_client_stops_cloak_up_cleanly() {
    let port = free_port();
    let up = Running::start(
        &["up", "--port", &port.to_string(), "--capacity", "1000"],
        "Stop with Ctrl-C",
    );
    let mut con = connect(port);
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    // As on Redis, the connection closes without a reply.
    let closed = redis::cmd("SHUTDOWN").query::<()>(&mut con).unwrap_err();
    assert!(
        closed.is_io_error() || closed.is_unrecoverable_error(),
        "{closed}"
    );
    assert!(up.wait().success(), "cloak up exits cleanly after SHUTDOWN");
}

/// `redis-cli` sets and gets, and `redis-benchmark` runs `requests` SETs and GETs of 512-byte
/// values over 1,000 keys from 50 clients without an error.
fn redis_tools_work(port: u16, requests: &str) {
    let p = port.to_string();
    if let Some(out) = redis_tool("redis-cli", &["-p", &p, "SET", "greeting", "hello"]) {
        assert_eq!(out.trim(), "OK");
        let out = redis_tool("redis-cli", &["-p", &p, "GET", "greeting"]).unwrap();
        assert_eq!(out.trim(), "hello");
    }
    if let Some(out) = redis_tool(
        "redis-benchmark",
        &[
            "-p", &p, "-t", "set,get", "-n", requests, "-r", "1000", "-d", "512", "-c", "50", "-q",
        ],
    ) {
        assert!(out.contains("SET:") && out.contains("GET:"), "{out}");
        assert!(!out.to_lowercase().contains("error"), "{out}");
    }
}

/// `cloak up --scheme curious` as the README shows it, and a clean stop: draining writes the
/// eviction cache to storage.
#[test]
fn cloak_up_runs_curious_for_redis_clients() {
    let port = free_port();
    let up = Running::start(
        &[
            "up",
            "--port",
            &port.to_string(),
            "--capacity",
            "20000",
            "--scheme",
            "curious",
        ],
        "Stop with Ctrl-C",
    );
    let mut con = connect(port);
    set_numbered(&mut con, 200, |i| format!("v{i}"));
    expect_numbered(&mut con, (0..200).rev());
    // 142 partitions: √20000 rounded up.
    assert_info_shows(
        &mut con,
        "scheme",
        &["partitions:142", "eviction_cache_high_water:"],
    );
    redis_tools_work(port, "2000");
    drop(con);
    assert!(
        up.stop().success(),
        "cloak up drains and exits cleanly on SIGTERM"
    );
}

#[test]
fn cloak_up_runs_path_oram() {
    let port = free_port();
    let up = Running::start(
        &[
            "up",
            "--port",
            &port.to_string(),
            "--scheme",
            "path-oram",
            "--capacity",
            "5000",
            "--oram-stash-limit",
            "120",
        ],
        "Stop with Ctrl-C",
    );
    let mut con = connect(port);
    set_numbered(&mut con, 200, |i| i);
    let got: String = redis::cmd("GET").arg("k77").query(&mut con).unwrap();
    assert_eq!(got, "77");
    assert_info_shows(
        &mut con,
        "scheme",
        &[
            "bucket_size:4",
            "tree_levels:13",
            "stash_limit:120",
            "stash_high_water:",
        ],
    );
    let p = port.to_string();
    if let Some(out) = redis_tool(
        "redis-benchmark",
        &[
            "-p", &p, "-t", "set,get", "-n", "2000", "-r", "1000", "-d", "512", "-c", "20", "-q",
        ],
    ) {
        assert!(out.contains("SET:") && out.contains("GET:"), "{out}");
        assert!(!out.to_lowercase().contains("error"), "{out}");
    }
    assert!(
        up.stop().success(),
        "cloak up drains its stash and exits on SIGTERM"
    );
}

fn keygen(dir: &Path) -> String {
    let key = dir.join("cloak.key");
    let status = Command::new(CLOAK)
        .args(["keygen", "-o"])
        .arg(&key)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(&key).unwrap().trim().len(), 64);
    let again = Command::new(CLOAK)
        .args(["keygen", "-o"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(!again.status.success(), "keygen must not overwrite a key");
    key.display().to_string()
}

#[test]
fn server_and_proxy_processes_and_a_dead_backend() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let (storage_port, proxy_port) = (free_port(), free_port());
    let storage_addr = format!("127.0.0.1:{storage_port}");
    let server = Running::start(&["server", "--listen", &storage_addr], "listening");
    let proxy = Running::start(
        &[
            "proxy",
            "--storage",
            &format!("tcp://{storage_addr}"),
            "--listen",
            &format!("127.0.0.1:{proxy_port}"),
            "--key-file",
            &key,
            "--capacity",
            "5000",
            "--batch-interval",
            "5ms",
            "--cache-size",
            "0",
            "--password",
            "pw",
        ],
        "listening",
    );
    let client = redis::Client::open(format!("redis://:pw@127.0.0.1:{proxy_port}/")).unwrap();
    let mut con = client.get_connection().unwrap();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    // Until a batch has carried the write to storage, reads are answered from it at the proxy.
    wait_until_written(&mut con);
    let got: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(got, "v");

    server.kill();
    std::thread::sleep(Duration::from_millis(100));
    let error = redis::cmd("GET")
        .arg("k")
        .query::<String>(&mut con)
        .unwrap_err();
    assert!(error.to_string().contains("storage unavailable"), "{error}");
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG", "the proxy stays up");
    proxy.kill();
}

/// The `INFO scheme` field `name` as a number.
fn info_number(con: &mut redis::Connection, name: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("scheme").query(con).unwrap();
    info.lines()
        .find_map(|l| l.trim_end().strip_prefix(&format!("{name}:")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {info}"))
}

/// Waits until no op waits for a batch and two more batches went by, so every acknowledged
/// write is in storage (on a loaded machine, batches run late).
fn wait_until_written(con: &mut redis::Connection) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while info_number(con, "queue_depth") > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the queue never drained"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    wait_for_two_batches(con, deadline);
}

/// Waits until two more batches went by, or fails at `deadline`.
fn wait_for_two_batches(con: &mut redis::Connection, deadline: std::time::Instant) {
    let batches = info_number(con, "batches_sent");
    while info_number(con, "batches_sent") < batches + 2 {
        assert!(std::time::Instant::now() < deadline, "batches stopped");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waffle on its defaults: 100,000 keys, the paper's batch, α and β in `INFO`; a clean SIGTERM
/// writes its cache back and exits.
#[test]
fn cloak_up_runs_waffle_on_its_defaults() {
    let port = free_port();
    let up = Running::start(
        &["up", "--scheme", "waffle", "--port", &port.to_string()],
        "Stop with Ctrl-C",
    );
    let mut con = connect(port);
    set_numbered(&mut con, 50, |i| format!("v{i}"));
    // The fill over and a few batches gone by, so some keys come back from storage (a sleep was
    // not enough on a loaded machine: Waffle answers while it fills).
    common::wait_until_filled(&mut con, Duration::from_secs(60));
    wait_for_two_batches(
        &mut con,
        std::time::Instant::now() + Duration::from_secs(60),
    );
    expect_numbered(&mut con, 0..50);
    assert_info_shows(
        &mut con,
        "scheme",
        &[
            "batch_size:2500",
            "real_per_batch:1000",
            "fake_dummy_per_batch:500",
            "cache_size:3000",
            "dummies:50000",
            "theoretical_alpha:100",
            "theoretical_beta:0",
            "storage_filled:true",
        ],
    );
    let p = port.to_string();
    if let Some(out) = redis_tool("redis-cli", &["-p", &p, "GET", "k7"]) {
        assert_eq!(out.trim(), "v7");
    }
    assert!(up.stop().success(), "cloak up exits cleanly on SIGTERM");
}

#[test]
fn config_files_are_read_and_flags_override_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cloak.toml");
    let port = free_port();
    std::fs::write(
        &config,
        format!("[store]\ncapacity = 3000\nscheme = \"encrypted\"\n\n[up]\nport = {port}\n"),
    )
    .unwrap();
    let up = Running::start(
        &[
            "--config",
            config.to_str().unwrap(),
            "up",
            "--scheme",
            "unsafe",
        ],
        "Stop with Ctrl-C",
    );
    let mut con = connect(port);
    assert_info_shows(&mut con, "scheme", &["capacity:3000"]);
    // The flag overrides the file.
    assert_info_shows(&mut con, "server", &["scheme:unsafe"]);
    up.kill();

    std::fs::write(&config, "[store]\ncapasity = 3000\n").unwrap();
    let out = Command::new(CLOAK)
        .args(["--config", config.to_str().unwrap(), "up"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown setting(s) capasity"), "{stderr}");

    let out = Command::new(CLOAK)
        .args(["proxy", "--storage", "memory"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no encryption key"));
}

#[test]
fn sigkill_of_the_proxy_loses_no_acknowledged_write() {
    sigkill_loses_nothing(&[
        "--capacity",
        "20000",
        "--batch-interval",
        "5ms",
        "--cache-size",
        "0",
    ]);
}

#[test]
fn sigkill_of_a_path_oram_proxy_loses_no_acknowledged_write() {
    sigkill_loses_nothing(&["--scheme", "path-oram", "--capacity", "2000"]);
}

/// CURIOUS keeps fetched and written blocks in its eviction cache, which the journal covers.
#[test]
fn sigkill_of_a_curious_proxy_loses_no_acknowledged_write() {
    sigkill_loses_nothing(&["--scheme", "curious", "--capacity", "20000"]);
}

/// Writers hammer a proxy with a state directory until every one of their keys was written
/// (however slow the disk's fsyncs are), a moment more, then the proxy is SIGKILLed; a new proxy
/// on the same storage and state directory must hold every acknowledged write.
fn sigkill_loses_nothing(store_args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (_server, proxy_args, proxy_port) = server_and_proxy_args(&state, store_args);
    let proxy_args: Vec<&str> = proxy_args.iter().map(String::as_str).collect();
    let proxy = Running::start(&proxy_args, "listening");
    // The proxy listens while it fills storage (a CURIOUS store writes every bucket of its
    // trees); the first write is answered once that is done.
    let mut con = connect(proxy_port);
    let _: () = redis::cmd("SET")
        .arg("ready")
        .arg("1")
        .query(&mut con)
        .unwrap();
    let _: i64 = redis::cmd("DEL").arg("ready").query(&mut con).unwrap();
    // A key in another database, which must come back in it (its stored key says which).
    let _: () = redis::cmd("SELECT").arg(5).query(&mut con).unwrap();
    let _: () = redis::cmd("SET")
        .arg("in-db-5")
        .arg("five")
        .query(&mut con)
        .unwrap();
    drop(con);

    // Writers keep overwriting their own 300 keys with increasing values and record, per key,
    // the last value that got +OK and the one in flight when the proxy died under them.
    type Log = (HashMap<String, String>, Option<(String, String)>);
    let keys_written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let acknowledged = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writers: Vec<std::thread::JoinHandle<Log>> = (0..4)
        .map(|w| {
            let keys_written = keys_written.clone();
            let acknowledged = acknowledged.clone();
            std::thread::spawn(move || {
                let mut acked = HashMap::new();
                let Ok(mut con) = redis::Client::open(format!("redis://127.0.0.1:{proxy_port}/"))
                    .unwrap()
                    .get_connection()
                else {
                    return (acked, None);
                };
                for i in 0.. {
                    let (key, value) = (format!("w{w}-{}", i % 300), format!("value-{w}-{i}"));
                    match redis::cmd("SET")
                        .arg(&key)
                        .arg(&value)
                        .query::<()>(&mut con)
                    {
                        Ok(()) => {
                            acknowledged.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if acked.insert(key, value).is_none() {
                                keys_written.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                        Err(_) => return (acked, Some((key, value))),
                    }
                }
                unreachable!("the loop ends when the proxy dies")
            })
        })
        .collect();
    let started = std::time::Instant::now();
    while keys_written.load(std::sync::atomic::Ordering::Relaxed) < 4 * 300 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the writers never got going"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    proxy.kill();
    let logs: Vec<Log> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let writes: usize = logs.iter().map(|(acked, _)| acked.len()).sum();
    assert_eq!(writes, 4 * 300, "every key was written");

    let _proxy = Running::start(&proxy_args, "listening");
    let mut con = connect(proxy_port);
    let mut lost = Vec::new();
    for (acked, in_flight) in &logs {
        let keys: Vec<&String> = acked.keys().collect();
        let got: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query(&mut con).unwrap();
        for (key, got) in keys.into_iter().zip(got) {
            let ok = got.as_ref() == acked.get(key)
                || in_flight
                    .as_ref()
                    .is_some_and(|(k, v)| k == key && got.as_ref() == Some(v));
            if !ok {
                lost.push((key.clone(), acked[key].clone(), got));
            }
        }
    }
    assert!(
        lost.is_empty(),
        "{} acknowledged writes lost after SIGKILL, e.g. (key, acknowledged, read) {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    let size: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(size, 4 * 300);
    // The key index is rebuilt from the elements: listing finds every key again.
    let listed: Vec<String> = redis::cmd("KEYS").arg("w1-*").query(&mut con).unwrap();
    assert_eq!(listed.len(), 300);
    let _: () = redis::cmd("SELECT").arg(5).query(&mut con).unwrap();
    let in_db_5: (Option<String>, i64, Vec<String>) = redis::pipe()
        .cmd("GET")
        .arg("in-db-5")
        .cmd("DBSIZE")
        .cmd("KEYS")
        .arg("*")
        .query(&mut con)
        .unwrap();
    assert_eq!(in_db_5, (Some("five".into()), 1, vec!["in-db-5".into()]));
    eprintln!(
        "{} writes acknowledged before SIGKILL; the last acknowledged value of each of {} keys \
         read back after the restart",
        acknowledged.load(std::sync::atomic::Ordering::Relaxed),
        4 * 300
    );
}

#[test]
fn pancake_starts_from_a_distribution_file() {
    let dir = tempfile::tempdir().unwrap();
    let weights = dir.path().join("weights.txt");
    // "hot" has half the weight: ceil(0.5 · 200) = 100 replicas of 400 labels. The 100 named
    // keys have their slots set aside; the other 100 slots take any other key.
    let mut text = String::from("hot 99\n");
    for i in 0..99 {
        text.push_str(&format!("k{i} 1\n"));
    }
    std::fs::write(&weights, text).unwrap();
    let port = free_port();
    let up = Running::start(
        &[
            "up",
            "--scheme",
            "pancake",
            "--capacity",
            "200",
            "--pancake-distribution",
            weights.to_str().unwrap(),
            "--port",
            &port.to_string(),
        ],
        "Stop with Ctrl-C",
    );
    let mut con = connect(port);
    let _: () = redis::cmd("SET")
        .arg("hot")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("other")
        .arg("w")
        .query(&mut con)
        .unwrap();
    let got: String = redis::cmd("GET").arg("hot").query(&mut con).unwrap();
    assert_eq!(got, "v");
    let got: String = redis::cmd("GET").arg("other").query(&mut con).unwrap();
    assert_eq!(got, "w");
    let size: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(size, 2, "designated keys do not exist until they are set");
    assert_info_shows(&mut con, "scheme", &["labels:400", "dummy_replicas:"]);
    up.kill();

    // A weight file with a bad line is refused with the line number.
    std::fs::write(&weights, "a 1\nb many\n").unwrap();
    let out = Command::new(CLOAK)
        .args([
            "up",
            "--scheme",
            "pancake",
            "--port",
            &free_port().to_string(),
            "--pancake-distribution",
            weights.to_str().unwrap(),
            "--pancake-distribution-format",
            "weights",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 2"), "{stderr}");
}

#[test]
fn client_limits_are_flags() {
    let error = fails(&["up", "--port", "0", "--client-reply-limit", "1000"]);
    assert!(
        error.contains("--client-reply-limit must be at least 65536 bytes"),
        "{error}"
    );
    let port = free_port();
    let up = Running::start(
        &[
            "up",
            "--port",
            &port.to_string(),
            "--capacity",
            "100",
            "--max-clients",
            "1",
            "--client-reply-limit",
            "1048576",
        ],
        "Stop with Ctrl-C",
    );
    let mut first = connect(port);
    let pong: String = redis::cmd("PING").query(&mut first).unwrap();
    assert_eq!(pong, "PONG");
    let mut second = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut reply = String::new();
    std::io::Read::read_to_string(&mut second, &mut reply).unwrap();
    assert_eq!(reply, "-ERR max number of clients reached\r\n");
    assert!(up.stop().success());
}
