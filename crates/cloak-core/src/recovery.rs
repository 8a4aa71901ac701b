//! Rebuilding a store after the proxy lost its memory: scan storage, add the journal.
//!
//! Every element carries the records it holds (slot, key, value, version), and the journal holds
//! every record the proxy alone had. So whatever the scheme and whatever a crash interrupted,
//! the newest version of each slot among storage and journal is its state: a write that got
//! `+OK` is in one of them. [`Recovery`] scans (sans-io: it emits [`StorageOp::Scan`] requests)
//! and [`Recovered`] holds the result, from which the proxy rebuilds the key directory and starts
//! a new scheme instance with a fresh random layout.
//!
//! Memory stays near the steady state's: as the scan goes, recovery appends every element to a
//! spool on local disk ([`spool`]), as storage sent it; once the scan is done it reads them
//! back a chunk at a time, opens them, and keeps per slot only its newest version, key,
//! envelope and where its element is in the spool. The new instance's fill reads each value
//! back as it places it ([`RecoveredRecords::read_all`]), and a client's read before the fill
//! is done reads it from there too ([`RecoveredRecords::read`]).
//!
//! What the server learns: a scan of every element, then the new instance's initial fill. Both
//! read and write everything, whatever the workload was, so recovery reveals nothing about it.
//! The scan's requests wait only for storage and for appending each chunk to the spool, the
//! same work whatever the chunk holds ([`Recovery::spool`]). Each fill request reads back as
//! many spooled elements whatever records it carries (decoy reads, see `records`), the largest
//! part of the work that followed the records. The rest of that work (under a microsecond a
//! record), and the work between the scan's end and the fill's start (opening the scanned
//! elements, sorting the records, the key directory, the new instance's start), still grow with
//! the number of records; the fill's public clock hides both from the server
//! (`cloak_schemes::shell::fill`): its requests leave at instants counted from the scan's last
//! answer, whatever the work took.
//! What recovery trusts: nothing it cannot check. An element that does not open is recorded as
//! [`Damage`], never skipped, and [`Recovered::findings`] compares every slot with the versions
//! the proxy last knew storage held, so deleted, rolled-back or resurrected keys show up; the
//! proxy refuses to start on any finding unless its operator accepts the loss (see
//! [`crate::integrity`]).

mod decoys;
mod key_copy;
pub mod leak_demo;
pub mod pace;
mod records;
pub mod spool;

use std::borrow::Cow;
use std::fs::File;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use bytes::Bytes;
// Slots come from authenticated elements the proxy wrote, never chosen by a client or the
// server: a fast hash is safe for them.
use hashbrown::hash_table::Entry;
use hashbrown::{HashMap, HashTable};

use crate::element::{ElementCodec, ElementError, NO_SLOT, Record, RecordLayout, RecordView, Slot};
use crate::integrity::{Damage, Findings, SlotVersions};
use crate::storage::{Addr, STORE_MARKER, StorageError, StorageOp, StorageReply};
use crate::workers::{in_parts_on_every_core, on_every_core};
use decoys::DecoyPool;
pub use records::RecoveredRecords;
use records::{Found, Value};
use spool::{SpoolWriter, Spooled};

/// Why a recovery stopped, or a recovered record could not be handed over.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    /// Storage failed or answered the scan wrongly.
    #[error("recovery could not read storage: {0}")]
    Storage(#[from] StorageError),
    /// The local file holding the scanned elements failed.
    #[error(
        "the recovery spool (the scanned elements kept in a temporary file until the new \
         layout's fill writes them) failed: {0}"
    )]
    Spool(#[from] std::io::Error),
    /// The spool gave back something other than what recovery wrote to it.
    #[error(
        "the recovery spool gave back slot {slot} altered ({reason}): the local temporary file \
         was changed while the proxy ran"
    )]
    Altered {
        /// The slot whose record could not be read back.
        slot: Slot,
        /// What was wrong.
        reason: &'static str,
    },
}

/// Elements read per scan request.
pub const SCAN_CHUNK: u32 = 4096;

/// Most slots [`Recovery::expecting`] makes room for in advance (slots past it are kept in a
/// hash map): the room is reserved, not touched, until records arrive, but a capacity given by
/// mistake should not reserve terabytes.
const MAX_RESERVED: usize = 1 << 28;

/// The `tracing` target of a start's progress lines: the scan's and the fill's (see
/// [`Progress`]). Tools that wait for a proxy to start, like the benchmark, follow these lines.
pub const PROGRESS_TARGET: &str = "cloak::recovery";

/// Logs how far a start got, every few seconds: a large store takes minutes to scan and to
/// fill, and a start-up that says nothing for that long looks hung. A scan's line gives the
/// elements scanned and the rate, not a total, which storage cannot say before the scan ends; a
/// fill's gives the elements written of all, the rate and the time left at that rate.
pub struct Progress {
    every: Duration,
    started: Instant,
    last: Instant,
}

impl Progress {
    /// Time between two lines of a long scan or fill.
    pub const INTERVAL: Duration = Duration::from_secs(3);

    /// A line every `every`.
    pub fn every(every: Duration) -> Self {
        let now = Instant::now();
        Self {
            every,
            started: now,
            last: now,
        }
    }

    /// `scanned` elements are read: logs a line if the last was long enough ago, and says
    /// whether it did.
    pub fn scanned(&mut self, scanned: u64) -> bool {
        let Some(per_second) = self.due(scanned) else {
            return false;
        };
        tracing::info!(target: PROGRESS_TARGET, scanned, per_second, "scanning storage");
        true
    }

