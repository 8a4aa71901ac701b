//! `cloak cluster up | init | status`: a Cloak cluster to try on one machine, the cluster file
//! for deploying one (`cloak proxy --cluster FILE --node NAME` on each proxy's machine), and a
//! look at a running one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use cloak_cluster::ClusterMap;
use cloak_crypto::MasterKey;
use cloak_proxy::{ClusterRole, HostedStore, OwnThread};
use cloak_storage::{MemoryStorage, Storage};
use tokio::net::TcpListener;

use super::partition_host;
use crate::cli::{
    ClientSecurityArgs, ClusterArgs, ClusterCommand, ClusterInitArgs, ClusterStatusArgs,
    ClusterUpArgs,
};
use crate::config::ConfigFile;

/// Keys per partition for `cloak cluster up` unless `--capacity` says otherwise: every
/// partition holds its whole capacity in memory and sends its own batches, so a dozen stores
/// of `cloak up`'s 100,000 keys would take more than a gigabyte.
const TRY_CAPACITY: u64 = 10_000;

pub async fn run(args: ClusterArgs, config: &ConfigFile) -> anyhow::Result<()> {
    match args.command {
        ClusterCommand::Up(args) => up(args, config).await,
        ClusterCommand::Init(args) => init(args),
        ClusterCommand::Status(args) => status(&args).await,
        ClusterCommand::Move(args) => super::cluster_move::run(&args).await,
        ClusterCommand::AddProxy(args) => super::cluster_move::add_proxy(&args).await,
    }
}

