//! `cloak server --data-dir`: elements in memory for reads, every write in a log on disk first.
//!
//! Reads and scans are served from memory exactly as by [`MemoryStorage`](crate::MemoryStorage).
//! A write or delete is appended to the [`log`] as one checksummed record and fsynced before it
//! is applied in memory and acknowledged, so an acknowledged batch survives a crash and a batch a
//! crash interrupted is either whole or absent at the next start (never a mix). One writer thread
//! takes every write queued meanwhile, from all connections, into one append and one fsync
//! (group commit).
//!
//! Why a log and not an embedded B-tree: Cloak rewrites its whole batch (thousands of random
//! addresses) every 20 ms, idle or not. redb, measured on this workload (100,000 elements of
//! 1.2 KB, batches of 2,720), took 68 ms per batch commit (47 ms CPU); appending the batch to a
//! log is one sequential write and one fsync. The log holds dead records too, so it is compacted:
//! when it exceeds twice the live data, what is still live in the oldest segment is copied to the
//! newest and the oldest segment deleted. Cloak rewrites every element within `T` batches, so old
//! segments are mostly dead and compaction copies little.
//!
//! Restart replays the log into memory; the elements, and so a [`StorageOp::Scan`], are as they
//! were after the last acknowledged write.

mod log;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use cloak_core::{Addr, MemoryStore};
use hashbrown::HashMap;
use tokio::sync::oneshot;

use crate::dir::{self, DirError};
use crate::{Storage, StorageError, StorageOp, StorageReply};
use log::{Log, LogError, MIN_SEGMENT_BYTES};

/// Bytes a record spends on each entry besides its value (address and length).
const ENTRY_OVERHEAD: u64 = 20;

/// The messages carry their causes, so the causes are not repeated as sources.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// The directory cannot be used.
    #[error("data directory: {0}")]
    Dir(DirError),
    /// The log cannot be read or written.
    #[error("data directory: {0}")]
    Log(LogError),
    /// The log writer's thread did not start.
    #[error("data directory: cannot start the log writer: {0}")]
    Thread(std::io::Error),
}

impl From<DirError> for DiskError {
    fn from(error: DirError) -> Self {
        DiskError::Dir(error)
    }
}

impl From<LogError> for DiskError {
    fn from(error: LogError) -> Self {
        DiskError::Log(error)
    }
}

/// What [`DiskStorage::open`] found.
#[derive(Clone, Debug)]
pub struct Opened {
    /// Elements the log holds.
    pub elements: usize,
    /// Bytes of those elements.
    pub bytes: usize,
    /// Bytes of the log file.
    pub log_bytes: u64,
    /// How long reading the log took.
    pub took: Duration,
}

struct PendingWrite {
    op: StorageOp,
    done: oneshot::Sender<Result<StorageReply, StorageError>>,
}

/// Elements in memory, every write and delete appended to a log and fsynced before it is
/// answered (`--data-dir`).
pub struct DiskStorage {
    state: Arc<Mutex<Indexed>>,
    /// `None` only while dropping.
    writes: Option<mpsc::Sender<PendingWrite>>,
    writer: Option<std::thread::JoinHandle<()>>,
    dir: PathBuf,
    _lock: File,
}

impl DiskStorage {
    /// Opens (creating if needed) the data directory `dir` and loads its elements. Fails clearly
    /// when the directory cannot take writes, another server uses it, or the log is corrupted.
    pub fn open(dir: &Path) -> Result<(Self, Opened), DiskError> {
        let start = Instant::now();
        dir::prepare(dir)?;
        let lock = dir::lock(dir)?;
        let mut indexed = Indexed::default();
        let log = Log::open(dir, |segment, op| indexed.apply(segment, op))?;
        let opened = Opened {
            elements: indexed.store.len(),
            bytes: indexed.store.bytes(),
            log_bytes: log.bytes(),
            took: start.elapsed(),
        };
        let state = Arc::new(Mutex::new(indexed));
        let (writes, queue) = mpsc::channel();
        let writer_state = state.clone();
        let writer = std::thread::Builder::new()
            .name("cloak-data-log".into())
            .spawn(move || write_loop(log, writer_state, queue))
            .map_err(DiskError::Thread)?;
        let storage = Self {
            state,
            writes: Some(writes),
            writer: Some(writer),
            dir: dir.to_path_buf(),
            _lock: lock,
        };
        Ok((storage, opened))
    }

    /// Number of elements and their total size in bytes.
    pub fn usage(&self) -> (usize, usize) {
        let state = lock(&self.state);
        (state.store.len(), state.store.bytes())
    }
}

