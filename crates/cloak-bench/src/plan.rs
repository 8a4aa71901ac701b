//! What a benchmark run varies: the workload it sends and the one parameter a sweep changes.
//!
//! A [`WorkloadSpec`] names a workload and its settings and generates its requests; a [`Sweep`]
//! is `name=v1,v2,…` from the command line. Applying a sweep value to the store settings is the
//! caller's business (the `cloak` binary owns those settings); what changes the workload is here.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::workload::{
    self, Distribution, Mix, Request, Temporal, Trace, TraceError, Workload, Ycsb,
};

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("unknown workload {0:?}; choose temporal, ycsb-a, ycsb-b, ycsb-c, ycsb-f or trace")]
    UnknownWorkload(String),
    #[error("--workload trace needs --trace FILE")]
    NoTrace,
    #[error("unknown distribution {0:?}; choose zipfian or uniform")]
    UnknownDistribution(String),
    #[error(
        "--sweep takes NAME=V1,V2,… with NAME one of {names}; got {0:?}",
        names = Parameter::NAMES.join(", ")
    )]
    Sweep(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Trace(#[from] TraceError),
}

#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadKind {
    /// The Cloak paper's temporal workload.
    Temporal,
    Ycsb(Mix),
    /// Replay a file.
    Trace(PathBuf),
}

impl WorkloadKind {
    pub fn parse(name: &str, trace: Option<PathBuf>) -> Result<Self, PlanError> {
        Ok(match name {
            "temporal" => WorkloadKind::Temporal,
            "ycsb-a" => WorkloadKind::Ycsb(Mix::A),
            "ycsb-b" => WorkloadKind::Ycsb(Mix::B),
            "ycsb-c" => WorkloadKind::Ycsb(Mix::C),
            "ycsb-f" => WorkloadKind::Ycsb(Mix::F),
            "trace" => WorkloadKind::Trace(trace.ok_or(PlanError::NoTrace)?),
            other => return Err(PlanError::UnknownWorkload(other.to_string())),
        })
    }
}

pub fn parse_distribution(name: &str) -> Result<Distribution, PlanError> {
    match name {
        "zipfian" => Ok(Distribution::Zipfian),
        "uniform" => Ok(Distribution::Uniform),
        other => Err(PlanError::UnknownDistribution(other.to_string())),
    }
}

/// A workload and everything that shapes it.
#[derive(Clone, Debug)]
pub struct WorkloadSpec {
    pub kind: WorkloadKind,
    /// YCSB's key distribution.
    pub distribution: Distribution,
    /// Keys in the store (a trace uses as many as it names).
    pub keys: u64,
    pub requests: u64,
    /// Temporal: Zipf exponent of recency ranks.
    pub zipf_exponent: f64,
    /// Temporal: fraction of writes.
    pub write_ratio: f64,
    pub seed: u64,
}

impl WorkloadSpec {
    fn source(&self) -> Result<Box<dyn Workload>, PlanError> {
        Ok(match &self.kind {
            WorkloadKind::Temporal => Box::new(Temporal::new(
                self.keys,
                self.zipf_exponent,
                self.write_ratio,
                self.seed,
            )),
            WorkloadKind::Ycsb(mix) => {
                Box::new(Ycsb::new(*mix, self.distribution, self.keys, self.seed))
            }
            WorkloadKind::Trace(path) => Box::new(Trace::open(path)?),
        })
    }

    /// The requests, and the number of keys the store needs for them.
    pub fn generate(&self) -> Result<(Vec<Request>, u64), PlanError> {
        let mut source = self.source()?;
        let requests = workload::take(source.as_mut(), self.requests)?;
        let keys = match self.kind {
            WorkloadKind::Trace(_) => requests.iter().map(|r| r.key + 1).max().unwrap_or(1),
            _ => self.keys,
        };
        Ok((requests, keys))
    }

    /// A few words for reports.
    pub fn describe(&self) -> String {
        self.source()
            .map(|s| s.describe())
            .unwrap_or_else(|e| e.to_string())
    }
}

