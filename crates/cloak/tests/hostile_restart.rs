//! A hostile (or damaged) storage server at restart: whatever it deletes, alters, swaps or rolls
//! back while the proxy is down, the restarted proxy refuses to start and says what happened;
//! `--accept-data-loss` starts anyway and says what was lost. A wrong key and changed sizes are
//! refused by name. Every test runs over `cloak server --data-dir` and over Redis, and tampers
//! through the same storage client the proxy uses, as a hostile server could.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cloak_core::{Addr, RecordLayout, STORE_MARKER, StorageOp, StorageReply};
use cloak_crypto::MasterKey;
use cloak_proxy::StoreId;
use cloak_schemes::SchemeName;
use cloak_storage::{RedisStorage, RedisTarget, Storage, TcpStorage};
use cloak_testkit::redis_server::RedisServer;
use common::{CLOAK, Running, connect, fails, free_port};

const KEYS: usize = 300;
/// How a refusal introduces slots storage holds older than the proxy wrote them.
const OLDER: &str =
    "older than the proxy last wrote them (rolled back, or brought back after a DEL)";

/// Where the elements live, as a hostile server would see and change them.
enum Server {
    Cloak {
        _process: Running,
        addr: String,
        _data: tempfile::TempDir,
    },
    Redis(RedisServer),
}

impl Server {
    fn both() -> [fn() -> Server; 2] {
        [Server::cloak, || Server::Redis(RedisServer::start())]
    }

    fn cloak() -> Server {
        let data = tempfile::tempdir().unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let process = Running::start(
            &[
                "server",
                "--listen",
                &addr,
                "--data-dir",
                data.path().to_str().unwrap(),
            ],
            "listening",
        );
        Server::Cloak {
            _process: process,
            addr,
            _data: data,
        }
    }

    fn url(&self) -> String {
        match self {
            Server::Cloak { addr, .. } => format!("tcp://{addr}"),
            Server::Redis(redis) => redis.url(),
        }
    }

    /// Runs one storage request, as the server's owner could.
    fn call(&self, op: StorageOp) -> StorageReply {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let storage: Box<dyn Storage> = match self {
                Server::Cloak { addr, .. } => Box::new(TcpStorage::connect(addr, 1).await.unwrap()),
                Server::Redis(redis) => Box::new(
                    RedisStorage::connect(RedisTarget::parse(&redis.url()).unwrap().unwrap(), None)
                        .await
                        .unwrap(),
                ),
            };
            storage.call(op).await.unwrap()
        })
    }

    /// The store's elements, without its marker (which a test tampers with on purpose only).
    fn scan(&self) -> Vec<(Addr, Bytes)> {
        let mut all = self.scan_all();
        all.retain(|(address, _)| *address != STORE_MARKER);
        all
    }

    /// Everything storage holds, once it has settled. A proxy's clean stop exits only once
    /// storage has answered every request it sent (`cloak-proxy/tests/clean_stop.rs`; it once
    /// exited with its last dummy write-back still landing, and a test that edited the scanned
    /// state then lost a slot), so after a stop the first scan is final; the loop is for scans
    /// taken while a proxy runs, and gives up settling after a second.
    fn scan_all(&self) -> Vec<(Addr, Bytes)> {
        let mut last = self.scan_once();
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(20));
            let next = self.scan_once();
            if next == last {
                return next;
            }
            last = next;
        }
        last
    }

    fn scan_once(&self) -> Vec<(Addr, Bytes)> {
        let mut all: Vec<(Addr, Bytes)> = Vec::new();
        loop {
            let StorageReply::Entries(entries) = self.call(StorageOp::Scan {
                after: all.last().map(|(a, _)| *a),
                limit: 4096,
            }) else {
                panic!("a scan answers entries")
            };
            let done = entries.len() < 4096;
            all.extend(entries);
            if done {
                return all;
            }
        }
    }

    fn write(&self, elements: Vec<(Addr, Bytes)>) {
        self.call(StorageOp::Write(elements));
    }

    /// Puts back exactly `snapshot`: what the server kept from an earlier time.
    fn restore(&self, snapshot: &[(Addr, Bytes)]) {
        let now: Vec<Addr> = self.scan().into_iter().map(|(a, _)| a).collect();
        let extra: Vec<Addr> = now
            .into_iter()
            .filter(|a| snapshot.iter().all(|(s, _)| s != a))
            .collect();
        self.call(StorageOp::Delete(extra));
        self.write(snapshot.to_vec());
    }
}

