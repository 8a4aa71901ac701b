//! Test-only switches for the wire test of the fill's timing (`crates/cloak/tests/fill_timing.rs`),
//! read from the environment of a process built with the `leak-demo` feature (the binary as the
//! tests build it); in other builds they do nothing and read nothing.
//!
//! - [`SLOW_READ_BACK_ENV`] (microseconds) makes every element the fill reads back from the
//!   spool take that much longer, so any difference in how many elements a fill request reads
//!   shows as milliseconds between requests, far above a loaded host's noise.
//! - [`SLOW_READ_BACK_PER_KIB_ENV`] (microseconds) makes every element read back from the spool
//!   take that much longer per KiB of its length, as a read does on a slow disk, so an element
//!   shorter or longer than a record's shows in a request's time.
//! - [`UNEVEN_DECOYS_ENV`] brings back the first decoys: drawn from every element the scan
//!   spooled, whatever its length and whether it opened, each read at its own length (see
//!   `super::decoys`): the leak the test of a hostile server's elements must catch.
//! - [`LIVE_READ_BACK_ENV`] brings back the fill that read only the elements of live records
//!   (no decoys): the leak the test must catch (see `super::records`).
//! - [`SLOW_LIVE_RECORD_ENV`] (microseconds) makes the work that follows the live records take
//!   that much longer per record: once after the scan for every record found, and in the
//!   preparation of every fill request for each record it carries. It stands for the work no
//!   decoy evens out (sorting, the key directory, copying values into elements), made large
//!   enough to show far above a loaded host's noise, so the test can tell whether the fill's
//!   public clock hides it (`cloak_schemes::shell::fill`).
//! - [`SLOW_SCANNED_RECORD_ENV`] (microseconds) makes opening each chunk of recovery's scanned
//!   elements take that much longer for each live record it holds: the work of keeping a
//!   record, made large, so the test can tell whether it shows in the times of the scan's
//!   requests; [`OPENED_SCAN_ENV`] brings back the scan that opened each chunk before the
//!   request after next (see `super::Recovery::spool`), the leak the test must catch.
//! - [`SLOW_CLIENT_READ_ENV`] (microseconds) makes each client's read answered from the
//!   recovered records during the fill take that much longer, on the thread that prepares the
//!   fill's requests, so the test can tell whether the fill's clock keeps such reads from
//!   moving its requests.

/// Microseconds added to every read back from the spool (see the module docs).
pub const SLOW_READ_BACK_ENV: &str = "CLOAK_LEAK_DEMO_SLOW_READ_BACK_US";

/// Microseconds added to every read back from the spool for each KiB of its element (see the
/// module docs).
pub const SLOW_READ_BACK_PER_KIB_ENV: &str = "CLOAK_LEAK_DEMO_SLOW_READ_BACK_US_PER_KIB";

/// Set (to anything), decoys are drawn from every spooled element, each read at its own
/// length (see the module docs).
pub const UNEVEN_DECOYS_ENV: &str = "CLOAK_LEAK_DEMO_UNEVEN_DECOYS";

/// Set (to anything), the fill reads back only the elements of live records (see the module
/// docs).
pub const LIVE_READ_BACK_ENV: &str = "CLOAK_LEAK_DEMO_LIVE_READ_BACK";

/// Set (in microseconds), the work per live record takes that much longer (see the module
/// docs).
pub const SLOW_LIVE_RECORD_ENV: &str = "CLOAK_LEAK_DEMO_SLOW_LIVE_RECORD_US";

/// Set (in microseconds), opening a scanned chunk takes that much longer per live record (see
/// the module docs).
pub const SLOW_SCANNED_RECORD_ENV: &str = "CLOAK_LEAK_DEMO_SLOW_SCANNED_RECORD_US";

/// Set (to anything), recovery's scan opens each chunk before its next request leaves (see the
/// module docs).
pub const OPENED_SCAN_ENV: &str = "CLOAK_LEAK_DEMO_OPENED_SCAN";