/// A parameter a sweep can vary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parameter {
    /// The temporal workload's skew (the paper's Figure 4).
    ZipfExponent,
    /// Cloak's batch size, reached through `b_1` (Figure 5).
    BatchSize,
    /// Cloak's cache (Figure 6).
    CacheSize,
    /// Value size in bytes (Figure 7).
    ValueSize,
    /// Keys in the store (cost per operation as the store grows).
    Keys,
    /// Open-loop request rate.
    Rate,
    /// 0: a server in memory and a proxy without a journal; 1: the server logs every batch to
    /// disk (`--data-dir`) and the proxy journals every write (`--state-dir`) before answering.
    Durable,
    /// 0: both of the proxy's links in the clear; 1: both over TLS (see `--tls`).
    Tls,
}

impl Parameter {
    pub const NAMES: [&'static str; 8] = [
        "zipf-exponent",
        "batch-size",
        "cache-size",
        "value-size",
        "keys",
        "rate",
        "durable",
        "tls",
    ];
    const ALL: [Parameter; 8] = [
        Parameter::ZipfExponent,
        Parameter::BatchSize,
        Parameter::CacheSize,
        Parameter::ValueSize,
        Parameter::Keys,
        Parameter::Rate,
        Parameter::Durable,
        Parameter::Tls,
    ];

    pub fn as_str(self) -> &'static str {
        let index = Self::ALL
            .iter()
            .position(|p| *p == self)
            .expect("every parameter is listed");
        Self::NAMES[index]
    }

    /// Whether values must be whole numbers.
    fn integral(self) -> bool {
        !matches!(
            self,
            Parameter::ZipfExponent | Parameter::Rate | Parameter::Durable | Parameter::Tls
        )
    }
}

impl fmt::Display for Parameter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `--sweep name=v1,v2,…`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sweep {
    pub parameter: Parameter,
    pub values: Vec<f64>,
}

impl FromStr for Sweep {
    type Err = PlanError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || PlanError::Sweep(text.to_string());
        let (name, list) = text.split_once('=').ok_or_else(bad)?;
        let index = Parameter::NAMES
            .iter()
            .position(|n| *n == name.trim())
            .ok_or_else(bad)?;
        let parameter = Parameter::ALL[index];
        let values = list
            .split(',')
            .map(|v| v.trim().parse::<f64>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| bad())?;
        if values.is_empty() || values.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err(bad());
        }
        let switch = matches!(parameter, Parameter::Durable | Parameter::Tls);
        if switch && values.iter().any(|v| *v != 0.0 && *v != 1.0) {
            return Err(PlanError::Invalid(format!(
                "--sweep {parameter} takes 0 (off) and 1 (on), got {list}"
            )));
        }
        if parameter.integral() && values.iter().any(|v| v.fract() != 0.0 || *v < 1.0) {
            return Err(PlanError::Invalid(format!(
                "--sweep {name} takes whole numbers ≥ 1, got {list}"
            )));
        }
        Ok(Sweep { parameter, values })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_parse_and_bad_ones_say_why() {
        let s: Sweep = "zipf-exponent=0,0.5,1".parse().unwrap();
        assert_eq!(s.parameter, Parameter::ZipfExponent);
        assert_eq!(s.values, [0.0, 0.5, 1.0]);
        assert_eq!(
            "keys=10000,1000000".parse::<Sweep>().unwrap().values,
            [1e4, 1e6]
        );
        assert!(matches!(
            "cache=1".parse::<Sweep>(),
            Err(PlanError::Sweep(_))
        ));
        assert!(matches!(
            "batch-size=100.5".parse::<Sweep>(),
            Err(PlanError::Invalid(_))
        ));
        assert!(matches!("keys=".parse::<Sweep>(), Err(PlanError::Sweep(_))));
        assert_eq!("durable=0,1".parse::<Sweep>().unwrap().values, [0.0, 1.0]);
        assert!(matches!(
            "durable=0,2".parse::<Sweep>(),
            Err(PlanError::Invalid(_))
        ));
    }

    #[test]
    fn traces_need_a_file_and_size_the_store() {
        assert!(matches!(
            WorkloadKind::parse("trace", None),
            Err(PlanError::NoTrace)
        ));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, "a\nb x\na\nc\n").unwrap();
        let spec = WorkloadSpec {
            kind: WorkloadKind::parse("trace", Some(path)).unwrap(),
            distribution: Distribution::Zipfian,
            keys: 1,
            requests: 10,
            zipf_exponent: 1.0,
            write_ratio: 0.5,
            seed: 1,
        };
        let (requests, keys) = spec.generate().unwrap();
        assert_eq!((requests.len(), keys), (4, 3));
        assert!(requests[1].write && !requests[2].write);
    }
}
