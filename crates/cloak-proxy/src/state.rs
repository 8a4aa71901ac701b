//! The proxy's state directory and what a start does with it.
//!
//! ```text
//! DIR/key            the master key (hex), made on first start unless --key-file/CLOAK_KEY give one
//! DIR/incarnation    how many times a proxy started here; generations are unique per start
//! DIR/journal.redb   records only the proxy held (see `journal`)
//! DIR/ledger         what the store was created with, and the slot versions storage must hold
//!                    (see `ledger`)
//! DIR/recovery.spool the elements the last start recovered, kept until storage holds every
//!                    record again (see `cloak_core::recovery::spool`)
//! ```
//!
//! Every start rebuilds the store from storage and the journal ([`recover`]): nothing the proxy
//! keeps in memory (position maps, key directory, reuse-distance sets) has to survive a crash.
//! What the scan found is checked against the ledger before anything is served.
//!
//! The spool closes a window the new layout's fill opens: it overwrites addresses that held
//! recovered records before the requests carrying those records' new addresses land, so for a
//! moment storage holds some records in no element, and neither does the journal (storage had
//! them). A start writes its spool as `recovery.spool.next`, syncs it and renames it to
//! `recovery.spool` before the fill begins; the proxy deletes it once storage holds every
//! record ([`cloak_core::Scheme::stats`]' `unwritten` is 0). A start that finds one reads it
//! like a part of storage, so a proxy killed mid-fill loses nothing.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cloak_core::recovery::leak_demo;
use cloak_core::recovery::{PROGRESS_TARGET, Progress, spool};
use cloak_core::{Addr, Damage, Findings, Recovered, Recovery, SlotVersions, StorageOp};
use cloak_crypto::{KeyError, MasterKey};
use cloak_storage::Storage;
use cloak_storage::dir::{DirError, write_synced};

use crate::journal::{DiskJournal, Journal, JournalError};
use crate::ledger::{Ledger, LedgerError, StoreManifest};

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state directory {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("state directory {path} is not usable: {reason}")]
    Unusable { path: String, reason: String },
    /// Carries its cause in its message, so the cause is not repeated as a source.
    #[error("state directory {0}")]
    Dir(DirError),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("recovery could not read storage: {0}")]
    Storage(#[from] cloak_core::StorageError),
    #[error(transparent)]
    Recovery(#[from] cloak_core::RecoveryError),
    #[error(
        "the recovery spool an interrupted start left, {path}, cannot be read whole: {problem}. \
         The proxy refuses to start: the records only that spool holds would be lost. To start \
         anyway, pass --accept-data-loss: the spool is then moved aside, and what opens of it is \
         still recovered"
    )]
    EarlierSpool { path: String, problem: Unreadable },
}

/// What of an earlier start's spool could not be read back (see `StateDir::add_earlier_spool`).
#[derive(Debug, Default)]
pub struct Unreadable {
    /// Elements read whole.
    pub read: u64,
    /// Elements read whole that do not open under this store's key at their address (corrupt,
    /// or another store's): their records are lost.
    pub unopened: u64,
    /// The first of those, and why.
    first: Option<(Addr, cloak_core::ElementError)>,
    /// Why the file ends in the middle of an element, if it does: nothing after is readable,
    /// and how many elements were there is unknown.
    pub cut: Option<std::io::Error>,
}

impl Unreadable {
    fn is_whole(&self) -> bool {
        self.unopened == 0 && self.cut.is_none()
    }
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some((address, error)) = &self.first {
            write!(
                f,
                "{} of its {} elements do not open (the first, at address {address}: {error})",
                self.unopened, self.read
            )?;
        }
        if let Some(cut) = &self.cut {
            if self.first.is_some() {
                f.write_str("; ")?;
            }
            write!(
                f,
                "it is cut short after {} elements ({cut}), and how many followed is unknown",
                self.read
            )?;
        }
        Ok(())
    }
}

impl From<DirError> for StateError {
    fn from(error: DirError) -> Self {
        StateError::Dir(error)
    }
}

