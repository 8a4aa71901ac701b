//! The scanned elements recovery keeps on local disk until the new layout's fill writes them.
//!
//! A restart used to hold every recovered value in memory at once (about the store's size).
//! Recovery now appends every scanned element to a spool file as the scan goes, opens them from
//! there once it is done, and keeps in memory only what it needs per slot (version, key, where
//! the element is); the fill reads each element back when it places its record.
//!
//! What goes to the file: the elements exactly as storage sent them, each after its address and
//! length. The storage server holds them already, and sealed ones open only with the master key,
//! so the file tells whoever reads this disk nothing storage does not. Each is opened again when
//! read back, bound to its address, so a file changed underneath the proxy is an error, never a
//! wrong value. The scan appends every element before opening any (see `super::Recovery`); one
//! that then does not open stays in its place, its header given the address [`DISCARDED`], and
//! a later start reading the file skips it ([`entries`]).
//!
//! Without a state directory the spool is an unlinked temporary file (in `TMPDIR`), gone with
//! the process. With one, the proxy keeps it there, synced before the fill overwrites anything,
//! until storage holds every record again: a proxy that dies in the middle of the fill has left
//! some records in no element, and the next start reads them back from it (see
//! `cloak_proxy::state`).

use std::fs::File;
use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};
use std::os::unix::fs::FileExt;

use bytes::Bytes;

use crate::storage::{Addr, STORE_MARKER};

/// The address a discarded element's header is given ([`SpoolWriter::discard`]): the store
/// marker's, which no scheme's element has, so no element read back from the spool is mistaken
/// for one that was discarded.
pub const DISCARDED: Addr = STORE_MARKER;

/// Bytes before each element in the file: its address, which opening it again needs, and its
/// length, which reading the file from the start needs.
const HEADER_LEN: u64 = 16 + 4;

/// The header of an element of `len` bytes read at `address` (see [`HEADER_LEN`]).
fn header(address: Addr, len: u32) -> [u8; HEADER_LEN as usize] {
    let mut header = [0; HEADER_LEN as usize];
    header[..16].copy_from_slice(&address.to_le_bytes());
    header[16..].copy_from_slice(&len.to_le_bytes());
    header
}

/// Bytes an element of `len` bytes takes in the file, its header included: the next element
/// starts that far after it.
pub(super) fn stride(len: u32) -> u64 {
    HEADER_LEN + u64::from(len)
}

/// Where an element is in the spool.
///
/// 12 bytes, aligned to 4: recovery's table holds one for nearly every slot of the store during
/// a restart (in `records::Value`, which is then 16 bytes, not 24).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(C, packed(4))]
pub struct Spooled {
    /// Byte offset of its header in the file.
    pub at: u64,
    /// The element's length in bytes.
    pub len: u32,
}

/// Elements appended during a scan (see the module docs).
#[derive(Default)]
pub struct SpoolWriter {
    /// Made at the first element unless given, so a scan of an empty store makes no file.
    file: Option<BufWriter<File>>,
    len: u64,
    /// Whether [`SpoolWriter::finish`] syncs the file to disk.
    durable: bool,
}

/// A spool's buffer between writes to the file: large enough that a scan chunk of small
/// elements costs a few system calls, small beside the store.
const WRITE_BUFFER: usize = 1 << 20;

impl SpoolWriter {
    /// A spool written to `file` (empty, open for reading and writing), synced to disk when
    /// finished.
    pub fn durable(file: File) -> Self {
        Self {
            file: Some(BufWriter::with_capacity(WRITE_BUFFER, file)),
            len: 0,
            durable: true,
        }
    }

