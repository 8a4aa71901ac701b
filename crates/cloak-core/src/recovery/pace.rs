//! When recovery's scan requests leave: on a public clock, like the fill's
//! (`cloak_schemes::shell::fill`).
//!
//! The scan is a pipeline of two: a chunk's elements are opened while the next chunk's request
//! is out, and the request after that waits for both. Opening a chunk does more for each live
//! record it holds (keeping the record, spooling its element) than for an empty slot's element,
//! so a scan whose next request left as soon as the chunk before was opened showed the server,
//! chunk by chunk, how many live records it held, and so, roughly, how many keys the store has
//! (review finding M2 of the fill-clock work). So each request leaves a fixed interval after the
//! one before left, an interval computed only from public quantities (the chunk's size in
//! elements and the element's length), scaled by the operator's `--fill-pace`; the opening work
//! of a chunk then shows only if it overruns that interval, and such requests are counted
//! ([`ScanPace::late`]) and logged, so the operator can raise `--fill-pace`.
//!
//! Anchoring each interval at the moment the request before really left, rather than at a
//! fixed grid, keeps a slow server's own delays (an answer that comes late delays the next
//! request) from being read as the proxy's: the clock moves by what the server did.

use std::time::{Duration, Instant};

/// A request's interval per element, on the scan's clock and the fill's
/// (`cloak_schemes::shell::fill`): opening or sealing it, reading it back. For the scan, 1.5 µs
/// an element and 1 ns a byte were too little: a release build on this project's 2-core
/// machine, lightly loaded, opened 114 of a million 1 KiB elements' 245 chunks after their
/// instant; this is about twice that interval. For the fill, it has slack over the test
/// build's work (a full store's 1024-element requests took 3.55 ms at 1 KiB values).
const PER_ELEMENT: Duration = Duration::from_nanos(2_000);

/// A request's interval per byte of its elements (mostly encryption and decryption).
const PER_BYTE: Duration = Duration::from_nanos(3);

/// The time a request of `elements` elements of `element_len` bytes is given, on the scan's
/// and the fill's clocks, at `--fill-pace` `scale`: from public sizes only, never from a
/// measurement of the work, which follows the records.
pub fn request_interval(elements: u64, element_len: usize, scale: f64) -> Duration {
    let bytes = elements.saturating_mul(element_len as u64);
    (times(PER_ELEMENT, elements) + times(PER_BYTE, bytes)).mul_f64(scale)
}

/// `unit` times `count`, saturating (a store of 2^32 slots at a microsecond is over an hour,
/// far from overflowing; saturation only guards against absurd shapes).
pub fn times(unit: Duration, count: u64) -> Duration {
    unit.saturating_mul(u32::try_from(count).unwrap_or(u32::MAX))
}

/// When each of a scan's requests leaves (see the module docs).
#[derive(Debug)]
pub struct ScanPace {
    /// The instant the next request leaves.
    next: Instant,
    interval: Duration,
    /// Requests whose chunk before was opened after their instant.
    late: u64,
}

impl ScanPace {
    /// The pace of a scan that starts at `start`, in chunks of `chunk` elements of
    /// `element_len` bytes, scaled by `scale` (`--fill-pace`: 2 is twice as slow).
    pub fn new(start: Instant, chunk: u32, element_len: usize, scale: f64) -> Self {
        Self {
            next: start,
            interval: request_interval(u64::from(chunk), element_len, scale),
            late: 0,
        }
    }

    /// The instant the next request leaves.
    pub fn next(&self) -> Instant {
        self.next
    }

    /// The work the next request waited for (the chunk before it, opened) was done at `done`:
    /// counted late if that was after the request's instant.
    pub fn ready(&mut self, done: Instant) {
        if done > self.next {
            self.late += 1;
        }
    }

    /// The next request left at `left`: the one after it leaves an interval later.
    pub fn left(&mut self, left: Instant) {
        self.next = left.max(self.next) + self.interval;
    }

    /// Requests that left after their instant because the proxy was not done.
    pub fn late(&self) -> u64 {
        self.late
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_leave_an_interval_apart_from_public_sizes_and_late_work_is_counted() {
        let start = Instant::now();
        // 4096 elements of 1,000 bytes: 4096 × (2 µs + 3 µs).
        let interval = Duration::from_micros(20_480);
        for scale in [1.0, 3.0] {
            let mut pace = ScanPace::new(start, 4096, 1000, scale);
            assert_eq!(pace.next(), start);
            pace.left(start);
            assert_eq!(pace.next(), start + interval.mul_f64(scale));
        }
        let mut pace = ScanPace::new(start, 4096, 1000, 1.0);
        pace.ready(start);
        pace.left(start);
        // The chunk before was opened in time: no lateness.
        pace.ready(start + interval / 2);
        assert_eq!(pace.late(), 0);
        pace.left(start + interval);
        // The server answered late: the clock moves by its delay.
        let answered_late = start + interval * 5;
        pace.ready(start + interval * 2);
        pace.left(answered_late);
        assert_eq!(pace.next(), answered_late + interval);
        // The proxy opened a chunk after the instant: counted.
        pace.ready(answered_late + interval * 2);
        assert_eq!(pace.late(), 1);
    }
}
