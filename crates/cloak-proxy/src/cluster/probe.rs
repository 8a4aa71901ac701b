//! The probes a cluster proxy sends the other proxies: every [`PROBE_EVERY`], on one connection
//! per proxy kept open between probes (over TLS when the proxies serve clients over TLS, see
//! [`super::peer`]), `CLOAK.HEALTH` (after `AUTH` when the proxies have a password), whose answer lists that proxy's partitions and whether their storage answers.
//!
//! A probe that fails to connect, times out ([`PROBE_TIMEOUT`]) or gets an answer other than the
//! one the map expects (another cluster file's partitions) marks the proxy as not answering, with
//! why; see [`Health`]. The answer names the epoch of the map its proxy routes by and the map's
//! cluster digest (its partitions' slots and storage, which moves and added proxies do not
//! change): a different
//! digest is always refused, but only an answer of this proxy's epoch can be held to where this
//! proxy's map puts each partition, since while a partition moves the proxies learn the new map
//! one after another. Each probe costs a few bytes on a fixed timer, whatever the workload, and
//! its memory is bounded: an answer longer than `MAX_ANSWER` is refused.

use std::sync::Arc;

use super::health::{Health, PROBE_EVERY, PROBE_TIMEOUT};
use super::health_report::{HealthReport, PartitionState};
use super::peer::{PeerConnection, PeerLink};

/// The longest `CLOAK.HEALTH` answer read: a line per partition, each with one error's text.
const MAX_ANSWER: usize = 64 << 10;

/// Probes every other proxy of the map until dropped (each in a task of its own, under one task
/// of `tasks`), over `link` (TLS when the proxies serve clients over TLS, see [`PeerLink`]);
/// a proxy added to the cluster is probed from the first [`PROBE_EVERY`] after this proxy
/// routes by a map that lists it.
pub fn spawn_all(health: &Arc<Health>, link: &PeerLink, tasks: &mut tokio::task::JoinSet<()>) {
    let link = link.clone().with_limit(MAX_ANSWER);
    let health = health.clone();
    tasks.spawn(async move {
        // Dropped with this task, which stops every probe.
        let mut probes = tokio::task::JoinSet::new();
        let mut watched = 0;
        let mut tick = tokio::time::interval(PROBE_EVERY);
        loop {
            // A move changes which proxy hosts a partition, never the proxies; a proxy added
            // goes at the end of the list (`ClusterMap::with_proxy`), so the ones not yet
            // watched are the last ones.
            let count = health.map().proxies().len();
            for proxy in watched..count {
                if proxy != health.me() {
                    probes.spawn(watch(health.clone(), proxy, link.clone()));
                }
            }
            watched = watched.max(count);
            tick.tick().await;
        }
    });
}

/// Probes `proxy` forever, recording each result.
async fn watch(health: Arc<Health>, proxy: usize, link: PeerLink) {
    let address = health.map().proxies()[proxy].address();
    let mut connection = None;
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let map = health.map();
        let expected = Expected {
            epoch: map.epoch(),
            cluster: map.cluster_digest(),
            partitions: map.hosted_by(proxy).map(|p| p.index).collect(),
        };
        let probe = probe(&mut connection, &link, &address, &expected);
        match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
            Ok(Ok(failing)) => health.answered(proxy, failing),
            Ok(Err(why)) => {
                connection = None;
                health.unanswered(proxy, why);
            }
            Err(_) => {
                connection = None;
                health.unanswered(
                    proxy,
                    format!("no answer within {}s", PROBE_TIMEOUT.as_secs()),
                );
            }
        }
    }
}

/// One probe of the proxy at `address` (connecting first if needed): its failing partitions.
async fn probe(
    connection: &mut Option<PeerConnection>,
    link: &PeerLink,
    address: &str,
    expected: &Expected,
) -> Result<Vec<(usize, String)>, String> {
    if connection.is_none() {
        *connection = Some(link.connect(address).await?);
    }
    let Some(peer) = connection.as_mut() else {
        return Err("not connected".into());
    };
    let answer = peer.ask(&["CLOAK.HEALTH"]).await.map_err(|why| {
        if why.starts_with("ERR unknown command") {
            format!("answered {why:?}, not its health (not a Cloak proxy?)")
        } else {
            why
        }
    })?;
    parse(&answer, expected)
}

