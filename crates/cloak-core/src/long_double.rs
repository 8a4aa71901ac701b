//! INCRBYFLOAT's arithmetic in C's `long double`, exactly as Redis does it (see
//! `long_double.c` for why it is C).

use bytes::Bytes;

use crate::command::CommandError;

/// Redis's `MAX_LONG_DOUBLE_CHARS`: the C side writes at most this many bytes.
const MAX_CHARS: usize = 5 * 1024;

unsafe extern "C" {
    fn cloak_ld_valid(s: *const u8, len: usize) -> i32;
    fn cloak_ld_add(
        current: *const u8,
        current_len: usize,
        increment: *const u8,
        increment_len: usize,
        out: *mut u8,
        written: *mut usize,
    ) -> i32;
}

/// Whether Redis reads `text` as a float (`strtold`, whole string, no leading space, not NaN).
pub fn is_valid(text: &[u8]) -> bool {
    // SAFETY: the C side reads `len` bytes of `text` and copies them into a buffer it checks
    // `len` against.
    unsafe { cloak_ld_valid(text.as_ptr(), text.len()) == 1 }
}

/// `current + increment`, printed as Redis prints INCRBYFLOAT's result.
pub fn add(current: &[u8], increment: &[u8]) -> Result<Bytes, CommandError> {
    let mut out = vec![0u8; MAX_CHARS];
    let mut written = 0usize;
    // SAFETY: both inputs are read within their lengths; `out` has the MAX_CHARS bytes the C
    // side may write (snprintf is bounded by it), and `written` is a valid pointer.
    let status = unsafe {
        cloak_ld_add(
            current.as_ptr(),
            current.len(),
            increment.as_ptr(),
            increment.len(),
            out.as_mut_ptr(),
            &mut written,
        )
    };
    match status {
        0 => {
            out.truncate(written);
            Ok(Bytes::from(out))
        }
        1 | 2 => Err(CommandError::NotFloat),
        _ => Err(CommandError::NanOrInfinity),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_print_as_in_redis() {
        let sum = |a: &str, b: &str| add(a.as_bytes(), b.as_bytes()).unwrap();
        assert_eq!(sum("0.1", "0.2"), "0.3");
        assert_eq!(sum("10.50", "0.1"), "10.6");
        assert_eq!(sum("5.0e3", "2.0e2"), "5200");
        assert_eq!(sum("0", "-0"), "0");
        assert_eq!(sum("3", "-1.5"), "1.5");
        assert!(is_valid(b"1e3") && !is_valid(b" 1") && !is_valid(b"nan") && !is_valid(b""));
        assert_eq!(add(b"abc", b"1"), Err(CommandError::NotFloat));
        assert_eq!(add(b"1", b"1x"), Err(CommandError::NotFloat));
        assert_eq!(add(b"1e4932", b"1e4932"), Err(CommandError::NanOrInfinity));
    }
}
