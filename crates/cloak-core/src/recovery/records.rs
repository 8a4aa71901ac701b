//! The records a recovery found, handed to the new instance's fill one slot at a time, and to
//! clients' reads until the fill is done.
//!
//! In memory: per slot its version, key, the type and deadline from its value's envelope, and
//! where its element is in the spool (see [`super::spool`]); the value itself stays on disk
//! until the fill reads the record, so a restart holds the store's keys, not its values. A fill
//! asks for every slot's record once, in the random order of its new layout, a request's worth
//! at a time ([`RecoveredRecords::read_all`]): the records are a vector sorted by slot (a hash
//! map of them cost about twice their count in buckets) with an index from slot to entry, and
//! the elements a request needs are read in file order and opened on every core.
//!
//! **Every fill request costs the same reads, whatever its slots hold.** The fill sends a
//! request as soon as its records are read (and the window has room), so the time between two
//! of its requests that storage sees includes the time taking their records took. Reading and
//! opening an element is most of that time (about 1.3 µs an element of 64-byte values: a full
//! store's fill requests came 1.8 ms apart against 0.5 ms for an empty one's), and only slots with a
//! spooled value need one: had the fill read only those, a request's delay would count its live
//! records, and the server would read off it how many keys the store holds and, chunk by chunk,
//! where they sit in a layout (review finding 6). So each request reads back as many elements
//! as the fill asks ([`RecoveredRecords::read_all`]'s `reads`, the request's size, which is
//! public): the elements of its records, and for every slot short of that a decoy, an element
//! of the spool read and opened the same way, whose records are dropped. Each decoy is drawn
//! at random, by a secret generator, from the store's own elements, those that opened (see
//! [`super::decoys`]), so none is an element the server made cheaper or dearer to read, and
//! decoys are spread over the spool as the records of a random layout are, hitting the page
//! cache and the disk as the real reads would. A dense scheme's pool has a place for every
//! element storage held (padding in the place of each that did not open), so decoys of a sparse
//! store read from as large a file as a full store's records. What is left that depends on the
//! records: parsing the record out of an opened element (a padding element holds none),
//! copying its value into the sealed element and the allocations around it, measured at
//! 0.3–0.7 µs a record in the test build; and the pause
//! before the fill, which sorting the records lengthens (see `crate::recovery`). Neither shows:
//! the fill's requests leave on a public clock that preparation cannot delay
//! (`cloak_schemes::shell::fill`), unless a request overruns it, which is counted.

use bytes::Bytes;

use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::SeedableRng;

use super::decoys::DecoyPool;
use super::key_copy::KeyCopy;
use super::spool::{SpoolReader, Spooled};
use super::{ElementFormat, RecoveryError, leak_demo};
use crate::element::{Record, RecordView, Slot};
use crate::envelope::{Entry, EnvelopeError, Kind};
use crate::keyspace::Keyspace;
use crate::workers::on_every_core;

/// Where a found record's value is.
///
/// A table of these holds every slot of the store during a restart, so they are kept small:
/// the rare value held here is boxed, and an empty one takes nothing.
#[derive(Debug, Default)]
pub(super) enum Value {
    /// An empty value (a freed slot, or padding no client wrote).
    #[default]
    Empty,
    /// In the element at this place in the spool.
    Spooled(Spooled),
    /// Here (a record from the journal, or records a test or tool handed over).
    Kept(Box<Bytes>),
}

impl Value {
    /// `value`, held here.
    pub(super) fn kept(value: &Bytes) -> Self {
        if value.is_empty() {
            Value::Empty
        } else {
            Value::Kept(Box::new(value.clone()))
        }
    }

    fn spooled(&self) -> Option<Spooled> {
        match self {
            Value::Spooled(at) => Some(*at),
            Value::Empty | Value::Kept(_) => None,
        }
    }
}

/// What the keyspace needs of a value: its type and deadline, or why its envelope is unreadable.
///
/// 16 bytes where `Result<(Kind, Option<u64>), EnvelopeError>` takes 24 (`Option<u64>` alone
/// takes 16): whether there is a deadline is kept beside it.
#[derive(Clone, Debug)]
enum Shape {
    Readable {
        kind: Kind,
        expires: bool,
        deadline: u64,
    },
    Unreadable(EnvelopeError),
}

