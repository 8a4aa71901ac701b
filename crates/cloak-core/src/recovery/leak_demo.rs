//! Test-only switches for the wire test of the fill's timing (`crates/cloak/tests/fill_timing.rs`),
//! read from the environment of a process built with the `leak-demo` feature (the binary as the
//! tests build it); in other builds they do nothing and read nothing.
//!
//! - [`SLOW_READ_BACK_ENV`] (microseconds) makes every element the fill reads back from the
//!   spool take that much longer, so any difference in how many elements a fill request reads
//!   shows as milliseconds between requests, far above a loaded host's noise.
//! - [`LIVE_READ_BACK_ENV`] brings back the fill that read only the elements of live records
//!   (no decoys): the leak the test must catch (see `super::records`).

/// Microseconds added to every read back from the spool (see the module docs).
pub const SLOW_READ_BACK_ENV: &str = "CLOAK_LEAK_DEMO_SLOW_READ_BACK_US";

/// Set (to anything), the fill reads back only the elements of live records (see the module
/// docs).
pub const LIVE_READ_BACK_ENV: &str = "CLOAK_LEAK_DEMO_LIVE_READ_BACK";

/// Waits as long as [`SLOW_READ_BACK_ENV`] says, in a leak-demo build.
pub(super) fn slow_read_back() {
    #[cfg(feature = "leak-demo")]
    {
        use std::sync::LazyLock;
        use std::time::Duration;
        static DELAY: LazyLock<Option<Duration>> = LazyLock::new(|| {
            let micros = std::env::var(SLOW_READ_BACK_ENV).ok()?.parse().ok()?;
            Some(Duration::from_micros(micros))
        });
        if let Some(delay) = *DELAY {
            std::thread::sleep(delay);
        }
    }
}

/// Whether the fill reads back only the elements of live records: in a leak-demo build with
/// [`LIVE_READ_BACK_ENV`] set.
pub(super) fn reads_back_live_records_only() -> bool {
    #[cfg(feature = "leak-demo")]
    {
        use std::sync::LazyLock;
        static SET: LazyLock<bool> =
            LazyLock::new(|| std::env::var_os(LIVE_READ_BACK_ENV).is_some());
        *SET
    }
    #[cfg(not(feature = "leak-demo"))]
    false
}
