//! Moving a partition between proxies: the `CLOAK` admin commands that `cloak cluster move`
//! sends, one step each.
//!
//! ```text
//! CLOAK MAP                            the newest map this proxy knows, as a cluster file
//! CLOAK KEYID partition                the fingerprint of this proxy's key for the partition
//! CLOAK CHECK partition keyid          could this proxy start it? (key, storage reachable)
//! CLOAK RELEASE partition map          stop serving it: drain its journal into storage, stop
//!                                      its core, keep `map` (in which another proxy has it)
//! CLOAK ACQUIRE partition keyid map    start it from storage alone and serve it under `map`
//! CLOAK TAKEOVER partition keyid map   the same, from an owner that does not answer (its
//!                                      proxy is dead, says the operator): see [`Owner::Down`]
//! CLOAK ADOPT map                      route by `map` from now on
//! ```
//!
//! `cloak cluster add-proxy` sends only `ADOPT`: its map adds a proxy hosting nothing, so no
//! partition changes hands and no proxy's storage traffic changes.
//!
//! A move is: CHECK on the target (refused there, nothing has changed: the source keeps
//! serving), RELEASE on the source, ACQUIRE on the target, ADOPT everywhere. From RELEASE until
//! the source adopts the new map, commands for the partition's slots wait at the source (and at
//! the target while it starts the partition) and get `-TRYAGAIN` if that takes more than
//! [`super::runtime::HANDOFF_WAIT`]; no command is ever answered by a partition that is not
//! running, and each is answered by the source (everything it took before RELEASE, drained
//! before the core stops) or by the target (everything after). If ACQUIRE fails, the partition
//! goes back to the source the same way, under the next epoch. If RELEASE's drain does not end
//! within [`RELEASE_TIMEOUT`] (storage does not answer), RELEASE fails with what storage has
//! not answered, the map stays, and the source starts the partition again once the drain has
//! ended after all (see `unreleased`).
//!
//! What the target trusts: the public map and the key it already has. It starts the partition
//! exactly as a restart does (`PartitionHost::open`): a full scan of the partition's storage
//! checked against its own key and, if it has one, its own ledger, then the new layout's fill.
//! The source hands over nothing but the key's fingerprint, which is only compared.
//!
//! What the storage server sees: the partition's schedule stops (after the drain's last
//! batches) and starts again with a restart's scan and fill, from another proxy. A move happens
//! when an operator runs `cloak cluster move`, never because of the workload, so its timing is
//! the operator's and public, like a restart's; nothing in it depends on which keys are used.

use std::sync::Arc;
use std::time::Duration;

use cloak_cluster::{ClusterMap, ClusterSecret};
use tokio::sync::oneshot;

use super::health_report::HealthError;
use super::runtime::Node;
use super::{Cores, Hosted};
use crate::cmd::AdminRequest;
use crate::core::{CoreHandle, StatsHandle};
use crate::resp::Reply;

/// Answers a `CLOAK` admin command (the session has checked who may run it). `secret` signs the
/// map `CLOAK MAP` answers, so a proxy that reads it at its start can tell it is of this cluster.
pub async fn answer(cores: &Cores, secret: Option<&ClusterSecret>, request: AdminRequest) -> Reply {
    let Some(node) = cores.node() else {
        return Reply::err("CLOAK admin commands are for a proxy of a cluster (--cluster)");
    };
    match request {
        AdminRequest::Map => {
            let known = node.known();
            return Reply::bulk(match secret {
                Some(secret) => known.to_signed_toml(secret),
                None => known.to_toml(),
            });
        }
        AdminRequest::KeyId(partition) => {
            return match node.host().and_then(|host| host.key_id(partition)) {
                Ok(id) => Reply::bulk(id),
                Err(why) => Reply::err(why),
            };
        }
        _ => {}
    }
    // In a task of its own: a step runs to its end even if the connection that asked for it
    // is closed or killed meanwhile, so it never stops halfway (a partition marked busy, or
    // its core dropped and nothing marked).
    let node = node.clone();
    let done = tokio::spawn(async move { step(&node, request).await })
        .await
        .unwrap_or_else(|error| Err(format!("the step failed: {error}")));
    match done {
        Ok(()) => Reply::ok(),
        Err(why) => Reply::err(why),
    }
}