/// The spool of the last start, while storage may lack some of its records.
const SPOOL: &str = "recovery.spool";
/// The spool of a start in progress, which replaces [`SPOOL`] once it is complete and synced.
const SPOOL_NEXT: &str = "recovery.spool.next";
/// Elements of an earlier spool read at a time.
const SPOOL_CHUNK: usize = 4096;

/// An opened state directory.
pub struct StateDir {
    path: PathBuf,
    pub incarnation: u64,
}

impl StateDir {
    /// Opens (creating it if needed) and checks the directory is writable and syncable, then
    /// takes the next incarnation number. Fails clearly when the disk is full or read-only:
    /// better not to start than to acknowledge writes that cannot be made durable.
    pub fn open(path: &Path) -> Result<Self, StateError> {
        let io = |source| StateError::Io {
            path: path.display().to_string(),
            source,
        };
        if !path.exists() {
            create_private(path).map_err(io)?;
        }
        cloak_storage::dir::prepare(path)?;

        let counter = path.join("incarnation");
        let previous = match fs::read_to_string(&counter) {
            Ok(text) => text
                .trim()
                .parse::<u64>()
                .map_err(|_| StateError::Unusable {
                    path: path.display().to_string(),
                    reason: format!("{} is corrupted", counter.display()),
                })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(io(e)),
        };
        let incarnation = previous + 1;
        write_synced(&counter, incarnation.to_string().as_bytes()).map_err(io)?;
        Ok(Self {
            path: path.to_path_buf(),
            incarnation,
        })
    }

    /// The key stored here, made now if there is none yet.
    pub fn key(&self) -> Result<MasterKey, StateError> {
        let file = self.path.join("key");
        if file.exists() {
            return Ok(MasterKey::load(&file)?);
        }
        let key = MasterKey::generate()?;
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let io = |source| StateError::Io {
            path: file.display().to_string(),
            source,
        };
        let mut f = options.open(&file).map_err(io)?;
        f.write_all(format!("{}\n", key.to_hex()).as_bytes())
            .map_err(io)?;
        f.sync_all().map_err(io)?;
        Ok(key)
    }

    pub fn journal(&self) -> Result<DiskJournal, StateError> {
        Ok(DiskJournal::open(&self.path.join("journal.redb"))?)
    }

    /// The file a start spools its recovered elements to (see the module docs): empty,
    /// readable by this user only.
    fn next_spool(&self) -> Result<File, StateError> {
        let path = self.path.join(SPOOL_NEXT);
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options.open(&path).map_err(|source| StateError::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// Adds to `recovery` the spool an earlier start left, if it left one: its fill may not
    /// have written all of it back. What of it does not open, or a file cut short, refuses the
    /// start, unless `accept_data_loss`: then what opens is kept, the file is moved aside (kept
    /// for the operator, never read again) and an error says how much was lost.
    fn add_earlier_spool(
        &self,
        recovery: &mut Recovery,
        accept_data_loss: bool,
    ) -> Result<(), StateError> {
        let path = self.path.join(SPOOL);
        let io = |source| StateError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(e)),
        };
        tracing::warn!(
            path = %path.display(),
            "the last start did not see its fill through; reading back the records it spooled"
        );
        let unreadable = read_spool(file, recovery)?;
        if unreadable.is_whole() {
            return Ok(());
        }
        if !accept_data_loss {
            return Err(StateError::EarlierSpool {
                path: path.display().to_string(),
                problem: unreadable,
            });
        }
        let aside = self
            .path
            .join(format!("{SPOOL}.unreadable-{}", self.incarnation));
        fs::rename(&path, &aside).map_err(io)?;
        tracing::error!(
            lost_elements = unreadable.unopened,
            cut = unreadable.cut.is_some(),
            moved_to = %aside.display(),
            "--accept-data-loss: the recovery spool an interrupted start left cannot be read \
             whole ({unreadable}); starting without what does not open of it, and the records \
             only it held are lost"
        );
        Ok(())
    }