/// A proxy's settings and state directory over one server.
struct Proxy {
    state: PathBuf,
    port: u16,
    storage: String,
    scheme: &'static str,
    /// Flags every start of this proxy gets: `--durability none` unless a test says otherwise,
    /// so that storage holds the only copy of every record. (The journal may still hold a record
    /// storage also has; a deletion or rollback of that one loses nothing, and the proxy rightly
    /// starts.)
    always: Vec<&'static str>,
    /// `--key-file`, when the test gives one (else the state directory keeps the key).
    key_file: Option<PathBuf>,
    /// Keys [`Proxy::populate`] writes ([`KEYS`] unless a test says otherwise); the store has
    /// room for them (`--capacity` 1000 or this much more).
    keys: usize,
    _dir: tempfile::TempDir,
}

impl Proxy {
    fn new(server: &Server, scheme: &'static str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self {
            state: dir.path().join("state"),
            port: free_port(),
            storage: server.url(),
            scheme,
            always: vec!["--durability", "none"],
            key_file: None,
            keys: KEYS,
            _dir: dir,
        }
    }

    /// A proxy like [`Proxy::new`]'s whose store holds `keys` keys.
    fn holding(server: &Server, scheme: &'static str, keys: usize) -> Self {
        Self {
            keys,
            ..Self::new(server, scheme)
        }
    }

    fn args(&self, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "proxy",
            "--storage",
            &self.storage,
            "--listen",
            &format!("127.0.0.1:{}", self.port),
            "--state-dir",
            self.state.to_str().unwrap(),
            "--scheme",
            self.scheme,
            "--capacity",
            &(self.keys.max(KEYS) + 700).to_string(),
            "--batch-interval",
            "5ms",
            "--cache-size",
            "0",
        ]
        .iter()
        .chain(&self.always)
        .map(|s| s.to_string())
        .collect();
        if let Some(key) = &self.key_file {
            args.extend(["--key-file".to_string(), key.display().to_string()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    fn start(&self, extra: &[&str]) -> Running {
        let args = self.args(extra);
        Running::start(
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            "listening",
        )
    }

    /// Starts with `extra`, which must be refused; what the proxy said.
    fn refused(&self, extra: &[&str]) -> String {
        let args = self.args(extra);
        fails(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// Writes `k0…k299` (or as many as the proxy holds) and stops cleanly.
    fn populate(&self) {
        let proxy = self.start(&[]);
        let mut con = connect(self.port);
        for chunk in (0..self.keys).collect::<Vec<_>>().chunks(100) {
            let mut mset = redis::cmd("MSET");
            for i in chunk {
                mset.arg(format!("k{i}")).arg(format!("value {i}"));
            }
            let () = mset.query(&mut con).unwrap();
        }
        assert!(proxy.stop().success());
    }

    fn master(&self) -> MasterKey {
        let default = self.state.join("key");
        MasterKey::load(self.key_file.as_ref().unwrap_or(&default)).unwrap()
    }

    /// The store's id, as its marker in `server` names it.
    fn store_id(&self, server: &Server) -> StoreId {
        let StorageReply::Values(values) = server.call(StorageOp::Read(vec![STORE_MARKER])) else {
            panic!("a read answers values")
        };
        let marker = values[0]
            .as_ref()
            .expect("storage holds the store's marker");
        StoreId::from_marker(&self.master(), marker).expect("the marker authenticates")
    }

    /// The elements holding a client key, with that key (as the proxy's own decoder reads them).
    fn holding_keys(&self, server: &Server, elements: &[(Addr, Bytes)]) -> Vec<(Addr, String)> {
        let format = cloak_schemes::element_format(
            self.scheme.parse::<SchemeName>().unwrap(),
            RecordLayout {
                max_key: 128,
                max_value: 1024,
            },
            &self.store_id(server).key(&self.master()),
        )
        .unwrap();
        elements
            .iter()
            .filter_map(|(address, element)| {
                let (_, records) = format.records(*address, element).ok()?;
                let (_, record) = records.into_iter().find(|(_, r)| !r.is_empty())?;
                Some((*address, String::from_utf8_lossy(&record.key).into_owned()))
            })
            .collect()
    }

    /// Starts, reads `key` back as [`Proxy::populate`] wrote it, and stops cleanly.
    fn starts_and_serves(&self, key: &str) {
        let running = self.start(&[]);
        let written = format!("value {}", &key[1..]);
        assert_eq!(self.get(key), Some(written));
        assert!(running.stop().success());
    }

    fn get(&self, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut connect(self.port))
            .unwrap()
    }
}

/// A proxy started with its stderr captured (where `--accept-data-loss` reports the loss).
struct Watched {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Watched {
    fn start(args: &[String]) -> Self {
        Self::try_start(args).unwrap_or_else(|stderr| panic!("the proxy never listened: {stderr}"))
    }

    /// Starts `cloak args…`; `Err` with its stderr when it exits instead of listening.
    fn try_start(args: &[String]) -> Result<Self, String> {
        let mut child = Command::new(CLOAK)
            .args(args)
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        let reader = std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut pipe, &mut buffer) {
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buffer[..n]));
            }
        });
        // Stdout is read to its end, so the proxy never writes into a closed pipe.
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let (lines, output) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(stdout).map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
        let listening = output.iter().any(|line| line.contains("listening"));
        if !listening {
            let _ = child.wait();
            let _ = reader.join();
            return Err(stderr.lock().unwrap().clone());
        }
        Ok(Self { child, stderr })
    }

    /// Waits until stderr contains `text`; all of stderr.
    fn stderr_with(&self, text: &str) -> String {
        let start = Instant::now();
        loop {
            let stderr = self.stderr.lock().unwrap().clone();
            if stderr.contains(text) || start.elapsed() > Duration::from_secs(10) {
                return stderr;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(mut self) {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(common::wait_timeout(&mut self.child, Duration::from_secs(20)).success());
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The measurement: 300 keys written and a clean stop, then the server deletes one
/// element that holds a key. Before, the restarted proxy served the store with that key gone
/// (GET answered nil); now it refuses, naming the missing slot. `--accept-data-loss` starts,
/// says what was lost, and the next plain start is clean again.
#[test]
fn one_deleted_element_refuses_the_restart_until_the_loss_is_accepted() {
    for server in Server::both() {
        let server = server();
        let proxy = Proxy::new(&server, "cloak");
        proxy.populate();
        let elements = server.scan();
        let (address, lost_key) = proxy.holding_keys(&server, &elements)[0].clone();
        server.call(StorageOp::Delete(vec![address]));

        // Written so it measures any build: an older proxy that starts is asked for the key.
        let error = match Watched::try_start(&proxy.args(&[])) {
            Err(error) => error,
            Ok(started) => {
                let got = proxy.get(&lost_key);
                started.stop();
                panic!(
                    "{}: deleted the element holding {lost_key:?}; the restarted proxy started and \
                     GET {lost_key} answered {got:?}",
                    server.url()
                );
            }
        };
        eprintln!(
            "{}: deleted the element holding {lost_key:?}; the restarted proxy refused:\n{error}",
            server.url()
        );
        assert!(
            error.contains("missing from storage (no element holds them): 1 slot;"),
            "{error}"
        );
        assert!(error.contains("--accept-data-loss"), "{error}");

        let accepting = Watched::start(&proxy.args(&["--accept-data-loss"]));
        let said = accepting.stderr_with("this is lost");
        assert!(said.contains("this is lost"), "{said}");
        assert!(said.contains("missing from storage"), "{said}");
        assert_eq!(proxy.get(&lost_key), None, "the lost key is gone");
        let kept = if lost_key == "k0" { "k1" } else { "k0" };
        assert!(proxy.get(kept).is_some(), "{kept} is kept");
        accepting.stop();

        // The loss was accepted and recorded: the next start is an ordinary one.
        let again = proxy.start(&[]);
        assert_eq!(proxy.get(&lost_key), None);
        assert!(again.stop().success());
    }
}

/// One element altered, two swapped, one truncated: each refuses the restart by what it is,
/// and once storage is put back the same proxy starts (so the refusals were the tampering's).
#[test]
fn altered_swapped_and_truncated_elements_refuse_the_restart() {
    for server in Server::both() {
        let server = server();
        let proxy = Proxy::new(&server, "cloak");
        proxy.populate();
        let elements = server.scan();
        let n = elements.len();
        let (a, b) = (elements[3].clone(), elements[n / 2].clone());

        let mut altered = a.1.to_vec();
        let last = altered.len() - 1;
        altered[last] ^= 1;
        server.write(vec![(a.0, Bytes::from(altered))]);
        let error = proxy.refused(&[]);
        assert!(
            error.contains(&format!("1 of {n} elements failed authentication")),
            "{error}"
        );
        assert!(
            error.contains(&a.0.to_string()),
            "names the address: {error}"
        );

        server.write(vec![(a.0, b.1.clone()), (b.0, a.1.clone())]);
        let error = proxy.refused(&[]);
        assert!(
            error.contains(&format!("2 of {n} elements failed authentication")),
            "{error}"
        );

        server.write(vec![(a.0, a.1.slice(..10)), (b.0, b.1.clone())]);
        let error = proxy.refused(&[]);
        assert!(
            error.contains(&format!("1 of {n} elements are too short")),
            "{error}"
        );

        server.write(vec![(a.0, a.1.clone())]);
        proxy.starts_and_serves("k7");

        // An element at an address the store never uses: the fill does not overwrite it, so an
        // accepted start deletes it, or it would refuse every start after.
        let foreign: Addr = 1 << 40;
        server.write(vec![(foreign, a.1.clone())]);
        let error = proxy.refused(&[]);
        let n = server.scan().len();
        assert!(
            error.contains(&format!("1 of {n} elements failed authentication")),
            "{error}"
        );
        Watched::start(&proxy.args(&["--accept-data-loss"])).stop();
        assert!(server.scan().iter().all(|(address, _)| *address != foreign));
        proxy.starts_and_serves("k7");
    }
}

/// The server keeps a copy of the whole store, the proxy overwrites one key and deletes another,
/// then the server puts its copy back: the overwritten key would read its old value and the
/// deleted one would come back. The restart refuses and names both keys.
#[test]
fn a_store_rolled_back_to_an_earlier_copy_refuses_the_restart() {
    for server in Server::both() {
        let server = server();
        let proxy = Proxy::new(&server, "cloak");
        proxy.populate();
        let snapshot = server.scan();

        let running = proxy.start(&[]);
        let mut con = connect(proxy.port);
        let () = redis::cmd("SET")
            .arg("k5")
            .arg("newer")
            .query(&mut con)
            .unwrap();
        let _: i64 = redis::cmd("DEL").arg("k6").query(&mut con).unwrap();
        assert!(running.stop().success());

        server.restore(&snapshot);
        let error = proxy.refused(&[]);
        assert!(error.contains(&format!("{OLDER}: 2 slots;")), "{error}");
        assert!(
            error.contains("\"k5\"") && error.contains("\"k6\""),
            "{error}"
        );
        assert!(error.contains("rolled back"), "{error}");
    }
}

/// One element rolled back on its own: the encrypted-only scheme keeps each key under one
/// label, so the server can put an older element for that key back in place.
#[test]
fn one_element_rolled_back_refuses_the_restart() {
    for server in Server::both() {
        let server = server();
        let proxy = Proxy::new(&server, "encrypted");
        proxy.populate();
        let before = server.scan();

        let running = proxy.start(&[]);
        let () = redis::cmd("SET")
            .arg("k9")
            .arg("newer")
            .query(&mut connect(proxy.port))
            .unwrap();
        assert!(running.stop().success());

        let (address, _) = proxy
            .holding_keys(&server, &before)
            .into_iter()
            .find(|(_, key)| key == "k9")
            .unwrap();
        let old = before
            .iter()
            .find(|(a, _)| *a == address)
            .unwrap()
            .1
            .clone();
        server.write(vec![(address, old)]);
        let error = proxy.refused(&[]);
        assert!(error.contains(&format!("{OLDER}: 1 slot;")), "{error}");
        assert!(error.contains("\"k9\""), "{error}");
    }
}

/// A wrong key and a smaller value size are refused by name: from the state directory's ledger,
/// and, for a proxy whose state directory is new, from the elements themselves.
#[test]
fn a_wrong_key_and_a_smaller_value_size_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let other_key = dir.path().join("other.key");
    common::write_private(&other_key, MasterKey::generate().unwrap().to_hex());
    for server in Server::both() {
        let server = server();
        let proxy = Proxy::new(&server, "cloak");
        proxy.populate();
        let key_file = proxy.state.join("key");

        let error = proxy.refused(&["--key-file", other_key.to_str().unwrap()]);
        assert!(error.contains("wrong key"), "{error}");
        let error = proxy.refused(&["--value-size", "512"]);
        assert!(
            error.contains("value size changed from 1024 to 512"),
            "{error}"
        );

        let fresh = Proxy::new(&server, "cloak");
        let error = fresh.refused(&["--key-file", other_key.to_str().unwrap()]);
        assert!(
            error.contains("does not authenticate under this key: the proxy has the wrong key"),
            "{error}"
        );
        let error = fresh.refused(&[
            "--key-file",
            key_file.to_str().unwrap(),
            "--value-size",
            "512",
        ]);
        assert!(error.contains("another --value-size"), "{error}");

        // The right settings still start.
        proxy.starts_and_serves("k1");
    }
}

/// Every scheme stops cleanly and starts again on an untouched store, with every key read back:
/// after a stop as soon as it listens (while it may still be filling storage: a clean stop waits
/// for the fill), and twice more (each start checks storage against the ledger the last clean
/// stop saved).
#[test]
fn every_scheme_recovers_an_untouched_store() {
    let server = Server::cloak();
    for scheme in [
        "cloak",
        "waffle",
        "pancake",
        "path-oram",
        "curious",
        "encrypted",
        "unsafe",
    ] {
        let mut proxy = Proxy::new(&server, scheme);
        proxy.always = Vec::new(); // with the journal: it and storage together are the store
        proxy.populate();
        assert!(proxy.start(&[]).stop().success(), "{scheme}");
        for _ in 0..2 {
            let running = proxy.start(&[]);
            let keys: Vec<String> = (0..KEYS).map(|i| format!("k{i}")).collect();
            let got: Vec<Option<String>> = redis::cmd("MGET")
                .arg(&keys)
                .query(&mut connect(proxy.port))
                .unwrap();
            for (i, value) in got.iter().enumerate() {
                assert_eq!(value.as_deref(), Some(&*format!("value {i}")), "{scheme}");
            }
            assert!(running.stop().success(), "{scheme}");
        }
        // The next scheme gets a fresh store on the same server (marker included: it has a key
        // of its own).
        let all: Vec<Addr> = server.scan_all().into_iter().map(|(a, _)| a).collect();
        server.call(StorageOp::Delete(all));
    }
}

/// A key file both proxies of the store-id tests share.
fn shared_key(dir: &tempfile::TempDir) -> PathBuf {
    let path = dir.path().join("shared.key");
    common::write_private(&path, MasterKey::generate().unwrap().to_hex());
    path
}

/// Sets `key` to `value` through a running proxy.
fn set(proxy: &Proxy, key: &str, value: &str) {
    let () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query(&mut connect(proxy.port))
        .unwrap();
}

/// The review's swap: two stores under one key file, the server copies store A's element of a
/// key into store B's storage at the same address. Before store ids, B restarted and served A's
/// value with no finding; now the element fails to open in B (another store's key), the start is
/// refused naming the address, and an accepted loss serves B's own value, never A's.
#[test]
fn another_stores_element_under_the_same_key_is_damage_never_data() {
    let dir = tempfile::tempdir().unwrap();
    let key = shared_key(&dir);
    for server in Server::both() {
        let (server_a, server_b) = (server(), server());
        let mut a = Proxy::new(&server_a, "encrypted");
        let mut b = Proxy::new(&server_b, "encrypted");
        a.key_file = Some(key.clone());
        b.key_file = Some(key.clone());
        for (proxy, value) in [(&a, "from-store-a"), (&b, "from-store-b")] {
            let running = proxy.start(&[]);
            for i in 0..6 {
                set(proxy, "greeting", &format!("{value}-{i}"));
            }
            assert!(running.stop().success());
        }
        let a_elements = server_a.scan();
        let (address, _) = a
            .holding_keys(&server_a, &a_elements)
            .into_iter()
            .find(|(_, key)| key == "greeting")
            .unwrap();
        let element = a_elements.iter().find(|(x, _)| *x == address).unwrap();
        server_b.write(vec![element.clone()]);

        let error = b.refused(&[]);
        assert!(error.contains("failed authentication"), "{error}");
        assert!(
            error.contains(&address.to_string()),
            "names the address: {error}"
        );
        let running = Watched::start(&b.args(&["--accept-data-loss"]));
        assert_eq!(b.get("greeting").as_deref(), Some("from-store-b-5"));
        running.stop();
    }
}

/// Storage swapped for another store's (marker and all) under the same key is refused by the
/// state directory's ledger, naming both stores; so is a deleted marker, which
/// `--accept-data-loss` writes back from the ledger.
#[test]
fn a_ledger_refuses_another_stores_storage_and_a_missing_marker_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let key = shared_key(&dir);
    let server_a = Server::cloak();
    let server_b = Server::cloak();
    let mut a = Proxy::new(&server_a, "cloak");
    let mut b = Proxy::new(&server_b, "cloak");
    a.key_file = Some(key.clone());
    b.key_file = Some(key.clone());
    a.populate();
    b.populate();
    let (id_a, id_b) = (a.store_id(&server_a), b.store_id(&server_b));
    assert_ne!(id_a, id_b);

    let mut b_on_a = Proxy::new(&server_a, "cloak");
    b_on_a.key_file = Some(key.clone());
    b_on_a.state = b.state.clone();
    let error = b_on_a.refused(&[]);
    assert!(
        error.contains(&format!(
            "storage holds store {id_a}'s elements, this proxy's state is store {id_b}"
        )),
        "{error}"
    );

    server_b.call(StorageOp::Delete(vec![STORE_MARKER]));
    let error = b.refused(&[]);
    assert!(
        error.contains(&format!(
            "storage holds no store marker, but this proxy's state is store {id_b}"
        )),
        "{error}"
    );
    // Without a ledger to vouch for it, a store with elements and no marker is not taken for new.
    let fresh = Proxy::new(&server_b, "cloak");
    let error = fresh.refused(&[]);
    assert!(
        error.contains("storage holds elements but no store marker"),
        "{error}"
    );
    // The ledger vouches for the store: an accepted loss writes the marker back, nothing is lost.
    Watched::start(&b.args(&["--accept-data-loss"])).stop();
    assert_eq!(b.store_id(&server_b), id_b);
    b.starts_and_serves("k3");
}

/// Writes `elements` as the recovery spool an interrupted start left in `state`.
fn leave_spool(state: &std::path::Path, elements: &[(Addr, Bytes)]) -> PathBuf {
    let path = state.join("recovery.spool");
    let file = std::fs::File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    let mut writer = cloak_core::recovery::spool::SpoolWriter::durable(file);
    for (address, element) in elements {
        writer.append(*address, element).unwrap();
    }
    writer.finish().unwrap();
    path
}

/// `text` without the terminal colours the proxy's log lines carry.
fn without_ansi(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // An escape sequence ends with its first letter.
            chars.by_ref().find(char::is_ascii_alphabetic);
        } else {
            plain.push(c);
        }
    }
    plain
}

