//! Real `redis-server` processes for tests: a standalone server with AOF on, and a small local
//! cluster, each on free loopback ports in its own temporary directory, killed when dropped.
//!
//! Tests that use them run everywhere, CI included; when `redis-server` is missing they fail and
//! say to run `scripts/install-redis`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const START_LIMIT: Duration = Duration::from_secs(20);

fn missing(tool: &str) -> ! {
    panic!(
        "{tool} is not installed: run scripts/install-redis (it installs redis-server and redis-tools)"
    )
}

/// One `redis-server`.
pub struct RedisServer {
    pub port: u16,
    dir: tempfile::TempDir,
    args: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// A standalone server with the append-only file on and fsynced before every reply
    /// (`appendfsync always`), so an acknowledged write survives even a machine crash.
    pub fn start() -> Self {
        Self::start_with(&["--appendonly", "yes", "--appendfsync", "always"], false)
    }

    /// A server with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str], cluster_bus: bool) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = crate::ports::free_port(cluster_bus);
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push("--dir".into());
        args.push(dir.path().display().to_string());
        args.push("--logfile".into());
        args.push(dir.path().join("redis.log").display().to_string());
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut server = Self {
            port,
            dir,
            args,
            child: None,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let child = match Command::new("redis-server")
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing("redis-server"),
            Err(e) => panic!("cannot start redis-server: {e}"),
        };
        self.child = Some(child);
        let start = Instant::now();
        while !self.answers_ping() {
            if let Some(Some(status)) = self.child.as_mut().map(|c| c.try_wait().ok().flatten()) {
                panic!(
                    "redis-server on port {} exited ({status}); its log:\n{}",
                    self.port,
                    self.log()
                );
            }
            assert!(
                start.elapsed() < START_LIMIT,
                "redis-server on port {} did not answer PING within {START_LIMIT:?}; its log:\n{}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `+PONG` to a PING (not `-LOADING` while it reads its append-only file).
    fn answers_ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let mut answer = [0u8; 5];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut answer).is_ok()
            && &answer == b"+PONG"
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILL: no shutdown, no final save.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and directory (after [`RedisServer::kill`]).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Runs `redis-cli -p PORT args…` and returns what it printed.
    pub fn cli(&self, args: &[&str]) -> String {
        redis_cli(&[&["-p", &self.port.to_string()], args].concat())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn redis_cli(args: &[&str]) -> String {
    let out = match Command::new("redis-cli").args(args).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing("redis-cli"),
        Err(e) => panic!("cannot run redis-cli: {e}"),
    };
    assert!(
        out.status.success(),
        "redis-cli {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A cluster of masters (no replicas) on loopback, each with AOF on.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    /// Each node's TLS port, in node order (none unless started with [`RedisCluster::start_tls`]).
    pub tls_ports: Vec<u16>,
}

impl RedisCluster {
    pub fn start(masters: usize) -> Self {
        let nodes = (0..masters)
            .map(|_| RedisServer::start_with(&Self::NODE, true))
            .collect();
        Self::form(nodes, Vec::new())
    }

    /// A cluster whose nodes speak TLS too, with the certificates `cloak certs` wrote to `certs`:
    /// clients on [`RedisCluster::tls_ports`] (which `CLUSTER SLOTS` names to TLS clients), and
    /// the cluster bus over TLS. Each node shows the others the client certificate, since the
    /// server certificate is for servers only. The plain ports stay, for the tests' own checks.
    pub fn start_tls(masters: usize, certs: &std::path::Path) -> Self {
        let file = |name: &str| certs.join(name).display().to_string();
        let mut tls_ports = Vec::new();
        let nodes = (0..masters)
            .map(|_| {
                // With `tls-cluster yes` the bus port is named explicitly: the TLS port's +10000.
                let tls_port = crate::ports::free_port(true);
                tls_ports.push(tls_port);
                let tls = [
                    "--tls-port".to_string(),
                    tls_port.to_string(),
                    "--cluster-port".into(),
                    (tls_port + 10_000).to_string(),
                    "--tls-cluster".into(),
                    "yes".into(),
                    "--tls-cert-file".into(),
                    file("server.pem"),
                    "--tls-key-file".into(),
                    file("server.key"),
                    "--tls-client-cert-file".into(),
                    file("client.pem"),
                    "--tls-client-key-file".into(),
                    file("client.key"),
                    "--tls-ca-cert-file".into(),
                    file("ca.pem"),
                    "--tls-auth-clients".into(),
                    "no".into(),
                ];
                let args: Vec<&str> = Self::NODE
                    .iter()
                    .copied()
                    .chain(tls.iter().map(String::as_str))
                    .collect();
                RedisServer::start_with(&args, false)
            })
            .collect();
        Self::form(nodes, tls_ports)
    }

    const NODE: [&'static str; 10] = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "2000",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ];

    /// Joins `nodes` into one cluster, the slots split evenly, and waits until it serves.
    fn form(nodes: Vec<RedisServer>, tls_ports: Vec<u16>) -> Self {
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addresses.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"]);
        redis_cli(&args);
        let start = Instant::now();
        for node in &nodes {
            while !node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") {
                assert!(
                    start.elapsed() < START_LIMIT,
                    "the cluster did not come up within {START_LIMIT:?}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Self { nodes, tls_ports }
    }

    /// `redis+cluster://` naming every node.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }
}