impl Shape {
    fn new(kind: Kind, deadline: Option<u64>) -> Self {
        Shape::Readable {
            kind,
            expires: deadline.is_some(),
            deadline: deadline.unwrap_or_default(),
        }
    }

    fn of(value: &[u8]) -> Self {
        match Entry::header(value) {
            Ok((kind, deadline)) => Shape::new(kind, deadline),
            Err(error) => Shape::Unreadable(error),
        }
    }

    fn get(&self) -> Result<(Kind, Option<u64>), EnvelopeError> {
        match self {
            Shape::Readable {
                kind,
                expires,
                deadline,
            } => Ok((*kind, expires.then_some(*deadline))),
            Shape::Unreadable(error) => Err(error.clone()),
        }
    }
}

/// A slot's newest record as recovery found it, without its value.
///
/// 64 bytes with a key of up to 22 bytes (a test holds it to that): a restart holds one for
/// every slot of the store at once, its high-water mark (at ten million slots, each 8 bytes here
/// is 80 MB).
#[derive(Debug)]
pub(super) struct Found {
    pub(super) version: u64,
    /// Its own copy: a slice of the opened element would keep the whole element alive.
    pub(super) key: KeyCopy,
    pub(super) value: Value,
    shape: Shape,
}

impl Default for Found {
    fn default() -> Self {
        Self {
            version: 0,
            key: KeyCopy::default(),
            value: Value::default(),
            shape: Shape::new(Kind::String, None),
        }
    }
}

impl Found {
    /// `record`, whose value is at `value`.
    pub(super) fn new(record: RecordView<'_>, value: Value) -> Self {
        let shape = if record.key.is_empty() {
            Shape::new(Kind::String, None)
        } else {
            Shape::of(record.value)
        };
        Self {
            version: record.version,
            key: record.key.into(),
            value,
            shape,
        }
    }