/// The files in `state` whose names start with `prefix`.
fn files_starting(state: &std::path::Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(state)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(prefix))
        .collect()
}

/// Review finding 11, second half: a spool an interrupted start left that cannot be read whole
/// (an element that does not open, or a file cut short) refuses every start, naming what is
/// wrong; `--accept-data-loss` moves it aside to a named file, keeps what opens of it, says how
/// many elements were lost, and starts.
#[test]
fn an_unreadable_earlier_spool_refuses_the_start_until_the_loss_is_accepted() {
    let server = Server::cloak();
    let proxy = Proxy::new(&server, "cloak");
    proxy.populate();
    let elements = server.scan();
    let mut altered = elements[1].1.to_vec();
    let last = altered.len() - 1;
    altered[last] ^= 1;
    let spool = leave_spool(
        &proxy.state,
        &[elements[0].clone(), (elements[1].0, Bytes::from(altered))],
    );

    let error = proxy.refused(&[]);
    assert!(error.contains("cannot be read whole"), "{error}");
    assert!(
        error.contains(&format!(
            "1 of its 2 elements do not open (the first, at address {}",
            elements[1].0
        )),
        "{error}"
    );
    assert!(error.contains("--accept-data-loss"), "{error}");
    assert!(
        spool.exists(),
        "a refused start leaves the spool where it was"
    );

    let accepting = Watched::start(&proxy.args(&["--accept-data-loss"]));
    let said = without_ansi(&accepting.stderr_with("cannot be read whole"));
    assert!(said.contains("lost_elements=1"), "{said}");
    // Moved aside (the start's own spool then takes its name until its fill is done).
    let aside = files_starting(&proxy.state, "recovery.spool.unreadable-");
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(
        said.contains(&aside[0]),
        "the error names where it went: {said}"
    );
    assert_eq!(
        proxy.get("k7"),
        Some("value 7".into()),
        "the store is served"
    );
    accepting.stop();

    // A spool cut short in the middle of an element: refused by what it is, accepted alike.
    let spool = leave_spool(&proxy.state, &elements[..3]);
    let length = std::fs::metadata(&spool).unwrap().len();
    std::fs::File::options()
        .write(true)
        .open(&spool)
        .unwrap()
        .set_len(length - 10)
        .unwrap();
    let error = proxy.refused(&[]);
    assert!(
        error.contains("it is cut short after 2 elements"),
        "{error}"
    );
    let accepting = Watched::start(&proxy.args(&["--accept-data-loss"]));
    let said = without_ansi(&accepting.stderr_with("cannot be read whole"));
    assert!(said.contains("cut=true"), "{said}");
    assert_eq!(
        files_starting(&proxy.state, "recovery.spool.unreadable-").len(),
        2,
        "each start's unreadable spool is kept under its own name"
    );
    accepting.stop();
    proxy.starts_and_serves("k7");
}

