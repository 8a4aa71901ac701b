//! Command-line arguments. Every field is optional here: defaults are applied after the config
//! file is merged in (see `config.rs`), so a flag left out never hides a setting from the file.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use serde::{Deserialize, Serialize};

const ABOUT: &str = "Cloak: an oblivious storage proxy that speaks Redis.";

const LONG_ABOUT: &str = "\
Cloak: an oblivious storage proxy that speaks Redis.

Applications talk to the proxy as if it were Redis. The proxy keeps every value encrypted on an \
untrusted storage server and shapes its accesses so the server's view follows a fixed, public \
distribution: it learns nothing about which keys are used, how often, or in what order.

Start here:
  cloak up                       storage + proxy in one process, on 127.0.0.1:6380
  redis-cli -p 6380 SET k v      then use any Redis client

Deploy:
  cloak keygen > cloak.key       make the secret key (keep it with the proxy, never the server)
  cloak certs -o certs --names HOST   a test CA and TLS certificates for both links
  cloak server --listen 0.0.0.0:7000 --data-dir /var/lib/cloak-data --tls-cert certs/server.pem \
    --tls-key certs/server.key --client-ca certs/ca.pem                on the untrusted machine
  cloak proxy --storage tls://HOST:7000 --storage-ca certs/ca.pem --storage-cert certs/client.pem \
    --storage-key certs/client.key --key-file cloak.key                on the trusted machine";

#[derive(Parser, Debug)]
#[command(name = "cloak", version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Cli {
    /// Read settings from this TOML file (`[store]`, `[up]`, `[proxy]`, `[server]` tables; keys are
    /// flag names); flags override it
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run storage and proxy in one process with in-memory storage: the quickest way to try Cloak.
    Up(UpArgs),
    /// Run the untrusted storage server (it only ever sees fixed-size ciphertexts).
    Server(ServerArgs),
    /// Run the trusted proxy in front of a storage server.
    Proxy(Box<ProxyArgs>),
    /// Print a new random 256-bit key (hex) for `--key-file` or `--storage-secret-file`.
    Keygen(KeygenArgs),
    /// Make a test CA and TLS certificates (server and client) for a quick start.
    Certs(CertsArgs),
    /// Measure schemes side by side on a workload, through real processes or in process.
    #[command(long_about = BENCH_ABOUT)]
    Bench(BenchArgs),
    /// Show what each scheme's storage server learns: play two workloads, record both server
    /// views in process, tell them apart and attack them.
    Audit(AuditArgs),
    /// A Cloak cluster that cluster-aware Redis clients use unmodified: start one to try it,
    /// write a cluster file, or show a running one's partitions.
    Cluster(ClusterArgs),
}

const BENCH_ABOUT: &str = "\
Measure schemes side by side on one workload, on this machine, in one run.

Each scheme runs in turn behind its own `cloak proxy` and `cloak server` (child processes, over
loopback), or with --backend redis a `redis-server`; the keys are preloaded, then the workload's
requests are sent and timed. `redis` in --scheme is a plain `redis-server` with the clients
straight to it: what a user has without Cloak. Ratios against `redis` and `unsafe` (plaintext
pass-through) are printed when they are part of the run, and so are the CPU seconds the proxy and
the storage process used per operation (from /proc).

Workloads:
  temporal   the Cloak paper's synthetic workload: each request picks the key whose recency rank
             is drawn from Zipf(--zipf-exponent); --write-ratio of them are writes
  ycsb-a|b|c|f  YCSB core workloads (50/50, 95/5, read-only, read-modify-write), zipfian 0.99 or
             --distribution uniform
  trace      replay --trace FILE: one request per line, `KEY` reads, `KEY ANYTHING` writes

Load:
  closed loop (default): --clients connections, each keeping --pipeline requests in flight
  open loop: --rate requests per second, on schedule; latency counts from when a request was due

Examples:
  cloak bench --scheme cloak,unsafe,encrypted --workload temporal --keys 1000000 --requests 2000000
  cloak bench --scheme redis,unsafe,cloak --backend redis
  cloak bench --scheme cloak,unsafe --workload ycsb-a --json out.json --plot out.png
  cloak bench --scheme cloak --rate 50000 --requests 500000
  cloak bench --scheme cloak,unsafe --sweep zipf-exponent=0,0.5,1,1.5,2 --plot skew.png
  cloak bench --scheme cloak --in-process --keys 100000        (simulation, virtual time)
  cloak bench --trace-stats trace.txt --plot reuse.png";

