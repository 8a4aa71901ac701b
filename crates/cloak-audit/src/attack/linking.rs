//! The linking attack: follow elements through the write-backs by what their clear headers give
//! away (`crate::links`), then run frequency analysis on elements instead of labels.
//!
//! A scheme that moves elements between addresses (Cloak's shuffle, an ORAM's eviction) defeats
//! frequency analysis on labels: a popular key's element sits at a new address after every
//! batch. If the server can follow the element anyway, the key is back in plain sight: in Cloak
//! a key clients keep using is touched, so it is re-read in every batch its set comes up, and
//! its followed element is the one read most. The attack ranks followed elements by how often
//! they were read and names keys rank for rank, as frequency analysis does with labels; every
//! access is guessed as the key of the element it touched.

use super::frequency::{by_count, ranked_keys};
use super::{Attack, Auxiliary, Guesses};
use crate::links;
use crate::view::ServerView;
use cloak_core::AccessKind;

pub struct Linking;

impl Attack for Linking {
    fn name(&self) -> &'static str {
        "linking (headers)"
    }

    fn describe(&self) -> &'static str {
        "follows elements through write-backs by nonce order, then matches the most read \
         elements to the most popular keys"
    }

    fn guess(&self, view: &ServerView, aux: &Auxiliary, seed: u64) -> Guesses {
        let elements = links::follow(view);
        let mut reads = vec![0u64; elements.count as usize];
        for request in view.requests.iter().filter(|r| r.kind == AccessKind::Read) {
            for index in request.accesses.clone() {
                reads[elements.of_access[index] as usize] += 1;
            }
        }
        let ranked = by_count(reads.into_iter().enumerate().collect(), seed);
        let mut key_of = vec![None; elements.count as usize];
        for ((element, _), (key, _)) in ranked.into_iter().zip(ranked_keys(aux, seed)) {
            key_of[element] = Some(key);
        }
        Guesses {
            labels: Default::default(),
            accesses: elements
                .of_access
                .iter()
                .map(|&e| key_of[e as usize])
                .collect(),
        }
    }
}