/// Runs a step of a move.
async fn step(node: &Arc<Node>, request: AdminRequest) -> Result<(), String> {
    match request {
        AdminRequest::Map | AdminRequest::KeyId(_) => Ok(()),
        AdminRequest::Check { partition, key_id } => check(node, partition, &key_id).await,
        AdminRequest::Release { partition, map } => release(node, partition, &map).await,
        AdminRequest::Acquire {
            partition,
            key_id,
            map,
        } => acquire_sent(node, partition, &key_id, &map, Owner::LetGo).await,
        AdminRequest::Takeover {
            partition,
            key_id,
            map,
        } => acquire_sent(node, partition, &key_id, &map, Owner::Down).await,
        AdminRequest::Adopt(map) => adopt(node, &map).await,
    }
}

/// `ACQUIRE` or `TAKEOVER`: [`acquire`] under the map sent, holding the turn.
async fn acquire_sent(
    node: &Node,
    partition: usize,
    key_id: &str,
    map: &str,
    owner: Owner,
) -> Result<(), String> {
    let _turn = node.take_turn().await;
    let map = newer_map(node, map)?;
    acquire(node, partition, key_id, map, owner).await
}

/// The highest map epoch accepted from a command.
const MAX_EPOCH: u64 = u32::MAX as u64;

/// A map sent with a command: a map of this cluster (perhaps with proxies added), not older than
/// the newest one known here.
fn newer_map(node: &Node, text: &str) -> Result<Arc<ClusterMap>, String> {
    let map = ClusterMap::from_toml(text).map_err(|e| format!("the map sent is not valid: {e}"))?;
    let known = node.known();
    known.same_cluster(&map).map_err(|e| e.to_string())?;
    if map.proxies().len() < known.proxies().len() {
        return Err(format!(
            "the map sent lists {} proxies, fewer than this proxy's {}; read the current one \
             with CLOAK MAP",
            map.proxies().len(),
            known.proxies().len()
        ));
    }
    // A move adds one; no cluster makes four billion. A larger epoch is not a real map, and
    // would overflow the epochs `CLUSTER INFO` and the next move compute from it.
    if map.epoch() > MAX_EPOCH {
        return Err(format!(
            "the map sent has epoch {}, beyond any a cluster reaches by moves ({MAX_EPOCH})",
            map.epoch()
        ));
    }
    if map.epoch() < known.epoch() {
        return Err(format!(
            "the map sent has epoch {}, older than this proxy's {}; read the current one with \
             CLOAK MAP",
            map.epoch(),
            known.epoch()
        ));
    }
    if map.epoch() == known.epoch() && map != *known {
        return Err(cloak_cluster::ChangeError::SameEpoch(map.epoch()).to_string());
    }
    Ok(Arc::new(map))
}

async fn check(node: &Node, partition: usize, key_id: &str) -> Result<(), String> {
    let map = node.known();
    let partition = map
        .partitions()
        .get(partition)
        .ok_or_else(|| format!("there is no partition {partition}"))?;
    node.host()?.check(partition, key_id).await
}

