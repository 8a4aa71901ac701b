//! The storage wire protocol between the proxy and `cloak server`.
//!
//! Every message is a frame: `length (u32 LE) ‖ payload`. Little-endian throughout.
//!
//! ```text
//! request  = id (u64) ‖ tag (u8) ‖ body
//!   tag 1 READ    body = n (u32) ‖ n × address (u128)
//!   tag 2 WRITE   body = n (u32) ‖ n × (address (u128) ‖ len (u32) ‖ bytes)
//!   tag 3 DELETE  body = n (u32) ‖ n × address (u128)
//!   tag 4 SCAN    body = has_after (u8) ‖ after (u128) ‖ limit (u32)
//!   tag 5 FENCE   body = token (16 bytes, random): stop every other connection, wait out what
//!                 they started, and from now on refuse a JOIN with any other token (a proxy
//!                 sends it before it recovers; see the `fence` module), answered DONE
//!   tag 6 JOIN    body = token: this connection is the proxy's that raised the fence with this
//!                 token (sent first on every connection it opens after), answered DONE (also by
//!                 a server that knows no token, restarted since), or ERROR and closed when a
//!                 later fence has another token
//! A write or delete may go unanswered, and unapplied, when its peer has already closed the
//! connection (see `server::peer_left`).
//! response = id (u64) ‖ tag (u8) ‖ body
//!   tag 1 VALUES  body = n (u32) ‖ n × (0 | 1 ‖ len (u32) ‖ bytes)
//!   tag 2 DONE    body = empty
//!   tag 3 ERROR   body = UTF-8 message
//!   tag 4 ENTRIES body = n (u32) ‖ n × (address (u128) ‖ len (u32) ‖ bytes)
//! ```
//!
//! A server answers the requests of one connection in order.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::io::IoSlice;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::{StorageError, StorageOp, StorageReply};

/// Largest frame either side accepts (a batch of 4,000 elements of 32 KiB is 128 MiB).
pub const MAX_FRAME: usize = 512 << 20;

const READ: u8 = 1;
const WRITE: u8 = 2;
const DELETE: u8 = 3;
const SCAN: u8 = 4;
const FENCE: u8 = 5;
const JOIN: u8 = 6;
const VALUES: u8 = 1;
const DONE: u8 = 2;
const ERROR: u8 = 3;
const ENTRIES: u8 = 4;

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The peer closed the connection.
    #[error("connection closed")]
    Closed,
    /// A frame longer than the limit (its length given).
    #[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLarge(usize),
    /// A frame that does not follow the protocol.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
    /// The connection failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads one frame's payload; `Err(Closed)` on a clean end of stream between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
) -> Result<Bytes, WireError> {
    let len = read_frame_len(reader, buf).await?;
    if len > MAX_FRAME {
        return Err(WireError::TooLarge(len));
    }
    read_frame_payload(reader, buf, len).await
}

/// Waits until the next frame's length prefix is in `buf` and returns the payload length it
/// announces, consuming nothing: a reader that knows how long the frame may be refuses a longer
/// one here, before buffering it, then reads it with [`read_frame_payload`]. `Err(Closed)` on a
/// clean end of stream between frames.
pub async fn read_frame_len<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
) -> Result<usize, WireError> {
    while buf.len() < 4 {
        read_more(reader, buf).await?;
    }
    Ok(u32::from_le_bytes(buf[..4].try_into().expect("4 bytes")) as usize)
}

/// Reads the payload of the frame whose prefix [`read_frame_len`] found, `len` bytes.
pub async fn read_frame_payload<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
    len: usize,
) -> Result<Bytes, WireError> {
    while buf.len() < 4 + len {
        read_more(reader, buf).await?;
    }
    buf.advance(4);
    Ok(buf.split_to(len).freeze())
}

/// Makes room in `buf` for a whole frame of `total` bytes (its prefix included), for a reader
/// that knows the frame may be that long: the buffer's own allocation when no earlier frame
/// still holds it, else a new one of exactly that size.
///
/// Not `BytesMut::reserve`, which grows a buffer too small for the frame like a `Vec`, by
/// doubling: a batch's answer of 4.5 MB arriving in a buffer of about that size got one of
/// 9 MB (heaptrack, `cloak bench --scheme cloak --keys 1000000`: the proxy's largest peak
/// allocation site, 13.5 MB at its peak).
pub fn make_room_for_frame(buf: &mut BytesMut, total: usize) {
    if buf.try_reclaim(total.saturating_sub(buf.len())) {
        return;
    }
    let mut exact = BytesMut::with_capacity(total.max(buf.len()));
    exact.extend_from_slice(buf);
    *buf = exact;
}