impl Drop for DiskStorage {
    /// Lets the writer finish what was queued, so the directory is free when this returns.
    fn drop(&mut self) {
        drop(self.writes.take());
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn lock(state: &Mutex<Indexed>) -> MutexGuard<'_, Indexed> {
    // Indexed::apply never panics between its updates, so a poisoned lock still holds a
    // consistent state.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl Storage for DiskStorage {
    async fn call(&self, op: StorageOp) -> Result<StorageReply, StorageError> {
        match op {
            StorageOp::Read(_) | StorageOp::Scan { .. } => Ok(lock(&self.state).store.apply(op)),
            StorageOp::Write(_) | StorageOp::Delete(_) => {
                let (done, answer) = oneshot::channel();
                let stopped = || StorageError("the data directory's log writer stopped".into());
                self.writes
                    .as_ref()
                    .ok_or_else(stopped)?
                    .send(PendingWrite { op, done })
                    .map_err(|_| stopped())?;
                answer.await.map_err(|_| stopped())?
            }
        }
    }

    /// Nothing to fence: only this process writes the directory (a second one is refused at
    /// open), and what an earlier process logged is all replayed by then.
    async fn fence(&self) -> Result<(), StorageError> {
        Ok(())
    }

    fn describe(&self) -> String {
        format!("disk {}", self.dir.display())
    }
}

/// The elements, and for each the segment its live record is in.
#[derive(Default)]
struct Indexed {
    store: MemoryStore,
    home: HashMap<Addr, (u64, u32)>,
    /// Bytes of live records (values plus [`ENTRY_OVERHEAD`]) in each segment.
    live: BTreeMap<u64, u64>,
}

impl Indexed {
    fn apply(&mut self, segment: u64, op: StorageOp) {
        match &op {
            StorageOp::Write(writes) => {
                for (addr, value) in writes {
                    self.rehome(segment, *addr, value.len() as u32);
                }
            }
            StorageOp::Delete(addrs) => {
                for addr in addrs {
                    if let Some(old) = self.home.remove(addr) {
                        self.unlive(old);
                    }
                }
            }
            StorageOp::Read(_) | StorageOp::Scan { .. } => return,
        }
        self.store.apply(op);
    }

    /// `addr`'s live record is now in `segment`.
    fn rehome(&mut self, segment: u64, addr: Addr, len: u32) {
        if let Some(old) = self.home.insert(addr, (segment, len)) {
            self.unlive(old);
        }
        *self.live.entry(segment).or_default() += u64::from(len) + ENTRY_OVERHEAD;
    }

    fn unlive(&mut self, (segment, len): (u64, u32)) {
        if let Some(live) = self.live.get_mut(&segment) {
            *live = live.saturating_sub(u64::from(len) + ENTRY_OVERHEAD);
        }
    }

    fn live_bytes(&self) -> u64 {
        self.live.values().sum()
    }

