//! RESP, the Redis protocol, as far as a server needs it: decoding requests, encoding replies.
//!
//! Requests are arrays of bulk strings (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) or, typed by hand,
//! inline lines (`GET k\r\n`). The decoder is incremental (it never rescans bytes it has parsed)
//! and enforces Redis's limits, with Redis's error messages, so hostile input costs bounded memory
//! and gets a clear `Protocol error` before the connection closes.

use std::borrow::Cow;

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Longest inline request or length line (Redis: 64 KiB).
pub const MAX_INLINE: usize = 64 * 1024;
/// Most bytes of arguments in one request, whatever the per-argument limits allow.
pub const MAX_REQUEST: usize = 256 << 20;

/// How many arguments one request may have and how long each may be. A connection starts with
/// [`RequestLimits::UNAUTHENTICATED`] when a password is set and moves to the store's limits
/// once `AUTH` succeeds, so a client that does not know the password can make the proxy hold
/// only a few KiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    pub max_args: usize,
    pub max_bulk: usize,
    /// Where each limit comes from, for the error a client gets when it crosses one.
    pub args_source: &'static str,
    pub bulk_source: &'static str,
}

impl RequestLimits {
    /// Redis's limits for clients that have not authenticated: 10 arguments of 16 KiB.
    pub const UNAUTHENTICATED: Self = Self {
        max_args: 10,
        max_bulk: 16 * 1024,
        args_source: "before AUTH",
        bulk_source: "before AUTH",
    };

    /// Limits that fit every command the store can take: an argument is at most a value or a
    /// key (their sum leaves room for a password or an `ECHO` message), and the longest command
    /// is an `MSET` of `max_keys_per_command` pairs (never fewer than the 10 arguments allowed
    /// before `AUTH`, so `SET k v NX` always fits).
    pub fn for_store(limits: &cloak_core::Limits) -> Self {
        Self {
            max_args: (2 * limits.max_keys_per_command + 1).max(Self::UNAUTHENTICATED.max_args),
            max_bulk: limits.max_value + limits.max_key,
            args_source: "an MSET of --max-keys-per-command pairs",
            bulk_source: "--value-size plus --key-size",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Protocol error: {0}")]
pub struct ProtocolError(pub String);

fn error<T>(message: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(message.into()))
}

/// Where the decoder is inside the current request.
#[derive(Debug, Default)]
enum State {
    #[default]
    Start,
    /// Inside a multibulk request, with this many arguments still to come.
    Args(usize),
    /// Inside a bulk string of this length.
    Bulk { remaining_args: usize, len: usize },
}

/// Decodes requests incrementally. It never reserves memory for bytes a header only announces:
/// the buffer grows as the bytes arrive, so a `$60000000` header followed by silence or a slow
/// trickle costs what was really sent, and the limits cap what may be sent.
#[derive(Debug)]
pub struct RequestDecoder {
    limits: RequestLimits,
    state: State,
    args: Vec<Bytes>,
    bytes: usize,
}

/// Takes a `\r\n`-terminated line from the front of `buf` (without the terminator).
fn line(buf: &mut BytesMut) -> Result<Option<Bytes>, ProtocolError> {
    match buf.iter().position(|&b| b == b'\n') {
        Some(end) => {
            let mut line = buf.split_to(end + 1).freeze();
            line.truncate(end);
            if line.last() == Some(&b'\r') {
                line.truncate(end - 1);
            }
            Ok(Some(line))
        }
        None if buf.len() > MAX_INLINE => error("too big inline request"),
        None => Ok(None),
    }
}

fn number(digits: &[u8]) -> Option<i64> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

impl RequestDecoder {
    pub fn new(limits: RequestLimits) -> Self {
        Self {
            limits,
            state: State::Start,
            args: Vec::new(),
            bytes: 0,
        }
    }

    /// Applies from the next argument on (after a successful `AUTH`).
    pub fn set_limits(&mut self, limits: RequestLimits) {
        self.limits = limits;
    }

    /// The next complete request's arguments, `None` if more bytes are needed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        loop {
            match self.state {
                State::Start => {
                    let Some(&first) = buf.first() else {
                        return Ok(None);
                    };
                    if first != b'*' {
                        match self.inline(buf)? {
                            Some(args) if args.is_empty() => continue,
                            other => return Ok(other),
                        }
                    }
                    let Some(header) = line(buf)? else {
                        return Ok(None);
                    };
                    let Some(count) = number(&header[1..]) else {
                        return error("invalid multibulk length");
                    };
                    let max = self.limits.max_args;
                    if count > max as i64 {
                        return error(format!(
                            "invalid multibulk length {count}: at most {max} arguments ({})",
                            self.limits.args_source
                        ));
                    }
                    if count <= 0 {
                        continue; // `*0` and `*-1` are empty requests, ignored like Redis does.
                    }
                    self.args = Vec::with_capacity((count as usize).min(1024));
                    self.bytes = 0;
                    self.state = State::Args(count as usize);
                }
                State::Args(0) => {
                    self.state = State::Start;
                    return Ok(Some(std::mem::take(&mut self.args)));
                }
                State::Args(remaining_args) => {
                    let Some(header) = line(buf)? else {
                        return Ok(None);
                    };
                    if header.first() != Some(&b'$') {
                        let got = header
                            .first()
                            .map_or("end of line".to_string(), |b| format!("'{}'", *b as char));
                        return error(format!("expected '$', got {got}"));
                    }
                    let len = match number(&header[1..]) {
                        Some(n) if n >= 0 => n,
                        _ => return error("invalid bulk length"),
                    };
                    let max = self.limits.max_bulk;
                    if len > max as i64 {
                        return error(format!(
                            "invalid bulk length {len}: at most {max} bytes ({})",
                            self.limits.bulk_source
                        ));
                    }
                    let len = len as usize;
                    self.bytes += len;
                    if self.bytes > MAX_REQUEST {
                        return error(format!("request larger than {MAX_REQUEST} bytes"));
                    }
                    self.state = State::Bulk {
                        remaining_args,
                        len,
                    };
                }
                State::Bulk {
                    remaining_args,
                    len,
                } => {
                    if buf.len() < len + 2 {
                        // No reservation for the rest: the reader's buffer grows as bytes come.
                        return Ok(None);
                    }
                    if &buf[len..len + 2] != b"\r\n" {
                        return error("bulk string is not terminated by CRLF");
                    }
                    self.args.push(buf.split_to(len).freeze());
                    buf.advance(2);
                    self.state = State::Args(remaining_args - 1);
                }
            }
        }
    }