    /// An empty record at `version`: a freed slot.
    pub(super) fn emptied(version: u64) -> Self {
        Self {
            version,
            ..Self::default()
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.key.is_empty()
    }
}

/// Recovered records by slot (see the module docs).
pub struct RecoveredRecords {
    /// Sorted by slot, one per slot.
    found: Vec<(Slot, Found)>,
    /// The position in `found` of every slot up to the highest found ([`NOT_FOUND`] for none),
    /// or empty where the slots are too sparse for one (then a binary search finds them). A
    /// fill takes slots in random order, and a binary search of ten million entries missed the
    /// cache at nearly every step: it was a fifth of such a restart's time.
    index: Vec<u32>,
    spool: SpoolReader,
    /// Opens spooled elements again; `None` when nothing is spooled.
    format: Option<ElementFormat>,
    /// The elements decoys read (see [`super::decoys`]).
    decoys: DecoyPool,
    /// Draws each decoy's place: seeded by the operating system at each start, so secret.
    decoy_draws: ChaCha20Rng,
    /// Every element read back costs what reading and opening one of this many bytes does, if
    /// it is shorter (see [`RecoveredRecords::reading_as_long_as`]).
    read_len: u32,
    /// What reading back cost, for the tests.
    #[cfg(test)]
    counted: Counted,
}

/// What a [`RecoveredRecords`]' reads back cost, counted for the tests.
#[cfg(test)]
#[derive(Debug, Default)]
struct Counted {
    /// Elements read back, decoys included.
    read_back: Counter,
    /// Bytes of opening spent for elements shorter than `read_len`.
    spent: Counter,
    /// Decoy places drawn.
    drawn: Counter,
}

/// A count kept by whichever core does the work (`read_all` shares its reads among them).
#[cfg(test)]
#[derive(Debug, Default)]
struct Counter(std::sync::atomic::AtomicU64);

#[cfg(test)]
impl Counter {
    fn add(&self, n: u64) {
        self.0.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// An index entry for a slot nothing was found for.
const NOT_FOUND: u32 = u32::MAX;

/// Highest slot an index covers per entry found: an index costs at most 4 × 4 bytes an entry,
/// a fraction of the entry itself.
const INDEX_SPAN: u64 = 4;

/// Records [`RecoveredRecords::into_vec`] reads back at a time.
const LOAD_CHUNK: usize = 4096;

impl RecoveredRecords {
    /// `found`, sorted by slot with one entry a slot, whose spooled values `spool` holds in
    /// elements of `format`; the fill's decoys read elements of `decoys`.
    pub(super) fn spooled(
        found: Vec<(Slot, Found)>,
        spool: SpoolReader,
        format: ElementFormat,
        decoys: DecoyPool,
    ) -> Self {
        debug_assert!(found.windows(2).all(|w| w[0].0 < w[1].0));
        leak_demo::slow_live_records(found.iter().filter(|(_, f)| !f.is_empty()).count());
        Self::new(found, spool, Some(format), decoys)
    }

    /// `found` (sorted by slot, one entry a slot), its spooled values in `spool`.
    fn new(
        found: Vec<(Slot, Found)>,
        spool: SpoolReader,
        format: Option<ElementFormat>,
        decoys: DecoyPool,
    ) -> Self {
        Self {
            index: index(&found),
            found,
            spool,
            format,
            decoys,
            decoy_draws: ChaCha20Rng::from_os_rng(),
            read_len: 0,
            #[cfg(test)]
            counted: Counted::default(),
        }
    }

    /// Makes every element read back cost what reading and opening one of `len` bytes does
    /// (the scheme's longest): a shorter one is read with the bytes after it and its opening
    /// is followed by the work the longer one has beyond it. A tree scheme's spool may mix
    /// lengths (a preload's one-record elements beside buckets, or old elements of either a
    /// server replays: they open), so without it the cost of a request's reads would follow
    /// which lengths its records and its decoys came from, a mix the server can choose
    /// (review M1 of the decoy pool).
    pub(super) fn reading_as_long_as(mut self, len: u32) -> Self {
        // The leak the wire test of a hostile server's elements must catch.
        if !leak_demo::uneven_decoys() {
            self.read_len = len;
        }
        self
    }

    /// Slots found, with their versions and keys (empty for a freed slot), by slot.
    pub fn iter(&self) -> impl Iterator<Item = (Slot, u64, &[u8])> + Clone {
        self.found
            .iter()
            .map(|(slot, f)| (*slot, f.version, &f.key[..]))
    }

    /// The elements the fill's decoys read.
    #[cfg(test)]
    pub(super) fn decoys(&self) -> &DecoyPool {
        &self.decoys
    }

    /// How many slots were found.
    pub fn len(&self) -> usize {
        self.found.len()
    }

    /// Whether no slot was found.
    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    /// The slots holding a key, in the order their values sit in the spool (values held in
    /// memory first): a scheme that reads them back a chunk at a time in this order walks the
    /// spool forward, as [`RecoveredRecords::into_vec`] does, instead of seeking at random.
    pub fn live_in_spool_order(&self) -> Vec<Slot> {
        self.in_spool_order_if(|found| !found.is_empty())
    }

    /// Every slot found (freed ones too), in the order of [`RecoveredRecords::live_in_spool_order`].
    pub fn in_spool_order(&self) -> Vec<Slot> {
        self.in_spool_order_if(|_| true)
    }

    fn in_spool_order_if(&self, wanted: impl Fn(&Found) -> bool) -> Vec<Slot> {
        let mut slots: Vec<(Option<Spooled>, Slot)> = (self.found.iter())
            .filter(|(_, found)| wanted(found))
            .map(|(slot, found)| (found.value.spooled(), *slot))
            .collect();
        slots.sort_unstable();
        slots.into_iter().map(|(_, slot)| slot).collect()
    }

    /// Records some client wrote (version above 0).
    pub fn written(&self) -> u64 {
        self.found.iter().filter(|(_, f)| f.version > 0).count() as u64
    }

    /// The version and key (if it holds one) of `slot`'s record.
    pub fn get(&self, slot: Slot) -> Option<(u64, Option<&[u8]>)> {
        let i = self.position(slot)?;
        let found = &self.found[i].1;
        Some((found.version, (!found.is_empty()).then_some(&found.key[..])))
    }

    /// The keyspace of the records' keys, from their envelopes; the first value without a
    /// readable envelope stops it, naming its slot.
    pub fn keyspace(&self) -> Result<Keyspace, (Slot, EnvelopeError)> {
        let mut keyspace = Keyspace::default();
        for (slot, found) in self.found.iter().filter(|(_, f)| !f.is_empty()) {
            let (kind, deadline) = found.shape.get().map_err(|error| (*slot, error))?;
            keyspace.set(*slot, &found.key, kind, deadline);
        }
        Ok(keyspace)
    }

    /// `slot`'s record (see [`RecoveredRecords::read_all`]), reading no decoy: a client's read
    /// during the fill, which no storage request waits on.
    pub fn read(&mut self, slot: Slot) -> Result<Record, RecoveryError> {
        leak_demo::slow_client_read();
        self.read_all(&[slot], 0)
            .pop()
            .unwrap_or_else(|| Ok(Record::empty()))
    }

    /// The records of `slots`, in that order; empty for a slot recovery found nothing for. Reads
    /// spooled values back, so a slot fails if the spool cannot be read or no longer holds what
    /// was written to it.
    ///
    /// The records stay here: a fill reads each slot's once, and until the fill is done a
    /// client's read of a key may read it too (storage does not hold every record before then,
    /// and the spool needs no storage request). Its key is copied for each read, a small
    /// allocation the table's own copy outlives; the table is dropped when the fill is done.
    ///
    /// Reads `reads` elements of the spool (or more, if `slots` need more), whatever `slots`
    /// hold: a fill passes the size of the request these records go out in, so every request
    /// costs the same reads (see the module docs).
    pub fn read_all(&mut self, slots: &[Slot], reads: usize) -> Vec<Result<Record, RecoveryError>> {
        let positions: Vec<(Slot, Option<usize>)> = slots
            .iter()
            .map(|&slot| (slot, self.position(slot)))
            .collect();
        self.values(&positions, reads)
    }

    /// Every record, by slot, a chunk at a time in the order of the spool, so each chunk reads
    /// a stretch of the file and the records of a bucket are mostly opened together. The table
    /// is handed over chunk by chunk, so a key is held twice (the table's copy and the record's)
    /// for one chunk at a time, not for the whole store.
    pub fn into_vec(mut self) -> Result<Vec<(Slot, Record)>, RecoveryError> {
        let mut found = std::mem::take(&mut self.found);
        // It names places in the whole table, which is gone; `values` takes a chunk's entries
        // by their place in the chunk.
        self.index = Vec::new();
        found.sort_by_key(|(_, f)| f.value.spooled());
        let mut records = Vec::with_capacity(found.len());
        let mut rest = found.into_iter().peekable();
        while rest.peek().is_some() {
            self.found = rest.by_ref().take(LOAD_CHUNK).collect();
            let chunk: Vec<(Slot, Option<usize>)> = (self.found.iter().enumerate())
                .map(|(i, (slot, _))| (*slot, Some(i)))
                .collect();
            // Before any fill: no request waits on these reads, so they need no decoys.
            for (&(slot, _), record) in chunk.iter().zip(self.values(&chunk, 0)) {
                records.push((slot, record?));
            }
        }
        records.sort_unstable_by_key(|(slot, _)| *slot);
        Ok(records)
    }

    fn position(&self, slot: Slot) -> Option<usize> {
        if self.index.is_empty() {
            return self.found.binary_search_by_key(&slot, |(s, _)| *s).ok();
        }
        let at = *self.index.get(usize::try_from(slot).ok()?)?;
        (at != NOT_FOUND).then_some(at as usize)
    }

    /// The records of `slots` (each with its position in `found`, `None` for a slot nothing was
    /// found for), in the order given, with their values, after reading at least `reads`
    /// elements (decoys make up the difference, see the module docs). The elements holding them
    /// are read in file order (a walk forward through the spool, not a seek back and forth) and
    /// opened on every core, each once however many of its records are asked for.
    fn values(
        &mut self,
        slots: &[(Slot, Option<usize>)],
        reads: usize,
    ) -> Vec<Result<Record, RecoveryError>> {
        let mut places: Vec<Spooled> = slots
            .iter()
            .filter_map(|(_, i)| self.found[(*i)?].1.value.spooled())
            .collect();
        places.sort_unstable();
        places.dedup();
        let decoys = if leak_demo::reads_back_live_records_only() {
            0
        } else {
            reads.saturating_sub(places.len())
        };
        // As many draws as reads, whatever the decoys needed: finding a decoy's place costs a
        // search of the pool (more where a tree scheme's pool has many runs, which a server
        // can force), finding a record's a lookup, so the search work must not count decoys.
        let draws: Vec<Spooled> = (0..reads)
            .filter_map(|_| self.decoys.draw(&mut self.decoy_draws))
            .collect();
        #[cfg(test)]
        self.counted.drawn.add(draws.len() as u64);
        places.extend(draws.into_iter().take(decoys));
        // Decoys and records in one walk through the file, as one set of reads. A decoy may be
        // the element of a record, read twice: either copy serves the record.
        places.sort_unstable();
        let opened = on_every_core(&places, |&at| self.open(at));
        slots
            .iter()
            .map(|&(slot, i)| {
                let Some(i) = i else {
                    return Ok(Record::empty());
                };
                let found = &self.found[i].1;
                let with_value = |value: Bytes| Record {
                    version: found.version,
                    key: Bytes::copy_from_slice(&found.key),
                    value,
                };
                match &found.value {
                    Value::Empty => Ok(with_value(Bytes::new())),
                    Value::Kept(value) => Ok(with_value((**value).clone())),
                    Value::Spooled(at) => match places.binary_search(at).map(|i| &opened[i]) {
                        Ok(Ok(held)) => pick(slot, found, held).map(with_value),
                        Ok(Err(unread)) => Err(unread.of(slot)),
                        Err(_) => Err(Unread::Unplaced.of(slot)),
                    },
                }
            })
            .collect()
    }

    /// The records of the element at `at`, opened again bound to the address it was read at.
    fn open(&self, at: Spooled) -> Result<Vec<(Slot, Record)>, Unread> {
        leak_demo::slow_read_back(at.len.max(self.read_len));
        #[cfg(test)]
        self.counted.read_back.add(1);
        let (address, element) = (self.spool)
            .read_as_long_as(at, self.read_len)
            .map_err(Unread::Spool)?;
        let format = self.format.as_ref().ok_or(Unread::NoFormat)?;
        let opened = format.records(address, &element);
        let short_by = self.read_len.saturating_sub(at.len);
        format.spend_opening(short_by as usize);
        #[cfg(test)]
        self.counted.spent.add(u64::from(short_by));
        let (_, records) = opened.map_err(|_| Unread::DoesNotOpen)?;
        Ok(records)
    }
}

/// Why a spooled element could not be read back: one element may hold the records of several
/// slots, and each is told why (see [`Unread::of`]).
enum Unread {
    Spool(std::io::Error),
    NoFormat,
    DoesNotOpen,
    /// Not reachable: every element asked for is read.
    Unplaced,
}

impl Unread {
    /// The error of `slot`, whose record is in the element.
    fn of(&self, slot: Slot) -> RecoveryError {
        let reason = match self {
            Unread::Spool(error) => {
                return RecoveryError::Spool(std::io::Error::new(error.kind(), error.to_string()));
            }
            Unread::NoFormat => "the value is spooled but the records have no element format",
            Unread::DoesNotOpen => "its element no longer opens",
            Unread::Unplaced => "its element was not read",
        };
        RecoveryError::Altered { slot, reason }
    }
}

/// The position in `found` (sorted by slot) of every slot up to the highest, or nothing if the
/// slots are too sparse for an index to be small (see [`RecoveredRecords::index`]).
fn index(found: &[(Slot, Found)]) -> Vec<u32> {
    let Some(&(highest, _)) = found.last() else {
        return Vec::new();
    };
    let entries = found.len() as u64;
    if entries >= u64::from(NOT_FOUND) || highest >= entries.saturating_mul(INDEX_SPAN) {
        return Vec::new();
    }
    let mut index = vec![NOT_FOUND; highest as usize + 1];
    for (i, (slot, _)) in found.iter().enumerate() {
        index[*slot as usize] = i as u32;
    }
    index
}

/// `found`'s value, from the records of the element it was spooled in.
fn pick(slot: Slot, found: &Found, held: &[(Slot, Record)]) -> Result<Bytes, RecoveryError> {
    held.iter()
        .find(|(s, r)| *s == slot && r.version == found.version && r.key[..] == found.key[..])
        .map(|(_, record)| record.value.clone())
        .ok_or(RecoveryError::Altered {
            slot,
            reason: "its element no longer holds the record read from it",
        })
}

impl std::fmt::Debug for RecoveredRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoveredRecords")
            .field("slots", &self.found.len())
            .field("spool", &self.spool)
            .finish_non_exhaustive()
    }
}

impl Default for RecoveredRecords {
    /// No record.
    fn default() -> Self {
        Self::from(Vec::new())
    }
}

impl From<Vec<(Slot, Record)>> for RecoveredRecords {
    /// Records in memory (tests, tools); of two for one slot, the later one counts.
    fn from(mut records: Vec<(Slot, Record)>) -> Self {
        // Stable, and linear on sorted input.
        records.sort_by_key(|(slot, _)| *slot);
        records.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        let found: Vec<(Slot, Found)> = records
            .into_iter()
            .map(|(slot, record)| (slot, Found::new(record.view(), Value::kept(&record.value))))
            .collect();
        Self::new(found, SpoolReader::default(), None, DecoyPool::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::RecordLayout;
    use crate::recovery::spool::SpoolWriter;

    fn record(version: u64) -> Record {
        Record {
            version,
            key: Bytes::from(format!("key {version}")),
            value: Entry::string(Bytes::from_static(b"value")).seal(),
        }
    }

    /// A restart holds one of these for every slot at once: its size is the restart's
    /// high-water mark (96 bytes, 104 with its slot, before keys and rare values were boxed and
    /// the deadline packed; then 64 and 72 plus a boxed key, 16 bytes more for a 16-byte key,
    /// until short keys were held inline and a value's place packed to 12 bytes).
    #[test]
    fn a_found_record_takes_64_bytes_and_72_with_its_slot_a_short_key_included() {
        assert_eq!(std::mem::size_of::<Found>(), 64);
        assert_eq!(std::mem::size_of::<(Slot, Found)>(), 72);
        assert_eq!(std::mem::size_of::<Value>(), 16);
        let short = [b'k'; super::super::key_copy::INLINE];
        let found = Found::new(
            RecordView {
                version: 1,
                key: &short,
                value: b"",
            },
            Value::Empty,
        );
        assert!(
            matches!(found.key, KeyCopy::Inline { .. }),
            "a key of {} bytes takes no allocation of its own",
            short.len()
        );
    }

    #[test]
    fn each_slot_gives_its_latest_record_as_often_as_it_is_read() {
        let mut records = RecoveredRecords::from(vec![
            (9, record(1)),
            (3, record(2)),
            (9, record(3)),
            (5, Record::empty()),
        ]);
        assert_eq!(
            records.written(),
            2,
            "slot 9 once, slot 3; not the empty slot 5"
        );
        assert_eq!(
            records.read(9).unwrap(),
            record(3),
            "the later of two for a slot"
        );
        assert_eq!(
            records.read(9).unwrap(),
            record(3),
            "a fill's read leaves it for a client's"
        );
        assert_eq!(records.read(3).unwrap(), record(2));
        assert_eq!(
            records.read(4).unwrap(),
            Record::empty(),
            "nothing recovered there"
        );
        assert_eq!(records.written(), 2);
    }

    /// Records 1..=3 spooled as plaintext elements at addresses 100 + slot, each a decoy too.
    fn spooled() -> RecoveredRecords {
        let layout = RecordLayout {
            max_key: 16,
            max_value: 32,
        };
        let mut format = ElementFormat::Plain(layout);
        let mut writer = SpoolWriter::default();
        let mut decoys = DecoyPool::default();
        let found = (1..=3)
            .map(|slot| {
                let record = record(slot);
                let element = format.encode(100 + u128::from(slot), slot, &record);
                let at = writer.append(100 + u128::from(slot), &element).unwrap();
                decoys.add(at);
                (slot, Found::new(record.view(), Value::Spooled(at)))
            })
            .collect();
        RecoveredRecords::spooled(found, writer.finish().unwrap(), format, decoys)
    }

    #[test]
    fn spooled_values_are_read_back_one_at_a_time_or_all_at_once() {
        let mut records = spooled();
        assert_eq!(records.get(2).map(|(v, _)| v), Some(2));
        assert_eq!(records.read(2).unwrap(), record(2));
        assert_eq!(
            records.into_vec().unwrap(),
            vec![(1, record(1)), (2, record(2)), (3, record(3))]
        );
    }

    #[test]
    fn records_read_together_come_in_the_order_asked_and_only_an_altered_one_fails() {
        let mut records = spooled();
        assert!(!records.index.is_empty(), "dense slots are indexed");
        records.found[1].1.version = 7;
        let taken = records.read_all(&[3, 2, 1, 9], 4);
        assert_eq!(taken[0].as_ref().unwrap(), &record(3));
        assert!(matches!(
            taken[1],
            Err(RecoveryError::Altered { slot: 2, .. })
        ));
        assert_eq!(taken[2].as_ref().unwrap(), &record(1));
        assert_eq!(
            taken[3].as_ref().unwrap(),
            &Record::empty(),
            "nothing found"
        );
        assert_eq!(records.read(3).unwrap(), record(3), "read again");
    }

    #[test]
    fn a_request_reads_back_as_many_elements_whatever_its_slots_hold() {
        let read_back = |records: &RecoveredRecords| records.counted.read_back.get();
        let drawn = |records: &RecoveredRecords| records.counted.drawn.get();
        let mut records = spooled();
        // Slot 2 holds a value; 7 and 8 hold nothing: two decoys make up a request of three,
        // and three places are drawn, as many as the request's reads.
        let taken = records.read_all(&[7, 2, 8], 3);
        assert_eq!(taken[1].as_ref().unwrap(), &record(2));
        assert_eq!(read_back(&records), 3);
        assert_eq!(drawn(&records), 3);
        // Nothing held at all: as many reads.
        records.read_all(&[7, 8, 9], 3);
        assert_eq!(read_back(&records), 6);
        // A client's read during the fill reads its own element and no decoy.
        assert_eq!(records.read(2).unwrap(), record(2));
        assert_eq!(read_back(&records), 7);
        assert_eq!(records.read(8).unwrap(), Record::empty());
        assert_eq!(read_back(&records), 7);
        // Every slot holds a value: no decoy, as many draws all the same.
        records.read_all(&[1, 2, 3], 3);
        assert_eq!(drawn(&records), 9);
        // The values alone when no request waits on them (before any fill).
        let mut loading = spooled();
        loading.values(&[], 0);
        assert_eq!(read_back(&loading), 0);
    }

    /// Read as long as a longer element, a short one spends the opening work the longer has
    /// beyond it, and one as long spends none.
    #[test]
    fn a_short_element_read_back_spends_what_a_long_one_has_beyond_it() {
        let spent = |records: &RecoveredRecords| records.counted.spent.get();
        let len = |records: &RecoveredRecords| records.found[0].1.value.spooled().unwrap().len;
        let plain = spooled();
        let short = len(&plain);
        let mut evened = spooled().reading_as_long_as(short + 100);
        assert_eq!(evened.read(1).unwrap(), record(1));
        assert_eq!(spent(&evened), 100);
        let mut as_long = spooled().reading_as_long_as(short);
        as_long.read(1).unwrap();
        assert_eq!(spent(&as_long), 0);
    }

    #[test]
    fn sparse_slots_are_found_without_an_index() {
        let far = 1 << 40;
        let mut records = RecoveredRecords::from(vec![(far, record(1)), (5, record(2))]);
        assert!(records.index.is_empty(), "an index would cost 2^40 entries");
        assert_eq!(records.read(far).unwrap(), record(1));
        assert_eq!(records.read(5).unwrap(), record(2));
        assert_eq!(records.read(6).unwrap(), Record::empty());
    }

    #[test]
    fn a_spooled_element_that_no_longer_holds_its_record_is_an_error_naming_the_slot() {
        let mut records = spooled();
        // The entry says version 7; the spooled element holds version 2.
        records.found[1].1.version = 7;
        let error = records.read(2).unwrap_err();
        assert!(
            matches!(error, RecoveryError::Altered { slot: 2, .. }),
            "{error}"
        );
    }
}
