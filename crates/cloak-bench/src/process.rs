//! The processes a run measures: `cloak server`, `cloak proxy` and `redis-server`, children of
//! the bench on loopback, killed when dropped.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use crate::client::{Connection, Reply};
use crate::progress::Progress;

/// How long a child may take to say it is ready. Generous: a proxy recovering a large store
/// scans all of it first (and shows how far it got meanwhile).
const START_LIMIT: Duration = Duration::from_secs(3600);
/// How long a fresh `redis-server` may take to answer PING.
const REDIS_START_LIMIT: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
#[error("cannot start {what}: {reason}")]
pub struct StartError {
    pub what: String,
    pub reason: String,
}

fn failed(what: &str, reason: impl std::fmt::Display) -> StartError {
    StartError {
        what: what.to_string(),
        reason: reason.to_string(),
    }
}

/// A child process listening on `addr`.
pub struct Process {
    child: Child,
    pub addr: SocketAddr,
    /// A `redis-server`'s working directory, removed with it.
    _dir: Option<tempfile::TempDir>,
}

impl Process {
    /// Starts `cloak args…` and waits for the line saying where it listens. Its log goes to
    /// this process's stderr, except the lines `progress` understands (a proxy's recovery scan),
    /// which it shows instead.
    pub async fn cloak(
        cloak: &Path,
        args: &[String],
        what: &str,
        progress: Progress,
    ) -> Result<Self, StartError> {
        let mut child = Command::new(cloak)
            .args(args)
            .env(
                "RUST_LOG",
                format!("warn,{}=info", crate::progress::LOG_TARGET),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| failed(what, format!("{} {}: {e}", cloak.display(), args.join(" "))))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| failed(what, "no stdout"))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| failed(what, "no stderr"))?;
        tokio::spawn(progress.follow(stderr));
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(START_LIMIT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("listening on ") {
                    return Some(line);
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .ok_or_else(|| failed(what, "it exited or never said where it listens"))?;
        let addr = line
            .split("listening on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| failed(what, format!("cannot parse {line:?}")))?;
        tokio::spawn(drain(lines.into_inner()));
        Ok(Self {
            child,
            addr,
            _dir: None,
        })
    }

    /// Starts a plain `redis-server` (from `PATH`) on a free loopback port, persistence off
    /// unless `extra` turns it on, and waits until it answers PING.
    pub async fn redis(extra: &[String]) -> Result<Self, StartError> {
        const WHAT: &str = "redis-server";
        let dir = tempfile::tempdir().map_err(|e| failed(WHAT, e))?;
        // Another process may take the free port before redis-server binds it: try a few.
        let mut last_error = None;
        for _ in 0..3 {
            let port = free_port().map_err(|e| failed(WHAT, e))?;
            match Self::try_redis(port, dir.path(), extra).await {
                Ok(child) => {
                    return Ok(Self {
                        child,
                        addr: SocketAddr::from(([127, 0, 0, 1], port)),
                        _dir: Some(dir),
                    });
                }
                Err(error) => last_error = Some(error),
            }
        }
        Err(failed(
            WHAT,
            last_error.unwrap_or_else(|| "no free port".into()),
        ))
    }

    async fn try_redis(port: u16, dir: &Path, extra: &[String]) -> Result<Child, String> {
        let port_text = port.to_string();
        let mut args: Vec<&str> = vec![
            "--port",
            &port_text,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
            "--daemonize",
            "no",
            "--logfile",
            "",
        ];
        let dir_text = dir.display().to_string();
        args.extend(["--dir", &dir_text]);
        args.extend(extra.iter().map(String::as_str));
        let mut child = Command::new("redis-server")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => {
                    "redis-server is not installed (run scripts/install-redis)".to_string()
                }
                _ => e.to_string(),
            })?;
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("it exited ({status}) on port {port}"));
            }
            if answers_ping(SocketAddr::from(([127, 0, 0, 1], port))).await {
                return Ok(child);
            }
            if started.elapsed() > REDIS_START_LIMIT {
                return Err(format!("no answer to PING within {REDIS_START_LIMIT:?}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Resident memory now.
    pub fn rss_bytes(&self) -> Option<u64> {
        self.status_bytes("VmRSS:")
    }

    /// The most resident memory the process ever had (its high-water mark).
    pub fn peak_rss_bytes(&self) -> Option<u64> {
        self.status_bytes("VmHWM:")
    }

    /// A memory field of `/proc/PID/status`, which gives it in KiB.
    fn status_bytes(&self, field: &str) -> Option<u64> {
        let pid = self.pid()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with(field))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
}

/// A loopback port nobody listens on right now.
pub(crate) fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

async fn answers_ping(addr: SocketAddr) -> bool {
    let Ok(mut con) = Connection::connect(addr).await else {
        return false;
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), con.call(&[b"PING"])).await,
        Ok(Ok(Reply::Ok))
    )
}

/// Reads a child's output to the end, so it never blocks on a full pipe.
async fn drain(output: impl AsyncRead + Unpin) {
    let mut lines = BufReader::new(output).lines();
    while let Ok(Some(_)) = lines.next_line().await {}
}