    /// `filled` elements of `of` are written: logs a line if the last was long enough ago, and
    /// says whether it did.
    pub fn filled(&mut self, filled: u64, of: u64) -> bool {
        let Some(per_second) = self.due(filled) else {
            return false;
        };
        let eta_seconds = of.saturating_sub(filled).checked_div(per_second);
        tracing::info!(
            target: PROGRESS_TARGET,
            filled,
            of,
            per_second,
            eta_seconds,
            "filling storage"
        );
        true
    }

    /// The rate of `done` since the start, per second, if a line is due.
    fn due(&mut self, done: u64) -> Option<u64> {
        if self.last.elapsed() < self.every {
            return None;
        }
        self.last = Instant::now();
        let seconds = self.started.elapsed().as_secs_f64();
        Some(if seconds > 0.0 {
            (done as f64 / seconds) as u64
        } else {
            0
        })
    }
}

/// How a scheme's elements are encoded.
pub enum ElementFormat {
    /// Sealed single-record elements.
    Sealed(ElementCodec),
    /// The unsafe baseline's plaintext records.
    Plain(RecordLayout),
}

impl ElementFormat {
    /// The longest element this format encodes: a sealed record, or a full record's plaintext.
    pub fn element_len(&self) -> usize {
        match self {
            ElementFormat::Sealed(codec) => codec.element_len(),
            ElementFormat::Plain(layout) => layout.encoded_len(),
        }
    }

    /// An element at `address` holding `record` for `slot`, as a store written by an earlier
    /// run (generation 1) would hold it: what recovery reads back. Tools use it to hand a proxy
    /// a ready-made store (the benchmark's preload) through the ordinary recovery path.
    pub fn encode(&mut self, address: Addr, slot: Slot, record: &Record) -> Bytes {
        match self {
            ElementFormat::Sealed(codec) => codec.seal(
                cloak_crypto::Binding {
                    address,
                    generation: 1,
                },
                slot,
                record,
            ),
            ElementFormat::Plain(layout) => {
                let mut out = Vec::new();
                layout.encode_compact(slot, record, &mut out);
                Bytes::from(out)
            }
        }
    }

    /// Does the work of opening an element `len` bytes longer than one just opened (see
    /// `cloak_crypto::Sealer::spend_opening`); a plaintext element needs none.
    pub fn spend_opening(&self, len: usize) {
        if let ElementFormat::Sealed(codec) = self {
            codec.sealer.spend_opening(len);
        }
    }

    /// The generation that wrote `element` and every record it holds.
    pub fn records(
        &self,
        address: Addr,
        element: &Bytes,
    ) -> Result<(u64, Vec<(Slot, Record)>), ElementError> {
        let (generation, plaintext) = self.open(address, element)?;
        // A plaintext record is a slice of the element: recovery keeps a copy of its key only,
        // and a value read back from the spool is a slice of its own small buffer.
        let plaintext = match plaintext {
            Cow::Owned(opened) => Bytes::from(opened),
            Cow::Borrowed(_) => element.clone(),
        };
        let records = (self.views(&plaintext)?.into_iter())
            .map(|(slot, view)| (slot, view.shared_in(&plaintext)))
            .collect();
        Ok((generation, records))
    }

    /// The generation that wrote `element` and every record it holds, as recovery keeps them
    /// ([`Kept`]): what opening each scanned element on every core makes, so that no buffer is
    /// shared between the core that opened it and the one that keeps its records.
    fn kept(&self, address: Addr, element: &[u8]) -> Result<(u64, Vec<Kept>), ElementError> {
        let (generation, plaintext) = self.open(address, element)?;
        let kept = (self.views(&plaintext)?.into_iter())
            .map(|(slot, view)| Kept {
                slot,
                has_value: !view.value.is_empty(),
                found: Found::new(view, Value::Empty),
            })
            .collect();
        Ok((generation, kept))
    }

    /// The generation that wrote `element` read at `address`, and its plaintext: a sealed
    /// element opened, a plaintext one as it is.
    fn open<'a>(
        &self,
        address: Addr,
        element: &'a [u8],
    ) -> Result<(u64, Cow<'a, [u8]>), ElementError> {
        match self {
            ElementFormat::Sealed(codec) => {
                let (generation, opened) = codec.sealer.open_found(address, element)?;
                Ok((generation, Cow::Owned(opened)))
            }
            ElementFormat::Plain(_) => Ok((0, Cow::Borrowed(element))),
        }
    }

    /// The records of an element's `plaintext` (see [`ElementFormat::open`]), as views of it.
    fn views<'a>(&self, plaintext: &'a [u8]) -> Result<Vec<(Slot, RecordView<'a>)>, ElementError> {
        match self {
            ElementFormat::Sealed(codec) => codec.views(plaintext),
            ElementFormat::Plain(layout) => Ok(vec![layout.view(plaintext)?]),
        }
    }
}

/// A record of an opened element as [`Recovery::keep`] takes it: its slot, and what the table
/// of newest records holds of it (its own copy of the key, the type and deadline of its value),
/// the value's place not set yet.
struct Kept {
    slot: Slot,
    found: Found,
    /// Whether the record holds a value (whose place in the spool `keep` sets).
    has_value: bool,
}

/// A chunk of the scan, in address order, not opened yet (see [`Recovery::accept`]).
pub struct ScannedChunk(Vec<(Addr, Bytes)>);