/// Stops serving `partition` once every write it acknowledged is in storage, and keeps `map`,
/// in which another proxy hosts it. Commands for its slots wait meanwhile, and until this proxy
/// adopts the map. Releasing a partition this proxy does not serve only keeps the map.
///
/// Compare-and-set: a partition served here is released only under this proxy's map moved by
/// exactly that partition, one epoch on, and only while no other hand-off is in flight here; so
/// two moves at once through one proxy cannot leave two different maps of one epoch. If the
/// move then stalls (its tool stopped), [`finish_release`] settles it. If the drain does not
/// end within the proxy's release timeout, the release fails and keeps the old map
/// ([`unreleased`]).
async fn release(node: &Arc<Node>, partition: usize, map: &str) -> Result<(), String> {
    let _turn = node.take_turn().await;
    let map = newer_map(node, map)?;
    let hosted = node.current();
    let me = hosted.me;
    let Some(to) = map.partitions().get(partition).map(|p| p.proxy) else {
        return Err(format!("there is no partition {partition}"));
    };
    if to == me {
        return Err(format!(
            "the map sent still has partition {partition} on this proxy"
        ));
    }
    not_restarting(&hosted, partition)?;
    // Reads what the core still waits for if the drain does not end in time; it does not keep
    // the core from draining, as the handle would.
    let stats = hosted.core_of(partition).map(CoreHandle::stats);
    let serving = stats.is_some();
    let last = hosted.cores.len() == 1;
    if serving {
        no_other_hand_off(&hosted, partition)?;
        one_move(&node.known(), &map, partition, to)?;
    }
    // This snapshot holds a handle to the core: let go of it, or the core never drains.
    drop(hosted);
    if serving {
        if last {
            return Err(format!(
                "partition {partition} is the last one on this proxy; a proxy serves at least one"
            ));
        }
        let stopped = node.take_stopped(partition);
        // Dropping the last handle starts the drain (see `core::spawn`); commands routed just
        // before still hold one, and are answered before the core stops.
        node.change(|now| Hosted {
            cores: now
                .cores
                .iter()
                .filter(|(index, _)| *index != partition)
                .cloned()
                .collect(),
            moving: with(&now.moving, partition),
            busy: with(&now.busy, partition),
            ..now.clone()
        });
        tracing::info!(
            partition,
            "releasing: draining acknowledged writes to storage"
        );
        if let (Some(mut stopped), Some(stats)) = (stopped, stats) {
            let limit = node.release_timeout;
            if tokio::time::timeout(limit, &mut stopped).await.is_err() {
                return Err(unreleased(node, partition, stats, stopped, limit).await);
            }
        }
        node.change(|now| Hosted {
            busy: without(&now.busy, partition),
            ..now.clone()
        });
        tracing::info!(
            partition,
            "released: every acknowledged write is in storage"
        );
    }
    node.keep(&map)?;
    if serving {
        tokio::spawn(finish_release(node.clone(), partition, map));
    }
    Ok(())
}

/// How long `CLOAK RELEASE` waits for the partition's core to drain and stop, unless the
/// proxy is told otherwise ([`crate::ProxyOptions::release_timeout`], `--release-timeout`).
/// The same as the front end's drain timeout, since it waits for the same thing (every
/// acknowledged write, then every request out, answered by storage), and as a storage
/// request's own timeout: a storage that has answered nothing for that long has failed
/// requests rather than being slow. A healthy drain takes a few batches; the partition's
/// commands wait (answered `-TRYAGAIN` after [`super::runtime::HANDOFF_WAIT`]) all along, so a
/// longer bound would only keep them from being served longer. Well under the move tool's own
/// wait for the answer, so that the tool hears why the move failed.
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(30);