/// Flips the last byte of every element of the spool at `path`, in place (the proxy reads it
/// through the file it has open): none of them opens any more.
fn damage_spool_in_place(path: &std::path::Path) {
    use std::os::unix::fs::FileExt;
    let bytes = std::fs::read(path).unwrap();
    let file = std::fs::File::options().write(true).open(path).unwrap();
    let mut at = 0;
    while at + 20 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 16..at + 20].try_into().unwrap()) as usize;
        let last = at + 20 + len - 1;
        file.write_all_at(&[bytes[last] ^ 1], last as u64).unwrap();
        at += 20 + len;
    }
}

/// Review finding 11, first half, end to end: records the fill cannot read back from the spool
/// (here the spool is damaged on disk while the fill reads it, slowed down by the test-only
/// `CLOAK_LEAK_DEMO_SLOW_READ_BACK_US`) are lost, and the spool that holds what they were is
/// kept as `recovery.spool.lost-records`, with an error naming how many, never deleted. The
/// count is checked against the keys that now fail to read.
#[test]
fn records_the_fill_cannot_read_back_keep_the_spool_and_are_counted() {
    records_of_a_store_not_read_back_are_counted("cloak", KEYS);
}

/// The same for the other schemes, whose restarts read each record back from the spool as
/// their fill (or rewrite) writes it, or as a client's op takes it first (`encrypted`), not
/// all at once before they start; each lost key is counted once, however many replicas
/// (Pancake) or journal copies (Path ORAM) it has.
#[test]
fn records_other_schemes_cannot_read_back_keep_the_spool_and_are_counted() {
    for scheme in ["waffle", "encrypted", "pancake", "curious", "path-oram"] {
        records_of_a_store_not_read_back_are_counted(scheme, KEYS);
    }
}