    /// Appends `element`, read at `address`, and says where it went.
    pub fn append(&mut self, address: Addr, element: &[u8]) -> std::io::Result<Spooled> {
        let len = u32::try_from(element.len()).map_err(|_| {
            std::io::Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "an element of {} bytes is too large to spool",
                    element.len()
                ),
            )
        })?;
        let file = match &mut self.file {
            Some(file) => file,
            None => self.file.insert(BufWriter::with_capacity(
                WRITE_BUFFER,
                tempfile::tempfile()?,
            )),
        };
        file.write_all(&header(address, len))?;
        file.write_all(element)?;
        let spooled = Spooled { at: self.len, len };
        self.len += stride(len);
        Ok(spooled)
    }

    /// The elements appended from byte `at` on, each with where it is, read back from the file
    /// (what is buffered is written out first). Later appends are not read.
    pub fn read_from(&mut self, at: u64) -> std::io::Result<Entries> {
        let len = self.len;
        let Some(file) = self.flushed()? else {
            return Ok(Entries::empty());
        };
        Ok(Entries::new(file.try_clone()?, at, len))
    }

    /// The file, with what is buffered written out to it; `None` before the first element.
    fn flushed(&mut self) -> std::io::Result<Option<&File>> {
        let Some(writer) = &mut self.file else {
            return Ok(None);
        };
        writer.flush()?;
        Ok(Some(writer.get_ref()))
    }

    /// Gives the element at `at` the address [`DISCARDED`], in place: it stays in the file (the
    /// places of the others do not move), and a later start reading the file skips it.
    pub fn discard(&mut self, at: Spooled) -> std::io::Result<()> {
        let file = self.flushed()?.ok_or(ErrorKind::NotFound)?;
        file.write_all_at(&DISCARDED.to_le_bytes(), at.at)
    }

    /// Puts `element`, read at `address`, in the place of the element at `at`, which is as
    /// long: the places of the others do not move.
    pub fn replace(&mut self, at: Spooled, address: Addr, element: &[u8]) -> std::io::Result<()> {
        if element.len() != at.len as usize {
            return Err(std::io::Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "an element of {} bytes cannot take the place of one of {}",
                    element.len(),
                    at.len
                ),
            ));
        }
        let file = self.flushed()?.ok_or(ErrorKind::NotFound)?;
        file.write_all_at(&header(address, at.len), at.at)?;
        file.write_all_at(element, at.at + HEADER_LEN)
    }

    /// Bytes appended so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes out what is buffered (and syncs a durable spool); the spool is read from then on.
    pub fn finish(self) -> std::io::Result<SpoolReader> {
        let file = match self.file {
            Some(writer) => {
                let file = writer.into_inner().map_err(|e| e.into_error())?;
                if self.durable {
                    file.sync_data()?;
                }
                Some(file)
            }
            None => None,
        };
        Ok(SpoolReader { file })
    }
}

/// A finished spool, read back an element at a time, from any thread.
#[derive(Debug, Default)]
pub struct SpoolReader {
    file: Option<File>,
}

impl SpoolReader {
    /// The element at `spooled`, and the address it was read at. One positioned read of header
    /// and element together, which leaves no file position behind, so threads can read at once.
    pub fn read(&self, spooled: Spooled) -> std::io::Result<(Addr, Bytes)> {
        self.read_as_long_as(spooled, 0)
    }

