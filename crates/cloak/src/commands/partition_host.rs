//! What `cloak proxy --cluster` gives its proxy to take partitions on and off while it runs
//! (`cloak_proxy::PartitionHost`), and which map it starts with.
//!
//! Where the map is kept: after every change a proxy writes the map, with its epoch, to
//! `STATE_DIR/cluster.toml` (or, without `--state-dir`, over its `--cluster` file), atomically. A
//! start reads the `--cluster` file, that copy, and every other proxy's current map (`CLOAK
//! MAP`, one second each; a proxy that does not answer is skipped), and takes the one with the
//! highest epoch: so a proxy that was down during a move learns the new map from the others,
//! and a proxy that released a partition never starts it again from an old file. Two different
//! maps with the same epoch stop the start (one of them was not made by a move).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use cloak_cluster::{ADMIN_USER, ChangeError, ClusterMap, ClusterSecret, Partition, Proxy};
use cloak_crypto::MasterKey;
use cloak_proxy::cluster::health_report::{self, HealthError, HealthReport};
use cloak_proxy::cluster::peer::PeerLink;
use cloak_proxy::{BoxFuture, HostedStore, Journal, OwnThread, PartitionHost};
use cloak_storage::tls::ClientTls;
use cloak_storage::tls::client::ClientTlsFiles;

use super::proxy::{open_store, partition_state};
use crate::backend;
use crate::cli::ProxyArgs;
use crate::store::Store;

/// The copy of the map a proxy keeps in its state directory.
const KEPT_MAP: &str = "cluster.toml";
/// How long a start waits for each other proxy's map.
const PEER_TIMEOUT: Duration = Duration::from_secs(1);

/// Opens partitions as `cloak proxy` opened its first ones: the same store flags, key, state
/// directory and storage credentials.
pub struct ProxyPartitions {
    pub store: Store,
    pub args: ProxyArgs,
    /// `--key-file`/`CLOAK_KEY`, from which each partition's key is derived.
    pub key: Option<MasterKey>,
    pub storage_io: Arc<OwnThread>,
    /// Where the map is kept: `STATE_DIR/cluster.toml`, or the `--cluster` file.
    pub map_file: PathBuf,
    /// `--cluster-secret-file`: signs every map kept.
    pub secret: Option<Arc<ClusterSecret>>,
    /// How this proxy reaches the others (as a client; over TLS with `--cluster-ca`).
    pub link: PeerLink,
}

impl ProxyPartitions {
    /// The key this proxy has for `partition`, without making one.
    fn key(&self, partition: usize) -> Result<MasterKey, String> {
        if let Some(key) = &self.key {
            return Ok(key.for_partition(partition as u64));
        }
        let Some(dir) = &self.args.state_dir else {
            return Err(format!(
                "this proxy has no key for partition {partition}: it has no --key-file, \
                 CLOAK_KEY or --state-dir"
            ));
        };
        let file = partition_state(dir, partition).join("key");
        if !file.exists() {
            return Err(format!(
                "this proxy has no key for partition {partition}: it has no --key-file or \
                 CLOAK_KEY to derive it from, and {} does not exist (start the proxies with one \
                 --key-file, or copy that file from the proxy that has it)",
                file.display()
            ));
        }
        MasterKey::load(&file).map_err(|e| e.to_string())
    }
}

impl PartitionHost for ProxyPartitions {
    fn key_id(&self, partition: usize) -> Result<String, String> {
        Ok(self.key(partition)?.fingerprint())
    }

