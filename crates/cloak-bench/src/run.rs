//! One contender on one workload through real processes: a scheme behind a `cloak proxy`, its
//! elements in a `cloak server` or a `redis-server`; or a plain `redis-server` with the clients
//! straight to it, the baseline a user compares with. All are children of the bench, on
//! loopback.
//!
//! A run preloads every key (see [`crate::preload`]), then sends the workload's requests
//! closed-loop or open-loop (see [`crate::drive`]). Scheme counters come from the proxy's `INFO`,
//! as deltas over the measured window; CPU time comes from `/proc` for the proxy and the storage
//! process over the same window; memory is the proxy process's resident set.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cloak_core::{RecordLayout, STORE_MARKER, StorageOp};
use cloak_crypto::{MasterKey, StoreId};
use cloak_schemes::SchemeName;
use cloak_storage::{RedisStorage, RedisTarget, Storage, TcpStorage};
use indicatif::{ProgressBar, ProgressStyle};

use crate::client::{ClientError, Connection, Reply, Target};
use crate::cpu;
pub use crate::drive::Load;
use crate::drive::{Route, drive};
use crate::preload;
use crate::process::{Process, StartError};
use crate::progress::Progress;
use crate::report::{Counters, Measurement, Mode, Subject, Timing};
use crate::startup::{self, Startup};
use crate::tls::BenchTls;
use crate::workload::{KEY_SIZE, Request, key_name};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("the proxy answered {0}")]
    Refused(String),
    #[error("the preload failed: {0}")]
    Preload(String),
    #[error("cluster: {0}")]
    Cluster(String),
}

/// Where a scheme's proxy keeps its elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `cloak server`, in memory (or logging to disk with its `--data-dir`).
    CloakServer,
    /// A plain `redis-server` (`--storage redis://…`).
    Redis,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::CloakServer => "cloak-server",
            Backend::Redis => "redis",
        }
    }

    /// The proxy's `--storage` URL for a server at `addr`.
    pub(crate) fn url(self, addr: SocketAddr, tls: bool) -> String {
        match (self, tls) {
            (Backend::CloakServer, false) => format!("tcp://{addr}"),
            (Backend::CloakServer, true) => format!("tls://{addr}"),
            (Backend::Redis, _) => format!("redis://{addr}"),
        }
    }

    /// A storage client of the server at `addr`, for the preload, whose reads' answers may hold
    /// elements of `max_element` bytes at most.
    async fn connect(
        self,
        addr: SocketAddr,
        tls: Option<&BenchTls>,
        max_element: usize,
    ) -> Result<Arc<dyn Storage>, RunError> {
        let preload = |e: &dyn fmt::Display| RunError::Preload(e.to_string());
        Ok(match self {
            Backend::CloakServer => {
                let link = tls.map(BenchTls::storage_link).unwrap_or_default();
                Arc::new(
                    TcpStorage::connect_with(&addr.to_string(), 4, link)
                        .await
                        .map_err(|e| preload(&e))?
                        .with_max_element(max_element),
                )
            }
            Backend::Redis => {
                let url = self.url(addr, false);
                let target = RedisTarget::parse(&url)
                    .ok_or_else(|| RunError::Preload(format!("{url} is not a Redis URL")))?
                    .map_err(|e| preload(&e))?;
                Arc::new(
                    RedisStorage::connect(target, None)
                        .await
                        .map_err(|e| preload(&e))?
                        .with_max_element(max_element),
                )
            }
        })
    }
}

impl FromStr for Backend {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "cloak-server" => Ok(Backend::CloakServer),
            "redis" => Ok(Backend::Redis),
            other => Err(format!(
                "unknown backend {other:?}; choose cloak-server or redis"
            )),
        }
    }
}

/// What a run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contender {
    /// A plain `redis-server`, clients straight to it: what a user has without Cloak.
    Redis,
    /// A scheme behind its proxy.
    Scheme(SchemeName),
}

impl fmt::Display for Contender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Contender::Redis => f.write_str("redis"),
            Contender::Scheme(scheme) => f.write_str(scheme.as_str()),
        }
    }
}

/// A name that is neither a scheme nor `redis`.
#[derive(Debug, thiserror::Error)]
#[error("{0}; or redis (a plain redis-server, clients straight to it: the baseline)")]
pub struct UnknownContender(cloak_schemes::BuildError);

