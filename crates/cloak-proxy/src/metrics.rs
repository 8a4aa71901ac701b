//! `GET /metrics` in Prometheus' text format: the counters `INFO` shows, for scraping.
//!
//! A deliberately tiny HTTP responder (one request per connection, bounded reads): the endpoint
//! serves one page, and a full HTTP stack is not worth its weight here.

use std::fmt::Write;
use std::future::Future;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::core::{Snapshot, StatsHandle};

/// Serves `/metrics` on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, stats: StatsHandle, shutdown: impl Future<Output = ()>) {
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

async fn answer(mut stream: TcpStream, stats: StatsHandle) {
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
        ["GET", "/metrics", _] => match stats.snapshot().await {
            Ok(snapshot) => ("200 OK", render(&snapshot)),
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

/// The snapshot in Prometheus' exposition format.
pub fn render(s: &Snapshot) -> String {
    let mut out = String::new();
    let scheme = s.scheme;
    let mut metric = |name: &str, kind: &str, help: &str, value: String| {
        let _ = writeln!(out, "# HELP cloak_{name} {help}");
        let _ = writeln!(out, "# TYPE cloak_{name} {kind}");
        let _ = writeln!(out, "cloak_{name}{{scheme=\"{scheme}\"}} {value}");
    };
    let st = &s.stats;
    metric(
        "commands_total",
        "counter",
        "Commands answered.",
        s.engine.commands.to_string(),
    );
    metric("keys", "gauge", "Keys stored.", s.engine.keys.to_string());
    metric(
        "capacity_keys",
        "gauge",
        "Keys the store can hold.",
        s.engine.capacity.to_string(),
    );
    metric(
        "batches_total",
        "counter",
        "Storage round trips the scheme made.",
        st.batches.to_string(),
    );
    metric(
        "real_slots_total",
        "counter",
        "Storage accesses that served clients.",
        st.real_accesses.to_string(),
    );
    metric(
        "dummy_slots_total",
        "counter",
        "Storage accesses made only to hide the real ones.",
        st.dummy_accesses.to_string(),
    );
    metric(
        "batch_utilisation_ratio",
        "gauge",
        "Real accesses over all accesses since start.",
        format!("{:.6}", st.utilisation()),
    );
    metric(
        "cache_hits_total",
        "counter",
        "Reads answered at the proxy.",
        st.cache_hits.to_string(),
    );
    metric(
        "cache_misses_total",
        "counter",
        "Reads that needed storage.",
        st.cache_misses.to_string(),
    );
    metric(
        "queue_depth",
        "gauge",
        "Client ops waiting for storage.",
        st.queued.to_string(),
    );
    metric(
        "unwritten_writes",
        "gauge",
        "Acknowledged writes not yet in storage.",
        st.unwritten.to_string(),
    );
    metric(
        "integrity_failures_total",
        "counter",
        "Elements that failed authentication.",
        st.integrity_failures.to_string(),
    );
    metric(
        "storage_failures_total",
        "counter",
        "Storage requests that failed.",
        st.storage_failures.to_string(),
    );
    metric(
        "missed_batches_total",
        "counter",
        "Batch times skipped because the batch before was unfinished.",
        st.missed_batches.to_string(),
    );
    metric(
        "late_write_backs_total",
        "counter",
        "Write-backs that left after their scheduled time (each shows the server the delay).",
        st.late_write_backs.to_string(),
    );
    metric(
        "storage_requests_total",
        "counter",
        "Requests sent to storage.",
        s.io.requests.to_string(),
    );
    metric(
        "storage_sent_bytes_total",
        "counter",
        "Bytes of addresses and values sent to storage.",
        s.io.bytes_sent.to_string(),
    );
    metric(
        "storage_received_bytes_total",
        "counter",
        "Bytes of values received from storage.",
        s.io.bytes_received.to_string(),
    );
    let l = &s.latency;
    let _ = writeln!(
        out,
        "# HELP cloak_latency_microseconds Command latency since start."
    );
    let _ = writeln!(out, "# TYPE cloak_latency_microseconds summary");
    for (q, v) in [
        ("0.5", l.p50),
        ("0.95", l.p95),
        ("0.99", l.p99),
        ("0.999", l.p999),
        ("1", l.max),
    ] {
        let _ = writeln!(
            out,
            "cloak_latency_microseconds{{scheme=\"{scheme}\",quantile=\"{q}\"}} {v}"
        );
    }
    let _ = writeln!(
        out,
        "cloak_latency_microseconds_count{{scheme=\"{scheme}\"}} {}",
        l.count
    );
    out
}