/// A release whose core did not stop within `limit`: the move fails, and the partition will
/// be served here again, under the map it had (which this proxy kept: the new one is kept only
/// after a release succeeds). Says what storage has not answered.
///
/// Why the partition is started again rather than its core kept: the core was told that no
/// command will come again (the scheme writes out what it holds, and once drained it settles:
/// Cloak's and Pancake's schedules stop for good). A drain cannot be undone, so the core is
/// left to finish its clean stop (every acknowledged write in storage, every request it sent
/// answered, the ledger saved), however long storage takes, and only then is the partition
/// started again from its storage and journal, exactly as a restart after a clean stop and as
/// the source of a failed move starts it again. So no acknowledged write is lost (the stopped
/// core put each in storage, and the journal still holds each) and no element is left
/// half-written (the new core starts only once no request of the old one can still land: two
/// cores never write one partition's storage at once). Meanwhile the partition stays in
/// hand-off here: its commands wait and get `-TRYAGAIN`, it is not served (storage would not
/// answer it anyway), and another proxy asking whether it may take it is told it may not.
async fn unreleased(
    node: &Arc<Node>,
    partition: usize,
    stats: StatsHandle,
    stopped: oneshot::Receiver<()>,
    limit: Duration,
) -> String {
    let left = match stats.outstanding().await {
        Ok(left) => left.to_string(),
        // It stopped just now: the restart below starts it at once.
        Err(_) => "nothing any more".to_string(),
    };
    tracing::error!(
        partition,
        ?limit,
        %left,
        "the release did not drain in time; the move fails, and the partition is started here \
         again once its core has stopped"
    );
    tokio::spawn(restart(node.clone(), partition, stopped));
    format!(
        "partition {partition} did not drain into storage within {limit:?}: storage has not \
         answered {left}. The move failed and the map did not change; this proxy serves the \
         partition again (started from its storage and journal) once storage has answered \
         everything"
    )
}

/// Starts `partition` here again once its released core has stopped (see [`unreleased`]),
/// retrying every [`UNFINISHED_MOVE`] while its storage cannot be opened.
async fn restart(node: Arc<Node>, partition: usize, stopped: oneshot::Receiver<()>) {
    let _ = stopped.await;
    tracing::info!(
        partition,
        "the released partition has stopped after all: starting it here again"
    );
    loop {
        let started = {
            let _turn = node.take_turn().await;
            let spec = node.known().partitions().get(partition).cloned();
            match (node.host(), spec) {
                (Ok(host), Some(spec)) => open_here(&node, host, &spec).await,
                (Err(why), _) => Err(why),
                (_, None) => Err(format!("there is no partition {partition}")),
            }
            .map(|core| hand_off_over(&node, partition, Some(core)))
        };
        match started {
            Ok(()) => {
                tracing::info!(partition, "serving it here again after the failed release");
                return;
            }
            Err(why) => {
                tracing::warn!(
                    partition,
                    "cannot start the partition here again yet: {why}"
                );
                tokio::time::sleep(UNFINISHED_MOVE).await;
            }
        }
    }
}

/// Refuses a hand-off of `partition` while it is stopping here after a release that did not
/// drain in time ([`unreleased`]): it is busy without a core only then (the other steps that
/// mark it busy hold the turn throughout), and is started here again by itself.
fn not_restarting(hosted: &Hosted, partition: usize) -> Result<(), String> {
    if hosted.busy.contains(&partition) && hosted.core_of(partition).is_none() {
        return Err(format!(
            "partition {partition} is still stopping here after a release that storage did not \
             let finish; it is served here again once storage answers (retry then)"
        ));
    }
    Ok(())
}

/// How long a partition released here waits for its move to finish before this proxy looks at
/// what became of it (and again every as long after): a move's steps follow each other within a
/// second, and a target starting the partition says so (`busy`), however long it takes.
pub const UNFINISHED_MOVE: Duration = Duration::from_secs(5);

