//! The text of `INFO`: Redis-style sections of `field:value` lines.
//!
//! The sections and fields Redis clients and tools read come first, in Redis's names and order
//! (`redis_version`, `redis_mode`, `role`, `loading`, `connected_clients`, `used_memory`, the
//! keyspace lines…); Cloak's own sections (`Scheme`, `Latency`, `Storage`) follow. Every value
//! is the proxy's own, from counters it keeps: nothing here reaches the storage server.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use crate::FrontEnd;
use crate::core::Snapshot;
use crate::session::REDIS_VERSION;

/// Renders the sections named (any case; none, `default`, `all` or `everything` for all).
/// `s` is the store's snapshot; a cluster proxy passes its first partition's there and every
/// hosted partition's in `partitions`, which the keyspace adds up, a `Partitions` section lists
/// one by one, and the `Scheme`, `Latency` and `Storage` sections give each partition's fields
/// prefixed `partition_N_`.
pub fn render(
    front: &FrontEnd,
    s: &Snapshot,
    wanted: &[String],
    partitions: &[(usize, Snapshot)],
) -> String {
    let cluster = front.cores.cluster().is_some();
    // Every store this proxy answers for: the one, or in a cluster each hosted partition.
    let stores: Vec<&Snapshot> = match partitions.is_empty() {
        true => vec![s],
        false => partitions.iter().map(|(_, p)| p).collect(),
    };
    let mut sections: Vec<(&str, Vec<(String, String)>)> = Vec::new();
    let kv = |k: &str, v: String| (k.to_string(), v);

    let uptime = s.uptime.as_secs();
    sections.push((
        "Server",
        vec![
            kv("redis_version", REDIS_VERSION.into()),
            kv(
                "redis_mode",
                if cluster { "cluster" } else { "standalone" }.into(),
            ),
            kv(
                "os",
                format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
            ),
            kv("arch_bits", usize::BITS.to_string()),
            kv("process_id", std::process::id().to_string()),
            kv("tcp_port", front.listen.port().to_string()),
            kv("uptime_in_seconds", uptime.to_string()),
            kv("uptime_in_days", (uptime / 86_400).to_string()),
            kv("cloak_version", env!("CARGO_PKG_VERSION").into()),
            kv("scheme", s.scheme.into()),
            kv("listen", front.listen.to_string()),
        ],
    ));
    sections.push((
        "Clients",
        vec![
            kv("connected_clients", front.clients.connected().to_string()),
            kv("maxclients", front.max_clients.to_string()),
            // Request bytes read and not yet answered (see `budget`).
            kv("pending_request_bytes", front.pending.used().to_string()),
        ],
    ));
    let mut memory = Vec::new();
    // The allocator is the binary's choice, so the heap is not visible here; the resident set
    // is what the process really holds, and stands for both.
    if let Some(rss) = resident_bytes() {
        for field in ["used_memory", "used_memory_rss"] {
            memory.push(kv(field, rss.to_string()));
            memory.push(kv(&format!("{field}_human"), human(rss)));
        }
    }
    memory.push(kv("maxmemory_policy", "noeviction".into()));
    sections.push(("Memory", memory));
    // The proxy listens once its recovery scan is done, and the scheme's initial fill runs
    // after that: Redis's `loading` fields (over elements rather than bytes) say how far it got.
    // Clients are served meanwhile rather than getting Redis's `-LOADING` error (reads that
    // need storage wait for the fill, except where the scheme answers them from the recovered
    // records).
    // A cluster proxy is loading while any of its partitions fills; the counts add up.
    let filling = stores
        .iter()
        .filter_map(|store| store.stats.filling)
        .reduce(|(written, of), (w, o)| (written + w, of + o));
    let mut persistence = vec![kv("loading", u8::from(filling.is_some()).to_string())];
    if let Some((written, of)) = filling {
        let percent = 100.0 * written as f64 / of.max(1) as f64;
        persistence.push(kv("loading_loaded_perc", format!("{percent:.2}")));
        persistence.push(kv("loading_loaded_elements", written.to_string()));
        persistence.push(kv("loading_total_elements", of.to_string()));
    }
    sections.push(("Persistence", persistence));
    sections.push((
        "Stats",
        vec![
            kv(
                "total_connections_received",
                front.next_client.load(Ordering::Relaxed).to_string(),
            ),
            kv(
                "total_commands_processed",
                front.commands.load(Ordering::Relaxed).to_string(),
            ),
            kv(
                "rejected_connections",
                front.rejected.load(Ordering::Relaxed).to_string(),
            ),
        ],
    ));
    sections.push((
        "Replication",
        vec![
            kv("role", "master".into()),
            kv("connected_slaves", "0".into()),
        ],
    ));
    // A cluster proxy answers for all its partitions' keys, as a Redis node for its slots.
    let engines: Vec<&cloak_core::EngineStats> = stores.iter().map(|p| &p.engine).collect();
    let per_db = |field: fn(&cloak_core::EngineStats) -> &Vec<u64>| -> Vec<u64> {
        let mut total = vec![0; usize::from(cloak_core::database::DATABASES)];
        for engine in &engines {
            for (sum, n) in total.iter_mut().zip(field(engine)) {
                *sum += n;
            }
        }
        total
    };
    let (keys_per_db, expires_per_db) = (per_db(|e| &e.keys_per_db), per_db(|e| &e.expires_per_db));
    sections.push((
        "Cluster",
        vec![kv("cluster_enabled", u8::from(cluster).to_string())],
    ));
    // Redis lists only databases that hold keys.
    let keyspace = keys_per_db
        .iter()
        .zip(expires_per_db.iter())
        .enumerate()
        .filter(|(_, (keys, _))| **keys > 0)
        .map(|(db, (keys, expires))| {
            kv(
                &format!("db{db}"),
                format!("keys={keys},expires={expires},avg_ttl=0"),
            )
        })
        .collect();
    sections.push(("Keyspace", keyspace));
    sections.push(("Scheme", per_store(s, partitions, scheme_fields)));
    if let Some(hosted) = front.cores.cluster() {
        // The storage URL goes last: it may hold commas (`cloak cluster status` reads this).
        let lines = partitions
            .iter()
            .flat_map(|(index, p)| {
                let slots: Vec<String> = hosted.map.partitions()[*index]
                    .slots
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                let health = match hosted.health().partition_problem(*index) {
                    None => "ok".to_string(),
                    Some((_, why)) => format!("fail {why}"),
                };
                [
                    kv(
                        &format!("partition_{index}"),
                        format!(
                            "slots={},keys={},capacity={},scheme={},batches_sent={},storage={}",
                            slots.join(" "),
                            p.engine.keys,
                            p.engine.capacity,
                            p.scheme,
                            p.stats.batches,
                            p.storage
                        ),
                    ),
                    kv(&format!("partition_{index}_health"), health),
                ]
            })
            .collect();
        sections.push(("Partitions", lines));
    }
    sections.push(("Latency", per_store(s, partitions, latency_fields)));
    sections.push(("Storage", per_store(s, partitions, storage_fields)));

    let all = wanted.is_empty()
        || wanted
            .iter()
            .any(|w| matches!(w.as_str(), "all" | "default" | "everything"));
    let mut out = String::new();
    for (name, fields) in sections {
        if !all && !wanted.iter().any(|w| w.eq_ignore_ascii_case(name)) {
            continue;
        }
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        let _ = writeln!(out, "# {name}\r");
        for (k, v) in fields {
            let _ = writeln!(out, "{k}:{v}\r");
        }
    }
    out
}

