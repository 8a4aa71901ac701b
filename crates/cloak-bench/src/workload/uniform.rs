//! Every key equally likely, each request independent: the workload with no structure at all,
//! and the natural opposite of [`super::OneKey`] in a distinguishing game.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Request, TraceError, Workload};

pub struct Uniform {
    keys: u64,
    write_ratio: f64,
    rng: ChaCha8Rng,
}

impl Uniform {
    /// Keys `0..keys` (at least one), a fraction `write_ratio` of writes.
    pub fn new(keys: u64, write_ratio: f64, seed: u64) -> Self {
        Self {
            keys: keys.max(1),
            write_ratio: write_ratio.clamp(0.0, 1.0),
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }
}

impl Workload for Uniform {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        let key = self.rng.random_range(0..self.keys);
        let write = self.rng.random_bool(self.write_ratio);
        Ok(Some(Request { key, write }))
    }

    fn describe(&self) -> String {
        format!(
            "uniform ({} keys, {:.0}% writes)",
            self.keys,
            self.write_ratio * 100.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_every_key_evenly() {
        let mut w = Uniform::new(10, 0.25, 1);
        let mut counts = [0u32; 10];
        let mut writes = 0;
        for _ in 0..20_000 {
            let r = w.next_request().unwrap().unwrap();
            counts[r.key as usize] += 1;
            writes += u32::from(r.write);
        }
        assert!(
            counts.iter().all(|&c| (1_800..2_200).contains(&c)),
            "{counts:?}"
        );
        assert!((4_600..5_400).contains(&writes), "{writes}");
    }
}
