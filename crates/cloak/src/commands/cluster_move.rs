//! `cloak cluster move --partition N --to PROXY`: the steps of a hand-off, sent to the proxies
//! as `CLOAK` admin commands (see `cloak_proxy::cluster::handoff` for what each does and why
//! the storage server learns nothing from it but that an operator moved a partition).
//!
//! 1. The newest map any proxy knows, and the new one: the partition on PROXY, one epoch later.
//! 2. The target checks it has the partition's key and reaches its storage; if not, the move is
//!    refused and nothing has changed.
//! 3. The source drains the partition into storage and stops it; its slots wait meanwhile. If
//!    storage does not let the drain finish in time (the source's `--release-timeout`), the
//!    move fails, saying what storage has not answered, and the source serves the partition
//!    again once it does.
//! 4. The target starts it from storage alone. If it cannot, the source starts it again (under
//!    the next epoch), and the move is reported failed.
//! 5. Every proxy adopts the new map; the source now redirects its slots to the target. A proxy
//!    that is down learns the map from the others when it starts.

use std::time::Duration;

use anyhow::{Context, bail};
use cloak_cluster::{ClusterMap, ClusterSecret};
use cloak_proxy::cluster::health_report::HealthReport;
use cloak_proxy::cluster::peer::{PeerLink, PlainLogin, listens};

use super::partition_host::{PeerMap, admin_login, peer_link, peer_map};
use crate::cli::{ClusterAddProxyArgs, ClusterAdminArgs, ClusterMoveArgs};

/// How long a step that needs no storage may take.
const QUICK: Duration = Duration::from_secs(5);
/// How long a drain or a start from storage may take (a large partition's full scan and fill).
const SLOW: Duration = Duration::from_secs(600);

/// What a refusal to send the secret in the clear tells the operator to do.
const PLAIN_REMEDY: &str = "give --cluster-ca FILE to reach the proxies over TLS, or \
                            --allow-plaintext-secret if every link on the way is trusted";

pub async fn run(args: &ClusterMoveArgs) -> anyhow::Result<()> {
    let (secret, link) = admin_link(&args.admin)?;
    let link = &link;
    let map = newest_map(&args.admin.node, link, &secret).await?;
    no_move_in_flight(&map, link).await?;
    let partition = args.partition;
    let next = map.moved(partition, &args.to)?;
    let source = &map.proxies()[map.partitions()[partition].proxy];
    let target = &next.proxies()[next.partitions()[partition].proxy];
    if args.source_down {
        return take_over(args, link, &next, source, target).await;
    }
    move_partition(link, &next, partition, source, target).await
}

