//! A cluster's partitions in this process: the keys split by hash slot over `partitions`
//! partitions as `cloak cluster up` splits them, each partition its own scheme and simulated
//! storage (see [`crate::simulate`]) fed the requests for its keys, in workload order.
//!
//! The schemes are sans-io, so this is what a proxy's CPU spends on partitions, without sockets,
//! a storage server or a machine's cores in the way: the partitions run one after another on
//! this thread, and each one's CPU time (this thread's clock, to the nanosecond) over the
//! requests it answered is its cost per operation. Cost per operation that stays flat as the
//! partitions grow in number says the work splits without overhead, so proxies on more cores
//! add throughput in proportion. Throughput and latency are in virtual time, the partitions
//! running side by side.

use cloak_cluster::{ClusterMap, MapError};
use cloak_schemes::BuildError;

use crate::cluster::keys_by_partition;
use crate::cpu;
use crate::drive::{Load, histogram};
use crate::report::{ClusterRun, Counters, Measurement, Mode, Share, Subject, Timing};
use crate::simulate::{Simulation, scheme_info};
use crate::workload::Request;

#[derive(Debug, thiserror::Error)]
pub enum PartitionedError {
    #[error(transparent)]
    Map(#[from] MapError),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error("this platform has no per-thread CPU clock to measure the partitions with")]
    NoClock,
}

/// Simulates `simulation`'s store split into `partitions` partitions: sends each its share of
/// `warmup` unmeasured, then measures its share of `requests`. Each partition gets
/// `load.clients / partitions` clients (at least one), so as many requests are in flight in
/// all as in a single store's run.
pub fn measure(
    simulation: &Simulation,
    partitions: usize,
    warmup: &[Request],
    requests: &[Request],
    load: Load,
) -> Result<Measurement, PartitionedError> {
    // Only the slots matter here; the proxy is a placeholder.
    let proxy = [("simulated".to_string(), "127.0.0.1:1".to_string())];
    let map = ClusterMap::even(&proxy, partitions, "memory")?;
    let keys_of = keys_by_partition(&map, simulation.keys);
    // Key number → (partition, its number within the partition).
    let mut local = vec![(0, 0); simulation.keys as usize];
    for (partition, keys) in keys_of.iter().enumerate() {
        for (number, &key) in keys.iter().enumerate() {
            local[key as usize] = (partition, number as u64);
        }
    }
    let split = |requests: &[Request]| -> Vec<Vec<Request>> {
        let mut shares = vec![Vec::new(); partitions];
        for request in requests {
            let (partition, key) = local[request.key as usize];
            shares[partition].push(Request { key, ..*request });
        }
        shares
    };
    let (warmups, shares) = (split(warmup), split(requests));
    let load = Load {
        clients: (load.clients / partitions).max(1),
        ..load
    };
    let mut latency = histogram();
    let (mut errors, mut seconds) = (0, 0.0f64);
    let mut counters = Counters::default();
    let mut cpu_shares = Vec::with_capacity(partitions);
    let mut info = Default::default();
    for (partition, keys) in keys_of.iter().enumerate() {
        if keys.is_empty() {
            // No keys hash here, so no requests either: nothing to measure.
            cpu_shares.push((Some(0), Some(0.0)));
            continue;
        }
        let part = Simulation {
            keys: keys.len() as u64,
            seed: simulation.seed + partition as u64,
            ..simulation.clone()
        };
        let mut sim = part.start()?;
        part.replay(&mut sim, &warmups[partition], load);
        if partition == 0 {
            info = scheme_info(&sim);
        }
        let before = cpu::this_thread_seconds().ok_or(PartitionedError::NoClock)?;
        let replayed = part.replay(&mut sim, &shares[partition], load);
        let used = cpu::this_thread_seconds().ok_or(PartitionedError::NoClock)? - before;
        cpu_shares.push((Some(replayed.latency.len()), Some(used)));
        latency.add(&replayed.latency).expect("same bounds");
        errors += replayed.errors;
        // Side by side in virtual time: the run lasts as long as its slowest partition.
        seconds = seconds.max(replayed.seconds);
        counters = counters.plus(replayed.counters);
    }
    let ops = latency.len();
    let total_cpu: f64 = cpu_shares.iter().filter_map(|(_, cpu)| *cpu).sum();
    let shares = cpu_shares
        .into_iter()
        .enumerate()
        .map(|(partition, (answered, cpu))| {
            Share::new(format!("partition-{partition}"), answered, cpu, ops)
        })
        .collect();
    let subject = Subject {
        scheme: simulation.scheme.to_string(),
        mode: Mode::InProcess,
        workload: simulation.workload.clone(),
        keys: simulation.keys,
    };
    let timing = Timing {
        ops,
        errors,
        seconds,
    };
    let mut measurement = Measurement::new(subject, timing, &latency, counters, None);
    measurement.scheme_info = info;
    measurement.cluster = Some(ClusterRun {
        proxies: 0,
        partitions,
        capacity_per_partition: keys_of.iter().map(Vec::len).max().unwrap_or(0) as u64,
        redirected: 0,
        cpu_seconds_per_op: (ops > 0).then(|| total_cpu / ops as f64),
        scaling: None,
        shares,
    });
    Ok(measurement)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use cloak_cluster::key_slot;
    use cloak_schemes::{SchemeName, SchemeOptions};

    use super::*;
    use crate::workload::{Distribution, Mix, Ycsb, key_name, take};

    #[test]
    fn each_partition_answers_the_requests_for_its_keys() {
        let keys = 400;
        let requests = take(&mut Ycsb::new(Mix::A, Distribution::Uniform, keys, 1), 3000).unwrap();
        let simulation = Simulation {
            scheme: SchemeName::Unsafe,
            keys,
            value_size: 16,
            options: SchemeOptions::default(),
            storage_delay: Duration::from_micros(200),
            workload: "ycsb-a".into(),
            seed: 1,
        };
        let load = Load {
            clients: 8,
            pipeline: 4,
            rate: None,
        };
        let measured = measure(&simulation, 4, &requests[..500], &requests[500..], load).unwrap();
        assert_eq!((measured.ops, measured.errors), (2500, 0));
        let cluster = measured.cluster.unwrap();
        assert_eq!(cluster.partitions, 4);
        let proxy = [("p".to_string(), "127.0.0.1:1".to_string())];
        let map = ClusterMap::even(&proxy, 4, "memory").unwrap();
        for (partition, share) in cluster.shares.iter().enumerate() {
            let expected = requests[500..]
                .iter()
                .filter(|r| {
                    map.partition_of(key_slot(key_name(r.key).as_bytes())).index == partition
                })
                .count() as u64;
            assert!(expected > 0);
            assert_eq!(share.ops, Some(expected), "{}", share.name);
            assert!(share.cpu_seconds.is_some_and(|s| s > 0.0), "{}", share.name);
        }
        assert!(cluster.cpu_seconds_per_op.is_some_and(|c| c > 0.0));
    }
}
