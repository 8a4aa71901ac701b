//! A real-time priority for the threads that put timed requests on the wire: the alarm thread
//! (`crate::wake`) and the storage traffic's thread ([`crate::own_thread`]).
//!
//! When every CPU is busy (a client load that keeps both cores of a small host working), a
//! thread that wakes at a batch's instant waits for a CPU for as long as the kernel's fair
//! scheduler lets the running tasks finish their slices, and that wait grows with the load. The
//! storage server saw it: on 2 cores under a saturating SET load, batch intervals of 20 ms spread
//! to 19.3–21.0 ms (p10–p90) and read-to-write-back gaps to 9.6–11.6 ms, against 19.9–20.1 and
//! 10.1–10.4 idle (`scripts/measure-batch-timing`, wire capture). With these two threads at the
//! lowest real-time priority (`SCHED_FIFO` 1) they run as soon as they wake, and the loaded
//! spreads came back to 19.9–20.1 and 10.1–10.3.
//!
//! Both threads sleep nearly all the time: the alarm thread only moves a notification, and the
//! storage thread sends requests and reads answers. The kernel's real-time throttling (by
//! default at most 95% of a CPU per second for real-time threads) still bounds them if either
//! ever spun. Raising a priority needs `CAP_SYS_NICE` (root has it; for another user,
//! `setcap cap_sys_nice+ep $(which cloak)` or the service manager's `AmbientCapabilities`);
//! without it the threads keep the normal priority, the proxy says so once at start and in
//! `INFO` (`timing_priority:normal`), and its timing then depends on the load whenever the host
//! runs out of CPU.

use std::sync::atomic::{AtomicU8, Ordering};

const UNTRIED: u8 = 0;
const REALTIME: u8 = 1;
const NORMAL: u8 = 2;

/// What the timing threads got: the last attempt's outcome.
static GRANTED: AtomicU8 = AtomicU8::new(UNTRIED);

/// Gives the calling thread the lowest real-time priority, or leaves it as it is if the process
/// may not (logged once, with how to allow it).
pub fn raise_this_thread() {
    match set_realtime() {
        Ok(()) => GRANTED.store(REALTIME, Ordering::Relaxed),
        Err(error) => {
            if GRANTED.swap(NORMAL, Ordering::Relaxed) != NORMAL {
                tracing::warn!(
                    %error,
                    "the timing threads keep the normal priority: on a host whose CPUs are all \
                     busy, when batches reach storage then depends on the load; allow real-time \
                     priority with CAP_SYS_NICE (e.g. `setcap cap_sys_nice+ep` on the binary)"
                );
            }
        }
    }
}

/// `realtime`, `normal`, or `none` (no timing thread started yet), for `INFO`.
pub fn granted() -> &'static str {
    match GRANTED.load(Ordering::Relaxed) {
        REALTIME => "realtime",
        NORMAL => "normal",
        _ => "none",
    }
}

#[cfg(target_os = "linux")]
fn set_realtime() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: `param` is a valid sched_param for the call's duration; pid 0 names the calling
    // thread, and the call changes nothing but its scheduling policy.
    let result = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn set_realtime() -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "real-time priority is only requested on Linux",
    ))
}
