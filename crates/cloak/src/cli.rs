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
  cloak server --listen 0.0.0.0:7000                          on the untrusted machine
  cloak proxy --storage tcp://HOST:7000 --key-file cloak.key  on the trusted machine";

#[derive(Parser, Debug)]
#[command(name = "cloak", version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Cli {
    /// Read settings from this TOML file ([store], [up], [proxy], [server] tables; keys are flag
    /// names); flags override it
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
    Proxy(ProxyArgs),
    /// Print a new random 256-bit key (hex) for `--key-file`.
    Keygen(KeygenArgs),
    /// Show what each scheme's storage server learns: play two workloads, record both server
    /// views in process, tell them apart and attack them.
    Audit(AuditArgs),
}

/// What the store holds and how it is protected; shared by `up` and `proxy` (TOML: `[store]`).
#[derive(Args, Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct StoreArgs {
    /// Scheme: cloak (oblivious), encrypted (hides values, leaks access pattern) or unsafe
    /// (plaintext; the speed ceiling) [default: cloak]
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

    /// Cloak: budget of reuse-distance set 1, b_1; later budgets follow Zipf [default: 433]
    #[arg(long, value_name = "N")]
    pub first_budget: Option<u32>,

    /// Cloak: Zipf exponent s of the budgets, b_j = ceil(b_1 / j^s) [default: 1.0]
    #[arg(long, value_name = "S")]
    pub zipf_exponent: Option<f64>,

    /// Cloak: explicit budgets b_1,b_2,… (comma-separated); overrides --first-budget and
    /// --zipf-exponent
    #[arg(long, value_name = "LIST")]
    pub budgets: Option<String>,

    /// Cloak: time between batches, sent even when idle (e.g. 20ms, 5ms) [default: 20ms]
    #[arg(long, value_name = "DURATION")]
    pub batch_interval: Option<String>,

    /// Cloak: records cached at the proxy to answer reads at once; 0 disables [default: 1000]
    #[arg(long, value_name = "N")]
    pub cache_size: Option<usize>,

    /// Cloak: most slots waiting for a batch before clients are slowed down [default: 2 × batch]
    #[arg(long, value_name = "N")]
    pub max_pending: Option<usize>,

    /// Most keys one MGET/MSET/DEL/EXISTS may name [default: 10000]
    #[arg(long, value_name = "N")]
    pub max_keys_per_command: Option<usize>,
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

    /// Encryption key file; without one, an ephemeral key is made (and the data dies with it)
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,

    /// Serve Prometheus metrics at http://ADDR/metrics
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
}

/// TOML: `[server]`.
#[derive(Args, Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ServerArgs {
    /// Address to listen on [default: 127.0.0.1:7000]
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
}

/// TOML: `[proxy]`.
#[derive(Args, Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ProxyArgs {
    #[command(flatten)]
    #[serde(skip)]
    pub store: StoreArgs,

    /// Storage backend: tcp://HOST:PORT (a `cloak server`) or memory (this process)
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

    /// Serve Prometheus metrics at http://ADDR/metrics
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
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
         first budget and cache default to the paper's (433 and 1000 per million keys) scaled to \
         --capacity."
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
    mut_arg("first_budget", |a| a.help(
        "Cloak: budget of reuse-distance set 1, b_1 [default: 433 per million keys, at least 1]"
    )),
    mut_arg("cache_size", |a| a.help(
        "Cloak: records cached at the proxy [default: 1000 per million keys, at least 1]"
    )),
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
