//! Per-client order on a slot: a client's ops on one slot take effect in the order it sent them.
//!
//! A *lane* holds the ops of one client on one slot that may not enter the scheme yet. An op
//! enters at once when its client has nothing on the slot; otherwise it waits until every op of
//! that client on the slot before it has left the scheme. Different clients stay concurrent.
//!
//! Reads need not wait in a scheme that answers a read with a value no older than what it
//! answered any op submitted before it ([`crate::Scheme::reads_join_earlier_ops`]): they enter
//! beside the earlier ops, unless a write of their client waits in the lane ahead of them (the
//! read must see that write). A write always waits: a scheme answers the reads waiting on a slot
//! with a write's value, so a write beside an earlier read of its own client would answer that
//! read with a value the client wrote after it. Nothing here reaches storage: it only delays
//! when ops are handed to the scheme.

use std::collections::VecDeque;

use hashbrown::HashMap;

use super::ClientId;
use crate::element::Slot;
use crate::scheme::{Op, OpId};

/// Every client's lanes, and whether reads may join earlier ops.
pub(super) struct Lanes {
    lanes: HashMap<(ClientId, Slot), Lane>,
    reads_join: bool,
}

/// One client's ops on one slot that are in the scheme, and those waiting.
struct Lane {
    in_scheme: u32,
    /// Empty, or led by a write when reads join (a read behind it waits for it).
    waiting: VecDeque<(OpId, Op)>,
}

impl Lanes {
    /// Lanes for a scheme where reads do or do not join earlier ops.
    pub fn new(reads_join: bool) -> Self {
        Self {
            lanes: HashMap::new(),
            reads_join,
        }
    }

    /// Whether `client` has an op on `slot` in the scheme or waiting.
    pub fn busy(&self, client: ClientId, slot: Slot) -> bool {
        self.lanes.contains_key(&(client, slot))
    }

    /// An op of `client` arrives: returned if it enters the scheme now, held otherwise.
    pub fn arrive(&mut self, client: ClientId, id: OpId, op: Op) -> Option<(OpId, Op)> {
        let lane = self.lanes.entry((client, op.slot())).or_insert(Lane {
            in_scheme: 0,
            waiting: VecDeque::new(),
        });
        let joins = lane.in_scheme == 0
            || (self.reads_join && lane.waiting.is_empty() && matches!(op, Op::Read(_)));
        if joins {
            lane.in_scheme += 1;
            Some((id, op))
        } else {
            lane.waiting.push_back((id, op));
            None
        }
    }

    /// An op of `client` on `slot` left the scheme: the ops that enter now, in order (the next
    /// one once none is left in the scheme, and the reads right behind it when reads join).
    pub fn leave(&mut self, client: ClientId, slot: Slot) -> Vec<(OpId, Op)> {
        let key = (client, slot);
        let Some(lane) = self.lanes.get_mut(&key) else {
            return Vec::new();
        };
        lane.in_scheme -= 1;
        let mut entering = Vec::new();
        if lane.in_scheme == 0 {
            entering.extend(lane.waiting.pop_front());
            while self.reads_join && matches!(lane.waiting.front(), Some((_, Op::Read(_)))) {
                entering.extend(lane.waiting.pop_front());
            }
        }
        lane.in_scheme += entering.len() as u32;
        if lane.in_scheme == 0 {
            self.lanes.remove(&key);
        }
        entering
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::Record;

    const A: ClientId = 1;
    const B: ClientId = 2;

    fn read(id: u64) -> (OpId, Op) {
        (OpId(id), Op::Read(7))
    }

    fn write(id: u64) -> (OpId, Op) {
        (OpId(id), Op::Write(7, Record::empty()))
    }

    fn ids(ops: &[(OpId, Op)]) -> Vec<u64> {
        ops.iter().map(|(id, _)| id.0).collect()
    }

    fn arrive(lanes: &mut Lanes, client: ClientId, (id, op): (OpId, Op)) -> bool {
        lanes.arrive(client, id, op).is_some()
    }

    #[test]
    fn without_joining_a_clients_ops_on_a_slot_enter_one_at_a_time() {
        let mut lanes = Lanes::new(false);
        assert!(arrive(&mut lanes, A, read(1)));
        assert!(!arrive(&mut lanes, A, read(2)));
        assert!(!arrive(&mut lanes, A, write(3)));
        // Another client is not held.
        assert!(arrive(&mut lanes, B, read(4)));
        assert_eq!(ids(&lanes.leave(A, 7)), [2]);
        assert_eq!(ids(&lanes.leave(A, 7)), [3]);
        assert!(lanes.busy(A, 7));
        assert!(lanes.leave(A, 7).is_empty());
        assert!(!lanes.busy(A, 7));
        assert!(lanes.busy(B, 7));
    }

    #[test]
    fn joining_reads_enter_beside_earlier_ops_but_not_past_a_waiting_write() {
        let mut lanes = Lanes::new(true);
        assert!(arrive(&mut lanes, A, read(1)));
        assert!(
            arrive(&mut lanes, A, read(2)),
            "a read joins the read in the scheme"
        );
        assert!(
            !arrive(&mut lanes, A, write(3)),
            "a write waits for both reads"
        );
        assert!(
            !arrive(&mut lanes, A, read(4)),
            "a read waits behind the waiting write"
        );
        assert!(!arrive(&mut lanes, A, read(5)));
        assert!(!arrive(&mut lanes, A, write(6)));
        assert!(
            lanes.leave(A, 7).is_empty(),
            "read 2 is still in the scheme"
        );
        // The write enters alone once both reads left, with the reads right behind it.
        assert_eq!(ids(&lanes.leave(A, 7)), [3, 4, 5]);
        assert!(lanes.leave(A, 7).is_empty());
        assert!(lanes.leave(A, 7).is_empty());
        assert_eq!(ids(&lanes.leave(A, 7)), [6]);
        assert!(
            arrive(&mut lanes, A, read(7)),
            "a read joins the write in the scheme"
        );
        assert!(lanes.leave(A, 7).is_empty());
        assert!(lanes.leave(A, 7).is_empty());
        assert!(!lanes.busy(A, 7));
    }
}
