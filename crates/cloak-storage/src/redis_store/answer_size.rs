//! The longest answer Redis may give to each command Cloak sends, in bytes of RESP, from public
//! information only: the command, how many keys it names, the store's key length and the
//! largest element the store's scheme writes (sizes the storage server sees anyway). The pipe
//! refuses a longer answer before buffering it (see [`super::answer_scan`]), so a hostile
//! Redis can make the proxy hold no more than the requests call for.

/// A status (`+OK`, `+PONG`), an integer (DEL, DBSIZE) or an error line. Redis's error lines
/// are a sentence, well under this.
pub const SHORT_ANSWER: usize = 4096;

/// Keys one SCAN call may return per key its COUNT asks for. COUNT is a hint: Redis returns
/// every key of each bucket it visits, and while its table is being resized it visits the
/// buckets of both tables, so a call can return a few times COUNT; far more is not Redis.
const SCAN_KEYS_PER_COUNT: u64 = 16;

/// Bytes of RESP for a bulk string of `len` bytes: `$`, the length, CRLF, the bytes, CRLF.
fn bulk(len: u64) -> u64 {
    len.saturating_add(1 + digits(len) + 2 + 2)
}

/// Bytes of RESP for the header of an array of `count` values: `*`, the count, CRLF.
fn array_header(count: u64) -> u64 {
    1 + digits(count) + 2
}

fn digits(n: u64) -> u64 {
    u64::from(n.checked_ilog10().unwrap_or(0)) + 1
}

/// As a bound for the pipe: an error line is always allowed, and a bound past `usize` is no
/// bound at all (the pipe caps every answer anyway).
fn allowed(bytes: u64) -> usize {
    usize::try_from(bytes)
        .unwrap_or(usize::MAX)
        .max(SHORT_ANSWER)
}

/// An MGET of `keys` keys, each holding nothing or an element of at most `max_element` bytes.
pub fn mget(keys: usize, max_element: usize) -> usize {
    // A missing key is `$-1\r\n`, shorter than any bulk string.
    let value = bulk(max_element as u64);
    allowed(array_header(keys as u64).saturating_add(value.saturating_mul(keys as u64)))
}

/// A SCAN with COUNT `count` whose keys (matched by a pattern of fixed length) are `key_len`
/// bytes: the next cursor (a 64-bit number as a bulk string) and the keys.
pub fn scan(count: usize, key_len: usize) -> usize {
    let keys = (count as u64).saturating_mul(SCAN_KEYS_PER_COUNT);
    let cursor = bulk(digits(u64::MAX));
    allowed(
        (array_header(2) + cursor + array_header(keys))
            .saturating_add(bulk(key_len as u64).saturating_mul(keys)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mget_answer_of_whole_elements_fits_its_bound_exactly() {
        // "*10000\r\n", then 10,000 times "$1000\r\n", 1,000 bytes and CRLF.
        let many = 10_000;
        assert_eq!(mget(many, 1000), 1 + 5 + 2 + many * (7 + 1000 + 2));
        assert_eq!(digits(0), 1);
        assert_eq!(digits(9), 1);
        assert_eq!(digits(10), 2);
        assert_eq!(digits(u64::MAX), 20);
        // Shorter than an error line: the error line is allowed.
        assert_eq!(mget(1, 10), SHORT_ANSWER);
    }

    #[test]
    fn a_scan_answer_of_sixteen_times_its_count_fits() {
        let keys = 16 * 100;
        let cursor = 1 + 2 + 2 + 20 + 2;
        assert_eq!(scan(100, 40), 4 + cursor + 7 + keys * (1 + 2 + 2 + 40 + 2));
    }

    #[test]
    fn bounds_that_overflow_saturate() {
        assert_eq!(mget(usize::MAX, usize::MAX), usize::MAX);
        assert_eq!(scan(usize::MAX, usize::MAX), usize::MAX);
    }
}
