//! When a batch goes out and when its write-back follows, for the schemes that batch on a timer
//! (Cloak, Waffle with fixed timing): batch starts on a fixed grid and each write-back released
//! a fixed time after its batch's grid point. The storage server sees both times; this makes
//! them depend on neither the load nor how many slots of a batch were real.
//!
//! *Batch starts.* Batch `k` is due at `first + k·Δ`, where `first` is when storage was filled.
//! A batch starts when it is due, unless the previous batch is still unfinished then (its
//! write-back unanswered, or a failed request waiting to be repeated): that grid point is skipped
//! and counted in [`SchemeStats::missed_batches`], and the next batch waits for the next grid
//! point. Starting it late instead would put it off the grid by however late the previous batch
//! was, which is how load used to stretch the interval. A driver that wakes late (a busy host)
//! starts the batch late but keeps the grid: the batch after it is due on the grid again.
//!
//! *Write-back.* The read's answer is opened and every element re-sealed as soon as it arrives,
//! and the sealed write-back is held until `start + hold`, where `start` is when the batch's read
//! really left (its grid point, or later when the driver woke late). Counting from the grid point
//! instead would show a late wake-up twice: once in the batch interval and again as a shorter
//! gap before the write-back (measured on Redis: gap medians 10.1 ms idle, 8.9 ms under load).
//! The server sees the hold as the
//! time from a batch read to its write-back, whatever the batch carried and whatever the proxy
//! was doing. If the answer arrives and is sealed only after that instant (an overrun: storage
//! answered slowly, or the proxy's CPU was busy), the write-back leaves as soon as it is sealed.
//! Its time then shows the server how late the proxy was, and that lateness can grow with the
//! load, so for that batch the gap leaks something about the load; overruns are counted in
//! [`SchemeStats::late_write_backs`], and an operator who sees them raises the hold or the
//! interval. What the server learns is bounded by how many batches overran, which the operator
//! can watch.
//!
//! Why what remains is public: the grid (`first` and `Δ`) and the hold are fixed before any
//! client request arrives and do not change with the requests; skips and overruns happen when
//! storage or the host is slow, which the server sees (or causes) anyway, except for the
//! proxy-side slowness the counters expose.
//!
//! [`SchemeStats::missed_batches`]: cloak_core::SchemeStats::missed_batches
//! [`SchemeStats::late_write_backs`]: cloak_core::SchemeStats::late_write_backs

use std::time::{Duration, Instant};

/// The default point of a batch's interval at which its write-back leaves: half way, leaving
/// the first half for the read and re-encryption and the second for the write.
pub const DEFAULT_WRITE_BACK_AT: f64 = 0.5;

/// The hold for a write-back released at `fraction` of `interval` after its batch's grid point.
/// The fraction must be below 1: the write-back must finish before the next batch is due.
pub fn write_back_hold(interval: Duration, fraction: f64) -> Result<Duration, String> {
    if !(0.0..1.0).contains(&fraction) {
        return Err(format!(
            "the write-back point must be at least 0 and below 1 (a fraction of the batch \
             interval; the default is {DEFAULT_WRITE_BACK_AT}), got {fraction}"
        ));
    }
    Ok(interval.mul_f64(fraction))
}

/// The batch grid and the write-back held for its release time.
pub struct Schedule<T> {
    interval: Duration,
    /// From a batch's grid point to its write-back's release; `None` releases a write-back as soon
    /// as it is sealed (Waffle's eager timing, whose timing is not meant to hide the load).
    hold: Option<Duration>,
    /// The next grid point; `None` until the schedule starts.
    next: Option<Instant>,
    /// A sealed write-back and when it leaves.
    held: Option<(Instant, T)>,
    missed: u64,
    late: u64,
}

impl<T> Schedule<T> {
    /// A schedule with batches `interval` apart and write-backs held `hold` after their batch's
    /// start (`None`: released as soon as sealed); the first grid point comes with
    /// [`Schedule::start`].
    pub fn new(interval: Duration, hold: Option<Duration>) -> Self {
        debug_assert!(!interval.is_zero());
        debug_assert!(hold.is_none_or(|h| h < interval));
        Self {
            interval,
            hold,
            next: None,
            held: None,
            missed: 0,
            late: 0,
        }
    }

    /// Puts the first grid point at `now` (storage is ready); later calls change nothing.
    pub fn start(&mut self, now: Instant) {
        self.next.get_or_insert(now);
    }

    /// Whether the grid has started.
    pub fn started(&self) -> bool {
        self.next.is_some()
    }

    /// The grid point of the batch to start now, if one is due; `busy`: the previous batch is
    /// unfinished, so every grid point that has passed is skipped. Either way the grid moves on
    /// past `now`.
    pub fn due(&mut self, now: Instant, busy: bool) -> Option<Instant> {
        let next = self.next?;
        if now < next {
            return None;
        }
        let passed = ((now - next).as_nanos() / self.interval.as_nanos()) as u32;
        let latest = next + self.interval * passed;
        self.next = Some(latest + self.interval);
        let skipped = u64::from(passed) + u64::from(busy);
        self.missed += skipped;
        (!busy).then_some(latest)
    }

    /// Moves the grid so the next batch is due one interval after `now`, and returns `now` as
    /// the grid point of a batch started now (Waffle's eager timing, when `R` requests wait).
    pub fn restart(&mut self, now: Instant) -> Instant {
        self.next = Some(now + self.interval);
        now
    }