/// `cloak cluster add-proxy`: the newest map with one more proxy, hosting nothing, one epoch
/// on, sent to every proxy as a move's new map is (`CLOAK ADOPT`, which each proxy keeps and
/// signs); then the new cluster file, for the operator (the new proxy also reads the map from
/// the others when it starts, so the old file does too).
///
/// The new proxy is not asked to be reachable: it cannot start before a map lists it (its
/// start refuses a name no map has). What this changes for storage: nothing; the map is public
/// configuration, and the new proxy talks to storage only once a move starts a partition there.
pub async fn add_proxy(args: &ClusterAddProxyArgs) -> anyhow::Result<()> {
    let (secret, link) = admin_link(&args.admin)?;
    let map = newest_map(&args.admin.node, &link, &secret).await?;
    // One change at a time: a move in flight would give its own map of the next epoch.
    no_move_in_flight(&map, &link).await?;
    let next = map.with_proxy(&args.name, &args.address)?;
    if listens(&args.address, QUICK).await.is_ok() {
        eprintln!(
            "warning: something already accepts connections at {}; the new proxy must listen \
             there (or be reached there) for clients and the other proxies",
            args.address
        );
    }
    let others = next.proxies().iter().filter(|p| p.name != args.name);
    let asked = others.clone().count();
    let took = tell(&next, others, &link).await;
    if (1..asked).contains(&took) {
        // A running proxy that missed the map keeps the old one (a later move's check of the
        // epoch then fails on it) until it restarts, when it takes the newest from the others.
        eprintln!(
            "warning: {took} of {asked} proxies took the new map; restart the others named \
             above before the next move"
        );
    }
    if took == 0 {
        bail!(
            "no proxy took the map with {}; nothing changed (is a move in flight? see `cloak \
             cluster status`)",
            args.name
        );
    }
    eprintln!(
        "proxy {} ({}) added, hosting no partition (map epoch {}); start it with `cloak proxy \
         --cluster FILE --node {}` and move partitions to it with `cloak cluster move --to {}`",
        args.name,
        args.address,
        next.epoch(),
        args.name,
        args.name
    );
    // Signed: past epoch 0 a proxy starts only from a map whose MAC verifies.
    let file = next.to_signed_toml(&secret);
    match &args.output {
        Some(path) => cloak_storage::dir::write_synced(path, file.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => print!("{file}"),
    }
    Ok(())
}

/// The cluster's secret and a link that logs in with it as the admin, sending it in the clear
/// only where `args` allow.
fn admin_link(args: &ClusterAdminArgs) -> anyhow::Result<(ClusterSecret, PeerLink)> {
    let secret = crate::secret_file::cluster_secret(&args.cluster_secret_file)?;
    let link = peer_link(args.cluster_ca.as_deref(), admin_login(&secret))?;
    // The secret is this tool's login: it lets whoever reads it move partitions, so it goes
    // over the network only inside TLS unless the operator says otherwise. Checked at every
    // connection, the seed's and each proxy's of the map, before anything is sent.
    let link = match args.allow_plaintext_secret {
        true => {
            eprintln!(
                "warning: --allow-plaintext-secret: the cluster secret crosses the network in \
                 the clear to every proxy not on this machine"
            );
            link
        }
        false => link.with_plain_login(PlainLogin::LoopbackOnly {
            remedy: PLAIN_REMEDY,
        }),
    };
    Ok((secret, link))
}

/// A move of `partition` from `source` to `target`, whose map after is `next`.
async fn move_partition(
    link: &PeerLink,
    next: &ClusterMap,
    partition: usize,
    source: &cloak_cluster::Proxy,
    target: &cloak_cluster::Proxy,
) -> anyhow::Result<()> {
    let number = partition.to_string();
    let key_id = key_id(link, source, partition).await?;
    let check = ["CLOAK", "CHECK", &number, &key_id];
    send(link, &target.address(), SLOW, &check)
        .await
        .with_context(|| {
            format!(
                "{} cannot take partition {partition}; nothing changed, it keeps serving on {}",
                target.name, source.name
            )
        })?;
    println!(
        "{} can take partition {partition}; {} is draining it into storage",
        target.name, source.name
    );
    let next_text = next.to_toml();
    let release = ["CLOAK", "RELEASE", &number, &next_text];
    send(link, &source.address(), SLOW, &release)
        .await
        .with_context(|| {
            // A refusal, or a drain storage did not let finish in time (the proxy then serves
            // the partition again by itself): either way the map did not change. A release
            // whose answer alone was lost is taken back by the source, as any unfinished move.
            format!(
                "the move failed: {} did not release partition {partition}, and the map did not \
                 change",
                source.name
            )
        })?;
    println!(
        "{} released partition {partition}; {} is starting it from storage",
        source.name, target.name
    );
    let acquire = ["CLOAK", "ACQUIRE", &number, &key_id, &next_text];
    let acquired = send(link, &target.address(), SLOW, &acquire).await;
    if let Err(error) = acquired {
        let back = next.moved(partition, &source.name)?;
        let back_text = back.to_toml();
        let reacquire = ["CLOAK", "ACQUIRE", &number, &key_id, &back_text];
        send(link, &source.address(), SLOW, &reacquire)
            .await
            .with_context(|| {
                format!(
                    "{} could not start partition {partition} ({error:#}), nor could {} start \
                     it again: no proxy serves it; run `cloak cluster move --partition \
                     {partition} --to NAME` once one can",
                    target.name, source.name
                )
            })?;
        tell_everyone(&back, link).await;
        bail!(
            "{} could not start partition {partition}: {error:#}\nit serves on {} again (map \
             epoch {})",
            target.name,
            source.name,
            back.epoch()
        );
    }
    tell_everyone(next, link).await;
    println!(
        "partition {partition} moved from {} to {} (map epoch {})",
        source.name,
        target.name,
        next.epoch()
    );
    Ok(())
}

/// `--source-down`: `target` takes the partition from storage alone, `source` being dead (the
/// operator says so; this checks it does not answer, and the target checks again itself).
async fn take_over(
    args: &ClusterMoveArgs,
    link: &PeerLink,
    next: &ClusterMap,
    source: &cloak_cluster::Proxy,
    target: &cloak_cluster::Proxy,
) -> anyhow::Result<()> {
    let partition = args.partition;
    if !args.accept_data_loss {
        bail!(
            "--source-down takes partition {partition} over without {} draining it: writes it \
             acknowledged but had not yet stored are lost; give --accept-data-loss to go on",
            source.name
        );
    }
    if let Ok(()) = listens(&source.address(), QUICK).await {
        bail!(
            "{} at {} accepts connections: it is not down; nothing changed (move partition \
             {partition} without --source-down, it drains it first)",
            source.name,
            source.address()
        );
    }
    let number = partition.to_string();
    // The dead source cannot tell its key's fingerprint; the target's own is what it checks
    // storage against anyway (CHECK and the start's scan refuse a key that does not fit).
    let key_id = key_id(link, target, partition).await?;
    let next_text = next.to_toml();
    let takeover = ["CLOAK", "TAKEOVER", &number, &key_id, &next_text];
    send(link, &target.address(), SLOW, &takeover)
        .await
        .with_context(|| {
            format!(
                "{} did not take partition {partition} over; nothing changed",
                target.name
            )
        })?;
    tell_everyone(next, link).await;
    println!(
        "partition {partition} taken over by {} from {}, which did not answer (map epoch {}): \
         writes {} acknowledged but had not yet stored are not in it",
        target.name,
        source.name,
        next.epoch(),
        source.name
    );
    Ok(())
}

/// The fingerprint of `proxy`'s key for `partition` (`CLOAK KEYID`).
async fn key_id(
    link: &PeerLink,
    proxy: &cloak_cluster::Proxy,
    partition: usize,
) -> anyhow::Result<String> {
    let number = partition.to_string();
    send(link, &proxy.address(), QUICK, &["CLOAK", "KEYID", &number])
        .await
        .with_context(|| format!("{} has no key for partition {partition}", proxy.name))
}

/// One command to the proxy at `address`, its reply awaited up to `timeout`: the reply's text,
/// or the proxy's error.
async fn send(
    link: &PeerLink,
    address: &str,
    timeout: Duration,
    args: &[&str],
) -> anyhow::Result<String> {
    link.ask(address, args, timeout)
        .await
        .map_err(|error| anyhow::anyhow!("the proxy at {address}: {error}"))
}

/// The newest map any proxy knows, starting from `seed`'s. Each is checked as a proxy's start
/// checks the maps it reads (`peer_map`): past epoch 0 only a map whose MAC verifies under
/// `secret` is believed, so whoever answers in a proxy's place cannot have this tool build its
/// move on a map no proxy made (say, one that already gives the partition elsewhere).
async fn newest_map(
    seed: &str,
    link: &PeerLink,
    secret: &ClusterSecret,
) -> anyhow::Result<ClusterMap> {
    let mut map = match peer_map(link, seed, QUICK, Some(secret)).await? {
        PeerMap::Map(map) => map,
        PeerMap::Unreachable(error) => bail!("cannot read the map from {seed}: {error}"),
    };
    let others: Vec<String> = map.proxies().iter().map(|p| p.address()).collect();
    for address in others {
        // A proxy that is down cannot hold a newer map than one it would have been told.
        if let PeerMap::Map(theirs) = peer_map(link, &address, QUICK, Some(secret)).await? {
            map = map
                .newest(theirs)
                .with_context(|| format!("the proxy at {address} has another map"))?;
        }
    }
    Ok(map)
}

/// Refuses to start while any proxy that answers hands a partition over: one move at a time,
/// so that two cannot each make their own map of the next epoch. (Each proxy also refuses a
/// second hand-off while one is in flight on it, and takes only its own map moved by one step.)
async fn no_move_in_flight(map: &ClusterMap, link: &PeerLink) -> anyhow::Result<()> {
    for proxy in map.proxies() {
        let address = proxy.address();
        // A proxy that is down hands nothing over.
        let Ok(text) = send(link, &address, QUICK, &["CLOAK.HEALTH"]).await else {
            continue;
        };
        let report = HealthReport::parse(&text).map_err(anyhow::Error::msg)?;
        if let Some((partition, _)) = report.in_hand_off() {
            bail!(
                "{} is handing over partition {partition}: another move is in flight; run this \
                 one once it is done (a partition a stopped move left released goes back to \
                 its proxy by itself within seconds)",
                proxy.name
            );
        }
    }
    Ok(())
}

/// Sends `map` to every proxy; one that does not take it is named (it learns the map from the
/// others when it starts).
async fn tell_everyone(map: &ClusterMap, link: &PeerLink) {
    tell(map, map.proxies().iter(), link).await;
}

/// Sends `map` to `proxies`, naming each that does not take it; how many took it.
async fn tell<'a>(
    map: &ClusterMap,
    proxies: impl Iterator<Item = &'a cloak_cluster::Proxy>,
    link: &PeerLink,
) -> usize {
    let text = map.to_toml();
    let mut took = 0;
    for proxy in proxies {
        let adopted = send(link, &proxy.address(), QUICK, &["CLOAK", "ADOPT", &text]).await;
        match adopted {
            Ok(_) => took += 1,
            Err(error) => eprintln!(
                "{} at {} did not take the new map ({error:#}); it learns it from the other \
                 proxies when it starts",
                proxy.name,
                proxy.address()
            ),
        }
    }
    took
}