/// Adds what the next read brings to `buf`.
async fn read_more<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
) -> Result<(), WireError> {
    // No reservation for the announced length: a peer could announce `MAX_FRAME` and send
    // nothing. `read_buf` grows the buffer as bytes arrive (doubling), so a frame costs at most
    // about twice what was really received.
    if reader.read_buf(buf).await? == 0 {
        return Err(if buf.is_empty() {
            WireError::Closed
        } else {
            WireError::Malformed("stream ended inside a frame")
        });
    }
    Ok(())
}

/// The longest error message an answer may carry whatever its request (`cloak server`'s are a
/// sentence, well under this).
pub const MAX_ERROR_MESSAGE: usize = 4096;

/// The longest answer payload (a frame without its length prefix) `op` allows when no element
/// is longer than `max_element` bytes, from public sizes only: a read of `n` addresses is
/// answered with `n` values at most, a scan of limit `L` with `L` entries at most, a write or a
/// delete with DONE; any of them may be an error instead. Saturates at [`MAX_FRAME`].
pub fn max_response_len(op: &StorageOp, max_element: usize) -> usize {
    let element = max_element as u64;
    let body =
        match op {
            // n (u32), then each value's presence flag, length (u32) and bytes.
            StorageOp::Read(addrs) => 4u64
                .saturating_add((addrs.len() as u64).saturating_mul(element.saturating_add(1 + 4))),
            // n (u32), then each entry's address (u128), length (u32) and bytes.
            StorageOp::Scan { limit, .. } => 4u64
                .saturating_add(u64::from(*limit).saturating_mul(element.saturating_add(16 + 4))),
            StorageOp::Write(_) | StorageOp::Delete(_) => 0,
        };
    let longest = (HEAD as u64).saturating_add(body.max(MAX_ERROR_MESSAGE as u64));
    usize::try_from(longest)
        .unwrap_or(usize::MAX)
        .min(MAX_FRAME)
}

/// Values at least this long are sent from where they lie instead of being copied into the frame.
const BY_REFERENCE: usize = 256;

/// An encoded frame as a list of chunks: the small parts gathered in one buffer, element values
/// referenced where they already are. Written with vectored I/O ([`write_frames`]), so a batch's
/// thousands of elements go to the socket without being copied into one big buffer first.
///
/// The small parts' buffer is sized for the whole frame before anything is put in it
/// (`Frame::sized`): every chunk cut from it is then a view of that one allocation. Grown as
/// it went, each chunk cut from a buffer shared with the chunks before it needed a new buffer and
/// a reference count of its own: three allocations for every element of a write-back, thousands
/// per batch (heaptrack, `cloak bench --scheme cloak --keys 1000000`: the most called allocation
/// sites of the proxy).
#[derive(Clone, Debug)]
pub struct Frame {
    chunks: Vec<Bytes>,
    small: BytesMut,
    len: usize,
}

impl Frame {
    /// An empty frame for `chunks` chunks at most, whose small parts take `small` bytes at most.
    fn sized(small: usize, chunks: usize) -> Self {
        Self {
            chunks: Vec::with_capacity(chunks),
            small: BytesMut::with_capacity(small),
            len: 0,
        }
    }

    /// The bytes [`Frame::value`] puts in the small parts' buffer for `value`.
    fn small_part(value: &Bytes) -> usize {
        4 + if value.len() < BY_REFERENCE {
            value.len()
        } else {
            0
        }
    }

    fn put(&mut self, write: impl FnOnce(&mut BytesMut)) {
        let before = self.small.len();
        let buffer = self.small.as_ptr();
        write(&mut self.small);
        // Checked by every test that encodes a frame (they run with debug assertions).
        debug_assert_eq!(
            buffer,
            self.small.as_ptr(),
            "a frame's small parts outgrew the buffer Frame::sized gave them"
        );
        self.len += self.small.len() - before;
    }

    fn value(&mut self, value: &Bytes) {
        self.put(|out| out.put_u32_le(value.len() as u32));
        if value.len() < BY_REFERENCE {
            self.put(|out| out.put_slice(value));
        } else {
            self.flush_small();
            self.len += value.len();
            self.chunks.push(value.clone());
        }
    }