/// What the store holds and how it is protected; shared by `up` and `proxy` (TOML: `[store]`).
#[derive(Args, Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct StoreArgs {
    /// Scheme: cloak (oblivious, fixed batches), waffle (α,β-uniform, the Waffle paper), pancake
    /// (frequency smoothing: uniform accesses while requests follow the distribution estimate),
    /// path-oram (oblivious, one tree path per op), curious (oblivious partition ORAM, one access
    /// per request), encrypted (hides values, leaks access pattern) or unsafe (plaintext; the
    /// speed ceiling) [default: cloak]
    #[arg(long, value_name = "NAME")]
    pub scheme: Option<String>,

    /// Keys the store holds; fixed at creation [default: 100000]
    #[arg(long, value_name = "N")]
    pub capacity: Option<u64>,

    /// Largest value in bytes; every element is padded to this [default: 1024]
    #[arg(long, value_name = "BYTES")]
    pub value_size: Option<usize>,

    /// Longest key in bytes [default: 128]
    #[arg(long, value_name = "BYTES")]
    pub key_size: Option<usize>,

    #[arg(long, value_name = "N", help = defaulted(
        "Cloak: budget of reuse-distance set 1, b_1; later budgets follow Zipf",
        cloak_schemes::cloak::DEFAULT_FIRST_BUDGET,
    ))]
    pub first_budget: Option<u32>,

    #[arg(long, value_name = "S", help = defaulted(
        "Cloak: Zipf exponent s of the budgets, b_j = ceil(b_1 / j^s)",
        format!("{:?}", cloak_schemes::cloak::DEFAULT_ZIPF_EXPONENT),
    ))]
    pub zipf_exponent: Option<f64>,

    /// Cloak: explicit budgets b_1,b_2,… (comma-separated); overrides --first-budget and
    /// --zipf-exponent
    #[arg(long, value_name = "LIST")]
    pub budgets: Option<String>,

    #[arg(long, value_name = "DURATION", help = defaulted(
        "Cloak: time between batches, sent even when idle (e.g. 20ms, 5ms)",
        humantime::format_duration(cloak_schemes::cloak::DEFAULT_BATCH_INTERVAL),
    ))]
    pub batch_interval: Option<String>,

    #[arg(long, value_name = "FRACTION", help = defaulted(
        "Cloak and Waffle (fixed timing): when a batch's write-back leaves, as a fraction of \
         the batch interval after the batch's scheduled start (at least 0, below 1). The read's \
         answer and re-encryption must be done by then; a write-back that is late leaves at once \
         and the server sees the delay (counted as late_write_backs in INFO)",
        cloak_schemes::schedule::DEFAULT_WRITE_BACK_AT,
    ))]
    pub write_back_at: Option<f64>,

    /// A restart's fill runs on a public clock, so that its timing does not tell the storage
    /// server how many keys the store holds: its first request leaves a wait after the scan's
    /// last (time to open every scanned element and rebuild), and each one after a fixed
    /// interval, all computed from the store's size alone. This scales them all (2 is twice as
    /// slow, 0.5 twice as fast). Raise it if the log says fill requests left late (a host
    /// slower than the defaults assume) [default: 1]
    #[arg(long, value_name = "FACTOR")]
    pub fill_pace: Option<f64>,

    #[arg(long, value_name = "N", help = defaulted(
        "Cloak: records cached at the proxy to answer reads at once; 0 disables",
        cloak_schemes::cloak::DEFAULT_CACHE_SIZE,
    ))]
    pub cache_size: Option<usize>,

    /// Cloak and Waffle: most slots waiting for a batch before clients are slowed down
    /// [default: Cloak 2 × batch, Waffle 4 × --waffle-real]
    #[arg(long, value_name = "N")]
    pub max_pending: Option<usize>,

    /// Waffle: objects read (and written) per batch, B [default: 2500, smaller for stores under
    /// 10,000 keys]
    #[arg(long, value_name = "N")]
    pub waffle_batch: Option<u32>,

    /// Waffle: most client requests per batch, R [default: 40% of B]
    #[arg(long, value_name = "N")]
    pub waffle_real: Option<u32>,

    /// Waffle: fake queries to dummy objects per batch, f_D [default: 20% of B]
    #[arg(long, value_name = "N")]
    pub waffle_fake_dummy: Option<u32>,

    /// Waffle: objects cached at the proxy, C [default: 2% of --capacity, at least B − f_D + R]
    #[arg(long, value_name = "N")]
    pub waffle_cache: Option<u64>,

    /// Waffle: dummy objects, D [default: f_D·(N−1)/(B−R−f_D), balancing Theorem 7.1's α]
    #[arg(long, value_name = "N")]
    pub waffle_dummies: Option<u64>,

    #[arg(long, value_name = "DURATION", help = defaulted(
        "Waffle: longest time between batches (e.g. 20ms)",
        humantime::format_duration(cloak_schemes::waffle::DEFAULT_BATCH_INTERVAL),
    ))]
    pub waffle_interval: Option<String>,

    /// Waffle: fixed (a batch every --waffle-interval, loaded or idle: timing reveals nothing)
    /// or eager (also as soon as R requests wait: faster under load, but the batch rate then
    /// reveals the request rate) [default: fixed]
    #[arg(long, value_name = "MODE")]
    pub waffle_timing: Option<String>,

    /// Pancake: the access distribution estimate to start from: a key-weight file (`KEY WEIGHT`
    /// per line) or a trace (one request per line: `KEY` reads, `KEY ANYTHING…` writes)
    /// [default: uniform]
    #[arg(long, value_name = "FILE")]
    pub pancake_distribution: Option<PathBuf>,

    /// Pancake: how to read --pancake-distribution: auto (weights if every line is
    /// `KEY NUMBER`, else a trace), weights or trace [default: auto]
    #[arg(long, value_name = "FORMAT")]
    pub pancake_distribution_format: Option<String>,

    #[arg(long, value_name = "N", help = defaulted(
        "Pancake: accesses per client request, B",
        cloak_schemes::pancake::DEFAULT_BATCH_SIZE,
    ))]
    pub pancake_batch_size: Option<usize>,

    /// Pancake: detect when requests leave the estimate and swap replicas (§5) [default: true]
    #[arg(long, value_name = "BOOL")]
    pub pancake_adapt: Option<bool>,

    #[arg(long, value_name = "N", help = defaulted(
        "Pancake: requests per drift-detection window, w",
        cloak_schemes::pancake::DEFAULT_WINDOW,
    ))]
    pub pancake_window: Option<u64>,

    #[arg(long, value_name = "P", help = defaulted(
        "Pancake: significance of the Kolmogorov–Smirnov drift test",
        cloak_schemes::pancake::DEFAULT_SIGNIFICANCE,
    ))]
    pub pancake_significance: Option<f64>,

    #[arg(long, value_name = "DURATION", help = defaulted(
        "Pancake: a batch also goes out on this fixed schedule, so queued requests are served \
         when clients pause",
        humantime::format_duration(cloak_schemes::pancake::DEFAULT_IDLE_BATCH_INTERVAL),
    ))]
    pub pancake_idle_interval: Option<String>,

    #[arg(long, value_name = "N", help = defaulted(
        "Pancake: most requests waiting for a batch before clients are slowed down",
        cloak_schemes::pancake::DEFAULT_MAX_QUEUED,
    ))]
    pub pancake_max_queued: Option<usize>,

    /// CURIOUS: number of subORAMs m [default: ⌈√capacity⌉]
    #[arg(long, value_name = "M")]
    pub curious_partitions: Option<u64>,

    #[arg(long, value_name = "B", help = defaulted(
        "CURIOUS: children per subORAM tree node, b",
        cloak_schemes::curious::DEFAULT_ARITY,
    ))]
    pub curious_arity: Option<u32>,

    #[arg(long, value_name = "Z", help = defaulted(
        "CURIOUS: blocks per bucket, z",
        cloak_schemes::curious::DEFAULT_BUCKET_SIZE,
    ))]
    pub curious_bucket_size: Option<u32>,

    #[arg(long, value_name = "C", help = defaulted(
        "CURIOUS: cached blocks evicted to the subORAM of every access, at least 2",
        cloak_schemes::curious::DEFAULT_EVICTIONS,
    ))]
    pub curious_evictions: Option<u32>,

    #[arg(long, value_name = "N", help = defaulted(
        "CURIOUS: most accesses scheduled at once before clients are slowed down",
        cloak_schemes::curious::DEFAULT_MAX_IN_FLIGHT,
    ))]
    pub curious_max_in_flight: Option<usize>,

    /// CURIOUS: most blocks in the eviction cache before reads that would add one are refused
    /// (writes are kept, and may take it past) [default: 4m + 256]
    #[arg(long, value_name = "N")]
    pub curious_cache_limit: Option<usize>,

    /// CURIOUS: accesses a block stays readable at the proxy after its subORAM is drawn, so a
    /// hot key's fetch never follows its eviction; 0 is the paper's behaviour [default: 16m]
    #[arg(long, value_name = "ACCESSES")]
    pub curious_retention: Option<u64>,

    #[arg(long, value_name = "Z", help = defaulted(
        "Path ORAM: blocks per tree bucket, Z",
        cloak_schemes::path_oram::DEFAULT_BUCKET_SIZE,
    ))]
    pub oram_bucket_size: Option<usize>,

    #[arg(long, value_name = "N", help = defaulted(
        "Path ORAM: most blocks the proxy's stash may hold after an access; above it new \
         requests are refused until evictions shrink it",
        cloak_schemes::path_oram::DEFAULT_STASH_LIMIT,
    ))]
    pub oram_stash_limit: Option<usize>,

    /// Most keys one MGET/MSET/DEL/EXISTS may name [default: 10000]
    #[arg(long, value_name = "N")]
    pub max_keys_per_command: Option<usize>,
}

