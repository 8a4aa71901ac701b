//! Where a RESP2 answer ends, found as its bytes arrive, and whether it is one Cloak may take.
//!
//! Redis is hostile: it may send bytes that are not RESP, or an answer far larger than the
//! request it answers can call for (a bulk string announcing a gigabyte, then sent a little at
//! a time). Each request comes with the largest answer it allows, computed from public
//! information where it is built; an answer that announces or brings more is refused before
//! the proxy buffers more than that, so memory stays bounded by what the requests allow.
//!
//! Bytes are not all: parsed, every RESP value becomes a `redis::Value` of some 56 bytes (and a
//! bulk string an allocation of its own), so an answer of tiny values (`:1\r\n`, four bytes)
//! would take some fifteen times its bytes once parsed. Each value is therefore also charged
//! [`VALUE_CHARGE`] bytes of the allowance: an answer of more values than the request's bound
//! can pay for is refused, before it is parsed, and a parsed answer takes at most a few times
//! its bound. The answers Cloak's requests call for pay that easily: an MGET's values are
//! elements (or nils) of a bound that counts a whole element for each, and a SCAN's are keys of
//! more than 32 bytes.
//!
//! The scan resumes where the last one stopped: an answer that arrives in many small reads is
//! checked once, in time linear in its size (and bulk strings are skipped by their length, so
//! the work is per value, not per byte).

/// Longest RESP line (a type byte, a length or a status, and CRLF) accepted.
pub const MAX_LINE: usize = 64 * 1024;

/// Every RESP value takes at least this many bytes (a type byte and CRLF), so an array of `n`
/// values still to come needs at least `n` times this.
const SMALLEST_VALUE: u64 = 3;

/// Bytes of an answer's allowance each of its values takes at least, whatever its length on
/// the wire (see the module notes).
pub const VALUE_CHARGE: u64 = 24;

/// Why bytes from Redis are not an answer Cloak takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadAnswer {
    /// The answer announced or brought more than its request allows.
    #[error(
        "an answer of at least {at_least} bytes (as announced or received so far) to a request \
         whose answer is at most {allowed} bytes"
    )]
    TooLong {
        /// The answer's length as far as it is known: bytes received and lengths announced.
        at_least: u64,
        /// The most the request allows.
        allowed: usize,
    },
    /// A line with no CRLF within [`MAX_LINE`] bytes.
    #[error("a RESP line longer than {MAX_LINE} bytes")]
    LongLine,
    /// CRLF with nothing before it.
    #[error("an empty RESP line")]
    EmptyLine,
    /// A bulk string or array whose length is not a number, or negative other than -1.
    #[error("bad RESP length {0:?}")]
    BadLength(String),
    /// A type byte RESP2 does not have.
    #[error("unexpected RESP type byte {0:#04x}")]
    BadType(u8),
    /// The answer announced or brought more values than its request's bound pays for at
    /// [`VALUE_CHARGE`] bytes each.
    #[error(
        "an answer of at least {at_least} values (as announced or received so far) to a request \
         whose answer may hold {most} at most"
    )]
    TooManyValues {
        /// Values seen and announced so far.
        at_least: u64,
        /// The most the request's bound allows.
        most: u64,
    },
    /// Bytes came while no request was waiting for an answer.
    #[error("Redis answered a request never sent")]
    Unrequested,
}

/// The scan of one answer, from its first byte, resumed as more of it arrives.
#[derive(Debug)]
pub struct AnswerScan {
    /// Bytes of the answer checked so far: the start of its next value.
    at: usize,
    /// Values still to come (an array adds its elements).
    remaining: u64,
    /// Values whose first line was checked.
    seen: u64,
    /// How many bytes from `at` are known to hold no CRLF, so a line that arrives in pieces
    /// is searched once.
    searched: usize,
}

impl Default for AnswerScan {
    fn default() -> Self {
        Self {
            at: 0,
            remaining: 1,
            seen: 0,
            searched: 0,
        }
    }
}

