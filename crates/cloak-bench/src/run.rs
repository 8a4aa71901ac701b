//! One scheme on one workload through real processes: `cloak server` and `cloak proxy` as child
//! processes of the `cloak` binary, clients over loopback.
//!
//! A run preloads every key (see [`crate::preload`]), then sends the workload's requests closed-loop
//! (`clients` connections, each keeping `pipeline` requests in flight) or open-loop at a fixed
//! rate, where latency counts from when a request was due, not from when it could be sent (no
//! coordinated omission). Scheme counters come from the proxy's `INFO`, as deltas over the
//! measured window; memory is the proxy process's resident set.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cloak_core::RecordLayout;
use cloak_crypto::MasterKey;
use cloak_schemes::SchemeName;
use cloak_storage::TcpStorage;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::client::{ClientError, Connection, Reply};
use crate::preload;
use crate::report::{Counters, Measurement, Mode, Subject, Timing};
use crate::workload::{KEY_SIZE, Request, key_name};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot start {what}: {reason}")]
    Start { what: String, reason: String },
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("the proxy answered {0}")]
    Refused(String),
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The `cloak` binary.
    pub cloak: PathBuf,
    pub scheme: SchemeName,
    pub keys: u64,
    pub value_size: usize,
    /// More `cloak proxy` flags (budgets, batch interval, cache size…).
    pub proxy_args: Vec<String>,
    /// More `cloak server` flags (say, a data directory).
    pub server_args: Vec<String>,
    pub workload: String,
}

/// How to send.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    pub clients: usize,
    /// Closed loop: requests each connection keeps in flight (open loop has no cap).
    pub pipeline: usize,
    /// Requests per second for open loop; `None` for closed loop.
    pub rate: Option<f64>,
}

/// A child process, killed when dropped.
struct Process {
    child: Child,
    addr: SocketAddr,
}

impl Process {
    /// Starts `cloak args…` and waits for the line saying where it listens.
    async fn start(cloak: &Path, args: &[String], what: &str) -> Result<Self, RunError> {
        let failed = |reason: String| RunError::Start {
            what: what.to_string(),
            reason,
        };
        let mut child = Command::new(cloak)
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| failed(format!("{} {}: {e}", cloak.display(), args.join(" "))))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| failed("no stdout".into()))?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(600), async {
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
        .ok_or_else(|| failed("it exited or never said where it listens".into()))?;
        let addr = line
            .split("listening on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| failed(format!("cannot parse {line:?}")))?;
        // Keep draining stdout so the process never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self { child, addr })
    }

    fn rss_bytes(&self) -> Option<u64> {
        let pid = self.child.id()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
}

/// Every `field:value` line of the proxy's `INFO` (of one `section`, or all).
async fn info(addr: SocketAddr, section: &str) -> Result<BTreeMap<String, String>, RunError> {
    let mut con = Connection::connect(addr).await?;
    let Reply::Value(Some(text)) = con.call(&[b"INFO", section.as_bytes()]).await? else {
        return Err(RunError::Refused("INFO without a body".into()));
    };
    Ok(String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.trim_end().split_once(':')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect())
}

/// The scheme's counters from `INFO`.
fn counters(info: &BTreeMap<String, String>) -> Counters {
    let get = |k: &str| info.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
    Counters {
        real: get("real_slots"),
        dummy: get("dummy_slots"),
        cache_hits: get("cache_hits"),
        cache_misses: get("cache_misses"),
        storage_bytes: get("storage_bytes_sent") + get("storage_bytes_received"),
    }
}

fn bar(len: u64, message: String) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg:<28} {bar:30} {pos}/{len} {per_sec} eta {eta}")
            .expect("a valid template"),
    );
    bar.set_message(message);
    bar
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

