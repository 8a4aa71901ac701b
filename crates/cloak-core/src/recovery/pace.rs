//! The time a restart's public clock (`cloak_schemes::shell::fill`) gives the proxy's work per
//! element, from public sizes only: for each fill request, and, before the fill's first
//! request, for opening every element recovery's scan read.
//!
//! The scan itself runs on no clock: its requests wait only for storage's answers and for each
//! chunk to be appended to the spool as it came, the same work whatever the chunk holds (see
//! `super::Recovery::spool`). It used to open each chunk before the request after next, work
//! that follows the live records, and so ran on a clock of these intervals (review finding M2
//! of the fill-clock work); that clock made a million-key scan take 5.4 s where storage sends
//! the elements in half a second.

use std::time::Duration;

/// The time given per element of a fill request: reading it back from the spool, sealing it.
/// It has slack over the test build's work (a full store's 1024-element requests took 3.55 ms
/// at 1 KiB values). (When the scan opened each chunk and spooled its elements on a clock of
/// these intervals, 1.5 µs an element and 1 ns a byte had been too little for that.)
const PER_ELEMENT: Duration = Duration::from_nanos(2_000);

/// The time given per byte of the elements (mostly encryption and decryption).
const PER_BYTE: Duration = Duration::from_nanos(3);

/// The time given per element for opening it after the scan (and keeping its records), which
/// the wait before a restart's fill allows for every element the scan read: a release build on
/// this project's 2-core machine, idle, opened a million 1 KiB elements in 0.94 s, 0.9 µs
/// each (reading them back from the spool included); with these, 2.1 µs each.
const OPEN_PER_ELEMENT: Duration = Duration::from_nanos(1_000);

/// The time given per byte of a scanned element for opening it.
const OPEN_PER_BYTE: Duration = Duration::from_nanos(1);

/// The time opening `elements` scanned elements of `element_len` bytes is given, at
/// `--fill-pace` `scale`: from public sizes only, as [`time_for_elements`].
pub fn time_to_open(elements: u64, element_len: usize, scale: f64) -> Duration {
    per_element_and_byte(
        OPEN_PER_ELEMENT,
        OPEN_PER_BYTE,
        elements,
        element_len,
        scale,
    )
}

/// The time `elements` elements of `element_len` bytes are given, at `--fill-pace` `scale`:
/// from public sizes only, never from a measurement of the work, which follows the records.
pub fn time_for_elements(elements: u64, element_len: usize, scale: f64) -> Duration {
    per_element_and_byte(PER_ELEMENT, PER_BYTE, elements, element_len, scale)
}

/// `per_element` for each of `elements` elements and `per_byte` for each of their bytes,
/// scaled by `scale`.
fn per_element_and_byte(
    per_element: Duration,
    per_byte: Duration,
    elements: u64,
    element_len: usize,
    scale: f64,
) -> Duration {
    let bytes = elements.saturating_mul(element_len as u64);
    (times(per_element, elements) + times(per_byte, bytes)).mul_f64(scale)
}

/// `unit` times `count`, saturating (a store of 2^32 slots at a microsecond is over an hour,
/// far from overflowing; saturation only guards against absurd shapes).
pub fn times(unit: Duration, count: u64) -> Duration {
    unit.saturating_mul(u32::try_from(count).unwrap_or(u32::MAX))
}
