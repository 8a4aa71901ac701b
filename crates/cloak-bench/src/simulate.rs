//! One scheme on one workload in this process, with virtual time: `cloak_core::Simulator` runs
//! the engine and the scheme against an in-memory store whose round trips take a fixed virtual
//! delay. No sockets, no real clock: a simulation runs as fast as the scheme's code does, and
//! its throughput and latency are in virtual time. It shows what a scheme's protocol costs
//! (utilisation, dummy traffic, bytes, latency in batches), not how fast this machine is.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use cloak_core::{
    Command, Engine, KeyDirectory, Limits, Outcome, Record, RecordLayout, SchemeStats,
    SetCondition, Simulator, Slot,
};
use cloak_crypto::{KeyHasher, MasterKey};
use cloak_schemes::{BuildError, SchemeName, SchemeOptions, Start, StoreSpec};
use hdrhistogram::Histogram;

use crate::preload;
use crate::report::{Counters, Measurement, Mode, Subject, Timing};
use crate::run::Load;
use crate::workload::{KEY_SIZE, Request, key_name};

/// Virtual time a new store gets to lay out its preloaded records before measuring.
const SETTLE: Duration = Duration::from_millis(200);

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
            max_key: KEY_SIZE,
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
        let value = Bytes::from(vec![b'v'; self.value_size]);
        let records: Vec<(Slot, Record)> = preload::records(0..self.keys, &value).collect();
        let directory = KeyDirectory::restore(
            KeyHasher::new(&master),
            self.keys as usize,
            records.iter().map(|(slot, r)| (*slot, &r.key[..])),
        );
        let start = Start::with(records, Start::generation_base(1));
        let scheme = cloak_schemes::build(self.scheme, &store, &self.options, &master, start)?;
        let limits = Limits {
            max_key: KEY_SIZE,
            max_value: self.value_size,
            max_keys_per_command: 1000,
        };
        let engine = Engine::new(scheme, directory, limits).with_next_version(2);
        let mut sim = Simulator::new(engine).with_storage_delay(self.storage_delay);
        // Let the scheme lay out the preloaded records before anything is measured.
        sim.run_for(SETTLE);
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
        let scheme_info = scheme_info(sim);
        let replayed = self.replay(sim, requests, load);
        let subject = Subject {
            scheme: self.scheme.to_string(),
            mode: Mode::InProcess,
            workload: self.workload.clone(),
            keys: self.keys,
        };
        let mut measurement = Measurement::new(
            subject,
            replayed.timing(),
            &replayed.latency,
            replayed.counters,
            None,
        );
        measurement.scheme_info = scheme_info;
        measurement
    }

    /// Sends `requests` with `load` through `sim` and collects what came back.
    pub fn replay(&self, sim: &mut Simulator, requests: &[Request], load: Load) -> Replayed {
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
        // One entry per free pipeline place; requests go, in order, to whichever client has
        // room (as the socket runs do).
        let mut room: VecDeque<usize> = (0..depth).flat_map(|_| 0..clients).collect();
        let mut next = 0;
        while next < requests.len() || !in_flight.is_empty() {
            // Send what may be sent: closed loop fills every client's pipeline; open loop sends
            // every request whose time has come.
            while next < requests.len() {
                let due = match load.rate {
                    Some(rate) => started + Duration::from_secs_f64(next as f64 / rate),
                    None => sim.elapsed(),
                };
                if due > sim.elapsed() {
                    break;
                }
                let client = match (room.pop_front(), load.rate) {
                    (Some(client), _) => client,
                    // Open loop sends what is due, however much is in flight.
                    (None, Some(_)) => next % clients,
                    (None, None) => break,
                };
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
                next += 1;
            }
            let next_due = match load.rate {
                Some(rate) if next < requests.len() => {
                    Some(started + Duration::from_secs_f64(next as f64 / rate))
                }
                _ => None,
            };
            // Wait for an answer or until the next request is due. A request already due waits
            // only because its client's pipeline is full: that needs an answer, not time.
            let due_in = next_due
                .map(|due| due.saturating_sub(sim.elapsed()))
                .filter(|wait| !wait.is_zero());
            let wait = due_in.unwrap_or(Duration::from_secs(3600));
            if !sim.run_until(wait, Simulator::has_outcomes) {
                match (due_in, next_due) {
                    // Nothing happened before the next request is due: move time there.
                    (Some(_), Some(due)) => sim.run_for(due.saturating_sub(sim.elapsed())),
                    _ => {
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
                room.push_back(client);
                if matches!(outcome, Outcome::Error(_)) {
                    errors += 1;
                }
                latency.saturating_record(at.saturating_sub(due).as_micros().max(1) as u64);
            }
        }
        let after = counters(&sim.engine().scheme_stats(), sim.storage_bytes());
        Replayed {
            latency,
            errors,
            seconds: (sim.elapsed() - started).as_secs_f64(),
            counters: after.since(before),
        }
    }
}

/// What one simulated run sent and got back.
pub struct Replayed {
    /// Latency of every answer, in virtual µs.
    pub latency: Histogram<u64>,
    pub errors: u64,
    /// Virtual seconds the run took.
    pub seconds: f64,
    /// The scheme's counters over the run.
    pub counters: Counters,
}

impl Replayed {
    pub fn timing(&self) -> Timing {
        Timing {
            ops: self.latency.len(),
            errors: self.errors,
            seconds: self.seconds,
        }
    }
}

/// The scheme's parameters as it describes them.
pub fn scheme_info(sim: &Simulator) -> BTreeMap<String, String> {
    sim.engine()
        .scheme()
        .describe()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Distribution, Mix, Ycsb, take};

    #[test]
    fn open_loop_sends_what_is_due_however_much_is_in_flight() {
        // One connection, one request in flight at most if the pipeline capped open loop:
        // a 1 ms round trip would hold it to 1000 requests a second, a tenth of the rate.
        let requests = take(&mut Ycsb::new(Mix::C, Distribution::Uniform, 100, 1), 2000).unwrap();
        let simulation = Simulation {
            scheme: SchemeName::Unsafe,
            keys: 100,
            value_size: 16,
            options: SchemeOptions::default(),
            storage_delay: Duration::from_millis(1),
            workload: "ycsb-c".into(),
            seed: 1,
        };
        let load = Load {
            clients: 1,
            pipeline: 1,
            rate: Some(10_000.0),
        };
        let measured = simulation.measure(&requests, load).unwrap();
        assert_eq!(measured.errors, 0);
        let throughput = measured.throughput.unwrap();
        assert!(throughput > 9_000.0, "{throughput} requests a second");
        assert!(measured.latency_us.p99 < 5_000, "{:?}", measured.latency_us);
    }
}