/// A flag's help ending in its default, read from the constant that sets it.
fn defaulted(help: &str, default: impl std::fmt::Display) -> String {
    format!("{help} [default: {default}]")
}

fn max_clients_help() -> String {
    format!(
        "Most clients connected at once; one more gets \"-ERR max number of clients reached\" \
         and is closed [default: {}]",
        cloak_proxy::DEFAULT_MAX_CLIENTS
    )
}

fn auth_timeout_help() -> String {
    defaulted(
        "With --password: a client that has not authenticated this long after connecting is told \
         so and closed; unauthenticated clients hold at most an eighth of --max-clients, a new one \
         beyond it closing the oldest",
        humantime::format_duration(cloak_proxy::DEFAULT_AUTH_TIMEOUT),
    )
}

fn release_timeout_help() -> String {
    defaulted(
        "With --cluster: how long `cloak cluster move` may wait for this proxy to drain the \
         partition it moves into storage (every acknowledged write, then every request out); \
         past it the move fails, saying what storage has not answered, and the partition is \
         served here again once storage answers",
        humantime::format_duration(cloak_proxy::cluster::handoff::RELEASE_TIMEOUT),
    )
}

fn max_connections_help() -> String {
    format!(
        "Serve at most this many connections that completed the handshake at once (a proxy opens \
         a few); more are told the server is full and closed. Connections still handshaking do \
         not count: at most {} are held, one more closing the oldest [default: 1024]",
        cloak_storage::PENDING_HANDSHAKES
    )
}

