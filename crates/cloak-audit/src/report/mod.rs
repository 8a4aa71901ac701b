//! The audit for people: the schemes side by side, then each scheme in detail.
//!
//! One document ([`document`]) is written out as Markdown or HTML ([`Document::markdown`],
//! [`Document::html`]); the side-by-side table alone goes to a terminal ([`table`]); [`plot`]
//! draws the comparison.

mod document;
mod plot;
mod summary;

pub use document::{Block, Document};
pub use plot::plot;
pub use summary::{Summary, table};

use crate::audit::{AuditReport, SchemeAudit};
use crate::distinguish::Finding;
use crate::record::LIGHT_SHARE;

fn ratio(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "∞".into()
    }
}

fn p_value(p: f64) -> String {
    if p < 1e-4 {
        format!("{p:.0e}")
    } else {
        format!("{p:.4}")
    }
}

/// The whole audit as a document; `plot` names an image to show, if one was drawn.
pub fn document(report: &AuditReport, plot: Option<&str>) -> Document {
    let mut doc = Document::default();
    doc.push(Block::Heading(
        1,
        "Cloak audit: what the storage server can learn".into(),
    ));
    doc.push(Block::Paragraph(format!(
        "The adversary of the Cloak paper's §5 game picked two workloads: **A** = `{}` and **B** \
         = `{}`, {} requests each over {} keys, sent by {} clients with {} requests in flight \
         each; storage answers in {} ms (virtual time). Each scheme served both while the \
         server's view was recorded for the same window; the server then tries to tell them \
         apart (distinguishers) and to name the key behind every access (attacks), scored \
         against the ground truth only the auditor knows. Seed {}.",
        report.workloads[0],
        report.workloads[1],
        report.requests,
        report.keys,
        report.load.clients,
        report.load.pipeline,
        report.load.storage_delay_ms,
        report.seed
    )));
    doc.push(Block::Heading(2, "Side by side".into()));
    let summary = Summary::of(report);
    doc.push(Block::Table(summary.header(), summary.rows()));
    doc.push(Block::List(vec![
        "*told apart*: how many distinguishers see a significant difference between A and B \
         (the chi-square test's or the classifier's p-value, doubled, below 0.001) but none \
         between A and a second run of A (which would say nothing about the workload), and \
         the best distinguishing advantage (0: a coin flip does as well, 1: never wrong);"
            .into(),
        "attack cells: share of accesses whose key the attack named rightly, and how many \
         times a guess without the view that is (the better of chance, the same guesses \
         shuffled over the labels, and blind, the attack's guesses from the other workload's \
         view); *no gain* when it does no better;"
            .into(),
        "*volume*: whether batch count, sizes and timing stay the same idle, lightly loaded and \
         fully loaded;"
            .into(),
        "*idle vs loaded*: whether the volume and timing distinguishers (request sizes, gaps, \
         batch intervals, write-back delays, generation lags) tell the idle run from A;"
            .into(),
        "cost: throughput on A in virtual time, as a share of `unsafe`'s, and bytes moved per \
         operation."
            .into(),
    ]));
    if let Some(path) = plot {
        doc.push(Block::Image(
            path.to_string(),
            "The schemes side by side".into(),
        ));
    }
    for (scheme, reason) in &report.failed {
        doc.push(Block::Paragraph(format!(
            "**{scheme}** was not audited: {reason}"
        )));
    }
    for audit in &report.schemes {
        scheme_section(&mut doc, audit, report);
    }
    doc
}

