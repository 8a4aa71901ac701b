//! Client ops inside CURIOUS: blocks in transit, and when each op may be answered.
//!
//! Every op takes effect on the slot's logical record in the order ops arrived: at once when
//! the proxy knows the record (cached, never written, lost), or, when the block is in transit,
//! in arrival order as soon as it arrives (the first op scheduled the fetch; later ones wait
//! behind it, §6.2). Each op also causes exactly one access of its own, and it is answered only
//! once both have happened: it took effect, and its own access has read its path. So an op's
//! answer never comes sooner because its block was cached or in transit, and the effect order is
//! a linearization (every effect happens between the op's arrival and its answer).
//!
//! Durability: a write is acknowledged only once its record is in the journal. A read reveals
//! a record that came from storage at once (storage keeps it until the journal holds it, see
//! `mod.rs`), but one that a client wrote only once that write is durable.

use std::collections::VecDeque;

use cloak_core::{JournalId, OpId, Record, Reply, SchemeError};
use hashbrown::HashMap;

/// A client op the scheme has not answered yet.
struct Request {
    slot: u32,
    /// The record a write writes.
    write: Option<Record>,
    /// The op's reply, once it has taken effect.
    effect: Option<Reply>,
    /// Its own access has read its path.
    path_read: bool,
    /// A write's journal request, while it is not durable; its failure once known.
    journal: Option<JournalId>,
    journal_failed: Option<String>,
}

/// How an answer goes out.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// Now.
    Now(OpId, Reply),
    /// Once the slot's newest journaled record is durable (`Outbox::answer`).
    WhenDurable(OpId, u32, Reply),
}

#[derive(Default)]
pub struct Requests {
    ops: HashMap<OpId, Request>,
    /// Ops waiting for a block in transit, in arrival order.
    transit: HashMap<u32, VecDeque<OpId>>,
    /// Writes waiting in `transit`: acknowledged or about to be, and held only here.
    transit_writes: usize,
    /// Writes per journal request.
    journal_waiters: HashMap<JournalId, Vec<OpId>>,
    /// Slots whose newest client write is not durable yet.
    undurable: HashMap<u32, JournalId>,
}

impl Requests {
    /// Takes a new op on `slot`; a write comes with the journal request keeping its record.
    pub fn add(&mut self, op: OpId, slot: u32, write: Option<(Record, JournalId)>) {
        let (write, journal) = match write {
            Some((record, id)) => {
                self.journal_waiters.entry(id).or_default().push(op);
                self.undurable.insert(slot, id);
                (Some(record), Some(id))
            }
            None => (None, None),
        };
        self.ops.insert(
            op,
            Request {
                slot,
                write,
                effect: None,
                path_read: false,
                journal,
                journal_failed: None,
            },
        );
    }

    /// Ops the scheme holds.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Writes held only at the proxy while their block is in transit.
    pub fn transit_writes(&self) -> usize {
        self.transit_writes
    }

    /// `op` waits for `slot`'s block (the first such op starts the transit).
    pub fn wait_for_block(&mut self, slot: u32, op: OpId) {
        if self.ops.get(&op).is_some_and(|r| r.write.is_some()) {
            self.transit_writes += 1;
        }
        self.transit.entry(slot).or_default().push_back(op);
    }

    /// `slot`'s block arrived holding `found` (`Err`: it could not be read): every waiting op
    /// takes effect in arrival order. Returns the slot's record afterwards (`None` if it is
    /// lost and no write replaced it) and the answers now due.
    pub fn arrive(
        &mut self,
        slot: u32,
        found: Result<Record, SchemeError>,
    ) -> (Option<Record>, Vec<Answer>) {
        let mut current = found;
        let mut answers = Vec::new();
        for op in self.transit.remove(&slot).unwrap_or_default() {
            let Some(request) = self.ops.get_mut(&op) else {
                continue; // answered already (a failure)
            };
            match &request.write {
                Some(record) => {
                    self.transit_writes -= 1;
                    current = Ok(record.clone());
                    request.effect = Some(Reply::Written);
                }
                None => {
                    request.effect = Some(match &current {
                        Ok(record) => Reply::Value(record.clone()),
                        Err(error) => Reply::Failed(error.clone()),
                    });
                }
            }
            answers.extend(self.settle(op));
        }
        (current.ok(), answers)
    }

    /// `op` took effect with `reply`.
    pub fn took_effect(&mut self, op: OpId, reply: Reply) -> Option<Answer> {
        self.ops.get_mut(&op)?.effect = Some(reply);
        self.settle(op)
    }

    /// `op`'s own access has read its path.
    pub fn path_read(&mut self, op: OpId) -> Option<Answer> {
        self.ops.get_mut(&op)?.path_read = true;
        self.settle(op)
    }