fn client_reply_limit_help() -> String {
    format!(
        "Bytes of replies a client may leave unread before it is disconnected, like Redis's \
         client-output-buffer-limit; at least {} [default: {}]",
        cloak_proxy::MIN_REPLY_LIMIT,
        cloak_proxy::DEFAULT_REPLY_LIMIT
    )
}

fn total_reply_limit_help() -> String {
    defaulted(
        "Bytes of replies all clients together may leave unread; past it the client leaving the \
         most is disconnected (and logged)",
        cloak_proxy::DEFAULT_TOTAL_REPLY_LIMIT,
    )
}

fn max_pending_bytes_help() -> String {
    format!(
        "Bytes of requests the whole proxy holds between reading them and writing their replies \
         (each request counts at least 1 KiB); a connection past it, or past its own {} MiB, \
         stops being read until replies go out [default: {}]",
        cloak_proxy::CONNECTION_PENDING_BYTES >> 20,
        cloak_proxy::DEFAULT_PROXY_PENDING_BYTES
    )
}

/// TOML: `[up]`.
#[derive(Args, Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct UpArgs {
    #[command(flatten)]
    #[serde(skip)]
    pub store: StoreArgs,

    /// Port clients connect to [default: 6380]
    #[arg(long, short, value_name = "PORT")]
    pub port: Option<u16>,

    /// Address to listen on [default: 127.0.0.1]
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<String>,

    /// Require clients to AUTH with this password
    #[arg(long, env = "CLOAK_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,

    #[command(flatten)]
    #[serde(skip)]
    pub security: ClientSecurityArgs,

    /// Most clients connected at once; one more gets "-ERR max number of clients reached"
    #[arg(long, value_name = "N", help = max_clients_help())]
    pub max_clients: Option<usize>,

    /// With --password: how long a client may stay connected without authenticating
    #[arg(long, value_name = "DURATION", help = auth_timeout_help())]
    pub auth_timeout: Option<String>,

    /// Bytes of replies a client may leave unread before it is disconnected
    #[arg(long, value_name = "BYTES", help = client_reply_limit_help())]
    pub client_reply_limit: Option<usize>,

    /// Bytes of replies all clients together may leave unread
    #[arg(long, value_name = "BYTES", help = total_reply_limit_help())]
    pub total_reply_limit: Option<usize>,

    /// Bytes of requests the proxy holds between reading them and writing their replies
    #[arg(long, value_name = "BYTES", help = max_pending_bytes_help())]
    pub max_pending_bytes: Option<usize>,

    /// Encryption key file; without one, an ephemeral key is made (and the data dies with it)
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,

    /// Serve Prometheus metrics at http://ADDR/metrics
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
}

/// How clients reach `up` and `proxy`: TLS, client certificates, protected mode. TOML: in
/// `[up]` or `[proxy]`, beside their other keys.
#[derive(Args, Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ClientSecurityArgs {
    /// Serve clients over TLS with this certificate (PEM, with its chain); reloaded on SIGHUP
    /// and when its files change.
    /// Without --tls-port the client port speaks TLS only
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Require clients to present a certificate signed by this CA (mutual TLS)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_ca: Option<PathBuf>,

    /// Serve TLS on this port (same address) alongside the plain client port
    #[arg(long, value_name = "PORT", requires = "tls_cert")]
    pub tls_port: Option<u16>,

    /// Refuse to listen on a non-loopback address when clients need neither a password nor a
    /// client certificate; `--protected-mode no` allows it [default: yes]
    #[arg(long, value_name = "yes|no", value_parser = clap::builder::BoolishValueParser::new())]
    pub protected_mode: Option<bool>,
}

/// TOML: `[server]`.
#[derive(Args, Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ServerArgs {
    /// Address to listen on [default: 127.0.0.1:7000]
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,

    /// Keep the elements durably in this directory: every batch is written and fsynced
    /// (group-committed) before it is acknowledged, and a restart serves the same elements.
    /// Without it the elements live in memory only
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// Serve proxies over TLS with this certificate (PEM, with its chain); reloaded on SIGHUP
    /// and when its files change
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Accept only proxies that present a certificate signed by this CA (mutual TLS)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,

    /// Accept only proxies that prove they know the secret in this file (a challenge-response
    /// at connect; the secret never crosses the network). Make one with `cloak keygen`
    #[arg(long, value_name = "FILE")]
    pub storage_secret_file: Option<PathBuf>,

    /// Serve at most this many connections that completed the handshake at once
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..),
          help = max_connections_help())]
    pub max_connections: Option<u32>,

    /// Refuse to listen on a non-loopback address when anyone who reaches it could use the
    /// store (neither --client-ca nor --storage-secret-file); `--protected-mode no` allows it
    /// [default: yes]
    #[arg(long, value_name = "yes|no", value_parser = clap::builder::BoolishValueParser::new())]
    pub protected_mode: Option<bool>,
}

