//! Secure links, through the binary: clients over TLS (redis-cli and a Rust client), mutual TLS,
//! `cloak server` behind mutual TLS or a storage secret, a TLS redis-server behind `rediss://`
//! and a TLS Redis Cluster behind `rediss+cluster://`, protected mode, certificate reload on
//! SIGHUP and on a changed file. Every refusal must be a clear error within a
//! bounded time, never a hang.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use cloak_storage::tls::certs::{Role, TestCa};
use common::{CLOAK, Running, certs, fails, free_port, rust_client};

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

/// `redis-cli` over TLS with `tls_args`; its stdout and stderr together. A hang fails the test.
fn redis_cli(port: u16, tls_args: &[String], command: &[&str]) -> String {
    let output = Command::new("timeout")
        .arg("20")
        .arg("redis-cli")
        .args(["-p", &port.to_string()])
        .args(tls_args)
        .args(command)
        .output()
        .expect("redis-cli runs (scripts/install-redis)");
    assert_ne!(output.status.code(), Some(124), "redis-cli hung");
    String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr)
}

fn tls(ca: &str) -> Vec<String> {
    vec!["--tls".into(), "--cacert".into(), ca.into()]
}

fn tls_as(ca: &str, cert: &str, key: &str) -> Vec<String> {
    let mut args = tls(ca);
    args.extend(["--cert".into(), cert.into(), "--key".into(), key.into()]);
    args
}

/// `cloak up` on `port` with `d`'s server certificate, and `extra` flags.
fn up_tls(d: &Path, port: u16, extra: &[String]) -> Running {
    let mut args = vec![
        "up".to_string(),
        "--port".into(),
        port.to_string(),
        "--tls-cert".into(),
        path(d, "server.pem"),
        "--tls-key".into(),
        path(d, "server.key"),
        "--capacity".into(),
        "1000".into(),
    ];
    args.extend(extra.iter().cloned());
    Running::start(&as_strs(&args), "Try:")
}

#[test]
fn redis_cli_and_a_rust_client_speak_tls_beside_the_plain_port() {
    let dir = tempfile::tempdir().unwrap();
    let d = certs(dir.path());
    let (port, tls_port) = (free_port(), free_port());
    let _up = up_tls(&d, port, &["--tls-port".into(), tls_port.to_string()]);
    let ca = path(&d, "ca.pem");
    assert_eq!(
        redis_cli(tls_port, &tls(&ca), &["SET", "k", "over tls"]).trim(),
        "OK"
    );
    assert_eq!(
        redis_cli(tls_port, &tls(&ca), &["GET", "k"]).trim(),
        "over tls"
    );
    // The plain port serves the same store, in the clear.
    assert_eq!(redis_cli(port, &[], &["GET", "k"]).trim(), "over tls");
    // Clear text on the TLS port is not RESP to it.
    assert_ne!(redis_cli(tls_port, &[], &["GET", "k"]).trim(), "over tls");

    let mut rust = rust_client(tls_port, &d.join("ca.pem"));
    redis::cmd("SET")
        .arg("r")
        .arg("from rust")
        .exec(&mut rust)
        .unwrap();
    let value: String = redis::cmd("GET").arg("r").query(&mut rust).unwrap();
    assert_eq!(value, "from rust");
}

#[test]
fn mutual_tls_serves_only_clients_with_a_certificate_from_the_ca() {
    let dir = tempfile::tempdir().unwrap();
    let d = certs(&dir.path().join("ours"));
    let stranger = certs(&dir.path().join("theirs"));
    let port = free_port();
    let _up = up_tls(&d, port, &["--tls-ca".into(), path(&d, "ca.pem")]);
    let ca = path(&d, "ca.pem");
    let ours = tls_as(&ca, &path(&d, "client.pem"), &path(&d, "client.key"));
    assert_eq!(redis_cli(port, &ours, &["SET", "k", "v"]).trim(), "OK");
    assert_eq!(redis_cli(port, &ours, &["GET", "k"]).trim(), "v");

    let start = Instant::now();
    let without = redis_cli(port, &tls(&ca), &["GET", "k"]);
    assert!(
        !without.trim().ends_with('v'),
        "served without a certificate: {without}"
    );
    let theirs = tls_as(
        &ca,
        &path(&stranger, "client.pem"),
        &path(&stranger, "client.key"),
    );
    let foreign = redis_cli(port, &theirs, &["GET", "k"]);
    assert!(
        !foreign.trim().ends_with('v'),
        "served a foreign certificate: {foreign}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "refusals must be quick"
    );
}

