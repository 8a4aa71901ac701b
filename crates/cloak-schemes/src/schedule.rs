//! When a batch goes out and when its write-back follows, for the schemes that batch on a timer
//! (Cloak, Waffle with fixed timing): batch starts on a fixed grid and each write-back released
//! a fixed time after its batch's grid point. The storage server sees both times; this makes
//! them depend on neither the load nor how many slots of a batch were real.
//!
//! *Batch starts.* Batch `k` is due at `first + k·Δ`, where `first` is when storage was filled.
//! The scheme builds the batch's read a short lead before its grid point (a tenth of the
//! interval, [`READ_LEAD`]) and hands it to the driver with the grid point as the instant it
//! leaves (`StorageRequest::not_before`): a driver busy with clients when the grid point comes
//! still sends it on time, from a timer of its own. A batch is skipped when the previous one is
//! still unfinished at its grid point (its write-back unanswered, or a failed request waiting to
//! be repeated; Cloak lets one write-back land while the next read is out, see its
//! `write_backs`); the skip is counted in [`SchemeStats::missed_batches`], and the next batch waits
//! for the next grid point. Starting it late instead would put it off the grid by however late
//! the previous batch was, which is how load used to stretch the interval. A driver that wakes
//! after a grid point (a busy host) starts that batch late but keeps the grid: the batch after it
//! is due on the grid again. Requests that arrive during the lead wait for the next batch, as
//! any request arriving after a batch's read has left does.
//!
//! *Write-back.* The read's answer is opened and every element re-sealed as soon as it arrives,
//! and the sealed write-back is handed to the driver at once, to leave at `start + hold`, where
//! `start` is when the batch's read left (its grid point, or later when the driver woke late).
//! Counting from the grid point instead would show a late wake-up twice: once in the batch
//! interval and again as a shorter gap before the write-back (measured on Redis: gap medians
//! 10.1 ms idle, 8.9 ms under load). The server sees the hold as the time from a batch read to
//! its write-back, whatever the batch carried and whatever the proxy was doing. If the answer
//! arrives and is sealed only after that instant (an overrun: storage answered slowly, or the
//! proxy's CPU was busy), the write-back leaves as soon as it is sealed. Its time then shows the
//! server how late the proxy was, and that lateness can grow with the load, so for that batch
//! the gap leaks something about the load; overruns are counted in
//! [`SchemeStats::late_write_backs`], and an operator who sees them raises the hold or the
//! interval. What the server learns is bounded by how many batches overran, which the operator
//! can watch.
//!
//! Why what remains is public: the grid (`first` and `Δ`), the lead and the hold are fixed
//! before any client request arrives and do not change with the requests; skips and overruns
//! happen when storage or the host is slow, which the server sees (or causes) anyway, except for
//! the proxy-side slowness the counters expose.
//!
//! [`SchemeStats::missed_batches`]: cloak_core::SchemeStats::missed_batches
//! [`SchemeStats::late_write_backs`]: cloak_core::SchemeStats::late_write_backs

use std::time::{Duration, Instant};

/// The default point of a batch's interval at which its write-back leaves: half way, leaving
/// the first half for the read and re-encryption and the second for the write.
pub const DEFAULT_WRITE_BACK_AT: f64 = 0.5;

/// How long before its grid point a batch's read is built and handed to the driver, as a share
/// of the batch interval. It must cover how late a busy driver wakes for a deadline: on 2 cores
/// under a load that keeps both busy, about a millisecond at the 99th percentile (batch
/// intervals of 20 ms measured 19.1–20.9 ms at p10–p90, 23.4 ms at p99); a tenth of the default
/// 20 ms is 2 ms. It costs the requests that arrive in it one more batch of waiting.
pub const READ_LEAD: f64 = 0.1;

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

/// The batch grid, and when each write-back leaves.
pub struct Schedule {
    interval: Duration,
    /// How long before a grid point its batch is built (see [`READ_LEAD`]).
    lead: Duration,
    /// From a batch's start to its write-back's release; `None` releases a write-back as soon as
    /// it is sealed (Waffle's eager timing, whose timing is not meant to hide the load).
    hold: Option<Duration>,
    /// The next grid point; `None` until the schedule starts.
    next: Option<Instant>,
    /// The lead before `next` found the previous batch unfinished: the scheme next wakes at the
    /// grid point itself, to skip it if the batch is still unfinished then.
    waiting_out_lead: bool,
    missed: u64,
    late: u64,
}

