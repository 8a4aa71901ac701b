//! One audit: the adversary's two workloads drawn once, then every scheme played on them, judged
//! by every distinguisher, attacked by every attack, checked under load, and its cost measured.

use cloak_bench::report::Measurement;
use cloak_bench::run::Load;
use cloak_bench::simulate::Simulation;
use cloak_bench::workload::{self, Request, TraceError, WorkloadSpec};
use cloak_schemes::{BuildError, SchemeName, SchemeOptions};

use crate::attack::{self, AttackResult, Auxiliary, VolumeCheck, volume_check};
use crate::distinguish::{self, Finding};
use crate::record::{self, Setup};

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("workload {workload} uses key {key}, beyond the store's {keys} keys; raise --capacity")]
    KeyBeyondStore {
        workload: String,
        key: u64,
        keys: u64,
    },
    #[error("workload {0} gave no requests")]
    Empty(String),
}

/// The adversary's choice: two workloads, how many requests of each, over how many keys.
#[derive(Clone, Debug)]
pub struct Game {
    pub a: WorkloadSpec,
    pub b: WorkloadSpec,
    pub requests: u64,
    pub keys: u64,
    pub seed: u64,
}

/// A seed for one purpose, from the game's seed.
fn derive(seed: u64, purpose: u64) -> u64 {
    (seed ^ purpose.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_mul(0xbf58_476d_1ce4_e5b9)
}

/// The two workloads' runs and the adversary's knowledge of each.
pub struct Workloads {
    pub names: [String; 2],
    pub requests: [Vec<Request>; 2],
    pub aux: [Auxiliary; 2],
}

impl Workloads {
    pub fn draw(game: &Game) -> Result<Self, AuditError> {
        let draw = |spec: &WorkloadSpec, seed: u64| -> Result<Vec<Request>, AuditError> {
            let mut run = spec.build(game.keys, seed)?;
            let requests = workload::take(run.as_mut(), game.requests)?;
            if requests.is_empty() {
                return Err(AuditError::Empty(spec.to_string()));
            }
            if let Some(r) = requests.iter().find(|r| r.key >= game.keys) {
                return Err(AuditError::KeyBeyondStore {
                    workload: spec.to_string(),
                    key: r.key,
                    keys: game.keys,
                });
            }
            Ok(requests)
        };
        let a = draw(&game.a, derive(game.seed, 1))?;
        let b = draw(&game.b, derive(game.seed, 2))?;
        // The adversary knows the distributions it chose: an independent sample of each (a
        // trace is one fixed sequence, so its sample is itself).
        let knowledge = |spec: &WorkloadSpec, run: &[Request], purpose| {
            if spec.is_fixed() {
                Ok(Auxiliary::from_requests(run))
            } else {
                draw(spec, derive(game.seed, purpose)).map(|s| Auxiliary::from_requests(&s))
            }
        };
        let aux = [knowledge(&game.a, &a, 3)?, knowledge(&game.b, &b, 4)?];
        Ok(Self {
            names: [game.a.to_string(), game.b.to_string()],
            requests: [a, b],
            aux,
        })
    }
}

/// What one scheme leaks, and what it costs.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SchemeAudit {
    pub scheme: String,
    pub findings: Vec<Finding>,
    /// The volume and timing distinguishers on the scheme idle against fully loaded (A).
    pub load_findings: Vec<Finding>,
    pub attacks: Vec<AttackResult>,
    pub volume: VolumeCheck,
    /// Each workload's run, measured in process (virtual time).
    pub cost: [Measurement; 2],
    /// How long the server watched each run.
    pub window_seconds: f64,
    pub batches: [u32; 2],
    pub server_requests: [usize; 2],
    /// Share of written elements that show their key in the clear.
    pub plaintext: [Option<f64>; 2],
}

impl SchemeAudit {
    /// The distinguisher that did best: `(advantage, name)`.
    pub fn best_distinguisher(&self) -> Option<&Finding> {
        self.findings
            .iter()
            .filter(|f| f.differs())
            .max_by(|x, y| x.advantage.total_cmp(&y.advantage))
    }

    /// The views differ to some distinguisher.
    pub fn distinguishable(&self) -> bool {
        self.findings.iter().any(Finding::differs)
    }

