//! The distribution estimate `π̂` (paper §4.1) and the detection of its drift (§5.3).
//!
//! `π̂` starts uniform, or from a file the operator gives: a key-weight file (`KEY WEIGHT` per
//! line) or a trace in the benchmark's format (one request per line, `KEY` reads and
//! `KEY ANYTHING…` writes; each line counts one access of KEY). The scheme only knows slots, so
//! the binary designates a slot for every named key in the key directory first and hands the
//! scheme weights per slot ([`Estimate::from_weights`]).
//!
//! While the proxy runs, [`ChangeDetector`] histograms the client requests of a window of `w`
//! requests and, when the window is full, compares it with `π̂` by the Kolmogorov–Smirnov test
//! the paper uses, keys ordered by decreasing `π̂` (ties by slot). If the test rejects at the
//! chosen significance, the window's histogram is the new estimate `π̂′`. Windows follow one
//! another (each starts empty), so `w` integers of proxy memory suffice.

use std::collections::HashMap;
use std::io::BufRead;
use std::sync::Arc;

use cloak_core::KeyDirectory;

/// `π̂` over a store's slots: probabilities summing to 1, and how many samples they were
/// estimated from (`None`: given exactly, e.g. uniform or a weight file).
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    probabilities: Arc<[f64]>,
    samples: Option<u64>,
}

/// Why a distribution cannot serve as `π̂` for this store.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EstimateError {
    /// It has a weight count other than the store's slot count.
    #[error("the distribution has {got} weights but the store has {slots} slots")]
    Length {
        /// Weights given.
        got: usize,
        /// Slots of the store.
        slots: u64,
    },
    /// A weight is negative or not finite.
    #[error("weight {weight} of slot {slot} is not a finite non-negative number")]
    BadWeight {
        /// Whose weight.
        slot: usize,
        /// The weight.
        weight: f64,
    },
    /// Every weight is zero.
    #[error("every weight of the distribution is zero")]
    AllZero,
}

impl Estimate {
    /// The uniform estimate over `slots` slots.
    pub fn uniform(slots: usize) -> Self {
        Self {
            probabilities: vec![1.0 / slots as f64; slots].into(),
            samples: None,
        }
    }

    /// Normalises non-negative weights, one per slot.
    pub fn from_weights(weights: Vec<f64>, samples: Option<u64>) -> Result<Self, EstimateError> {
        if let Some((slot, &weight)) = weights
            .iter()
            .enumerate()
            .find(|(_, w)| !w.is_finite() || **w < 0.0)
        {
            return Err(EstimateError::BadWeight { slot, weight });
        }
        let total: f64 = weights.iter().sum();
        if total <= 0.0 {
            return Err(EstimateError::AllZero);
        }
        Ok(Self {
            probabilities: weights.into_iter().map(|w| w / total).collect(),
            samples,
        })
    }

    /// Checks the estimate covers exactly `slots` slots.
    pub fn check_slots(&self, slots: u64) -> Result<(), EstimateError> {
        if self.probabilities.len() as u64 != slots {
            return Err(EstimateError::Length {
                got: self.probabilities.len(),
                slots,
            });
        }
        Ok(())
    }

    /// The probability of each slot; they sum to 1.
    pub fn probabilities(&self) -> &[f64] {
        &self.probabilities
    }

    /// How many requests the estimate was observed over (`None`: given, not observed).
    pub fn samples(&self) -> Option<u64> {
        self.samples
    }
}

/// How to read a distribution file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DistributionFormat {
    /// Weights if every line is `KEY NUMBER`, else a trace.
    #[default]
    Auto,
    /// `KEY WEIGHT` per line.
    Weights,
    /// One request per line.
    Trace,
}

impl std::str::FromStr for DistributionFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "weights" => Ok(Self::Weights),
            "trace" => Ok(Self::Trace),
            other => Err(format!(
                "unknown distribution format {other:?}; choose auto, weights or trace"
            )),
        }
    }
}

/// Keys and their weights, as a distribution file gives them.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyWeights {
    /// Each key once, heaviest first (ties in order of first appearance).
    pub keys: Vec<(Vec<u8>, f64)>,
    /// Requests a trace held (`None` for a weight file).
    pub samples: Option<u64>,
}

