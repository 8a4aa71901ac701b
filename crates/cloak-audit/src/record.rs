//! Playing the paper's §5 game in process: the scheme serves each of the adversary's two
//! workloads in its own simulator (virtual time, `cloak_bench::simulate`), and each server view
//! is recorded (`Simulator::record`) for the same window of time.
//!
//! Both runs start at the same virtual instant, once every simulator has loaded the keys, and are
//! watched for as long as the slower one needs plus a margin, so a scheme whose traffic goes on
//! after its clients stop (Cloak's fixed batches) is seen doing so, and one that falls silent is
//! seen falling silent. The same scheme also runs idle and lightly loaded over the same window,
//! for the volume check, and serves the first workload a second time as a control (a difference
//! between two runs of one workload is no evidence about the workload). Every scheme draws its
//! randomness from its own seed per run, as two independent executions would.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cloak_bench::report::Measurement;
use cloak_bench::run::Load;
use cloak_bench::simulate::Simulation;
use cloak_bench::workload::Request;
use cloak_core::{ElementCodec, ElementFormat, Simulator};
use cloak_crypto::Sealer;
use cloak_schemes::{BuildError, SchemeName, SchemeOptions};

use crate::truth::{Truth, TruthRecorder};
use crate::view::ServerView;

/// How to run one scheme.
#[derive(Clone, Debug)]
pub struct Setup {
    pub scheme: SchemeName,
    pub options: SchemeOptions,
    pub keys: u64,
    pub value_size: usize,
    /// Virtual time of a storage round trip.
    pub storage_delay: Duration,
    /// How clients send the workloads.
    pub load: Load,
    pub seed: u64,
}

/// One run as recorded.
pub struct Recording {
    pub workload: String,
    /// Client requests sent.
    pub sent: usize,
    pub view: ServerView,
    /// What the elements behind each access held (for the two workloads, not the load runs).
    pub truth: Option<Truth>,
    pub measurement: Measurement,
}

/// The game's two runs, a second run of the first workload (the control), and the same
/// scheme idle and lightly loaded.
pub struct Played {
    pub a: Recording,
    pub b: Recording,
    pub control: Recording,
    pub idle: Recording,
    pub light: Recording,
}

/// Share of the first workload sent in the light-load run, spread over the window.
pub const LIGHT_SHARE: usize = 10;

/// The window: the slower run's time plus a tenth of it, and at least this.
const MIN_TAIL: Duration = Duration::from_millis(100);

/// Longest the loading may take to settle (nothing queued), in virtual time.
const SETTLE_LIMIT: Duration = Duration::from_secs(3600);

/// Settling time after which a store whose cache keeps records, or whose batches never stop,
/// counts as settled once nothing is queued (virtual time).
const SETTLE_AT_MOST: Duration = Duration::from_secs(10);

struct Session {
    simulation: Simulation,
    sim: Simulator,
    truth: Option<Arc<Mutex<TruthRecorder>>>,
}

impl Session {
    fn start(setup: &Setup, workload: &str, seed: u64) -> Result<Self, BuildError> {
        let simulation = Simulation {
            scheme: setup.scheme,
            keys: setup.keys,
            value_size: setup.value_size,
            options: setup.options.clone(),
            storage_delay: setup.storage_delay,
            workload: workload.to_string(),
            seed,
        };
        let mut sim = simulation.start()?;
        // Writes are acknowledged before storage holds them: let the loading finish, so the
        // game starts from a settled store, not from the tail of the loading. Some schemes
        // never get to zero records held only at the proxy, or to idle storage (Waffle's cache
        // holds records for good, and its batches never stop): for them, a while after the
        // queue has drained is settled enough.
        let loaded = sim.elapsed();
        sim.run_until(SETTLE_LIMIT, |s| {
            let stats = s.engine().scheme_stats();
            let written = stats.unwritten == 0 && s.storage_idle();
            stats.queued == 0 && (written || s.elapsed() - loaded >= SETTLE_AT_MOST)
        });
        Ok(Self {
            simulation,
            sim,
            truth: None,
        })
    }

