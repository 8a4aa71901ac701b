//! The in-flight table: storage requests a scheme has sent and not had answered, each with why
//! it was sent, and the check that an answer has the kind and shape its request calls for.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;
use cloak_core::{
    Addr, ExpectedReply, RequestId, StorageError, StorageOp, StorageReply, StorageRequest,
};
use hashbrown::HashMap;

/// Storage's answer to a request, checked against it: one value per address for a read, at most
/// the limit of entries for a scan, nothing for a write or delete; and when it arrived.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    reply: StorageReply,
    arrived: Instant,
}

impl Answer {
    /// When the answer arrived from storage: an instant the server caused, unlike the moment
    /// the scheme handles it, which comes later the busier the proxy is. What the scheme times
    /// from an answer and the server sees (the fill's next request, see
    /// `crate::shell::fill::Pace::answered`) counts from this.
    pub fn arrived(&self) -> Instant {
        self.arrived
    }

    /// The values a read brought back, one per address in the order asked (empty for any other
    /// kind of request).
    pub fn values(self) -> Vec<Option<Bytes>> {
        match self.reply {
            StorageReply::Values(values) => values,
            StorageReply::Done | StorageReply::Entries(_) => Vec::new(),
        }
    }

    /// The entries a scan listed (empty for any other kind of request).
    pub fn entries(self) -> Vec<(Addr, Bytes)> {
        match self.reply {
            StorageReply::Entries(entries) => entries,
            StorageReply::Done | StorageReply::Values(_) => Vec::new(),
        }
    }
}

/// A storage request matched with its answer.
pub struct Answered<P> {
    /// Why the request was sent.
    pub purpose: P,
    /// The request, to repeat it if it failed; `None` if it was sent not to be repeated.
    pub op: Option<StorageOp>,
    /// The checked answer, or why the request failed (a malformed answer included: a `Done`
    /// answering a read is a failure, never "nothing stored").
    pub result: Result<Answer, StorageError>,
}

/// An unanswered request: why it was sent, the answer it calls for, and the request itself if a
/// failure repeats it.
struct Unanswered<P> {
    purpose: P,
    expected: ExpectedReply,
    /// Kept only for a request that may be repeated: a copy of every request (its address list,
    /// a write's values) is an allocation per request that a pass-through scheme never uses.
    op: Option<StorageOp>,
}

/// Requests waiting for the driver and requests waiting for storage's answer.
pub struct InFlight<P> {
    next: u64,
    unanswered: HashMap<RequestId, Unanswered<P>>,
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
    /// `not_before`, at that instant, keeping a copy to repeat it if `repeatable`.
    pub fn send(
        &mut self,
        purpose: P,
        op: StorageOp,
        repeatable: bool,
        not_before: Option<Instant>,
    ) {
        let id = RequestId(self.next);
        self.next += 1;
        let unanswered = Unanswered {
            purpose,
            expected: op.expected_reply(),
            op: repeatable.then(|| op.clone()),
        };
        self.unanswered.insert(id, unanswered);
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

    /// Matches storage's answer to its request, which arrived at `arrived`; `None` for an id
    /// this scheme never sent (or already saw answered).
    pub fn answer(
        &mut self,
        id: RequestId,
        result: Result<StorageReply, StorageError>,
        arrived: Instant,
    ) -> Option<Answered<P>> {
        let Unanswered {
            purpose,
            expected,
            op,
        } = self.unanswered.remove(&id)?;
        Some(Answered {
            purpose,
            op,
            result: expected
                .check(result)
                .map(|reply| Answer { reply, arrived }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_matched_and_checked_for_kind_and_shape() {
        let arrived = Instant::now();
        let mut sent = InFlight::default();
        sent.send("read", StorageOp::Read(vec![1, 2]), true, None);
        sent.send(
            "write",
            StorageOp::Write(vec![(1, Bytes::from_static(b"x"))]),
            true,
            None,
        );
        sent.send("other read", StorageOp::Read(vec![3]), false, None);
        let (read, write, other) = (
            sent.poll().unwrap(),
            sent.poll().unwrap(),
            sent.poll().unwrap(),
        );
        assert!(sent.poll().is_none());
        let values = vec![None, Some(Bytes::from_static(b"v"))];
        let answered = sent
            .answer(read.id, Ok(StorageReply::Values(values.clone())), arrived)
            .unwrap();
        assert_eq!(answered.purpose, "read");
        let answer = answered.result.unwrap();
        assert_eq!(answer.arrived(), arrived);
        assert_eq!(answer.values(), values);
        assert!(
            sent.answer(read.id, Ok(StorageReply::Done), arrived)
                .is_none(),
            "answered once"
        );
        let answered = sent
            .answer(write.id, Ok(StorageReply::Values(Vec::new())), arrived)
            .unwrap();
        assert!(answered.result.unwrap_err().0.contains("malformed"));
        assert_eq!(answered.op, Some(write.op), "kept to repeat");
        let answered = sent
            .answer(other.id, Ok(StorageReply::Done), arrived)
            .unwrap();
        assert!(
            answered.result.is_err(),
            "a Done answering a read is a failure, not an empty value"
        );
        assert_eq!(answered.op, None, "not kept: it is never repeated");
        assert!(sent.is_empty());
    }
}
