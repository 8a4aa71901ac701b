//! `GET /metrics` in Prometheus' text format: the counters `INFO` shows, for scraping. A cluster
//! proxy gives each metric once per partition it hosts at the time of the scrape, labelled
//! `partition="N"`: partitions move between proxies, and a proxy may host none for a while.
//!
//! A deliberately tiny HTTP responder (one request per connection, bounded reads): the endpoint
//! serves one page, and a full HTTP stack is not worth its weight here.

use std::fmt::Write;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::core::{CoreStopped, Snapshot, StatsHandle};

/// Where the figures come from, asked at every scrape: the store's core (no partition), or each
/// partition hosted then.
pub type Sources = Arc<dyn Fn() -> Vec<(Option<usize>, StatsHandle)> + Send + Sync>;

/// Serves `/metrics` on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, stats: Sources, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(answer(stream, stats.clone()));
                }
            }
            () = &mut shutdown => return,
        }
    }
}

async fn answer(mut stream: TcpStream, stats: Sources) {
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    // Read the request head, at most 8 KiB, for at most 5 seconds.
    let head = tokio::time::timeout(Duration::from_secs(5), async {
        while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 8192 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        true
    })
    .await;
    if !matches!(head, Ok(true)) {
        return;
    }
    let line = String::from_utf8_lossy(request.split(|&b| b == b'\r').next().unwrap_or_default());
    let (status, body) = match line.split_whitespace().collect::<Vec<_>>()[..] {
        ["GET", "/metrics", _] => match snapshots(&stats).await {
            Ok(snapshots) => ("200 OK", render(&snapshots)),
            Err(stopped) => ("503 Service Unavailable", format!("{stopped}\n")),
        },
        _ => (
            "404 Not Found",
            "only GET /metrics is served here\n".to_string(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
}

/// Every source's snapshot.
async fn snapshots(stats: &Sources) -> Result<Vec<(Option<usize>, Snapshot)>, CoreStopped> {
    let sources = stats();
    let mut snapshots = Vec::with_capacity(sources.len());
    for (partition, handle) in sources {
        match handle.snapshot().await {
            Ok(snapshot) => snapshots.push((partition, snapshot)),
            // Moved to another proxy since the listing: its figures are that proxy's now.
            Err(_) if partition.is_some() => {}
            Err(stopped) => return Err(stopped),
        }
    }
    Ok(snapshots)
}

/// One counter or gauge: its name, kind, help and value in a snapshot.
type Metric = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Snapshot) -> String,
);

const METRICS: &[Metric] = &[
    ("commands_total", "counter", "Commands answered.", |s| {
        s.engine.commands.to_string()
    }),
    ("keys", "gauge", "Keys stored.", |s| {
        s.engine.keys.to_string()
    }),
    ("capacity_keys", "gauge", "Keys the store can hold.", |s| {
        s.engine.capacity.to_string()
    }),
    (
        "batches_total",
        "counter",
        "Storage round trips the scheme made.",
        |s| s.stats.batches.to_string(),
    ),
    (
        "real_slots_total",
        "counter",
        "Storage accesses that served clients.",
        |s| s.stats.real_accesses.to_string(),
    ),
    (
        "dummy_slots_total",
        "counter",
        "Storage accesses made only to hide the real ones.",
        |s| s.stats.dummy_accesses.to_string(),
    ),
    (
        "batch_utilisation_ratio",
        "gauge",
        "Real accesses over all accesses since start.",
        |s| format!("{:.6}", s.stats.utilisation()),
    ),
    (
        "cache_hits_total",
        "counter",
        "Reads answered at the proxy.",
        |s| s.stats.cache_hits.to_string(),
    ),
    (
        "cache_misses_total",
        "counter",
        "Reads that needed storage.",
        |s| s.stats.cache_misses.to_string(),
    ),
    (
        "joined_reads_total",
        "counter",
        "Of the cache misses, reads that joined a read of the same key waiting for storage (no access of their own).",
        |s| s.stats.joined_reads.to_string(),
    ),
    (
        "recovered_reads_total",
        "counter",
        "Of the cache misses, reads answered during a restart's fill from the recovered records on local disk (no storage access).",
        |s| s.stats.recovered_reads.to_string(),
    ),
    (
        "queue_depth",
        "gauge",
        "Client ops waiting for storage.",
        |s| s.stats.queued.to_string(),
    ),
    (
        "unwritten_writes",
        "gauge",
        "Acknowledged writes not yet in storage.",
        |s| s.stats.unwritten.to_string(),
    ),
    (
        "integrity_failures_total",
        "counter",
        "Elements that failed authentication.",
        |s| s.stats.integrity_failures.to_string(),
    ),
    (
        "storage_failures_total",
        "counter",
        "Storage requests that failed.",
        |s| s.stats.storage_failures.to_string(),
    ),
    (
        "missed_batches_total",
        "counter",
        "Batch times skipped because the batch before was unfinished.",
        |s| s.stats.missed_batches.to_string(),
    ),
    (
        "late_write_backs_total",
        "counter",
        "Write-backs that left after their scheduled time (each shows the server the delay).",
        |s| s.stats.late_write_backs.to_string(),
    ),
    (
        "storage_requests_total",
        "counter",
        "Requests sent to storage.",
        |s| s.io.requests.to_string(),
    ),
    (
        "storage_sent_bytes_total",
        "counter",
        "Bytes of addresses and values sent to storage.",
        |s| s.io.bytes_sent.to_string(),
    ),
    (
        "storage_received_bytes_total",
        "counter",
        "Bytes of values received from storage.",
        |s| s.io.bytes_received.to_string(),
    ),
];

/// The snapshots in Prometheus' exposition format: each metric's help and type once, then its
/// value for each source (labelled with its partition, if it is one).
pub fn render(snapshots: &[(Option<usize>, Snapshot)]) -> String {
    let mut out = String::new();
    let labels = |partition: &Option<usize>, s: &Snapshot| match partition {
        None => format!("scheme=\"{}\"", s.scheme),
        Some(partition) => format!("scheme=\"{}\",partition=\"{partition}\"", s.scheme),
    };
    for (name, kind, help, value) in METRICS {
        let _ = writeln!(out, "# HELP cloak_{name} {help}");
        let _ = writeln!(out, "# TYPE cloak_{name} {kind}");
        for (partition, s) in snapshots {
            let _ = writeln!(out, "cloak_{name}{{{}}} {}", labels(partition, s), value(s));
        }
    }
    let _ = writeln!(
        out,
        "# HELP cloak_latency_microseconds Command latency since start."
    );
    let _ = writeln!(out, "# TYPE cloak_latency_microseconds summary");
    for (partition, s) in snapshots {
        let labels = labels(partition, s);
        let l = &s.latency;
        for (q, v) in [
            ("0.5", l.p50),
            ("0.95", l.p95),
            ("0.99", l.p99),
            ("0.999", l.p999),
            ("1", l.max),
        ] {
            let _ = writeln!(
                out,
                "cloak_latency_microseconds{{{labels},quantile=\"{q}\"}} {v}"
            );
        }
        let _ = writeln!(
            out,
            "cloak_latency_microseconds_count{{{labels}}} {}",
            l.count
        );
    }
    out
}