    /// An inline request: one line, arguments separated by spaces.
    fn inline(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        let Some(line) = line(buf)? else {
            return Ok(None);
        };
        Ok(Some(
            line.split(|b| b.is_ascii_whitespace())
                .filter(|a| !a.is_empty())
                .map(|a| line.slice_ref(a))
                .collect(),
        ))
    }
}

/// The reply protocol a connection speaks: RESP2 until the client says `HELLO 3`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

impl Protocol {
    /// The version number `HELLO` and `CLIENT LIST` show.
    pub fn version(self) -> u8 {
        match self {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        }
    }
}

/// A reply to one request, encoded for the connection's [`Protocol`] when it is written. The
/// RESP3-only shapes fall back the way Redis's do in RESP2: a map becomes a flat array of keys
/// and values, a set an array, a verbatim string a bulk string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A status line; owned for the few made at run time (a script's `{ok = …}`).
    Status(Cow<'static, str>),
    Error(String),
    Integer(i64),
    /// A bulk string, or nil (`$-1` in RESP2, `_` in RESP3).
    Bulk(Option<Bytes>),
    Array(Vec<Reply>),
    Map(Vec<(Reply, Reply)>),
    Set(Vec<Reply>),
    /// Text meant for people, such as `INFO`'s (`=len\r\ntxt:…` in RESP3).
    Verbatim(String),
    /// The null array (`*-1`): EXEC when a watched key changed.
    NilArray,
}

impl Reply {
    pub fn ok() -> Self {
        Reply::status("OK")
    }

    /// A status line (`+…`).
    pub fn status(text: impl Into<Cow<'static, str>>) -> Self {
        Reply::Status(text.into())
    }

    /// An error with Redis's generic `ERR` prefix.
    pub fn err(message: impl std::fmt::Display) -> Self {
        Reply::Error(format!("ERR {message}"))
    }

    /// A bulk string.
    pub fn bulk(bytes: impl Into<Bytes>) -> Self {
        Reply::Bulk(Some(bytes.into()))
    }

