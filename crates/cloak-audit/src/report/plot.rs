//! The comparison as a picture: attack accuracy against chance, distinguishing advantage, and
//! throughput, one group of bars per scheme.

use std::path::Path;

use cloak_bench::plot::{Figure, PlotError, bars, save};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::audit::AuditReport;

struct Comparison<'a>(&'a AuditReport);

impl Figure for Comparison<'_> {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String> {
        area.fill(&WHITE).map_err(|e| e.to_string())?;
        let panes = area.split_evenly((2, 2));
        let schemes = &self.0.schemes;
        let names: Vec<String> = schemes.iter().map(|s| s.scheme.clone()).collect();
        let attack = |name: &str, workload: usize, chance: bool| -> Vec<f64> {
            schemes
                .iter()
                .map(|s| {
                    s.attack(name).get(workload).map_or(0.0, |a| {
                        if chance {
                            a.score.yardstick()
                        } else {
                            a.score.accuracy
                        }
                    })
                })
                .collect()
        };
        bars(
            &panes[0],
            "Frequency analysis",
            "share of accesses named rightly",
            &names,
            &[
                ("A", attack("frequency analysis", 0, false)),
                ("B", attack("frequency analysis", 1, false)),
                ("without the view, A", attack("frequency analysis", 0, true)),
            ],
        )?;
        bars(
            &panes[1],
            "Correlated queries (IHOP)",
            "share of accesses named rightly",
            &names,
            &[
                ("A", attack("correlated queries (IHOP)", 0, false)),
                ("B", attack("correlated queries (IHOP)", 1, false)),
                (
                    "without the view, A",
                    attack("correlated queries (IHOP)", 0, true),
                ),
            ],
        )?;
        let advantage = schemes
            .iter()
            .map(|s| s.best_distinguisher().map_or(0.0, |f| f.advantage))
            .collect();
        let differs = schemes
            .iter()
            .map(|s| {
                let n = s.findings.len().max(1) as f64;
                s.findings.iter().filter(|f| f.differs()).count() as f64 / n
            })
            .collect();
        bars(
            &panes[2],
            "Telling A from B",
            "advantage / share of distinguishers",
            &names,
            &[
                ("best advantage", advantage),
                ("distinguishers that differ", differs),
            ],
        )?;
        let throughput = |i: usize| {
            schemes
                .iter()
                .map(|s| s.cost[i].throughput.unwrap_or(0.0))
                .collect()
        };
        bars(
            &panes[3],
            "Throughput (virtual time)",
            "operations per second",
            &names,
            &[("A", throughput(0)), ("B", throughput(1))],
        )
    }
}

/// Draws the comparison into `path` (PNG, or SVG by the extension).
pub fn plot(report: &AuditReport, path: &Path) -> Result<(), PlotError> {
    if report.schemes.is_empty() {
        return Err(PlotError::Empty("no scheme was audited"));
    }
    save(&Comparison(report), path, (1400, 1000))
}