/// Rebuilds the store's records from a scan of storage (see the module docs).
pub struct Recovery {
    format: ElementFormat,
    after: Option<Addr>,
    done: bool,
    newest: Newest,
    spool: SpoolWriter,
    /// The spooled elements the fill's decoys may read: those that opened (see `decoys`).
    decoys: DecoyPool,
    /// The element the spool is padded with (no slot, no record), sealed once.
    padding: Option<Bytes>,
    elements: u64,
    /// Bytes of the spool [`Recovery::open_spooled`] has opened.
    opened_to: u64,
    damage: Damage,
    max_generation: u64,
    /// The length of every element the scheme writes, if the caller said (see
    /// [`Recovery::sized`]).
    element_len: Option<usize>,
    /// The longest element the scheme writes, if the caller said (see
    /// [`Recovery::reading_as_long_as`]).
    longest: u32,
}

impl Recovery {
    /// A recovery of elements in `format`.
    pub fn new(format: ElementFormat) -> Self {
        Self {
            format,
            after: None,
            done: false,
            newest: Newest::default(),
            spool: SpoolWriter::default(),
            decoys: DecoyPool::default(),
            padding: None,
            elements: 0,
            opened_to: 0,
            damage: Damage::default(),
            max_generation: 0,
            element_len: None,
            longest: 0,
        }
    }

    /// Says that every element the scheme writes is `len` bytes long (each scheme's sealed
    /// elements have one length, which the server sees): a sealed element of any other length
    /// is none of the scheme's, and the scan records it as damage at once instead of spooling it
    /// (see [`Recovery::spool`]). Without it, any length that seals a whole number of records
    /// is spooled.
    pub fn sized(mut self, len: usize) -> Self {
        self.element_len = Some(len);
        self
    }

    /// Says that the scheme's longest element is `len` bytes: the fill then reads every element
    /// back from the spool as if it were that long (see `RecoveredRecords::reading_as_long_as`;
    /// a tree scheme's spool may mix lengths, a dense scheme's has this one).
    pub fn reading_as_long_as(mut self, len: usize) -> Self {
        self.longest = u32::try_from(len).unwrap_or(u32::MAX);
        self
    }

    /// Makes room now for the records of `slots` slots (the store's size, which the proxy
    /// knows), so the table of newest records is not grown over and over as the scan goes: at
    /// ten million records that was seconds of a start, and each growth held the old table and
    /// the new one at once. Only a hint: more slots still fit.
    pub fn expecting(mut self, slots: u64) -> Self {
        self.newest = Newest::for_slots(usize::try_from(slots).unwrap_or(usize::MAX));
        self
    }

    /// A recovery that spools to `file` (empty, open for reading and writing) and syncs it to
    /// disk when finished, instead of to an unlinked temporary file (see [`spool`]).
    pub fn spooling_to(mut self, file: File) -> Self {
        self.spool = SpoolWriter::durable(file);
        self
    }

    /// Elements read so far.
    pub fn scanned(&self) -> u64 {
        self.elements
    }

    /// The next scan request, or `None` once storage has been read to the end.
    pub fn next_request(&self) -> Option<StorageOp> {
        (!self.done).then_some(StorageOp::Scan {
            after: self.after,
            limit: SCAN_CHUNK,
        })
    }

    /// Takes storage's answer to the last request from [`Recovery::next_request`]: checks it
    /// ([`Recovery::accept`]) and spools its elements ([`Recovery::spool`]). They are opened by
    /// [`Recovery::open_spooled`], or at the latest by [`Recovery::finish`].
    pub fn handle(&mut self, reply: StorageReply) -> Result<(), RecoveryError> {
        let chunk = self.accept(reply)?;
        self.spool(chunk)
    }

    /// Checks storage's answer to the last request from [`Recovery::next_request`] and moves the
    /// scan past it, without spooling its elements yet: the next request can then go out while
    /// [`Recovery::spool`] writes these.
    pub fn accept(&mut self, reply: StorageReply) -> Result<ScannedChunk, StorageError> {
        let StorageReply::Entries(mut entries) = reply else {
            return Err(StorageError(format!(
                "storage answered a scan with {}",
                reply.summary()
            )));
        };
        // A short chunk ends the scan, as the storage contract says. A server can end it early to
        // hide elements; what they held then shows up as missing in `findings`, and asking for
        // more would change what every restart shows the server.
        if entries.len() < SCAN_CHUNK as usize {
            self.done = true;
        }
        for (address, _) in &entries {
            if self.after.is_some_and(|after| *address <= after) {
                return Err(StorageError("storage scanned out of order".into()));
            }
            self.after = Some(*address);
        }
        // The store's marker is no element of the scheme's (it is checked before recovery).
        entries.retain(|(address, _)| *address != STORE_MARKER);
        self.elements += entries.len() as u64;
        Ok(ScannedChunk(entries))
    }

    /// Appends the elements of a chunk [`Recovery::accept`] took to the spool as storage sent
    /// them, unopened; [`Recovery::open_spooled`] opens them once the scan is done.
    ///
    /// This is all the proxy does for a chunk while the scan runs, and the next request waits
    /// for it, so it is the only work of the proxy's that the times of the scan's requests can
    /// show the storage server: bytes appended as they came, as many for every element whatever
    /// it holds. Opening the elements and keeping their records does more for a live record
    /// than for an empty slot (review finding M2 of the fill-clock work); done here, the gap
    /// before each request would tell the server how many keys the chunk held. Done after the
    /// scan, it is part of the pause before the fill's first request, which leaves on a public
    /// clock (`cloak_schemes::shell::fill`).
    ///
    /// An element of a length the scheme never writes (see [`Recovery::sized`]; without it, a
    /// length that seals no whole number of records) cannot be one of the proxy's: it is
    /// recorded as damage and, for a scheme of one length, the spool gets padding in its
    /// place, so that the spool keeps one length and the fill's decoys a place for every
    /// element storage held (see `decoys`; a tree scheme's spool gets none). Which elements
    /// those are is the server's own doing. Fails only if the spool cannot be written.
    pub fn spool(&mut self, chunk: ScannedChunk) -> Result<(), RecoveryError> {
        for (address, element) in &chunk.0 {
            if self.spools_as_read(element.len()) {
                self.spool.append(*address, element)?;
            } else {
                // Not opened: only storage's own doing decides which elements take this path,
                // and none of this store's does.
                let error = ElementError::WrongLength(element.len());
                self.damage.record(*address, &error);
                if self.element_len.is_some() {
                    self.pad()?;
                }
            }
        }
        Ok(())
    }

