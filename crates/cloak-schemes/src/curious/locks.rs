//! One lock per subORAM (§6.2): an access holds its subORAM from its path read until its
//! write-back is in storage, so two accesses to one subORAM run one after the other (the later
//! one reads what the earlier wrote) while accesses to different subORAMs run in parallel.
//! Waiting accesses start in arrival order.
//!
//! Whether two requests wait for each other depends only on their subORAMs, which are uniformly
//! random and independent of the requests, so the waiting reveals nothing about them.

use std::collections::VecDeque;

use hashbrown::HashMap;

pub type AccessId = u64;

pub struct SubLocks {
    held: Vec<bool>,
    waiting: HashMap<u32, VecDeque<AccessId>>,
}

impl SubLocks {
    pub fn new(partitions: u32) -> Self {
        Self {
            held: vec![false; partitions as usize],
            waiting: HashMap::new(),
        }
    }

    /// Queues `access` for `sub`.
    pub fn enqueue(&mut self, sub: u32, access: AccessId) {
        self.waiting.entry(sub).or_default().push_back(access);
    }

    /// Takes `sub`'s lock for its next waiting access, if it is free and one waits.
    pub fn acquire(&mut self, sub: u32) -> Option<AccessId> {
        if self.held[sub as usize] {
            return None;
        }
        let queue = self.waiting.get_mut(&sub)?;
        let next = queue.pop_front();
        if queue.is_empty() {
            self.waiting.remove(&sub);
        }
        if next.is_some() {
            self.held[sub as usize] = true;
        }
        next
    }

    pub fn release(&mut self, sub: u32) {
        self.held[sub as usize] = false;
    }

    /// SubORAMs with accesses waiting (after the store is filled, to start them all).
    pub fn waiting_subs(&self) -> Vec<u32> {
        self.waiting.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_access_per_subtree_at_a_time_in_arrival_order() {
        let mut locks = SubLocks::new(2);
        locks.enqueue(0, 1);
        locks.enqueue(0, 2);
        locks.enqueue(1, 3);
        assert_eq!(locks.acquire(0), Some(1));
        assert_eq!(locks.acquire(0), None, "held");
        assert_eq!(locks.acquire(1), Some(3), "other subORAMs run in parallel");
        locks.release(0);
        assert_eq!(locks.acquire(0), Some(2));
        locks.release(0);
        assert_eq!(locks.acquire(0), None, "nothing waits");
        assert!(locks.waiting_subs().is_empty());
    }
}
