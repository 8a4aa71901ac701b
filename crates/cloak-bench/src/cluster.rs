//! One scheme as a Cloak cluster on one workload, through real processes: `proxies` processes
//! of `cloak proxy --cluster FILE --node NAME` host `partitions` partitions between them, each
//! partition's elements in a storage server of its own, all children of the bench on loopback.
//!
//! The partitions (and so their storage servers) stay the same across a sweep of the number of
//! proxies, so only the number of proxy processes changes. The load is cluster-aware: the bench
//! learns the slot map from `CLUSTER NODES`, as a cluster client does, and each client sends
//! every request straight to the proxy serving its key's hash slot (see [`Route`]). CPU time
//! comes from `/proc` for every proxy and storage process over the measured window, and each
//! proxy's `INFO` says how many requests its partitions answered.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use cloak_cluster::{ClusterMap, PartitionSpec, SLOTS, key_slot};

use crate::client::{Connection, Reply, Target};
use crate::cpu;
use crate::drive::{Load, Route, drive};
use crate::process::{Process, free_port};
use crate::progress::Progress;
use crate::report::{ClusterRun, Measurement, Mode, Share, Subject, Timing};
use crate::run::{
    Contender, RunError, Setup, bar, counters, info, info_sum, key_file, start_error, warm_up,
};
use crate::startup;
use crate::workload::{Request, key_name};

/// How many processes serve how many partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub proxies: usize,
    pub partitions: usize,
}