    fn check<'a>(
        &'a self,
        partition: &'a Partition,
        key_id: &'a str,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let index = partition.index;
            let mine = self.key(index)?.fingerprint();
            if mine != key_id {
                return Err(format!(
                    "this proxy's key for partition {index} (fingerprint {mine}) is not the one \
                     its elements are sealed with ({key_id}): start every proxy with the same \
                     --key-file or CLOAK_KEY"
                ));
            }
            // A proxy's memory is its own: elements kept there cannot be read by another.
            if partition.storage == "memory" {
                return Err(format!(
                    "partition {index} keeps its elements in its proxy's memory, which no other \
                     proxy can read; only a partition on a storage server can move"
                ));
            }
            let url = partition.storage.clone();
            let connections = self.args.storage_connections.unwrap_or(4);
            let credentials = credentials(&self.args);
            self.storage_io
                .run(backend::connect(
                    url,
                    connections,
                    credentials,
                    self.store.largest_element(),
                ))
                .await
                .map(drop)
                .map_err(|e| format!("this proxy cannot reach partition {index}'s storage: {e:#}"))
        })
    }

    fn open<'a>(&'a self, partition: &'a Partition) -> BoxFuture<'a, Result<HostedStore, String>> {
        Box::pin(async move {
            let index = partition.index;
            let state = self
                .args
                .state_dir
                .as_deref()
                .map(|dir| partition_state(dir, index));
            if let Some(dir) = &state {
                set_aside_old_ledger(dir)?;
            }
            let key = self.key.as_ref().map(|key| key.for_partition(index as u64));
            let opened = open_store(
                &self.store,
                &self.args,
                state.as_deref(),
                key,
                &partition.storage,
                &self.storage_io,
            )
            .await
            .map_err(|e| format!("{e:#}"))?;
            tracing::info!(partition = index, "{}", opened.line);
            Ok(opened.store)
        })
    }

    fn peer_health<'a>(
        &'a self,
        proxy: &'a Proxy,
    ) -> BoxFuture<'a, Result<HealthReport, HealthError>> {
        Box::pin(health_report::ask(
            &self.link,
            proxy,
            self.secret.as_deref(),
            PEER_TIMEOUT,
        ))
    }

    fn persist(&self, map: &ClusterMap) -> Result<(), String> {
        // Signed, so that a copy changed on disk is refused at the next start (see
        // `ClusterMap::from_signed_toml`).
        let text = match &self.secret {
            Some(secret) => map.to_signed_toml(secret),
            None => map.to_toml(),
        };
        let written = match self.map_file.parent() {
            Some(dir) => std::fs::create_dir_all(dir),
            None => Ok(()),
        }
        .and_then(|()| cloak_storage::dir::write_synced(&self.map_file, text.as_bytes()));
        written.map_err(|e| format!("cannot keep the map in {}: {e}", self.map_file.display()))
    }
}

/// A ledger left in a partition's state directory by an earlier stay of the partition on this
/// proxy describes storage as it was when the partition left; its new owner has written since
/// (and may have emptied slots the ledger still expects), so it would refuse a sound store. It is
/// kept, renamed, for the record; the start checks storage as a first start does (every element
/// must open under the key, bound to its address) and saves a new ledger.
fn set_aside_old_ledger(dir: &Path) -> Result<(), String> {
    let ledger = dir.join("ledger");
    if !ledger.exists() {
        return Ok(());
    }
    let aside = dir.join("ledger.before-move");
    std::fs::rename(&ledger, &aside)
        .map_err(|e| format!("cannot set aside {}: {e}", ledger.display()))?;
    tracing::info!(
        ledger = %aside.display(),
        "set aside the ledger of this partition's earlier stay on this proxy"
    );
    Ok(())
}

/// Where a journal left by a takeover is kept, next to the partition's state.
const JOURNAL_LEFT: &str = "journal.redb.before-takeover";