/// Why a distribution file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum DistributionError {
    /// The file cannot be read.
    #[error("cannot read the distribution: {0}")]
    Read(#[from] std::io::Error),
    #[error(
        "line {line}: a weight file needs `KEY WEIGHT` with a finite non-negative weight, got {text:?}"
    )]
    /// A line of a weight file is not `KEY WEIGHT`.
    BadLine {
        /// Its number, from 1.
        line: usize,
        /// Its text.
        text: String,
    },
    /// No key in the file.
    #[error("the distribution names no key")]
    Empty,
    /// Every weight is zero.
    #[error("every weight in the distribution is zero")]
    AllZero,
}

/// Reads a key-weight file or a trace (see the module comment). Blank lines are skipped.
pub fn parse_distribution(
    input: impl BufRead,
    format: DistributionFormat,
) -> Result<KeyWeights, DistributionError> {
    // Both readings at once, so `Auto` needs one pass: key → (index, weight sum, accesses).
    let mut keys: HashMap<Vec<u8>, (usize, f64, u64)> = HashMap::new();
    let mut requests = 0u64;
    let mut weights_ok = true;
    for (index, line) in input.lines().enumerate() {
        let line = line?;
        let mut words = line.split_whitespace();
        let Some(key) = words.next() else {
            continue;
        };
        let weight = words.next().and_then(|w| w.parse::<f64>().ok());
        let weight = match (weight, words.next()) {
            (Some(w), None) if w.is_finite() && w >= 0.0 => Some(w),
            _ => None,
        };
        if weight.is_none() {
            if format == DistributionFormat::Weights {
                return Err(DistributionError::BadLine {
                    line: index + 1,
                    text: line,
                });
            }
            weights_ok = false;
        }
        requests += 1;
        let next = keys.len();
        let entry = keys
            .entry(key.as_bytes().to_vec())
            .or_insert((next, 0.0, 0));
        entry.1 += weight.unwrap_or(0.0);
        entry.2 += 1;
    }
    let as_weights = match format {
        DistributionFormat::Weights => true,
        DistributionFormat::Trace => false,
        DistributionFormat::Auto => weights_ok,
    };
    let mut list: Vec<(usize, Vec<u8>, f64)> = keys
        .into_iter()
        .map(|(key, (index, weight, accesses))| {
            let weight = if as_weights { weight } else { accesses as f64 };
            (index, key, weight)
        })
        .collect();
    if list.is_empty() {
        return Err(DistributionError::Empty);
    }
    if list.iter().all(|(_, _, w)| *w == 0.0) {
        return Err(DistributionError::AllZero);
    }
    list.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    Ok(KeyWeights {
        keys: list.into_iter().map(|(_, key, w)| (key, w)).collect(),
        samples: (!as_weights).then_some(requests),
    })
}

/// `π̂` per slot for the keys of a distribution file: designates a slot for every named key in
/// `directory` (heaviest first) and puts its weight there; other slots get weight 0. Keys longer
/// than `max_key` are refused; keys beyond the capacity are left out (the lightest ones), and
/// their number is returned with the estimate.
pub fn estimate_for_keys(
    directory: &mut KeyDirectory,
    weights: &KeyWeights,
    max_key: usize,
) -> Result<(Estimate, usize), KeyWeightsError> {
    if let Some((key, _)) = weights.keys.iter().find(|(key, _)| key.len() > max_key) {
        return Err(KeyWeightsError::KeyTooLong {
            key: String::from_utf8_lossy(key).into_owned(),
            max: max_key,
        });
    }
    let mut per_slot = vec![0.0; directory.capacity()];
    let mut left_out = 0;
    for (key, weight) in &weights.keys {
        match directory.designate(key) {
            Some(slot) => per_slot[slot as usize] += weight,
            None => left_out += 1,
        }
    }
    let estimate = Estimate::from_weights(per_slot, weights.samples)
        .map_err(|_| KeyWeightsError::NoWeightFits)?;
    Ok((estimate, left_out))
}

/// Why key weights cannot become an estimate over the store's slots.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyWeightsError {
    /// A key is longer than the store allows.
    #[error("the distribution names key {key:?}, longer than the key size limit of {max} bytes")]
    KeyTooLong {
        /// The key.
        key: String,
        /// The key size limit.
        max: usize,
    },
    /// No key with a positive weight fits.
    #[error("no key of the distribution with a positive weight fits in the store")]
    NoWeightFits,
}

