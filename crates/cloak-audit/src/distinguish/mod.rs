//! Distinguishers: statistics the server computes from its view to tell which of two workloads
//! a run served (the paper's §5 game: the adversary picks two query sequences and must say
//! which one it is watching). Besides addresses and sizes they read the bytes written (the
//! elements' clear headers) and the times requests are sent and answered.
//!
//! Each distinguisher only says what it observes: a stream of weighted categories
//! ([`Distinguisher::observe`]). Judging is shared ([`evaluate`]), so every distinguisher applies
//! to every scheme, present and future, through nothing but the recorded view:
//!
//! - **identical**: the two streams are equal event for event (times included): no difference at
//!   all, whatever the statistics;
//! - a chi-square test of homogeneity between the two runs' histograms: statistic and p-value,
//!   corrected for the dependence between the observations of one group (the levels of one
//!   tree path, the slots of one batch and its write-back): the groups of both runs are pooled
//!   and dealt at random to two runs of the same sizes, and the statistic is divided by how much
//!   larger than its degrees of freedom it comes out on such runs, which differ by chance alone;
//! - a distinguishing advantage: each run is cut into stretches and a classifier trained on half
//!   of them labels the other half ([`crate::stats::advantage`]), with the probability that coin
//!   flips would do as well (which still speaks when too few observations allow a chi-square
//!   test, e.g. one label against two hundred).
//!
//! The views differ when either p-value, doubled for looking twice, is below [`SIGNIFICANCE`].

mod address;
mod batch_timing;
mod followed;
mod frequency;
mod headers;
mod reuse;
mod sizes;
mod timing;
mod write_read;

use std::ops::Range;
use std::time::Duration;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::stats::{self, Category, ChiSquare, Histogram};
use crate::view::ServerView;

pub use address::AddressDistribution;
pub use batch_timing::{
    BatchIntervals, WriteBackDelay, batch_intervals, percentiles, write_back_delays,
};
pub use followed::FollowedReuse;
pub use frequency::{LabelFrequency, counts as label_counts};
pub use headers::{GenerationLag, NonceOrder, consecutive_nonces};
pub use reuse::ReuseDistanceSets;
pub use sizes::{ElementSizes, RequestSizes};
pub use timing::Timing;
pub use write_read::WriteReadDistance;

/// One observation: `weight` of `category` at time `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub at: Duration,
    /// Events of one group may depend on each other (the levels of one tree path, the slots of
    /// one batch and its write-back); groups are independent as far as the judge assumes.
    pub group: u64,
    pub category: Category,
    pub weight: u64,
}

pub trait Distinguisher: Send + Sync {
    /// A short name for tables.
    fn name(&self) -> &'static str;

    /// What it looks at, in a sentence.
    fn looks_at(&self) -> &'static str;

    /// What it observes of `view` during `window`, in the view's order.
    fn observe(&self, view: &ServerView, window: Range<Duration>) -> Vec<Event>;

    /// A category, for people (`d=3`, `read×40`).
    fn label(&self, category: Category) -> String;

    /// Something worth reporting about one view on its own.
    fn about(&self, _view: &ServerView) -> Option<String> {
        None
    }
}

/// Every distinguisher.
pub fn all() -> Vec<Box<dyn Distinguisher>> {
    vec![
        Box::new(ReuseDistanceSets),
        Box::new(LabelFrequency),
        Box::new(WriteReadDistance),
        Box::new(AddressDistribution),
        Box::new(RequestSizes),
        Box::new(ElementSizes),
        Box::new(Timing),
        Box::new(BatchIntervals),
        Box::new(WriteBackDelay),
        Box::new(GenerationLag),
        Box::new(NonceOrder),
        Box::new(FollowedReuse),
    ]
}

/// The distinguishers that look at how much and when, not at which addresses: the ones that
/// compare a scheme idle against the same scheme loaded.
pub fn volume_and_timing() -> Vec<Box<dyn Distinguisher>> {
    vec![
        Box::new(RequestSizes),
        Box::new(Timing),
        Box::new(BatchIntervals),
        Box::new(WriteBackDelay),
        Box::new(GenerationLag),
    ]
}

/// Stretches each run is cut into for the classifier.
pub const SEGMENTS: usize = 20;

/// p-values below this count as a difference. Small, because several distinguishers look at
/// every pair of runs and a false alarm would accuse a sound scheme.
pub const SIGNIFICANCE: f64 = 1e-3;