impl AnswerScan {
    /// Goes on checking the answer at the start of `buf` (everything received of it, and maybe
    /// of the answers after it) from where the last call stopped: `Some(length)` once it is
    /// whole, `None` while more is to come, an error for bytes that are not RESP2 or an
    /// answer longer than `allowed`. Start a new scan for the next answer.
    pub fn resume(&mut self, buf: &[u8], allowed: usize) -> Result<Option<usize>, BadAnswer> {
        while self.remaining > 0 {
            // Inside a bulk string not received whole yet.
            let Some(rest) = buf.get(self.at..) else {
                return Ok(None);
            };
            // One byte back: a CR may have ended what was searched.
            let from = self.searched.saturating_sub(1).min(rest.len());
            let Some(newline) = rest[from..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .map(|p| from + p)
            else {
                self.searched = rest.len();
                // The value this line starts takes its bytes so far and a CRLF: at least
                // one byte less than them plus the smallest value counted for it.
                self.check_size(rest.len().saturating_sub(1) as u64, allowed)?;
                return match rest.len() > MAX_LINE {
                    true => Err(BadAnswer::LongLine),
                    false => Ok(None),
                };
            };
            let Some((&kind, line)) = rest[..newline].split_first() else {
                return Err(BadAnswer::EmptyLine);
            };
            self.searched = 0;
            self.remaining -= 1;
            self.seen += 1;
            self.at += newline + 2;
            let length = std::str::from_utf8(line)
                .ok()
                .and_then(|text| text.parse::<i64>().ok());
            let mut bulk = 0;
            match (kind, length) {
                (b'+' | b'-' | b':', _) => {}
                (b'$', Some(-1)) | (b'*', Some(-1)) => {}
                (b'$', Some(n @ 0..)) => bulk = n as u64 + 2,
                (b'*', Some(n @ 0..)) => self.remaining = self.remaining.saturating_add(n as u64),
                (b'$' | b'*', _) => {
                    return Err(BadAnswer::BadLength(
                        String::from_utf8_lossy(line).into_owned(),
                    ));
                }
                (other, _) => return Err(BadAnswer::BadType(other)),
            }
            // Checked before the bulk string is skipped or the array's values are awaited:
            // the answer is refused on what it announces, before its bytes are buffered.
            self.check_size(bulk, allowed)?;
            self.check_values(allowed)?;
            // Within `allowed`, so no overflow.
            self.at += bulk as usize;
        }
        // The last value may be a bulk string still arriving.
        Ok((self.at <= buf.len()).then_some(self.at))
    }

    /// Refuses the answer if what is checked, `more` bytes after it, and the smallest the
    /// values still to come can be, exceed `allowed`.
    fn check_size(&self, more: u64, allowed: usize) -> Result<(), BadAnswer> {
        let at_least = (self.at as u64)
            .saturating_add(more)
            .saturating_add(self.remaining.saturating_mul(SMALLEST_VALUE));
        match at_least > allowed as u64 {
            true => Err(BadAnswer::TooLong { at_least, allowed }),
            false => Ok(()),
        }
    }
}

impl AnswerScan {
    /// Refuses the answer if the values seen and those still to come are more than `allowed`
    /// pays for at [`VALUE_CHARGE`] bytes each.
    fn check_values(&self, allowed: usize) -> Result<(), BadAnswer> {
        let at_least = self.seen.saturating_add(self.remaining);
        let most = allowed as u64 / VALUE_CHARGE;
        match at_least > most {
            true => Err(BadAnswer::TooManyValues { at_least, most }),
            false => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANY: usize = 1 << 20;

    fn end(buf: &[u8], allowed: usize) -> Result<Option<usize>, BadAnswer> {
        AnswerScan::default().resume(buf, allowed)
    }

    #[test]
    fn finds_where_whole_answers_end() {
        let mget = b"*3\r\n$2\r\nab\r\n$-1\r\n$0\r\n\r\n+OK\r\n";
        assert_eq!(end(mget, ANY), Ok(Some(mget.len() - 5)));
        assert_eq!(end(b"+OK\r\n:3\r\n", ANY), Ok(Some(5)));
        assert_eq!(end(b"*2\r\n*1\r\n:1\r\n$3\r\nabc\r\n", ANY), Ok(Some(21)));
        assert_eq!(end(b"*-1\r\n", ANY), Ok(Some(5)));
        for cut in 0..mget.len() - 5 {
            assert_eq!(end(&mget[..cut], ANY), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn an_answer_received_a_byte_at_a_time_is_found_whole() {
        let mget = b"*3\r\n$2\r\nab\r\n$-1\r\n$0\r\n\r\n+OK\r\n";
        let mut scan = AnswerScan::default();
        for cut in 0..mget.len() - 5 {
            assert_eq!(scan.resume(&mget[..cut], ANY), Ok(None), "cut at {cut}");
        }
        assert_eq!(scan.resume(mget, ANY), Ok(Some(mget.len() - 5)));
    }

    /// The scan goes on from where it stopped instead of checking the answer again from its
    /// start (which made a drip-fed answer cost time quadratic in its size): bytes it already
    /// checked are not read again, so changing them afterwards goes unnoticed.
    #[test]
    fn a_resumed_scan_does_not_read_again_what_it_checked() {
        let mut answer = b"*2\r\n$3\r\nabc\r\n:1".to_vec();
        let mut scan = AnswerScan::default();
        assert_eq!(scan.resume(&answer, ANY), Ok(None));
        answer[..4].copy_from_slice(b"?\r\n?");
        answer.extend_from_slice(b"2\r\n");
        assert_eq!(scan.resume(&answer, ANY), Ok(Some(answer.len())));
    }

    #[test]
    fn refuses_what_is_not_resp() {
        assert_eq!(end(b"?what\r\n", ANY), Err(BadAnswer::BadType(b'?')));
        assert!(matches!(end(b"$x\r\n", ANY), Err(BadAnswer::BadLength(_))));
        assert!(matches!(end(b"$-5\r\n", ANY), Err(BadAnswer::BadLength(_))));
        assert_eq!(end(&[b'+'; MAX_LINE + 1], ANY), Err(BadAnswer::LongLine));
        // Found by review: an empty line, and nested arrays whose counts overflow, panicked
        // the reader.
        assert_eq!(end(b"\r\n", ANY), Err(BadAnswer::EmptyLine));
        assert!(end(b"+OK\r\n\r\n", ANY).is_ok());
        let huge = format!("*{0}\r\n*{0}\r\n*{0}\r\n", i64::MAX);
        assert!(end(huge.as_bytes(), 1 << 29).is_err());
    }

    /// Found by review: an answer within its bound in bytes, of values four bytes each, took
    /// 12 to 19 times its bytes once parsed. Its values are now counted too.
    #[test]
    fn refuses_an_answer_of_more_values_than_its_bound_pays_for() {
        let tiny = |count: usize| format!("*{count}\r\n{}", ":1\r\n".repeat(count));
        // 4,096 bytes pay for 170 values: the array and 169 in it.
        assert_eq!(end(tiny(169).as_bytes(), 4096), Ok(Some(tiny(169).len())));
        assert_eq!(
            end(tiny(170).as_bytes(), 4096),
            Err(BadAnswer::TooManyValues {
                at_least: 171,
                most: 170
            })
        );
        // Refused on the count an array announces, before its values come.
        assert!(matches!(
            end(b"*1000\r\n", 4096),
            Err(BadAnswer::TooManyValues { .. })
        ));
        // What Cloak's reads call for passes: an MGET of nils, for the smallest element any
        // store writes bounded by a whole element for each key.
        let keys = 4000;
        let nils = format!("*{keys}\r\n{}", "$-1\r\n".repeat(keys));
        let bound = super::super::answer_size::mget(keys, 28);
        assert_eq!(end(nils.as_bytes(), bound), Ok(Some(nils.len())));
    }

    #[test]
    fn refuses_an_answer_longer_than_its_request_allows_on_what_it_announces() {
        let too_long = |at_least| {
            Err(BadAnswer::TooLong {
                at_least,
                allowed: 100,
            })
        };
        // A bulk string announcing a gigabyte, refused on its header.
        assert_eq!(end(b"$1073741824\r\n", 100), too_long(1_073_741_824 + 15));
        // An array announcing more values than can fit, refused on its count.
        assert_eq!(end(b"*40\r\n", 100), too_long(5 + 40 * 3));
        // A line that goes on past the limit, refused on what came.
        assert_eq!(end(&[b'+'; 101], 100), too_long(103));
        // Exactly the limit is taken.
        let answer = format!("${}\r\n{}\r\n", 100 - 7, "x".repeat(100 - 7));
        assert_eq!(answer.len(), 100);
        assert_eq!(end(answer.as_bytes(), 100), Ok(Some(100)));
        assert!(matches!(
            end(answer.as_bytes(), 99),
            Err(BadAnswer::TooLong { .. })
        ));
    }
}