impl FromStr for Contender {
    type Err = UnknownContender;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "redis" => Ok(Contender::Redis),
            scheme => scheme
                .parse()
                .map(Contender::Scheme)
                .map_err(UnknownContender),
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The `cloak` binary.
    pub cloak: PathBuf,
    pub contender: Contender,
    /// Where a scheme's proxy keeps its elements (the Redis baseline is its own storage).
    pub backend: Backend,
    pub keys: u64,
    pub value_size: usize,
    /// More `cloak proxy` flags (budgets, batch interval, cache size…).
    pub proxy_args: Vec<String>,
    /// More flags for the storage server: `cloak server`'s, or `redis-server`'s when the
    /// storage is a Redis (the backend, or the baseline itself).
    pub server_args: Vec<String>,
    pub workload: String,
    /// How long a connection waits for a reply before the run fails as stalled.
    pub reply_timeout: Duration,
    /// Both links of the proxy over TLS (`cloak server` only; not the Redis baseline).
    pub tls: Option<Arc<BenchTls>>,
}

impl Setup {
    /// The storage process: a Redis for the baseline and the Redis backend, else `cloak server`.
    pub(crate) async fn start_storage(&self) -> Result<Process, RunError> {
        if self.contender == Contender::Redis || self.backend == Backend::Redis {
            return Ok(Process::redis(&self.server_args).await?);
        }
        let mut args: Vec<String> = ["server", "--listen", "127.0.0.1:0"]
            .map(String::from)
            .to_vec();
        args.extend(self.server_args.iter().cloned());
        if let Some(tls) = &self.tls {
            args.extend(tls.server_args());
        }
        let what = "cloak server";
        Ok(Process::cloak(&self.cloak, &args, what, Progress::lines(what)).await?)
    }

    /// Writes `keys` to the storage server at `addr` as `scheme` stores them under `master`,
    /// with a fresh store id and its marker: a store as the proxy makes one, which a proxy given
    /// `master` recovers. Says how long a bare scan of it takes (see [`Startup`]).
    pub(crate) async fn preload(
        &self,
        scheme: SchemeName,
        addr: SocketAddr,
        master: &MasterKey,
        keys: impl Iterator<Item = u64> + Send,
        value: &Bytes,
        loading: &ProgressBar,
    ) -> Result<Duration, RunError> {
        let layout = RecordLayout {
            max_key: KEY_SIZE,
            max_value: self.value_size,
        };
        // A store as the proxy makes one: its elements under its id's key, the id's marker.
        let store = StoreId::random().map_err(|e| start_error("a store id", &e))?;
        let format = cloak_schemes::element_format(scheme, layout, &store.key(master))
            .map_err(|e| start_error("the element format", &e))?;
        // What the preload writes, and so what its scan of the store reads back: the format's
        // elements and the marker.
        let max_element = format.element_len().max(StoreId::MARKER_LEN);
        let client = self
            .backend
            .connect(addr, self.tls.as_deref(), max_element)
            .await?;
        preload::write(client.clone(), format, keys, value, loading)
            .await
            .map_err(|e| RunError::Preload(e.to_string()))?;
        client
            .call(StorageOp::Write(vec![(
                STORE_MARKER,
                store.marker(master).into(),
            )]))
            .await
            .map_err(|e| RunError::Preload(format!("writing the store marker: {e}")))?;
        loading.finish_and_clear();
        let (scan_floor, _) = startup::scan_floor(client.as_ref())
            .await
            .map_err(|e| RunError::Preload(format!("scanning the preloaded store: {e}")))?;
        Ok(scan_floor)
    }

    /// A proxy's key, store and scheme flags for `scheme` with `capacity` keys (per partition in
    /// a cluster), then the run's own proxy flags.
    pub(crate) fn store_flags(
        &self,
        scheme: SchemeName,
        key_file: &std::path::Path,
        capacity: u64,
    ) -> Vec<String> {
        let mut flags: Vec<String> = [
            "--key-file",
            &key_file.display().to_string(),
            "--scheme",
            scheme.as_str(),
            "--capacity",
            &capacity.to_string(),
            "--key-size",
            &KEY_SIZE.to_string(),
            "--value-size",
            &self.value_size.to_string(),
        ]
        .map(String::from)
        .to_vec();
        flags.extend(self.proxy_args.iter().cloned());
        flags
    }

