//! Reuse-distance sets, each an intrusive list of physical addresses in client-recency order.
//!
//! The set an address is in is the batch that last wrote it: a set is born from one batch and
//! shrinks as later batches take from it, so `T + 1` sets live at once and their slots in a ring
//! are reused. Each set keeps its addresses most-recently-client-touched first, so dummy
//! selection (§4.2) takes from the front, and a client touch moves an address to the front in
//! O(1). The order is built from logical information only (when clients touched a slot); which
//! physical address holds which slot is a fresh secret permutation, so to the server any such
//! choice is a uniformly random subset of the set.
//!
//! Each set also owns the queue of client ops waiting for addresses in it: the queue moves with
//! its set from distance to distance.

use std::collections::VecDeque;

const NIL: u32 = u32::MAX;

#[derive(Debug)]
pub struct Set {
    head: u32,
    tail: u32,
    len: u64,
    /// Slots with a client op waiting for this set's budget, oldest first.
    pub queue: VecDeque<u32>,
}

impl Set {
    fn empty() -> Self {
        Self {
            head: NIL,
            tail: NIL,
            len: 0,
            queue: VecDeque::new(),
        }
    }

    pub fn len(&self) -> u64 {
        self.len
    }
}

pub struct Sets {
    ring: Vec<Set>,
    prev: Vec<u32>,
    next: Vec<u32>,
}

impl Sets {
    /// Room for `addresses` addresses in `sets` live sets (plus the one being born).
    pub fn new(addresses: usize, sets: usize) -> Self {
        Self {
            ring: (0..=sets).map(|_| Set::empty()).collect(),
            prev: vec![NIL; addresses],
            next: vec![NIL; addresses],
        }
    }

    /// The ring position of the set born from batch `batch`.
    pub fn born_in(&self, batch: u64) -> usize {
        (batch % self.ring.len() as u64) as usize
    }

    pub fn get(&self, set: usize) -> &Set {
        &self.ring[set]
    }

    pub fn get_mut(&mut self, set: usize) -> &mut Set {
        &mut self.ring[set]
    }

    /// Appends `addr` as the least recent member of `set`.
    pub fn push_back(&mut self, set: usize, addr: u32) {
        let s = &mut self.ring[set];
        self.prev[addr as usize] = s.tail;
        self.next[addr as usize] = NIL;
        if s.tail == NIL {
            s.head = addr;
        } else {
            self.next[s.tail as usize] = addr;
        }
        s.tail = addr;
        s.len += 1;
    }

    pub fn unlink(&mut self, set: usize, addr: u32) {
        let (p, n) = (self.prev[addr as usize], self.next[addr as usize]);
        let s = &mut self.ring[set];
        if p == NIL {
            s.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            s.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        s.len -= 1;
    }

    /// Marks `addr` as the most recently touched member of `set`.
    pub fn move_to_front(&mut self, set: usize, addr: u32) {
        if self.ring[set].head == addr {
            return;
        }
        self.unlink(set, addr);
        self.push_front(set, addr);
    }

    /// Inserts `addr` (in no list) as the most recent member of `set`.
    fn push_front(&mut self, set: usize, addr: u32) {
        let s = &mut self.ring[set];
        self.prev[addr as usize] = NIL;
        self.next[addr as usize] = s.head;
        if s.head == NIL {
            s.tail = addr;
        } else {
            self.prev[s.head as usize] = addr;
        }
        s.head = addr;
        s.len += 1;
    }

    /// Removes and returns the most recently touched member of `set`.
    pub fn pop_front(&mut self, set: usize) -> Option<u32> {
        let head = self.ring[set].head;
        if head == NIL {
            return None;
        }
        self.unlink(set, head);
        Some(head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(sets: &mut Sets, set: usize) -> Vec<u32> {
        std::iter::from_fn(|| sets.pop_front(set)).collect()
    }

    #[test]
    fn lists_keep_recency_order() {
        let mut s = Sets::new(10, 2);
        for a in [1, 2, 3, 4] {
            s.push_back(0, a);
        }
        s.move_to_front(0, 3);
        s.unlink(0, 2);
        s.move_to_front(0, 4);
        s.move_to_front(0, 4);
        assert_eq!(s.get(0).len(), 3);
        assert_eq!(drain(&mut s, 0), vec![4, 3, 1]);
        assert_eq!(s.get(0).len(), 0);
        s.push_back(0, 7);
        s.move_to_front(0, 7);
        assert_eq!(drain(&mut s, 0), vec![7]);
        assert_eq!(s.born_in(4), 1);
    }
}
