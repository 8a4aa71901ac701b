//! The side-by-side comparison: one row per scheme.

use crate::attack::AttackResult;
use crate::audit::{AuditReport, SchemeAudit};

pub struct Summary {
    rows: Vec<Vec<String>>,
}

fn attack_cell(result: Option<&&AttackResult>) -> String {
    let Some(result) = result else {
        return "-".into();
    };
    let s = &result.score;
    if s.z() < 5.0 {
        format!("{:.3} (no gain)", s.accuracy)
    } else {
        format!(
            "{:.3} ({:.0}×)",
            s.accuracy,
            s.accuracy / s.yardstick().max(1e-12)
        )
    }
}

fn row(audit: &SchemeAudit, report: &AuditReport) -> Vec<String> {
    let differs = audit.findings.iter().filter(|f| f.differs()).count();
    let identical = audit.findings.iter().filter(|f| f.identical).count();
    let told = if differs == 0 {
        format!("no ({identical}/{} identical)", audit.findings.len())
    } else {
        format!("yes ({differs}/{})", audit.findings.len())
    };
    let advantage = audit
        .best_distinguisher()
        .map_or("0".into(), |f| format!("{:.2} {}", f.advantage, f.name));
    let frequency = audit.attack("frequency analysis");
    let correlated = audit.attack("correlated queries (IHOP)");
    let linking = audit.attack("linking (headers)");
    let loaded = audit.load_findings.iter().filter(|f| f.differs()).count();
    let idle_vs_loaded = if loaded == 0 {
        "same".to_string()
    } else {
        format!("told apart ({loaded}/{})", audit.load_findings.len())
    };
    let volume = if audit.volume.identical {
        "fixed".to_string()
    } else if audit.volume.spread.is_finite() {
        format!("varies ×{:.1}", audit.volume.spread)
    } else {
        "varies (silent idle)".into()
    };
    let cost = &audit.cost[0];
    let share = report
        .baseline
        .and_then(|b| b[0])
        .filter(|b| *b > 0.0)
        .zip(cost.throughput)
        .map_or("-".into(), |(b, t)| format!("{:.3}", t / b));
    vec![
        audit.scheme.clone(),
        told,
        advantage,
        attack_cell(frequency.first()),
        attack_cell(frequency.get(1)),
        attack_cell(correlated.first()),
        attack_cell(correlated.get(1)),
        attack_cell(linking.first()),
        attack_cell(linking.get(1)),
        volume,
        idle_vs_loaded,
        cost.throughput.map_or("-".into(), |t| format!("{t:.0}")),
        share,
        cost.storage_bytes_per_op
            .map_or("-".into(), |b| format!("{b:.0}")),
    ]
}

impl Summary {
    pub fn of(report: &AuditReport) -> Self {
        Self {
            rows: report.schemes.iter().map(|a| row(a, report)).collect(),
        }
    }

    pub fn header(&self) -> Vec<String> {
        [
            "scheme",
            "told apart",
            "best advantage",
            "frequency A",
            "frequency B",
            "IHOP A",
            "IHOP B",
            "linking A",
            "linking B",
            "volume",
            "idle vs loaded",
            "ops/s A",
            "× unsafe",
            "bytes/op",
        ]
        .map(String::from)
        .to_vec()
    }

    pub fn rows(&self) -> Vec<Vec<String>> {
        self.rows.clone()
    }
}

/// The side-by-side table as aligned text, for a terminal.
pub fn table(report: &AuditReport) -> String {
    let summary = Summary::of(report);
    let header = summary.header();
    let rows = summary.rows();
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([header[i].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..header.len()).map(width).collect();
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = format!(
        "A = {}\nB = {}\n{}\n",
        report.workloads[0],
        report.workloads[1],
        line(&header)
    );
    for r in &rows {
        out.push_str(&line(r));
        out.push('\n');
    }
    for (scheme, reason) in &report.failed {
        out.push_str(&format!("{scheme}: not audited: {reason}\n"));
    }
    out
}