    /// Writes every key to `storage` as `scheme` stores it and starts its proxy there, which
    /// recovers them, and says what that start cost (see [`Startup`]). The key file's directory
    /// must outlive the proxy.
    async fn start_proxy(
        &self,
        scheme: SchemeName,
        storage: &Process,
        value: &Bytes,
        loading: &ProgressBar,
    ) -> Result<(Process, tempfile::TempDir, Startup), RunError> {
        let (dir, key_file, master) = key_file()?;
        let scan_floor = self
            .preload(scheme, storage.addr, &master, 0..self.keys, value, loading)
            .await?;

        let mut args: Vec<String> = [
            "proxy",
            "--storage",
            &self.backend.url(storage.addr, self.tls.is_some()),
            "--listen",
            "127.0.0.1:0",
        ]
        .map(String::from)
        .to_vec();
        args.extend(self.store_flags(scheme, &key_file, self.keys));
        if let Some(tls) = &self.tls {
            args.extend(tls.proxy_args());
        }
        let label = self.contender.to_string();
        // The preload wrote one element per key: that is what the proxy's recovery scans.
        let progress = Progress::recovery(&label, self.keys);
        let spawned = Instant::now();
        let proxy = Process::cloak(
            &self.cloak,
            &args,
            "cloak proxy (recovering the preloaded keys)",
            progress.clone(),
        )
        .await;
        progress.finish();
        let proxy = proxy?;
        let listening = spawned.elapsed();
        let target = Target {
            addr: proxy.addr,
            tls: self.tls.as_ref().map(|tls| tls.clients()),
        };
        startup::first_read(target.clone(), key_name(0).as_bytes()).await?;
        let first_read = spawned.elapsed();
        // The load is measured on the batch schedule, not during the fill.
        startup::filled(target).await?;
        let startup = Startup {
            scan_floor_seconds: scan_floor.as_secs_f64(),
            listening_seconds: listening.as_secs_f64(),
            first_read_seconds: first_read.as_secs_f64(),
            filled_seconds: spawned.elapsed().as_secs_f64(),
            peak_rss_bytes: proxy.peak_rss_bytes(),
        };
        Ok((proxy, dir, startup))
    }
}

/// A fresh key, in a file the proxy is given (`--key-file`) in a directory that must outlive it.
pub(crate) fn key_file() -> Result<(tempfile::TempDir, PathBuf, MasterKey), RunError> {
    let dir = tempfile::tempdir().map_err(|e| start_error("a temporary directory", &e))?;
    let path = dir.path().join("bench.key");
    let master = MasterKey::generate().map_err(|e| start_error("a key", &e))?;
    // Readable by its owner only: the proxy refuses a key file others may read.
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    std::io::Write::write_all(
        &mut options
            .open(&path)
            .map_err(|e| start_error("a key file", &e))?,
        master.to_hex().as_bytes(),
    )
    .map_err(|e| start_error("a key file", &e))?;
    Ok((dir, path, master))
}

pub(crate) fn start_error(what: &str, error: &dyn fmt::Display) -> StartError {
    StartError {
        what: what.to_string(),
        reason: error.to_string(),
    }
}

/// Sends `warmup` along `route`, unmeasured (nothing if it is empty).
pub(crate) async fn warm_up(
    route: impl Into<Route>,
    warmup: Arc<Vec<Request>>,
    value: &[u8],
    load: Load,
    setup: &Setup,
    label: &str,
) -> Result<(), ClientError> {
    if warmup.is_empty() {
        return Ok(());
    }
    let warming = bar(warmup.len() as u64, format!("{label}: warming up"));
    drive(route, warmup, value, load, setup.reply_timeout, &warming).await?;
    warming.finish_and_clear();
    Ok(())
}

/// Every `field:value` line of the proxy's `INFO` (of one `section`, or all).
pub(crate) async fn info(
    target: Target,
    section: &str,
) -> Result<BTreeMap<String, String>, RunError> {
    let mut con = Connection::connect(target).await?;
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

/// `field` of `INFO`, or in a cluster proxy's the sum of every hosted partition's
/// (`partition_N_field`); 0 where absent.
pub(crate) fn info_sum(info: &BTreeMap<String, String>, field: &str) -> u64 {
    info.iter()
        .filter(|(key, _)| {
            *key == field
                || key
                    .strip_prefix("partition_")
                    .and_then(|rest| rest.split_once('_'))
                    .is_some_and(|(number, rest)| {
                        rest == field && number.bytes().all(|b| b.is_ascii_digit())
                    })
        })
        .filter_map(|(_, value)| value.parse::<u64>().ok())
        .sum()
}

/// The scheme's counters from `INFO` (a cluster proxy's: all its partitions').
pub(crate) fn counters(info: &BTreeMap<String, String>) -> Counters {
    let get = |k: &str| info_sum(info, k);
    Counters {
        real: get("real_slots"),
        dummy: get("dummy_slots"),
        cache_hits: get("cache_hits"),
        cache_misses: get("cache_misses"),
        storage_bytes: get("storage_bytes_sent") + get("storage_bytes_received"),
    }
}

pub(crate) fn bar(len: u64, message: String) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg:<28} {bar:30} {pos}/{len} {per_sec} eta {eta}")
            .expect("a valid template"),
    );
    bar.set_message(message);
    bar
}