    /// Moves on to `t0` and starts recording there (and noting the ground truth if asked).
    fn begin(&mut self, t0: Duration, with_truth: bool) -> Result<(), BuildError> {
        self.sim.run_for(t0.saturating_sub(self.sim.elapsed()));
        self.sim.record();
        if with_truth {
            let layout = self.simulation.layout();
            let sealed = ElementCodec::new(layout, Sealer::new(&self.simulation.master_key())?);
            let formats = vec![ElementFormat::Sealed(sealed), ElementFormat::Plain(layout)];
            let recorder = Arc::new(Mutex::new(TruthRecorder::new(formats, self.sim.store())));
            let tapped = recorder.clone();
            self.sim.tap(move |_, op| {
                tapped
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .observe(op)
            });
            self.truth = Some(recorder);
        }
        Ok(())
    }

    fn run(&mut self, requests: &[Request], load: Load) -> Measurement {
        self.simulation.measure_on(&mut self.sim, requests, load)
    }

    /// Watches until `t0 + window` and hands over what was seen during the window.
    fn finish(
        mut self,
        t0: Duration,
        window: Duration,
        sent: usize,
        measurement: Measurement,
    ) -> Recording {
        let end = t0 + window;
        self.sim.run_for(end.saturating_sub(self.sim.elapsed()));
        let trace = self.sim.take_trace();
        let view = ServerView::new(&trace, t0, window);
        let truth = self.truth.map(|recorder| {
            let mut truth = recorder
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            // Both were fed by the same requests in the same order; the view ends at the window.
            debug_assert_eq!(truth.requests, trace.len(), "ground truth out of step");
            truth.accesses.truncate(view.accesses.len());
            truth
        });
        Recording {
            workload: self.simulation.workload,
            sent,
            view,
            truth,
            measurement,
        }
    }
}

/// Plays the game for `setup`'s scheme on workloads `a` and `b`: `(name, requests)`.
pub fn play(
    setup: &Setup,
    a: (&str, &[Request]),
    b: (&str, &[Request]),
) -> Result<Played, BuildError> {
    let mut sessions = [
        Session::start(setup, a.0, setup.seed)?,
        Session::start(setup, b.0, setup.seed.wrapping_add(1))?,
        Session::start(setup, "idle", setup.seed.wrapping_add(2))?,
        Session::start(setup, "light load", setup.seed.wrapping_add(3))?,
        Session::start(setup, a.0, setup.seed.wrapping_add(4))?,
    ];
    let t0 = sessions
        .iter()
        .map(|s| s.sim.elapsed())
        .max()
        .unwrap_or_default();
    for (i, session) in sessions.iter_mut().enumerate() {
        session.begin(t0, i < 2)?;
    }
    let [mut run_a, mut run_b, mut idle, mut light, mut control] = sessions;
    let measured_a = run_a.run(a.1, setup.load);
    let measured_control = control.run(a.1, setup.load);
    let took_a = run_a.sim.elapsed() - t0;
    let measured_b = run_b.run(b.1, setup.load);
    let took_b = run_b.sim.elapsed() - t0;
    let longest = took_a.max(took_b);
    let window = longest + (longest / 10).max(MIN_TAIL);

    let few = &a.1[..a.1.len().div_ceil(LIGHT_SHARE)];
    let rate = few.len() as f64 / window.as_secs_f64();
    let light_load = Load {
        rate: Some(rate),
        ..setup.load
    };
    let measured_light = light.run(few, light_load);
    let measured_idle = idle.run(&[], setup.load);
    Ok(Played {
        a: run_a.finish(t0, window, a.1.len(), measured_a),
        b: run_b.finish(t0, window, b.1.len(), measured_b),
        control: control.finish(t0, window, a.1.len(), measured_control),
        idle: idle.finish(t0, window, 0, measured_idle),
        light: light.finish(t0, window, few.len(), measured_light),
    })
}
