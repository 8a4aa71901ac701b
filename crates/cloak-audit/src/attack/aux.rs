//! The adversary's auxiliary knowledge: an independent sample of the workload it chose (the
//! game lets it pick the workloads, so it knows their distributions; a sample of the same length
//! as the run stands for that knowledge, noise included). Key frequencies feed frequency
//! analysis, consecutive pairs the correlated-query attack.

use std::collections::HashMap;

use cloak_bench::workload::Request;

#[derive(Clone, Debug, Default)]
pub struct Auxiliary {
    /// Requests per key.
    pub frequencies: HashMap<u64, u64>,
    /// Times key `b` directly followed key `a`.
    pub transitions: HashMap<(u64, u64), u64>,
    pub samples: u64,
}

impl Auxiliary {
    pub fn from_requests(requests: &[Request]) -> Self {
        let mut aux = Auxiliary {
            samples: requests.len() as u64,
            ..Auxiliary::default()
        };
        for r in requests {
            *aux.frequencies.entry(r.key).or_default() += 1;
        }
        for pair in requests.windows(2) {
            *aux.transitions
                .entry((pair[0].key, pair[1].key))
                .or_default() += 1;
        }
        aux
    }

    /// Keys from most to least requested (ties by key number).
    pub fn ranked_keys(&self) -> Vec<(u64, u64)> {
        let mut keys: Vec<(u64, u64)> = self.frequencies.iter().map(|(&k, &n)| (k, n)).collect();
        keys.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        keys
    }
}
