//! The process's memory: the allocator and its settings, no transparent huge pages, and what a
//! start freed handed back to the operating system once the start is over.
//!
//! - **jemalloc, returning freed pages on its own thread.** A batch allocates and frees some
//!   4,000 element buffers, opened on the worker threads and freed on others, 50 times a second.
//!   What an allocator keeps of that churn, not what Cloak holds, is most of the gap between
//!   Cloak's live heap (69 MB at a million 1 KiB keys) and its RSS. mimalloc 3, the allocator
//!   before this one, returned freed pages only from later calls on the thread that owned them,
//!   after a purge delay of a second: 127–184 bytes a key at a million keys, and shortening the
//!   delay cost Cloak up to 15% at 100 × 64 in flight (the README has the runs). jemalloc's
//!   background thread purges on its own, so no serving thread pays for it. Measured with
//!   `cloak bench --scheme cloak,unsafe --keys 1000000 --warmup 300000 --requests 1000000` and
//!   the same with `--workload temporal --clients 100 --pipeline 64 --warmup 1000000`,
//!   alternating builds: the README's memory section has the figures.
//! - **The settings** ([`MALLOC_CONF`]; `_RJEM_MALLOC_CONF` in the environment overrides them
//!   for one run):
//!   - `background_thread:true`: purging runs on jemalloc's thread, not inside allocations;
//!   - `dirty_decay_ms:50`: freed pages go back over 50 ms (jemalloc's default is 10 s): 97 and
//!     101 bytes a key against 101 and 104 at 300 ms, and Cloak no slower at 100 × 64 in flight;
//!   - `muzzy_decay_ms:0`: they go back with `MADV_DONTNEED`, which takes them out of RSS at
//!     once (`MADV_FREE`, the default first step, leaves them counted until the kernel needs
//!     them);
//!   - `narenas:1`: one arena for every thread, so pages freed by one thread are reused by all
//!     (jemalloc's default of four arenas a core kept more: 113 against 99 bytes a key in one run
//!     each). Small allocations come from each thread's cache, so the arena's lock is taken
//!     rarely; on a host with many cores that lock is the first thing to check, and
//!     `_RJEM_MALLOC_CONF=narenas:N` the way to change it.
//! - **Huge pages.** An allocator backed by transparent huge pages (mimalloc asked for them; a
//!   kernel set to `always` gives them unasked) keeps a whole 2 MiB resident for a page touched
//!   anywhere in it: an idle proxy of 1000 slots took 30 MB with them, 11 without, and a
//!   million keys 244 → 203 bytes a key when they were switched off, `unsafe` no slower.
//! - **After the start.** A restart's recovery holds every key several times over while it scans
//!   and rebuilds, and frees it all once the scheme's fill is done. The decay would return it
//!   within 50 ms; the proxy purges every arena at once when the start is over, so the memory a
//!   start leaves resident never depends on when it is measured.

/// The allocator of the proxy and the server (see the module docs).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's run-time settings, read before `main` (see the module docs for each one).
///
/// The symbol is jemalloc's `malloc_conf` under the prefix this build gives jemalloc's names.
#[cfg(feature = "jemalloc")]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: Option<&'static libc::c_char> = Some({
    const SETTINGS: &std::ffi::CStr =
        c"background_thread:true,dirty_decay_ms:50,muzzy_decay_ms:0,narenas:1";
    // SAFETY: `SETTINGS` is a static nul-terminated string; this is its first byte.
    unsafe { &*SETTINGS.as_ptr() }
});

/// Keeps the process off transparent huge pages (see the module docs). Call it first thing in
/// `main`, before the allocator touches much memory: pages already huge stay so.
pub fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and changes only this process's flag.
    let refused = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } != 0;
    #[cfg(not(target_os = "linux"))]
    let refused = false;
    if refused {
        // Only costs memory: the kernel may still back the allocator with huge pages.
        eprintln!(
            "warning: could not switch transparent huge pages off: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// A store's start is over (the proxy's `after_start` hook): returns every page the allocator
/// holds freed, whichever thread freed it, to the operating system.
pub fn start_is_over() {
    #[cfg(feature = "jemalloc")]
    {
        // `arena.<MALLCTL_ARENAS_ALL>.purge` (4096 is jemalloc's `MALLCTL_ARENAS_ALL`): a
        // command with no value to read or write.
        // SAFETY: the name is a nul-terminated string; a command takes null value pointers.
        let failed = unsafe {
            tikv_jemalloc_sys::mallctl(
                c"arena.4096.purge".as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        } != 0;
        if failed {
            // Only costs memory until the decay returns it.
            tracing::warn!("could not return the memory freed during the start");
            return;
        }
    }
    tracing::debug!("returned the memory freed during the start to the operating system");
}

#[cfg(all(test, feature = "jemalloc"))]
mod tests {
    /// Reads jemalloc's setting `name` (a nul-terminated `opt.*` name) as a `T`.
    fn setting<T: Default>(name: &std::ffi::CStr) -> T {
        let mut value = T::default();
        let mut length = std::mem::size_of::<T>();
        // SAFETY: `value` is a `T` of `length` bytes, the size jemalloc writes for these names
        // (checked below by the length it reports back).
        let failed = unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr(),
                (&raw mut value).cast(),
                &mut length,
                std::ptr::null_mut(),
                0,
            )
        } != 0;
        assert!(!failed, "jemalloc has no setting {name:?}");
        assert_eq!(length, std::mem::size_of::<T>(), "{name:?}'s size");
        value
    }

    #[test]
    fn jemalloc_runs_with_the_settings_this_build_gives_it() {
        assert!(setting::<bool>(c"opt.background_thread"));
        assert_eq!(setting::<isize>(c"opt.dirty_decay_ms"), 50);
        assert_eq!(setting::<isize>(c"opt.muzzy_decay_ms"), 0);
        assert_eq!(setting::<u32>(c"opt.narenas"), 1);
    }
}