    /// The write-back of the batch whose read left at `started` is sealed: returns it to send now if its
    /// release time has come (late if it has passed), or holds it for [`Schedule::release`].
    pub fn hold(&mut self, now: Instant, started: Instant, write_back: T) -> Option<T> {
        let Some(hold) = self.hold else {
            return Some(write_back);
        };
        let at = started + hold;
        if now < at {
            debug_assert!(self.held.is_none(), "one batch at a time");
            self.held = Some((at, write_back));
            return None;
        }
        if now > at {
            self.late += 1;
        }
        Some(write_back)
    }

    /// The held write-back, once its release time has come.
    pub fn release(&mut self, now: Instant) -> Option<T> {
        match self.held {
            Some((at, _)) if at <= now => self.held.take().map(|(_, write_back)| write_back),
            _ => None,
        }
    }

    /// When the schedule next needs the scheme woken: a held write-back's release, else the next
    /// grid point (also while a batch is unfinished, so that a skipped grid point is noticed).
    pub fn next_wake(&self) -> Option<Instant> {
        match &self.held {
            Some((at, _)) => Some(*at),
            None => self.next,
        }
    }

    /// Grid points skipped because the previous batch was unfinished or the driver woke more than
    /// an interval late.
    pub fn missed(&self) -> u64 {
        self.missed
    }

    /// Write-backs sealed after their release time, which left late.
    pub fn late(&self) -> u64 {
        self.late
    }

    /// The time between grid points.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// From a batch's start to its write-back leaving, if held.
    pub fn hold_time(&self) -> Option<Duration> {
        self.hold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DELTA: Duration = Duration::from_millis(20);

    #[test]
    fn batches_stay_on_the_grid_and_skip_what_they_miss() {
        let t0 = Instant::now();
        let mut s: Schedule<()> = Schedule::new(DELTA, Some(DELTA / 2));
        assert_eq!(s.due(t0, false), None, "not started");
        s.start(t0);
        assert_eq!(s.due(t0, false), Some(t0));
        assert_eq!(s.due(t0 + DELTA / 2, false), None);
        // Woken 3 ms late: the batch starts late, the grid does not move.
        let late = t0 + DELTA + Duration::from_millis(3);
        assert_eq!(s.due(late, false), Some(t0 + DELTA));
        assert_eq!(s.next_wake(), Some(t0 + 2 * DELTA));
        // The previous batch is unfinished at the grid point: skipped, not run when it finishes.
        assert_eq!(s.due(t0 + 2 * DELTA, true), None);
        assert_eq!(
            s.due(t0 + 2 * DELTA + Duration::from_millis(4), false),
            None
        );
        assert_eq!(s.missed(), 1);
        // Woken two and a half intervals late: the latest grid point runs, the others are missed.
        let very_late = t0 + 5 * DELTA + DELTA / 2;
        assert_eq!(s.due(very_late, false), Some(t0 + 5 * DELTA));
        assert_eq!(s.missed(), 3);
        assert_eq!(s.next_wake(), Some(t0 + 6 * DELTA));
    }

    #[test]
    fn a_write_back_leaves_at_its_release_time_or_late_and_counted() {
        let t0 = Instant::now();
        let mut s = Schedule::new(DELTA, Some(DELTA / 2));
        s.start(t0);
        let grid = s.due(t0, false).unwrap();
        assert_eq!(s.hold(t0 + Duration::from_millis(2), grid, "wb"), None);
        assert_eq!(s.next_wake(), Some(t0 + DELTA / 2));
        assert_eq!(s.release(t0 + DELTA / 2 - Duration::from_micros(1)), None);
        assert_eq!(s.release(t0 + DELTA / 2), Some("wb"));
        assert_eq!(s.late(), 0);

        let grid = s.due(t0 + DELTA, false).unwrap();
        assert_eq!(s.hold(grid + DELTA / 2, grid, "on time"), Some("on time"));
        assert_eq!(s.late(), 0);
        let grid = s.due(t0 + 2 * DELTA, false).unwrap();
        let overrun = grid + DELTA / 2 + Duration::from_micros(1);
        assert_eq!(s.hold(overrun, grid, "late"), Some("late"));
        assert_eq!(s.late(), 1);
    }

    #[test]
    fn without_a_hold_a_write_back_leaves_at_once_and_eager_batches_move_the_grid() {
        let t0 = Instant::now();
        let mut s = Schedule::new(DELTA, None);
        s.start(t0);
        assert_eq!(s.hold(t0 + DELTA, t0, 7), Some(7));
        assert_eq!(s.late(), 0);
        let now = t0 + Duration::from_millis(3);
        assert_eq!(s.restart(now), now);
        assert_eq!(s.next_wake(), Some(now + DELTA));
    }

    #[test]
    fn the_write_back_point_is_a_fraction_below_one() {
        assert_eq!(write_back_hold(DELTA, 0.5), Ok(DELTA / 2));
        assert_eq!(write_back_hold(DELTA, 0.0), Ok(Duration::ZERO));
        assert!(write_back_hold(DELTA, 1.0).is_err());
        assert!(write_back_hold(DELTA, -0.1).is_err());
        assert!(write_back_hold(DELTA, f64::NAN).is_err());
    }
}