    /// [`SpoolReader::read`], reading `at_least` bytes of the file for the element if it is
    /// shorter (those after it, as far as the file has them), in the same one read: so that
    /// reading a short element costs what reading a long one does (see `super::decoys`).
    pub fn read_as_long_as(
        &self,
        spooled: Spooled,
        at_least: u32,
    ) -> std::io::Result<(Addr, Bytes)> {
        let Some(file) = &self.file else {
            return Err(std::io::Error::new(
                ErrorKind::UnexpectedEof,
                "the spool is empty",
            ));
        };
        let element_end = stride(spooled.len) as usize;
        let mut bytes = vec![0; stride(spooled.len.max(at_least)) as usize];
        let mut read = 0;
        while read < bytes.len() {
            match file.read_at(&mut bytes[read..], spooled.at + read as u64) {
                Ok(0) => break,
                Ok(n) => read += n,
                Err(error) if error.kind() == ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        if read < element_end {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        let (address, len) = read_header(&mut &bytes[..])?.ok_or(ErrorKind::UnexpectedEof)?;
        // Copied out: `at`, a `u64` in a struct packed to 4, cannot be borrowed, as `format!`
        // would.
        let Spooled { at, len: expected } = spooled;
        if len != expected {
            return Err(std::io::Error::new(
                ErrorKind::InvalidData,
                format!("the element at byte {at} is {len} bytes long, not {expected}"),
            ));
        }
        Ok((
            address,
            Bytes::from(bytes).slice(HEADER_LEN as usize..element_end),
        ))
    }
}

/// Every element of the spool in `file`, from its start, as (address, element), those
/// [discarded](SpoolWriter::discard) skipped. An element cut short is an error: a spool is only
/// ever read once it was completely written.
pub fn entries(file: File) -> impl Iterator<Item = std::io::Result<(Addr, Bytes)>> {
    let end = file.metadata().map_or(u64::MAX, |m| m.len());
    Entries::new(file, 0, end).filter_map(|entry| match entry {
        Ok((_, DISCARDED, _)) => None,
        Ok((_, address, element)) => Some(Ok((address, element))),
        Err(error) => Some(Err(error)),
    })
}

/// The elements of a stretch of a spool file, each with where it is, read forward through a
/// buffer with positioned reads (they leave the file's position, which a writer may share,
/// alone). Ends after the first error.
pub struct Entries {
    reader: Option<BufReader<ReadAt>>,
    at: u64,
}

impl Entries {
    fn new(file: File, at: u64, end: u64) -> Self {
        let reader = BufReader::with_capacity(WRITE_BUFFER, ReadAt { file, at, end });
        Self {
            reader: Some(reader),
            at,
        }
    }

    fn empty() -> Self {
        Self {
            reader: None,
            at: 0,
        }
    }
}

impl Iterator for Entries {
    type Item = std::io::Result<(Spooled, Addr, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        let reader = self.reader.as_mut()?;
        let entry = match read_header(reader) {
            Ok(None) => None,
            Ok(Some((address, len))) => Some(read_element(reader, len).map(|element| {
                let spooled = Spooled { at: self.at, len };
                self.at += stride(len);
                (spooled, address, element)
            })),
            Err(error) => Some(Err(error)),
        };
        if !matches!(entry, Some(Ok(_))) {
            self.reader = None;
        }
        entry
    }
}

/// A file read from `at` up to `end` with positioned reads.
struct ReadAt {
    file: File,
    at: u64,
    end: u64,
}

impl Read for ReadAt {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = usize::try_from(self.end.saturating_sub(self.at)).unwrap_or(usize::MAX);
        let len = buf.len().min(left);
        if len == 0 {
            return Ok(0);
        }
        let read = self.file.read_at(&mut buf[..len], self.at)?;
        self.at += read as u64;
        Ok(read)
    }
}

/// The next header, or `None` at the end of the file.
fn read_header(reader: &mut impl Read) -> std::io::Result<Option<(Addr, u32)>> {
    let mut header = [0u8; HEADER_LEN as usize];
    let mut filled = 0;
    while filled < header.len() {
        match reader.read(&mut header[filled..]) {
            Ok(0) if filled == 0 => return Ok(None),
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    let (address, len) = header.split_at(16);
    let address = Addr::from_le_bytes(address.try_into().map_err(|_| ErrorKind::InvalidData)?);
    let len = u32::from_le_bytes(len.try_into().map_err(|_| ErrorKind::InvalidData)?);
    Ok(Some((address, len)))
}

fn read_element(reader: &mut impl Read, len: u32) -> std::io::Result<Bytes> {
    let mut element = vec![0; len as usize];
    reader.read_exact(&mut element)?;
    Ok(Bytes::from(element))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A new spool file at `path`, open as a start opens one.
    pub(in crate::recovery) fn new_file(path: &std::path::Path) -> File {
        File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .unwrap()
    }

    fn three(writer: &mut SpoolWriter) -> [Spooled; 3] {
        [
            writer.append(1, b"first").unwrap(),
            writer.append(u128::MAX - 1, &[7; 3000]).unwrap(),
            writer.append(3, b"").unwrap(),
        ]
    }

    #[test]
    fn elements_come_back_as_appended_in_any_order() {
        let mut writer = SpoolWriter::default();
        let [a, b, c] = three(&mut writer);
        assert_eq!(writer.len(), 3 * HEADER_LEN + 3005);
        let reader = writer.finish().unwrap();
        assert_eq!(
            reader.read(b).unwrap(),
            (u128::MAX - 1, Bytes::from(vec![7; 3000]))
        );
        assert_eq!(reader.read(a).unwrap(), (1, Bytes::from_static(b"first")));
        assert_eq!(reader.read(c).unwrap(), (3, Bytes::new()));
        assert!(
            reader.read(Spooled { at: 3000, len: 10 }).is_err(),
            "past the end is an error"
        );
        assert!(
            reader.read(Spooled { at: a.at, len: 4 }).is_err(),
            "a length other than the one written is an error"
        );
    }

    /// A short element read as long as a longer one comes back whole, the bytes after it read
    /// and dropped, at the end of the file too; an element replaced in its place reads back
    /// as the new one.
    #[test]
    fn a_short_element_read_as_long_as_another_comes_back_whole_and_a_replaced_one_anew() {
        let mut writer = SpoolWriter::default();
        let [a, b, c] = three(&mut writer);
        writer.replace(a, 9, b"FIRST").unwrap();
        assert!(writer.replace(a, 9, b"too long").is_err());
        let reader = writer.finish().unwrap();
        assert_eq!(
            reader.read_as_long_as(a, 3000).unwrap(),
            (9, Bytes::from_static(b"FIRST"))
        );
        assert_eq!(reader.read_as_long_as(c, 3000).unwrap(), (3, Bytes::new()));
        assert_eq!(reader.read_as_long_as(b, 10).unwrap().1.len(), 3000);
    }

    /// What was appended reads back from any place on, while appending goes on, and a
    /// discarded element keeps its place but no longer reads as an element.
    #[test]
    fn appended_elements_read_back_from_a_place_and_a_discarded_one_is_skipped() {
        let mut writer = SpoolWriter::default();
        assert_eq!(writer.read_from(0).unwrap().count(), 0, "no file yet");
        let [a, b, c] = three(&mut writer);
        let from_b: Vec<(Spooled, Addr, Bytes)> = writer
            .read_from(b.at)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(from_b.len(), 2);
        assert_eq!((from_b[0].0, from_b[0].1), (b, u128::MAX - 1));
        assert_eq!((from_b[1].0, from_b[1].1), (c, 3));
        let d = writer.append(4, b"fourth").unwrap();
        writer.discard(b).unwrap();
        let places: Vec<(Spooled, Addr)> = (writer.read_from(a.at).unwrap())
            .map(|entry| entry.map(|(at, address, _)| (at, address)))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(places, [(a, 1), (b, DISCARDED), (c, 3), (d, 4)]);
    }

    #[test]
    fn an_empty_spool_makes_no_file_and_reads_nothing() {
        let writer = SpoolWriter::default();
        assert!(writer.is_empty());
        let reader = writer.finish().unwrap();
        assert!(reader.read(Spooled { at: 0, len: 1 }).is_err());
    }

    #[test]
    fn a_durable_spool_reads_back_from_its_start_and_a_cut_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool");
        let mut writer = SpoolWriter::durable(new_file(&path));
        three(&mut writer);
        writer.finish().unwrap();
        let all: Vec<(Addr, Bytes)> = entries(File::open(&path).unwrap())
            .collect::<Result<_, _>>()
            .unwrap();
        let addresses: Vec<Addr> = all.iter().map(|(a, _)| *a).collect();
        assert_eq!(addresses, [1, u128::MAX - 1, 3]);
        assert_eq!(all[1].1.len(), 3000);

        let length = std::fs::metadata(&path).unwrap().len();
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(length - 30)
            .unwrap();
        let cut: Vec<_> = entries(File::open(&path).unwrap()).collect();
        assert_eq!(cut.len(), 2, "the first element, then the error");
        assert!(cut[0].is_ok() && cut[1].is_err());
    }
}
