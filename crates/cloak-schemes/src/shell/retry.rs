//! Repeating storage requests after failures, with exponential backoff.

use std::time::{Duration, Instant};

use cloak_core::StorageError;

const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Requests waiting to be repeated, and whether storage is believed down.
pub struct Retry<T> {
    waiting: Vec<T>,
    at: Option<Instant>,
    backoff: Duration,
    /// The last failure, until a request succeeds again.
    failing: Option<StorageError>,
}

impl<T> Default for Retry<T> {
    fn default() -> Self {
        Self {
            waiting: Vec::new(),
            at: None,
            backoff: Duration::ZERO,
            failing: None,
        }
    }
}

impl<T> Retry<T> {
    /// Storage failed `item`; repeat it after the (growing) backoff.
    pub fn fail(&mut self, now: Instant, error: StorageError, item: T) {
        self.backoff = (self.backoff * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF);
        self.waiting.push(item);
        self.at.get_or_insert(now + self.backoff);
        self.failing = Some(error);
    }

    /// A request succeeded: storage is back.
    pub fn succeeded(&mut self) {
        self.failing = None;
        if self.waiting.is_empty() {
            self.backoff = Duration::ZERO;
        }
    }

    /// Items whose backoff has passed.
    pub fn due(&mut self, now: Instant) -> Vec<T> {
        match self.at {
            Some(at) if at <= now => {
                self.at = None;
                std::mem::take(&mut self.waiting)
            }
            _ => Vec::new(),
        }
    }

    /// When the waiting requests go out again, if any wait.
    pub fn at(&self) -> Option<Instant> {
        self.at
    }

    /// Whether requests wait to be repeated.
    pub fn is_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// How many requests wait to be repeated.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The failure storage is in, if the last request failed.
    pub fn failing(&self) -> Option<StorageError> {
        self.failing.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_resets() {
        let now = Instant::now();
        let mut r = Retry::default();
        r.fail(now, StorageError("down".into()), 1);
        assert_eq!(r.at(), Some(now + FIRST_BACKOFF));
        assert!(r.due(now).is_empty());
        assert_eq!(r.due(now + FIRST_BACKOFF), vec![1]);
        r.fail(now, StorageError("down".into()), 2);
        assert_eq!(r.at(), Some(now + 2 * FIRST_BACKOFF));
        assert!(r.failing().is_some());
        assert_eq!(r.due(now + MAX_BACKOFF), vec![2]);
        r.succeeded();
        assert!(r.failing().is_none());
        r.fail(now, StorageError("down".into()), 3);
        assert_eq!(r.at(), Some(now + FIRST_BACKOFF));
    }
}