    /// Opens the elements [`Recovery::spool`] appended since the last call, reading them back
    /// a chunk at a time, on every core, and keeps the newest record of every slot they hold,
    /// pointing at its element in the spool; an element that does not open is damage, and is
    /// replaced in the spool by padding of its length if the scheme writes only that length
    /// (it then stands in for it among the fill's decoys: see `decoys`), else
    /// [discarded](SpoolWriter::discard). Fails only if the spool cannot be read or written.
    pub fn open_spooled(&mut self) -> Result<(), RecoveryError> {
        let mut spooled = self.spool.read_from(self.opened_to)?;
        loop {
            let chunk = spooled
                .by_ref()
                .take(SCAN_CHUNK as usize)
                .collect::<std::io::Result<Vec<_>>>()?;
            if chunk.is_empty() {
                break;
            }
            let chunk = chunk
                .into_iter()
                .map(|(at, address, element)| (Some(at), address, element));
            // Every element here has its place in the spool: none fails without being handled.
            let (_, live) = self.open_and_keep(chunk.collect())?;
            leak_demo::slow_scanned_records(live);
        }
        self.opened_to = self.spool.len();
        Ok(())
    }

    /// Whether the scan spools an element of `len` bytes as storage sent it (see
    /// [`Recovery::spool`]): plaintext elements are as long as their records; a sealed one of
    /// any other length than the scheme's cannot open.
    fn spools_as_read(&self, len: usize) -> bool {
        match (&self.format, self.element_len) {
            (ElementFormat::Plain(_), _) => true,
            (ElementFormat::Sealed(_), Some(exact)) => len == exact,
            (ElementFormat::Sealed(codec), None) => codec.layout.seals_whole_records(len),
        }
    }

    /// Appends one element of padding to the spool, and says where.
    fn pad(&mut self) -> Result<Spooled, RecoveryError> {
        let padding = self.padding();
        Ok(self.spool.append(0, &padding)?)
    }

    /// The element the spool is padded with.
    fn padding(&mut self) -> Bytes {
        let format = &mut self.format;
        let padding =
            (self.padding).get_or_insert_with(|| format.encode(0, NO_SLOT, &Record::empty()));
        padding.clone()
    }

    /// Adds elements an earlier start spooled, whose fill may not have written them all back
    /// (read with [`spool::entries`]): kept like scanned ones (the scan's are opened first), but
    /// not counted as scanned, and spooled again only if they hold a value kept. Those that do
    /// not open are returned, with why, not recorded as damage: storage did not do it, and the
    /// caller decides whether the start goes on without them. Fails only if the spool cannot be
    /// read or written.
    pub fn add_spooled(
        &mut self,
        elements: Vec<(Addr, Bytes)>,
    ) -> Result<Vec<(Addr, ElementError)>, RecoveryError> {
        self.open_spooled()?;
        let elements = elements
            .into_iter()
            .map(|(address, element)| (None, address, element));
        let (failed, _) = self.open_and_keep(elements.collect())?;
        // What they spooled is opened already.
        self.opened_to = self.spool.len();
        Ok(failed)
    }

    /// Opens `elements` (each with its place in the spool, if it has one) on every core and
    /// keeps the records of those that open; one in the spool that does not is handled there
    /// ([`Recovery::unopened`]). Returns those not in the spool that do not open, with why,
    /// and how many live records were kept. Fails only if the spool cannot be written.
    fn open_and_keep(
        &mut self,
        elements: Vec<(Option<Spooled>, Addr, Bytes)>,
    ) -> Result<(Vec<(Addr, ElementError)>, usize), RecoveryError> {
        let format = &self.format;
        let opened = on_every_core(&elements, |(_, address, element)| {
            format.kept(*address, element)
        });
        let mut failed = Vec::new();
        let mut live = 0;
        for ((at, address, element), opened) in elements.into_iter().zip(opened) {
            match opened {
                Ok((generation, records)) => {
                    live += records.iter().filter(|kept| kept.has_value).count();
                    if let Some(at) = self.keep(address, &element, at, generation, records)? {
                        self.decoys.add(at);
                    }
                }
                Err(error) => match at {
                    Some(at) => self.unopened(at, address, &error)?,
                    None => failed.push((address, error)),
                },
            }
        }
        Ok((failed, live))
    }

    /// Records the element at `at` in the spool, read at `address`, which does not open, as
    /// damage and handles it in the spool (see [`Recovery::open_spooled`]), in the spool's
    /// order as the elements that open are, so a dense scheme's decoys stay in one run.
    fn unopened(
        &mut self,
        at: Spooled,
        address: Addr,
        error: &ElementError,
    ) -> Result<(), RecoveryError> {
        tracing::debug!(address, %error, "an element recovery cannot read");
        self.damage.record(address, error);
        let padding = self.padding();
        if self.element_len == Some(at.len as usize) && padding.len() == at.len as usize {
            self.spool.replace(at, 0, &padding)?;
            self.decoys.add(at);
        } else {
            self.spool.discard(at)?;
            // The leak the wire test of a hostile server's elements must catch.
            if leak_demo::uneven_decoys() {
                self.decoys.add(at);
            }
        }
        Ok(())
    }

