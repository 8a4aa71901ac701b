//! Workloads named on a command line: `NAME[:PARAM=VALUE,...]`, see [`SYNTAX`].
//!
//! A spec names a distribution, not a run: [`WorkloadSpec::build`] draws a run of it over a
//! number of keys from a seed, so one spec gives as many independent samples as wanted (the
//! auditor's adversary uses one as its auxiliary knowledge).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use super::{
    Distribution, Markov, MarkovChain, Mix, OneKey, Temporal, Trace, TraceError, Uniform, Workload,
    Ycsb,
};

/// What `--workload` accepts, for `--help`.
pub const SYNTAX: &str = "\
NAME[:PARAM=VALUE,...] over the store's keys:
  uniform[:writes=0.5]             every key equally likely
  one-key[:key=0,writes=0.5]       every request on one key
  temporal[:s=1.0,writes=0.5]      Cloak paper §7.1: Zipf(s) over recency ranks
  ycsb-a|ycsb-b|ycsb-c|ycsb-f[:zipfian|:uniform]
                                   YCSB core mixes (zipfian 0.99, scrambled)
  markov[:fanout=4,s=1.0,jump=0.1,pop=1.0,writes=0,graph=1]
                                   correlated queries: the next key is one of the
                                   previous key's `fanout` successors (Zipf s over
                                   them), or with probability jump a fresh start
                                   drawn from Zipf(pop); graph seeds the chain
  trace:PATH                       replay a file, one request per line
                                   (`KEY` reads, `KEY ANYTHING` writes)
writes is the fraction of requests that are writes.";

#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadSpec {
    Uniform {
        writes: f64,
    },
    OneKey {
        key: u64,
        writes: f64,
    },
    Temporal {
        exponent: f64,
        writes: f64,
    },
    Ycsb {
        mix: Mix,
        distribution: Distribution,
    },
    Markov {
        chain: MarkovChain,
        writes: f64,
    },
    Trace(PathBuf),
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error(
        "unknown workload {0:?}; choose uniform, one-key, temporal, ycsb-a/b/c/f, markov or trace:PATH"
    )]
    Unknown(String),
    #[error("workload {workload}: unknown parameter {param:?} (it takes {allowed})")]
    Parameter {
        workload: &'static str,
        param: String,
        allowed: &'static str,
    },
    #[error("workload {workload}: {param} must be {wanted}, got {value:?}")]
    Value {
        workload: &'static str,
        param: &'static str,
        wanted: &'static str,
        value: String,
    },
    #[error("trace needs a file: trace:PATH")]
    NoPath,
}

/// A spec's parameters, each taken at most once; what is left over is an error.
struct Params<'a> {
    workload: &'static str,
    allowed: &'static str,
    items: Vec<(&'a str, Option<&'a str>)>,
}

impl<'a> Params<'a> {
    fn parse(workload: &'static str, allowed: &'static str, text: Option<&'a str>) -> Self {
        let items = text
            .into_iter()
            .flat_map(|t| t.split(','))
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| match item.split_once('=') {
                Some((name, value)) => (name.trim(), Some(value.trim())),
                None => (item, None),
            })
            .collect();
        Self {
            workload,
            allowed,
            items,
        }
    }

    fn take(&mut self, name: &str) -> Option<Option<&'a str>> {
        let at = self.items.iter().position(|(n, _)| *n == name)?;
        Some(self.items.remove(at).1)
    }

    /// A number in `range` (default when absent).
    fn number<T: FromStr + PartialOrd + Copy + fmt::Display>(
        &mut self,
        name: &'static str,
        default: T,
        range: (T, T),
        wanted: &'static str,
    ) -> Result<T, SpecError> {
        let Some(value) = self.take(name) else {
            return Ok(default);
        };
        let bad = || SpecError::Value {
            workload: self.workload,
            param: name,
            wanted,
            value: value.unwrap_or("").to_string(),
        };
        let parsed: T = value.ok_or_else(bad)?.parse().map_err(|_| bad())?;
        if parsed < range.0 || parsed > range.1 {
            return Err(bad());
        }
        Ok(parsed)
    }

    fn writes(&mut self, default: f64) -> Result<f64, SpecError> {
        self.number("writes", default, (0.0, 1.0), "a fraction between 0 and 1")
    }

    fn finish(self) -> Result<(), SpecError> {
        match self.items.first() {
            None => Ok(()),
            Some((name, _)) => Err(SpecError::Parameter {
                workload: self.workload,
                param: name.to_string(),
                allowed: self.allowed,
            }),
        }
    }
}