/// TOML: `[proxy]`.
#[derive(Args, Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ProxyArgs {
    #[command(flatten)]
    #[serde(skip)]
    pub store: StoreArgs,

    /// Storage backend: tcp://HOST:PORT (a `cloak server`), `redis://[:PASSWORD@]HOST:PORT[/DB]`
    /// (a Redis; run it with appendonly yes and appendfsync always to keep acknowledged writes
    /// across its crashes), redis+cluster://HOST:PORT,HOST:PORT,… (a Redis Cluster), either with
    /// ?prefix=P for the key prefix [default: cloak:], or memory (this process)
    #[arg(long, value_name = "URL")]
    pub storage: Option<String>,

    /// Address clients connect to [default: 127.0.0.1:6380]
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,

    /// Encryption key file from `cloak keygen` (or set CLOAK_KEY to the hex key)
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,

    /// Require clients to AUTH with this password
    #[arg(long, env = "CLOAK_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,

    #[command(flatten)]
    #[serde(skip)]
    pub security: ClientSecurityArgs,

    /// Most clients connected at once; one more gets "-ERR max number of clients reached"
    #[arg(long, value_name = "N", help = max_clients_help())]
    pub max_clients: Option<usize>,

    /// With --password: how long a client may stay connected without authenticating
    #[arg(long, value_name = "DURATION", help = auth_timeout_help())]
    pub auth_timeout: Option<String>,

    /// Bytes of replies a client may leave unread before it is disconnected
    #[arg(long, value_name = "BYTES", help = client_reply_limit_help())]
    pub client_reply_limit: Option<usize>,

    /// Bytes of replies all clients together may leave unread
    #[arg(long, value_name = "BYTES", help = total_reply_limit_help())]
    pub total_reply_limit: Option<usize>,

    /// Bytes of requests the proxy holds between reading them and writing their replies
    #[arg(long, value_name = "BYTES", help = max_pending_bytes_help())]
    pub max_pending_bytes: Option<usize>,

    /// With --storage tls://: the CA that signed the storage server's certificate
    #[arg(long, value_name = "FILE")]
    pub storage_ca: Option<PathBuf>,

    /// With --storage tls:// (or rediss://): the certificate this proxy presents to storage
    /// servers that require one (mutual TLS)
    #[arg(long, value_name = "FILE", requires = "storage_key")]
    pub storage_cert: Option<PathBuf>,

    /// The private key of --storage-cert
    #[arg(long, value_name = "FILE", requires = "storage_cert")]
    pub storage_key: Option<PathBuf>,

    /// The secret shared with a `cloak server --storage-secret-file`: proves this proxy to it
    /// (and it to this proxy) at connect, without sending the secret
    #[arg(long, value_name = "FILE")]
    pub storage_secret_file: Option<PathBuf>,

    /// Connections to the storage server [default: 4]
    #[arg(long, value_name = "N")]
    pub storage_connections: Option<usize>,

    /// Keep the proxy's state here: its key (made on first start unless --key-file/CLOAK_KEY
    /// give one), its journal of acknowledged writes, its start counter. With it, SIGKILL loses
    /// no acknowledged write
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// wal: every write is in the journal (fsynced, group-committed) before +OK; none: writes
    /// are acknowledged from memory [default: wal with --state-dir, else none]
    #[arg(long, value_name = "MODE")]
    pub durability: Option<String>,

    /// Start even when storage does not hold the whole store as this proxy left it (elements
    /// missing, altered, from another key, or older than the state directory's ledger says):
    /// serve what is there, and print what is lost. Without it such a start is refused
    #[arg(long)]
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accept_data_loss: bool,

    /// Serve Prometheus metrics at http://ADDR/metrics
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,

    /// Be one proxy of the Cloak cluster this file describes (`cloak cluster init` writes one):
    /// host the partitions it gives --node, each in the storage it names (with --state-dir, in
    /// DIR/partition-N), and redirect clients to the other proxies for the other slots
    #[arg(long, value_name = "FILE", requires = "node")]
    pub cluster: Option<PathBuf>,

    /// With --cluster: which of the file's proxies this is
    #[arg(long, value_name = "NAME", requires = "cluster")]
    pub node: Option<String>,

    /// With --cluster: the cluster's secret (`cloak keygen -o FILE` makes one; the same file on
    /// every proxy and wherever `cloak cluster move` runs, never in the cluster file). Only a
    /// connection that gives it (`AUTH cloak-admin <secret>`) may move partitions, and the
    /// proxies sign the maps they keep with it. Without it this proxy refuses every move
    #[arg(
        long,
        value_name = "FILE",
        requires = "cluster",
        env = "CLOAK_CLUSTER_SECRET_FILE"
    )]
    pub cluster_secret_file: Option<PathBuf>,

    /// With --cluster: reach the other proxies (health probes, their maps at a start, who holds
    /// a partition during a move) over TLS, checking their certificates against this CA (each
    /// must carry the host of its address in the cluster file). Needed when clients must use
    /// TLS (--tls-cert without --tls-port); without it the proxies talk in the clear
    #[arg(long, value_name = "FILE", requires = "cluster")]
    pub cluster_ca: Option<PathBuf>,

    /// With --cluster: for clients that are not cluster-aware, send a command whose keys are in
    /// another proxy's slot to that proxy and relay its reply, instead of answering -MOVED.
    /// Off by default: cluster-aware clients learn the cluster's map from -MOVED and go to the
    /// right proxy themselves, one hop shorter. Transactions, WATCH and scripts on another
    /// proxy's keys are refused, not forwarded. Forwarded commands travel between proxies in
    /// the clear unless --cluster-ca is given
    #[arg(long, requires = "cluster")]
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cluster_forward: bool,
    /// With --cluster: how long a move may wait for this proxy to drain a partition into
    /// storage before the move fails and the partition is served here again
    #[arg(long, value_name = "DURATION", requires = "cluster", help = release_timeout_help())]
    pub release_timeout: Option<String>,
}