type Fields = Vec<(String, String)>;

/// A section's fields for one store, or in a cluster for each hosted partition (prefixed
/// `partition_N_`, as the `Partitions` section names them).
fn per_store(
    s: &Snapshot,
    partitions: &[(usize, Snapshot)],
    fields: fn(&Snapshot) -> Fields,
) -> Fields {
    if partitions.is_empty() {
        return fields(s);
    }
    partitions
        .iter()
        .flat_map(|(index, p)| {
            fields(p)
                .into_iter()
                .map(move |(k, v)| (format!("partition_{index}_{k}"), v))
        })
        .collect()
}

fn scheme_fields(s: &Snapshot) -> Fields {
    let stats = &s.stats;
    let kv = |k: &str, v: String| (k.to_string(), v);
    let lookups = stats.cache_hits + stats.cache_misses;
    let mut scheme: Fields = vec![
        kv("keys", s.engine.keys.to_string()),
        kv("capacity", s.engine.capacity.to_string()),
        kv("data_commands_processed", s.engine.commands.to_string()),
    ];
    scheme.extend(s.params.iter().map(|(k, v)| kv(k, v.clone())));
    scheme.extend([
        kv("batches_sent", stats.batches.to_string()),
        kv("real_slots", stats.real_accesses.to_string()),
        kv("dummy_slots", stats.dummy_accesses.to_string()),
        kv("batch_utilisation", format!("{:.4}", stats.utilisation())),
        kv("cache_hits", stats.cache_hits.to_string()),
        kv("cache_misses", stats.cache_misses.to_string()),
        kv("cache_misses_joined", stats.joined_reads.to_string()),
        kv("cache_misses_recovered", stats.recovered_reads.to_string()),
        kv(
            "cache_hit_rate",
            format!(
                "{:.4}",
                if lookups == 0 {
                    0.0
                } else {
                    stats.cache_hits as f64 / lookups as f64
                }
            ),
        ),
        kv("queue_depth", stats.queued.to_string()),
        // Acknowledged writes (journaled) that storage does not hold yet.
        kv("unwritten_writes", stats.unwritten.to_string()),
        kv("integrity_failures", stats.integrity_failures.to_string()),
        kv("storage_failures", stats.storage_failures.to_string()),
        kv("missed_batches", stats.missed_batches.to_string()),
        kv("late_write_backs", stats.late_write_backs.to_string()),
        // Whether the threads that send timed requests run at a real-time priority.
        kv("timing_priority", crate::priority::granted().into()),
    ]);
    scheme
}