/// Set (in microseconds), a client's read of a recovered record during the fill takes that much
/// longer (see the module docs).
pub const SLOW_CLIENT_READ_ENV: &str = "CLOAK_LEAK_DEMO_SLOW_CLIENT_READ_US";

/// Whether the environment variable `$name` is set, read once for each place this stands: in a
/// leak-demo build; `false` in any other, which reads nothing.
macro_rules! set_once {
    ($name:expr) => {{
        #[cfg(feature = "leak-demo")]
        {
            static SET: std::sync::LazyLock<bool> =
                std::sync::LazyLock::new(|| std::env::var_os($name).is_some());
            *SET
        }
        #[cfg(not(feature = "leak-demo"))]
        false
    }};
}

/// The microseconds the environment variable `$name` gives, read once for each place this
/// stands: in a leak-demo build; `None` in any other, which reads nothing.
macro_rules! micros_once {
    ($name:expr) => {{
        #[cfg(feature = "leak-demo")]
        {
            static DELAY: std::sync::LazyLock<Option<std::time::Duration>> =
                std::sync::LazyLock::new(|| {
                    let micros = std::env::var($name).ok()?.parse().ok()?;
                    Some(std::time::Duration::from_micros(micros))
                });
            *DELAY
        }
        #[cfg(not(feature = "leak-demo"))]
        None::<std::time::Duration>
    }};
}

/// Waits as long as [`SLOW_CLIENT_READ_ENV`] says, in a leak-demo build.
pub(super) fn slow_client_read() {
    sleep_times(micros_once!(SLOW_CLIENT_READ_ENV), 1);
}

/// Waits as long as [`SLOW_SCANNED_RECORD_ENV`] says for each of `records` live records, in a
/// leak-demo build.
pub(super) fn slow_scanned_records(records: usize) {
    sleep_times(micros_once!(SLOW_SCANNED_RECORD_ENV), records);
}

/// Whether recovery's scan opens each chunk before its next request: in a leak-demo build with
/// [`OPENED_SCAN_ENV`] set.
pub fn opened_scan() -> bool {
    set_once!(OPENED_SCAN_ENV)
}

/// Waits as long as [`SLOW_READ_BACK_ENV`] and [`SLOW_READ_BACK_PER_KIB_ENV`] say for an
/// element of `len` bytes, in a leak-demo build.
pub(super) fn slow_read_back(len: u32) {
    sleep_times(micros_once!(SLOW_READ_BACK_ENV), 1);
    if let Some(per_kib) = micros_once!(SLOW_READ_BACK_PER_KIB_ENV) {
        std::thread::sleep(per_kib.mul_f64(f64::from(len) / 1024.0));
    }
}

/// Whether decoys are drawn from every spooled element, each read at its own length: in a
/// leak-demo build with [`UNEVEN_DECOYS_ENV`] set.
pub(super) fn uneven_decoys() -> bool {
    set_once!(UNEVEN_DECOYS_ENV)
}

/// Waits as long as [`SLOW_LIVE_RECORD_ENV`] says for each of `records` live records, in a
/// leak-demo build.
pub fn slow_live_records(records: usize) {
    sleep_times(micros_once!(SLOW_LIVE_RECORD_ENV), records);
}

/// Sleeps `times` × `delay`, if there is a delay.
fn sleep_times(delay: Option<std::time::Duration>, times: usize) {
    if let Some(delay) = delay
        && times > 0
    {
        std::thread::sleep(delay.saturating_mul(u32::try_from(times).unwrap_or(u32::MAX)));
    }
}

/// Whether the fill reads back only the elements of live records: in a leak-demo build with
/// [`LIVE_READ_BACK_ENV`] set.
pub(super) fn reads_back_live_records_only() -> bool {
    set_once!(LIVE_READ_BACK_ENV)
}
