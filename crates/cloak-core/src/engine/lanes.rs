//! Per-client order on a slot: a client's ops on one slot take effect in the order it sent them;
//! and, whichever clients sent them, no op passes a write taken before it on its slot, nor a
//! write a read taken before it; and a delete enters only once every op taken before it on its
//! slot has left the scheme.
//!
//! A *lane* holds the ops of one client on one slot that may not enter the scheme yet. An op
//! enters at once when its client has nothing on the slot; otherwise it waits until every op of
//! that client on the slot before it has left the scheme. Different clients stay concurrent,
//! except for ops still waiting in a lane. The engine records a key's type and deadline when it
//! takes a write, and answers TTL, EXISTS or TYPE from them at once. So a later write must not
//! reach the scheme (and storage) before a waiting write, or a key could hold one client's value
//! under another's deadline; a later read must not either, or it could answer a value older than
//! what such an answer already showed; and a later write must not pass a waiting read, or that
//! read could answer a value newer than what its own client's later TTL already showed.
//!
//! A delete (the write of an empty record for a key gone from the directory) waits for more: for
//! every op taken before it on the slot to leave the scheme, not only to enter it. Had it entered
//! beside them, the scheme would answer reads taken before it with its empty record; and the slot
//! comes free for another key once nothing is left on it, so nothing of the old key may still be
//! on its way. The ops taken after it wait for it like for any write, and a second delete among
//! them waits in its turn for the first and for whatever entered beside it.
//!
//! Reads need not wait in a scheme that answers a read with a value no older than what it
//! answered any op submitted before it ([`crate::Scheme::reads_join_earlier_ops`]): they enter
//! beside the earlier ops, unless a write of their client waits in the lane ahead of them (the
//! read must see that write). A write always waits: a scheme answers the reads waiting on a slot
//! with a write's value, so a write beside an earlier read of its own client would answer that
//! read with a value the client wrote after it. Nothing here reaches storage: it only delays
//! when ops are handed to the scheme.

use std::collections::{BTreeSet, VecDeque};

use hashbrown::HashMap;

use super::ClientId;
use crate::element::Slot;
use crate::scheme::{Op, OpId};

/// Every client's lanes, what is on each slot, and whether reads may join earlier ops.
pub(super) struct Lanes {
    lanes: HashMap<(ClientId, Slot), Lane>,
    /// The slots with an op in the scheme or waiting, whichever client's.
    slots: HashMap<Slot, OnSlot>,
    /// The order ops arrive in, across clients.
    arrivals: u64,
    reads_join: bool,
}

/// What is on one slot, across clients.
#[derive(Default)]
struct OnSlot {
    /// Ops in the scheme: a delete enters only when there is none.
    in_scheme: u32,
    /// The writes waiting in lanes, in the order they were taken: a write enters only from the
    /// front, and an op only once every write taken before it has.
    held_writes: VecDeque<Held>,
    /// When the reads waiting in lanes arrived: no write passes a read taken before it either,
    /// or a client's later TTL (answered at once) could show an older state than the value its
    /// earlier GET, passed by later writes, answers.
    held_reads: BTreeSet<u64>,
    /// The clients whose lane holds a read behind another client's held write: looked at again
    /// whenever a write enters.
    read_waiters: Vec<ClientId>,
}

/// A write held in its lane: whose, which, and when it arrived.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Held {
    client: ClientId,
    id: OpId,
    arrival: u64,
}

/// One client's ops on one slot that are in the scheme, and those waiting.
struct Lane {
    in_scheme: u32,
    waiting: VecDeque<Waiting>,
}

/// An op waiting in its lane.
struct Waiting {
    id: OpId,
    op: Op,
    /// When it arrived, across clients.
    arrival: u64,
    /// A delete, which enters only once nothing on its slot is in the scheme.
    is_delete: bool,
}

impl Lanes {
    /// Lanes for a scheme where reads do or do not join earlier ops.
    pub fn new(reads_join: bool) -> Self {
        Self {
            lanes: HashMap::new(),
            slots: HashMap::new(),
            arrivals: 0,
            reads_join,
        }
    }

    /// Whether `client` has an op on `slot` in the scheme or waiting.
    pub fn busy(&self, client: ClientId, slot: Slot) -> bool {
        self.lanes.contains_key(&(client, slot))
    }

    /// An op of `client` arrives: returned if it enters the scheme now, held otherwise.
    pub fn arrive(&mut self, client: ClientId, id: OpId, op: Op) -> Option<(OpId, Op)> {
        self.arrive_as(client, id, op, false)
    }

    /// A delete's write of an empty record arrives: returned if it enters the scheme now (nothing
    /// on its slot is in the scheme or waiting), held otherwise.
    pub fn arrive_delete(&mut self, client: ClientId, id: OpId, op: Op) -> Option<(OpId, Op)> {
        debug_assert!(matches!(op, Op::Write(..)));
        self.arrive_as(client, id, op, true)
    }

