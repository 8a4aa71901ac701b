//! Attacks on a server view, each scored against the ground truth.
//!
//! An attack names a key for every label it can, or for single accesses when it follows elements
//! as they move between labels (`Guesses`); it sees only the view and its auxiliary knowledge. Scoring is shared: every access in the view counts, and a guess is right
//! when the element behind that access, at that moment, held the named key (so a scheme that
//! moves keys between addresses, like Cloak or an ORAM, is scored as fairly as one with fixed
//! labels).
//!
//! The yardstick is the better of two guessers that learn nothing from this run's view:
//! *chance*, the same guesses shuffled over the labels at random, and *blind*, the same attack
//! run on the other workload's view and scored on this run. Chance alone flatters an attack
//! on a scheme with structure every view shares: in Path ORAM the root bucket is on every
//! path and tends to hold the key just accessed, so "the busiest label holds the hottest key"
//! beats chance without the view saying anything about the workload. The blind guess makes
//! exactly that guess too, so only what the view itself gives away counts.

mod aux;
mod correlated;
mod frequency;
mod linking;
mod volume;

use std::collections::{HashMap, HashSet};

use cloak_core::Addr;

pub use aux::Auxiliary;
pub use correlated::CorrelatedQueries;
pub use frequency::FrequencyAnalysis;
pub use linking::Linking;
pub use volume::{VolumeCheck, volume_check};

use crate::truth::Keys;
use crate::view::ServerView;

/// Which key the attacker says each access stands for.
#[derive(Clone, Debug, Default)]
pub struct Guesses {
    /// A key for every access to a label.
    pub labels: HashMap<Addr, u64>,
    /// A key for single accesses (indexed like `ServerView::accesses`), taking precedence over
    /// their label's: for attacks that follow elements from label to label.
    pub accesses: Vec<Option<u64>>,
}

impl Guesses {
    /// One key per label.
    pub fn by_label(labels: HashMap<Addr, u64>) -> Self {
        Self {
            labels,
            accesses: Vec::new(),
        }
    }

    /// The key guessed for access `index`, which touched `addr`.
    fn of(&self, index: usize, addr: Addr) -> Option<u64> {
        match self.accesses.get(index) {
            Some(Some(key)) => Some(*key),
            _ => self.labels.get(&addr).copied(),
        }
    }
}

pub trait Attack: Send + Sync {
    fn name(&self) -> &'static str;

    /// What it does, in a sentence.
    fn describe(&self) -> &'static str;

    /// Its guesses from `view` and `aux`; `seed` drives any randomness it uses.
    fn guess(&self, view: &ServerView, aux: &Auxiliary, seed: u64) -> Guesses;
}

/// Every attack on labels.
pub fn all() -> Vec<Box<dyn Attack>> {
    vec![
        Box::new(FrequencyAnalysis),
        Box::new(CorrelatedQueries::default()),
        Box::new(Linking),
    ]
}

/// How well an attack did.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Score {
    /// Accesses in the view, and how many the guesses named rightly.
    pub accesses: u64,
    pub correct: u64,
    pub accuracy: f64,
    /// The expected accuracy of the same guesses assigned to labels at random.
    pub chance: f64,
    /// The accuracy of the attack's guesses from the other workload's view (see the module
    /// comment); 0 until [`run`] fills it in.
    pub blind: f64,
    /// Of the (up to) 10 most popular keys, how many the attacker named for accesses that
    /// mostly held them.
    pub top_keys: usize,
    pub top_recovered: usize,
}

impl Score {
    /// The accuracy a guesser reaches without this run's view: the better of chance and blind.
    pub fn yardstick(&self) -> f64 {
        self.chance.max(self.blind)
    }

    /// How far above the yardstick, in standard deviations of a guesser that good (inflated
    /// two-fold for the dependence between accesses: a read and its write-back touch the same
    /// element).
    pub fn z(&self) -> f64 {
        let n = self.accesses as f64;
        let p = self.yardstick().min(1.0);
        let spread = 2.0 * (n * p * (1.0 - p)).sqrt().max(1.0);
        (self.correct as f64 - n * p) / spread
    }

    pub fn verdict(&self) -> String {
        if self.accesses == 0 {
            return "nothing to attack".into();
        }
        let lift = if self.yardstick() > 0.0 {
            format!(
                ", {:.0}× a guess without the view",
                self.accuracy / self.yardstick()
            )
        } else {
            String::new()
        };
        if self.z() < 5.0 {
            "no better than a guess without the view".into()
        } else if self.accuracy >= 0.5 {
            format!("recovers most queries{lift}")
        } else {
            format!("beats chance{lift}")
        }
    }
}