#[test]
fn a_slow_handshake_is_dropped_and_others_are_served_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let d = certs(dir.path());
    let port = free_port();
    let _up = up_tls(&d, port, &[]);
    // Connects and never says hello.
    let mut silent = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let ca = path(&d, "ca.pem");
    assert_eq!(redis_cli(port, &tls(&ca), &["PING"]).trim(), "PONG");
    let start = Instant::now();
    let mut buf = [0u8; 16];
    let closed = matches!(silent.read(&mut buf), Ok(0) | Err(_));
    assert!(closed, "the silent client was answered");
    let waited = start.elapsed();
    assert!(
        waited < Duration::from_secs(15),
        "the silent client held its connection for {waited:?}"
    );
    let _ = silent.write_all(b"PING\r\n");
}

/// `cloak server` on a free port with `args`; it and its port.
fn server(args: &[String]) -> (Running, u16) {
    let port = free_port();
    let mut all = vec![
        "server".to_string(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
    ];
    all.extend(args.iter().cloned());
    (Running::start(&as_strs(&all), "listening"), port)
}

/// A server's TLS flags with `d`'s certificate, and client certificates from `client_ca`.
fn tls_server_args(d: &Path, client_ca: &str) -> Vec<String> {
    vec![
        "--tls-cert".into(),
        path(d, "server.pem"),
        "--tls-key".into(),
        path(d, "server.key"),
        "--client-ca".into(),
        client_ca.into(),
    ]
}

fn subdir(dir: &Path, name: &str) -> PathBuf {
    let sub = dir.join(name);
    std::fs::create_dir_all(&sub).unwrap();
    sub
}

/// A new `cloak keygen` key in `dir`: a key file, or a storage secret.
fn key_file(dir: &Path) -> String {
    let key = dir.join("cloak.key");
    let output = Command::new(CLOAK).arg("keygen").output().unwrap();
    common::write_private(&key, output.stdout);
    key.display().to_string()
}

/// A proxy's arguments over `storage`, and the port it will listen on.
fn proxy_args(storage: String, key: &str, extra: &[String]) -> (Vec<String>, u16) {
    let port = free_port();
    let mut args: Vec<String> = [
        "proxy",
        "--storage",
        &storage,
        "--key-file",
        key,
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--capacity",
        "1000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().cloned());
    (args, port)
}

/// The proxy starts with `args` and serves a SET and a GET.
fn serves((args, port): (Vec<String>, u16)) {
    let _proxy = Running::start(&as_strs(&args), "listening");
    assert_eq!(redis_cli(port, &[], &["SET", "k", "v"]).trim(), "OK");
    assert_eq!(redis_cli(port, &[], &["GET", "k"]).trim(), "v");
}

/// The proxy refuses to start with `args`; what it said.
fn refused((args, _): (Vec<String>, u16)) -> String {
    fails(&as_strs(&args))
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn a_proxy_reaches_cloak_server_over_mutual_tls_and_is_refused_without_the_right_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let d = certs(&dir.path().join("ours"));
    let stranger = certs(&dir.path().join("theirs"));
    let ca = path(&d, "ca.pem");
    let (_server, port) = server(&tls_server_args(&d, &ca));
    let key = key_file(dir.path());
    let storage = format!("tls://localhost:{port}");
    let with = |cert_dir: &Path| {
        vec![
            "--storage-ca".to_string(),
            ca.clone(),
            "--storage-cert".into(),
            path(cert_dir, "client.pem"),
            "--storage-key".into(),
            path(cert_dir, "client.key"),
        ]
    };
    serves(proxy_args(storage.clone(), &key, &with(&d)));

    // No certificate: the server demands one.
    let missing = refused(proxy_args(
        storage.clone(),
        &key,
        &["--storage-ca".into(), ca.clone()],
    ));
    assert!(missing.contains("CertificateRequired"), "{missing}");

    // A certificate from another CA (of the same name: only its signature tells them apart). In
    // TLS 1.3 the server checks it after the client's side of the handshake is done, so the
    // refusal arrives as an alert on the first read.
    let foreign = refused(proxy_args(storage.clone(), &key, &with(&stranger)));
    assert!(foreign.contains("received fatal alert"), "{foreign}");

    // The server's certificate checked against the wrong CA (of the same name): the proxy
    // refuses the server.
    let mut wrong_ca = with(&d);
    wrong_ca[1] = path(&stranger, "ca.pem");
    let unknown = refused(proxy_args(storage.clone(), &key, &wrong_ca));
    assert!(unknown.contains("invalid peer certificate"), "{unknown}");

    // Clear text to a TLS server: a timeout that says what to do, not a hang.
    let plain = refused(proxy_args(format!("tcp://localhost:{port}"), &key, &[]));
    assert!(plain.contains("tls://"), "{plain}");
}

#[test]
fn an_expired_certificate_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = certs(dir.path());
    let ca = TestCa::new("expiry test CA").unwrap();
    let ca_file = path(dir.path(), "expiry-ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    let (_server, port) = server(&tls_server_args(&d, &ca_file));
    let day = Duration::from_secs(24 * 3600);
    let now = SystemTime::now();
    let expired = ca
        .issue_between(&["proxy"], Role::Client, now - 3 * day, now - day)
        .unwrap();
    std::fs::write(dir.path().join("expired.pem"), expired.cert_pem).unwrap();
    let expired_key = dir.path().join("expired.key");
    std::fs::write(&expired_key, expired.key_pem).unwrap();
    std::fs::set_permissions(&expired_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let key = key_file(dir.path());
    let with_expired = || {
        proxy_args(
            format!("tls://localhost:{port}"),
            &key,
            &[
                "--storage-ca".into(),
                path(&d, "ca.pem"),
                "--storage-cert".into(),
                path(dir.path(), "expired.pem"),
                "--storage-key".into(),
                path(dir.path(), "expired.key"),
            ],
        )
    };
    // A private key others may read is refused before it is read, naming the fix.
    let exposed = refused(with_expired());
    assert!(
        exposed.contains("expired.key has mode 0644") && exposed.contains("chmod 600"),
        "{exposed}"
    );
    std::fs::set_permissions(&expired_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let stale = refused(with_expired());
    assert!(stale.contains("CertificateExpired"), "{stale}");
}

#[test]
fn a_storage_secret_admits_only_proxies_that_know_it() {
    let dir = tempfile::tempdir().unwrap();
    let secret = key_file(&subdir(dir.path(), "ours"));
    let other = key_file(&subdir(dir.path(), "theirs"));
    let key = key_file(dir.path());
    let (_server, port) = server(&["--storage-secret-file".into(), secret.clone()]);
    let storage = format!("tcp://localhost:{port}");
    serves(proxy_args(
        storage.clone(),
        &key,
        &["--storage-secret-file".into(), secret],
    ));
    let wrong = refused(proxy_args(
        storage.clone(),
        &key,
        &["--storage-secret-file".into(), other.clone()],
    ));
    assert!(
        wrong.contains("refused this proxy's storage secret"),
        "{wrong}"
    );
    let missing = refused(proxy_args(storage, &key, &[]));
    assert!(missing.contains("requires a storage secret"), "{missing}");

    // A server without a secret has proved nothing to a proxy that has one.
    let (_open, open_port) = server(&[]);
    let unproven = refused(proxy_args(
        format!("tcp://localhost:{open_port}"),
        &key,
        &["--storage-secret-file".into(), other],
    ));
    assert!(
        unproven.contains("does not check a storage secret"),
        "{unproven}"
    );
}

#[test]
fn protected_mode_refuses_open_ports_on_other_interfaces() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let open_up = [
        "up",
        "--bind",
        "0.0.0.0",
        "--port",
        &port,
        "--capacity",
        "100",
    ];
    let open = fails(&open_up);
    assert!(
        open.contains("protected mode") && open.contains("--password"),
        "{open}"
    );
    let server = fails(&["server", "--listen", &format!("0.0.0.0:{port}")]);
    assert!(
        server.contains("protected mode") && server.contains("--storage-secret-file"),
        "{server}"
    );
    // TLS without client certificates encrypts, but lets anyone in.
    let d = certs(dir.path());
    let tls_only = fails(&[
        "server",
        "--listen",
        &format!("0.0.0.0:{port}"),
        "--tls-cert",
        &path(&d, "server.pem"),
        "--tls-key",
        &path(&d, "server.key"),
    ]);
    assert!(tls_only.contains("protected mode"), "{tls_only}");

    // A password, or turning protected mode off, lets it start.
    for extra in [["--password", "pw"], ["--protected-mode", "no"]] {
        let mut args = open_up.to_vec();
        args.extend(extra);
        Running::start(&args, "Try:").stop();
    }
    Running::start(
        &[
            "server",
            "--listen",
            &format!("0.0.0.0:{port}"),
            "--protected-mode",
            "no",
        ],
        "listening",
    )
    .stop();
}

#[test]
fn rediss_reaches_a_tls_redis_server_as_an_acl_user() {
    let dir = tempfile::tempdir().unwrap();
    let d = certs(dir.path());
    let tls_port = free_port();
    let _redis = cloak_testkit::redis_server::RedisServer::start_with(
        &[
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert-file",
            &path(&d, "server.pem"),
            "--tls-key-file",
            &path(&d, "server.key"),
            "--tls-ca-cert-file",
            &path(&d, "ca.pem"),
            "--tls-auth-clients",
            "no",
            "--user",
            "cloak",
            "on",
            ">cloak-password",
            "~*",
            "+@all",
        ],
        false,
    );
    let key = key_file(dir.path());
    let ca = ["--storage-ca".to_string(), path(&d, "ca.pem")];
    serves(proxy_args(
        format!("rediss://cloak:cloak-password@localhost:{tls_port}"),
        &key,
        &ca,
    ));
    let wrong = refused(proxy_args(
        format!("rediss://cloak:wrong@localhost:{tls_port}"),
        &key,
        &ca,
    ));
    assert!(wrong.contains("authentication failed"), "{wrong}");
}

#[test]
fn rediss_cluster_reaches_a_tls_redis_cluster_and_refuses_an_unknown_ca() {
    let dir = tempfile::tempdir().unwrap();
    let d = certs(&dir.path().join("ours"));
    let stranger = certs(&dir.path().join("theirs"));
    let cluster = cloak_testkit::redis_server::RedisCluster::start_tls(3, &d);
    let key = key_file(dir.path());
    let nodes: Vec<String> = cluster
        .tls_ports
        .iter()
        .map(|port| format!("localhost:{port}"))
        .collect();
    let url = format!("rediss+cluster://{}", nodes.join(","));
    let (args, port) = proxy_args(
        url.clone(),
        &key,
        &["--storage-ca".to_string(), path(&d, "ca.pem")],
    );
    let proxy = Running::start(&as_strs(&args), "listening");
    assert_eq!(redis_cli(port, &[], &["SET", "k", "v"]).trim(), "OK");
    assert_eq!(redis_cli(port, &[], &["GET", "k"]).trim(), "v");
    // Its elements reach the cluster's nodes (over TLS: the proxy was given no plain port) as
    // its fill and batches go on.
    let start = Instant::now();
    let stored = || -> u64 {
        cluster
            .nodes
            .iter()
            .map(|node| node.cli(&["DBSIZE"]).trim().parse::<u64>().unwrap())
            .sum()
    };
    while stored() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no elements in the cluster"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(proxy);
    // A cluster whose certificate this proxy cannot check is refused, not trusted.
    let unknown = refused(proxy_args(
        url,
        &key,
        &["--storage-ca".to_string(), path(&stranger, "ca.pem")],
    ));
    assert!(unknown.to_lowercase().contains("certificate"), "{unknown}");
}

/// Waits, at most `limit`, until the proxy on `port` serves a certificate that clients trusting
/// `ca` accept: a reload has happened.
fn serves_certificate_of(port: u16, ca: &str, limit: Duration) {
    let start = Instant::now();
    while redis_cli(port, &tls(ca), &["PING"]).trim() != "PONG" {
        assert!(start.elapsed() < limit, "never reloaded");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A proxy serving the certificate in `live`, and another CA's certificate in `next` to renew
/// it with: what the reload tests start from.
struct Renewal {
    _dir: tempfile::TempDir,
    live: PathBuf,
    next: PathBuf,
    port: u16,
    up: Running,
}

impl Renewal {
    /// The CA that checks the renewed certificate.
    fn new_ca(&self) -> String {
        path(&self.next, "ca.pem")
    }

    /// Copies the renewed certificate and key over the live ones, as a renewal tool does.
    fn install(&self) {
        for name in ["server.pem", "server.key"] {
            std::fs::copy(self.next.join(name), self.live.join(name)).unwrap();
        }
    }
}

fn renewal() -> Renewal {
    let dir = tempfile::tempdir().unwrap();
    let live = certs(&dir.path().join("live"));
    let next = certs(&dir.path().join("next"));
    let port = free_port();
    let up = up_tls(&live, port, &[]);
    Renewal {
        _dir: dir,
        live,
        next,
        port,
        up,
    }
}

#[test]
fn sighup_reloads_the_certificate_for_new_connections() {
    let renewal = renewal();
    let (live, next, port) = (&renewal.live, &renewal.next, renewal.port);
    let old_ca = path(live, "ca.pem");
    let new_ca = renewal.new_ca();
    let mut established = rust_client(port, &live.join("ca.pem"));
    redis::cmd("SET")
        .arg("k")
        .arg("v")
        .exec(&mut established)
        .unwrap();

    for name in ["server.pem", "server.key"] {
        let modified = std::fs::metadata(live.join(name))
            .unwrap()
            .modified()
            .unwrap();
        // The same modification time, so only the signal can tell the proxy (a changed file is
        // reloaded without one: `a_certificate_renewed_in_place_is_reloaded_without_a_signal`).
        // Staged beside it and renamed over it, so the proxy's check for changed files never
        // sees the new file before its time is set back.
        let staged = live.join(format!("{name}.next"));
        std::fs::copy(next.join(name), &staged).unwrap();
        let file = std::fs::File::options().write(true).open(&staged).unwrap();
        file.set_modified(modified).unwrap();
        drop(file);
        std::fs::rename(&staged, live.join(name)).unwrap();
    }
    // Past the proxy's check for changed files: the old certificate is still served.
    std::thread::sleep(Duration::from_secs(3));
    // A certificate the clients of the old CA cannot check, until the proxy is told.
    assert_eq!(redis_cli(port, &tls(&old_ca), &["PING"]).trim(), "PONG");
    let status = Command::new("kill")
        .args(["-HUP", &renewal.up.pid()])
        .status()
        .unwrap();
    assert!(status.success());
    serves_certificate_of(port, &new_ca, Duration::from_secs(10));
    assert_ne!(redis_cli(port, &tls(&old_ca), &["PING"]).trim(), "PONG");
    // The connection made before the reload continues.
    let value: String = redis::cmd("GET").arg("k").query(&mut established).unwrap();
    assert_eq!(value, "v");
}

#[test]
fn a_renewed_key_refused_for_its_mode_is_reloaded_once_made_private() {
    let renewal = renewal();
    let new_ca = renewal.new_ca();
    let key = renewal.live.join("server.key");
    // A renewal tool that leaves the key readable by others (modes first, so no moment shows
    // the new key private): refused, the old certificate stays.
    for exposed in [&key, &renewal.next.join("server.key")] {
        std::fs::set_permissions(exposed, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    renewal.install();
    std::thread::sleep(Duration::from_secs(5));
    assert_ne!(
        redis_cli(renewal.port, &tls(&new_ca), &["PING"]).trim(),
        "PONG"
    );
    // `chmod 600` changes the mode, not the modification time: still noticed.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    serves_certificate_of(renewal.port, &new_ca, Duration::from_secs(15));
}

#[test]
fn a_certificate_renewed_in_place_is_reloaded_without_a_signal() {
    let renewal = renewal();
    let (port, new_ca) = (renewal.port, renewal.new_ca());
    assert_ne!(redis_cli(port, &tls(&new_ca), &["PING"]).trim(), "PONG");

    renewal.install();
    serves_certificate_of(port, &new_ca, Duration::from_secs(15));
    assert_ne!(
        redis_cli(port, &tls(&path(&renewal.live, "ca.pem")), &["PING"]).trim(),
        "PONG"
    );
}
