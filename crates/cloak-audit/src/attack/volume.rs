//! Volume and timing under load: the same scheme watched for the same time while idle, lightly
//! loaded and fully loaded. Cloak sends the same batches on the same schedule in all three (paper
//! §1: fixed-rate batches close the volume channel); a scheme that sends on demand shows the load.

use cloak_core::AccessKind;

use crate::view::ServerView;

/// One load's traffic.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LoadRow {
    pub load: String,
    /// Client requests sent during the window.
    pub client_requests: usize,
    pub server_requests: usize,
    pub addresses: usize,
    pub requests_per_second: f64,
    pub addresses_per_second: f64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct VolumeCheck {
    pub rows: Vec<LoadRow>,
    /// Every load gave the same requests (kind, size) at the same times.
    pub identical: bool,
    /// Most over fewest addresses per second across the loads.
    pub spread: f64,
    pub verdict: String,
}

/// Compares the traffic of `loads`: `(name, client requests sent, view)`.
pub fn volume_check(loads: &[(String, usize, &ServerView)]) -> VolumeCheck {
    let shape = |view: &ServerView| -> Vec<(std::time::Duration, AccessKind, usize)> {
        view.requests
            .iter()
            .map(|r| (r.at, r.kind, r.accesses.len()))
            .collect()
    };
    let identical = loads.windows(2).all(|w| shape(w[0].2) == shape(w[1].2));
    let rows: Vec<LoadRow> = loads
        .iter()
        .map(|(name, sent, view)| {
            let seconds = view.window.as_secs_f64().max(1e-9);
            LoadRow {
                load: name.clone(),
                client_requests: *sent,
                server_requests: view.requests.len(),
                addresses: view.accesses.len(),
                requests_per_second: view.requests.len() as f64 / seconds,
                addresses_per_second: view.accesses.len() as f64 / seconds,
            }
        })
        .collect();
    let most = rows.iter().map(|r| r.addresses).max().unwrap_or(0) as f64;
    let fewest = rows.iter().map(|r| r.addresses).min().unwrap_or(0) as f64;
    let spread = if most == fewest {
        1.0
    } else if fewest == 0.0 {
        f64::INFINITY
    } else {
        most / fewest
    };
    let verdict = if identical {
        "the same batches at the same times under every load".to_string()
    } else if spread <= 1.01 {
        "the same volume under every load, but not the same requests at the same times".into()
    } else if spread.is_infinite() {
        "traffic follows the load: silent when idle".into()
    } else {
        format!("traffic follows the load: {spread:.1}× more addresses at the busiest load")
    };
    VolumeCheck {
        rows,
        identical,
        spread,
        verdict,
    }
}