    /// Keeps the records of `element` newer than those held. Its element is at `spooled` in the
    /// spool, or, if `None`, is appended to it once if any record kept has a value. Returns
    /// where the element is in the spool, if it is.
    fn keep(
        &mut self,
        address: Addr,
        element: &Bytes,
        mut spooled: Option<Spooled>,
        generation: u64,
        records: Vec<Kept>,
    ) -> Result<Option<Spooled>, RecoveryError> {
        self.max_generation = self.max_generation.max(generation);
        for Kept {
            slot,
            mut found,
            has_value,
        } in records
        {
            if !self.newest.is_newer(slot, found.version) {
                continue;
            }
            if has_value {
                let at = match spooled {
                    Some(at) => at,
                    None => *spooled.insert(self.spool.append(address, element)?),
                };
                found.value = Value::Spooled(at);
            }
            self.newest.insert(slot, found);
        }
        Ok(spooled)
    }

    /// Opens what the scan spooled and is not opened yet, adds the journal's records and
    /// settles every slot. Fails only if the spool cannot be read or written out.
    pub fn finish(
        mut self,
        journal: impl IntoIterator<Item = (Slot, Record)>,
    ) -> Result<Recovered, RecoveryError> {
        self.open_spooled()?;
        // The fill reads decoys from the spool (see `records`) so that a sparse store's fill
        // reads as much as a full one's; decoys spread over a spool as large as a full store's
        // cost what its reads cost (a small spool stays in the fastest caches: an empty store's
        // fill requests came 1.3 ms apart against 1.9 ms for a full one's at 64-byte values).
        // So the pool has a place for every element storage held: each that opened, and for a
        // scheme of one length padding in the place of each other (see `spool`,
        // `open_spooled`). A store whose storage held none of its elements gets one here.
        if self.decoys.len() == 0 {
            let padding = self.pad()?;
            self.decoys.add(padding);
        }
        self.decoys.shrink_to_fit();
        for (slot, record) in journal {
            if self.newest.is_newer(slot, record.version) {
                let value = Value::kept(&record.value);
                self.newest.insert(slot, Found::new(record.view(), value));
            }
        }
        let mut found = self.newest.into_written();
        let next_version = found.iter().map(|(_, r)| r.version).max().unwrap_or(0) + 1;
        empty_stale_copies(&mut found);
        Ok(Recovered {
            records: RecoveredRecords::spooled(
                found,
                self.spool.finish()?,
                self.format,
                self.decoys,
            )
            .reading_as_long_as(self.longest),
            next_version,
            elements: self.elements,
            damage: self.damage,
            max_generation: self.max_generation,
        })
    }
}

/// Slots below this are kept by index even when recovery expects fewer (or was told nothing):
/// a store this small costs at most a few megabytes of table.
const ALWAYS_BY_INDEX: usize = 1 << 16;

/// The newest record found of each slot so far.
///
/// By index in a vector for the store's slots (every scheme numbers its slots from 0 up to its
/// capacity, and the proxy passes that: see [`Recovery::expecting`]), so keeping a scanned
/// record costs one access to the table, not a hash table's two (control byte, then bucket)
/// twice over (a lookup, then the insert): at five million records those accesses, each a
/// cache miss into a table of hundreds of megabytes, were 46% of a restart's samples before
/// listening. Any other slot (an element of a scheme that numbers its slots otherwise) is kept
/// in a hash map, so nothing is lost whatever slots storage holds.
struct Newest {
    /// `by_index[slot]` for slots below `indexed`, a slot not seen yet held as [`NO_SLOT`]
    /// with an empty record; grows as slots arrive, within its reserved room. Each entry holds
    /// its slot so that [`Newest::into_written`] is this vector compacted where it lies: the
    /// list of written records, which recovery hands on, is the table, not a second copy of it.
    by_index: Vec<(Slot, Found)>,
    indexed: usize,
    others: HashMap<Slot, Found>,
}

impl Default for Newest {
    fn default() -> Self {
        Self::for_slots(0)
    }
}

impl Newest {
    /// A table that holds slots `0..slots` by index, the room for them reserved (not touched
    /// until records arrive).
    fn for_slots(slots: usize) -> Self {
        let slots = slots.min(MAX_RESERVED);
        Self {
            by_index: Vec::with_capacity(slots),
            indexed: slots.max(ALWAYS_BY_INDEX),
            others: HashMap::new(),
        }
    }

    fn get(&self, slot: Slot) -> Option<&Found> {
        match self.index(slot) {
            Some(i) => match self.by_index.get(i)? {
                (NO_SLOT, _) => None,
                (_, found) => Some(found),
            },
            None => self.others.get(&slot),
        }
    }

    /// Whether a record of `slot` at `version` is newer than the one held (padding never is).
    fn is_newer(&self, slot: Slot, version: u64) -> bool {
        slot != NO_SLOT && self.get(slot).is_none_or(|held| held.version < version)
    }

    fn insert(&mut self, slot: Slot, found: Found) {
        match self.index(slot) {
            Some(i) => {
                if i >= self.by_index.len() {
                    self.by_index
                        .resize_with(i + 1, || (NO_SLOT, Found::default()));
                }
                self.by_index[i] = (slot, found);
            }
            None => {
                self.others.insert(slot, found);
            }
        }
    }