impl Schedule {
    /// A schedule with batches `interval` apart and write-backs held `hold` after their batch's
    /// start (`None`: released as soon as sealed); the first grid point comes with
    /// [`Schedule::start`].
    pub fn new(interval: Duration, hold: Option<Duration>) -> Self {
        debug_assert!(!interval.is_zero());
        debug_assert!(hold.is_none_or(|h| h < interval));
        Self {
            interval,
            lead: interval.mul_f64(READ_LEAD),
            hold,
            next: None,
            waiting_out_lead: false,
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

    /// If a batch is to be built now, the instant its read leaves: its grid point, or `now` if
    /// that has passed. `busy`: the previous batch is unfinished; a grid point that passes while
    /// it is, is skipped (and so is every grid point that passed unseen).
    pub fn due(&mut self, now: Instant, busy: bool) -> Option<Instant> {
        let next = self.next?;
        if now + self.lead < next {
            return None;
        }
        if now < next {
            // In the lead: build it now if the previous batch is done, else wait for the grid
            // point (the previous batch may still finish before it).
            self.waiting_out_lead = busy;
            if busy {
                return None;
            }
            self.advance(next + self.interval, 0);
            return Some(next);
        }
        let passed = ((now - next).as_nanos() / self.interval.as_nanos()) as u32;
        let latest = next + self.interval * passed;
        self.advance(latest + self.interval, u64::from(passed) + u64::from(busy));
        (!busy).then_some(now)
    }

    fn advance(&mut self, next: Instant, skipped: u64) {
        self.next = Some(next);
        self.waiting_out_lead = false;
        self.missed += skipped;
    }

    /// Moves the grid so the next batch is due one interval after `now`, and returns `now` as
    /// the instant a batch started now leaves (Waffle's eager timing, when `R` requests wait).
    pub fn restart(&mut self, now: Instant) -> Instant {
        self.advance(now + self.interval, 0);
        now
    }

    /// The write-back of the batch whose read left at `started` is sealed: the instant it leaves,
    /// `started` plus the hold, or `now` if that has passed (late, and counted).
    pub fn release_time(&mut self, now: Instant, started: Instant) -> Instant {
        let Some(hold) = self.hold else {
            return now;
        };
        let at = started + hold;
        if now > at {
            self.late += 1;
            return now;
        }
        at
    }

    /// When the schedule next needs the scheme woken: the start of the next batch's lead, or
    /// its grid point while the lead waits for the previous batch (also while a batch is
    /// unfinished, so that a skipped grid point is noticed).
    pub fn next_wake(&self) -> Option<Instant> {
        let next = self.next?;
        Some(if self.waiting_out_lead {
            next
        } else {
            next.checked_sub(self.lead).unwrap_or(next)
        })
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
    fn batches_are_built_a_lead_early_stay_on_the_grid_and_skip_what_they_miss() {
        let t0 = Instant::now();
        let lead = DELTA.mul_f64(READ_LEAD);
        let ms = Duration::from_millis;
        let mut s = Schedule::new(DELTA, Some(DELTA / 2));
        assert_eq!(s.due(t0, false), None, "not started");
        s.start(t0);
        assert_eq!(s.due(t0, false), Some(t0));
        assert_eq!(s.due(t0 + DELTA / 2, false), None);
        assert_eq!(s.next_wake(), Some(t0 + DELTA - lead));
        // Built in the lead, it leaves at its grid point.
        assert_eq!(s.due(t0 + DELTA - lead, false), Some(t0 + DELTA));
        // Woken 3 ms late: the batch leaves late, the grid does not move.
        let late = t0 + 2 * DELTA + ms(3);
        assert_eq!(s.due(late, false), Some(late));
        assert_eq!(s.next_wake(), Some(t0 + 3 * DELTA - lead));
        // The previous batch is unfinished in the lead and still at the grid point: skipped.
        assert_eq!(s.due(t0 + 3 * DELTA - lead, true), None);
        assert_eq!(
            s.next_wake(),
            Some(t0 + 3 * DELTA),
            "waits for the grid point"
        );
        assert_eq!(s.due(t0 + 3 * DELTA, true), None);
        assert_eq!(s.missed(), 1);
        assert_eq!(s.due(t0 + 3 * DELTA + ms(4), false), None, "not run late");
        // Unfinished when the lead starts, finished before the grid point: on time.
        assert_eq!(s.due(t0 + 4 * DELTA - lead, true), None);
        assert_eq!(
            s.due(t0 + 4 * DELTA - lead / 2, false),
            Some(t0 + 4 * DELTA)
        );
        assert_eq!(s.missed(), 1);
        // Woken two and a half intervals late: the latest grid point runs, the others are missed.
        let very_late = t0 + 7 * DELTA + DELTA / 2;
        assert_eq!(s.due(very_late, false), Some(very_late));
        assert_eq!(s.missed(), 3);
        assert_eq!(s.next_wake(), Some(t0 + 8 * DELTA - lead));
    }

    #[test]
    fn a_write_back_leaves_at_its_release_time_or_late_and_counted() {
        let t0 = Instant::now();
        let mut s = Schedule::new(DELTA, Some(DELTA / 2));
        s.start(t0);
        let started = s.due(t0, false).unwrap();
        let sealed = t0 + Duration::from_millis(2);
        assert_eq!(s.release_time(sealed, started), t0 + DELTA / 2);
        assert_eq!(s.release_time(t0 + DELTA / 2, started), t0 + DELTA / 2);
        assert_eq!(s.late(), 0);
        let overrun = t0 + DELTA / 2 + Duration::from_micros(1);
        assert_eq!(s.release_time(overrun, started), overrun);
        assert_eq!(s.late(), 1);
    }

    #[test]
    fn without_a_hold_a_write_back_leaves_at_once_and_eager_batches_move_the_grid() {
        let t0 = Instant::now();
        let mut s = Schedule::new(DELTA, None);
        s.start(t0);
        assert_eq!(s.release_time(t0 + DELTA, t0), t0 + DELTA);
        assert_eq!(s.late(), 0);
        let now = t0 + Duration::from_millis(3);
        assert_eq!(s.restart(now), now);
        assert_eq!(s.next_wake(), Some(now + DELTA - DELTA.mul_f64(READ_LEAD)));
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