    /// A map whose keys are bulk strings, as Redis's are.
    pub fn map<K: Into<Bytes>>(fields: impl IntoIterator<Item = (K, Reply)>) -> Self {
        Reply::Map(
            fields
                .into_iter()
                .map(|(key, value)| (Reply::bulk(key), value))
                .collect(),
        )
    }

    pub fn encode(&self, out: &mut BytesMut, protocol: Protocol) {
        let resp3 = protocol == Protocol::Resp3;
        match self {
            Reply::Status(s) => {
                out.put_u8(b'+');
                out.put_slice(s.as_bytes());
            }
            Reply::Error(e) => {
                out.put_u8(b'-');
                // A line break would end the error line early and desynchronise the client.
                out.extend(
                    e.bytes()
                        .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
                );
            }
            Reply::Integer(n) => {
                out.put_u8(b':');
                out.put_slice(n.to_string().as_bytes());
            }
            Reply::Bulk(None) | Reply::NilArray if resp3 => out.put_u8(b'_'),
            Reply::Bulk(None) => out.put_slice(b"$-1"),
            Reply::NilArray => out.put_slice(b"*-1"),
            Reply::Bulk(Some(b)) => bulk(out, b'$', &[], b),
            Reply::Verbatim(text) if resp3 => bulk(out, b'=', b"txt:", text.as_bytes()),
            Reply::Verbatim(text) => bulk(out, b'$', &[], text.as_bytes()),
            Reply::Array(items) => items_of(out, b'*', items, protocol),
            Reply::Set(items) => items_of(out, if resp3 { b'~' } else { b'*' }, items, protocol),
            Reply::Map(fields) => {
                let (marker, len) = if resp3 {
                    (b'%', fields.len())
                } else {
                    (b'*', 2 * fields.len())
                };
                header(out, marker, len);
                for (key, value) in fields {
                    key.encode(out, protocol);
                    value.encode(out, protocol);
                }
            }
        }
        // Aggregates end with their last element's terminator.
        if !matches!(self, Reply::Array(_) | Reply::Set(_) | Reply::Map(_)) {
            out.put_slice(b"\r\n");
        }
    }
}

/// `marker` and `len` and a line end: the head of a bulk string or an aggregate.
fn header(out: &mut BytesMut, marker: u8, len: usize) {
    out.put_u8(marker);
    out.put_slice(len.to_string().as_bytes());
    out.put_slice(b"\r\n");
}

/// A length-prefixed string (`prefix` counts towards the length); the caller ends the line.
fn bulk(out: &mut BytesMut, marker: u8, prefix: &[u8], bytes: &[u8]) {
    header(out, marker, prefix.len() + bytes.len());
    out.put_slice(prefix);
    out.put_slice(bytes);
}

fn items_of(out: &mut BytesMut, marker: u8, items: &[Reply], protocol: Protocol) {
    header(out, marker, items.len());
    for item in items {
        item.encode(out, protocol);
    }
}

/// The deepest nesting of aggregates [`decode_reply`] takes: a Cloak proxy's replies nest two
/// deep at most (an array of maps), and a bound keeps a hostile answer from recursing far.
const MAX_REPLY_DEPTH: usize = 8;

/// Decodes one whole reply from the front of `buf`, as another Cloak proxy writes it (the shapes
/// [`Reply::encode`] writes, in either protocol): the reply and how many bytes it took, `None` if
/// more bytes are needed, or an error for anything else or anything longer than `limit` bytes.
/// It decodes from the start each time; a caller reading a reply in pieces finds where it ends
/// with a [`ReplyEnd`] first, and decodes it once.
pub fn decode_reply(buf: &[u8], limit: usize) -> Result<Option<(Reply, usize)>, ProtocolError> {
    let mut at = 0;
    let decoded = reply_at(buf, &mut at, limit, 0)?;
    Ok(decoded.map(|reply| (reply, at)))
}

/// Where a reply arriving in pieces ends, found as the pieces come: each call goes on from where
/// the last stopped, so finding the end of a reply costs its length once. (Decoding it whole at
/// every piece cost its length at every piece: quadratic, minutes for a value of hundreds of
/// megabytes read in 8 KiB pieces.)
#[derive(Debug, Default)]
pub struct ReplyEnd {
    /// Where the next reply to look at starts: the whole reply's, or the next item's of an
    /// aggregate.
    at: usize,
    /// Items still to come in each aggregate begun and not finished, the innermost last.
    open: Vec<usize>,
}