/// The Kolmogorov–Smirnov statistic between a histogram and an estimate, keys taken in `order`:
/// `max_x |F_observed(x) − F_estimate(x)|`.
pub fn ks_statistic(order: &[u32], estimate: &[f64], counts: &[u32], total: u64) -> f64 {
    let mut observed = 0.0;
    let mut expected = 0.0;
    let mut largest: f64 = 0.0;
    for &slot in order {
        observed += f64::from(counts[slot as usize]) / total as f64;
        expected += estimate[slot as usize];
        largest = largest.max((observed - expected).abs());
    }
    largest
}

/// The statistic above which the KS test rejects at `significance`, for a window of `window`
/// samples against an estimate of `samples` samples (two-sample test) or an exact one.
pub fn ks_critical(significance: f64, window: u64, samples: Option<u64>) -> f64 {
    let c = (-(significance / 2.0).ln() / 2.0).sqrt();
    let w = window as f64;
    match samples {
        Some(m) if m > 0 => c * ((w + m as f64) / (w * m as f64)).sqrt(),
        _ => c / w.sqrt(),
    }
}

/// Histograms client requests window by window and says when they left `π̂` (§5.3).
pub struct ChangeDetector {
    window: u64,
    significance: f64,
    counts: Vec<u32>,
    seen: u64,
    /// Slots by decreasing `π̂`, the order the KS test sums in.
    order: Vec<u32>,
    estimate: Estimate,
    critical: f64,
    /// The last window's statistic, for `INFO`.
    pub last_statistic: Option<f64>,
}

impl ChangeDetector {
    /// A detector that tests windows of `window` requests against `estimate` at
    /// `significance`.
    pub fn new(estimate: Estimate, window: u64, significance: f64) -> Self {
        let slots = estimate.probabilities().len();
        let mut detector = Self {
            window,
            significance,
            counts: vec![0; slots],
            seen: 0,
            order: Vec::new(),
            critical: 0.0,
            estimate: estimate.clone(),
            last_statistic: None,
        };
        detector.reset(estimate);
        detector
    }

    /// Compares future windows with `estimate`.
    pub fn reset(&mut self, estimate: Estimate) {
        let p = estimate.probabilities();
        let mut order: Vec<u32> = (0..p.len() as u32).collect();
        order.sort_by(|&a, &b| p[b as usize].total_cmp(&p[a as usize]).then(a.cmp(&b)));
        self.order = order;
        self.critical = ks_critical(self.significance, self.window, estimate.samples());
        self.estimate = estimate;
        self.counts.iter_mut().for_each(|c| *c = 0);
        self.seen = 0;
    }

    /// The estimate the requests are tested against.
    pub fn estimate(&self) -> &Estimate {
        &self.estimate
    }

    /// Requests per detection window.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// The KS statistic above which a window shows drift.
    pub fn critical(&self) -> f64 {
        self.critical
    }

