//! What an algorithm uses to talk to the world: storage (through the in-flight table), the
//! repeats of failed requests, the outbox of replies and journal requests, and the counters.

use std::time::Instant;

use cloak_core::{Outbox, SchemeError, SchemeStats, StorageError, StorageOp};

use super::in_flight::{Answered, InFlight};
use super::retry::Retry;
use super::{OnFailure, RequestPurpose};

/// An algorithm's connection to storage, clients and the journal; the shell drives it.
pub struct Io<P> {
    storage: InFlight<P>,
    retry: Retry<(P, StorageOp)>,
    /// Replies to clients and journal requests, for the driver.
    pub out: Outbox,
    /// The counters the algorithm keeps; the shell counts storage failures itself.
    pub stats: SchemeStats,
}

impl<P> Default for Io<P> {
    fn default() -> Self {
        Self {
            storage: InFlight::default(),
            retry: Retry::default(),
            out: Outbox::default(),
            stats: SchemeStats::default(),
        }
    }
}

impl<P: RequestPurpose> Io<P> {
    /// Sends `op` to storage; its answer comes back to the algorithm with `purpose`, and a
    /// failure repeats it or not as `purpose` says ([`RequestPurpose::on_failure`]).
    pub fn send(&mut self, purpose: P, op: StorageOp) {
        self.queue(purpose, op, None);
    }

    /// Sends `op` to storage at `at` (at once if that has passed): for requests whose time the
    /// schedule fixes, handed to the driver as soon as they are ready so that a busy driver
    /// still sends them on time.
    pub fn send_at(&mut self, at: Instant, purpose: P, op: StorageOp) {
        self.queue(purpose, op, Some(at));
    }

    fn queue(&mut self, purpose: P, op: StorageOp, not_before: Option<Instant>) {
        let repeatable = purpose.on_failure() == OnFailure::Repeat;
        self.storage.send(purpose, op, repeatable, not_before);
    }
}

impl<P> Io<P> {
    /// Storage's last request failed and none has succeeded since: the answer for a client op
    /// that needs storage now, rather than waiting as long as storage is down.
    pub fn unavailable(&self) -> Option<SchemeError> {
        self.retry.failing().map(SchemeError::StorageUnavailable)
    }

    /// Failed requests wait to be repeated: the algorithm's next step (a batch, an access) must
    /// wait for them, since storage would see it overtake them.
    pub fn repeating(&self) -> bool {
        self.retry.is_waiting()
    }

    /// How many failed requests wait to be repeated.
    pub(super) fn repeating_count(&self) -> usize {
        self.retry.waiting()
    }

    pub(super) fn poll(&mut self) -> Option<cloak_core::StorageRequest> {
        self.storage.poll()
    }

    pub(super) fn answer(
        &mut self,
        id: cloak_core::RequestId,
        result: Result<cloak_core::StorageReply, StorageError>,
        arrived: Instant,
    ) -> Option<Answered<P>> {
        self.storage.answer(id, result, arrived)
    }

    /// Repeats `op` once the (growing) backoff has passed.
    pub(super) fn repeat_later(
        &mut self,
        now: Instant,
        error: StorageError,
        purpose: P,
        op: StorageOp,
    ) {
        self.retry.fail(now, error, (purpose, op));
    }

    pub(super) fn succeeded(&mut self) {
        self.retry.succeeded();
    }

    pub(super) fn retry_at(&self) -> Option<Instant> {
        self.retry.at()
    }

    /// The failed requests whose backoff has passed, to send again.
    pub(super) fn due(&mut self, now: Instant) -> Vec<(P, StorageOp)> {
        self.retry.due(now)
    }
}