    fn flush_small(&mut self) {
        if !self.small.is_empty() {
            self.chunks.push(self.small.split().freeze());
        }
    }

    /// The chunks, led by the length prefix.
    fn finish(mut self) -> Self {
        self.flush_small();
        let prefix = Bytes::copy_from_slice(&(self.len as u32).to_le_bytes());
        self.chunks.insert(0, prefix);
        self.len += 4;
        self
    }

    /// Total bytes on the wire.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the frame holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The frame as one buffer (tests, and anything that wants it contiguous).
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.len);
        for chunk in &self.chunks {
            out.put_slice(chunk);
        }
        out.freeze()
    }
}

/// Writes frames back to back with vectored writes, then flushes: over TLS the last ciphertext
/// of a write may stay in the TLS stream until it is flushed.
pub async fn write_frames<W: AsyncWrite + Unpin>(
    writer: &mut W,
    frames: &[Frame],
) -> std::io::Result<()> {
    let chunks: Vec<&Bytes> = frames.iter().flat_map(|f| &f.chunks).collect();
    let (mut next, mut offset) = (0, 0);
    while next < chunks.len() {
        // The kernel takes at most 1024 slices per call.
        let slices: Vec<IoSlice> = chunks[next..]
            .iter()
            .take(1024)
            .enumerate()
            .map(|(i, c)| IoSlice::new(if i == 0 { &c[offset..] } else { &c[..] }))
            .collect();
        let mut written = writer.write_vectored(&slices).await?;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while written > 0 {
            let rest = chunks[next].len() - offset;
            if written >= rest {
                written -= rest;
                next += 1;
                offset = 0;
            } else {
                offset += written;
                written = 0;
            }
        }
    }
    writer.flush().await
}

/// The frame of request `id` asking `op`.
pub fn encode_request(id: u64, op: &StorageOp) -> Frame {
    let mut f = match op {
        StorageOp::Read(addrs) | StorageOp::Delete(addrs) => {
            Frame::sized(HEAD + 4 + 16 * addrs.len(), 2)
        }
        StorageOp::Write(writes) => sized_for_entries(writes),
        StorageOp::Scan { .. } => Frame::sized(HEAD + 1 + 16 + 4, 2),
    };
    f.put(|out| out.put_u64_le(id));
    match op {
        StorageOp::Read(addrs) | StorageOp::Delete(addrs) => f.put(|out| {
            out.put_u8(if matches!(op, StorageOp::Read(_)) {
                READ
            } else {
                DELETE
            });
            out.put_u32_le(addrs.len() as u32);
            for a in addrs {
                out.put_u128_le(*a);
            }
        }),
        StorageOp::Write(writes) => {
            f.put(|out| out.put_u8(WRITE));
            put_entries(&mut f, writes);
        }
        StorageOp::Scan { after, limit } => f.put(|out| {
            out.put_u8(SCAN);
            out.put_u8(u8::from(after.is_some()));
            out.put_u128_le(after.unwrap_or(0));
            out.put_u32_le(*limit);
        }),
    }
    f.finish()
}

/// Bytes of a frame's head: its id (u64) and tag (u8).
const HEAD: usize = 8 + 1;

/// An empty frame sized for a head and `entries` (see [`put_entries`]).
fn sized_for_entries(entries: &[(u128, Bytes)]) -> Frame {
    let small: usize = entries.iter().map(|(_, v)| 16 + Frame::small_part(v)).sum();
    // The prefix, then at most a small chunk and a value for each entry, and a last small one.
    Frame::sized(HEAD + 4 + small, 2 * entries.len() + 2)
}

fn put_entries(f: &mut Frame, entries: &[(u128, Bytes)]) {
    f.put(|out| out.put_u32_le(entries.len() as u32));
    for (a, v) in entries {
        f.put(|out| out.put_u128_le(*a));
        f.value(v);
    }
}

