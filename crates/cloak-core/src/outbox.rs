//! A scheme's outbox: replies to clients and journal requests, kept in step so that no reply
//! reveals a record a crash could undo.
//!
//! A scheme calls [`Outbox::keep`] for every record it holds only at the proxy (an acknowledged
//! write not yet in storage, a block it took out of storage), and [`Outbox::release`] once
//! storage holds it again. Replies that acknowledge or reveal a record go through
//! [`Outbox::answer`]: while the slot's newest kept record is not durable, the reply waits for it.
//! Other replies go out at once with [`Outbox::reply`]. Keeps made in the same step share one
//! journal request, so one fsync covers them all.

use std::collections::VecDeque;

use hashbrown::HashMap;

use crate::element::{Record, Slot};
use crate::scheme::{JournalId, JournalOp, JournalRequest, OpId, Reply, SchemeError};

/// Replies and journal requests waiting for the driver (see the module docs).
#[derive(Default)]
pub struct Outbox {
    replies: VecDeque<(OpId, Reply)>,
    next_id: u64,
    /// Keeps collected since the last poll, under the id they will be sent with.
    collecting: Option<(JournalId, Vec<(Slot, Record)>)>,
    releases: Vec<(Slot, u64)>,
    /// Slots whose newest kept record is not durable yet, and the request carrying it.
    undurable: HashMap<Slot, JournalId>,
    /// Replies held back until a request is durable.
    deferred: HashMap<JournalId, Vec<(OpId, Reply)>>,
}

impl Outbox {
    /// Sends `reply` to `op` now.
    pub fn reply(&mut self, op: OpId, reply: Reply) {
        self.replies.push_back((op, reply));
    }

    /// Sends `reply` to every op in `ops` now.
    pub fn reply_all(&mut self, ops: impl IntoIterator<Item = OpId>, reply: Reply) {
        self.replies
            .extend(ops.into_iter().map(|op| (op, reply.clone())));
    }

    /// Sends `reply` to `op` now, or once the newest kept record of `slot` is durable.
    pub fn answer(&mut self, op: OpId, slot: Slot, reply: Reply) {
        match self.undurable.get(&slot) {
            Some(id) => self.deferred.entry(*id).or_default().push((op, reply)),
            None => self.replies.push_back((op, reply)),
        }
    }

    /// Journals `record` as the newest state of `slot`; returns the journal request that will
    /// carry it (keeps made in one step share it), for schemes that must wait until it is
    /// durable before acting (see [`crate::Scheme::handle_journaled`]).
    pub fn keep(&mut self, slot: Slot, record: Record) -> JournalId {
        let id = self.barrier();
        if let Some((_, records)) = &mut self.collecting {
            records.push((slot, record));
        }
        self.undurable.insert(slot, id);
        id
    }

    /// The journal request carrying every keep made since the last poll, opening an empty one
    /// if there is none. Drivers make journal requests durable in the order they poll them, so
    /// once this one is durable (see [`crate::Scheme::handle_journaled`]) every keep made so far
    /// is too. A scheme that must not touch storage before its keeps are durable waits for this
    /// id; waiting for it even when nothing was kept makes that wait the same whatever was kept.
    pub fn barrier(&mut self) -> JournalId {
        let next_id = &mut self.next_id;
        self.collecting
            .get_or_insert_with(|| {
                *next_id += 1;
                (JournalId(*next_id), Vec::new())
            })
            .0
    }

    /// Storage holds `slot` at `version` (or newer) now.
    pub fn release(&mut self, slot: Slot, version: u64) {
        self.releases.push((slot, version));
    }

    /// The next reply to send.
    pub fn poll_reply(&mut self) -> Option<(OpId, Reply)> {
        self.replies.pop_front()
    }

    /// The next journal request, keeps made since the last poll and releases together.
    pub fn poll_journal(&mut self) -> Option<JournalRequest> {
        if let Some((id, records)) = self.collecting.take() {
            return Some(JournalRequest {
                id,
                op: JournalOp::Keep(records),
            });
        }
        if self.releases.is_empty() {
            return None;
        }
        self.next_id += 1;
        Some(JournalRequest {
            id: JournalId(self.next_id),
            op: JournalOp::Release(std::mem::take(&mut self.releases)),
        })
    }

    /// A journal request finished: release the replies it held back, or fail them.
    pub fn handle_journaled(&mut self, id: JournalId, result: Result<(), String>) {
        self.undurable.retain(|_, waiting_on| *waiting_on != id);
        for (op, reply) in self.deferred.remove(&id).unwrap_or_default() {
            let reply = match &result {
                Ok(()) => reply,
                Err(reason) => Reply::Failed(SchemeError::Durability(reason.clone())),
            };
            self.replies.push_back((op, reply));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(version: u64) -> Record {
        Record {
            version,
            key: "k".into(),
            value: "v".into(),
        }
    }

    fn drain(o: &mut Outbox) -> Vec<(OpId, Reply)> {
        std::iter::from_fn(|| o.poll_reply()).collect()
    }

    #[test]
    fn replies_wait_for_the_journal_and_fail_with_it() {
        let mut o = Outbox::default();
        o.answer(OpId(1), 7, Reply::Written);
        assert_eq!(
            drain(&mut o).len(),
            1,
            "nothing kept for slot 7: answered at once"
        );

        o.keep(7, record(1));
        o.keep(8, record(2));
        o.answer(OpId(2), 7, Reply::Written);
        o.answer(OpId(3), 8, Reply::Value(record(2)));
        assert!(drain(&mut o).is_empty());
        let request = o.poll_journal().unwrap();
        assert_eq!(
            request.op,
            JournalOp::Keep(vec![(7, record(1)), (8, record(2))])
        );
        assert!(o.poll_journal().is_none());

        o.handle_journaled(request.id, Ok(()));
        assert_eq!(drain(&mut o).len(), 2);

        o.keep(7, record(3));
        o.answer(OpId(4), 7, Reply::Written);
        let request = o.poll_journal().unwrap();
        o.handle_journaled(request.id, Err("disk full".into()));
        assert!(matches!(
            drain(&mut o)[..],
            [(OpId(4), Reply::Failed(SchemeError::Durability(_)))]
        ));

        o.release(7, 3);
        assert_eq!(
            o.poll_journal().unwrap().op,
            JournalOp::Release(vec![(7, 3)])
        );
    }

    #[test]
    fn a_barrier_rides_with_the_keeps_of_its_step_or_alone() {
        let mut o = Outbox::default();
        o.keep(1, record(1));
        let barrier = o.barrier();
        o.keep(2, record(2));
        let request = o.poll_journal().unwrap();
        assert_eq!(request.id, barrier);
        assert_eq!(
            request.op,
            JournalOp::Keep(vec![(1, record(1)), (2, record(2))])
        );
        let empty = o.barrier();
        assert_ne!(empty, barrier);
        assert_eq!(
            o.poll_journal(),
            Some(JournalRequest {
                id: empty,
                op: JournalOp::Keep(Vec::new())
            })
        );
        assert!(o.poll_journal().is_none());
    }

    #[test]
    fn a_newer_keep_keeps_the_slot_waiting() {
        let mut o = Outbox::default();
        o.keep(1, record(1));
        let first = o.poll_journal().unwrap();
        o.keep(1, record(2));
        o.answer(OpId(9), 1, Reply::Value(record(2)));
        o.handle_journaled(first.id, Ok(()));
        assert!(drain(&mut o).is_empty(), "version 2 is not durable yet");
        let second = o.poll_journal().unwrap();
        o.handle_journaled(second.id, Ok(()));
        assert_eq!(drain(&mut o).len(), 1);
    }
}
