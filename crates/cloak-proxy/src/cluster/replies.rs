//! The answers to `CLUSTER SLOTS SHARDS NODES INFO KEYSLOT MYID`, shaped as Redis 7 shapes them
//! (checked against a real Redis Cluster in `tests/cluster_oracle.rs`), from the public map.
//!
//! Every proxy is a master with no replicas; a partition is not a node of its own, since
//! clients reach partitions only through the proxy that hosts them. Whether the other proxies
//! answer, and whether each partition's storage does, comes from [`super::health`]: a proxy
//! that does not answer is `fail?` and then `fail`, as Redis flags a node, and the slots that
//! cannot be served count in `CLUSTER INFO`.

use std::fmt::Write;

use cloak_cluster::{ClusterMap, ClusterSecret, SLOTS, key_slot};

use super::health::NodeState;
use super::health_report;
use super::{Cores, Hosted};
use crate::cmd::ClusterRequest;
use crate::resp::Reply;

/// What Redis answers a cluster command with cluster support disabled.
const DISABLED: &str = "ERR This instance has cluster support disabled";

/// Answers a `CLUSTER` subcommand.
pub fn answer(cores: &Cores, request: ClusterRequest) -> Reply {
    let Some(hosted) = cores.cluster() else {
        return Reply::Error(DISABLED.into());
    };
    let map = &hosted.map;
    match request {
        ClusterRequest::KeySlot(key) => Reply::Integer(i64::from(key_slot(&key))),
        ClusterRequest::MyId => Reply::bulk(map.proxies()[hosted.me].id.clone()),
        ClusterRequest::Slots => slots(map),
        ClusterRequest::Shards => shards(&hosted),
        ClusterRequest::Nodes => Reply::Verbatim(nodes(&hosted)),
        ClusterRequest::Info => Reply::Verbatim(info(&hosted)),
    }
}

/// The answer to `READONLY`/`READWRITE`.
pub fn read_only(cores: &Cores) -> Reply {
    match cores.cluster() {
        Some(_) => Reply::ok(),
        None => Reply::Error(DISABLED.into()),
    }
}

/// The answer to `CLOAK.HEALTH [nonce]`: a line per partition hosted here (see `probe`), signed
/// for `nonce` under `secret` when both are given (see `health_report`).
pub fn health(cores: &Cores, nonce: Option<&str>, secret: Option<&ClusterSecret>) -> Reply {
    let Some(hosted) = cores.cluster() else {
        return Reply::Error(DISABLED.into());
    };
    let me = &hosted.map.proxies()[hosted.me].name;
    let report = hosted.health().report();
    Reply::Verbatim(health_report::answer(&report, nonce, me, secret))
}

/// `CLUSTER SLOTS`: one entry per run of slots, in slot order: first, last, and the master
/// (host, port, id, and an empty map of extra endpoint fields, as Redis 7).
fn slots(map: &ClusterMap) -> Reply {
    let mut runs: Vec<(u16, u16, usize)> = (0..map.proxies().len())
        .flat_map(|proxy| {
            map.ranges_of(proxy)
                .into_iter()
                .map(move |range| (range.first, range.last, proxy))
        })
        .collect();
    runs.sort_by_key(|(first, _, _)| *first);
    Reply::Array(
        runs.into_iter()
            .map(|(first, last, proxy)| {
                let proxy = &map.proxies()[proxy];
                Reply::Array(vec![
                    Reply::Integer(i64::from(first)),
                    Reply::Integer(i64::from(last)),
                    Reply::Array(vec![
                        Reply::bulk(proxy.host.clone()),
                        Reply::Integer(i64::from(proxy.port)),
                        Reply::bulk(proxy.id.clone()),
                        Reply::Map(Vec::new()),
                    ]),
                ])
            })
            .collect(),
    )
}