/// The frame answering request `id` with `result`.
pub fn encode_response(id: u64, result: &Result<StorageReply, StorageError>) -> Frame {
    let mut f = match result {
        Ok(StorageReply::Values(values)) => {
            let small: usize = values
                .iter()
                .map(|v| 1 + v.as_ref().map_or(0, Frame::small_part))
                .sum();
            Frame::sized(HEAD + 4 + small, 2 * values.len() + 2)
        }
        Ok(StorageReply::Done) => Frame::sized(HEAD, 2),
        Ok(StorageReply::Entries(entries)) => sized_for_entries(entries),
        Err(StorageError(message)) => Frame::sized(HEAD + message.len(), 2),
    };
    f.put(|out| out.put_u64_le(id));
    match result {
        Ok(StorageReply::Values(values)) => {
            f.put(|out| {
                out.put_u8(VALUES);
                out.put_u32_le(values.len() as u32);
            });
            for v in values {
                match v {
                    Some(v) => {
                        f.put(|out| out.put_u8(1));
                        f.value(v);
                    }
                    None => f.put(|out| out.put_u8(0)),
                }
            }
        }
        Ok(StorageReply::Done) => f.put(|out| out.put_u8(DONE)),
        Ok(StorageReply::Entries(entries)) => {
            f.put(|out| out.put_u8(ENTRIES));
            put_entries(&mut f, entries);
        }
        Err(StorageError(message)) => f.put(|out| {
            out.put_u8(ERROR);
            out.put_slice(message.as_bytes());
        }),
    }
    f.finish()
}

fn need(frame: &Bytes, n: usize) -> Result<(), WireError> {
    if frame.remaining() < n {
        Err(WireError::Malformed("truncated"))
    } else {
        Ok(())
    }
}

fn header(frame: &mut Bytes) -> Result<(u64, u8), WireError> {
    need(frame, 9)?;
    Ok((frame.get_u64_le(), frame.get_u8()))
}

/// A count of entries of at least `min_size` bytes each, checked against what the frame holds
/// so a lying count cannot make us allocate.
fn count(frame: &mut Bytes, min_size: usize) -> Result<usize, WireError> {
    need(frame, 4)?;
    let n = frame.get_u32_le() as usize;
    if n.saturating_mul(min_size) > frame.remaining() {
        return Err(WireError::Malformed("entry count exceeds the frame"));
    }
    Ok(n)
}

fn bytes(frame: &mut Bytes) -> Result<Bytes, WireError> {
    need(frame, 4)?;
    let len = frame.get_u32_le() as usize;
    need(frame, len)?;
    Ok(frame.split_to(len))
}

fn addresses(frame: &mut Bytes) -> Result<Vec<u128>, WireError> {
    let n = count(frame, 16)?;
    Ok((0..n).map(|_| frame.get_u128_le()).collect())
}

fn entries(frame: &mut Bytes) -> Result<Vec<(u128, Bytes)>, WireError> {
    let n = count(frame, 20)?;
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        need(frame, 16)?;
        let addr = frame.get_u128_le();
        entries.push((addr, bytes(frame)?));
    }
    Ok(entries)
}

fn done(frame: &Bytes) -> Result<(), WireError> {
    if frame.has_remaining() {
        Err(WireError::Malformed("trailing bytes"))
    } else {
        Ok(())
    }
}

/// The request id and op a frame carries.
pub fn decode_request(mut frame: Bytes) -> Result<(u64, StorageOp), WireError> {
    let (id, tag) = header(&mut frame)?;
    let op = match tag {
        READ => StorageOp::Read(addresses(&mut frame)?),
        DELETE => StorageOp::Delete(addresses(&mut frame)?),
        WRITE => StorageOp::Write(entries(&mut frame)?),
        SCAN => {
            need(&frame, 21)?;
            let has_after = frame.get_u8() == 1;
            let after = frame.get_u128_le();
            StorageOp::Scan {
                after: has_after.then_some(after),
                limit: frame.get_u32_le(),
            }
        }
        _ => return Err(WireError::Malformed("unknown request tag")),
    };
    done(&frame)?;
    Ok((id, op))
}

/// What a connection to `cloak server` may ask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// A storage op.
    Op(StorageOp),
    /// Stop every other connection and wait out the requests they started, then refuse a
    /// [`Request::Join`] with any other token (see the `fence` module): a proxy sends it before
    /// it recovers the store.
    Fence(FenceToken),
    /// This connection is the proxy's that raised the fence with this token.
    Join(FenceToken),
}

/// A random token naming one fence, and so one proxy's run: it says nothing about the store.
pub type FenceToken = [u8; 16];

/// The frame of request `id` asking for a fence named `token`.
pub fn encode_fence(id: u64, token: &FenceToken) -> Frame {
    encode_token(id, FENCE, token)
}

/// The frame of request `id` joining the fence named `token`.
pub fn encode_join(id: u64, token: &FenceToken) -> Frame {
    encode_token(id, JOIN, token)
}