/// Runs `setup`'s scheme as a cluster of `shape` with `load`: sends `warmup` unmeasured, then
/// measures `requests`.
pub async fn measure(
    setup: &Setup,
    shape: Shape,
    warmup: Arc<Vec<Request>>,
    requests: Arc<Vec<Request>>,
    load: Load,
) -> Result<Measurement, RunError> {
    let Contender::Scheme(scheme) = setup.contender else {
        return Err(RunError::Cluster(
            "the redis baseline is one redis-server, not a Cloak cluster".into(),
        ));
    };
    if shape.proxies == 0 || shape.partitions < shape.proxies {
        return Err(RunError::Cluster(format!(
            "{} partitions cannot give each of {} proxies one",
            shape.partitions, shape.proxies
        )));
    }
    let label = format!("{scheme} on {} proxies", shape.proxies);
    let value = Bytes::from(vec![b'v'; setup.value_size]);
    let mut storages = Vec::with_capacity(shape.partitions);
    for _ in 0..shape.partitions {
        storages.push(setup.start_storage().await?);
    }
    let map = cluster_map(setup, shape, &storages)?;
    let keys_of = keys_by_partition(&map, setup.keys);
    // Every partition gets the same settings, so its capacity is that of the fullest.
    let capacity = keys_of.iter().map(Vec::len).max().unwrap_or(0).max(1) as u64;

    let (dir, key_file, master) = key_file()?;
    let cluster_file = dir.path().join("cluster.toml");
    std::fs::write(&cluster_file, map.to_toml())
        .map_err(|e| start_error("the cluster file", &e))?;
    for (partition, keys) in keys_of.iter().enumerate() {
        let loading = bar(
            keys.len() as u64,
            format!("{label}: preloading partition {partition}"),
        );
        // A cluster proxy given the key file derives each partition's key from it.
        let key = master.for_partition(partition as u64);
        setup
            .preload(
                scheme,
                storages[partition].addr,
                &key,
                keys.iter().copied(),
                &value,
                &loading,
            )
            .await?;
    }

    let mut proxies = Vec::with_capacity(shape.proxies);
    for (index, proxy) in map.proxies().iter().enumerate() {
        let mut args: Vec<String> = [
            "proxy",
            "--cluster",
            &cluster_file.display().to_string(),
            "--node",
            &proxy.name,
        ]
        .map(String::from)
        .to_vec();
        args.extend(setup.store_flags(scheme, &key_file, capacity));
        let hosted: u64 = map
            .hosted_by(index)
            .map(|p| keys_of[p.index].len() as u64)
            .sum();
        let progress = Progress::recovery(&format!("{label}: {}", proxy.name), hosted);
        let started = Process::cloak(
            &setup.cloak,
            &args,
            "cloak proxy (cluster)",
            progress.clone(),
        )
        .await;
        progress.finish();
        proxies.push(started?);
    }
    // Each proxy answers a read of each of its partitions' keys, and its fills are done.
    for (index, proxy) in proxies.iter().enumerate() {
        for partition in map.hosted_by(index) {
            if let Some(&key) = keys_of[partition.index].first() {
                startup::first_read(proxy.addr.into(), key_name(key).as_bytes()).await?;
            }
        }
        startup::filled(proxy.addr.into()).await?;
    }
    let route = slot_map(proxies[0].addr).await?;

    warm_up(route.clone(), warmup, &value, load, setup, &label).await?;
    let before = infos(&proxies).await?;
    let windows = |processes: &[Process]| -> Vec<Option<cpu::Window>> {
        processes
            .iter()
            .map(|p| p.pid().and_then(cpu::Window::start))
            .collect()
    };
    let (proxy_cpu, storage_cpu) = (windows(&proxies), windows(&storages));
    // The bench's own load generator, on the same cores: part of what a request costs here.
    let client_cpu = cpu::Window::start(std::process::id());
    let running = bar(requests.len() as u64, format!("{label}: running"));
    let started = Instant::now();
    let answered = drive(route, requests, &value, load, setup.reply_timeout, &running).await?;
    let seconds = started.elapsed().as_secs_f64();
    let used = |windows: Vec<Option<cpu::Window>>| -> Vec<Option<f64>> {
        windows
            .into_iter()
            .map(|w| w.and_then(|w| w.elapsed()))
            .collect()
    };
    let (proxy_cpu, storage_cpu) = (used(proxy_cpu), used(storage_cpu));
    let client_cpu = client_cpu.and_then(|w| w.elapsed());
    running.finish_and_clear();
    let after = infos(&proxies).await?;

    let ops = answered.latency.len();
    let mut shares = Vec::with_capacity(proxies.len() + storages.len() + 1);
    for (index, proxy) in map.proxies().iter().enumerate() {
        let served = info_sum(&after[index], "data_commands_processed")
            .saturating_sub(info_sum(&before[index], "data_commands_processed"));
        shares.push(Share::new(
            proxy.name.clone(),
            Some(served),
            proxy_cpu[index],
            ops,
        ));
    }
    for (partition, cpu) in storage_cpu.iter().enumerate() {
        shares.push(Share::new(format!("storage-{partition}"), None, *cpu, ops));
    }
    shares.push(Share::new(
        "bench-client".into(),
        Some(ops),
        client_cpu,
        ops,
    ));
    let total = |cpu: &[Option<f64>]| cpu.iter().copied().sum::<Option<f64>>();
    let (proxies_total, storage_total) = (total(&proxy_cpu), total(&storage_cpu));

    // Partitions are numbered across the cluster, so their INFO fields never collide.
    let merged = |infos: Vec<BTreeMap<String, String>>| -> BTreeMap<String, String> {
        infos.into_iter().flatten().collect()
    };
    let (before, after) = (counters(&merged(before)), counters(&merged(after)));
    let rss = proxies.iter().map(Process::rss_bytes).sum::<Option<u64>>();
    let subject = Subject {
        scheme: scheme.to_string(),
        mode: Mode::Sockets,
        workload: setup.workload.clone(),
        keys: setup.keys,
    };
    let timing = Timing {
        ops,
        errors: answered.errors,
        seconds,
    };
    let mut measurement =
        Measurement::new(subject, timing, &answered.latency, after.since(before), rss);
    measurement.backend = Some(setup.backend.as_str().to_string());
    measurement.set_cpu(proxies_total, storage_total);
    measurement.cluster = Some(ClusterRun {
        proxies: shape.proxies,
        partitions: shape.partitions,
        capacity_per_partition: capacity,
        redirected: answered.redirected,
        cpu_seconds_per_op: proxies_total
            .zip(storage_total)
            .filter(|_| ops > 0)
            .map(|(p, s)| (p + s) / ops as f64),
        scaling: None,
        shares,
    });
    Ok(measurement)
}

/// `cloak cluster up`'s even map (`proxy-1`… on free loopback ports), each partition kept in
/// its own storage server.
fn cluster_map(setup: &Setup, shape: Shape, storages: &[Process]) -> Result<ClusterMap, RunError> {
    let proxies = (0..shape.proxies)
        .map(|i| {
            let port = free_port().map_err(|e| start_error("a free port", &e))?;
            Ok((format!("proxy-{}", i + 1), format!("127.0.0.1:{port}")))
        })
        .collect::<Result<Vec<_>, RunError>>()?;
    let invalid = |e: cloak_cluster::MapError| RunError::Cluster(e.to_string());
    let even = ClusterMap::even(&proxies, shape.partitions, "memory").map_err(invalid)?;
    let specs = even
        .partitions()
        .iter()
        .zip(storages)
        .map(|(partition, storage)| PartitionSpec {
            slots: partition.slots.clone(),
            proxy: even.proxies()[partition.proxy].name.clone(),
            storage: setup.backend.url(storage.addr, false),
        })
        .collect();
    ClusterMap::new(&proxies, specs).map_err(invalid)
}

