//! The process's memory: no transparent huge pages, and what a start freed handed back to the
//! operating system once the start is over.
//!
//! Measured with `cloak bench --scheme cloak,unsafe --keys 1000000` (1 KiB values, RSS per key
//! after a restart and load): 244 bytes a key for Cloak when this was written, 203 with huge
//! pages off, 182 with the collection after the start as well. Each figure below is from then;
//! later changes (recovery's tables, the slot versions, the batches' worker pool) brought it to
//! 152–154, of which Cloak's structures are 58: the README's memory section has the breakdown.
//!
//! - **Huge pages.** mimalloc asks for transparent huge pages on its arena, so a page touched
//!   anywhere in 2 MiB can make all 2 MiB resident (an idle proxy of 1000 slots: 30 MB of its
//!   arena resident with them, 11 without). Switched off for the process (measured with
//!   `MIMALLOC_ALLOW_THP=0`): 244 → 203 bytes a key, and `unsafe` no slower in the same run.
//! - **After the start.** A restart's recovery holds every key several times over while it scans
//!   and rebuilds, and frees it all once the scheme's fill is done. mimalloc returns freed
//!   memory from later allocator calls on the thread that owns it, a second after it was freed,
//!   and the thread that ran the recovery (the main thread, which then only accepts
//!   connections) rarely makes any. So when the start is over, one forced collection runs there
//!   and on the core's thread. It is a single call, not an allocator setting: purging sooner all
//!   the time (`MIMALLOC_PURGE_DELAY`) slowed the unsafe baseline by 12%. (Measured on the core's
//!   thread alone, before huge pages were off, it changed nothing; with both threads and the
//!   other changes Cloak is at 182 bytes a key, not measured apart.)

use std::convert::Infallible;

use tokio::sync::Notify;

/// Woken when a store's start is over, for [`collect_on_this_thread_after_start`] (it keeps one
/// permit, so the wake is not lost if that future is not waiting yet).
static STARTED: Notify = Notify::const_new();

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

/// A store's start is over (the proxy's `after_start` hook, run on the core's thread): returns
/// what this thread freed, and wakes [`collect_on_this_thread_after_start`] for the main thread.
pub fn start_is_over() {
    give_back_freed();
    STARTED.notify_one();
}

/// Waits for the first start to be over, returns what this thread freed, then never finishes:
/// run it beside the proxy on the thread that ran the recovery (`block_on`'s).
pub async fn collect_on_this_thread_after_start() -> Infallible {
    STARTED.notified().await;
    give_back_freed();
    std::future::pending().await
}

/// Returns the memory this thread's allocator holds freed, and what any thread freed in whole
/// pages, to the operating system.
fn give_back_freed() {
    #[cfg(feature = "mimalloc")]
    // SAFETY: `mi_collect` takes no pointers and may be called from any thread at any time;
    // mimalloc is the global allocator in this build, so it is initialised.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
    tracing::debug!("returned the memory freed during the start to the operating system");
}
