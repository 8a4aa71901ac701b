//! Storage requests a scheme has sent and not had answered, each with why it was sent, and the
//! check that an answer has the shape its request calls for.

use std::collections::VecDeque;

use bytes::Bytes;
use cloak_core::{RequestId, StorageError, StorageOp, StorageReply, StorageRequest};
use hashbrown::HashMap;

/// A storage request matched with its answer.
pub struct Answered<P> {
    pub purpose: P,
    /// The request, to repeat it if it failed.
    pub op: StorageOp,
    /// The values a read brought back (empty for writes), or why the request failed, a
    /// malformed answer included.
    pub values: Result<Vec<Option<Bytes>>, StorageError>,
}

pub struct Outgoing<P> {
    next: u64,
    /// Each unanswered request's purpose and op (kept to repeat it after a failure).
    outstanding: HashMap<RequestId, (P, StorageOp)>,
    transmit: VecDeque<StorageRequest>,
}

impl<P> Default for Outgoing<P> {
    fn default() -> Self {
        Self {
            next: 0,
            outstanding: HashMap::new(),
            transmit: VecDeque::new(),
        }
    }
}

impl<P> Outgoing<P> {
    /// Queues `op` for the driver (see [`Outgoing::poll`]).
    pub fn send(&mut self, purpose: P, op: StorageOp) {
        let id = RequestId(self.next);
        self.next += 1;
        self.outstanding.insert(id, (purpose, op.clone()));
        self.transmit.push_back(StorageRequest { id, op });
    }

    /// The next request to send, for `Scheme::poll_storage`.
    pub fn poll(&mut self) -> Option<StorageRequest> {
        self.transmit.pop_front()
    }

    /// Matches storage's answer to its request; `None` for an id this scheme never sent (or
    /// already saw answered).
    pub fn answer(
        &mut self,
        id: RequestId,
        result: Result<StorageReply, StorageError>,
    ) -> Option<Answered<P>> {
        let (purpose, op) = self.outstanding.remove(&id)?;
        let values = op.expected_reply().check(result).map(|reply| match reply {
            StorageReply::Values(values) => values,
            // A write's or delete's acknowledgement (schemes using this never scan).
            StorageReply::Done | StorageReply::Entries(_) => Vec::new(),
        });
        Some(Answered {
            purpose,
            op,
            values,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_matched_and_checked_for_shape() {
        let mut out = Outgoing::default();
        out.send("read", StorageOp::Read(vec![1, 2]));
        out.send(
            "write",
            StorageOp::Write(vec![(1, Bytes::from_static(b"x"))]),
        );
        let (read, write) = (out.poll().unwrap(), out.poll().unwrap());
        assert!(out.poll().is_none());
        let values = vec![None, Some(Bytes::from_static(b"v"))];
        let answered = out
            .answer(read.id, Ok(StorageReply::Values(values.clone())))
            .unwrap();
        assert_eq!((answered.purpose, answered.values), ("read", Ok(values)));
        assert!(
            out.answer(read.id, Ok(StorageReply::Done)).is_none(),
            "answered once"
        );
        let answered = out
            .answer(write.id, Ok(StorageReply::Values(Vec::new())))
            .unwrap();
        assert!(answered.values.unwrap_err().0.contains("malformed"));
        assert_eq!(answered.op, write.op, "kept to repeat");
    }
}