    fn arrive_as(
        &mut self,
        client: ClientId,
        id: OpId,
        op: Op,
        is_delete: bool,
    ) -> Option<(OpId, Op)> {
        let slot = op.slot();
        let is_write = matches!(op, Op::Write(..));
        let arrival = self.arrivals;
        self.arrivals += 1;
        let on_slot = self.slots.entry(slot).or_default();
        let lane = self.lanes.entry((client, slot)).or_insert(Lane {
            in_scheme: 0,
            waiting: VecDeque::new(),
        });
        let lane_lets_in =
            lane.waiting.is_empty() && (lane.in_scheme == 0 || (self.reads_join && !is_write));
        // Other clients' ops may hold it back: a write held before it, a read held before a
        // write, anything in the scheme before a delete.
        let writes_held = !on_slot.held_writes.is_empty();
        let held_back = writes_held
            || (is_write && !on_slot.held_reads.is_empty())
            || (is_delete && on_slot.in_scheme > 0);
        if lane_lets_in && !held_back {
            lane.in_scheme += 1;
            on_slot.in_scheme += 1;
            return Some((id, op));
        }
        lane.waiting.push_back(Waiting {
            id,
            op,
            arrival,
            is_delete,
        });
        if is_write {
            on_slot.held_writes.push_back(Held {
                client,
                id,
                arrival,
            });
        } else {
            on_slot.held_reads.insert(arrival);
            if writes_held {
                on_slot.read_waiters.push(client);
            }
        }
        None
    }

    /// An op of `client` on `slot` left the scheme: the ops that enter now, in order. From this
    /// lane, the next one once none is left in the scheme, and the reads right behind it when
    /// reads join; a delete held first once nothing is left on the slot; then, for each write
    /// among them, the other clients' ops it held back.
    pub fn leave(&mut self, client: ClientId, slot: Slot) -> Vec<(OpId, Op)> {
        let Some(lane) = self.lanes.get_mut(&(client, slot)) else {
            return Vec::new();
        };
        lane.in_scheme -= 1;
        // Listed since the op entered (a slot leaves the table only with nothing on it).
        let on_slot = self.slots.entry(slot).or_default();
        on_slot.in_scheme -= 1;
        let mut to_admit = VecDeque::from([client]);
        if on_slot.in_scheme == 0 {
            // The slot is idle: a delete at the front of the held writes may enter.
            to_admit.extend(on_slot.front_held_write());
        }
        let mut entering = Vec::new();
        while let Some(client) = to_admit.pop_front() {
            let lanes = &mut self.lanes;
            if let Some(write_entered) =
                on_slot.admit(lanes, self.reads_join, client, slot, &mut entering)
            {
                // The next held write, which the ops that entered may have held back, and when
                // a write entered, the reads it may have held back.
                to_admit.extend(on_slot.front_held_write());
                if write_entered {
                    to_admit.extend(on_slot.read_waiters.drain(..));
                }
            }
        }
        if on_slot.is_idle() {
            self.slots.remove(&slot);
        }
        entering
    }
}

impl OnSlot {
    /// Nothing in the scheme or waiting.
    fn is_idle(&self) -> bool {
        self.in_scheme == 0 && self.held_writes.is_empty() && self.held_reads.is_empty()
    }

    /// The client of the write held first.
    fn front_held_write(&self) -> Option<ClientId> {
        Some(self.held_writes.front()?.client)
    }

    /// Whether an op that arrived at `arrival` may pass the held writes: only when it arrived
    /// before all of them.
    fn no_write_held_before(&self, arrival: u64) -> bool {
        self.held_writes
            .front()
            .is_none_or(|held| held.arrival > arrival)
    }

    /// Whether a write that arrived at `arrival` may pass the held reads: only when it arrived
    /// before all of them.
    fn no_read_held_before(&self, arrival: u64) -> bool {
        self.held_reads.first().is_none_or(|&first| first > arrival)
    }