/// Scores `guesses` on `view`, whose `truth[i]` is what access `i`'s element held.
pub fn score(view: &ServerView, truth: &[Keys], guesses: &Guesses, aux: &Auxiliary) -> Score {
    let accesses = view.accesses.len().min(truth.len());
    let labels = view
        .accesses
        .iter()
        .map(|a| a.addr)
        .collect::<HashSet<Addr>>()
        .len()
        .max(1) as f64;
    let named: HashSet<u64> = guesses.labels.values().copied().collect();
    // Guesses for single accesses, shuffled at random over all the accesses (as label guesses
    // are over all the labels): the chance that an access is dealt each key.
    let mut shares: HashMap<u64, f64> = HashMap::new();
    for key in guesses.accesses.iter().take(accesses).flatten() {
        *shares.entry(*key).or_default() += 1.0 / accesses as f64;
    }
    let mut correct = 0u64;
    let mut chance = 0.0;
    // Per key guessed: accesses it was named for, and how many of them held it.
    let mut per_key: HashMap<u64, (u64, u64)> = HashMap::new();
    for (index, (access, keys)) in view.accesses.iter().zip(truth).enumerate() {
        chance += keys.iter().filter_map(|k| shares.get(k)).sum::<f64>()
            + keys.iter().filter(|k| named.contains(k)).count() as f64 / labels;
        if let Some(guess) = guesses.of(index, access.addr) {
            let entry = per_key.entry(guess).or_default();
            entry.0 += 1;
            if keys.contains(&guess) {
                correct += 1;
                entry.1 += 1;
            }
        }
    }
    let top: Vec<u64> = aux
        .ranked_keys()
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| per_key.contains_key(k))
        .take(10)
        .collect();
    let top_recovered = top
        .iter()
        .filter(|k| {
            let (named, held) = per_key[k];
            2 * held > named
        })
        .count();
    Score {
        accesses: accesses as u64,
        correct,
        accuracy: correct as f64 / accesses.max(1) as f64,
        chance: chance / accesses.max(1) as f64,
        blind: 0.0,
        top_keys: top.len(),
        top_recovered,
    }
}

/// One attack on one view.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AttackResult {
    pub attack: &'static str,
    pub describe: &'static str,
    /// Which of the two workloads it attacked.
    pub workload: String,
    pub score: Score,
    pub verdict: String,
}

/// Runs `attack` on `view` and scores it, against chance and against its own guesses from
/// `other` (the other workload's view of the same scheme).
pub fn run(
    attack: &dyn Attack,
    workload: &str,
    view: &ServerView,
    other: &ServerView,
    truth: &[Keys],
    aux: &Auxiliary,
    seed: u64,
) -> AttackResult {
    let informed = attack.guess(view, aux, seed);
    let blind = attack.guess(other, aux, seed);
    let score = Score {
        blind: score(view, truth, &blind, aux).accuracy,
        ..score(view, truth, &informed, aux)
    };
    AttackResult {
        attack: attack.name(),
        describe: attack.describe(),
        workload: workload.to_string(),
        score,
        verdict: score.verdict(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloak_bench::workload::Request;
    use cloak_core::{AccessKind, Observed};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn scores_against_what_elements_held() {
        // Label 10 always holds key 1; label 20 holds key 2, then key 3.
        let trace: Vec<Observed> = [10u128, 10, 20, 20]
            .iter()
            .enumerate()
            .map(|(i, &a)| Observed {
                at: Duration::from_millis(i as u64),
                answered: None,
                kind: AccessKind::Read,
                addrs: vec![a],
                values: Vec::new(),
            })
            .collect();
        let view = ServerView::new(&trace, Duration::ZERO, Duration::from_secs(1));
        let truth: Vec<Keys> = [1u64, 1, 2, 3].iter().map(|&k| Arc::from([k])).collect();
        let aux = Auxiliary::from_requests(&[
            Request {
                key: 1,
                write: false,
            },
            Request {
                key: 1,
                write: false,
            },
            Request {
                key: 2,
                write: false,
            },
        ]);
        let guesses = Guesses::by_label([(10, 1), (20, 2)].into_iter().collect());
        let s = score(&view, &truth, &guesses, &aux);
        assert_eq!((s.accesses, s.correct), (4, 3));
        // Shuffled over 2 labels, a guess names the held key half the time when that key was
        // named at all (keys 1, 1, 2 were; 3 was not): 3 / (2 · 4).
        assert!((s.chance - 3.0 / 8.0).abs() < 1e-12);
        // Key 1's label held it every time; key 2's only half the time, not a majority.
        assert_eq!((s.top_keys, s.top_recovered), (2, 1));
    }
}