fn latency_fields(s: &Snapshot) -> Fields {
    let kv = |k: &str, v: String| (k.to_string(), v);
    let l = &s.latency;
    vec![
        kv("latency_samples", l.count.to_string()),
        kv("latency_p50_us", l.p50.to_string()),
        kv("latency_p95_us", l.p95.to_string()),
        kv("latency_p99_us", l.p99.to_string()),
        kv("latency_p999_us", l.p999.to_string()),
        kv("latency_max_us", l.max.to_string()),
    ]
}

fn storage_fields(s: &Snapshot) -> Fields {
    let kv = |k: &str, v: String| (k.to_string(), v);
    vec![
        kv("storage", s.storage.clone()),
        kv("durability", s.durability.into()),
        kv("storage_requests", s.io.requests.to_string()),
        kv("storage_request_failures", s.io.failures.to_string()),
        kv("storage_bytes_sent", s.io.bytes_sent.to_string()),
        kv("storage_bytes_received", s.io.bytes_received.to_string()),
    ]
}

/// The process's resident set size, from `/proc` where there is one.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Redis's `_human` form: `980B`, `1.50M`.
fn human(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    const UNITS: [&str; 4] = ["K", "M", "G", "T"];
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2}{}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn sizes_read_like_redis() {
        assert_eq!(human(980), "980B");
        assert_eq!(human(1536), "1.50K");
        assert_eq!(human(12 << 20), "12.00M");
        assert_eq!(human(3 << 40), "3.00T");
    }
}