/// Warns of, and sets aside, the journals of partitions this proxy no longer serves (`map`
/// gives them elsewhere) that still hold records. A partition released by a move drained its
/// journal into storage first (records whose storage confirmation was not yet journaled may
/// remain, already stored); one taken over while this proxy was down (`cloak cluster move
/// --source-down`) may hold writes acknowledged here and never stored, lost to the partition's
/// new owner. Which is which cannot be told without reading storage, which is no longer this
/// proxy's to read, so the warning gives the count and says both. They are not replayed into storage, which another proxy
/// now writes; the file is renamed (kept for the record, never deleted) so that a later move
/// of the partition back here cannot replay them over its newer contents.
pub fn set_aside_stale_journals(
    state_dir: &Path,
    map: &ClusterMap,
    me: usize,
) -> anyhow::Result<()> {
    for partition in map.partitions().iter().filter(|p| p.proxy != me) {
        let dir = partition_state(state_dir, partition.index);
        let path = dir.join("journal.redb");
        if !path.exists() {
            continue;
        }
        let records = cloak_proxy::DiskJournal::open(&path)
            .and_then(|journal| journal.records())
            .with_context(|| format!("the journal of partition {}", partition.index))?
            .len();
        if records == 0 {
            continue;
        }
        // A name no earlier takeover took: one set aside before is kept too.
        let aside = (0..u32::MAX)
            .map(|n| match n {
                0 => dir.join(JOURNAL_LEFT),
                n => dir.join(format!("{JOURNAL_LEFT}.{n}")),
            })
            .find(|candidate| !candidate.exists())
            .with_context(|| format!("no free name to set {} aside", path.display()))?;
        std::fs::rename(&path, &aside)
            .with_context(|| format!("cannot set aside {}", path.display()))?;
        tracing::warn!(
            partition = partition.index,
            records,
            owner = %map.proxies()[partition.proxy].name,
            journal = %aside.display(),
            "partition {} is served elsewhere, but its journal here still holds {records} \
             records (writes this proxy acknowledged; it was taken over while this proxy was \
             down, or storage's confirmation of them was not yet journaled): any of them not \
             stored before are not in the partition; the journal is kept, not replayed",
            partition.index
        );
    }
    Ok(())
}

/// How this proxy reaches storage (its `--storage-*` flags).
pub fn credentials(args: &ProxyArgs) -> backend::StorageCredentials {
    backend::StorageCredentials {
        ca: args.storage_ca.clone(),
        identity: args.storage_cert.clone().zip(args.storage_key.clone()),
        secret_file: args.storage_secret_file.clone(),
    }
}

/// Where this proxy keeps its map: `STATE_DIR/cluster.toml`, or the cluster file itself.
pub fn map_file(cluster_file: &Path, state_dir: Option<&Path>) -> PathBuf {
    match state_dir {
        Some(dir) => dir.join(KEPT_MAP),
        None => cluster_file.to_path_buf(),
    }
}

/// The map this proxy starts with: the newest of the cluster file, its kept copy and the other
/// proxies' (see the module docs), asked over `link`. Every map past epoch 0 must carry a MAC
/// under `secret` (`ClusterMap::from_signed_toml`): a kept copy changed on disk, or a peer's map
/// that no proxy of this cluster signed, stops the start, named.
pub async fn newest_map(
    file: &Path,
    kept: &Path,
    node: &str,
    link: &PeerLink,
    secret: Option<&ClusterSecret>,
) -> anyhow::Result<ClusterMap> {
    let read = |path: &Path| -> anyhow::Result<ClusterMap> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read cluster file {}", path.display()))?;
        ClusterMap::from_signed_toml(&text, secret).with_context(|| format!("{}", path.display()))
    };
    let mut map = read(file)?;
    if kept != file && kept.exists() {
        map = map
            .newest(read(kept)?)
            .with_context(|| format!("{} against {}", kept.display(), file.display()))?;
    }
    let others: Vec<String> = map
        .proxies()
        .iter()
        .filter(|proxy| proxy.name != node)
        .map(|proxy| proxy.address())
        .collect();
    for address in others {
        let theirs = match peer_map(link, &address, PEER_TIMEOUT, secret).await? {
            PeerMap::Map(map) => map,
            PeerMap::Unreachable(error) => {
                tracing::info!(%address, "no map from this proxy ({error}); going on without");
                continue;
            }
        };
        match map.clone().newest(theirs) {
            Ok(newest) => map = newest,
            Err(conflict @ ChangeError::SameEpoch(_)) => {
                bail!("the proxy at {address} has another map: {conflict}")
            }
            Err(other) => {
                tracing::warn!(%address, "its map is not of this cluster ({other}); ignored");
            }
        }
    }
    Ok(map)
}

/// What a proxy answered to `CLOAK MAP`.
pub enum PeerMap {
    /// Its map, checked.
    Map(ClusterMap),
    /// It could not be asked, for this reason.
    Unreachable(String),
}

