//! What the binary's tests share: starting `cloak` processes and talking to them.

#![allow(dead_code)] // each test binary uses its own part

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const CLOAK: &str = env!("CARGO_BIN_EXE_cloak");

/// A loopback port nobody listens on now, never the same twice in one test process, and clear
/// of the ports outgoing connections take (see [`cloak_testkit::ports`]): two proxies of one
/// test were once given the same address (`DuplicateAddress` from a cluster map).
pub fn free_port() -> u16 {
    cloak_testkit::ports::free_port(false)
}

/// The first of `count` consecutive free loopback ports (`cloak cluster up` takes consecutive
/// ports from its `--port`).
pub fn free_ports(count: u16) -> u16 {
    cloak_testkit::ports::free_ports(count, false)
}

/// A running `cloak` process, stopped with SIGTERM when dropped.
pub struct Running {
    child: Child,
    output: mpsc::Receiver<String>,
}

impl Running {
    /// Starts `cloak args…` and waits for a stdout line containing `ready`.
    pub fn start(args: &[&str], ready: &str) -> Self {
        Self::start_with_env(args, &[], ready)
    }

    /// [`Running::start`] with extra environment variables.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)], ready: &str) -> Self {
        Self::start_bin_with_env(CLOAK, args, env, ready)
    }

    /// [`Running::start_with_env`] of the `cloak` binary at `bin` (a measurement may run a
    /// release build).
    pub fn start_bin_with_env(bin: &str, args: &[&str], env: &[(&str, &str)], ready: &str) -> Self {
        let mut child = Command::new(bin)
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cloak starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, output) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let running = Self { child, output };
        running.wait_for(ready);
        running
    }

    pub fn wait_for(&self, text: &str) -> String {
        loop {
            match self.output.recv_timeout(Duration::from_secs(20)) {
                Ok(line) if line.contains(text) => return line,
                Ok(_) => {}
                Err(_) => panic!("cloak never printed {text:?}"),
            }
        }
    }

    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// SIGTERM, then the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        Command::new("kill")
            .args(["-TERM", &self.pid()])
            .status()
            .unwrap();
        let status = wait_timeout(&mut self.child, Duration::from_secs(20));
        std::mem::forget(self);
        status
    }

    /// Waits (at most 20 s) for the process to exit by itself, and returns how it did.
    pub fn wait(mut self) -> std::process::ExitStatus {
        let status = wait_timeout(&mut self.child, Duration::from_secs(20));
        std::mem::forget(self);
        status
    }

    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::mem::forget(self);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn wait_timeout(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            start.elapsed() < limit,
            "cloak did not exit within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A client connection; a proxy that stops answering fails the test instead of hanging it.
pub fn connect(port: u16) -> redis::Connection {
    let con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    con.set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    con
}

/// Waits until the proxy behind `client` has filled storage after its start (`INFO`'s
/// `loading:0`): until then the proxy answers recovered records from memory, without storage.
#[allow(dead_code)]
pub fn wait_until_filled(client: &mut redis::Connection, limit: Duration) {
    wait_for_info(client, limit, &["loading:0"]);
}

/// Waits until the fill is over and storage holds every acknowledged write
/// (`unwritten_writes:0`). Not for Waffle: its cache keeps written records in the proxy for
/// good, so they count as unwritten until evicted.
#[allow(dead_code)]
pub fn wait_until_stored(client: &mut redis::Connection, limit: Duration) {
    wait_for_info(client, limit, &["loading:0", "unwritten_writes:0"]);
}

/// Waits until every field `name:value` of `fields` holds in `INFO`: on a cluster proxy, for
/// each hosted partition's `partition_N_name` (a substring match would take one partition's
/// `partition_3_unwritten_writes:0` for all of them).
fn wait_for_info(client: &mut redis::Connection, limit: Duration, fields: &[&str]) {
    let started = Instant::now();
    loop {
        let info: String = redis::cmd("INFO").arg("everything").query(client).unwrap();
        if fields.iter().all(|field| info_holds(&info, field)) {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "never reached {fields:?}: {info}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `INFO` text shows `field` (`name:value`): some line is `name` or `partition_N_name`,
/// and every such line has `value`.
fn info_holds(info: &str, field: &str) -> bool {
    let Some((name, value)) = field.split_once(':') else {
        panic!("{field:?} is not name:value");
    };
    let partition_field = format!("_{name}");
    let mut values = info.lines().filter_map(|line| {
        let (key, found) = line.trim_end().split_once(':')?;
        let matches = key == name
            || (key.starts_with("partition_") && key.ends_with(partition_field.as_str()));
        matches.then_some(found)
    });
    let mut seen = false;
    values.all(|found| {
        seen = true;
        found == value
    }) && seen
}

/// Runs `cloak args…`, which must exit with an error within 20 s; returns what it printed to
/// stderr.
pub fn fails(args: &[&str]) -> String {
    let mut child = Command::new(CLOAK)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cloak starts");
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cloak {args:?} kept running; it should have refused to start");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "cloak {args:?} should have failed");
    stderr
}

/// A `cloak server` in memory, and the arguments of a `cloak proxy` over it with its state in
/// `state` and the store given by `store_args`: the server (stopped when dropped), the proxy's
/// arguments and its port. A proxy restarted with the same arguments finds the same store.
pub fn server_and_proxy_args(
    state: &std::path::Path,
    store_args: &[&str],
) -> (Running, Vec<String>, u16) {
    let (storage_port, proxy_port) = (free_port(), free_port());
    let storage_addr = format!("127.0.0.1:{storage_port}");
    let server = Running::start(&["server", "--listen", &storage_addr], "listening");
    let mut args: Vec<String> = vec![
        "proxy".into(),
        "--storage".into(),
        format!("tcp://{storage_addr}"),
        "--listen".into(),
        format!("127.0.0.1:{proxy_port}"),
        "--state-dir".into(),
        state.display().to_string(),
    ];
    args.extend(store_args.iter().map(|arg| arg.to_string()));
    (server, args, proxy_port)
}

/// A cluster file in `dir` for three proxies `p0`, `p1`, `p2` on free ports and six partitions,
/// two each, kept in `storage` (`{partition}` becomes each one's number): the map, the file and
/// the proxies' ports.
pub fn three_proxy_cluster(
    dir: &std::path::Path,
    storage: &str,
) -> (cloak_cluster::ClusterMap, std::path::PathBuf, Vec<u16>) {
    proxy_cluster(dir, storage, 3, 6)
}

/// A cluster file in `dir` for `count` proxies `p0`, `p1`, … on free ports and `partitions`
/// partitions in even runs over them, kept in `storage`: the map, the file and the ports.
pub fn proxy_cluster(
    dir: &std::path::Path,
    storage: &str,
    count: usize,
    partitions: usize,
) -> (cloak_cluster::ClusterMap, std::path::PathBuf, Vec<u16>) {
    let ports: Vec<u16> = (0..count).map(|_| free_port()).collect();
    let proxies: Vec<(String, String)> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| (format!("p{i}"), format!("127.0.0.1:{port}")))
        .collect();
    let map = cloak_cluster::ClusterMap::even(&proxies, partitions, storage).unwrap();
    let file = dir.join("cluster.toml");
    std::fs::write(&file, map.to_toml()).unwrap();
    (map, file, ports)
}

/// `cloak certs` into a fresh directory (a test CA, a server certificate for loopback, a client
/// certificate).
pub fn certs(dir: &std::path::Path) -> std::path::PathBuf {
    let status = Command::new(CLOAK)
        .args(["certs", "-o"])
        .arg(dir)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    dir.to_path_buf()
}

/// A Rust client over TLS (the `redis` crate with rustls), trusting `ca`.
pub fn rust_client(port: u16, ca: &std::path::Path) -> redis::Connection {
    let certificates = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(std::fs::read(ca).unwrap()),
    };
    let client =
        redis::Client::build_with_tls(format!("rediss://localhost:{port}/"), certificates).unwrap();
    let connection = client
        .get_connection_with_timeout(Duration::from_secs(20))
        .unwrap();
    connection
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    connection
}

/// Writes `contents` to a new file at `path` that only its owner may read (mode 0600), as
/// `cloak keygen -o` does: the proxy and the server refuse a key or secret file others may read.
#[allow(dead_code)]
pub fn write_private(path: &std::path::Path, contents: impl AsRef<[u8]>) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    file.write_all(contents.as_ref()).unwrap();
}

/// `cloak proxy` as proxy `name` of the cluster file `file`, with a small store (200 elements
/// per partition), then `extra`.
pub fn cluster_proxy_args(file: &std::path::Path, name: &str, extra: &[&str]) -> Vec<String> {
    let file = file.to_str().unwrap();
    let base = [
        "proxy",
        "--cluster",
        file,
        "--node",
        name,
        "--capacity",
        "200",
    ];
    base.iter()
        .chain(extra)
        .map(|arg| arg.to_string())
        .collect()
}

/// What `redis-cli args…` printed.
pub fn redis_cli(args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

/// The first `count` keys `key:N` that `map` puts in partition `partition`.
pub fn keys_of(map: &cloak_cluster::ClusterMap, partition: usize, count: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("key:{i}"))
        .filter(|key| {
            let slot = cloak_cluster::key_slot(key.as_bytes());
            map.partition_of(slot).index == partition
        })
        .take(count)
        .collect()
}
