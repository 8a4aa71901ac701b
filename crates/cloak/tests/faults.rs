//! Fault injection against the built binary: storage killed and restarted under writing clients,
//! a backend that goes away and comes back, directories that cannot take writes, a full disk.
//! The rule every test checks: a write that got `+OK` reads back, whatever happened.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cloak_storage::{MemoryStorage, Storage, StorageError, StorageOp, StorageReply, server};
use cloak_testkit::redis_server::{RedisCluster, RedisServer};
use common::{Running, connect, fails, free_port};

/// What one writer saw for each of its keys: the last value acknowledged, then the values sent
/// after it whose outcome is unknown (an error reply, which may or may not have taken effect).
#[derive(Default)]
struct History {
    keys: HashMap<String, (Option<String>, Vec<String>)>,
}

impl History {
    fn allowed(&self, key: &str, got: &Option<String>) -> bool {
        let (acked, unknown) = &self.keys[key];
        got == acked || got.as_ref().is_some_and(|g| unknown.contains(g))
    }
}

/// Clients overwriting their own keys through the proxy until stopped, going on through errors.
struct Writers {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<History>>,
}

impl Writers {
    fn start(proxy_port: u16, writers: usize, keys: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..writers)
            .map(|w| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut history = History::default();
                    let mut con = connect(proxy_port);
                    let mut i = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        let (key, value) = (format!("w{w}-{}", i % keys), format!("v{w}-{i}"));
                        let entry = history.keys.entry(key.clone()).or_default();
                        match redis::cmd("SET")
                            .arg(&key)
                            .arg(&value)
                            .query::<()>(&mut con)
                        {
                            Ok(()) => *entry = (Some(value), Vec::new()),
                            Err(_) => {
                                entry.1.push(value);
                                // Storage is down and the proxy pushes back: do not spin.
                                std::thread::sleep(Duration::from_millis(5));
                            }
                        }
                        i += 1;
                    }
                    history
                })
            })
            .collect();
        Self { stop, threads }
    }

    fn finish(self) -> Vec<History> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .map(|t| t.join().expect("a writer panicked"))
            .collect()
    }
}