#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Start a whole cluster in this process to try it: --proxies proxies on consecutive ports,
    /// --partitions partitions spread evenly over them, each a store with its own key in memory
    Up(Box<ClusterUpArgs>),
    /// Print a cluster file for `cloak proxy --cluster FILE --node NAME`: slots spread evenly
    /// over the partitions, partitions in equal runs over the proxies
    Init(ClusterInitArgs),
    /// Show a running cluster: every proxy, whether it answers, and its partitions' slots and
    /// fill
    Status(ClusterStatusArgs),
    /// Move a partition to another proxy: its proxy drains it into storage and stops it, the
    /// other starts it from storage, every proxy learns the new map, and clients are redirected
    Move(ClusterMoveArgs),
    /// Add a proxy to a running cluster, hosting nothing until a move gives it a partition:
    /// every proxy learns the new map; then start it with `cloak proxy --cluster FILE --node
    /// NAME` (the old cluster file does: it reads the new map from the other proxies)
    AddProxy(ClusterAddProxyArgs),
}

#[derive(Args, Debug)]
pub struct ClusterUpArgs {
    #[command(flatten)]
    pub store: StoreArgs,

    /// Proxies to start
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub proxies: usize,

    /// Partitions: the store is this many stores of --capacity keys each, fixed at creation
    #[arg(long, value_name = "N", default_value_t = 12)]
    pub partitions: usize,

    /// The first proxy's port; the others follow it
    #[arg(long, short, value_name = "PORT", default_value_t = 7001)]
    pub port: u16,

    /// Address the proxies listen on and announce to clients
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    pub bind: String,
}

#[derive(Args, Debug)]
pub struct ClusterInitArgs {
    /// The proxies, NAME=HOST:PORT (where clients reach it), comma-separated
    #[arg(long, value_delimiter = ',', value_name = "LIST", required = true)]
    pub proxy: Vec<String>,

    /// Partitions, fixed for the cluster's life
    #[arg(long, value_name = "N")]
    pub partitions: usize,

    /// Each partition's storage URL; {partition} becomes its number, so partitions sharing one
    /// Redis keep apart, e.g. 'redis+cluster://10.0.0.1:7000?prefix=app:p{partition}:'
    #[arg(long, value_name = "URL")]
    pub storage: String,
}

#[derive(Args, Debug)]
pub struct ClusterStatusArgs {
    /// Any proxy of the cluster, HOST:PORT; the others are found from its CLUSTER NODES
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7001")]
    pub node: String,

    /// The proxies' password, if they require one
    #[arg(long, env = "CLOAK_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,

    /// Reach the proxies over TLS, checking their certificates against this CA (as their
    /// --cluster-ca)
    #[arg(long, value_name = "FILE")]
    pub cluster_ca: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ClusterMoveArgs {
    /// The partition to move, by number (`cloak cluster status` lists them)
    #[arg(long, value_name = "N")]
    pub partition: usize,

    /// The proxy to move it to, by name (as in the cluster file)
    #[arg(long, value_name = "NAME")]
    pub to: String,

    #[command(flatten)]
    pub admin: ClusterAdminArgs,

    /// The partition's proxy is dead and will not serve again: the operator says so. The target
    /// takes the partition from storage alone, without asking the dead proxy to drain it (the
    /// tool and the target each check first that the proxy does not answer, and refuse if it
    /// does: then move it without this flag). Needs --accept-data-loss. Restart the dead proxy,
    /// if ever, only with its state dir: it then adopts the newer map and does not serve the
    /// partition
    #[arg(long)]
    pub source_down: bool,

    /// With --source-down: writes the dead proxy acknowledged but had not yet stored (still in
    /// its journal) are not in the partition the target starts; they are lost
    #[arg(long, requires = "source_down")]
    pub accept_data_loss: bool,
}

#[derive(Args, Debug)]
pub struct ClusterAddProxyArgs {
    /// The new proxy's name: letters, digits, '-', '_' or '.', not another proxy's
    #[arg(long, value_name = "NAME")]
    pub name: String,

    /// Where clients will reach it, HOST:PORT (what `-MOVED` and CLUSTER SLOTS announce), not
    /// another proxy's
    #[arg(long, value_name = "HOST:PORT")]
    pub address: String,

    #[command(flatten)]
    pub admin: ClusterAdminArgs,

    /// Write the new cluster file (signed, as the proxies keep it) here rather than to stdout
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// How `cloak cluster move` and `add-proxy` reach the proxies as the cluster's admin.
#[derive(Args, Debug)]
pub struct ClusterAdminArgs {
    /// Any proxy of the cluster, HOST:PORT; the others are found from its map
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7001")]
    pub node: String,

    /// The cluster's secret, as given to the proxies with --cluster-secret-file: the steps are
    /// admin commands (`AUTH cloak-admin <secret>`); the client password cannot run them
    #[arg(long, value_name = "FILE", env = "CLOAK_CLUSTER_SECRET_FILE")]
    pub cluster_secret_file: PathBuf,

    /// Reach the proxies over TLS, checking their certificates against this CA (as their
    /// --cluster-ca): needed when they serve clients over TLS only, and keeps the secret off the
    /// network in the clear. Without it, the tool sends the secret only to loopback addresses
    #[arg(long, value_name = "FILE")]
    pub cluster_ca: Option<PathBuf>,

