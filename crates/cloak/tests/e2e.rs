//! The built `cloak` binary, started the way the README says, spoken to over RESP.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod common;

use common::{CLOAK, Running, connect, free_port};

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
    let info: String = redis::cmd("INFO").query(&mut con).unwrap();
    assert!(info.contains("scheme:cloak"), "{info}");
    assert!(info.contains("capacity:20000"), "{info}");

    let mut http = std::net::TcpStream::connect(&metrics_addr).unwrap();
    std::io::Write::write_all(&mut http, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut page = String::new();
    std::io::Read::read_to_string(&mut http, &mut page).unwrap();
    assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
    assert!(page.contains("cloak_keys{scheme=\"cloak\"} 1"), "{page}");
    assert!(page.contains("cloak_latency_microseconds{scheme=\"cloak\",quantile=\"0.99\"}"));

    let p = port.to_string();
    if let Some(out) = redis_tool("redis-cli", &["-p", &p, "SET", "greeting", "hello"]) {
        assert_eq!(out.trim(), "OK");
        let out = redis_tool("redis-cli", &["-p", &p, "GET", "greeting"]).unwrap();
        assert_eq!(out.trim(), "hello");
    }
    if let Some(out) = redis_tool(
        "redis-benchmark",
        &[
            "-p", &p, "-t", "set,get", "-n", "5000", "-r", "1000", "-d", "512", "-c", "50", "-q",
        ],
    ) {
        assert!(out.contains("SET:") && out.contains("GET:"), "{out}");
        assert!(!out.to_lowercase().contains("error"), "{out}");
    }
    assert!(up.stop().success(), "cloak up exits cleanly on SIGTERM");
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
    std::thread::sleep(Duration::from_millis(100));
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
    let info: String = redis::cmd("INFO").arg("keyspace").query(&mut con).unwrap();
    assert!(info.contains("capacity:3000"), "{info}");
    let info: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap();
    assert!(
        info.contains("scheme:unsafe"),
        "the flag overrides the file: {info}"
    );
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
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (storage_port, proxy_port) = (free_port(), free_port());
    let storage_addr = format!("127.0.0.1:{storage_port}");
    let _server = Running::start(&["server", "--listen", &storage_addr], "listening");
    let proxy_args = [
        "proxy",
        "--storage",
        &format!("tcp://{storage_addr}"),
        "--listen",
        &format!("127.0.0.1:{proxy_port}"),
        "--state-dir",
        state.to_str().unwrap(),
        "--capacity",
        "20000",
        "--batch-interval",
        "5ms",
        "--cache-size",
        "0",
    ];
    let proxy = Running::start(&proxy_args, "listening");

    // Writers keep overwriting their own 300 keys with increasing values and record, per key,
    // the last value that got +OK and the one in flight when the proxy died under them.
    type Log = (HashMap<String, String>, Option<(String, String)>);
    let writers: Vec<std::thread::JoinHandle<Log>> = (0..4)
        .map(|w| {
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
                            acked.insert(key, value);
                        }
                        Err(_) => return (acked, Some((key, value))),
                    }
                }
                unreachable!("the loop ends when the proxy dies")
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    proxy.kill();
    let logs: Vec<Log> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let writes: usize = logs.iter().map(|(acked, _)| acked.len()).sum();
    assert!(
        writes >= 4 * 300,
        "the writers got going: {writes} keys written"
    );

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
}