/// How a distinguisher did on a pair of views.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Finding {
    pub name: &'static str,
    pub looks_at: &'static str,
    /// The two views gave exactly the same observations.
    pub identical: bool,
    pub test: ChiSquare,
    pub advantage: f64,
    /// Probability that coin flips label the stretches as well as the classifier did.
    pub classifier_p: f64,
    pub verdict: String,
    /// About each view on its own.
    pub about: [Option<String>; 2],
    /// `(category, count in A, count in B)` over the whole window.
    pub histogram: Vec<(String, u64, u64)>,
    /// The same distinguisher on A against a second run of A (same requests, the scheme's
    /// own randomness drawn afresh): whether it tells runs apart whatever their workload.
    pub control: Option<Control>,
}

/// A distinguisher on two runs of the same workload.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Control {
    pub advantage: f64,
    pub p_value: f64,
}

impl Finding {
    /// Evidence of a difference: the smaller p-value, doubled for looking twice.
    pub fn p_value(&self) -> f64 {
        (2.0 * self.test.p_value.min(self.classifier_p)).min(1.0)
    }

    /// The views can be told apart, and two runs of one workload cannot (a distinguisher that
    /// tells any two runs apart says nothing about the workload).
    pub fn differs(&self) -> bool {
        self.significant() && !self.differs_run_to_run()
    }

    /// A significant difference between A and B, before the control is considered.
    fn significant(&self) -> bool {
        !self.identical && self.p_value() < SIGNIFICANCE
    }

    /// It also tells two runs of the same workload apart.
    pub fn differs_run_to_run(&self) -> bool {
        self.control.is_some_and(|c| c.p_value < SIGNIFICANCE)
    }

    /// Judges this finding (A against B) beside `control`, the same distinguisher on A
    /// against a second run of A.
    pub fn with_control(mut self, control: &Finding) -> Self {
        self.control = Some(Control {
            advantage: control.advantage,
            p_value: control.p_value(),
        });
        if self.significant() && self.differs_run_to_run() {
            self.verdict = format!(
                "tells two runs of the same workload apart too (advantage {:.2}): says nothing \
                 about the workload",
                control.advantage
            );
        }
        self
    }
}

fn histogram(events: &[Event]) -> Histogram {
    events.iter().map(|e| (e.category, e.weight)).collect()
}

/// Random re-deals of the two runs' event groups used to measure the chi-square's inflation.
const REDEALS: usize = 40;

/// The chi-square of homogeneity between `a` and `b`, deflated by the inflation it shows when
/// the event groups of both runs are dealt to two runs at random (see the module comment).
fn homogeneity(a: &[Event], b: &[Event]) -> ChiSquare {
    let test = stats::homogeneity(&histogram(a), &histogram(b));
    if test.dof == 0 || !test.statistic.is_finite() {
        return test;
    }
    let (groups_a, groups_b) = (groups(a), groups(b));
    let in_a = groups_a.len();
    let pooled: Vec<&[Event]> = groups_a
        .into_iter()
        .map(|g| &a[g])
        .chain(groups_b.into_iter().map(|g| &b[g]))
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(pooled.len() as u64);
    let mut order: Vec<usize> = (0..pooled.len()).collect();
    let mut ratios = 0.0;
    for _ in 0..REDEALS {
        order.shuffle(&mut rng);
        let deal = |part: &[usize]| -> Histogram {
            part.iter()
                .flat_map(|&i| pooled[i].iter().map(|e| (e.category, e.weight)))
                .collect()
        };
        let (x, y) = order.split_at(in_a);
        let chance = stats::homogeneity(&deal(x), &deal(y));
        if chance.dof > 0 {
            ratios += chance.statistic / chance.dof as f64;
        }
    }
    test.deflated(ratios / REDEALS as f64)
}

