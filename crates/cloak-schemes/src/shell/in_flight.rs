//! The in-flight table: storage requests a scheme has sent and not had answered, each with why
//! it was sent, and the check that an answer has the kind and shape its request calls for.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;
use cloak_core::{Addr, RequestId, StorageError, StorageOp, StorageReply, StorageRequest};
use hashbrown::HashMap;

/// Storage's answer to a request, checked against it: one value per address for a read, at most
/// the limit of entries for a scan, nothing for a write or delete.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer(StorageReply);

impl Answer {
    /// The values a read brought back, one per address in the order asked (empty for any other
    /// kind of request).
    pub fn values(self) -> Vec<Option<Bytes>> {
        match self.0 {
            StorageReply::Values(values) => values,
            StorageReply::Done | StorageReply::Entries(_) => Vec::new(),
        }
    }

    /// The entries a scan listed (empty for any other kind of request).
    pub fn entries(self) -> Vec<(Addr, Bytes)> {
        match self.0 {
            StorageReply::Entries(entries) => entries,
            StorageReply::Done | StorageReply::Values(_) => Vec::new(),
        }
    }
}

/// A storage request matched with its answer.
pub struct Answered<P> {
    /// Why the request was sent.
    pub purpose: P,
    /// The request, to repeat it if it failed.
    pub op: StorageOp,
    /// The checked answer, or why the request failed (a malformed answer included: a `Done`
    /// answering a read is a failure, never "nothing stored").
    pub result: Result<Answer, StorageError>,
}

/// Requests waiting for the driver and requests waiting for storage's answer.
pub struct InFlight<P> {
    next: u64,
    /// Each unanswered request's purpose and op (kept to check the answer and to repeat it).
    unanswered: HashMap<RequestId, (P, StorageOp)>,
    transmit: VecDeque<StorageRequest>,
}

impl<P> Default for InFlight<P> {
    fn default() -> Self {
        Self {
            next: 0,
            unanswered: HashMap::new(),
            transmit: VecDeque::new(),
        }
    }
}

impl<P> InFlight<P> {
    /// Queues `op` for the driver (see [`InFlight::poll`]), to leave at once or, with
    /// `not_before`, at that instant.
    pub fn send(&mut self, purpose: P, op: StorageOp, not_before: Option<Instant>) {
        let id = RequestId(self.next);
        self.next += 1;
        self.unanswered.insert(id, (purpose, op.clone()));
        self.transmit
            .push_back(StorageRequest { id, op, not_before });
    }

    /// The next request to send, for `Scheme::poll_storage`.
    pub fn poll(&mut self) -> Option<StorageRequest> {
        self.transmit.pop_front()
    }

    /// Whether every request sent has been answered.
    pub fn is_empty(&self) -> bool {
        self.unanswered.is_empty()
    }

    /// Matches storage's answer to its request; `None` for an id this scheme never sent (or
    /// already saw answered).
    pub fn answer(
        &mut self,
        id: RequestId,
        result: Result<StorageReply, StorageError>,
    ) -> Option<Answered<P>> {
        let (purpose, op) = self.unanswered.remove(&id)?;
        let result = op.expected_reply().check(result).map(Answer);
        Some(Answered {
            purpose,
            op,
            result,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_matched_and_checked_for_kind_and_shape() {
        let mut sent = InFlight::default();
        sent.send("read", StorageOp::Read(vec![1, 2]), None);
        sent.send(
            "write",
            StorageOp::Write(vec![(1, Bytes::from_static(b"x"))]),
            None,
        );
        sent.send("other read", StorageOp::Read(vec![3]), None);
        let (read, write, other) = (
            sent.poll().unwrap(),
            sent.poll().unwrap(),
            sent.poll().unwrap(),
        );
        assert!(sent.poll().is_none());
        let values = vec![None, Some(Bytes::from_static(b"v"))];
        let answered = sent
            .answer(read.id, Ok(StorageReply::Values(values.clone())))
            .unwrap();
        assert_eq!(answered.purpose, "read");
        assert_eq!(answered.result.unwrap().values(), values);
        assert!(
            sent.answer(read.id, Ok(StorageReply::Done)).is_none(),
            "answered once"
        );
        let answered = sent
            .answer(write.id, Ok(StorageReply::Values(Vec::new())))
            .unwrap();
        assert!(answered.result.unwrap_err().0.contains("malformed"));
        assert_eq!(answered.op, write.op, "kept to repeat");
        let answered = sent.answer(other.id, Ok(StorageReply::Done)).unwrap();
        assert!(
            answered.result.is_err(),
            "a Done answering a read is a failure, not an empty value"
        );
        assert!(sent.is_empty());
    }
}