/// The map the proxy at `address` answers to `CLOAK MAP` (asked over `link` within `timeout`),
/// checked as a start checks every map it reads: past epoch 0 it must carry a MAC that verifies
/// under `secret` (`ClusterMap::from_signed_toml`), or it is refused (`Err`), naming the proxy.
/// Used by a proxy's start and by `cloak cluster move` alike.
pub async fn peer_map(
    link: &PeerLink,
    address: &str,
    timeout: Duration,
    secret: Option<&ClusterSecret>,
) -> anyhow::Result<PeerMap> {
    let text = match link.ask(address, &["CLOAK", "MAP"], timeout).await {
        Ok(text) => text,
        Err(error) => return Ok(PeerMap::Unreachable(error)),
    };
    let map = ClusterMap::from_signed_toml(&text, secret)
        .with_context(|| format!("the map of the proxy at {address} is refused"))?;
    Ok(PeerMap::Map(map))
}

/// The longest answer read from another proxy or by `cloak cluster` (a map of every slot's
/// partition, an `INFO` of many partitions).
pub const ANSWER_LIMIT: usize = 16 << 20;

/// How this proxy, or an operator's tool, reaches the cluster's proxies: over TLS checked
/// against `ca` if one is given, as `login` (user, password).
pub fn peer_link(ca: Option<&Path>, login: Option<(String, String)>) -> anyhow::Result<PeerLink> {
    let tls = match ca {
        Some(ca) => {
            let files = ClientTlsFiles {
                ca: Some(ca.to_path_buf()),
                identity: None,
            };
            Some(ClientTls::load(&files).with_context(|| format!("cluster CA {}", ca.display()))?)
        }
        None => None,
    };
    Ok(PeerLink::new(tls, login, ANSWER_LIMIT))
}

/// The login of the cluster's admin (`AUTH cloak-admin <secret>`).
pub fn admin_login(secret: &ClusterSecret) -> Option<(String, String)> {
    Some((ADMIN_USER.to_string(), secret.password().to_string()))
}

/// The login of a client with the proxies' password, if they have one.
pub fn client_login(password: Option<&str>) -> Option<(String, String)> {
    password.map(|password| ("default".to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use cloak_core::{JournalOp, Record};
    use cloak_proxy::DiskJournal;

    use super::*;

    /// A journal for `partition` in `state` holding one record, as a proxy killed before its
    /// write was stored leaves it.
    fn journal_with_a_record(state: &Path, partition: usize) {
        let dir = partition_state(state, partition);
        std::fs::create_dir_all(&dir).unwrap();
        let journal = DiskJournal::open(&dir.join("journal.redb")).unwrap();
        let record = Record {
            version: 1,
            key: Bytes::from_static(b"k"),
            value: Bytes::from_static(b"v"),
        };
        journal
            .commit(&[JournalOp::Keep(vec![(0, record)])])
            .unwrap();
    }

    /// A journal of a partition the map gives elsewhere is set aside (renamed, never deleted,
    /// never over an earlier one); one of a partition still hosted here is left alone.
    #[test]
    fn journals_of_partitions_taken_over_are_set_aside_and_kept() {
        let state = tempfile::tempdir().unwrap();
        let proxies = [
            ("p0".to_string(), "127.0.0.1:1".to_string()),
            ("p1".to_string(), "127.0.0.1:2".to_string()),
        ];
        let map = ClusterMap::even(&proxies, 2, "memory").unwrap();
        // Partition 0 is p0's, partition 1 p1's: as p0, only partition 1's journal is stale.
        let (mine, theirs) = (0, 1);
        assert_eq!(map.partitions()[mine].proxy, 0);
        for round in ["", ".1"] {
            journal_with_a_record(state.path(), mine);
            journal_with_a_record(state.path(), theirs);
            set_aside_stale_journals(state.path(), &map, 0).unwrap();
            let theirs_dir = partition_state(state.path(), theirs);
            assert!(!theirs_dir.join("journal.redb").exists());
            assert!(
                theirs_dir.join(format!("{JOURNAL_LEFT}{round}")).exists(),
                "set aside as {JOURNAL_LEFT}{round}"
            );
            assert!(
                partition_state(state.path(), mine)
                    .join("journal.redb")
                    .exists()
            );
            std::fs::remove_file(partition_state(state.path(), mine).join("journal.redb")).unwrap();
        }
        assert!(
            partition_state(state.path(), theirs)
                .join(JOURNAL_LEFT)
                .exists(),
            "the first one set aside is still there"
        );
    }
}
