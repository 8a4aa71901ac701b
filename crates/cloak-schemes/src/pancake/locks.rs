//! Which formed batches may go to storage. One access per label is at storage at a time (a
//! batch reads its labels, then writes them back), and batches take each label in the order
//! they were formed. Every label keeps a queue of the batches that name it, the one at the
//! front holding it; a batch goes once it is at the front of all its labels' queues.
//!
//! Forming and finishing a batch cost O(B): nothing rescans the batches still waiting, however
//! many pile up behind a hot label.

use std::collections::VecDeque;

use hashbrown::HashMap;

#[derive(Default)]
pub struct Locks {
    queues: HashMap<u32, VecDeque<u64>>,
    /// Batches waiting to go, and how many of their labels they wait for.
    waiting: HashMap<u64, usize>,
}

impl Locks {
    /// `batch` names `labels` (repeats allowed); whether it may go now.
    pub fn enqueue(&mut self, batch: u64, labels: &[u32]) -> bool {
        let mut behind = 0;
        for label in distinct(labels) {
            let queue = self.queues.entry(label).or_default();
            if !queue.is_empty() {
                behind += 1;
            }
            queue.push_back(batch);
        }
        if behind > 0 {
            self.waiting.insert(batch, behind);
        }
        behind == 0
    }

    /// `batch`, which held `labels`, is done with them: the batches that may go now, oldest
    /// first.
    pub fn release(&mut self, batch: u64, labels: &[u32]) -> Vec<u64> {
        let mut ready = Vec::new();
        for label in distinct(labels) {
            let Some(queue) = self.queues.get_mut(&label) else {
                continue;
            };
            debug_assert_eq!(queue.front(), Some(&batch), "only the holder releases");
            queue.pop_front();
            match queue.front() {
                Some(&next) => {
                    let left = self.waiting.get_mut(&next).expect("queued batches wait");
                    *left -= 1;
                    if *left == 0 {
                        self.waiting.remove(&next);
                        ready.push(next);
                    }
                }
                None => {
                    self.queues.remove(&label);
                }
            }
        }
        ready.sort_unstable();
        ready
    }

    /// Batches formed and waiting for a label.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

fn distinct(labels: &[u32]) -> Vec<u32> {
    let mut labels = labels.to_vec();
    labels.sort_unstable();
    labels.dedup();
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_take_labels_in_the_order_they_were_formed() {
        let mut locks = Locks::default();
        assert!(locks.enqueue(1, &[10, 11, 10]));
        assert!(!locks.enqueue(2, &[11, 12]));
        assert!(!locks.enqueue(3, &[12, 13]), "behind 2, which waits for 12");
        assert!(locks.enqueue(4, &[14]));
        assert_eq!(locks.waiting(), 2);
        assert_eq!(locks.release(4, &[14]), Vec::<u64>::new());
        assert_eq!(locks.release(1, &[10, 11, 10]), [2]);
        assert_eq!(locks.release(2, &[11, 12]), [3]);
        assert_eq!(locks.release(3, &[12, 13]), Vec::<u64>::new());
        assert_eq!(locks.waiting(), 0);
        assert!(locks.queues.is_empty());
    }
}