    /// Makes this start's spool the one a later start reads, now that it is complete and
    /// synced; where it is.
    fn commit_spool(&self) -> Result<PathBuf, StateError> {
        let path = self.path.join(SPOOL);
        let io = |source| StateError::Io {
            path: path.display().to_string(),
            source,
        };
        fs::rename(self.path.join(SPOOL_NEXT), &path).map_err(io)?;
        File::open(&self.path)
            .and_then(|dir| dir.sync_all())
            .map_err(io)?;
        Ok(path)
    }

    /// The store's ledger, checked against `master` and the settings in `manifest`.
    pub fn ledger(
        &self,
        master: &MasterKey,
        manifest: StoreManifest,
    ) -> Result<Ledger, StateError> {
        Ok(Ledger::open(&self.path, master, manifest)?)
    }
}

/// Adds every element of the spool in `file` that opens to `recovery`, and says what did not:
/// elements that do not open, and where the file is cut short.
fn read_spool(file: File, recovery: &mut Recovery) -> Result<Unreadable, StateError> {
    let mut unreadable = Unreadable::default();
    let mut entries = spool::entries(file);
    loop {
        let mut chunk = Vec::with_capacity(SPOOL_CHUNK);
        for entry in entries.by_ref().take(SPOOL_CHUNK) {
            match entry {
                Ok(element) => chunk.push(element),
                Err(error) => unreadable.cut = Some(error),
            }
        }
        let last = chunk.len() < SPOOL_CHUNK;
        unreadable.read += chunk.len() as u64;
        for unopened in recovery.add_spooled(chunk)? {
            unreadable.unopened += 1;
            unreadable.first.get_or_insert(unopened);
        }
        if last {
            return Ok(unreadable);
        }
    }
}

/// Creates `path` (and missing parents) readable by this user only: it holds the master key
/// and a journal of keys and values in plaintext.
fn create_private(path: &Path) -> std::io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(path)
}

/// What a start found, for the log and the operator.
pub struct RecoveryReport {
    pub recovered: Recovered,
    /// What is wrong with the store found; the caller refuses to start on any of it unless the
    /// operator accepts the loss.
    pub findings: Findings,
    pub journal_records: usize,
    pub took: Duration,
    /// When the proxy took the scan's last answer (after the server sent it, and after the
    /// chunk before was spooled): the instant a restart's fill counts its public clock from.
    pub scanned: Instant,
    /// The spool this start keeps in the state directory until storage holds every record
    /// again, when the proxy deletes it (see the module docs).
    pub spool: Option<PathBuf>,
}