/// Settles a release whose move did not finish (its tool was stopped, or lost its connections,
/// before every proxy adopted the new map), which would otherwise leave the partition waiting
/// here, its commands answered `-TRYAGAIN`, for good. Every [`UNFINISHED_MOVE`] while the
/// partition is still in hand-off here, this proxy asks the target what it has of it:
/// - serves it: the move is done but for the map; this proxy adopts it (and redirects);
/// - starts it (`busy`), or does not answer: waits (a target that cannot be asked may be
///   serving it, and two proxies must never serve one partition);
/// - neither: this proxy takes the partition back under the next epoch, as the tool's own
///   fallback does and through the same checks ([`acquire`]).
async fn finish_release(node: Arc<Node>, partition: usize, released: Arc<ClusterMap>) {
    let target = &released.proxies()[released.partitions()[partition].proxy];
    loop {
        tokio::time::sleep(UNFINISHED_MOVE).await;
        let _turn = node.take_turn().await;
        let hosted = node.current();
        let unfinished =
            hosted.moving.contains(&partition) && node.known().epoch() == released.epoch();
        let me = hosted.me;
        drop(hosted);
        if !unfinished {
            return;
        }
        let Ok(host) = node.host() else { return };
        // Believed only if the target signed it for this question: a forged "serving" would
        // have this proxy redirect to a target that does not serve, a forged "neither" would
        // be checked again by `acquire` (which refuses an owner whose answer does not verify).
        let health = host.peer_health(target).await;
        let settled = match health.as_ref().map(|report| report.state_of(partition)) {
            Ok(Some(state)) if state.served() => {
                tracing::warn!(
                    partition,
                    target = %target.name,
                    "the move was left unfinished after its target took the partition; \
                     adopting its map"
                );
                install(&node, released.clone())
            }
            Ok(Some(_)) => continue,
            Ok(None) => {
                tracing::warn!(
                    partition,
                    target = %target.name,
                    "the move was left unfinished before its target took the partition; \
                     taking it back"
                );
                let back = released.moved(partition, &released.proxies()[me].name);
                match (back, host.key_id(partition)) {
                    (Ok(back), Ok(key_id)) => {
                        acquire(&node, partition, &key_id, Arc::new(back), Owner::LetGo).await
                    }
                    (Err(why), _) => Err(why.to_string()),
                    (_, Err(why)) => Err(why),
                }
            }
            Err(why) => {
                tracing::warn!(
                    partition,
                    target = %target.name,
                    "the move was left unfinished, and its target cannot be asked whether it \
                     took the partition ({why}); waiting"
                );
                continue;
            }
        };
        match settled {
            Ok(()) => return,
            Err(why) => tracing::warn!(partition, "cannot settle the unfinished move yet: {why}"),
        }
    }
}

/// Refuses a hand-off of `partition` while this proxy hands over another one.
fn no_other_hand_off(hosted: &Hosted, partition: usize) -> Result<(), String> {
    match hosted.moving.iter().find(|other| **other != partition) {
        Some(other) => Err(format!(
            "partition {other} is being handed over on this proxy; one move at a time (retry \
             once it is done)"
        )),
        None => Ok(()),
    }
}

/// How long a takeover waits for a connection to the old owner before it counts it as dead.
const OWNER_PROBE: Duration = Duration::from_secs(2);

/// What the proxy that has a partition by the known map must say before another takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// A move: it answers (signed, with a cluster secret) that it neither serves the partition
    /// nor is busy with it, i.e. it has released it.
    LetGo,
    /// A takeover (`CLOAK TAKEOVER`, `cloak cluster move --source-down --accept-data-loss`):
    /// it cannot be reached at all, asked by this proxy now.
    ///
    /// Why this makes no split brain beyond the operator's word: two proxies serve one
    /// partition only if the owner serves it while this proxy starts it. An owner that serves
    /// answers its health check; any answer, signed or not, verified or not, refuses the
    /// takeover here (an answering owner is not dead, and a forger who answers in its place
    /// can only block, never allow). The tool checks the same before sending this. What is
    /// left is the operator's assertion that the owner is dead and will not serve again with
    /// its old map: a proxy cut off only from this one (a partition of the network) is the
    /// case the assertion covers. And when the old owner starts again, it reads the peers'
    /// maps first and adopts the newer one, which does not give it the partition, so it does
    /// not start it (see `cluster::runtime`); its journal for it is kept, not replayed.
    Down,
}