impl FromStr for WorkloadSpec {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<Self, SpecError> {
        let text = text.trim();
        let (name, rest) = match text.split_once(':') {
            Some((name, rest)) => (name.trim(), Some(rest)),
            None => (text, None),
        };
        let spec = match name {
            "trace" => {
                let path = rest.map(str::trim).filter(|p| !p.is_empty());
                return Ok(WorkloadSpec::Trace(PathBuf::from(
                    path.ok_or(SpecError::NoPath)?,
                )));
            }
            "uniform" => {
                let mut p = Params::parse("uniform", "writes", rest);
                let spec = WorkloadSpec::Uniform {
                    writes: p.writes(0.5)?,
                };
                p.finish()?;
                spec
            }
            "one-key" => {
                let mut p = Params::parse("one-key", "key, writes", rest);
                let spec = WorkloadSpec::OneKey {
                    key: p.number("key", 0, (0, u64::MAX), "a key number")?,
                    writes: p.writes(0.5)?,
                };
                p.finish()?;
                spec
            }
            "temporal" => {
                let mut p = Params::parse("temporal", "s, writes", rest);
                let spec = WorkloadSpec::Temporal {
                    exponent: p.number("s", 1.0, (0.0, 100.0), "a Zipf exponent ≥ 0")?,
                    writes: p.writes(0.5)?,
                };
                p.finish()?;
                spec
            }
            "ycsb-a" | "ycsb-b" | "ycsb-c" | "ycsb-f" => {
                let mix = match name {
                    "ycsb-a" => Mix::A,
                    "ycsb-b" => Mix::B,
                    "ycsb-c" => Mix::C,
                    _ => Mix::F,
                };
                let mut p = Params::parse("ycsb", "zipfian or uniform", rest);
                let uniform = p.take("uniform").is_some();
                let zipfian = p.take("zipfian").is_some();
                if uniform && zipfian {
                    return Err(SpecError::Value {
                        workload: "ycsb",
                        param: "the distribution",
                        wanted: "one of zipfian and uniform",
                        value: "both".into(),
                    });
                }
                p.finish()?;
                WorkloadSpec::Ycsb {
                    mix,
                    distribution: if uniform {
                        Distribution::Uniform
                    } else {
                        Distribution::Zipfian
                    },
                }
            }
            "markov" => {
                let d = MarkovChain::default();
                let mut p = Params::parse("markov", "fanout, s, jump, pop, writes, graph", rest);
                let chain = MarkovChain {
                    fanout: p.number("fanout", d.fanout, (1, 1 << 20), "a count ≥ 1")?,
                    exponent: p.number("s", d.exponent, (0.0, 100.0), "a Zipf exponent ≥ 0")?,
                    jump: p.number("jump", d.jump, (0.0, 1.0), "a probability")?,
                    popularity: p.number(
                        "pop",
                        d.popularity,
                        (0.0, 100.0),
                        "a Zipf exponent ≥ 0",
                    )?,
                    graph: p.number("graph", d.graph, (0, u64::MAX), "a seed")?,
                };
                let spec = WorkloadSpec::Markov {
                    chain,
                    writes: p.writes(0.0)?,
                };
                p.finish()?;
                spec
            }
            _ => return Err(SpecError::Unknown(text.to_string())),
        };
        Ok(spec)
    }
}

impl WorkloadSpec {
    /// A run of this workload over keys `0..keys`, drawn from `seed`.
    pub fn build(&self, keys: u64, seed: u64) -> Result<Box<dyn Workload>, TraceError> {
        Ok(match self {
            WorkloadSpec::Uniform { writes } => Box::new(Uniform::new(keys, *writes, seed)),
            WorkloadSpec::OneKey { key, writes } => Box::new(OneKey::new(*key, *writes, seed)),
            WorkloadSpec::Temporal { exponent, writes } => {
                Box::new(Temporal::new(keys, *exponent, *writes, seed))
            }
            WorkloadSpec::Ycsb { mix, distribution } => {
                Box::new(Ycsb::new(*mix, *distribution, keys, seed))
            }
            WorkloadSpec::Markov { chain, writes } => {
                Box::new(Markov::new(keys, *chain, *writes, seed))
            }
            WorkloadSpec::Trace(path) => Box::new(Trace::open(path)?),
        })
    }