    /// Lets the ops at the front of `client`'s lane on `slot` into the scheme, if nothing holds
    /// them: its ops in the scheme, or an op taken before them still waiting elsewhere (a write
    /// for any op, a read for a write), or for a delete any op on the slot in the scheme.
    /// Returns `None` if nothing entered, else whether a write did.
    fn admit(
        &mut self,
        lanes: &mut HashMap<(ClientId, Slot), Lane>,
        reads_join: bool,
        client: ClientId,
        slot: Slot,
        entering: &mut Vec<(OpId, Op)>,
    ) -> Option<bool> {
        let key = (client, slot);
        let lane = lanes.get_mut(&key)?;
        let Some(front) = lane.waiting.front() else {
            if lane.in_scheme == 0 {
                lanes.remove(&key);
            }
            return None;
        };
        let (id, arrival, is_delete) = (front.id, front.arrival, front.is_delete);
        let is_write = matches!(front.op, Op::Write(..));
        let lane_lets_in = lane.in_scheme == 0 || (reads_join && !is_write);
        let order_lets_in = match is_write {
            true => {
                self.held_writes
                    .front()
                    .is_some_and(|held| held.client == client && held.id == id)
                    && self.no_read_held_before(arrival)
                    && !(is_delete && self.in_scheme > 0)
            }
            false => self.no_write_held_before(arrival),
        };
        if !(lane_lets_in && order_lets_in) {
            if !is_write && lane_lets_in {
                self.read_waiters.push(client);
            }
            return None;
        }
        if is_write {
            self.held_writes.pop_front();
        }
        // The front op, then, when reads join, the reads right behind it, as far as no other
        // client's write taken before them waits.
        while let Some(Waiting {
            id, op, arrival, ..
        }) = lane.waiting.pop_front()
        {
            if matches!(op, Op::Read(_)) {
                self.held_reads.remove(&arrival);
            }
            entering.push((id, op));
            lane.in_scheme += 1;
            self.in_scheme += 1;
            if !reads_join {
                break;
            }
            match lane.waiting.front() {
                Some(
                    next @ Waiting {
                        op: Op::Read(_), ..
                    },
                ) if self.no_write_held_before(next.arrival) => {}
                Some(Waiting {
                    op: Op::Read(_), ..
                }) => {
                    self.read_waiters.push(client);
                    break;
                }
                _ => break,
            }
        }
        Some(is_write)
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
        // Another client is not held by A's ops.
        assert!(arrive(&mut lanes, B, read(4)));
        assert!(!arrive(&mut lanes, A, write(3)));
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

    #[test]
    fn a_write_waits_for_another_clients_write_taken_before_it() {
        const C: ClientId = 3;
        for reads_join in [false, true] {
            let mut lanes = Lanes::new(reads_join);
            assert!(arrive(&mut lanes, A, write(1)));
            assert!(!arrive(&mut lanes, A, write(2)));
            assert!(
                !arrive(&mut lanes, B, write(3)),
                "taken after A's waiting write"
            );
            assert!(!arrive(&mut lanes, B, read(4)), "behind its client's write");
            assert!(
                !arrive(&mut lanes, C, read(5)),
                "another client's read taken after the held writes waits for them"
            );
            // A's second write goes in, B's right behind it (with B's read when reads join),
            // and C's read after both.
            let entering = ids(&lanes.leave(A, 7));
            match reads_join {
                true => assert_eq!(entering, [2, 3, 4, 5]),
                false => assert_eq!(entering, [2, 3, 5]),
            }
            let on_slot = lanes.slots.get(&7);
            assert!(on_slot.is_none_or(|s| s.held_writes.is_empty()));
            assert!(on_slot.is_none_or(|s| s.read_waiters.is_empty()));
            // Without joining, B's read still waits for B's write.
            assert_eq!(on_slot.is_none_or(|s| s.held_reads.is_empty()), reads_join);
        }
    }

    #[test]
    fn a_delete_enters_once_every_op_taken_before_it_has_left_and_a_second_one_waits_for_it() {
        const C: ClientId = 3;
        const D: ClientId = 4;
        let mut lanes = Lanes::new(false);
        let delete = |lanes: &mut Lanes, client, (id, op)| lanes.arrive_delete(client, id, op);
        assert!(arrive(&mut lanes, A, write(1)));
        assert!(arrive(&mut lanes, B, read(2)));
        assert!(
            delete(&mut lanes, C, write(3)).is_none(),
            "ops taken before it are in the scheme"
        );
        assert!(!arrive(&mut lanes, A, read(4)), "taken after the delete");
        assert!(
            lanes.leave(A, 7).is_empty(),
            "B's read is still in the scheme"
        );
        // The delete enters, and the read taken after it right behind it.
        assert_eq!(ids(&lanes.leave(B, 7)), [3, 4]);
        assert!(
            delete(&mut lanes, D, write(5)).is_none(),
            "the first delete is in the scheme"
        );
        assert!(!arrive(&mut lanes, B, write(6)), "behind the second delete");
        assert!(lanes.leave(C, 7).is_empty(), "A's read is still in");
        assert_eq!(ids(&lanes.leave(A, 7)), [5, 6]);
        assert!(lanes.leave(D, 7).is_empty());
        assert!(lanes.leave(B, 7).is_empty());
        assert!(lanes.slots.is_empty() && lanes.lanes.is_empty());
        assert!(
            delete(&mut lanes, A, write(7)).is_some(),
            "nothing on the slot: a delete enters at once"
        );
    }

    #[test]
    fn a_write_waits_for_another_clients_read_taken_before_it() {
        let mut lanes = Lanes::new(false);
        assert!(arrive(&mut lanes, A, write(1)));
        assert!(!arrive(&mut lanes, A, read(2)), "behind its client's write");
        assert!(
            !arrive(&mut lanes, B, write(3)),
            "taken after A's waiting read"
        );
        assert_eq!(ids(&lanes.leave(A, 7)), [2, 3]);
        let on_slot = lanes.slots.get(&7);
        assert!(on_slot.is_none_or(|s| s.held_writes.is_empty() && s.held_reads.is_empty()));
    }
}
