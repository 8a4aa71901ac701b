//! Request streams: what a benchmark or an audit sends.
//!
//! Keys are numbered `0..keys`; [`key_name`] turns a number into the bytes clients send. Every
//! generator is seeded, so a run can be repeated exactly.
//!
//! - [`Temporal`]: the Cloak paper's synthetic workload (§7.1): draw a reuse distance from
//!   Zipf(s) and access the key whose recency rank it is.
//! - [`Ycsb`]: YCSB core workloads A, B, C and F, zipfian (0.99, scrambled) or uniform.
//! - [`Trace`]: replay a file, one request per line.
//! - [`Uniform`], [`OneKey`]: no structure at all, and all on one key (opposites in a security
//!   game).
//! - [`Markov`]: correlated queries, the next key depending on the previous one.
//!
//! [`WorkloadSpec`] names any of them on a command line (`temporal:s=1.5`, `markov:fanout=3`).

mod fenwick;
mod markov;
mod one_key;
mod spec;
mod temporal;
mod trace;
mod uniform;
mod ycsb;

pub use markov::{Markov, MarkovChain};
pub use one_key::OneKey;
pub use spec::{SYNTAX, SpecError, WorkloadSpec};
pub use temporal::Temporal;
pub use trace::{Trace, TraceError};
pub use uniform::Uniform;
pub use ycsb::{Distribution, Mix, Ycsb};

/// One client request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub key: u64,
    pub write: bool,
}

/// A stream of requests.
pub trait Workload: Send {
    /// The next request, `None` at the end of a finite stream (a trace).
    fn next_request(&mut self) -> Result<Option<Request>, TraceError>;

    /// What this is, in a few words, for reports.
    fn describe(&self) -> String;
}

/// The key clients send for key number `key`: fixed width ([`KEY_SIZE`] bytes), like
/// redis-benchmark's.
pub fn key_name(key: u64) -> String {
    format!("key:{key:012}")
}

/// Length of every [`key_name`] (up to 10^12 keys), the key size benchmark stores are made for.
pub const KEY_SIZE: usize = 16;

/// The key number behind a name from [`key_name`]; `None` for any other key.
pub fn key_number(name: &[u8]) -> Option<u64> {
    let digits = name.strip_prefix(b"key:")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Takes up to `n` requests from `workload`.
pub fn take(workload: &mut dyn Workload, n: u64) -> Result<Vec<Request>, TraceError> {
    let mut requests = Vec::with_capacity(n.min(1 << 24) as usize);
    while (requests.len() as u64) < n {
        match workload.next_request()? {
            Some(request) => requests.push(request),
            None => break,
        }
    }
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_numbers_invert_key_names() {
        for key in [0, 7, 123_456_789_012] {
            assert_eq!(key_number(key_name(key).as_bytes()), Some(key));
        }
        assert_eq!(key_number(b"key:"), None);
        assert_eq!(key_number(b"key:12a"), None);
        assert_eq!(key_number(b"other:12"), None);
    }
}
