//! Every request on one key: the most skewed workload there is. An oblivious scheme must look the
//! same to the server under it as under [`super::Uniform`]; anything else gives the game away.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Request, TraceError, Workload};

pub struct OneKey {
    key: u64,
    write_ratio: f64,
    rng: ChaCha8Rng,
}

impl OneKey {
    /// Requests on `key` only, a fraction `write_ratio` of them writes.
    pub fn new(key: u64, write_ratio: f64, seed: u64) -> Self {
        Self {
            key,
            write_ratio: write_ratio.clamp(0.0, 1.0),
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }
}

impl Workload for OneKey {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        let write = self.rng.random_bool(self.write_ratio);
        Ok(Some(Request {
            key: self.key,
            write,
        }))
    }

    fn describe(&self) -> String {
        format!(
            "one key (key {}, {:.0}% writes)",
            self.key,
            self.write_ratio * 100.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn always_the_same_key() {
        let mut w = OneKey::new(7, 0.5, 3);
        let requests: Vec<Request> = (0..1000)
            .map(|_| w.next_request().unwrap().unwrap())
            .collect();
        assert!(requests.iter().all(|r| r.key == 7));
        let writes = requests.iter().filter(|r| r.write).count();
        assert!((400..600).contains(&writes), "{writes}");
    }
}
