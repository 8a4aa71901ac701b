//! Keeping records the proxy alone holds in the journal, and holding back replies that depend
//! on them until they are durable.
//!
//! A scheme calls [`Durability::keep`] for every record it holds only at the proxy (an
//! acknowledged write not yet in storage, a block it took out of storage), and
//! [`Durability::release`] once storage holds it again. Replies go through
//! [`Durability::answer`]: a reply that acknowledges or reveals a record of a slot whose journal
//! request is not yet durable waits for it, so no client ever sees a write a crash could undo.
//! Keeps made in the same step share one journal request, so one fsync covers them all.

use std::collections::VecDeque;

use hashbrown::HashMap;

use cloak_core::{JournalId, JournalOp, JournalRequest, OpId, Record, Reply, SchemeError, Slot};

#[derive(Default)]
pub struct Durability {
    next_id: u64,
    /// Keeps collected since the last poll, under the id they will be sent with.
    collecting: Option<(JournalId, Vec<(Slot, Record)>)>,
    releases: Vec<(Slot, u64)>,
    /// Slots whose newest kept record is not durable yet, and the request carrying it.
    undurable: HashMap<Slot, JournalId>,
    /// Replies held back until a request is durable.
    deferred: HashMap<JournalId, Vec<(OpId, Reply)>>,
}

impl Durability {
    /// Journals `record` as the newest state of `slot`.
    pub fn keep(&mut self, slot: Slot, record: Record) {
        let next_id = &mut self.next_id;
        let (id, records) = self.collecting.get_or_insert_with(|| {
            *next_id += 1;
            (JournalId(*next_id), Vec::new())
        });
        records.push((slot, record));
        self.undurable.insert(slot, *id);
    }

    /// Storage holds `slot` at `version` (or newer) now.
    pub fn release(&mut self, slot: Slot, version: u64) {
        self.releases.push((slot, version));
    }

    /// Queues `reply` to `op` on `out` now, or once the newest kept record of `slot` is durable.
    pub fn answer(
        &mut self,
        out: &mut VecDeque<(OpId, Reply)>,
        op: OpId,
        slot: Slot,
        reply: Reply,
    ) {
        match self.undurable.get(&slot) {
            Some(id) => self.deferred.entry(*id).or_default().push((op, reply)),
            None => out.push_back((op, reply)),
        }
    }

    pub fn poll(&mut self) -> Option<JournalRequest> {
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
    pub fn handle(
        &mut self,
        id: JournalId,
        result: Result<(), String>,
        out: &mut VecDeque<(OpId, Reply)>,
    ) {
        self.undurable.retain(|_, waiting_on| *waiting_on != id);
        for (op, reply) in self.deferred.remove(&id).unwrap_or_default() {
            let reply = match &result {
                Ok(()) => reply,
                Err(reason) => Reply::Failed(SchemeError::Durability(reason.clone())),
            };
            out.push_back((op, reply));
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

    #[test]
    fn replies_wait_for_the_journal_and_fail_with_it() {
        let mut d = Durability::default();
        let mut out = VecDeque::new();
        d.answer(&mut out, OpId(1), 7, Reply::Written);
        assert_eq!(out.len(), 1, "nothing kept for slot 7: answered at once");

        d.keep(7, record(1));
        d.keep(8, record(2));
        d.answer(&mut out, OpId(2), 7, Reply::Written);
        d.answer(&mut out, OpId(3), 8, Reply::Value(record(2)));
        assert_eq!(out.len(), 1);
        let request = d.poll().unwrap();
        assert_eq!(
            request.op,
            JournalOp::Keep(vec![(7, record(1)), (8, record(2))])
        );
        assert!(d.poll().is_none());

        d.handle(request.id, Ok(()), &mut out);
        assert_eq!(out.len(), 3);

        d.keep(7, record(3));
        d.answer(&mut out, OpId(4), 7, Reply::Written);
        let request = d.poll().unwrap();
        d.handle(request.id, Err("disk full".into()), &mut out);
        assert!(matches!(
            out.back(),
            Some((OpId(4), Reply::Failed(SchemeError::Durability(_))))
        ));

        d.release(7, 3);
        assert_eq!(d.poll().unwrap().op, JournalOp::Release(vec![(7, 3)]));
    }

    #[test]
    fn a_newer_keep_keeps_the_slot_waiting() {
        let mut d = Durability::default();
        let mut out = VecDeque::new();
        d.keep(1, record(1));
        let first = d.poll().unwrap();
        d.keep(1, record(2));
        d.answer(&mut out, OpId(9), 1, Reply::Value(record(2)));
        d.handle(first.id, Ok(()), &mut out);
        assert!(out.is_empty(), "version 2 is not durable yet");
        let second = d.poll().unwrap();
        d.handle(second.id, Ok(()), &mut out);
        assert_eq!(out.len(), 1);
    }
}