    /// Where `slot` is in `by_index`, if it is kept there.
    fn index(&self, slot: Slot) -> Option<usize> {
        usize::try_from(slot).ok().filter(|&i| i < self.indexed)
    }

    /// The records some client wrote (version above 0), by slot: empty records no client ever
    /// wrote (an initial fill's padding) say nothing.
    ///
    /// The table itself, compacted in place: building a new list beside it held both at once
    /// (and the list's old and new buffers while it grew), the high-water mark of a restart
    /// (heaptrack of a restart at a million 1 KiB keys: 96 MB of table and 109 MB of list).
    fn into_written(self) -> Vec<(Slot, Found)> {
        let mut written = self.by_index;
        written.retain(|(slot, found)| *slot != NO_SLOT && found.version > 0);
        let mut others: Vec<(Slot, Found)> = self
            .others
            .into_iter()
            .filter(|(_, found)| found.version > 0)
            .collect();
        others.sort_unstable_by_key(|(slot, _)| *slot);
        // Every indexed slot is below every other: the vector's order, then the others'.
        written.append(&mut others);
        // The list lives through the fill. A sparse store's is a small part of a table the
        // scan touched end to end (its slots are spread over the store), so it moves to a
        // buffer of its own size, which costs a quarter of the table's size at most beside it.
        if written.len() < written.capacity() / 4 {
            written.shrink_to_fit();
        }
        written
    }
}

/// A key in two slots can only be a stale copy next to its newer home: keeps the newest (of
/// equal versions, the lower slot) and turns every other copy into an empty record, so it never
/// comes back.
///
/// A table of each key's newest copy so far, 5 bytes a bucket holding the copy's index: no sort
/// (sorting 16-byte (fingerprint, index) pairs took seconds at ten million records), and a key
/// is hashed once, on every core. The records are parted by their keys' hashes and each part
/// kept in a table of its own on a core of its own, since the copies of one key are all in one
/// part: each insert into a table of millions of buckets is a cache miss, and a restart of ten
/// million records spent a fifth of its serial time after opening on them on one core. The hash
/// is randomly seeded, and two keys are the same key only if their bytes are.
fn empty_stale_copies(records: &mut [(Slot, Found)]) {
    let seed = hashbrown::DefaultHashBuilder::default();
    let held: &[(Slot, Found)] = records;
    let hashes = on_every_core(held, |(_, found)| seed.hash_one(&found.key));
    let stale = in_parts_on_every_core(held.len(), |part, parts| {
        stale_copies_in_part(held, &hashes, part, parts)
    });
    for i in stale.into_iter().flatten() {
        let found = &mut records[i as usize].1;
        *found = Found::emptied(found.version);
    }
}

/// The stale copies (see [`empty_stale_copies`]) among the records of part `part` of `parts`:
/// those whose key's hash (`hashes`, by record) falls in it. The part is read from bits 32–47
/// of the hash, which the table does not place by at these sizes (it takes a bucket from the
/// low bits and a tag from the top seven), so each part's table is filled evenly.
fn stale_copies_in_part(
    records: &[(Slot, Found)],
    hashes: &[u64],
    part: usize,
    parts: usize,
) -> Vec<u32> {
    let in_part = |i: usize| (hashes[i] >> 32) as u16 as usize % parts == part;
    let mut homes: HashTable<u32> = HashTable::with_capacity(records.len() / parts + 1024);
    let mut stale = Vec::new();
    for (i, (_, found)) in records.iter().enumerate() {
        if found.is_empty() || !in_part(i) {
            continue;
        }
        let same_key = |&home: &u32| records[home as usize].1.key == found.key;
        match homes.entry(hashes[i], same_key, |&home| hashes[home as usize]) {
            Entry::Vacant(vacant) => {
                vacant.insert(i as u32);
            }
            Entry::Occupied(mut home) => {
                let held = *home.get();
                if keeps_over(&records[i], &records[held as usize]) {
                    stale.push(held);
                    *home.get_mut() = i as u32;
                } else {
                    stale.push(i as u32);
                }
            }
        }
    }
    stale
}

/// Whether `copy` is the one to keep over `held`, another copy of its key: the newer, and of
/// equal versions the lower slot.
fn keeps_over((copy_slot, copy): &(Slot, Found), (held_slot, held): &(Slot, Found)) -> bool {
    (copy.version, std::cmp::Reverse(*copy_slot)) > (held.version, std::cmp::Reverse(*held_slot))
}

/// A store's state as recovery found it.
#[derive(Debug, Default)]
pub struct Recovered {
    /// The newest record of every slot found (empty records for freed slots), by slot.
    pub records: RecoveredRecords,
    /// The version the engine continues from.
    pub next_version: u64,
    /// Elements the scan read.
    pub elements: u64,
    /// Elements that failed to open or decode; none of their records are in `records`.
    pub damage: Damage,
    /// The highest generation any element carried.
    pub max_generation: u64,
}

impl Recovered {
    /// What is wrong with the store found, given the version of every slot storage must hold
    /// (empty when the proxy knows of none: a new store, or no state directory).
    pub fn findings(&self, expected: &SlotVersions) -> Findings {
        Findings::new(
            self.elements,
            self.damage.clone(),
            |slot| self.records.get(slot),
            expected,
        )
    }

    /// The version of every slot found, to compare later starts with.
    pub fn versions(&self) -> SlotVersions {
        self.records
            .iter()
            .map(|(slot, version, _)| (slot, version))
            .collect()
    }

