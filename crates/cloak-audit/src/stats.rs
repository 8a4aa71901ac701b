//! The statistics behind every verdict: histograms over categories, chi-square tests, and a
//! classifier that measures how well stretches of traffic can be told apart.

use std::collections::BTreeMap;

use statrs::distribution::{ChiSquared, ContinuousCDF};

/// What a distinguisher sorts observations into. Numeric order is meaningful (a distance, a
/// size): sparse neighbours are pooled in that order for the chi-square test.
pub type Category = u64;

/// Weighted counts per category, and their sum (asked for in inner loops).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    counts: BTreeMap<Category, u64>,
    total: u64,
}

impl Histogram {
    pub fn add(&mut self, category: Category, weight: u64) {
        if weight > 0 {
            *self.counts.entry(category).or_default() += weight;
            self.total += weight;
        }
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn get(&self, category: Category) -> u64 {
        self.counts.get(&category).copied().unwrap_or(0)
    }

    /// `(category, count)` in category order.
    pub fn iter(&self) -> impl Iterator<Item = (Category, u64)> + '_ {
        self.counts.iter().map(|(&c, &n)| (c, n))
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

impl FromIterator<(Category, u64)> for Histogram {
    fn from_iter<I: IntoIterator<Item = (Category, u64)>>(iter: I) -> Self {
        let mut h = Histogram::default();
        for (c, w) in iter {
            h.add(c, w);
        }
        h
    }
}

/// A chi-square test's outcome.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct ChiSquare {
    pub statistic: f64,
    /// Degrees of freedom (0: nothing to test).
    pub dof: usize,
    pub p_value: f64,
    /// What the statistic was divided by for dependent observations (1: none; see
    /// [`ChiSquare::deflated`]).
    pub inflation: f64,
}

impl ChiSquare {
    fn of(statistic: f64, dof: usize) -> Self {
        let p_value = match ChiSquared::new(dof as f64) {
            Ok(distribution) if dof > 0 => distribution.sf(statistic),
            _ => 1.0,
        };
        Self {
            statistic,
            dof,
            p_value,
            inflation: 1.0,
        }
    }

    /// The test with its statistic divided by `inflation`, the factor by which dependent
    /// observations swell it (a first-order Rao–Scott correction): the textbook distribution
    /// assumes independent observations, and one path of a tree ORAM or one batch gives
    /// several that are not.
    pub fn deflated(self, inflation: f64) -> Self {
        if self.dof == 0 || !self.statistic.is_finite() || inflation <= 1.0 {
            return self;
        }
        Self {
            inflation,
            ..Self::of(self.statistic / inflation, self.dof)
        }
    }

    /// No test possible, no evidence of a difference.
    pub const NONE: ChiSquare = ChiSquare {
        statistic: 0.0,
        dof: 0,
        p_value: 1.0,
        inflation: 1.0,
    };