    /// DANGEROUS: without --cluster-ca, send the cluster secret in the clear to proxies that
    /// are not on this machine too. Anyone who can read the traffic on the way learns the
    /// secret, and with it can move any partition and sign maps the proxies trust. Only on a
    /// network where every link is trusted
    #[arg(long, conflicts_with = "cluster_ca")]
    pub allow_plaintext_secret: bool,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Schemes to run, comma-separated, in order; `redis` is a plain redis-server with the
    /// clients straight to it, the baseline [default: cloak,unsafe]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub scheme: Vec<String>,

    /// Where each scheme's proxy keeps its elements: cloak-server (`cloak server`) or redis (a
    /// plain redis-server started by the bench, persistence off) [default: cloak-server]
    #[arg(long, value_name = "NAME")]
    pub backend: Option<String>,

    /// Give up when a connection has waited this long for a reply (a stalled server) [default:
    /// 60s]
    #[arg(long, value_name = "DURATION")]
    pub reply_timeout: Option<String>,

    /// temporal, ycsb-a, ycsb-b, ycsb-c, ycsb-f, or trace [default: temporal]
    #[arg(long, value_name = "NAME")]
    pub workload: Option<String>,

    /// The file to replay with --workload trace
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,

    /// YCSB key distribution: zipfian (0.99) or uniform [default: zipfian]
    #[arg(long, value_name = "NAME")]
    pub distribution: Option<String>,

    /// Keys in the store [default: 100000]
    #[arg(long, value_name = "N")]
    pub keys: Option<u64>,

    /// Requests to send [default: 300000]
    #[arg(long, value_name = "N")]
    pub requests: Option<u64>,

    /// Requests sent first, from the same workload, and not measured: Cloak's sets start as a
    /// random partition and take about one pass through them (a few seconds at a million keys)
    /// to follow the workload's recency [default: 0]
    #[arg(long, value_name = "N")]
    pub warmup: Option<u64>,

    #[arg(long, value_name = "S", help = defaulted(
        "Temporal workload skew: Zipf exponent of recency ranks",
        format!("{:?}", cloak_schemes::cloak::DEFAULT_ZIPF_EXPONENT),
    ))]
    pub zipf_exponent: Option<f64>,

    /// Fraction of writes in the temporal workload [default: 0.5]
    #[arg(long, value_name = "F")]
    pub write_ratio: Option<f64>,

    /// Value size in bytes [default: 1024]
    #[arg(long, value_name = "BYTES")]
    pub value_size: Option<usize>,

    /// Connections the requests are spread over [default: 50]
    #[arg(long, value_name = "N")]
    pub clients: Option<usize>,

    /// Closed loop: requests each connection keeps in flight (open loop sends whatever is due,
    /// however much is in flight) [default: 16]
    #[arg(long, value_name = "N")]
    pub pipeline: Option<usize>,

    /// Open loop: requests per second (instead of closed loop)
    #[arg(long, value_name = "R")]
    pub rate: Option<f64>,

    #[arg(long, value_name = "N", help = defaulted(
        "Cloak's b_1",
        cloak_schemes::cloak::DEFAULT_FIRST_BUDGET,
    ))]
    pub first_budget: Option<u32>,

    #[arg(long, value_name = "S", help = defaulted(
        "Cloak's budget Zipf exponent (its --zipf-exponent)",
        format!("{:?}", cloak_schemes::cloak::DEFAULT_ZIPF_EXPONENT),
    ))]
    pub budget_exponent: Option<f64>,

    #[arg(long, value_name = "DURATION", help = defaulted(
        "Cloak's batch interval",
        humantime::format_duration(cloak_schemes::cloak::DEFAULT_BATCH_INTERVAL),
    ))]
    pub batch_interval: Option<String>,

    #[arg(long, value_name = "N", help = defaulted(
        "Cloak's cache size",
        cloak_schemes::cloak::DEFAULT_CACHE_SIZE,
    ))]
    pub cache_size: Option<usize>,

    /// More flags for every `cloak proxy`, e.g. --proxy-arg=--durability=none (repeat for
    /// each). Store and scheme settings also come from the `[store]` table of --config
    #[arg(long = "proxy-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub proxy_args: Vec<String>,

    /// More flags for every storage server, e.g. --server-arg=--data-dir=/tmp/d (repeat): for
    /// `cloak server`, or for `redis-server` with --backend redis and the redis baseline
    #[arg(long = "server-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub server_args: Vec<String>,

    /// Both of each proxy's links over TLS: clients to the proxy, and the proxy to `cloak server`
    /// with mutual TLS (certificates made for the run). `--sweep tls=0,1` measures both
    #[arg(long)]
    pub tls: bool,

    /// Simulate in this process with virtual time instead of real processes
    #[arg(long)]
    pub in_process: bool,

    /// In process: virtual time of one storage round trip [default: 200us]
    #[arg(long, value_name = "DURATION")]
    pub storage_delay: Option<String>,

    /// Vary one parameter: zipf-exponent, batch-size, cache-size, value-size, keys, rate or
    /// durable (0: memory server, no proxy journal; 1: server --data-dir and proxy journal) or
    /// tls (0: in the clear; 1: both links over TLS), e.g. zipf-exponent=0,0.5,1,1.5,2 or
    /// keys=10000,1000000,10000000 or durable=0,1 or tls=0,1
    #[arg(long, value_name = "NAME=V1,V2,…")]
    pub sweep: Option<String>,

    /// Run each scheme as a Cloak cluster of this many `cloak proxy --cluster` processes, one
    /// point per count, e.g. 1,2,4: the same --partitions partitions (each with its own storage
    /// server) spread over them, driven by a cluster-aware load; reports ops/s and each
    /// process's CPU time per op
    #[arg(long, value_delimiter = ',', value_name = "LIST", conflicts_with_all = ["sweep", "in_process", "tls"])]
    pub cluster_proxies: Vec<usize>,

    /// With --cluster-proxies: the cluster's partitions, one count fixed across the sweep
    /// [default: the largest proxy count]. With --in-process: counts to sweep, e.g. 1,2,4,8,
    /// each splitting the keys by hash slot over that many partitions simulated in this
    /// process, for their CPU time per op
    #[arg(long, value_delimiter = ',', value_name = "N|LIST")]
    pub partitions: Vec<usize>,

    /// Write the results as JSON here
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Draw the results (PNG or SVG, by extension)
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,

    /// Seed for the workload generators [default: 1]
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,

    /// Instead of running: the reuse-distance histogram of a trace, its Zipf fit, and budgets
    /// that suit it
    #[arg(long, value_name = "FILE")]
    pub trace_stats: Option<PathBuf>,

    /// With --trace-stats: the request rate to size Cloak's batches for [default: 100000]
    #[arg(long, value_name = "R")]
    pub expected_rate: Option<f64>,
}