/// Where each group of `events` lies (a group's events are consecutive).
fn groups(events: &[Event]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match out.last_mut() {
            Some(last) if events[last.start].group == e.group => last.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// Runs `distinguisher` on views `a` and `b` (of equal windows) and judges it.
pub fn evaluate(distinguisher: &dyn Distinguisher, a: &ServerView, b: &ServerView) -> Finding {
    let window = a.window.min(b.window);
    let whole = Duration::ZERO..window;
    let (events_a, events_b) = (
        distinguisher.observe(a, whole.clone()),
        distinguisher.observe(b, whole),
    );
    let identical = events_a == events_b;
    let (whole_a, whole_b) = (histogram(&events_a), histogram(&events_b));
    let (test, separation) = if identical {
        (
            ChiSquare::NONE,
            stats::Separation {
                advantage: 0.0,
                p_value: 1.0,
            },
        )
    } else {
        let stretch = window / SEGMENTS as u32;
        let segments = |view: &ServerView| -> Vec<Histogram> {
            (0..SEGMENTS as u32)
                .map(|i| histogram(&distinguisher.observe(view, stretch * i..stretch * (i + 1))))
                .collect()
        };
        (
            homogeneity(&events_a, &events_b),
            stats::advantage(&segments(a), &segments(b)),
        )
    };
    let mut categories: Vec<Category> = whole_a
        .iter()
        .chain(whole_b.iter())
        .map(|(c, _)| c)
        .collect();
    categories.sort_unstable();
    categories.dedup();
    let histogram = categories
        .into_iter()
        .map(|c| (distinguisher.label(c), whole_a.get(c), whole_b.get(c)))
        .collect();
    let p_value = (2.0 * test.p_value.min(separation.p_value)).min(1.0);
    Finding {
        name: distinguisher.name(),
        looks_at: distinguisher.looks_at(),
        identical,
        test,
        advantage: separation.advantage,
        classifier_p: separation.p_value,
        verdict: verdict(identical, p_value, separation.advantage),
        about: [distinguisher.about(a), distinguisher.about(b)],
        histogram,
        control: None,
    }
}

fn verdict(identical: bool, p_value: f64, advantage: f64) -> String {
    if identical {
        return "identical: no difference at all".into();
    }
    if p_value >= SIGNIFICANCE {
        return format!("no significant difference (p = {p_value:.3})");
    }
    if advantage >= 0.9 {
        return "told apart at a glance".into();
    }
    if advantage >= 0.2 {
        return format!("told apart (advantage {advantage:.2})");
    }
    "differs over the whole run, but a short stretch reveals little".into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloak_core::{AccessKind, Observed};

    /// A view of batches every 10 ms, each reading `addrs(batch)` and writing them back.
    fn view(batches: u64, addrs: impl Fn(u64) -> Vec<u128>) -> ServerView {
        let trace: Vec<Observed> = (0..batches)
            .flat_map(|k| {
                let a = addrs(k);
                let at = Duration::from_millis(10 * k);
                [
                    Observed {
                        at,
                        answered: Some(at),
                        kind: AccessKind::Read,
                        addrs: a.clone(),
                        values: Vec::new(),
                    },
                    Observed {
                        at: at + Duration::from_millis(1),
                        answered: Some(at + Duration::from_millis(1)),
                        kind: AccessKind::Write,
                        values: vec![bytes::Bytes::from_static(&[0; 64]); a.len()],
                        addrs: a,
                    },
                ]
            })
            .collect();
        ServerView::new(&trace, Duration::ZERO, Duration::from_millis(10 * batches))
    }

    #[test]
    fn identical_views_are_identical_to_every_distinguisher() {
        let v = view(100, |k| vec![(k % 7) as u128, 100 + (k % 3) as u128]);
        for d in all() {
            let f = evaluate(d.as_ref(), &v, &v);
            assert!(f.identical && !f.differs(), "{}", f.name);
            assert_eq!(f.advantage, 0.0);
        }
    }

    #[test]
    fn one_hot_and_spread_views_differ() {
        let hot = view(200, |_| vec![1]);
        let spread = view(200, |k| vec![(k * 7919 % 1000) as u128]);
        let f = evaluate(&ReuseDistanceSets, &hot, &spread);
        assert!(f.differs(), "{f:?}");
        assert!(f.advantage > 0.9, "{f:?}");
        assert!(f.verdict.contains("apart"));
        let f = evaluate(&RequestSizes, &hot, &spread);
        assert!(f.identical, "same sizes and times");
    }

    #[test]
    fn dependent_observations_do_not_pass_for_a_difference() {
        // Every batch reads a whole root-to-leaf path of a 64-leaf tree and writes it back:
        // seven addresses decided by one uniform leaf, each seen twice. Two runs drawing their
        // leaves independently come from one distribution; counted as independent
        // observations, their address histograms look different far too often.
        let path = |seed: u64| {
            move |k: u64| -> Vec<u128> {
                let mixed = (k ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let leaf = (mixed >> 40) % 64;
                (0..7)
                    .map(|level| u128::from((leaf >> level) + 100 * level))
                    .collect()
            }
        };
        let (a, b) = (view(3000, path(1)), view(3000, path(2)));
        let f = evaluate(&AddressDistribution, &a, &b);
        assert!(f.test.inflation > 1.5, "{:?}", f.test);
        assert!(f.test.p_value > SIGNIFICANCE, "{:?}", f.test);
    }
}