impl ReplyEnd {
    /// Goes on over `buf` (the reply's bytes so far, from its start, only ever longer): the
    /// reply's length once it is all there, `None` while more is needed, an error where
    /// [`decode_reply`] would refuse what the bytes so far hold.
    pub fn scan(&mut self, buf: &[u8], limit: usize) -> Result<Option<usize>, ProtocolError> {
        loop {
            let Some((head, next)) = head_at(buf, self.at, limit, self.open.len())? else {
                return Ok(None);
            };
            match head {
                Head::Bulk { len, .. } => {
                    if buf.len() < next + len + 2 {
                        return Ok(None);
                    }
                    self.at = next + len + 2;
                }
                Head::Items { items, .. } if items > 0 => {
                    self.at = next;
                    self.open.push(items);
                    continue;
                }
                _ => self.at = next,
            }
            // A reply is over: so is every aggregate it was the last item of.
            loop {
                match self.open.last_mut() {
                    None => return Ok(Some(self.at)),
                    Some(left) if *left > 1 => {
                        *left -= 1;
                        break;
                    }
                    Some(_) => {
                        self.open.pop();
                    }
                }
            }
        }
    }
}

/// A reply's first line: all of it but a string's body and an aggregate's items.
enum Head<'a> {
    Status(&'a [u8]),
    Error(&'a [u8]),
    Integer(i64),
    /// A null, or a string or an array of length -1.
    Nil,
    NilArray,
    /// `len` bytes follow the line (then CRLF): a bulk string, or a verbatim one (`=`).
    Bulk {
        verbatim: bool,
        len: usize,
    },
    /// `items` replies follow: an array (`*`), a set (`~`) or a map (`%`, two items a pair).
    Items {
        marker: u8,
        items: usize,
    },
}

/// The first line of the reply at `at` (which is `depth` aggregates deep) and where the line
/// ends; `None` if the line is not all there. Refuses what [`decode_reply`] refuses of a line.
fn head_at(
    buf: &[u8],
    at: usize,
    limit: usize,
    depth: usize,
) -> Result<Option<(Head<'_>, usize)>, ProtocolError> {
    // Empty once past the limit: the reply is then too long.
    let window = buf.get(at..buf.len().min(limit)).unwrap_or_default();
    let Some(end) = window.iter().position(|&b| b == b'\n') else {
        if buf.len() >= limit {
            return error(format!("reply longer than {limit} bytes"));
        }
        return Ok(None);
    };
    if end < 2 || window[end - 1] != b'\r' {
        return error("reply line is not terminated by CRLF");
    }
    let (marker, text) = (window[0], &window[1..end - 1]);
    let next = at + end + 1;
    let length = || {
        number(text)
            .ok_or_else(|| ProtocolError(format!("bad length {:?}", String::from_utf8_lossy(text))))
    };
    let head = match marker {
        b'+' => Head::Status(text),
        b'-' => Head::Error(text),
        b':' => Head::Integer(length()?),
        b'_' => Head::Nil,
        b'$' | b'=' if length()? < 0 => Head::Nil,
        b'*' if length()? < 0 => Head::NilArray,
        b'$' | b'=' => {
            let len = length()? as usize;
            if next.checked_add(len).is_none_or(|stop| stop + 2 > limit) {
                return error(format!("reply longer than {limit} bytes"));
            }
            Head::Bulk {
                verbatim: marker == b'=',
                len,
            }
        }
        b'*' | b'~' | b'%' => {
            if depth >= MAX_REPLY_DEPTH {
                return error("reply nested too deep");
            }
            let count = length()? as usize;
            let items = if marker == b'%' {
                count.saturating_mul(2)
            } else {
                count
            };
            // Every item takes at least three bytes: a count beyond that is a lie.
            if items > limit / 3 {
                return error(format!("reply longer than {limit} bytes"));
            }
            Head::Items { marker, items }
        }
        other => return error(format!("unexpected reply type '{}'", other as char)),
    };
    Ok(Some((head, next)))
}

/// The reply starting at `*at`, advancing `*at` past it; `None` if `buf` ends first.
fn reply_at(
    buf: &[u8],
    at: &mut usize,
    limit: usize,
    depth: usize,
) -> Result<Option<Reply>, ProtocolError> {
    let Some((head, next)) = head_at(buf, *at, limit, depth)? else {
        return Ok(None);
    };
    *at = next;
    let text_of = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let reply = match head {
        Head::Status(text) => Reply::Status(Cow::Owned(text_of(text))),
        Head::Error(text) => Reply::Error(text_of(text)),
        Head::Integer(n) => Reply::Integer(n),
        Head::Nil => Reply::Bulk(None),
        Head::NilArray => Reply::NilArray,
        Head::Bulk { verbatim, len } => {
            let stop = next + len;
            if buf.len() < stop + 2 {
                return Ok(None);
            }
            if &buf[stop..stop + 2] != b"\r\n" {
                return error("bulk string is not terminated by CRLF");
            }
            *at = stop + 2;
            let body = &buf[next..stop];
            if verbatim {
                // A verbatim string's format (`txt:`) is not part of its text.
                Reply::Verbatim(text_of(body.get(4..).unwrap_or_default()))
            } else {
                Reply::Bulk(Some(Bytes::copy_from_slice(body)))
            }
        }
        Head::Items { marker, items } => {
            let mut replies = Vec::with_capacity(items.min(1024));
            for _ in 0..items {
                match reply_at(buf, at, limit, depth + 1)? {
                    Some(item) => replies.push(item),
                    None => return Ok(None),
                }
            }
            match marker {
                b'*' => Reply::Array(replies),
                b'~' => Reply::Set(replies),
                _ => {
                    let mut replies = replies.into_iter();
                    let mut fields = Vec::with_capacity((items / 2).min(1024));
                    while let (Some(key), Some(value)) = (replies.next(), replies.next()) {
                        fields.push((key, value));
                    }
                    Reply::Map(fields)
                }
            }
        }
    };
    Ok(Some(reply))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: RequestLimits = RequestLimits {
        max_args: 64,
        max_bulk: 64 << 20,
        args_source: "test",
        bulk_source: "test",
    };

    fn decode_all(input: &[u8]) -> Result<Vec<Vec<Bytes>>, ProtocolError> {
        decode_with(LIMITS, input)
    }

    fn decode_with(limits: RequestLimits, input: &[u8]) -> Result<Vec<Vec<Bytes>>, ProtocolError> {
        let mut decoder = RequestDecoder::new(limits);
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(args) = decoder.decode(&mut buf)? {
            out.push(args);
        }
        Ok(out)
    }

    fn args(list: &[&str]) -> Vec<Bytes> {
        list.iter().map(|s| Bytes::from(s.to_string())).collect()
    }

    #[test]
    fn multibulk_and_inline_requests() {
        let got = decode_all(
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n  SET  a b\n\r\n*0\r\n*1\r\n$0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                args(&["GET", "k"]),
                args(&["PING"]),
                args(&["SET", "a", "b"]),
                args(&[""])
            ]
        );
    }

    #[test]
    fn requests_split_at_every_byte_decode_the_same() {
        let input = b"*3\r\n$3\r\nSET\r\n$5\r\nhello\r\n$11\r\nwith\r\nCRLF!\r\nECHO hi\r\n";
        let whole = decode_all(input).unwrap();
        let mut decoder = RequestDecoder::new(LIMITS);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &b in input.iter() {
            buf.put_u8(b);
            while let Some(a) = decoder.decode(&mut buf).unwrap() {
                got.push(a);
            }
        }
        assert_eq!(got, whole);
        assert_eq!(whole[0][2], Bytes::from_static(b"with\r\nCRLF!"));
    }

    #[test]
    fn malformed_requests_get_redis_errors() {
        let err = |input: &[u8]| decode_all(input).unwrap_err().0;
        assert_eq!(err(b"*x\r\n"), "invalid multibulk length");
        assert_eq!(
            err(b"*99999999999\r\n"),
            "invalid multibulk length 99999999999: at most 64 arguments (test)"
        );
        assert_eq!(err(b"*1\r\n+OK\r\n"), "expected '$', got '+'");
        assert_eq!(err(b"*1\r\n$-5\r\n"), "invalid bulk length");
        assert_eq!(
            err(b"*1\r\n$999999999999\r\n"),
            "invalid bulk length 999999999999: at most 67108864 bytes (test)"
        );
        assert_eq!(
            err(b"*1\r\n$1\r\nabc\r\n"),
            "bulk string is not terminated by CRLF"
        );
        assert_eq!(err(&vec![b'a'; MAX_INLINE + 1]), "too big inline request");
    }

    #[test]
    fn a_declared_length_alone_reserves_nothing() {
        let mut decoder = RequestDecoder::new(LIMITS);
        let mut buf = BytesMut::with_capacity(64);
        buf.put_slice(b"*1\r\n$67108864\r\nabc");
        assert_eq!(decoder.decode(&mut buf), Ok(None));
        assert!(buf.capacity() < 4096, "reserved {} bytes", buf.capacity());
    }

    #[test]
    fn before_auth_only_small_requests_pass() {
        let limits = RequestLimits::UNAUTHENTICATED;
        let err = |input: &[u8]| decode_with(limits, input).unwrap_err().0;
        assert_eq!(
            err(b"*11\r\n"),
            "invalid multibulk length 11: at most 10 arguments (before AUTH)"
        );
        assert_eq!(
            err(b"*2\r\n$4\r\nAUTH\r\n$60000000\r\n"),
            "invalid bulk length 60000000: at most 16384 bytes (before AUTH)"
        );
        let password = vec![b'p'; 16 * 1024];
        let mut request = b"*2\r\n$4\r\nAUTH\r\n$16384\r\n".to_vec();
        request.extend_from_slice(&password);
        request.extend_from_slice(b"\r\n");
        assert_eq!(decode_with(limits, &request).unwrap()[0][1], password);

        // After AUTH the store's limits apply, from the next argument on.
        let mut decoder = RequestDecoder::new(limits);
        let mut buf = BytesMut::from(&b"*1\r\n$20000\r\n"[..]);
        assert!(decoder.decode(&mut buf).is_err());
        decoder = RequestDecoder::new(limits);
        decoder.set_limits(LIMITS);
        let mut buf = BytesMut::from(&b"*1\r\n$20000\r\n"[..]);
        assert_eq!(decoder.decode(&mut buf), Ok(None));
    }

    #[test]
    fn store_limits_fit_the_largest_command() {
        let store = cloak_core::Limits {
            max_key: 128,
            max_value: 100_000,
            max_keys_per_command: 1000,
        };
        let limits = RequestLimits::for_store(&store);
        assert_eq!((limits.max_args, limits.max_bulk), (2001, 100_128));
        let tiny = cloak_core::Limits {
            max_key: 8,
            max_value: 8,
            max_keys_per_command: 1,
        };
        assert_eq!(
            RequestLimits::for_store(&tiny).max_args,
            RequestLimits::UNAUTHENTICATED.max_args
        );
    }

    #[test]
    fn replies_encode_like_redis() {
        let mut out = BytesMut::new();
        Reply::Array(vec![
            Reply::ok(),
            Reply::err("bad\r\nthing"),
            Reply::Integer(-3),
            Reply::Bulk(None),
            Reply::Bulk(Some(Bytes::from_static(b"v"))),
            Reply::Array(vec![]),
        ])
        .encode(&mut out, Protocol::Resp2);
        assert_eq!(
            &out[..],
            b"*6\r\n+OK\r\n-ERR bad  thing\r\n:-3\r\n$-1\r\n$1\r\nv\r\n*0\r\n"
        );
    }

    /// A reply of every shape a proxy writes, nested.
    fn every_shape() -> Reply {
        Reply::Array(vec![
            Reply::map([("a", Reply::Integer(-3)), ("b", Reply::Bulk(None))]),
            Reply::Set(vec![Reply::status("x")]),
            Reply::Verbatim("# Server\r\n".into()),
            Reply::Error("MOVED 1 h:1".into()),
            Reply::bulk("with\r\nCRLF"),
            Reply::Array(vec![]),
            Reply::Array(vec![Reply::Array(vec![Reply::Integer(1)])]),
        ])
    }

    /// The end of a reply arriving a byte at a time is found at its last byte, by one
    /// [`ReplyEnd`] going on from call to call, wherever decoding it whole ends it (and not
    /// counting a reply after it); what decoding refuses, it refuses.
    #[test]
    fn a_reply_end_is_found_as_its_bytes_come() {
        for protocol in [Protocol::Resp2, Protocol::Resp3] {
            let mut encoded = BytesMut::new();
            every_shape().encode(&mut encoded, protocol);
            encoded.extend_from_slice(b"+next\r\n");
            let (_, whole) = decode_reply(&encoded, 1 << 20).unwrap().unwrap();
            let mut end = ReplyEnd::default();
            for cut in 0..whole {
                assert_eq!(end.scan(&encoded[..cut], 1 << 20), Ok(None), "{cut}");
            }
            assert_eq!(end.scan(&encoded[..whole], 1 << 20), Ok(Some(whole)));
            assert_eq!(ReplyEnd::default().scan(&encoded, 1 << 20), Ok(Some(whole)));
        }
        let too_deep = [&b"*1\r\n".repeat(MAX_REPLY_DEPTH + 1)[..], b":1\r\n"].concat();
        for garbage in [
            &b"$100\r\n"[..],
            &[b'+'; 100],
            b"*1000000\r\n",
            b"?what\r\n",
            b"\r\n",
            &too_deep,
        ] {
            assert!(decode_reply(garbage, 64).is_err());
            assert!(ReplyEnd::default().scan(garbage, 64).is_err());
        }
    }

    /// What a proxy encodes, in either protocol, decodes back to what a client of that protocol
    /// would get from the proxy itself, arriving in any pieces; garbage and replies over the
    /// limit are refused.
    #[test]
    fn replies_decode_back_whole_or_in_pieces() {
        let reply = every_shape();
        let mut encoded = BytesMut::new();
        reply.encode(&mut encoded, Protocol::Resp3);
        assert_eq!(
            decode_reply(&encoded, 1 << 20),
            Ok(Some((reply.clone(), encoded.len())))
        );
        for cut in 0..encoded.len() {
            assert_eq!(decode_reply(&encoded[..cut], 1 << 20), Ok(None), "{cut}");
        }
        let mut nil_array = BytesMut::new();
        Reply::NilArray.encode(&mut nil_array, Protocol::Resp2);
        assert_eq!(decode_reply(&nil_array, 64), Ok(Some((Reply::NilArray, 5))));
        // Over the limit, announced or sent; a lying count; garbage.
        assert!(decode_reply(b"$100\r\n", 64).is_err());
        assert!(decode_reply(&[b'+'; 100], 64).is_err());
        assert!(decode_reply(b"*1000000\r\n", 64).is_err());
        assert!(decode_reply(b"?what\r\n", 64).is_err());
        assert!(decode_reply(b"\r\n", 64).is_err());
        assert!(decode_reply(&encoded, encoded.len() - 1).is_err());
        let deep = "*1\r\n".repeat(MAX_REPLY_DEPTH + 1) + ":1\r\n";
        assert!(decode_reply(deep.as_bytes(), 1 << 10).is_err());
    }

    /// Each RESP3 shape as `redis-server` 7 writes it (captured from one), and its RESP2
    /// fallback.
    #[test]
    fn resp3_shapes_and_their_resp2_fallbacks() {
        let reply = Reply::Array(vec![
            Reply::map([
                ("proto", Reply::Integer(3)),
                ("modules", Reply::Array(vec![])),
            ]),
            Reply::Set(vec![Reply::status("readonly")]),
            Reply::Bulk(None),
            Reply::Verbatim("# Server\r\n".into()),
        ]);
        let encoded = |protocol| {
            let mut out = BytesMut::new();
            reply.encode(&mut out, protocol);
            out
        };
        assert_eq!(
            &encoded(Protocol::Resp3)[..],
            &b"*4\r\n%2\r\n$5\r\nproto\r\n:3\r\n$7\r\nmodules\r\n*0\r\n~1\r\n+readonly\r\n\
               _\r\n=14\r\ntxt:# Server\r\n\r\n"[..]
        );
        assert_eq!(
            &encoded(Protocol::Resp2)[..],
            &b"*4\r\n*4\r\n$5\r\nproto\r\n:3\r\n$7\r\nmodules\r\n*0\r\n*1\r\n+readonly\r\n\
               $-1\r\n$10\r\n# Server\r\n\r\n"[..]
        );
    }
}