    /// The live elements whose record is in `segment`, in address order.
    fn live_in(&self, segment: u64) -> Vec<(Addr, Bytes)> {
        let mut addrs: Vec<Addr> = self
            .home
            .iter()
            .filter(|(_, (s, _))| *s == segment)
            .map(|(a, _)| *a)
            .collect();
        addrs.sort_unstable();
        addrs
            .into_iter()
            .filter_map(|a| Some((a, self.store.element(a)?)))
            .collect()
    }
}

fn write_loop(mut log: Log, state: Arc<Mutex<Indexed>>, queue: mpsc::Receiver<PendingWrite>) {
    while let Ok(first) = queue.recv() {
        let mut group = vec![first];
        group.extend(queue.try_iter());
        let records: Vec<Bytes> = group.iter().map(|w| log::record(&w.op)).collect();
        match log.append(&records) {
            Ok(()) => {
                let segment = log.newest();
                let mut replies = Vec::with_capacity(group.len());
                {
                    let mut state = lock(&state);
                    for write in group {
                        state.apply(segment, write.op);
                        replies.push(write.done);
                    }
                }
                for done in replies {
                    let _ = done.send(Ok(StorageReply::Done));
                }
            }
            Err(error) => {
                tracing::error!(%error, "a write could not be made durable; refusing it");
                let error = StorageError(format!("the server cannot make writes durable: {error}"));
                for write in group {
                    let _ = write.done.send(Err(error.clone()));
                }
            }
        }
        // Also after a failed append: on a full disk, compaction is what frees space.
        if let Err(error) = maintain(&mut log, &state) {
            tracing::error!(%error, "log maintenance failed; will try again after the next write");
        }
    }
}

/// Segments are a sixteenth of the live data (at least [`MIN_SEGMENT_BYTES`]): small enough that
/// the log stays near twice the live data, few enough that finding a segment's live records (a
/// pass over the index) stays rare.
fn segment_bytes(live: u64) -> u64 {
    (live / 16).max(MIN_SEGMENT_BYTES)
}

/// Starts a new segment when the newest is full, and keeps the log within about twice the live
/// data: the oldest segment's live records are copied to the newest, then it is deleted.
fn maintain(log: &mut Log, state: &Mutex<Indexed>) -> Result<(), LogError> {
    let live = lock(state).live_bytes();
    log.roll_if_full(segment_bytes(live))?;
    // Each round retires one segment, so a round per segment that exists now is enough.
    for _ in 0..log.segment_count() {
        let live = lock(state).live_bytes();
        if log.segment_count() < 2 || log.bytes() <= 2 * live + segment_bytes(live) {
            return Ok(());
        }
        let oldest = log.oldest();
        let copy = lock(state).live_in(oldest);
        if !copy.is_empty() {
            let moved: Vec<(Addr, u32)> = copy.iter().map(|(a, v)| (*a, v.len() as u32)).collect();
            log.append(&[log::record(&StorageOp::Write(copy))])?;
            let newest = log.newest();
            let mut state = lock(state);
            for (addr, len) in moved {
                state.rehome(newest, addr, len);
            }
        }
        // Deletes recorded in the oldest segment only hid records in segments already gone.
        log.remove_oldest()?;
        lock(state).live.remove(&oldest);
        log.roll_if_full(segment_bytes(live))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(reply: StorageReply) -> Vec<Option<Bytes>> {
        match reply {
            StorageReply::Values(v) => v,
            other => panic!("expected values, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn writes_survive_reopening_and_compaction_keeps_the_live_ones() {
        let dir = tempfile::tempdir().unwrap();
        let big = |i: u8| Bytes::from(vec![i; 64 << 10]);
        {
            let (disk, opened) = DiskStorage::open(dir.path()).unwrap();
            assert_eq!(opened.elements, 0);
            disk.call(StorageOp::Write(vec![(7, Bytes::from_static(b"kept"))]))
                .await
                .unwrap();
            disk.call(StorageOp::Write(vec![(8, Bytes::from_static(b"gone"))]))
                .await
                .unwrap();
            disk.call(StorageOp::Delete(vec![8])).await.unwrap();
            // Overwrite a few addresses until several segments' worth of dead records piled up.
            for round in 0..(5 * MIN_SEGMENT_BYTES / (64 << 10) / 4) as u8 {
                let writes = (0..4u128).map(|a| (100 + a, big(round))).collect();
                disk.call(StorageOp::Write(writes)).await.unwrap();
            }
        }
        let segments = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some("log".as_ref()))
            .count();
        assert!(segments <= 4, "compaction keeps the log short: {segments}");

        let (disk, opened) = DiskStorage::open(dir.path()).unwrap();
        assert_eq!(opened.elements, 5);
        let last = (5 * MIN_SEGMENT_BYTES / (64 << 10) / 4) as u8 - 1;
        let got = values(
            disk.call(StorageOp::Read(vec![7, 8, 100, 103]))
                .await
                .unwrap(),
        );
        assert_eq!(
            got,
            vec![
                Some(Bytes::from_static(b"kept")),
                None,
                Some(big(last)),
                Some(big(last))
            ]
        );
        let StorageReply::Entries(entries) = disk
            .call(StorageOp::Scan {
                after: None,
                limit: 10,
            })
            .await
            .unwrap()
        else {
            panic!("a scan answers entries")
        };
        let addrs: Vec<Addr> = entries.iter().map(|(a, _)| *a).collect();
        assert_eq!(addrs, vec![7, 100, 101, 102, 103]);
    }

    #[tokio::test]
    async fn concurrent_writes_share_commits_and_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, _) = DiskStorage::open(dir.path()).unwrap();
        let disk = Arc::new(disk);
        let tasks: Vec<_> = (0..64u128)
            .map(|i| {
                let disk = disk.clone();
                tokio::spawn(async move {
                    disk.call(StorageOp::Write(vec![(i, Bytes::from(vec![i as u8; 100]))]))
                        .await
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        drop(disk);
        let (_, opened) = DiskStorage::open(dir.path()).unwrap();
        assert_eq!(opened.elements, 64);
    }
}