/// Every proxy and partition in this process, each partition in memory with a fresh key.
async fn up(args: Box<ClusterUpArgs>, config: &ConfigFile) -> anyhow::Result<()> {
    let mut store_args = config.merge(&args.store, &["store"])?;
    store_args.capacity = store_args.capacity.or(Some(TRY_CAPACITY));
    let store = store_args.resolve()?;
    enough_partitions(args.proxies, args.partitions)?;
    let proxies = (0..args.proxies)
        .map(|i| {
            let port = u16::try_from(usize::from(args.port) + i)
                .ok()
                .filter(|&port| port != 0)
                .context("--port leaves no room for every proxy's port")?;
            Ok((format!("proxy-{}", i + 1), format!("{}:{port}", args.bind)))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let map = Arc::new(ClusterMap::even(&proxies, args.partitions, "memory")?);
    let options = super::front_end(None, None, None, None, None, None)?;
    let storage_io = OwnThread::start("cloak-storage-io")
        .context("cannot start the storage traffic's thread")?;
    let options = cloak_proxy::ProxyOptions {
        storage_io: Some(storage_io.handle()),
        ..options
    };
    let mut summary = String::new();
    let mut proxies_running = Vec::with_capacity(map.proxies().len());
    let started = Arc::new(AtomicUsize::new(0));
    for (me, proxy) in map.proxies().iter().enumerate() {
        let listener = TcpListener::bind(proxy.address())
            .await
            .with_context(|| format!("cannot listen on {} (try --port)", proxy.address()))?;
        let (listeners, _) =
            super::security::client_listeners(listener, &ClientSecurityArgs::default(), false)
                .await?;
        let mut stores = Vec::new();
        for partition in map.hosted_by(me) {
            // A key of its own for every partition, made now: the data dies with the process.
            let master = MasterKey::generate()?;
            let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
            let (engine, _) = store
                .start(&master, storage.as_ref(), None, None, None, false)
                .await?;
            summary = store.summary(&engine);
            let hosted = HostedStore {
                engine,
                storage,
                journal: None,
                ledger: None,
                recovery_spool: None,
            };
            stores.push((partition.index, hosted));
        }
        let partitions: Vec<String> = stores.iter().map(|(i, _)| i.to_string()).collect();
        let slots: Vec<String> = map.ranges_of(me).iter().map(|r| r.to_string()).collect();
        let line = format!(
            "  {} on {}: partitions {}, slots {}",
            proxy.name,
            proxy.address(),
            partitions.join(","),
            slots.join(",")
        );
        let (started, total, partitions, port, summary) = (
            started.clone(),
            map.proxies().len(),
            map.partitions().len(),
            map.proxies()[0].port,
            summary.clone(),
        );
        let ready = move |_: cloak_proxy::Proxy| {
            println!("{line}");
            if started.fetch_add(1, Ordering::SeqCst) + 1 == total {
                println!(
                    "Cloak cluster is up: {total} proxies, {partitions} partitions, each {summary}, \
                     in memory with its own ephemeral key."
                );
                println!("Try:");
                println!("  redis-cli -c -p {port} SET greeting hello");
                println!("  redis-cli -c -p {port} GET greeting");
                println!("  redis-cli -p {port} CLUSTER SLOTS");
                println!("  cloak cluster status --node 127.0.0.1:{port}");
                println!("Stop with Ctrl-C.");
            }
        };
        // Every partition lives in this process's memory: none can move.
        let role = ClusterRole {
            map: map.clone(),
            me,
            host: None,
            limits: store.limits,
            // One process: clients may connect to any proxy with -c.
            forward: false,
        };
        proxies_running.push(cloak_proxy::run_cluster(
            listeners,
            role,
            stores,
            options.clone(),
            ready,
            super::shutdown_signal(),
        ));
    }
    for result in futures::future::join_all(proxies_running).await {
        result?;
    }
    Ok(())
}

/// Every proxy of an even map hosts a partition (a proxy with none would serve nothing).
fn enough_partitions(proxies: usize, partitions: usize) -> anyhow::Result<()> {
    if proxies == 0 {
        bail!("a cluster needs at least one proxy");
    }
    if partitions < proxies {
        bail!(
            "--partitions ({partitions}) must be at least the number of proxies ({proxies}): \
             every proxy hosts a partition"
        );
    }
    Ok(())
}

/// Prints the cluster file of an even map.
fn init(args: ClusterInitArgs) -> anyhow::Result<()> {
    let proxies = args
        .proxy
        .iter()
        .map(|entry| {
            entry
                .split_once('=')
                .map(|(name, address)| (name.to_string(), address.to_string()))
                .with_context(|| format!("--proxy {entry:?} is not NAME=HOST:PORT"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    enough_partitions(proxies.len(), args.partitions)?;
    let map = ClusterMap::even(&proxies, args.partitions, &args.storage)?;
    println!(
        "# A Cloak cluster of {} partitions on {} proxies. Start each proxy with\n\
         #   cloak proxy --cluster THIS_FILE --node NAME --state-dir DIR [store flags]\n\
         # with the same store flags (--scheme, --capacity per partition, ...) on every proxy.",
        map.partitions().len(),
        map.proxies().len()
    );
    print!("{}", map.to_toml());
    Ok(())
}

/// How long `cloak cluster status` waits for a proxy.
const STATUS_TIMEOUT: Duration = Duration::from_secs(3);

/// One proxy of `CLUSTER NODES`: its address, flags and slots.
struct Node {
    address: String,
    /// As the proxy asked sees it: `master`, `master,fail?` (suspected), `master,fail`.
    flags: String,
    slots: Vec<String>,
}

/// Asks `args.node` for the cluster's proxies, then each proxy for its partitions and their
/// health. Fails if a proxy does not answer or a partition cannot serve (after listing
/// everything), so scripts can check health.
async fn status(args: &ClusterStatusArgs) -> anyhow::Result<()> {
    // `INFO` and `CLUSTER NODES` are a client's commands: status needs no admin.
    let login = partition_host::client_login(args.password.as_deref());
    let link = partition_host::peer_link(args.cluster_ca.as_deref(), login)?;
    let ask = async |address: &str, args: &[&str]| link.ask(address, args, STATUS_TIMEOUT).await;
    let text = ask(&args.node, &["CLUSTER", "NODES"])
        .await
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("{} did not answer CLUSTER NODES", args.node))?;
    let nodes: Vec<Node> = text
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let address = fields.get(1)?.split('@').next()?.to_string();
            Some(Node {
                address,
                flags: fields.get(2)?.to_string(),
                slots: fields.iter().skip(8).map(|s| s.to_string()).collect(),
            })
        })
        .collect();
    let (mut down, mut failing) = (0, 0);
    println!("{} proxies (from {}):", nodes.len(), args.node);
    for node in &nodes {
        let info = ask(&node.address, &["INFO", "partitions"]).await;
        match info {
            Ok(info) => {
                println!("{}  up  slots {}", node.address, node.slots.join(","));
                let health = |name: &str| {
                    let prefix = format!("{name}_health:");
                    info.lines()
                        .find_map(|l| l.strip_prefix(&prefix))
                        .unwrap_or("?")
                        .trim_end()
                        .to_string()
                };
                for line in info.lines() {
                    let Some((name, _)) = line.split_once(':') else {
                        continue;
                    };
                    if name.starts_with("partition_") && !name.ends_with("_health") {
                        let health = health(name);
                        if health != "ok" {
                            failing += 1;
                        }
                        println!("  {}, health {health}", describe_partition(line.trim_end()));
                    }
                }
            }
            Err(error) => {
                down += 1;
                let seen = node.flags.split(',').find(|f| f.starts_with("fail"));
                println!(
                    "{}  DOWN ({error}; {} sees it as {}): its slots {} fail until it is \
                     back; the other proxies serve theirs",
                    node.address,
                    args.node,
                    seen.unwrap_or("up"),
                    node.slots.join(",")
                );
            }
        }
    }
    if down > 0 {
        bail!("{down} of {} proxies do not answer", nodes.len());
    }
    if failing > 0 {
        bail!("{failing} partitions cannot serve (see their health)");
    }
    Ok(())
}

/// `partition_N:slots=…,keys=K,capacity=C,scheme=S,batches_sent=B,storage=URL` (see the proxy's
/// INFO) for people: the storage URL is last, since it may hold commas.
fn describe_partition(line: &str) -> String {
    let Some((name, fields)) = line.split_once(':') else {
        return line.to_string();
    };
    let fields: Vec<(&str, &str)> = fields
        .splitn(6, ',')
        .filter_map(|field| field.split_once('='))
        .collect();
    let get = |key: &str| {
        fields
            .iter()
            .find(|(k, _)| *k == key)
            .map_or("?", |(_, v)| *v)
    };
    let keys: f64 = get("keys").parse().unwrap_or(0.0);
    let capacity: f64 = get("capacity").parse().unwrap_or(0.0);
    let fill = if capacity > 0.0 {
        100.0 * keys / capacity
    } else {
        0.0
    };
    format!(
        "{} slots {}: {} of {} keys ({fill:.1}% full), {}, storage {}",
        name.replace('_', " "),
        get("slots"),
        get("keys"),
        get("capacity"),
        get("scheme"),
        get("storage"),
    )
}