    /// Idle and loaded runs differ to some volume or timing distinguisher.
    pub fn load_distinguishable(&self) -> bool {
        self.load_findings.iter().any(Finding::differs)
    }

    /// An attack's results on both workloads.
    pub fn attack(&self, name: &str) -> Vec<&AttackResult> {
        self.attacks.iter().filter(|a| a.attack == name).collect()
    }
}

/// Plays `setup`'s scheme on `workloads` and judges what its server saw.
pub fn audit_scheme(setup: &Setup, workloads: &Workloads) -> Result<SchemeAudit, AuditError> {
    let [name_a, name_b] = &workloads.names;
    let played = record::play(
        setup,
        (name_a, &workloads.requests[0]),
        (name_b, &workloads.requests[1]),
    )?;
    let (a, b) = (&played.a, &played.b);
    let control = &played.control.view;
    let findings = distinguish::all()
        .iter()
        .map(|d| {
            let finding = distinguish::evaluate(d.as_ref(), &a.view, &b.view);
            finding.with_control(&distinguish::evaluate(d.as_ref(), &a.view, control))
        })
        .collect();
    let load_findings = distinguish::volume_and_timing()
        .iter()
        .map(|d| distinguish::evaluate(d.as_ref(), &played.idle.view, &a.view))
        .collect();
    let mut attacks = Vec::new();
    for (i, ((run, other), aux)) in [(a, b), (b, a)].into_iter().zip(&workloads.aux).enumerate() {
        let truth = run.truth.as_ref().map_or(&[][..], |t| &t.accesses);
        for attack in attack::all() {
            let seed = derive(setup.seed, 10 + i as u64);
            attacks.push(attack::run(
                attack.as_ref(),
                &run.workload,
                &run.view,
                &other.view,
                truth,
                aux,
                seed,
            ));
        }
    }
    let volume = volume_check(&[
        ("idle".into(), played.idle.sent, &played.idle.view),
        (
            format!("1/{} load", record::LIGHT_SHARE),
            played.light.sent,
            &played.light.view,
        ),
        ("full load".into(), a.sent, &a.view),
    ]);
    let plaintext = [a, b].map(|run| {
        run.truth
            .as_ref()
            .filter(|t| t.written > 0)
            .map(|t| t.plaintext as f64 / t.written as f64)
    });
    Ok(SchemeAudit {
        scheme: setup.scheme.to_string(),
        findings,
        load_findings,
        attacks,
        volume,
        cost: [a.measurement.clone(), b.measurement.clone()],
        window_seconds: a.view.window.as_secs_f64(),
        batches: [a.view.batches(), b.view.batches()],
        server_requests: [a.view.requests.len(), b.view.requests.len()],
        plaintext,
    })
}

/// `unsafe`'s throughput on each workload with `setup`'s store and load: the cost yardstick.
pub fn baseline(setup: &Setup, workloads: &Workloads) -> Result<[Option<f64>; 2], AuditError> {
    let measure = |i: usize| -> Result<Option<f64>, AuditError> {
        let simulation = Simulation {
            scheme: SchemeName::Unsafe,
            keys: setup.keys,
            value_size: setup.value_size,
            options: SchemeOptions::default(),
            storage_delay: setup.storage_delay,
            workload: workloads.names[i].clone(),
            seed: setup.seed,
        };
        Ok(simulation
            .measure(&workloads.requests[i], setup.load)?
            .throughput)
    };
    Ok([measure(0)?, measure(1)?])
}

/// Everything an audit found, for the reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AuditReport {
    pub workloads: [String; 2],
    pub requests: u64,
    pub keys: u64,
    pub seed: u64,
    pub load: LoadSummary,
    pub schemes: Vec<SchemeAudit>,
    /// Schemes that could not be audited, and why.
    pub failed: Vec<(String, String)>,
    /// `unsafe`'s throughput on each workload (`None` inside: no virtual time passed).
    pub baseline: Option<[Option<f64>; 2]>,
}

/// How the clients sent, for the report.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct LoadSummary {
    pub clients: usize,
    pub pipeline: usize,
    pub storage_delay_ms: f64,
}

impl LoadSummary {
    pub fn of(load: Load, storage_delay: std::time::Duration) -> Self {
        Self {
            clients: load.clients,
            pipeline: load.pipeline,
            storage_delay_ms: storage_delay.as_secs_f64() * 1000.0,
        }
    }
}