fn scheme_section(doc: &mut Document, audit: &SchemeAudit, report: &AuditReport) {
    doc.push(Block::Heading(2, format!("`{}`", audit.scheme)));
    let plaintext = match audit.plaintext {
        [Some(a), _] | [None, Some(a)] if a > 0.0 => format!(
            " The server reads the client's key in the clear in {:.0}% of written elements.",
            a * 100.0
        ),
        _ => String::new(),
    };
    doc.push(Block::Paragraph(format!(
        "The server watched each run for {:.2} s: {} and {} requests, {} and {} batches (read \
         requests).{plaintext}",
        audit.window_seconds,
        audit.server_requests[0],
        audit.server_requests[1],
        audit.batches[0],
        audit.batches[1],
    )));

    doc.push(Block::Heading(3, "Distinguishers".into()));
    distinguishers(doc, &audit.findings, ["A", "B"]);

    doc.push(Block::Heading(3, "Attacks".into()));
    let rows = audit
        .attacks
        .iter()
        .map(|a| {
            vec![
                a.attack.to_string(),
                format!("`{}`", a.workload),
                format!("{:.4}", a.score.accuracy),
                format!("{:.4}", a.score.chance),
                format!("{:.4}", a.score.blind),
                format!("{}/{}", a.score.top_recovered, a.score.top_keys),
                a.verdict.clone(),
            ]
        })
        .collect();
    doc.push(Block::Table(
        [
            "attack",
            "workload",
            "accuracy",
            "chance",
            "blind",
            "top-10 keys",
            "verdict",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    ));

    doc.push(Block::Heading(3, "Volume and timing under load".into()));
    let rows = audit
        .volume
        .rows
        .iter()
        .map(|r| {
            vec![
                r.load.clone(),
                r.client_requests.to_string(),
                r.server_requests.to_string(),
                r.addresses.to_string(),
                format!("{:.0}", r.requests_per_second),
                format!("{:.0}", r.addresses_per_second),
            ]
        })
        .collect();
    doc.push(Block::Table(
        [
            "load",
            "client requests",
            "server requests",
            "addresses",
            "requests/s",
            "addresses/s",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    ));
    doc.push(Block::Paragraph(format!(
        "Idle, 1/{LIGHT_SHARE} of A's requests spread over the window, and all of A, each watched \
         for the same window: {} (spread {}).",
        audit.volume.verdict,
        ratio(audit.volume.spread)
    )));
    doc.push(Block::Paragraph(
        "The volume and timing distinguishers on the idle run (first) against all of A \
         (second):"
            .into(),
    ));
    distinguishers(doc, &audit.load_findings, ["idle", "loaded"]);

    doc.push(Block::Heading(3, "Cost".into()));
    let rows = audit
        .cost
        .iter()
        .zip(&report.workloads)
        .enumerate()
        .map(|(i, (m, w))| {
            let baseline = report.baseline.and_then(|b| b[i]).filter(|b| *b > 0.0);
            vec![
                format!("`{w}`"),
                m.throughput.map_or("-".into(), |t| format!("{t:.0}")),
                baseline
                    .zip(m.throughput)
                    .map_or("-".into(), |(b, t)| format!("{:.3}", t / b)),
                format!("{:.2}", m.latency_us.p50 as f64 / 1000.0),
                format!("{:.2}", m.latency_us.p99 as f64 / 1000.0),
                m.dummy_fraction.map_or("-".into(), |d| format!("{d:.3}")),
                m.storage_bytes_per_op
                    .map_or("-".into(), |b| format!("{b:.0}")),
            ]
        })
        .collect();
    doc.push(Block::Table(
        [
            "workload",
            "ops/s",
            "× unsafe",
            "p50 ms",
            "p99 ms",
            "dummy share",
            "bytes/op",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    ));
}

/// The distinguishers' findings as a table, then what each said about each view (named by
/// `views`) on its own.
fn distinguishers(doc: &mut Document, findings: &[Finding], views: [&str; 2]) {
    let rows = findings
        .iter()
        .map(|f| {
            vec![
                f.name.to_string(),
                f.looks_at.to_string(),
                if f.identical { "yes" } else { "no" }.into(),
                if f.identical {
                    "-".into()
                } else {
                    format!("{:.1} ({})", f.test.statistic, f.test.dof)
                },
                if f.identical {
                    "-".into()
                } else {
                    p_value(f.test.p_value)
                },
                format!("{:.2}", f.advantage),
                f.control.map_or("-".into(), |c| {
                    format!("{:.2} (p {})", c.advantage, p_value(c.p_value))
                }),
                f.verdict.clone(),
            ]
        })
        .collect();
    doc.push(Block::Table(
        [
            "distinguisher",
            "looks at",
            "identical",
            "χ² (dof)",
            "p",
            "advantage",
            "A against A again",
            "verdict",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    ));
    let about: Vec<String> = findings
        .iter()
        .flat_map(|f| {
            f.about
                .iter()
                .zip(views)
                .filter_map(move |(a, w)| a.as_ref().map(|a| format!("{} on {w}: {a}", f.name)))
        })
        .collect();
    if !about.is_empty() {
        doc.push(Block::List(about));
    }
}