    /// Storage failed `op`'s access or the fetch it waits for: a read is answered with the
    /// failure now; a write stays (its record is kept) and is answered once storage is back.
    pub fn storage_failed(&mut self, op: OpId, error: &SchemeError) -> Option<Answer> {
        let request = self.ops.get(&op)?;
        if request.write.is_some() {
            return None;
        }
        self.ops.remove(&op);
        Some(Answer::Now(op, Reply::Failed(error.clone())))
    }

    /// Storage failed a request every access waits behind (its subORAM stays locked until it
    /// succeeds): every read not answered yet is answered with the failure now; writes stay, as
    /// in [`Self::storage_failed`]. The ops' accesses still happen when storage is back.
    pub fn fail_reads(&mut self, error: &SchemeError) -> Vec<Answer> {
        let reads: Vec<OpId> = self
            .ops
            .iter()
            .filter(|(_, r)| r.write.is_none())
            .map(|(&op, _)| op)
            .collect();
        reads
            .into_iter()
            .filter_map(|op| self.storage_failed(op, error))
            .collect()
    }

    /// A journal request is durable, or failed.
    pub fn journaled(&mut self, id: JournalId, result: &Result<(), String>) -> Vec<Answer> {
        self.undurable.retain(|_, pending| *pending != id);
        let mut answers = Vec::new();
        for op in self.journal_waiters.remove(&id).unwrap_or_default() {
            if let Some(request) = self.ops.get_mut(&op) {
                request.journal = None;
                request.journal_failed = result.clone().err();
                answers.extend(self.settle(op));
            }
        }
        answers
    }

    /// The answer of `op`, if it is due.
    fn settle(&mut self, op: OpId) -> Option<Answer> {
        let request = self.ops.get(&op)?;
        if !request.path_read || request.effect.is_none() || request.journal.is_some() {
            return None;
        }
        let request = self.ops.remove(&op).expect("looked up above");
        let slot = request.slot;
        let reply = request.effect.expect("checked above");
        Some(match (request.journal_failed, reply) {
            (Some(reason), Reply::Written) => {
                Answer::Now(op, Reply::Failed(SchemeError::Durability(reason)))
            }
            (_, reply @ Reply::Value(_)) if self.undurable.contains_key(&slot) => {
                Answer::WhenDurable(op, slot, reply)
            }
            (_, reply) => Answer::Now(op, reply),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::curious::fixtures::record;

    #[test]
    fn ops_on_a_block_in_transit_take_effect_in_arrival_order() {
        let mut r = Requests::default();
        let j = JournalId(1);
        r.add(OpId(1), 5, None); // fetches the block
        r.add(OpId(2), 5, Some((record(9), j)));
        r.add(OpId(3), 5, None);
        for op in 1..=3 {
            r.wait_for_block(5, OpId(op));
        }
        assert_eq!(r.transit_writes(), 1);
        // Their own accesses read their paths before the block arrives: nothing is due yet.
        for op in 2..=3 {
            assert!(r.path_read(OpId(op)).is_none());
        }
        let (now, answers) = r.arrive(5, Ok(record(4)));
        assert_eq!(now, Some(record(9)));
        assert_eq!(r.transit_writes(), 0);
        // The write is not durable: its ack waits; the read after it reveals it only once durable.
        assert_eq!(
            answers,
            vec![Answer::WhenDurable(OpId(3), 5, Reply::Value(record(9)))]
        );
        assert_eq!(
            r.journaled(j, &Ok(())),
            vec![Answer::Now(OpId(2), Reply::Written)]
        );
        // The fetching op is answered when its own access has read the path.
        assert_eq!(
            r.path_read(OpId(1)),
            Some(Answer::Now(OpId(1), Reply::Value(record(4))))
        );
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn failures_reach_reads_at_once_and_writes_through_the_journal() {
        let mut r = Requests::default();
        r.add(OpId(1), 5, None);
        r.add(OpId(2), 5, Some((record(9), JournalId(3))));
        r.wait_for_block(5, OpId(1));
        r.wait_for_block(5, OpId(2));
        let error = SchemeError::StorageUnavailable(cloak_core::StorageError("down".into()));
        r.add(OpId(4), 6, None);
        let failed = r.fail_reads(&error);
        assert_eq!(failed.len(), 2, "every read, in transit or not: {failed:?}");
        assert!(r.storage_failed(OpId(2), &error).is_none(), "writes wait");
        r.path_read(OpId(2));
        let (now, answers) = r.arrive(5, Err(SchemeError::Integrity("gone".into())));
        assert_eq!(now, Some(record(9)), "the write replaces the lost block");
        assert!(answers.is_empty());
        assert!(matches!(
            r.journaled(JournalId(3), &Err("disk full".into()))[..],
            [Answer::Now(
                OpId(2),
                Reply::Failed(SchemeError::Durability(_))
            )]
        ));
    }
}