/// What a proxy's answer must say, by this proxy's map.
struct Expected {
    /// The epoch of this proxy's map.
    epoch: u64,
    /// Its cluster digest.
    cluster: String,
    /// The partitions the map gives the probed proxy.
    partitions: Vec<usize>,
}

/// The failing partitions of a `CLOAK.HEALTH` answer ([`HealthReport`]). It must be of this
/// cluster, and at this proxy's epoch list exactly the partitions the map gives it, leaving aside
/// those it is handing over or taking on.
fn parse(answer: &str, expected: &Expected) -> Result<Vec<(usize, String)>, String> {
    let report = HealthReport::parse(answer)?;
    if report.cluster != expected.cluster {
        return Err(format!(
            "is of another cluster: its map's proxies, slots or storage differ from this one's \
             (cluster digest {}, here {}; started from another cluster file?)",
            report.cluster, expected.cluster
        ));
    }
    let served = |state: &PartitionState| state.served();
    let serving: Vec<usize> = (report.partitions.iter())
        .filter(|(_, state)| served(state))
        .map(|(partition, _)| *partition)
        .collect();
    let settled: Vec<usize> = (expected.partitions.iter())
        .copied()
        .filter(|p| {
            report
                .partitions
                .iter()
                .all(|(index, state)| index != p || served(state))
        })
        .collect();
    if report.epoch == expected.epoch && serving != settled {
        return Err(format!(
            "hosts partitions {serving:?}, but the cluster file says {settled:?} (started from \
             another cluster file?)"
        ));
    }
    Ok(report
        .partitions
        .into_iter()
        .filter_map(|(partition, state)| match state {
            PartitionState::Failing(why) => Some((partition, why)),
            _ => None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::{Expected, parse};

    fn expected(epoch: u64, partitions: &[usize]) -> Expected {
        Expected {
            epoch,
            cluster: "c0ffee".into(),
            partitions: partitions.to_vec(),
        }
    }

    #[test]
    fn an_answer_must_list_the_partitions_the_map_gives_the_proxy() {
        let map = expected(4, &[1, 3]);
        assert_eq!(
            parse("epoch 4 cluster c0ffee\n1 ok\n3 ok\n", &map),
            Ok(Vec::new())
        );
        assert_eq!(
            parse(
                "epoch 4 cluster c0ffee\n1 ok\n3 fail storage unreachable: down\n",
                &map
            ),
            Ok(vec![(3, "storage unreachable: down".to_string())])
        );
        let other = parse("epoch 4 cluster c0ffee\n1 ok\n", &map).unwrap_err();
        assert!(other.contains("hosts partitions [1]"), "{other}");
        let garbage = parse("epoch 4 cluster c0ffee\nPONG", &map).unwrap_err();
        assert!(garbage.contains("not one"), "{garbage}");
        let old = parse("1 ok\n3 ok\n", &map).unwrap_err();
        assert!(old.contains("not its health"), "{old}");
        // Another cluster's proxy, at any epoch.
        let foreign = parse("epoch 9 cluster 0dd\n1 ok\n3 ok\n", &map).unwrap_err();
        assert!(foreign.contains("is of another cluster"), "{foreign}");
    }

    #[test]
    fn a_partition_in_hand_off_or_another_epoch_is_not_held_to_this_map() {
        // Releasing 3, or taking on 5, at the same epoch: the rest must still match.
        let map = expected(4, &[1, 3]);
        assert_eq!(
            parse("epoch 4 cluster c0ffee\n1 ok\n3 moving\n", &map),
            Ok(Vec::new())
        );
        assert_eq!(
            parse("epoch 4 cluster c0ffee\n1 ok\n3 ok\n5 moving\n", &map),
            Ok(Vec::new())
        );
        assert!(parse("epoch 4 cluster c0ffee\n3 ok\n5 moving\n", &map).is_err());
        // Draining 3 (busy with its storage) is left aside the same way.
        assert_eq!(
            parse("epoch 4 cluster c0ffee\n1 ok\n3 busy\n", &map),
            Ok(Vec::new())
        );
        // A proxy that already routes by the next map.
        assert_eq!(
            parse("epoch 5 cluster c0ffee\n1 ok\n3 ok\n5 ok\n", &map),
            Ok(Vec::new())
        );
    }
}
