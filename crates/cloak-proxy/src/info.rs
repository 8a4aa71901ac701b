//! The text of `INFO`: Redis-style sections of `field:value` lines.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use crate::FrontEnd;
use crate::core::Snapshot;

/// Renders all sections, or just `section` (`server`, `clients`, `keyspace`, `scheme`,
/// `latency`, `storage`; `all`/`default`/`everything` for all).
pub fn render(front: &FrontEnd, s: &Snapshot, section: Option<&str>) -> String {
    let stats = &s.stats;
    let mut sections: Vec<(&str, Vec<(String, String)>)> = Vec::new();
    let kv = |k: &str, v: String| (k.to_string(), v);

    sections.push((
        "Server",
        vec![
            kv("cloak_version", env!("CARGO_PKG_VERSION").into()),
            kv("scheme", s.scheme.into()),
            kv("listen", front.listen.to_string()),
            kv("uptime_in_seconds", s.uptime.as_secs().to_string()),
        ],
    ));
    sections.push((
        "Clients",
        vec![
            kv(
                "connected_clients",
                front.connected.load(Ordering::Relaxed).to_string(),
            ),
            kv(
                "total_connections_received",
                front.next_client.load(Ordering::Relaxed).to_string(),
            ),
            kv(
                "rejected_connections",
                front.rejected.load(Ordering::Relaxed).to_string(),
            ),
            kv("commands_processed", s.engine.commands.to_string()),
        ],
    ));
    sections.push((
        "Keyspace",
        vec![
            kv("keys", s.engine.keys.to_string()),
            kv("capacity", s.engine.capacity.to_string()),
            kv(
                "db0",
                format!(
                    "keys={},expires={},avg_ttl=0",
                    s.engine.keys, s.engine.expires
                ),
            ),
        ],
    ));
    let lookups = stats.cache_hits + stats.cache_misses;
    let mut scheme: Vec<(String, String)> =
        s.params.iter().map(|(k, v)| kv(k, v.clone())).collect();
    scheme.extend([
        kv("batches_sent", stats.batches.to_string()),
        kv("real_slots", stats.real_accesses.to_string()),
        kv("dummy_slots", stats.dummy_accesses.to_string()),
        kv("batch_utilisation", format!("{:.4}", stats.utilisation())),
        kv("cache_hits", stats.cache_hits.to_string()),
        kv("cache_misses", stats.cache_misses.to_string()),
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
        kv("integrity_failures", stats.integrity_failures.to_string()),
        kv("storage_failures", stats.storage_failures.to_string()),
        kv("missed_batches", stats.missed_batches.to_string()),
        kv("late_write_backs", stats.late_write_backs.to_string()),
    ]);
    sections.push(("Scheme", scheme));
    let l = &s.latency;
    sections.push((
        "Latency",
        vec![
            kv("latency_samples", l.count.to_string()),
            kv("latency_p50_us", l.p50.to_string()),
            kv("latency_p95_us", l.p95.to_string()),
            kv("latency_p99_us", l.p99.to_string()),
            kv("latency_p999_us", l.p999.to_string()),
            kv("latency_max_us", l.max.to_string()),
        ],
    ));
    sections.push((
        "Storage",
        vec![
            kv("storage", s.storage.clone()),
            kv("durability", s.durability.into()),
            kv("storage_requests", s.io.requests.to_string()),
            kv("storage_request_failures", s.io.failures.to_string()),
            kv("storage_bytes_sent", s.io.bytes_sent.to_string()),
            kv("storage_bytes_received", s.io.bytes_received.to_string()),
        ],
    ));

    let wanted = section.filter(|s| !matches!(*s, "all" | "default" | "everything"));
    let mut out = String::new();
    for (name, fields) in sections {
        if wanted.is_some_and(|w| !w.eq_ignore_ascii_case(name)) {
            continue;
        }
        let _ = writeln!(out, "# {name}\r");
        for (k, v) in fields {
            let _ = writeln!(out, "{k}:{v}\r");
        }
        out.push_str("\r\n");
    }
    out
}