#[derive(Args, Debug)]
pub struct CertsArgs {
    /// Directory to write ca.pem, server.pem, server.key, client.pem, client.key into
    #[arg(long, short, value_name = "DIR", default_value = "cloak-certs")]
    pub output: PathBuf,

    /// Names the server certificate is for (host names or IP addresses the proxy and `cloak
    /// server` are reached at), comma-separated; localhost and loopback are always included
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub names: Vec<String>,
}

#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// Write the key to this file (created with owner-only permissions) instead of stdout
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `cloak audit --help`'s closing text: the workload syntax, examples, what runs where.
fn audit_help() -> String {
    let syntax: String = cloak_bench::workload::SYNTAX
        .lines()
        .map(|line| format!("  {line}\n"))
        .collect();
    format!(
        "Workloads (--workload, --versus):\n{syntax}\n\
         Examples:\n  \
         cloak audit --workload ycsb-c --versus uniform\n  \
         cloak audit --scheme cloak,encrypted --workload one-key --versus uniform --report a.html\n  \
         cloak audit --workload markov --versus markov:graph=2 --requests 100000 \\\n              \
         --capacity 5000 --report audit.md --plot audit.png\n\n\
         Everything runs in this process with virtual time; nothing is listened on or sent. Store \
         and scheme flags are those of `cloak up` (and the [store] table of --config); Cloak's \
         first budget and cache default to the paper's ({} and {} per million keys) scaled to \
         --capacity.",
        cloak_schemes::cloak::DEFAULT_FIRST_BUDGET,
        cloak_schemes::cloak::DEFAULT_CACHE_SIZE,
    )
}

/// `cloak audit`. Store and scheme settings come from `[store]`; the rest are command-line only.
#[derive(Args, Debug)]
#[command(
    after_long_help = audit_help(),
    mut_arg("scheme", |a| a.help(
        "Schemes to audit, comma-separated, or all [default: all]"
    )),
    mut_arg("capacity", |a| a.help(
        "Keys in the store; the workloads use keys 0..N [default: 1000]"
    )),
    mut_arg("value_size", |a| a.help("Largest value in bytes [default: 64]")),
    mut_arg("first_budget", |a| a.help(defaulted(
        "Cloak: budget of reuse-distance set 1, b_1",
        format!("{} per million keys, at least 1", cloak_schemes::cloak::DEFAULT_FIRST_BUDGET),
    ))),
    mut_arg("cache_size", |a| a.help(defaulted(
        "Cloak: records cached at the proxy",
        format!("{} per million keys, at least 1", cloak_schemes::cloak::DEFAULT_CACHE_SIZE),
    ))),
    mut_arg("key_size", |a| a.hide(true)),
    mut_arg("max_keys_per_command", |a| a.hide(true)),
)]
pub struct AuditArgs {
    #[command(flatten)]
    pub store: StoreArgs,

    /// The adversary's first workload, A (syntax below)
    #[arg(long, short = 'a', value_name = "WORKLOAD")]
    pub workload: String,

    /// The adversary's second workload, B
    #[arg(long, short = 'b', value_name = "WORKLOAD")]
    pub versus: String,

    /// Requests of each workload
    #[arg(long, short = 'n', value_name = "N", default_value_t = 20_000)]
    pub requests: u64,

    /// Clients sending at once (closed loop)
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub clients: usize,

    /// Requests each client keeps in flight
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub pipeline: usize,

    /// Virtual time of one storage round trip
    #[arg(long, value_name = "DURATION", default_value = "1ms")]
    pub storage_delay: String,

    /// Seed of the workloads and of every scheme's randomness (runs repeat exactly)
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,

    /// Write the full report here: Markdown (.md) or HTML (.html)
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// Draw the comparison here: PNG (.png) or SVG (.svg)
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}