    /// One sample is empty and the other is not: as different as they come.
    pub const DISJOINT: ChiSquare = ChiSquare {
        statistic: f64::INFINITY,
        dof: 1,
        p_value: 0.0,
        inflation: 1.0,
    };
}

/// Smallest expected count per pooled bin, the usual rule for the chi-square approximation.
const MIN_EXPECTED: f64 = 5.0;

/// Chi-square test of homogeneity: were `a` and `b` drawn from one distribution? Neighbouring
/// categories are pooled until every bin expects at least 5 in each sample.
pub fn homogeneity(a: &Histogram, b: &Histogram) -> ChiSquare {
    let (total_a, total_b) = (a.total() as f64, b.total() as f64);
    match (total_a > 0.0, total_b > 0.0) {
        (false, false) => return ChiSquare::NONE,
        (true, false) | (false, true) => return ChiSquare::DISJOINT,
        (true, true) => {}
    }
    let share = total_a.min(total_b) / (total_a + total_b);
    let mut categories: Vec<Category> = a.iter().chain(b.iter()).map(|(c, _)| c).collect();
    categories.sort_unstable();
    categories.dedup();
    let mut bins: Vec<(f64, f64)> = Vec::new();
    let mut open = (0.0, 0.0);
    for c in categories {
        open.0 += a.get(c) as f64;
        open.1 += b.get(c) as f64;
        if (open.0 + open.1) * share >= MIN_EXPECTED {
            bins.push(std::mem::take(&mut open));
        }
    }
    match bins.last_mut() {
        Some(last) => {
            last.0 += open.0;
            last.1 += open.1;
        }
        None => bins.push(open),
    }
    let statistic = bins
        .iter()
        .map(|&(x, y)| {
            let n = x + y;
            let expected_a = n * total_a / (total_a + total_b);
            let expected_b = n * total_b / (total_a + total_b);
            (x - expected_a).powi(2) / expected_a + (y - expected_b).powi(2) / expected_b
        })
        .sum();
    ChiSquare::of(statistic, bins.len() - 1)
}

/// Chi-square goodness of fit of `counts` to equal expectations (the index of dispersion).
pub fn uniformity(counts: &[u64]) -> ChiSquare {
    let total: u64 = counts.iter().sum();
    if counts.len() < 2 || total == 0 {
        return ChiSquare::NONE;
    }
    let expected = total as f64 / counts.len() as f64;
    let statistic = counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum();
    ChiSquare::of(statistic, counts.len() - 1)
}

/// How well a stretch of traffic reveals which of two runs it came from, as a distinguishing
/// advantage `2·accuracy − 1` (0: a coin flip does as well; 1: never wrong).
///
/// `a[i]` and `b[i]` are histograms of the same stretch `i` of each run. Two-fold cross
/// validation: a model of each run learns from the even stretches and labels the odd ones, then
/// the other way round. The model is a multinomial naive Bayes over the categories plus a
/// Poisson law for how much a stretch holds (so a run that falls silent, or never shows a
/// category at all, is told by its volume). A stretch that scores the same under both models is
/// a tie and counts half.
pub fn advantage(a: &[Histogram], b: &[Histogram]) -> Separation {
    let mut correct = 0.0;
    let mut tested = 0usize;
    for fold in 0..2 {
        let train = |segments: &[Histogram]| -> Histogram {
            segments
                .iter()
                .skip(fold)
                .step_by(2)
                .flat_map(|h| h.iter())
                .collect()
        };
        let (model_a, model_b) = (train(a), train(b));
        let stretches = |segments: &[Histogram]| segments.iter().skip(fold).step_by(2).count();
        // Mean weight per stretch, kept off zero so a silent run still has a likelihood.
        let rate = |model: &Histogram, segments: &[Histogram]| {
            (model.total() as f64 + 0.5) / stretches(segments).max(1) as f64
        };
        let (rate_a, rate_b) = (rate(&model_a, a), rate(&model_b, b));
        let categories = model_a
            .iter()
            .chain(model_b.iter())
            .map(|(c, _)| c)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            .max(1) as f64;
        let log_p = |model: &Histogram, c: Category| {
            ((model.get(c) as f64 + 0.5) / (model.total() as f64 + 0.5 * categories)).ln()
        };
        for (truly_a, segments) in [(true, a), (false, b)] {
            let tested_stretches = segments.iter().enumerate().skip(1 - fold).step_by(2);
            // Stretches where neither run sent anything tell nothing either way.
            for (_, test) in tested_stretches.filter(|(i, _)| {
                !a.get(*i).is_none_or(Histogram::is_empty)
                    || !b.get(*i).is_none_or(Histogram::is_empty)
            }) {
                let volume = test.total() as f64;
                let score: f64 = test
                    .iter()
                    .map(|(c, n)| n as f64 * (log_p(&model_a, c) - log_p(&model_b, c)))
                    .sum::<f64>()
                    + volume * (rate_a / rate_b).ln()
                    - (rate_a - rate_b);
                tested += 1;
                correct += if score.abs() < 1e-9 {
                    0.5
                } else if (score > 0.0) == truly_a {
                    1.0
                } else {
                    0.0
                };
            }
        }
    }
    if tested == 0 {
        return Separation {
            advantage: 0.0,
            p_value: 1.0,
        };
    }
    Separation {
        advantage: (2.0 * correct / tested as f64 - 1.0).max(0.0),
        p_value: coin_tail(tested, correct.floor() as usize),
    }
}

/// How well the classifier told stretches apart.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Separation {
    pub advantage: f64,
    /// Probability that coin flips label at least as many stretches rightly.
    pub p_value: f64,
}

/// `P(X ≥ k)` for `X ~ Binomial(n, 1/2)`.
fn coin_tail(n: usize, k: usize) -> f64 {
    let mut term = 0.5f64.powi(n as i32);
    let mut tail = 0.0;
    for i in 0..=n {
        if i >= k {
            tail += term;
        }
        term *= (n - i) as f64 / (i + 1) as f64;
    }
    tail.min(1.0)
}

