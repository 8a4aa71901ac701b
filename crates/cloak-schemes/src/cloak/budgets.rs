//! Reuse-distance budgets (paper §6, Algorithm 3).
//!
//! `b_d` is how many addresses every batch takes from the set of reuse distance `d`. A set is
//! born with `B = Σ b_d` addresses and loses `b_d` at distance `d`, so `|S_d| = Σ_{j≥d} b_j` and
//! the store holds `N = Σ_d d·b_d` elements. Budgets are public: they are all the server learns.

use std::fmt;

/// The budgets `b_1, …, b_T`: how many addresses every batch takes from each reuse-distance
/// set (§4); set `d` holds `Σ_{j≥d} b_j` addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budgets(Vec<u32>);

/// Why budgets cannot be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BudgetError {
    /// No budget given.
    #[error("budgets must not be empty")]
    Empty,
    /// A budget is 0.
    #[error("every budget must be at least 1 (budget {index} is 0)")]
    Zero {
        /// Which budget (from 0).
        index: usize,
    },
    /// The first budget is 0.
    #[error("the first budget must be at least 1")]
    FirstBudget,
    /// The Zipf exponent is negative or not finite.
    #[error("the Zipf exponent must be a finite number ≥ 0, got {0}")]
    Exponent(f64),
    /// The store holds no key.
    #[error("capacity must be at least 1")]
    Capacity,
    /// The budgets make more sets than the proxy tracks.
    #[error("{0} reuse-distance sets are too many (the limit is 2^24); raise the first budget")]
    TooManySets(usize),
}

impl Budgets {
    /// Algorithm 3: `b_j = ceil(b_1 / j^s)`, appended until the sets hold `capacity` elements.
    pub fn zipf(capacity: u64, first: u32, exponent: f64) -> Result<Self, BudgetError> {
        if capacity == 0 {
            return Err(BudgetError::Capacity);
        }
        if first == 0 {
            return Err(BudgetError::FirstBudget);
        }
        if !exponent.is_finite() || exponent < 0.0 {
            return Err(BudgetError::Exponent(exponent));
        }
        let mut budgets = Vec::new();
        let mut held = 0u64;
        while held < capacity {
            let j = budgets.len() + 1;
            if j > 1 << 24 {
                return Err(BudgetError::TooManySets(j));
            }
            let b = (f64::from(first) / (j as f64).powf(exponent))
                .ceil()
                .max(1.0) as u32;
            budgets.push(b);
            held += j as u64 * u64::from(b);
        }
        Ok(Self(budgets))
    }

    /// The smallest `b_1` whose Algorithm-3 budgets give a batch of at least `batch` elements
    /// for `capacity` and `exponent` (the batch grows with `b_1`), at most 2^20.
    pub fn first_budget_for_batch(capacity: u64, exponent: f64, batch: usize) -> u32 {
        let size =
            |b1: u32| Self::zipf(capacity, b1, exponent).map_or(usize::MAX, |b| b.batch_size());
        let (mut lo, mut hi) = (1u32, 1u32 << 20);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if size(mid) >= batch {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    /// Budgets given explicitly, `b_1` first.
    pub fn explicit(budgets: Vec<u32>) -> Result<Self, BudgetError> {
        if budgets.is_empty() {
            return Err(BudgetError::Empty);
        }
        if let Some(index) = budgets.iter().position(|&b| b == 0) {
            return Err(BudgetError::Zero { index: index + 1 });
        }
        if budgets.len() > 1 << 24 {
            return Err(BudgetError::TooManySets(budgets.len()));
        }
        Ok(Self(budgets))
    }

    /// Number of reuse-distance sets `T`.
    pub fn sets(&self) -> usize {
        self.0.len()
    }

    /// `b_d` for `d` in `1..=T`.
    pub fn budget(&self, distance: usize) -> u32 {
        self.0[distance - 1]
    }

    /// Batch size `B = Σ b_d`.
    pub fn batch_size(&self) -> usize {
        self.0.iter().map(|&b| b as usize).sum()
    }

    /// Elements the sets hold: `N = Σ d·b_d`.
    pub fn capacity(&self) -> u64 {
        self.0
            .iter()
            .enumerate()
            .map(|(i, &b)| (i as u64 + 1) * u64::from(b))
            .sum()
    }

    /// `|S_d| = Σ_{j≥d} b_j` for every `d`, as a vector indexed by `d - 1`.
    pub fn set_sizes(&self) -> Vec<u64> {
        let mut sizes = vec![0u64; self.0.len()];
        let mut tail = 0u64;
        for (i, &b) in self.0.iter().enumerate().rev() {
            tail += u64::from(b);
            sizes[i] = tail;
        }
        sizes
    }
}

/// `T=1345 [433 217 145 109 87 … 1]`: the head and the tail, for logs and INFO.
impl fmt::Display for Budgets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "T={} [", self.0.len())?;
        let shown = 5.min(self.0.len());
        for (i, b) in self.0[..shown].iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{b}")?;
        }
        if self.0.len() > shown {
            write!(f, " … {}", self.0[self.0.len() - 1])?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_configurations() {
        // §7.1: one million elements with b_1 = 433 give a batch of about 4,000.
        let big = Budgets::zipf(1_000_000, 433, 1.0).unwrap();
        assert!(
            (3_900..=4_100).contains(&big.batch_size()),
            "{}",
            big.batch_size()
        );
        assert!(big.capacity() >= 1_000_000 && big.capacity() < 1_000_000 + 2 * big.sets() as u64);
        // Netflix: 8,477 elements with b_1 = 100 give a batch of about 520.
        let netflix = Budgets::zipf(8_477, 100, 1.0).unwrap();
        assert!(
            (500..=540).contains(&netflix.batch_size()),
            "{}",
            netflix.batch_size()
        );
    }

    #[test]
    fn budgets_follow_zipf_and_sizes_add_up() {
        let b = Budgets::zipf(10_000, 100, 1.0).unwrap();
        assert_eq!(&b.0[..4], &[100, 50, 34, 25]);
        assert!(b.0.iter().all(|&x| x >= 1));
        let sizes = b.set_sizes();
        assert_eq!(sizes[0] as usize, b.batch_size());
        assert_eq!(sizes.iter().sum::<u64>(), b.capacity());
        assert_eq!(*sizes.last().unwrap(), u64::from(*b.0.last().unwrap()));
        // Exponent 0 means equal budgets: the uniform distribution.
        let flat = Budgets::zipf(1_000, 10, 0.0).unwrap();
        assert!(flat.0.iter().all(|&x| x == 10));
    }

    #[test]
    fn bad_parameters_are_rejected() {
        assert_eq!(Budgets::explicit(vec![]), Err(BudgetError::Empty));
        assert_eq!(
            Budgets::explicit(vec![3, 0]),
            Err(BudgetError::Zero { index: 2 })
        );
        assert_eq!(Budgets::zipf(10, 0, 1.0), Err(BudgetError::FirstBudget));
        assert!(matches!(
            Budgets::zipf(10, 1, -1.0),
            Err(BudgetError::Exponent(_))
        ));
        assert_eq!(
            Budgets::explicit(vec![4, 2, 1]).unwrap().to_string(),
            "T=3 [4 2 1]"
        );
    }
}