/// Starts `partition` from its storage and serves it under `map`, which gives it to this proxy
/// (the caller holds the turn). Compare-and-set, as [`release`]: `map` must be this proxy's map
/// with exactly that partition moved here, and no other hand-off in flight here.
async fn acquire(
    node: &Node,
    partition: usize,
    key_id: &str,
    map: Arc<ClusterMap>,
    owner_must: Owner,
) -> Result<(), String> {
    let hosted = node.current();
    not_restarting(&hosted, partition)?;
    let me = hosted.me;
    let Some(spec) = map.partitions().get(partition).filter(|p| p.proxy == me) else {
        return Err(format!(
            "the map sent does not give partition {partition} to this proxy"
        ));
    };
    if hosted.core_of(partition).is_none() {
        no_other_hand_off(&hosted, partition)?;
        drop(hosted);
        let host = node.host()?;
        let known = node.known();
        let owner = one_move(&known, &map, partition, me)?;
        // Marked as busy with the partition before the others are asked, so that two proxies
        // told to take it at once each see the other.
        node.change(|now| Hosted {
            moving: with(&now.moving, partition),
            busy: with(&now.busy, partition),
            ..now.clone()
        });
        let started = start_here(node, host, &known, (me, owner, owner_must), spec, key_id).await;
        hand_off_over(node, partition, started.as_ref().ok().cloned());
        started?;
        tracing::info!(partition, "acquired: serving it");
    }
    install(node, map)
}

/// Starts `partition` here, once no other proxy serves it or is busy with it (draining it, or
/// starting it): two proxies serving one partition would overwrite each other's elements and
/// lose acknowledged writes. `me` is this proxy; `owner`, which has it by the map known here,
/// must answer (a proxy that cannot be asked cannot be taken over); another proxy that does not
/// answer serves nothing now, and learns the new map when it starts.
///
/// With a cluster secret, an answer counts only if its proxy signed it for this question (see
/// [`super::health_report`]): otherwise whoever answers in the owner's place (a man in the
/// middle, a spoofed address) could say it let the partition go while it serves it. The owner's
/// answer must verify, or the partition is not taken. Another proxy's answer that does not
/// verify is no answer, as if that proxy were down: its word is not needed, and believing it
/// would let a forger say nothing more than a dropped connection already says.
async fn start_here(
    node: &Node,
    host: &Arc<dyn super::PartitionHost>,
    known: &ClusterMap,
    (me, owner, owner_must): (usize, usize, Owner),
    spec: &cloak_cluster::Partition,
    key_id: &str,
) -> Result<crate::core::CoreHandle, String> {
    let partition = spec.index;
    for (index, proxy) in known.proxies().iter().enumerate() {
        if index == me {
            continue;
        }
        let health = host.peer_health(proxy).await;
        if index == owner && owner_must == Owner::Down {
            // Both: its health asked as for a move, and a bare connection (an error reply or a
            // failed login still counts as "unreachable" to the first).
            let listens = super::peer::listens(&proxy.address(), OWNER_PROBE).await;
            match (health, listens) {
                (_, Ok(())) => {
                    return Err(format!(
                        "{} at {} accepts connections: it is not dead; move partition \
                         {partition} without --source-down",
                        proxy.name,
                        proxy.address()
                    ));
                }
                (Err(HealthError::Unreachable(why)), Err(_)) => {
                    tracing::warn!(
                        partition,
                        proxy = %proxy.name,
                        "the owner does not answer ({why}); taking the partition over (the \
                         operator says it is dead): writes it acknowledged but had not stored \
                         are lost"
                    );
                    continue;
                }
                (Ok(_), Err(_)) => {
                    return Err(format!(
                        "{} answers: it is not dead; move partition {partition} without \
                         --source-down",
                        proxy.name
                    ));
                }
                (Err(why), Err(_)) => {
                    return Err(format!(
                        "{} answers ({why}): a proxy that answers is not taken over",
                        proxy.name
                    ));
                }
            }
        }
        match health.map(|r| r.holds(partition)) {
            Ok(false) => {}
            Ok(true) => {
                return Err(format!(
                    "{} still serves partition {partition} (or is handing it over): it must \
                     release it first (`cloak cluster move` does)",
                    proxy.name
                ));
            }
            Err(why) if index == owner => {
                return Err(format!(
                    "cannot confirm that {} has let partition {partition} go: {why}",
                    proxy.name
                ));
            }
            Err(why @ (HealthError::Unsigned | HealthError::BadMac)) => {
                tracing::warn!(
                    partition,
                    proxy = %proxy.name,
                    "{why}; counted as not answering"
                );
            }
            Err(_) => {}
        }
    }
    host.check(spec, key_id).await?;
    tracing::info!(partition, "acquiring: starting it from its storage");
    open_here(node, host, spec).await
}