/// Rebuilds the store's records with `recovery` (made for the scheme's elements: its format,
/// and the room and element length it expects) from storage (a full scan), the spool an
/// interrupted start left in `state` and the journal, and checks them against `expected`, the
/// slot versions storage must hold (from the ledger; empty without one). With a state
/// directory, the recovered elements are spooled there (see the module docs). An earlier spool
/// that cannot be read whole refuses the start unless `accept_data_loss`.
pub async fn recover(
    storage: &dyn Storage,
    mut recovery: Recovery,
    journal: Option<&dyn Journal>,
    expected: &SlotVersions,
    state: Option<&StateDir>,
    accept_data_loss: bool,
) -> Result<RecoveryReport, StateError> {
    let start = Instant::now();
    if let Some(state) = state {
        recovery = recovery.spooling_to(state.next_spool()?);
    }
    // Progress is only logged here: the scan's requests are the same full scan in address order
    // as without it, so the server sees nothing new.
    let mut progress = Progress::every(Progress::INTERVAL);
    // A pipeline of two: the next chunk's request goes out before this chunk's elements are
    // spooled, so storage reads and sends one chunk while the proxy writes the one before to
    // local disk. The requests are the ones a chunk-by-chunk scan sends, in the same order (each
    // starts after the last address of the chunk before), so the server sees nothing new.
    //
    // When each request leaves, then, follows storage's answers and the spooling of a chunk,
    // which appends its elements as they came, as many bytes for each whatever it holds
    // (`Recovery::spool`). The work that follows the records (opening the elements, keeping the
    // newest record of each slot) waits for the scan's end: had a request waited for the chunk
    // before to be opened, its time would have told the server how many keys that chunk held
    // (review finding M2 of the fill-clock work).
    //
    // The instant the proxy takes the last answer is the one a restart's fill counts its clock
    // from (see `RecoveryReport::scanned`): everything the proxy does after it (spooling the
    // last chunk, opening every element, sorting, the new instance's start) is hidden behind
    // that clock. Not the instant the last request left: opening can only start once its
    // answer is in, so a server that held that answer could have moved the proxy's work past
    // the clock's wait and read it off the fill's lateness (review M1 of this change). The
    // answer is taken once the chunk before it is spooled too, work that follows only the
    // chunk's size and the host's disk.
    let mut reply = match recovery.next_request() {
        Some(first) => Some(storage.call(first).await?),
        None => None,
    };
    let mut scanned = Instant::now();
    while let Some(answer) = reply.take() {
        let chunk = recovery.accept(answer)?;
        match recovery.next_request() {
            Some(next) => {
                let (next_answer, spooled) = tokio::join!(storage.call(next), async {
                    recovery.spool(chunk)?;
                    if leak_demo::opened_scan() {
                        recovery.open_spooled()?;
                    }
                    Ok::<_, cloak_core::RecoveryError>(())
                });
                spooled?;
                reply = Some(next_answer?);
                scanned = Instant::now();
            }
            None => recovery.spool(chunk)?,
        }
        progress.scanned(recovery.scanned());
    }
    // Off the server's view from here on (see above): a large store's elements take seconds
    // to open, so the log says so.
    let scan_took = start.elapsed();
    tracing::info!(
        target: PROGRESS_TARGET,
        elements = recovery.scanned(),
        took = ?scan_took,
        "scanned storage; opening the scanned elements"
    );
    recovery.open_spooled()?;
    tracing::info!(
        target: PROGRESS_TARGET,
        took = ?(start.elapsed() - scan_took),
        "opened the scanned elements"
    );
    // Read after the scan, so the requests storage sees are the same with or without it.
    if let Some(state) = state {
        state.add_earlier_spool(&mut recovery, accept_data_loss)?;
    }
    let journaled = match journal {
        Some(journal) => journal.records()?,
        None => Vec::new(),
    };
    let journal_records = journaled.len();
    let recovered = recovery.finish(journaled)?;
    let spool = state.map(StateDir::commit_spool).transpose()?;
    Ok(RecoveryReport {
        findings: recovered.findings(expected),
        recovered,
        journal_records,
        took: start.elapsed(),
        scanned,
        spool,
    })
}

/// Elements deleted per request by [`discard_damaged`].
const DISCARD_CHUNK: usize = 4096;

/// Deletes the damaged elements a start accepted losing. The fill rewrites every address a scheme
/// uses, but not one it does not (a foreign element at a label no scheme instance will write),
/// and such an element would refuse every later start. What the server learns: the addresses of
/// elements it altered or placed itself, which it knows already.
pub async fn discard_damaged(storage: &dyn Storage, damage: &Damage) -> Result<(), StateError> {
    let addresses: Vec<Addr> = damage.addresses().collect();
    for chunk in addresses.chunks(DISCARD_CHUNK) {
        storage.call(StorageOp::Delete(chunk.to_vec())).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incarnations_count_up_and_the_key_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let first = StateDir::open(dir.path()).unwrap();
        let key = first.key().unwrap();
        let second = StateDir::open(dir.path()).unwrap();
        assert_eq!((first.incarnation, second.incarnation), (1, 2));
        assert_eq!(second.key().unwrap().to_hex(), key.to_hex());
    }

    #[cfg(unix)]
    #[test]
    fn the_directory_and_the_journal_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        let state = StateDir::open(&path).unwrap();
        let _journal = state.journal().unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o700);
        assert_eq!(mode(&path.join("journal.redb")), 0o600);
    }

    #[test]
    fn an_unusable_directory_is_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        fs::write(&file, b"x").unwrap();
        assert!(StateDir::open(&file).is_err());
        assert!(StateDir::open(&file.join("below-a-file")).is_err());
    }
}