/// Sends `requests` and returns (latency histogram in µs, errors).
///
/// Connections take requests in trace order from a shared counter whenever their pipeline has
/// room, so the proxy sees the requests in (nearly) the order of the workload: a workload's
/// temporal locality reaches the proxy intact, reordered only within the requests in flight.
async fn drive(
    addr: SocketAddr,
    requests: Arc<Vec<Request>>,
    value: &[u8],
    load: Load,
    bar: &ProgressBar,
) -> Result<(Histogram<u64>, u64), RunError> {
    let start = Instant::now() + Duration::from_millis(10);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..load.clients.max(1) {
        let sender = Sender {
            requests: requests.clone(),
            next: next.clone(),
            value: value.to_vec(),
            load,
            start,
        };
        let bar = bar.clone();
        tasks.push(tokio::spawn(async move {
            sender.run(Connection::connect(addr).await?, &bar).await
        }));
    }
    let mut latency = histogram();
    let mut errors = 0;
    for task in tasks {
        let (h, e) = task.await.map_err(|e| RunError::Refused(e.to_string()))??;
        latency.add(h).expect("same bounds");
        errors += e;
    }
    Ok((latency, errors))
}

/// One connection's share of a run.
struct Sender {
    requests: Arc<Vec<Request>>,
    next: Arc<AtomicUsize>,
    value: Vec<u8>,
    load: Load,
    start: Instant,
}

impl Sender {
    /// When request `index` is due: open loop, at its place in the schedule (latency counts from
    /// then, so a slow proxy cannot hide its delays: no coordinated omission); closed loop, now.
    fn due(&self, index: usize) -> Instant {
        match self.load.rate {
            Some(rate) => self.start + Duration::from_secs_f64(index as f64 / rate),
            None => Instant::now(),
        }
    }

    async fn run(
        self,
        mut con: Connection,
        bar: &ProgressBar,
    ) -> Result<(Histogram<u64>, u64), RunError> {
        let mut latency = histogram();
        let mut errors = 0u64;
        let mut sent: VecDeque<Instant> = VecDeque::new();
        // A request taken from the schedule that is not due yet.
        let mut held: Option<usize> = None;
        let mut exhausted = false;
        // Open loop sends what is due, however much is in flight: a cap would delay requests
        // behind a slow proxy and hide how slow it is.
        let room = match self.load.rate {
            Some(_) => usize::MAX,
            None => self.load.pipeline.max(1),
        };
        loop {
            while sent.len() < room {
                let index = match held.take() {
                    Some(index) => index,
                    None if exhausted => break,
                    None => match self.next.fetch_add(1, Ordering::Relaxed) {
                        i if i < self.requests.len() => i,
                        _ => {
                            exhausted = true;
                            break;
                        }
                    },
                };
                let due = self.due(index);
                if due > Instant::now() {
                    held = Some(index);
                    break;
                }
                let request = self.requests[index];
                let name = key_name(request.key);
                if request.write {
                    con.queue(&[b"SET", name.as_bytes(), &self.value]);
                } else {
                    con.queue(&[b"GET", name.as_bytes()]);
                }
                sent.push_back(due);
            }
            con.flush().await?;
            let due = held.map(|index| self.due(index));
            let reply = match (sent.is_empty(), due) {
                (true, None) => return Ok((latency, errors)),
                (true, Some(due)) => {
                    tokio::time::sleep_until(due.into()).await;
                    continue;
                }
                (false, None) => con.reply().await?,
                // Take replies while waiting for the held request's time; reading replies is
                // cancel-safe (bytes read stay in the connection's buffer).
                (false, Some(due)) => tokio::select! {
                    reply = con.reply() => reply?,
                    () = tokio::time::sleep_until(due.into()) => continue,
                },
            };
            let mut reply = Some(reply);
            while let Some(r) = reply {
                let due = sent.pop_front().expect("a reply answers a request sent");
                if let Reply::Error(_) = r {
                    errors += 1;
                }
                latency.saturating_record(due.elapsed().as_micros().max(1) as u64);
                bar.inc(1);
                reply = if sent.is_empty() {
                    None
                } else {
                    con.buffered_reply()?
                };
            }
        }
    }
}