    /// Whether every run is the same (a trace), so an adversary's sample of it is the run itself.
    pub fn is_fixed(&self) -> bool {
        matches!(self, WorkloadSpec::Trace(_))
    }
}

impl fmt::Display for WorkloadSpec {
    /// The spec in the syntax it was parsed from, with every parameter spelt out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkloadSpec::Uniform { writes } => write!(f, "uniform:writes={writes}"),
            WorkloadSpec::OneKey { key, writes } => write!(f, "one-key:key={key},writes={writes}"),
            WorkloadSpec::Temporal { exponent, writes } => {
                write!(f, "temporal:s={exponent},writes={writes}")
            }
            WorkloadSpec::Ycsb { mix, distribution } => write!(
                f,
                "ycsb-{}:{}",
                format!("{mix:?}").to_lowercase(),
                match distribution {
                    Distribution::Zipfian => "zipfian",
                    Distribution::Uniform => "uniform",
                }
            ),
            WorkloadSpec::Markov { chain, writes } => write!(
                f,
                "markov:fanout={},s={},jump={},pop={},writes={writes},graph={}",
                chain.fanout, chain.exponent, chain.jump, chain.popularity, chain.graph
            ),
            WorkloadSpec::Trace(path) => write!(f, "trace:{}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_parameters() {
        let parse = |t: &str| t.parse::<WorkloadSpec>();
        assert_eq!(parse("uniform"), Ok(WorkloadSpec::Uniform { writes: 0.5 }));
        assert_eq!(
            parse("one-key:key=3,writes=0"),
            Ok(WorkloadSpec::OneKey {
                key: 3,
                writes: 0.0
            })
        );
        assert_eq!(
            parse("temporal:s=1.5"),
            Ok(WorkloadSpec::Temporal {
                exponent: 1.5,
                writes: 0.5
            })
        );
        assert_eq!(
            parse("ycsb-c:uniform"),
            Ok(WorkloadSpec::Ycsb {
                mix: Mix::C,
                distribution: Distribution::Uniform
            })
        );
        assert_eq!(
            parse("ycsb-a"),
            Ok(WorkloadSpec::Ycsb {
                mix: Mix::A,
                distribution: Distribution::Zipfian
            })
        );
        assert_eq!(
            parse("markov:fanout=2, jump=0"),
            Ok(WorkloadSpec::Markov {
                chain: MarkovChain {
                    fanout: 2,
                    jump: 0.0,
                    ..MarkovChain::default()
                },
                writes: 0.0
            })
        );
        assert_eq!(
            parse("trace:/tmp/a:b,c.txt"),
            Ok(WorkloadSpec::Trace("/tmp/a:b,c.txt".into()))
        );
    }

    #[test]
    fn round_trips_through_display() {
        for text in [
            "uniform:writes=0.25",
            "one-key:key=9,writes=1",
            "temporal:s=0.8,writes=0.5",
            "ycsb-f:uniform",
            "markov:fanout=3,s=0.5,jump=0.2,pop=0,writes=0.1,graph=4",
            "trace:t.txt",
        ] {
            let spec: WorkloadSpec = text.parse().unwrap();
            assert_eq!(spec.to_string(), text);
            assert_eq!(spec.to_string().parse::<WorkloadSpec>().unwrap(), spec);
        }
    }

    #[test]
    fn rejects_what_it_does_not_know() {
        let error = |t: &str| t.parse::<WorkloadSpec>().unwrap_err().to_string();
        assert!(error("zipf").contains("unknown workload"));
        assert!(error("uniform:s=1").contains("unknown parameter \"s\""));
        assert!(error("temporal:s=-1").contains("s must be a Zipf exponent"));
        assert!(error("uniform:writes=2").contains("fraction"));
        assert!(error("markov:fanout=x").contains("fanout"));
        assert!(error("ycsb-a:zipfian,uniform").contains("one of"));
        assert!(error("trace:").contains("trace:PATH"));
    }

    #[test]
    fn builds_runs_from_seeds() {
        let spec: WorkloadSpec = "markov".parse().unwrap();
        let run = |seed| super::super::take(spec.build(100, seed).unwrap().as_mut(), 50).unwrap();
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        assert!(run(3).iter().all(|r| r.key < 100 && !r.write));
    }
}
