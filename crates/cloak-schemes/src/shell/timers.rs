//! The shell's timers, in the spirit of quinn-proto's `TimerTable`: one slot per kind of timer,
//! so the next wake-up is the earliest of a fixed, small set and every timer has a name.

use std::time::Instant;

/// What a timer is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timer {
    /// Failed storage requests are repeated (see [`super::retry::Retry`]).
    StorageRetry,
    /// The algorithm's own deadline: a batch on its grid, a held write-back, a tick, a journal
    /// request to repeat.
    Algorithm,
}

impl Timer {
    const ALL: [Timer; 2] = [Timer::StorageRetry, Timer::Algorithm];

    fn index(self) -> usize {
        self as usize
    }
}

/// When each [`Timer`] fires, if it is set.
#[derive(Clone, Debug, Default)]
pub struct TimerTable {
    at: [Option<Instant>; Timer::ALL.len()],
}

impl TimerTable {
    /// Sets `timer` to fire at `at`, or stops it (`None`).
    pub fn set(&mut self, timer: Timer, at: Option<Instant>) {
        self.at[timer.index()] = at;
    }

    /// When `timer` fires, if it is set.
    pub fn get(&self, timer: Timer) -> Option<Instant> {
        self.at[timer.index()]
    }

    /// Whether `timer` is set and its time has come.
    pub fn is_expired(&self, timer: Timer, now: Instant) -> bool {
        self.get(timer).is_some_and(|at| at <= now)
    }

    /// The earliest time any timer fires.
    pub fn next(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_next_wake_is_the_earliest_set_timer() {
        let now = Instant::now();
        let mut timers = TimerTable::default();
        assert_eq!(timers.next(), None);
        timers.set(Timer::Algorithm, Some(now + Duration::from_millis(20)));
        timers.set(Timer::StorageRetry, Some(now + Duration::from_millis(10)));
        assert_eq!(timers.next(), Some(now + Duration::from_millis(10)));
        assert!(!timers.is_expired(Timer::StorageRetry, now));
        assert!(timers.is_expired(Timer::StorageRetry, now + Duration::from_millis(10)));
        timers.set(Timer::StorageRetry, None);
        assert_eq!(timers.get(Timer::StorageRetry), None);
        assert_eq!(timers.next(), Some(now + Duration::from_millis(20)));
    }
}
