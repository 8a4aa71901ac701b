//! CPU time a process has used, from `/proc/PID/stat`: what a run costs its proxy and its
//! storage server per operation, beside how fast it went.

/// User plus system CPU seconds process `pid` (all its threads) has used so far; `None` where
/// `/proc` cannot tell (the process is gone, or this is not Linux).
pub fn seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(ticks(&stat)? as f64 / ticks_per_second()?)
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line. The command name (field 2) is
/// in parentheses and may hold spaces and parentheses itself, so fields count from the last `)`.
fn ticks(stat: &str) -> Option<u64> {
    let (_, after_name) = stat.rsplit_once(')')?;
    // after_name starts with field 3 (the state).
    let mut fields = after_name.split_whitespace().skip(14 - 3);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

/// User plus system CPU seconds the calling thread has used so far, to the nanosecond (the
/// in-process simulation's cost, without `/proc`'s 10 ms ticks); `None` where the clock is
/// missing.
pub fn this_thread_seconds() -> Option<f64> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `now` is.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    (status == 0).then_some(now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9)
}

fn ticks_per_second() -> Option<f64> {
    // SAFETY: sysconf only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then_some(ticks as f64)
}

/// CPU seconds of one process over a window.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pid: u32,
    at_start: f64,
}

impl Window {
    /// Starts counting `pid`'s CPU time now; `None` if it cannot be read.
    pub fn start(pid: u32) -> Option<Self> {
        Some(Self {
            pid,
            at_start: seconds(pid)?,
        })
    }

    /// CPU seconds used since [`Window::start`].
    pub fn elapsed(&self) -> Option<f64> {
        Some(seconds(self.pid)? - self.at_start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utime_and_stime_past_a_name_with_spaces_and_parentheses() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 1 0 99";
        assert_eq!(ticks(stat), Some(12));
        assert_eq!(ticks("42 (x) S 1"), None);
    }

    #[test]
    fn this_threads_time_grows_while_it_computes() {
        let before = this_thread_seconds().expect("a thread CPU clock");
        let mut x = 0u64;
        for _ in 0..1_000_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let used = this_thread_seconds().expect("a thread CPU clock") - before;
        assert!(used > 0.0 && used < 60.0, "{used} s");
    }

    #[test]
    fn the_time_grows_while_this_process_computes() {
        let window = Window::start(std::process::id()).expect("/proc is readable");
        assert!(window.elapsed().expect("still running") < 1.0);
        // Ticks are 10 ms apart: compute until one passes (on a busy machine, may take a while).
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while window.elapsed() == Some(0.0) {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            assert!(started.elapsed().as_secs() < 60, "no CPU time counted");
        }
        assert!(window.elapsed() > Some(0.0));
    }
}