/// Starts `spec`'s partition here from its storage (and this proxy's journal of it), through
/// the same recovery and checks as a restart.
async fn open_here(
    node: &Node,
    host: &Arc<dyn super::PartitionHost>,
    spec: &cloak_cluster::Partition,
) -> Result<CoreHandle, String> {
    let partition = spec.index;
    let store = host
        .open(spec)
        .await
        .map_err(|why| format!("partition {partition} could not start here: {why}"))?;
    node.start_core(partition, store)
        .map_err(|why| format!("partition {partition} could not start here: {why}"))
}

/// Ends this proxy's hand-off of `partition`: serves it with `core` if one started here.
fn hand_off_over(node: &Node, partition: usize, core: Option<CoreHandle>) {
    node.change(|now| {
        let mut cores = now.cores.clone();
        if let Some(core) = core {
            cores.push((partition, core));
            cores.sort_by_key(|(index, _)| *index);
        }
        Hosted {
            cores,
            moving: without(&now.moving, partition),
            busy: without(&now.busy, partition),
            ..now.clone()
        }
    });
}

/// The proxy that hosts `partition` by `known`, if `sent` is `known` with only that partition
/// moved, to proxy `to` (what `cloak cluster move` sends): anything else could hand a partition
/// to a proxy that some other proxy has not been asked to let go, or give two maps one epoch.
fn one_move(
    known: &ClusterMap,
    sent: &ClusterMap,
    partition: usize,
    to: usize,
) -> Result<usize, String> {
    let name = &known.proxies()[to].name;
    let expected = known.moved(partition, name).map_err(|e| e.to_string())?;
    if expected != *sent {
        return Err(format!(
            "the map sent is not this proxy's map (epoch {}) with only partition {partition} \
             moved to {name}; read the current one with CLOAK MAP",
            known.epoch()
        ));
    }
    Ok(known.partitions()[partition].proxy)
}

/// Routes by `map` from now on: it must give this proxy exactly the partitions it serves.
async fn adopt(node: &Node, map: &str) -> Result<(), String> {
    let _turn = node.take_turn().await;
    let map = newer_map(node, map)?;
    install(node, map)
}

/// Keeps `map` and makes it the one routing reads, if it gives this proxy exactly the
/// partitions it serves; partitions it gives elsewhere stop waiting here and are redirected.
fn install(node: &Node, map: Arc<ClusterMap>) -> Result<(), String> {
    let hosted = node.current();
    for partition in map.partitions() {
        let mine = partition.proxy == hosted.me;
        let served = hosted.core_of(partition.index).is_some();
        if mine != served {
            return Err(format!(
                "the map has partition {} on {}, but this proxy {} it; move it with `cloak \
                 cluster move`",
                partition.index,
                map.proxies()[partition.proxy].name,
                if served { "serves" } else { "does not serve" }
            ));
        }
    }
    node.keep(&map)?;
    node.change(|now| Hosted {
        moving: Vec::new(),
        map: map.clone(),
        ..now.clone()
    });
    Ok(())
}

fn with(partitions: &[usize], partition: usize) -> Vec<usize> {
    let mut partitions = without(partitions, partition);
    partitions.push(partition);
    partitions
}

fn without(partitions: &[usize], partition: usize) -> Vec<usize> {
    partitions
        .iter()
        .copied()
        .filter(|p| *p != partition)
        .collect()
}
