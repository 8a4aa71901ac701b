//! A Fenwick (binary indexed) tree of 0/1 marks: mark, unmark, and find the k-th mark, each in
//! O(log n).

pub struct Fenwick {
    tree: Vec<u32>,
    /// Largest power of two not above the size, for the descent in `kth`.
    top: usize,
}

impl Fenwick {
    /// Positions `1..=size`, none marked.
    pub fn new(size: usize) -> Self {
        Self {
            tree: vec![0; size + 1],
            top: if size == 0 { 0 } else { 1 << size.ilog2() },
        }
    }

    pub fn size(&self) -> usize {
        self.tree.len() - 1
    }

    fn add(&mut self, mut at: usize, delta: i32) {
        while at < self.tree.len() {
            self.tree[at] = self.tree[at].wrapping_add_signed(delta);
            at += at & at.wrapping_neg();
        }
    }

    pub fn mark(&mut self, at: usize) {
        self.add(at, 1);
    }

    pub fn unmark(&mut self, at: usize) {
        self.add(at, -1);
    }

    /// The position of the `k`-th mark from the left (`k` from 1); `None` if there are fewer.
    pub fn kth(&self, mut k: u32) -> Option<usize> {
        let mut at = 0;
        let mut step = self.top;
        while step > 0 {
            let next = at + step;
            if next < self.tree.len() && self.tree[next] < k {
                at = next;
                k -= self.tree[next];
            }
            step >>= 1;
        }
        (at < self.size() && k > 0).then_some(at + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_marks_by_rank() {
        let mut f = Fenwick::new(10);
        for at in [2, 3, 7, 10] {
            f.mark(at);
        }
        assert_eq!(
            (1..=5).map(|k| f.kth(k)).collect::<Vec<_>>(),
            [Some(2), Some(3), Some(7), Some(10), None]
        );
        f.unmark(3);
        assert_eq!(f.kth(2), Some(7));
    }
}