    /// Slots holding keys, with their keys.
    pub fn keys(&self) -> impl Iterator<Item = (Slot, &[u8])> + Clone {
        self.records
            .iter()
            .filter(|(_, _, key)| !key.is_empty())
            .map(|(slot, _, key)| (slot, key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(version: u64, key: &'static [u8]) -> Record {
        Record {
            version,
            key: Bytes::from_static(key),
            value: Bytes::from_static(b"value"),
        }
    }

    #[test]
    fn a_key_in_two_slots_keeps_only_its_newest_copy() {
        let recovery = Recovery::new(ElementFormat::Plain(RecordLayout {
            max_key: 8,
            max_value: 8,
        }));
        let mut recovered = recovery
            .finish([
                (1, record(5, b"a")),
                (2, record(7, b"a")),
                (3, record(4, b"b")),
                (4, record(4, b"b")),
                (5, record(3, b"c")),
            ])
            .unwrap();
        let held: Vec<(Slot, u64, &[u8])> = recovered.records.iter().collect();
        assert_eq!(
            held,
            [
                (1, 5, &b""[..]),
                (2, 7, &b"a"[..]),
                (3, 4, &b"b"[..]),
                (4, 4, &b""[..]),
                (5, 3, &b"c"[..]),
            ],
            "the older copy, and of equal versions the higher slot, is emptied at its version"
        );
        assert_eq!(recovered.next_version, 8);
        assert_eq!(
            recovered.records.read(2).unwrap().value,
            Bytes::from_static(b"value"),
            "a journaled value is kept in memory"
        );
    }

    /// However many parts the records are kept in, every copy but each key's newest is found
    /// stale once (3,000 records of 1,000 keys, three copies each at mixed versions), and the
    /// whole store's pass empties exactly those.
    #[test]
    fn stale_copies_are_found_whatever_part_their_key_falls_in() {
        let records = || -> Vec<(Slot, Found)> {
            (0..3000u64)
                .map(|slot| {
                    let key = format!("key{}", slot % 1000);
                    let record = Record {
                        version: (slot * 7919) % 13,
                        key: Bytes::from(key),
                        value: Bytes::from_static(b"v"),
                    };
                    (slot, Found::new(record.view(), Value::Empty))
                })
                .collect()
        };
        let held = records();
        // Each key's newest copy: the highest version, and of equal versions the lowest slot.
        let mut newest: HashMap<&[u8], (u64, std::cmp::Reverse<Slot>)> = HashMap::new();
        for (slot, found) in &held {
            let copy = (found.version, std::cmp::Reverse(*slot));
            let home = newest.entry(&found.key).or_insert(copy);
            *home = (*home).max(copy);
        }
        let expected: Vec<u32> = (0..3000u32)
            .filter(|&i| {
                let (slot, found) = &held[i as usize];
                newest[&found.key[..]] != (found.version, std::cmp::Reverse(*slot))
            })
            .collect();
        assert_eq!(expected.len(), 2000);
        let seed = hashbrown::DefaultHashBuilder::default();
        let hashes_of_keys: Vec<u64> = (held.iter())
            .map(|(_, found)| seed.hash_one(&found.key))
            .collect();
        for parts in 1..=3 {
            let mut stale: Vec<u32> = (0..parts)
                .flat_map(|part| stale_copies_in_part(&held, &hashes_of_keys, part, parts))
                .collect();
            stale.sort_unstable();
            assert_eq!(stale, expected, "{parts} parts");
        }
        let mut emptied = records();
        empty_stale_copies(&mut emptied);
        let empty: Vec<u32> = (0..3000)
            .filter(|&i| emptied[i as usize].1.is_empty())
            .collect();
        assert_eq!(empty, expected);
    }

    /// Slots of the store are kept by index, any other in the map, and the records come back
    /// by slot either way, the newest of each.
    #[test]
    fn the_newest_record_of_every_slot_is_kept_whatever_its_slot() {
        let mut newest = Newest::for_slots(4);
        let far = 1 << 40;
        for (slot, version) in [
            (far, 2),
            (5, 1),
            (ALWAYS_BY_INDEX as Slot, 3),
            (ALWAYS_BY_INDEX as Slot - 1, 4),
            (5, 6),
            (far, 7),
            (9, 0),
        ] {
            if newest.is_newer(slot, version) {
                newest.insert(
                    slot,
                    Found::new(record(version, b"k").view(), Value::default()),
                );
            }
        }
        assert!(!newest.is_newer(5, 5) && newest.is_newer(5, 7));
        assert!(!newest.is_newer(NO_SLOT, 1), "padding is never kept");
        assert_eq!(newest.others.len(), 2, "the slots past the indexed ones");
        let written: Vec<(Slot, u64)> = newest
            .into_written()
            .iter()
            .map(|(slot, found)| (*slot, found.version))
            .collect();
        assert_eq!(
            written,
            [
                (5, 6),
                (ALWAYS_BY_INDEX as Slot - 1, 4),
                (ALWAYS_BY_INDEX as Slot, 3),
                (far, 7),
            ],
            "by slot, the newest version of each; slot 9's version 0 was never written"
        );
    }

    /// The scan spools every element as it came and opens none until it is done. One that then
    /// does not open is damage, never a record: of the scheme's length it is replaced in the
    /// spool by padding, which a later start reading the spool opens to nothing; of another
    /// length (even one that seals a whole number of records) the spool gets padding in its
    /// place at once (every element of a dense scheme's spool has one length). So the fill's
    /// decoys have a place for every element storage held, in one run.
    #[test]
    fn scanned_elements_are_opened_after_the_scan_and_those_that_do_not_open_become_padding() {
        let codec = || {
            let layout = RecordLayout {
                max_key: 16,
                max_value: 32,
            };
            let master = cloak_crypto::MasterKey::from_bytes([1; 32]);
            ElementCodec::new(layout, cloak_crypto::Sealer::new(&master).unwrap())
        };
        let mut format = ElementFormat::Sealed(codec());
        let good = format.encode(1, 0, &record(3, b"a"));
        let mut altered = format.encode(2, 1, &record(3, b"b")).to_vec();
        *altered.last_mut().unwrap() ^= 1;
        // Of a length that seals two records: not this scheme's, whose elements hold one.
        let two_records = Bytes::from(vec![0; codec().layout.sealed_len(2)]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool");
        let element_len = format.element_len();
        let mut recovery = Recovery::new(format)
            .sized(element_len)
            .spooling_to(spool::tests::new_file(&path));
        let scanned = vec![
            (1, good.clone()),
            (2, Bytes::from(altered)),
            (3, Bytes::from_static(b"short")),
            (4, two_records),
        ];
        recovery.handle(StorageReply::Entries(scanned)).unwrap();
        assert_eq!(
            recovery.spool.read_from(0).unwrap().count(),
            4,
            "every element, padding for those of other lengths"
        );
        assert!(
            recovery.newest.get(0).is_none(),
            "nothing opened during the scan"
        );
        let mut damaged: Vec<Addr> = recovery.damage.addresses().collect();
        damaged.sort_unstable();
        assert_eq!(
            damaged,
            [3, 4],
            "those of other lengths are known without opening them"
        );

        let mut recovered = recovery.finish(Vec::new()).unwrap();
        let mut damaged: Vec<Addr> = recovered.damage.addresses().collect();
        damaged.sort_unstable();
        assert_eq!(damaged, [2, 3, 4]);
        assert_eq!(
            recovered.records.read(0).unwrap().key,
            Bytes::from_static(b"a")
        );
        assert!(recovered.records.read(1).unwrap().key.is_empty());
        let later: Vec<(Addr, Bytes)> = spool::entries(File::open(&path).unwrap())
            .collect::<Result<_, _>>()
            .unwrap();
        let addresses: Vec<Addr> = later.iter().map(|(address, _)| *address).collect();
        assert_eq!(
            addresses,
            [1, 0, 0, 0],
            "the altered element is replaced by padding, the others were padded at once"
        );
        assert_eq!(later[0].1, good);
        let decoys = recovered.records.decoys();
        assert_eq!((decoys.len(), decoys.runs()), (4, 1));
        // Every element a later start reads back opens, the padding put in place too.
        let mut again = Recovery::new(ElementFormat::Sealed(codec()));
        assert!(again.add_spooled(later).unwrap().is_empty());
    }

    /// A tree scheme's recovery (no one length) keeps every element of its own that opens
    /// among the decoys, whatever its length, and none of the server's. A first attempt kept
    /// the longest length only: one genuine bucket among a preloaded store's one-record
    /// elements became every decoy (review H-a).
    #[test]
    fn decoys_are_the_stores_own_elements_of_any_length_and_none_of_the_servers() {
        let layout = RecordLayout {
            max_key: 16,
            max_value: 32,
        };
        let master = cloak_crypto::MasterKey::from_bytes([1; 32]);
        let mut codec = ElementCodec::new(layout, cloak_crypto::Sealer::new(&master).unwrap());
        let bucket_len = layout.encoded_len() * 4;
        // A bucket of four empty records, as a tree scheme seals one: genuine, holding nothing.
        let bucket = codec.sealer.seal_with(
            cloak_crypto::Binding {
                address: 1000,
                generation: 1,
            },
            bucket_len,
            |out| {
                for _ in 0..4 {
                    layout.encode(NO_SLOT, &Record::empty(), out);
                }
            },
        );
        let mut format = ElementFormat::Sealed(codec);
        let record_len = format.element_len();
        let mut scanned: Vec<(Addr, Bytes)> = (0..99u64)
            .map(|slot| {
                let address = u128::from(slot);
                (address, format.encode(address, slot, &record(1, b"k")))
            })
            .collect();
        scanned.push((1000, Bytes::from(bucket)));
        // The server's: as long as a bucket, and as long as a record; neither opens.
        scanned.push((1001, Bytes::from(vec![0; layout.sealed_len(4)])));
        scanned.push((1002, Bytes::from(vec![0; record_len])));
        let mut recovery = Recovery::new(format);
        recovery.handle(StorageReply::Entries(scanned)).unwrap();
        let recovered = recovery.finish(Vec::new()).unwrap();
        assert_eq!(recovered.damage.addresses().count(), 2);
        let decoys = recovered.records.decoys();
        assert_eq!(decoys.len(), 100, "the 99 records' elements and the bucket");
        let mut random =
            <rand_chacha::ChaCha20Rng as rand_chacha::rand_core::SeedableRng>::from_os_rng();
        let buckets = (0..10_000)
            .filter(|_| decoys.draw(&mut random).unwrap().len as usize > record_len)
            .count();
        assert!(
            (30..200).contains(&buckets),
            "the bucket drawn {buckets} times in 10,000"
        );
    }

    #[test]
    fn a_progress_line_comes_once_the_interval_has_passed_and_not_before() {
        let mut often = Progress::every(Duration::ZERO);
        assert!(often.scanned(4096) && often.scanned(8192));
        assert!(often.filled(0, 10) && often.filled(10, 10));
        let mut rarely = Progress::every(Duration::from_secs(3600));
        assert!(!rarely.scanned(4096) && !rarely.filled(4096, 8192));
    }
}
