//! Whether a store's storage answers: what its core saw of its last requests.
//!
//! The core records each storage answer here, so that a cluster proxy can say which of its
//! partitions is failing and why (`CLUSTER INFO`, `-CLUSTERDOWN`, `cloak cluster status`) without
//! asking the core. It only watches the traffic the scheme sends anyway (Cloak's batches go out
//! on their schedule whether or not clients are busy, and a failed request is repeated on a
//! backoff): nothing here sends anything to storage.

use std::sync::Mutex;
use std::time::SystemTime;

/// Storage is failing: since when, and its latest error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The first failure since storage last answered.
    pub since: SystemTime,
    pub why: String,
}

impl Failure {
    /// `since <RFC 3339 time>: why`, for error lines and `cloak cluster status`.
    pub fn describe(&self) -> String {
        format!(
            "since {}: {}",
            humantime::format_rfc3339_seconds(self.since),
            self.why
        )
    }
}

/// A store's storage health, shared by its core (which writes it) and the front end.
#[derive(Debug, Default)]
pub struct StorageHealth(Mutex<Option<Failure>>);

impl StorageHealth {
    /// The failure storage is in, if its last request failed and none has succeeded since.
    pub fn failing(&self) -> Option<Failure> {
        self.lock().clone()
    }

    /// A storage request failed with `why`.
    pub(crate) fn failed(&self, why: String) {
        let mut failing = self.lock();
        let since = failing.as_ref().map_or_else(SystemTime::now, |f| f.since);
        *failing = Some(Failure { since, why });
    }

    /// A storage request succeeded: storage is back.
    pub(crate) fn answered(&self) {
        *self.lock() = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Failure>> {
        // The value is replaced whole under the lock, so a panic elsewhere leaves it consistent.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_keeps_its_start_until_storage_answers() {
        let health = StorageHealth::default();
        assert_eq!(health.failing(), None);
        health.failed("connection refused".into());
        let first = health.failing().expect("failing");
        health.failed("timed out".into());
        let second = health.failing().expect("still failing");
        assert_eq!(second.since, first.since);
        assert_eq!(second.why, "timed out");
        health.answered();
        assert_eq!(health.failing(), None);
    }
}