    /// Counts one client request; at the end of a window, the new estimate if the requests
    /// left the current one.
    pub fn observe(&mut self, slot: u32) -> Option<Estimate> {
        self.counts[slot as usize] = self.counts[slot as usize].saturating_add(1);
        self.seen += 1;
        if self.seen < self.window {
            return None;
        }
        let statistic = ks_statistic(
            &self.order,
            self.estimate.probabilities(),
            &self.counts,
            self.seen,
        );
        self.last_statistic = Some(statistic);
        let changed = (statistic > self.critical).then(|| {
            let weights = self.counts.iter().map(|&c| f64::from(c)).collect();
            Estimate::from_weights(weights, Some(self.seen)).expect("a full window has counts")
        });
        self.counts.iter_mut().for_each(|c| *c = 0);
        self.seen = 0;
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_weight_files_and_traces() {
        let weights =
            parse_distribution("a 1\nb 3\n\nc 0.5\na 1\n".as_bytes(), Default::default()).unwrap();
        assert_eq!(
            weights.keys,
            vec![
                (b"b".to_vec(), 3.0),
                (b"a".to_vec(), 2.0),
                (b"c".to_vec(), 0.5)
            ]
        );
        assert_eq!(weights.samples, None);

        let trace = parse_distribution(
            "7\n7 set\n9\n7\nx some value\n".as_bytes(),
            DistributionFormat::Auto,
        )
        .unwrap();
        assert_eq!(
            trace.keys,
            vec![
                (b"7".to_vec(), 3.0),
                (b"9".to_vec(), 1.0),
                (b"x".to_vec(), 1.0)
            ]
        );
        assert_eq!(trace.samples, Some(5));

        // The same text read as a trace on request: every line is one access.
        let forced =
            parse_distribution("a 1\nb 3\n".as_bytes(), DistributionFormat::Trace).unwrap();
        assert_eq!(
            forced.keys,
            vec![(b"a".to_vec(), 1.0), (b"b".to_vec(), 1.0)]
        );

        assert!(matches!(
            parse_distribution("a 1\nb x\n".as_bytes(), DistributionFormat::Weights),
            Err(DistributionError::BadLine { line: 2, .. })
        ));
        assert!(matches!(
            parse_distribution("\n\n".as_bytes(), DistributionFormat::Auto),
            Err(DistributionError::Empty)
        ));
        assert!(matches!(
            parse_distribution("a 0\n".as_bytes(), DistributionFormat::Auto),
            Err(DistributionError::AllZero)
        ));
    }

    #[test]
    fn named_keys_get_designated_slots() {
        use cloak_crypto::{KeyHasher, MasterKey};
        let mut directory = KeyDirectory::new(KeyHasher::new(&MasterKey::from_bytes([1; 32])), 3);
        let (existing, _) = directory.get_or_insert(b"old").unwrap();
        let weights = parse_distribution(
            "hot 6\nold 2\nwarm 1\ncold 1\n".as_bytes(),
            Default::default(),
        )
        .unwrap();
        let (estimate, left_out) = estimate_for_keys(&mut directory, &weights, 8).unwrap();
        assert_eq!(
            left_out, 1,
            "three slots, four keys: the lightest is left out"
        );
        let p = estimate.probabilities();
        assert!((p[existing as usize] - 2.0 / 9.0).abs() < 1e-12);
        let hot = directory.designate(b"hot").unwrap();
        assert!((p[hot as usize] - 6.0 / 9.0).abs() < 1e-12);
        assert_eq!(directory.get(b"hot"), None);
        assert!(matches!(
            estimate_for_keys(&mut directory, &weights, 2),
            Err(KeyWeightsError::KeyTooLong { .. })
        ));
    }

    #[test]
    fn estimates_are_normalised_and_checked() {
        let e = Estimate::from_weights(vec![1.0, 3.0, 0.0, 0.0], None).unwrap();
        assert_eq!(e.probabilities(), &[0.25, 0.75, 0.0, 0.0]);
        assert!(e.check_slots(4).is_ok());
        assert!(e.check_slots(5).is_err());
        assert!(Estimate::from_weights(vec![0.0; 3], None).is_err());
        assert!(Estimate::from_weights(vec![1.0, f64::NAN], None).is_err());
        assert!(Estimate::from_weights(vec![1.0, -1.0], None).is_err());
    }

    #[test]
    fn ks_detects_a_moved_distribution_and_not_a_faithful_window() {
        let slots = 8;
        let window = 800;
        let mut detector = ChangeDetector::new(Estimate::uniform(slots), window, 0.05);
        // A window that matches π̂ exactly.
        for i in 0..window {
            assert!(detector.observe((i % slots as u64) as u32).is_none());
        }
        assert_eq!(detector.last_statistic, Some(0.0));
        // Half the requests on slot 5.
        let mut changed = None;
        for i in 0..window {
            let slot = if i % 2 == 0 {
                5
            } else {
                (i % slots as u64) as u32
            };
            changed = changed.or(detector.observe(slot));
        }
        let new = changed.expect("the KS test rejects");
        assert!(new.probabilities()[5] > 0.5);
        assert_eq!(new.samples(), Some(window));
        // One-sample critical value at 5%: 1.358 / sqrt(800).
        assert!((detector.critical() - 1.358_1 / (window as f64).sqrt()).abs() < 1e-4);
        assert!(ks_critical(0.05, 800, Some(800)) > detector.critical());
    }
}