/// Categories for a quantity spanning orders of magnitude: exact below 64, then 8 per octave.
pub mod buckets {
    use super::Category;

    const EXACT: u64 = 64;

    pub fn of(x: u64) -> Category {
        if x < EXACT {
            return x;
        }
        let octave = x.ilog2();
        let eighth = (x >> (octave - 3)) & 7;
        EXACT + u64::from(octave - EXACT.ilog2()) * 8 + eighth
    }

    /// The values `lo..hi` a category holds.
    pub fn span(category: Category) -> (u64, u64) {
        if category < EXACT {
            return (category, category + 1);
        }
        let octave = (category - EXACT) / 8 + u64::from(EXACT.ilog2());
        let eighth = (category - EXACT) % 8;
        let lo = (8 + eighth) << (octave - 3);
        (lo, lo.saturating_add(1 << (octave - 3)))
    }

    /// `unit=5` or `unit∈[64,72)`.
    pub fn label(category: Category, unit: &str) -> String {
        match span(category) {
            (lo, hi) if hi == lo + 1 => format!("{unit}={lo}"),
            (lo, hi) => format!("{unit}∈[{lo},{hi})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chi_square_matches_known_values() {
        // 2×2 table [[10, 20], [20, 10]]: statistic 6.667 with 1 dof, p ≈ 0.0098.
        let a: Histogram = [(0, 10), (1, 20)].into_iter().collect();
        let b: Histogram = [(0, 20), (1, 10)].into_iter().collect();
        let t = homogeneity(&a, &b);
        assert_eq!(t.dof, 1);
        assert!((t.statistic - 6.6667).abs() < 1e-3, "{t:?}");
        assert!((t.p_value - 0.00982).abs() < 1e-4, "{t:?}");
        assert_eq!(homogeneity(&a, &a), ChiSquare::of(0.0, 1));
        assert_eq!(homogeneity(&a, &a).p_value, 1.0);
        assert_eq!(homogeneity(&a, &Histogram::default()), ChiSquare::DISJOINT);
    }

    #[test]
    fn sparse_categories_are_pooled() {
        // One observation per category in each sample expects 1 per sample: five neighbours
        // pooled expect 5, so 40 categories make 8 bins.
        let a: Histogram = (0..40).map(|c| (c, 1)).collect();
        let b: Histogram = (0..40).map(|c| (c, 1)).collect();
        let t = homogeneity(&a, &b);
        assert_eq!(t.dof, 7);
        assert_eq!(t.statistic, 0.0);
    }

    #[test]
    fn uniformity_of_counts() {
        assert!(uniformity(&[100, 100, 100, 100]).p_value > 0.99);
        assert!(uniformity(&[400, 0, 0, 0]).p_value < 1e-10);
    }

    #[test]
    fn advantage_separates_what_differs_only() {
        let same: Vec<Histogram> = (0..10)
            .map(|_| [(1, 5), (2, 5)].into_iter().collect())
            .collect();
        assert_eq!(advantage(&same, &same).advantage, 0.0);
        assert_eq!(advantage(&same, &same).p_value, coin_tail(20, 10));
        let other: Vec<Histogram> = (0..10)
            .map(|_| [(1, 9), (2, 1)].into_iter().collect())
            .collect();
        assert_eq!(advantage(&same, &other).advantage, 1.0);
        // 20 stretches all labelled rightly: 2^-20.
        assert!((advantage(&same, &other).p_value - 0.5f64.powi(20)).abs() < 1e-15);
        // Only the volume differs: one run is silent.
        let silent = vec![Histogram::default(); 10];
        assert_eq!(advantage(&same, &silent).advantage, 1.0);
        let louder: Vec<Histogram> = (0..10)
            .map(|_| [(1, 50), (2, 50)].into_iter().collect())
            .collect();
        assert_eq!(advantage(&same, &louder).advantage, 1.0);
    }

    #[test]
    fn buckets_cover_every_value_once() {
        let mut previous = buckets::of(0);
        for x in 1..100_000u64 {
            let c = buckets::of(x);
            let (lo, hi) = buckets::span(c);
            assert!(lo <= x && x < hi, "{x} in {c} = [{lo}, {hi})");
            assert!(
                c == previous || c == previous + 1,
                "categories are consecutive"
            );
            previous = c;
        }
        assert_eq!(buckets::label(5, "d"), "d=5");
        assert_eq!(buckets::label(buckets::of(70), "d"), "d∈[64,72)");
    }
}