/// Runs `setup` with `load`: sends `warmup` unmeasured, then measures `requests`.
pub async fn measure(
    setup: &Setup,
    warmup: Arc<Vec<Request>>,
    requests: Arc<Vec<Request>>,
    load: Load,
) -> Result<Measurement, RunError> {
    let label = setup.contender.to_string();
    let value = Bytes::from(vec![b'v'; setup.value_size]);
    let storage = setup.start_storage().await?;
    let loading = bar(setup.keys, format!("{label}: preloading keys"));
    let proxy = match setup.contender {
        Contender::Redis => {
            preload::set(storage.addr, setup.keys, &value, &loading).await?;
            loading.finish_and_clear();
            None
        }
        Contender::Scheme(scheme) => Some(
            setup
                .start_proxy(scheme, &storage, &value, &loading)
                .await?,
        ),
    };
    let startup = proxy.as_ref().map(|(_, _, startup)| *startup);
    let proxy = proxy.as_ref().map(|(process, _key_dir, _)| process);
    // Where the clients connect: the proxy (over TLS with --tls), or the baseline Redis itself.
    let serving = match proxy {
        Some(proxy) => Target {
            addr: proxy.addr,
            tls: setup.tls.as_ref().map(|tls| tls.clients()),
        },
        None => storage.addr.into(),
    };

    warm_up(serving.clone(), warmup, &value, load, setup, &label).await?;
    let before = match proxy {
        Some(_) => counters(&info(serving.clone(), "all").await?),
        None => Counters::default(),
    };
    let cpu_window =
        |process: Option<&Process>| process.and_then(Process::pid).and_then(cpu::Window::start);
    let (proxy_cpu, storage_cpu) = (cpu_window(proxy), cpu_window(Some(&storage)));
    let running = bar(requests.len() as u64, format!("{label}: running"));
    let started = Instant::now();
    let answered = drive(
        serving.clone(),
        requests.clone(),
        &value,
        load,
        setup.reply_timeout,
        &running,
    )
    .await?;
    let seconds = started.elapsed().as_secs_f64();
    let (proxy_cpu, storage_cpu) = (
        proxy_cpu.and_then(|w| w.elapsed()),
        storage_cpu.and_then(|w| w.elapsed()),
    );
    running.finish_and_clear();

    let (after, scheme_info) = match proxy {
        Some(_) => {
            let after = info(serving.clone(), "all").await?;
            let mut scheme_info = info(serving.clone(), "scheme").await?;
            if let Some(durability) = after.get("durability") {
                scheme_info.insert("durability".into(), durability.clone());
            }
            (counters(&after), scheme_info)
        }
        None => (Counters::default(), BTreeMap::new()),
    };
    let rss = proxy.and_then(Process::rss_bytes);

    let subject = Subject {
        scheme: label,
        mode: Mode::Sockets,
        workload: setup.workload.clone(),
        keys: setup.keys,
    };
    let timing = Timing {
        ops: answered.latency.len(),
        errors: answered.errors,
        seconds,
    };
    let mut measurement =
        Measurement::new(subject, timing, &answered.latency, after.since(before), rss);
    measurement.scheme_info = scheme_info;
    measurement.startup = startup;
    measurement.set_cpu(proxy_cpu, storage_cpu);
    match setup.contender {
        Contender::Redis => {
            // No proxy between the clients and the data: no storage traffic to count.
            measurement.storage_bytes_per_op = None;
        }
        Contender::Scheme(_) => measurement.backend = Some(setup.backend.as_str().to_string()),
    }
    Ok(measurement)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_sums_over_a_cluster_proxys_partitions() {
        let info: BTreeMap<String, String> = [
            ("partition_0_real_slots", "5"),
            ("partition_12_real_slots", "7"),
            ("partition_12_dummy_slots", "100"),
            ("partition_x_real_slots", "1000"),
            ("partition_3_data_commands_processed", "9"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(info_sum(&info, "real_slots"), 12);
        assert_eq!(info_sum(&info, "commands_processed"), 0, "whole names only");
        assert_eq!(info_sum(&info, "data_commands_processed"), 9);
        let single: BTreeMap<String, String> = [("real_slots".to_string(), "4".to_string())].into();
        assert_eq!(counters(&single).real, 4);
    }
}