/// The key numbers `0..keys` that each partition of `map` owns, by their names' hash slots.
pub fn keys_by_partition(map: &ClusterMap, keys: u64) -> Vec<Vec<u64>> {
    let mut owned = vec![Vec::new(); map.partitions().len()];
    for key in 0..keys {
        let slot = key_slot(key_name(key).as_bytes());
        owned[map.partition_of(slot).index].push(key);
    }
    owned
}

/// Every proxy's `INFO`, in order.
async fn infos(proxies: &[Process]) -> Result<Vec<BTreeMap<String, String>>, RunError> {
    let mut all = Vec::with_capacity(proxies.len());
    for proxy in proxies {
        all.push(info(proxy.addr.into(), "all").await?);
    }
    Ok(all)
}

/// The slot map as a cluster-aware client learns it: `CLUSTER NODES` from one node.
pub async fn slot_map(seed: SocketAddr) -> Result<Route, RunError> {
    let mut connection = Connection::connect(seed).await?;
    let Reply::Value(Some(text)) = connection.call(&[b"CLUSTER", b"NODES"]).await? else {
        return Err(RunError::Refused("CLUSTER NODES without a body".into()));
    };
    parse_nodes(&String::from_utf8_lossy(&text))
}

/// A route from `CLUSTER NODES` text: each line's `host:port@bus` (field 2) serves the slots
/// and ranges from field 9 on (`[…]` entries, slots being migrated, are left to their owner).
fn parse_nodes(text: &str) -> Result<Route, RunError> {
    let bad = |line: &str| RunError::Cluster(format!("CLUSTER NODES line {line:?}"));
    let mut nodes = Vec::new();
    let mut owner = vec![usize::MAX; usize::from(SLOTS)];
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let addr: SocketAddr = fields
            .get(1)
            .and_then(|a| a.split('@').next())
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| bad(line))?;
        let node = nodes.len();
        nodes.push(Target::from(addr));
        for range in fields.iter().skip(8).filter(|r| !r.starts_with('[')) {
            let (first, last) = range.split_once('-').unwrap_or((range, range));
            let (Ok(first), Ok(last)) = (first.parse::<usize>(), last.parse::<usize>()) else {
                return Err(bad(line));
            };
            for slot in owner.get_mut(first..=last).ok_or_else(|| bad(line))? {
                *slot = node;
            }
        }
    }
    Route::by_slot(nodes, owner).map_err(|e| RunError::Cluster(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_map_of_cluster_nodes_routes_every_slot_to_its_node() {
        let text = "\
            aaa 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460 [5461->-bbb]\r\n\
            bbb 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922\r\n\
            ccc 127.0.0.1:7003@17003 master,fail? - 0 0 3 connected 10923-16382 16383\r\n";
        let route = parse_nodes(text).unwrap();
        let ports: Vec<u16> = route.nodes().iter().map(|t| t.addr.port()).collect();
        assert_eq!(ports, [7001, 7002, 7003]);
        let mut reached = [false; 3];
        for key in 0..200 {
            let name = key_name(key);
            let expected = match key_slot(name.as_bytes()) {
                0..=5460 => 0,
                5461..=10922 => 1,
                _ => 2,
            };
            assert_eq!(route.node_of(name.as_bytes()), expected, "{name}");
            reached[expected] = true;
        }
        assert_eq!(reached, [true; 3]);
        assert_eq!(route.node_of(b"{user1}.x"), route.node_of(b"user1"));

        let gap = text.replace(" 16383\r\n", "\r\n");
        assert!(
            matches!(parse_nodes(&gap), Err(RunError::Cluster(e)) if e.contains("slot 16383")),
            "a slot no node serves is an error"
        );
        assert!(parse_nodes("aaa nowhere master - 0 0 1 connected 0-16383").is_err());
        assert!(parse_nodes("aaa 127.0.0.1:1@2 master - 0 0 1 connected 0-16384").is_err());
    }

    #[test]
    fn every_key_belongs_to_the_partition_of_its_slot() {
        let proxies = [("a".to_string(), "127.0.0.1:1".to_string())];
        let map = ClusterMap::even(&proxies, 4, "memory").unwrap();
        let owned = keys_by_partition(&map, 1000);
        assert_eq!(owned.iter().map(Vec::len).sum::<usize>(), 1000);
        for (partition, keys) in owned.iter().enumerate() {
            assert!(!keys.is_empty(), "1000 keys reach all 4 partitions");
            for &key in keys {
                let slot = key_slot(key_name(key).as_bytes());
                assert_eq!(map.partition_of(slot).index, partition);
            }
        }
    }
}
