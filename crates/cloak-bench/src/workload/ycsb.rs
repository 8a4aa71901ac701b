//! YCSB's core workloads (Cooper et al., SoCC 2010) over `keys` records.
//!
//! | mix | reads | writes                              |
//! |-----|-------|-------------------------------------|
//! | A   | 50%   | 50% updates                         |
//! | B   | 95%   | 5% updates                          |
//! | C   | 100%  | none                                |
//! | F   | 50%   | 50% read-modify-write (read, write) |
//!
//! Zipfian uses YCSB's constant 0.99 and scrambles ranks with FNV-1a, as YCSB's
//! `ScrambledZipfianGenerator` does, so popular keys are spread over the key space.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution as _, Zipf};

use super::{Request, TraceError, Workload};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    A,
    B,
    C,
    F,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    Zipfian,
    Uniform,
}

/// YCSB's zipfian constant.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

pub struct Ycsb {
    mix: Mix,
    distribution: Distribution,
    keys: u64,
    zipf: Zipf<f64>,
    rng: ChaCha8Rng,
    /// The write half of a read-modify-write still to send.
    pending_write: Option<u64>,
}

impl Ycsb {
    pub fn new(mix: Mix, distribution: Distribution, keys: u64, seed: u64) -> Self {
        let keys = keys.max(1);
        Self {
            mix,
            distribution,
            keys,
            zipf: Zipf::new(keys as f64, ZIPFIAN_CONSTANT).expect("n ≥ 1, s ≥ 0"),
            rng: ChaCha8Rng::seed_from_u64(seed),
            pending_write: None,
        }
    }

    fn key(&mut self) -> u64 {
        match self.distribution {
            Distribution::Uniform => self.rng.random_range(0..self.keys),
            Distribution::Zipfian => {
                let rank = self.zipf.sample(&mut self.rng) as u64;
                fnv1a(rank) % self.keys
            }
        }
    }
}

fn fnv1a(value: u64) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in value.to_le_bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

impl Workload for Ycsb {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        if let Some(key) = self.pending_write.take() {
            return Ok(Some(Request { key, write: true }));
        }
        let key = self.key();
        let write = match self.mix {
            Mix::A => self.rng.random_bool(0.5),
            Mix::B => self.rng.random_bool(0.05),
            Mix::C => false,
            Mix::F => {
                if self.rng.random_bool(0.5) {
                    self.pending_write = Some(key);
                }
                false
            }
        };
        Ok(Some(Request { key, write }))
    }

    fn describe(&self) -> String {
        format!(
            "YCSB-{:?} ({}, {} keys)",
            self.mix,
            match self.distribution {
                Distribution::Zipfian => "zipfian 0.99",
                Distribution::Uniform => "uniform",
            },
            self.keys
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writes(mix: Mix, n: usize) -> f64 {
        let mut w = Ycsb::new(mix, Distribution::Uniform, 1000, 1);
        (0..n)
            .filter(|_| w.next_request().unwrap().unwrap().write)
            .count() as f64
            / n as f64
    }

    #[test]
    fn mixes_have_their_write_shares() {
        assert!((writes(Mix::A, 20_000) - 0.5).abs() < 0.02);
        assert!((writes(Mix::B, 20_000) - 0.05).abs() < 0.01);
        assert_eq!(writes(Mix::C, 1_000), 0.0);
        // F: half the operations are read-modify-writes, each two requests: 1/3 are writes.
        assert!((writes(Mix::F, 30_000) - 1.0 / 3.0).abs() < 0.02);
    }

    #[test]
    fn read_modify_writes_write_the_key_they_read() {
        let mut w = Ycsb::new(Mix::F, Distribution::Zipfian, 1000, 2);
        let mut last_read = None;
        for _ in 0..1000 {
            let r = w.next_request().unwrap().unwrap();
            if r.write {
                assert_eq!(Some(r.key), last_read);
            } else {
                last_read = Some(r.key);
            }
        }
    }

    #[test]
    fn zipfian_is_skewed_and_spread() {
        let mut w = Ycsb::new(Mix::C, Distribution::Zipfian, 10_000, 3);
        let mut counts = vec![0u32; 10_000];
        for _ in 0..100_000 {
            counts[w.next_request().unwrap().unwrap().key as usize] += 1;
        }
        let mut sorted = counts.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let top100: u32 = sorted[..100].iter().sum();
        assert!(
            top100 > 30_000,
            "the 1% hottest keys take a large share ({top100})"
        );
        let hottest = counts.iter().position(|&c| c == sorted[0]).unwrap();
        assert_ne!(hottest, 0, "scrambled: rank 1 is not key 0");
    }
}
