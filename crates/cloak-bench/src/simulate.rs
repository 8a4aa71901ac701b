//! One scheme on one workload in this process, with virtual time: `cloak_core::Simulator` runs
//! the engine and the scheme against an in-memory store whose round trips take a fixed virtual
//! delay. No sockets, no real clock: a simulation runs as fast as the scheme's code does, and
//! its throughput and latency are in virtual time. It shows what a scheme's protocol costs
//! (utilisation, dummy traffic, bytes, latency in batches), not how fast this machine is.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use cloak_core::{
    Command, Engine, KeyDirectory, Limits, Outcome, RecordLayout, SchemeStats, SetCondition,
    Simulator,
};
use cloak_crypto::{KeyHasher, MasterKey};
use cloak_schemes::{BuildError, SchemeName, SchemeOptions, Start, StoreSpec};
use hdrhistogram::Histogram;

use crate::report::{Counters, Measurement, Mode, Subject, Timing};
use crate::run::Load;
use crate::workload::{Request, key_name};

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Simulation {
    pub scheme: SchemeName,
    pub keys: u64,
    pub value_size: usize,
    pub options: SchemeOptions,
    /// Virtual time of one storage round trip.
    pub storage_delay: Duration,
    pub workload: String,
    pub seed: u64,
}

impl Simulation {
    /// The key a simulation seals with: fixed, since simulations measure and hold no data.
    pub fn master_key(&self) -> MasterKey {
        MasterKey::from_bytes([0x5e; 32])
    }

    /// How records are laid out in elements.
    pub fn layout(&self) -> RecordLayout {
        RecordLayout {
            max_key: 32,
            max_value: self.value_size,
        }
    }

    /// A simulator holding every key, ready to measure.
    pub fn start(&self) -> Result<Simulator, BuildError> {
        let master = self.master_key();
        let store = StoreSpec {
            capacity: self.keys,
            layout: self.layout(),
            seed: Some(self.seed),
        };
        let scheme = cloak_schemes::build(
            self.scheme,
            &store,
            &self.options,
            &master,
            Start::default(),
        )?;
        let directory = KeyDirectory::new(KeyHasher::new(&master), self.keys as usize);
        let limits = Limits {
            max_key: 32,
            max_value: self.value_size,
            max_keys_per_command: 1000,
        };
        let mut sim = Simulator::new(Engine::new(scheme, directory, limits))
            .with_storage_delay(self.storage_delay);
        let value = Bytes::from(vec![b'v'; self.value_size]);
        let chunks: Vec<Command> = (0..self.keys)
            .collect::<Vec<_>>()
            .chunks(64)
            .map(|chunk| {
                Command::MSet(
                    chunk
                        .iter()
                        .map(|&k| (Bytes::from(key_name(k)), value.clone()))
                        .collect(),
                )
            })
            .collect();
        // Preload with a few commands in flight, like the socket runs do.
        let mut pending = 0;
        for chunk in chunks {
            sim.submit(0, chunk);
            pending += 1;
            while pending >= 8 {
                sim.run_until(Duration::from_secs(3600), Simulator::has_outcomes);
                pending -= sim.drain_outcomes().len();
            }
        }
        while pending > 0 && sim.run_until(Duration::from_secs(3600), Simulator::has_outcomes) {
            pending -= sim.drain_outcomes().len();
        }
        Ok(sim)
    }

    /// Simulates `requests` sent with `load` (clients and pipeline depth; open loop at `rate`).
    pub fn measure(&self, requests: &[Request], load: Load) -> Result<Measurement, BuildError> {
        let mut sim = self.start()?;
        Ok(self.measure_on(&mut sim, requests, load))
    }

    /// Like [`Simulation::measure`], on a simulator from [`Simulation::start`] that the caller
    /// may have moved on in time or set to record what the server sees.
    pub fn measure_on(&self, sim: &mut Simulator, requests: &[Request], load: Load) -> Measurement {
        let value = Bytes::from(vec![b'v'; self.value_size]);
        let before = counters(&sim.engine().scheme_stats(), sim.storage_bytes());
        let started = sim.elapsed();
        let clients = load.clients.max(1);
        let depth = load.pipeline.max(1);
        let mut latency =
            Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds");
        let mut errors = 0;
        // token → (client, when it was due)
        let mut in_flight: HashMap<u64, (usize, Duration)> = HashMap::new();
        let mut per_client = vec![0usize; clients];
        let mut next = 0;
        while next < requests.len() || !in_flight.is_empty() {
            // Send what may be sent: closed loop fills every client's pipeline; open loop sends
            // every request whose time has come.
            while next < requests.len() {
                let client = next % clients;
                let due = match load.rate {
                    Some(rate) => started + Duration::from_secs_f64(next as f64 / rate),
                    None => sim.elapsed(),
                };
                if per_client[client] >= depth || due > sim.elapsed() {
                    break;
                }
                let request = requests[next];
                let key = Bytes::from(key_name(request.key));
                let command = if request.write {
                    Command::Set {
                        key,
                        value: value.clone(),
                        condition: SetCondition::Always,
                    }
                } else {
                    Command::Get(key)
                };
                let token = sim.submit(client as u64, command);
                in_flight.insert(token, (client, due));
                per_client[client] += 1;
                next += 1;
            }
            let next_due = match load.rate {
                Some(rate) if next < requests.len() => {
                    Some(started + Duration::from_secs_f64(next as f64 / rate))
                }
                _ => None,
            };
            let wait = next_due.map_or(Duration::from_secs(3600), |due| {
                due.saturating_sub(sim.elapsed())
            });
            if !sim.run_until(wait, Simulator::has_outcomes) {
                match next_due {
                    // Nothing happened before the next request is due: move time there.
                    Some(due) => sim.run_for(due.saturating_sub(sim.elapsed())),
                    None => {
                        tracing::error!(
                            stuck = in_flight.len(),
                            "no answer within an hour of virtual time"
                        );
                        errors += in_flight.len() as u64;
                        break;
                    }
                }
            }
            for (token, at, outcome) in sim.drain_outcomes() {
                let (client, due) = in_flight.remove(&token).expect("a known token");
                per_client[client] -= 1;
                if matches!(outcome, Outcome::Error(_)) {
                    errors += 1;
                }
                latency.saturating_record(at.saturating_sub(due).as_micros().max(1) as u64);
            }
        }
        let after = counters(&sim.engine().scheme_stats(), sim.storage_bytes());
        let subject = Subject {
            scheme: self.scheme.to_string(),
            mode: Mode::InProcess,
            workload: self.workload.clone(),
            keys: self.keys,
        };
        let timing = Timing {
            ops: latency.len(),
            errors,
            seconds: (sim.elapsed() - started).as_secs_f64(),
        };
        Measurement::new(subject, timing, &latency, after.since(before), None)
    }
}

fn counters(stats: &SchemeStats, storage_bytes: u64) -> Counters {
    Counters {
        real: stats.real_accesses,
        dummy: stats.dummy_accesses,
        cache_hits: stats.cache_hits,
        cache_misses: stats.cache_misses,
        storage_bytes,
    }
}