/// `encrypted` rewrites recovered records 1,024 at a time, each chunk's writes asked for when
/// the chunk before is answered. A chunk whose records were all lost asks for nothing, so no
/// answer came to take the next one, and the restore stalled until a client's op arrived
/// (review L2 of the streaming restart, mended without a test of its own): with 2,100 keys,
/// all lost, the restore must go on through three chunks and end.
#[test]
fn encrypted_restore_goes_on_past_a_chunk_of_lost_records() {
    records_of_a_store_not_read_back_are_counted("encrypted", 2100);
}

fn records_of_a_store_not_read_back_are_counted(scheme: &'static str, keys: usize) {
    let server = Server::cloak();
    let proxy = Proxy::holding(&server, scheme, keys);
    proxy.populate();
    let spool = proxy.state.join("recovery.spool");
    let mut child = Command::new(CLOAK)
        .args(proxy.args(&[]))
        // Every read back from the spool waits 5 ms first: the fill's 1000 reads take seconds,
        // and the spool is damaged long before most of them.
        .env(cloak_core::recovery::leak_demo::SLOW_READ_BACK_ENV, "5000")
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !spool.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the start never spooled"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    damage_spool_in_place(&spool);
    let stderr = child.stderr.take().unwrap();
    let (lines, said) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            let _ = lines.send(without_ansi(&line));
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let kept = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match said.recv_timeout(left) {
            Ok(line) if line.contains("kept the spool") => break line,
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the proxy never said it kept the spool (spool still at its path: {})",
                    spool.exists()
                );
            }
        }
    };
    let lost: usize = kept
        .split("lost=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the error names how many records were lost: {kept}"));
    let errors: Vec<String> = (0..keys)
        .filter_map(|i| {
            redis::cmd("GET")
                .arg(format!("k{i}"))
                .query::<Option<String>>(&mut connect(proxy.port))
                .err()
                .map(|error| error.to_string())
        })
        .collect();
    let failing = errors.len();
    eprintln!(
        "{scheme}: {kept}\n{failing} of {keys} keys fail to read, first: {:?}",
        errors.first()
    );
    assert!(
        lost > 0,
        "{scheme}: the damage landed before the fill read everything"
    );
    assert_eq!(lost, failing, "{scheme}: the count names the keys lost");
    assert!(!spool.exists());
    assert!(proxy.state.join("recovery.spool.lost-records").exists());
    let _ = child.kill();
    let _ = child.wait();
}