/// Reads every key through the proxy (retrying while storage is still coming back) and checks
/// each holds its last acknowledged value (or a later one whose outcome was unknown).
fn check_nothing_lost(proxy_port: u16, histories: &[History]) {
    let mut con = connect(proxy_port);
    let mut acknowledged = 0;
    let mut lost = Vec::new();
    for history in histories {
        let keys: Vec<&String> = history.keys.keys().collect();
        let start = Instant::now();
        let got: Vec<Option<String>> = loop {
            match redis::cmd("MGET").arg(&keys).query(&mut con) {
                Ok(got) => break got,
                Err(error) => {
                    assert!(
                        start.elapsed() < Duration::from_secs(15),
                        "reads never came back: {error}"
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        for (key, got) in keys.into_iter().zip(got) {
            acknowledged += usize::from(history.keys[key].0.is_some());
            if !history.allowed(key, &got) {
                lost.push((key.clone(), history.keys[key].0.clone(), got));
            }
        }
    }
    assert!(acknowledged > 0, "some writes were acknowledged");
    assert!(
        lost.is_empty(),
        "{} acknowledged writes lost, e.g. (key, acknowledged, read) {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    eprintln!(
        "{acknowledged} keys with an acknowledged write: every one read back as acknowledged"
    );
}

fn proxy_args(storage: &str, port: u16, state: &Path) -> Vec<String> {
    proxy_args_every(storage, port, state, "5ms")
}

fn proxy_args_every(storage: &str, port: u16, state: &Path, interval: &str) -> Vec<String> {
    [
        "proxy",
        "--storage",
        storage,
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--state-dir",
        state.to_str().unwrap(),
        "--capacity",
        "5000",
        "--batch-interval",
        interval,
        "--cache-size",
        "0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn start(args: &[String], ready: &str) -> Running {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Running::start(&args, ready)
}

#[test]
fn sigkill_of_the_durable_storage_server_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let (data, state) = (dir.path().join("data"), dir.path().join("state"));
    let storage_addr = format!("127.0.0.1:{}", free_port());
    let server_args: Vec<String> = ["server", "--listen", &storage_addr, "--data-dir"]
        .iter()
        .map(|s| s.to_string())
        .chain([data.display().to_string()])
        .collect();
    let mut server = Some(start(&server_args, "listening"));
    let proxy_port = free_port();
    let proxy = proxy_args(&format!("tcp://{storage_addr}"), proxy_port, &state);
    crash_storage_under_writers(&proxy, proxy_port, || {
        server.take().expect("running").kill();
        std::thread::sleep(Duration::from_millis(300));
        server = Some(start(&server_args, "listening"));
    });
}

/// Clients write through a proxy while `crash` kills storage and starts it again; then every
/// acknowledged write reads back through that proxy, and through a new one that rebuilt
/// everything from a scan of the restarted storage (and its journal).
fn crash_storage_under_writers(proxy: &[String], proxy_port: u16, crash: impl FnOnce()) {
    let running_proxy = start(proxy, "listening");
    let writers = Writers::start(proxy_port, 4, 200);
    std::thread::sleep(Duration::from_millis(800));
    crash();
    std::thread::sleep(Duration::from_millis(700));
    let histories = writers.finish();
    check_nothing_lost(proxy_port, &histories);

    running_proxy.kill();
    let _proxy = start(proxy, "listening");
    check_nothing_lost(proxy_port, &histories);
}

/// A storage that, once told to, holds every write it receives half way through being applied,
/// as `cloak server --data-dir` holds one until its fsync, and lets them go when a scan's second
/// request comes (a restarted proxy's recovery under way), or when told to.
struct Holding {
    inner: MemoryStorage,
    holding: AtomicBool,
    held: std::sync::atomic::AtomicUsize,
    released: tokio::sync::watch::Sender<bool>,
}

impl Holding {
    fn let_go(&self) {
        self.holding.store(false, Ordering::SeqCst);
        self.released.send_replace(true);
    }
}

#[async_trait::async_trait]
impl Storage for Holding {
    async fn call(&self, op: StorageOp) -> Result<StorageReply, StorageError> {
        match &op {
            StorageOp::Write(_) if self.holding.load(Ordering::SeqCst) => {
                self.held.fetch_add(1, Ordering::SeqCst);
                let _ = self.released.subscribe().wait_for(|let_go| *let_go).await;
            }
            StorageOp::Scan { after: Some(_), .. } => {
                self.let_go();
                // The writes let go land before this chunk is read.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            _ => {}
        }
        self.inner.call(op).await
    }

    async fn fence(&self) -> Result<(), StorageError> {
        self.inner.fence().await
    }

    fn describe(&self) -> String {
        "holding".into()
    }
}

/// The restart race behind a CI failure of
/// [`sigkill_of_the_durable_storage_server_loses_no_acknowledged_write`], made certain: a proxy
/// is killed while `cloak server` holds its last write-back half applied, and the write-back
/// lands once the next proxy's recovery has scanned the first chunk of the store. Elements it
/// moved from the addresses not yet scanned to those already scanned would be seen nowhere, and
/// their keys read as missing; the new proxy's fence makes it wait for that write-back before it
/// scans anything (here 2 s, when the test lets the write go). Shown failing with the fence
/// skipped: keys read as nil.
#[test]
fn a_write_back_a_killed_proxy_left_in_the_server_does_not_land_in_the_next_scan() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let storage = Arc::new(Holding {
        inner: MemoryStorage::new(),
        holding: AtomicBool::new(false),
        held: Default::default(),
        released: tokio::sync::watch::channel(false).0,
    });
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let storage_url = format!("tcp://{}", listener.local_addr().unwrap());
    runtime.spawn(server::serve(
        listener,
        storage.clone() as Arc<dyn Storage>,
        std::future::pending(),
    ));
    let dir = tempfile::tempdir().unwrap();
    let proxy_port = free_port();
    let proxy = proxy_args(&storage_url, proxy_port, dir.path());
    let first = start(&proxy, "listening");
    let mut con = connect(proxy_port);
    // Enough keys that the store's elements take two chunks of the scan (4,096 each).
    let keys = 4500;
    for chunk in (0..keys).collect::<Vec<_>>().chunks(500) {
        let mut mset = redis::cmd("MSET");
        for i in chunk {
            mset.arg(format!("k{i}")).arg(format!("v{i}"));
        }
        let _: () = mset.query(&mut con).unwrap();
    }
    common::wait_until_stored(&mut con, Duration::from_secs(60));

    storage.holding.store(true, Ordering::SeqCst);
    let held_since = Instant::now();
    while storage.held.load(Ordering::SeqCst) == 0 {
        assert!(
            held_since.elapsed() < Duration::from_secs(10),
            "no write-back came"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    first.kill();
    let letting_go = {
        let storage = storage.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(2));
            storage.let_go();
        })
    };
    let _second = start(&proxy, "listening");
    letting_go.join().unwrap();
    let mut con = connect(proxy_port);
    let names: Vec<String> = (0..keys).map(|i| format!("k{i}")).collect();
    let got: Vec<Option<String>> = redis::cmd("MGET").arg(&names).query(&mut con).unwrap();
    let lost: Vec<&String> = names
        .iter()
        .zip(&got)
        .enumerate()
        .filter(|(i, (_, got))| got.as_deref() != Some(format!("v{i}").as_str()))
        .map(|(_, (name, _))| name)
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {keys} keys lost after the restart, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
}

/// Found by a review: a proxy fenced off by a later one (a paused machine that came back) had
/// its storage requests refused, but went on acknowledging clients' writes into its journal and
/// retrying them forever: writes acknowledged and never in the store. It now stops at its first
/// refusal, and every command gets an error. Shown failing without the stop: writes were still
/// acknowledged 5 s after the second proxy started.
#[test]
fn a_proxy_fenced_off_by_a_later_one_stops_acknowledging_writes() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("key");
    common::write_private(
        &key_file,
        cloak_crypto::MasterKey::from_bytes([9; 32]).to_hex(),
    );
    let storage_addr = format!("127.0.0.1:{}", free_port());
    let _server = start(
        &["server".into(), "--listen".into(), storage_addr.clone()],
        "listening",
    );
    let proxy = |name: &str, port: u16| {
        let mut args = proxy_args(
            &format!("tcp://{storage_addr}"),
            port,
            &dir.path().join(name),
        );
        args.extend(["--key-file".into(), key_file.display().to_string()]);
        args
    };
    let (first_port, second_port) = (free_port(), free_port());
    let _first = start(&proxy("first", first_port), "listening");
    let mut first = connect(first_port);
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut first)
        .unwrap();
    common::wait_until_stored(&mut first, Duration::from_secs(30));

    let _second = start(&proxy("second", second_port), "listening");
    let fenced = Instant::now();
    let error = loop {
        match redis::cmd("SET")
            .arg("late")
            .arg("v")
            .query::<()>(&mut first)
        {
            Err(error) => break error,
            Ok(()) => {
                assert!(
                    fenced.elapsed() < Duration::from_secs(5),
                    "the fenced-off proxy still acknowledges writes 5 s after the next one started"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    };
    assert!(error.to_string().contains("shutting down"), "{error}");
    for _ in 0..3 {
        let later = redis::cmd("SET")
            .arg("later")
            .arg("v")
            .query::<()>(&mut first);
        assert!(later.is_err(), "every command is refused from then on");
    }
    let mut second = connect(second_port);
    let got: Option<String> = redis::cmd("GET").arg("k").query(&mut second).unwrap();
    assert_eq!(got.as_deref(), Some("v"));
}

#[test]
fn a_redis_crash_with_aof_always_loses_no_acknowledged_write() {
    let mut redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy_port = free_port();
    let proxy = proxy_args(&redis.url(), proxy_port, dir.path());
    crash_storage_under_writers(&proxy, proxy_port, || {
        redis.kill();
        std::thread::sleep(Duration::from_millis(300));
        redis.restart();
    });
}

#[test]
fn an_unreachable_backend_gives_clear_errors_and_the_proxy_catches_up_when_it_returns() {
    let mut redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy_port = free_port();
    let _proxy = start(
        &proxy_args(&redis.url(), proxy_port, dir.path()),
        "listening",
    );
    let mut con = connect(proxy_port);
    for i in 0..100 {
        let _: () = redis::cmd("SET")
            .arg(format!("before-{i}"))
            .arg(i)
            .query(&mut con)
            .unwrap();
    }

    // Until the start's fill is over and the writes above are in storage, the proxy answers
    // reads of them from memory, and killing storage would not show.
    common::wait_until_stored(&mut con, Duration::from_secs(60));
    redis.kill();
    // A GET answered by a batch read that left before the kill still succeeds; on a loaded
    // machine the next batch may start late. The first failing one must say why.
    let start = Instant::now();
    let error = loop {
        match redis::cmd("GET").arg("before-1").query::<String>(&mut con) {
            Err(error) => break error.to_string(),
            Ok(_) if start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(_) => panic!("reads kept working 10 s after storage was killed"),
        }
    };
    assert!(
        error.contains("storage unavailable") && error.contains(&redis.port.to_string()),
        "the client learns storage is down, and which: {error}"
    );
    // Writes are acknowledged from the journal meanwhile, and must survive the outage.
    for i in 0..100 {
        let _: () = redis::cmd("SET")
            .arg(format!("during-{i}"))
            .arg(i)
            .query(&mut con)
            .unwrap();
    }
    // Long enough for the proxy's backoff to grow to its limit.
    std::thread::sleep(Duration::from_millis(1500));
    redis.restart();

    let start = Instant::now();
    let first: String = loop {
        match redis::cmd("GET").arg("before-1").query(&mut con) {
            Ok(value) => break value,
            Err(error) => {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "the proxy never caught up: {error}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    assert_eq!(first, "1");
    eprintln!(
        "reads came back {:?} after Redis restarted",
        start.elapsed()
    );
    for phase in ["before", "during"] {
        let keys: Vec<String> = (0..100).map(|i| format!("{phase}-{i}")).collect();
        let got: Vec<Option<i64>> = redis::cmd("MGET").arg(&keys).query(&mut con).unwrap();
        let want: Vec<Option<i64>> = (0..100).map(Some).collect();
        assert_eq!(got, want, "{phase} the outage");
    }
}

#[test]
fn a_proxy_over_a_redis_cluster_recovers_from_a_scan_of_every_master() {
    let cluster = RedisCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let proxy_port = free_port();
    let url = format!("{}?prefix=store1:", cluster.url());
    let proxy = proxy_args(&url, proxy_port, dir.path());
    let running_proxy = start(&proxy, "listening");
    let writers = Writers::start(proxy_port, 2, 200);
    std::thread::sleep(Duration::from_millis(800));
    running_proxy.kill();
    let histories = writers.finish();

    let _proxy = start(&proxy, "listening");
    check_nothing_lost(proxy_port, &histories);
    for node in &cluster.nodes {
        let keys: u64 = node.cli(&["DBSIZE"]).trim().parse().unwrap();
        assert!(keys > 1000, "node {} holds {keys} elements", node.port);
    }
}

/// Starts a server on `data`, which must refuse to start; what it said.
fn server_refuses(data: &Path) -> String {
    let listen = format!("127.0.0.1:{}", free_port());
    fails(&[
        "server",
        "--listen",
        &listen,
        "--data-dir",
        data.to_str().unwrap(),
    ])
}

/// Starts a proxy with its state in `state`, which must refuse to start; what it said.
fn proxy_refuses(state: &Path) -> String {
    fails(&[
        "proxy",
        "--storage",
        "memory",
        "--state-dir",
        state.to_str().unwrap(),
    ])
}

#[test]
fn unusable_directories_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let error = server_refuses(&file);
    assert!(error.contains("not a directory"), "{error}");
    let error = proxy_refuses(&file);
    assert!(error.contains("not a directory"), "{error}");

    // A second server on a data directory in use.
    let data = dir.path().join("data");
    let listen = format!("127.0.0.1:{}", free_port());
    let _first = Running::start(
        &[
            "server",
            "--listen",
            &listen,
            "--data-dir",
            data.to_str().unwrap(),
        ],
        "listening",
    );
    let error = server_refuses(&data);
    assert!(error.contains("another process"), "{error}");

    let Some(read_only) = Tmpfs::mount(dir.path().join("ro"), "ro,size=1m") else {
        return;
    };
    let error = server_refuses(&read_only.path.join("data"));
    assert!(error.contains("Read-only file system"), "{error}");
    let error = proxy_refuses(&read_only.path);
    assert!(error.contains("read-only"), "{error}");

    let full = Tmpfs::mount(dir.path().join("full"), "size=64k").expect("mounted once already");
    let _ = std::fs::write(full.path.join("filler"), vec![0u8; 64 << 10]);
    let error = server_refuses(&full.path);
    assert!(error.contains("No space left on device"), "{error}");
    let error = proxy_refuses(&full.path);
    assert!(error.contains("disk full"), "{error}");
}

#[test]
fn a_full_disk_refuses_writes_and_loses_nothing_once_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(dir.path().join("disk"), "size=256m") else {
        return;
    };
    let data = disk.path.join("data");
    let storage_addr = format!("127.0.0.1:{}", free_port());
    let _server = Running::start(
        &[
            "server",
            "--listen",
            &storage_addr,
            "--data-dir",
            data.to_str().unwrap(),
        ],
        "listening",
    );
    let proxy_port = free_port();
    let state = dir.path().join("state");
    let storage = format!("tcp://{storage_addr}");
    let _proxy = start(
        &proxy_args_every(&storage, proxy_port, &state, "20ms"),
        "listening",
    );
    let mut con = connect(proxy_port);
    let _: () = redis::cmd("SET")
        .arg("probe")
        .arg("stored")
        .query(&mut con)
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let writers = Writers::start(proxy_port, 2, 100);

    // Fill the disk to the last byte, and keep it full: the storage server's compaction may
    // delete a dead segment just after the fill (a race seen once in CI, where 8 MB freed that
    // way kept writes going past the test's 10 s), so whatever it frees is taken again.
    let filler = disk.path.join("filler");
    let mut file = std::fs::File::create(&filler).unwrap();
    let mut fill_up = || {
        let chunk = vec![0u8; 64 << 10];
        (0..8192).any(|_| std::io::Write::write_all(&mut file, &chunk).is_err())
    };
    assert!(fill_up(), "the disk filled up");
    let start = Instant::now();
    let error = loop {
        match redis::cmd("GET").arg("probe").query::<String>(&mut con) {
            Err(error) => break error.to_string(),
            Ok(_) => {
                assert!(fill_up(), "the disk stays full");
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "reads kept working with a full disk"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    assert!(
        error.contains("No space left on device"),
        "clients learn why: {error}"
    );
    std::thread::sleep(Duration::from_millis(300));
    drop(file);
    std::fs::remove_file(&filler).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let histories = writers.finish();
    check_nothing_lost(proxy_port, &histories);
    // Storage takes writes again after its next retry (a loaded CI machine may run it late):
    // the value written before the disk filled reads back.
    let start = Instant::now();
    let probe = loop {
        match redis::cmd("GET").arg("probe").query::<String>(&mut con) {
            Ok(probe) => break probe,
            Err(error) if start.elapsed() < Duration::from_secs(10) => {
                println!("not yet: {error}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(error) => panic!("storage never took writes again: {error}"),
        }
    };
    assert_eq!(probe, "stored");
}

/// A tmpfs mounted for one test (a small disk that fills, or a read-only one); unmounted on
/// drop. Mounting needs root and a sandbox that allows it; where it does not, the test prints
/// why that part did not run (it runs on the project's machines, which are root).
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    fn mount(path: PathBuf, options: &str) -> Option<Self> {
        std::fs::create_dir_all(&path).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(&path)
            .output()
            .unwrap();
        if out.status.success() {
            return Some(Self { path });
        }
        let why = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "SKIPPED: cannot mount a tmpfs ({why}); the part that needs a small disk did not run"
        );
        None
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}