/// Runs `setup` with `load`: sends `warmup` unmeasured, then measures `requests`.
pub async fn measure(
    setup: &Setup,
    warmup: Arc<Vec<Request>>,
    requests: Arc<Vec<Request>>,
    load: Load,
) -> Result<Measurement, RunError> {
    let start_error = |what: &str| {
        let what = what.to_string();
        move |e: &dyn std::fmt::Display| RunError::Start {
            what,
            reason: e.to_string(),
        }
    };
    let dir = tempfile::tempdir().map_err(|e| start_error("a temporary directory")(&e))?;
    let key_file = dir.path().join("bench.key");
    let master = MasterKey::generate().map_err(|e| start_error("a key")(&e))?;
    std::fs::write(&key_file, master.to_hex()).map_err(|e| start_error("a key file")(&e))?;

    let mut server_args: Vec<String> = ["server", "--listen", "127.0.0.1:0"]
        .map(String::from)
        .to_vec();
    server_args.extend(setup.server_args.iter().cloned());
    let server = Process::start(&setup.cloak, &server_args, "cloak server").await?;

    let value = Bytes::from(vec![b'v'; setup.value_size]);
    let layout = RecordLayout {
        max_key: KEY_SIZE,
        max_value: setup.value_size,
    };
    let format = cloak_schemes::element_format(setup.scheme, layout, &master)
        .map_err(|e| start_error("the element format")(&e))?;
    let storage = TcpStorage::connect(&server.addr.to_string(), 4)
        .await
        .map_err(|e| start_error("a storage connection")(&e))?;
    let loading = bar(setup.keys, format!("{}: preloading keys", setup.scheme));
    preload::write(Arc::new(storage), format, setup.keys, &value, &loading)
        .await
        .map_err(|e| start_error("the preload")(&e))?;
    loading.finish_and_clear();

    let mut args: Vec<String> = [
        "proxy",
        "--storage",
        &format!("tcp://{}", server.addr),
        "--listen",
        "127.0.0.1:0",
        "--key-file",
        &key_file.display().to_string(),
        "--scheme",
        setup.scheme.as_str(),
        "--capacity",
        &setup.keys.to_string(),
        "--key-size",
        &KEY_SIZE.to_string(),
        "--value-size",
        &setup.value_size.to_string(),
    ]
    .map(String::from)
    .to_vec();
    args.extend(setup.proxy_args.iter().cloned());
    let proxy = Process::start(
        &setup.cloak,
        &args,
        "cloak proxy (recovering the preloaded keys)",
    )
    .await?;

    if !warmup.is_empty() {
        let warming = bar(warmup.len() as u64, format!("{}: warming up", setup.scheme));
        drive(proxy.addr, warmup, &value, load, &warming).await?;
        warming.finish_and_clear();
    }
    let before = counters(&info(proxy.addr, "all").await?);
    let running = bar(requests.len() as u64, format!("{}: running", setup.scheme));
    let started = Instant::now();
    let (latency, errors) = drive(proxy.addr, requests.clone(), &value, load, &running).await?;
    let seconds = started.elapsed().as_secs_f64();
    running.finish_and_clear();
    let after = info(proxy.addr, "all").await?;
    let mut scheme_info = info(proxy.addr, "scheme").await?;
    if let Some(durability) = after.get("durability") {
        scheme_info.insert("durability".into(), durability.clone());
    }
    let rss = proxy.rss_bytes();
    drop(proxy);
    drop(server);

    let subject = Subject {
        scheme: setup.scheme.to_string(),
        mode: Mode::Sockets,
        workload: setup.workload.clone(),
        keys: setup.keys,
    };
    let timing = Timing {
        ops: latency.len(),
        errors,
        seconds,
    };
    let mut measurement = Measurement::new(
        subject,
        timing,
        &latency,
        counters(&after).since(before),
        rss,
    );
    measurement.scheme_info = scheme_info;
    Ok(measurement)
}