fn encode_token(id: u64, tag: u8, token: &FenceToken) -> Frame {
    let mut f = Frame::sized(HEAD + token.len(), 1);
    f.put(|out| {
        out.put_u64_le(id);
        out.put_u8(tag);
        out.put_slice(token);
    });
    f.finish()
}

/// The longest answer a fence or a join allows: DONE, or an error.
pub const MAX_FENCE_RESPONSE: usize = HEAD + MAX_ERROR_MESSAGE;

/// The request id and request a frame sent to `cloak server` carries.
pub fn decode_server_request(frame: Bytes) -> Result<(u64, Request), WireError> {
    let mut body = frame.clone();
    let (id, tag) = header(&mut body)?;
    let token = |body: &mut Bytes| -> Result<FenceToken, WireError> {
        need(body, 16)?;
        let mut token = [0; 16];
        body.copy_to_slice(&mut token);
        done(body)?;
        Ok(token)
    };
    match tag {
        FENCE => Ok((id, Request::Fence(token(&mut body)?))),
        JOIN => Ok((id, Request::Join(token(&mut body)?))),
        _ => {
            let (id, op) = decode_request(frame)?;
            Ok((id, Request::Op(op)))
        }
    }
}

/// The request id and result a frame carries.
pub fn decode_response(
    mut frame: Bytes,
) -> Result<(u64, Result<StorageReply, StorageError>), WireError> {
    let (id, tag) = header(&mut frame)?;
    let result = match tag {
        VALUES => {
            let n = count(&mut frame, 1)?;
            let mut values = Vec::with_capacity(n);
            for _ in 0..n {
                need(&frame, 1)?;
                values.push(match frame.get_u8() {
                    0 => None,
                    1 => Some(bytes(&mut frame)?),
                    _ => return Err(WireError::Malformed("bad presence flag")),
                });
            }
            Ok(StorageReply::Values(values))
        }
        DONE => Ok(StorageReply::Done),
        ENTRIES => Ok(StorageReply::Entries(entries(&mut frame)?)),
        ERROR => {
            let message = String::from_utf8_lossy(&frame).into_owned();
            frame.advance(frame.remaining());
            Err(StorageError(message))
        }
        _ => return Err(WireError::Malformed("unknown response tag")),
    };
    done(&frame)?;
    Ok((id, result))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn round_trip_request(op: StorageOp) {
        let out = encode_request(7, &op).to_bytes();
        let mut reader = &out[..];
        let frame = read_frame(&mut reader, &mut BytesMut::new()).await.unwrap();
        assert_eq!(decode_request(frame).unwrap(), (7, op));
    }

    #[tokio::test]
    async fn requests_and_responses_round_trip() {
        round_trip_request(StorageOp::Read(vec![1, u128::MAX])).await;
        round_trip_request(StorageOp::Delete(vec![])).await;
        round_trip_request(StorageOp::Scan {
            after: None,
            limit: 10,
        })
        .await;
        round_trip_request(StorageOp::Scan {
            after: Some(7),
            limit: 1,
        })
        .await;
        round_trip_request(StorageOp::Write(vec![
            (3, Bytes::from_static(b"abc")),
            (4, Bytes::new()),
        ]))
        .await;
        for result in [
            Ok(StorageReply::Values(vec![
                Some(Bytes::from_static(b"x")),
                None,
            ])),
            Ok(StorageReply::Done),
            Ok(StorageReply::Entries(vec![(1, Bytes::from_static(b"e"))])),
            Err(StorageError("disk full".into())),
        ] {
            let out = encode_response(9, &result).to_bytes();
            let frame = read_frame(&mut &out[..], &mut BytesMut::new())
                .await
                .unwrap();
            assert_eq!(decode_response(frame).unwrap(), (9, result));
        }
    }

    #[tokio::test]
    async fn vectored_writes_survive_partial_writes() {
        let big = Bytes::from(vec![7u8; 5000]);
        let frames: Vec<Frame> = (0..3)
            .map(|i| {
                encode_request(
                    i,
                    &StorageOp::Write(vec![(1, big.clone()), (2, Bytes::from_static(b"s"))]),
                )
            })
            .collect();
        let expected: Vec<u8> = frames.iter().flat_map(|f| f.to_bytes().to_vec()).collect();
        let (mut a, mut b) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move { write_frames(&mut a, &frames).await });
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        writer.await.unwrap().unwrap();
        assert_eq!(got, expected);
    }

    #[tokio::test]
    async fn malformed_frames_are_rejected() {
        let mut huge = BytesMut::new();
        huge.put_u32_le(u32::MAX);
        assert!(matches!(
            read_frame(&mut &huge[..], &mut BytesMut::new()).await,
            Err(WireError::TooLarge(_))
        ));
        assert!(matches!(
            read_frame(&mut &[1u8, 0, 0, 0][..], &mut BytesMut::new()).await,
            Err(WireError::Malformed(_))
        ));
        // A count promising more entries than the frame holds.
        let mut lying = BytesMut::new();
        lying.put_u64_le(1);
        lying.put_u8(READ);
        lying.put_u32_le(1_000_000);
        assert!(decode_request(lying.freeze()).is_err());
        assert!(decode_request(Bytes::from_static(&[0; 9])).is_err());
        assert!(decode_response(Bytes::from_static(b"short")).is_err());
    }

    /// The payload length of `result`'s answer frame.
    fn answer_len(result: &Result<StorageReply, StorageError>) -> usize {
        encode_response(1, result).len() - 4
    }

    #[test]
    fn an_answer_of_whole_elements_fits_its_bound_exactly() {
        let element = Bytes::from(vec![7u8; 1000]);
        let read = StorageOp::Read((0..50).collect());
        let values = Ok(StorageReply::Values(vec![Some(element.clone()); 50]));
        assert_eq!(answer_len(&values), max_response_len(&read, 1000));
        assert!(answer_len(&values) > max_response_len(&read, 999));
        let scan = StorageOp::Scan {
            after: None,
            limit: 50,
        };
        let entries = Ok(StorageReply::Entries(
            (0..50).map(|a| (a, element.clone())).collect(),
        ));
        assert_eq!(answer_len(&entries), max_response_len(&scan, 1000));
        assert!(answer_len(&entries) > max_response_len(&scan, 999));
        // A write's answer is DONE, or an error of a sentence; never elements.
        let write = StorageOp::Write(vec![(1, element)]);
        let error = Err(StorageError("e".repeat(MAX_ERROR_MESSAGE)));
        assert_eq!(answer_len(&error), max_response_len(&write, 1000));
        assert!(answer_len(&Ok(StorageReply::Done)) < max_response_len(&write, 1000));
        assert_eq!(
            max_response_len(&StorageOp::Delete(vec![1]), 1000),
            9 + 4096
        );
    }

    #[test]
    fn bounds_that_overflow_saturate_at_the_frame_limit() {
        let read = StorageOp::Read(vec![1; 3]);
        assert_eq!(max_response_len(&read, usize::MAX), MAX_FRAME);
        let scan = StorageOp::Scan {
            after: None,
            limit: u32::MAX,
        };
        assert_eq!(max_response_len(&scan, 1 << 20), MAX_FRAME);
    }

    #[test]
    fn room_for_a_frame_is_its_size_and_a_buffer_no_frame_holds_is_reused() {
        // A buffer too small for the frame whose first bytes it holds: `reserve` would double it.
        let mut buf = BytesMut::with_capacity(1000);
        buf.put_bytes(7, 10);
        make_room_for_frame(&mut buf, 1010);
        assert_eq!(buf.capacity(), 1010);
        assert_eq!(&buf[..], &[7; 10]);

        // Once the frame cut from it is gone, the next one of that size reuses its allocation.
        buf.put_bytes(1, 1000);
        let frame = buf.split().freeze();
        let allocation = frame.as_ptr();
        make_room_for_frame(&mut buf, 1010);
        assert_ne!(buf.as_ptr(), allocation, "the frame still holds it");
        assert_eq!(buf.capacity(), 1010);
        let fresh = buf.as_ptr();
        buf.put_bytes(2, 1010);
        let next = buf.split().freeze();
        drop((frame, next));
        make_room_for_frame(&mut buf, 1010);
        assert_eq!(buf.as_ptr(), fresh, "no frame holds it any more");
        assert_eq!(buf.capacity(), 1010);
    }

    #[tokio::test]
    async fn an_announced_length_alone_reserves_nothing() {
        let mut header = BytesMut::new();
        header.put_u32_le(MAX_FRAME as u32);
        header.put_slice(b"a few bytes of the frame");
        let mut buf = BytesMut::new();
        assert!(matches!(
            read_frame(&mut &header[..], &mut buf).await,
            Err(WireError::Malformed(_))
        ));
        assert!(buf.capacity() < 4096, "reserved {} bytes", buf.capacity());
    }
}
