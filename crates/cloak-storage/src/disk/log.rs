//! The durable server's log: numbered segment files of checksummed records, appended and fsynced.
//!
//! ```text
//! DIR/00000000000000000001.log, DIR/00000000000000000002.log, …   oldest first
//! record = crc32 (u32 LE, of the frame) ‖ frame
//! frame  = a wire request frame (length ‖ id ‖ tag ‖ body): one Write or Delete as sent
//! ```
//!
//! A record is all there or not there: replay checks every checksum and cuts the newest segment
//! at the first record a crash tore, so a batch is applied entirely or not at all. Records are
//! only appended; a segment that is full is closed and a new one started, and whole segments are
//! removed once nothing in them is live (the store copies what still is, see `disk`).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};

use crate::StorageOp;
use crate::wire;

/// The smallest size at which a segment is closed (the store picks larger ones for more data);
/// a record never spans two segments.
pub const MIN_SEGMENT_BYTES: u64 = 8 << 20;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path} is corrupted at byte {offset} ({reason}); it is not the newest segment, so this \
         is not a torn write from a crash: restore the data directory from a backup"
    )]
    Corrupted {
        path: String,
        offset: u64,
        reason: String,
    },
    #[error("{path}: the log takes no more writes until the server restarts: {reason}")]
    Broken { path: String, reason: String },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> LogError + '_ {
    move |source| LogError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Encodes `op` (a Write or Delete) as one record.
pub fn record(op: &StorageOp) -> Bytes {
    let frame = wire::encode_request(0, op).to_bytes();
    let mut out = BytesMut::with_capacity(4 + frame.len());
    out.extend_from_slice(&crc32fast::hash(&frame).to_le_bytes());
    out.extend_from_slice(&frame);
    out.freeze()
}

pub struct Log {
    dir: PathBuf,
    /// (id, bytes) of every segment, oldest first; the last is the one appended to.
    segments: Vec<(u64, u64)>,
    file: File,
    /// Set when a failed append could not be cut back: appending after it would hide later
    /// records from replay, so the log takes no more until the server restarts.
    broken: Option<String>,
}

impl Log {
    /// Opens the log in `dir` (which must exist), handing every record to `apply` in order with
    /// the id of the segment it is in. A torn record at the end of the newest segment is cut off.
    pub fn open(dir: &Path, mut apply: impl FnMut(u64, StorageOp)) -> Result<Self, LogError> {
        let mut ids = Vec::new();
        for entry in fs::read_dir(dir).map_err(io_error(dir))? {
            let entry = entry.map_err(io_error(dir))?;
            let name = entry.file_name();
            if let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".log"))
                .and_then(|n| n.parse::<u64>().ok())
            {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        let mut segments = Vec::with_capacity(ids.len());
        for (i, &id) in ids.iter().enumerate() {
            let path = segment_path(dir, id);
            let newest = i + 1 == ids.len();
            let bytes = replay(&path, id, newest, &mut apply)?;
            segments.push((id, bytes));
        }
        if segments.is_empty() {
            segments.push((1, 0));
        }
        let (id, bytes) = *segments.last().expect("at least one segment");
        let path = segment_path(dir, id);
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(&path)
            .map_err(io_error(&path))?;
        // Cut what replay did not accept (a torn tail) and append after the last good record.
        file.set_len(bytes).map_err(io_error(&path))?;
        file.seek(SeekFrom::Start(bytes)).map_err(io_error(&path))?;
        file.sync_all().map_err(io_error(&path))?;
        sync_dir(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            segments,
            file,
            broken: None,
        })
    }

    /// The segment records are appended to now.
    pub fn newest(&self) -> u64 {
        self.segments.last().expect("at least one segment").0
    }

    pub fn oldest(&self) -> u64 {
        self.segments[0].0
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Bytes in all segments.
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|(_, b)| b).sum()
    }

    /// Appends `records` and makes them durable (one fsync for all). On failure nothing of them
    /// counts: the segment is cut back to where it was.
    pub fn append(&mut self, records: &[Bytes]) -> Result<(), LogError> {
        let path = segment_path(&self.dir, self.newest());
        if let Some(reason) = &self.broken {
            return Err(LogError::Broken {
                path: path.display().to_string(),
                reason: reason.clone(),
            });
        }
        let before = self.segments.last().expect("at least one segment").1;
        let written = records
            .iter()
            .try_for_each(|r| self.file.write_all(r))
            .and_then(|()| self.file.sync_data());
        if let Err(error) = written {
            let cut = self
                .file
                .set_len(before)
                .and_then(|()| self.file.seek(SeekFrom::Start(before)).map(drop));
            if let Err(cut) = cut {
                self.broken = Some(format!(
                    "a failed write ({error}) could not be cut back ({cut})"
                ));
            }
            return Err(io_error(&path)(error));
        }
        let added: u64 = records.iter().map(|r| r.len() as u64).sum();
        self.segments.last_mut().expect("at least one segment").1 += added;
        Ok(())
    }

    /// Starts a new segment if the newest holds `segment_bytes` or more.
    pub fn roll_if_full(&mut self, segment_bytes: u64) -> Result<(), LogError> {
        if self.segments.last().expect("at least one segment").1 < segment_bytes {
            return Ok(());
        }
        let id = self.newest() + 1;
        let path = segment_path(&self.dir, id);
        let file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&path)
            .map_err(io_error(&path))?;
        sync_dir(&self.dir)?;
        self.file = file;
        self.segments.push((id, 0));
        Ok(())
    }

    /// Deletes the oldest segment (never the newest): the caller made sure nothing in it is live.
    pub fn remove_oldest(&mut self) -> Result<(), LogError> {
        if self.segments.len() < 2 {
            return Ok(());
        }
        let (id, _) = self.segments.remove(0);
        let path = segment_path(&self.dir, id);
        fs::remove_file(&path).map_err(io_error(&path))?;
        sync_dir(&self.dir)
    }
}

fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.log"))
}

fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))
}

/// Applies the records of one segment; returns the length of its good prefix.
fn replay(
    path: &Path,
    id: u64,
    newest: bool,
    apply: &mut impl FnMut(u64, StorageOp),
) -> Result<u64, LogError> {
    let mut contents = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut contents))
        .map_err(io_error(path))?;
    let contents = Bytes::from(contents);
    let mut offset = 0usize;
    while offset < contents.len() {
        match parse(&contents, offset) {
            Ok((op, next)) => {
                apply(id, op);
                offset = next;
            }
            Err(reason) if newest => {
                tracing::warn!(
                    path = %path.display(),
                    offset,
                    cut = contents.len() - offset,
                    reason,
                    "cutting a record a crash tore (it was never acknowledged)"
                );
                break;
            }
            Err(reason) => {
                return Err(LogError::Corrupted {
                    path: path.display().to_string(),
                    offset: offset as u64,
                    reason: reason.into(),
                });
            }
        }
    }
    Ok(offset as u64)
}

/// The record at `offset` and where the next one starts.
fn parse(contents: &Bytes, offset: usize) -> Result<(StorageOp, usize), &'static str> {
    let rest = &contents[offset..];
    if rest.len() < 8 {
        return Err("truncated header");
    }
    let crc = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes"));
    let len = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes")) as usize;
    let end = 8usize.checked_add(len).ok_or("bad length")?;
    if rest.len() < end {
        return Err("truncated record");
    }
    if crc32fast::hash(&rest[4..end]) != crc {
        return Err("checksum mismatch");
    }
    let frame = contents.slice(offset + 8..offset + end);
    match wire::decode_request(frame) {
        Ok((_, op @ (StorageOp::Write(_) | StorageOp::Delete(_)))) => Ok((op, offset + end)),
        Ok(_) => Err("a record that is neither a write nor a delete"),
        Err(_) => Err("undecodable record"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(addr: u128, value: &'static [u8]) -> StorageOp {
        StorageOp::Write(vec![(addr, Bytes::from_static(value))])
    }

    fn replayed(dir: &Path) -> Vec<(u64, StorageOp)> {
        let mut ops = Vec::new();
        Log::open(dir, |id, op| ops.push((id, op))).unwrap();
        ops
    }

    #[test]
    fn records_replay_in_order_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), |_, _| {}).unwrap();
        log.append(&[record(&write(1, b"a")), record(&write(2, b"b"))])
            .unwrap();
        log.append(&[record(&StorageOp::Delete(vec![1]))]).unwrap();
        drop(log);
        let whole = vec![
            (1, write(1, b"a")),
            (1, write(2, b"b")),
            (1, StorageOp::Delete(vec![1])),
        ];
        assert_eq!(replayed(dir.path()), whole);

        // A crash mid-append leaves part of a record: it is cut, and appends continue after it.
        let path = segment_path(dir.path(), 1);
        let torn = record(&write(3, b"torn"));
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&torn[..torn.len() - 2]).unwrap();
        drop(f);
        let mut log = Log::open(dir.path(), |_, _| {}).unwrap();
        log.append(&[record(&write(4, b"d"))]).unwrap();
        drop(log);
        let mut want = whole;
        want.push((1, write(4, b"d")));
        assert_eq!(replayed(dir.path()), want);
    }

    #[test]
    fn a_flipped_byte_in_an_older_segment_refuses_to_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), |_, _| {}).unwrap();
        log.append(&[record(&write(1, b"a"))]).unwrap();
        log.roll_if_full(1).unwrap();
        log.append(&[record(&write(2, b"b"))]).unwrap();
        drop(log);
        assert_eq!(
            replayed(dir.path()),
            vec![(1, write(1, b"a")), (2, write(2, b"b"))]
        );
        let path = segment_path(dir.path(), 1);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, bytes).unwrap();
        let error = Log::open(dir.path(), |_, _| {}).err().unwrap();
        assert!(matches!(error, LogError::Corrupted { .. }), "{error}");
    }
}