/// `CLUSTER SHARDS`: one shard per proxy that serves slots: its slot runs as a flat list of
/// first and last, and its one node (`failed` once it has failed, as Redis says).
fn shards(hosted: &Hosted) -> Reply {
    let map = &hosted.map;
    Reply::Array(
        map.proxies()
            .iter()
            .enumerate()
            .filter(|(index, _)| map.hosted_by(*index).next().is_some())
            .map(|(index, proxy)| {
                let slots = map
                    .ranges_of(index)
                    .into_iter()
                    .flat_map(|range| [range.first, range.last])
                    .map(|slot| Reply::Integer(i64::from(slot)))
                    .collect();
                let node = Reply::map([
                    ("id", Reply::bulk(proxy.id.clone())),
                    ("port", Reply::Integer(i64::from(proxy.port))),
                    ("ip", Reply::bulk(proxy.host.clone())),
                    ("endpoint", Reply::bulk(proxy.host.clone())),
                    ("role", Reply::bulk("master")),
                    ("replication-offset", Reply::Integer(0)),
                    (
                        "health",
                        Reply::bulk(match hosted.health().node_state(index) {
                            NodeState::Failed => "failed",
                            NodeState::Ok | NodeState::Suspected => "online",
                        }),
                    ),
                ]);
                Reply::map([
                    ("slots", Reply::Array(slots)),
                    ("nodes", Reply::Array(vec![node])),
                ])
            })
            .collect(),
    )
}

/// `CLUSTER NODES`: one line per proxy, `id host:port@bus flags master ping pong epoch link
/// slots…`. There is no cluster bus (the map is configuration, not gossip), so its port is 0;
/// `pong` is when the proxy last answered a probe.
fn nodes(hosted: &Hosted) -> String {
    let map = &hosted.map;
    let health = hosted.health();
    let mut text = String::new();
    for (index, proxy) in map.proxies().iter().enumerate() {
        let (flags, link) = match health.node_state(index) {
            _ if index == hosted.me => ("myself,master", "connected"),
            NodeState::Ok => ("master", "connected"),
            NodeState::Suspected => ("master,fail?", "disconnected"),
            NodeState::Failed => ("master,fail", "disconnected"),
        };
        let _ = write!(
            text,
            "{} {}:{}@0 {flags} - 0 {} {} {link}",
            proxy.id,
            proxy.host,
            proxy.port,
            health.pong_ms(index),
            proxy.config_epoch
        );
        for range in map.ranges_of(index) {
            let _ = write!(text, " {range}");
        }
        text.push('\n');
    }
    text
}

/// `CLUSTER INFO`: Redis's fields. Every slot is assigned by construction of the map; the state
/// is `fail` while any slot cannot be served (the others still are, as with Redis's
/// `cluster-require-full-coverage no`).
fn info(hosted: &Hosted) -> String {
    let map = &hosted.map;
    let proxies = map.proxies().len();
    let serving = (0..proxies)
        .filter(|&proxy| map.hosted_by(proxy).next().is_some())
        .count();
    let (suspected, failed) = hosted.health().failing_slots();
    let state = if failed == 0 { "ok" } else { "fail" };
    let fields = [
        ("cluster_state", state.to_string()),
        ("cluster_slots_assigned", SLOTS.to_string()),
        ("cluster_slots_ok", (SLOTS - suspected - failed).to_string()),
        ("cluster_slots_pfail", suspected.to_string()),
        ("cluster_slots_fail", failed.to_string()),
        ("cluster_known_nodes", proxies.to_string()),
        ("cluster_size", serving.to_string()),
        ("cluster_current_epoch", map.current_epoch().to_string()),
        (
            "cluster_my_epoch",
            map.proxies()[hosted.me].config_epoch.to_string(),
        ),
        ("cluster_stats_messages_sent", "0".into()),
        ("cluster_stats_messages_received", "0".into()),
        ("total_cluster_links_buffer_limit_exceeded", "0".into()),
    ];
    fields
        .iter()
        .map(|(field, value)| format!("{field}:{value}\r\n"))
        .collect()
}
