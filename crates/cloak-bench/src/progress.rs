//! Showing how far a child `cloak proxy` is in its start-up: it logs its recovery scan's
//! progress every few seconds (see [`cloak_core::recovery::PROGRESS_TARGET`]); the bench follows
//! its log and shows a bar where a terminal is attached, the lines themselves where none is
//! (a CI log), so a long start-up never looks like a hang.

use std::io::IsTerminal;

use indicatif::ProgressBar;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

pub use cloak_core::recovery::PROGRESS_TARGET as LOG_TARGET;

/// Where a child's log lines go.
#[derive(Clone)]
pub struct Progress {
    /// The bar for the recovery scan, when there is one and a terminal to draw it on.
    bar: Option<ProgressBar>,
    /// The elements the recovery scan will find, when there is one.
    elements: Option<u64>,
    /// What the lines are about, as a prefix for them.
    label: String,
}

impl Progress {
    /// Every line goes to this process's stderr, prefixed with `label`.
    pub fn lines(label: &str) -> Self {
        Self {
            bar: None,
            elements: None,
            label: label.to_string(),
        }
    }

    /// A recovery scan of `elements` elements: a bar on a terminal, else a line for each of the
    /// proxy's progress lines, with the total it cannot know.
    pub fn recovery(label: &str, elements: u64) -> Self {
        let bar = std::io::stderr()
            .is_terminal()
            .then(|| crate::run::bar(elements, format!("{label}: proxy scanning storage")));
        Self {
            bar,
            elements: Some(elements),
            label: label.to_string(),
        }
    }

    /// Clears the bar (the start-up it showed is over).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    /// Follows a child's log to its end.
    pub async fn follow(self, log: impl AsyncRead + Unpin) {
        let mut lines = BufReader::new(log).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let plain = without_colours(&line);
            let label = &self.label;
            match (&self.bar, field(&plain, "scanned"), self.elements) {
                (Some(bar), Some(scanned), _) => bar.set_position(scanned),
                (None, Some(scanned), Some(elements)) => eprintln!(
                    "  {label}: the proxy scanned {scanned} of {elements} elements ({}/s)",
                    field(&plain, "per_second").unwrap_or(0)
                ),
                _ => eprintln!("  {label}: {}", plain.trim_start()),
            }
        }
    }
}

/// The `NAME=N` of a recovery progress line; `None` for any other line.
fn field(line: &str, name: &str) -> Option<u64> {
    if !line.contains(LOG_TARGET) {
        return None;
    }
    let (_, rest) = line.split_once(&format!(" {name}="))?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// `line` without terminal colour codes (`ESC [ … m`), which the log has even in a pipe.
fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_count_in_a_coloured_progress_line_only() {
        let line = format!(
            "\u{1b}[2m2026-11-25T12:24:54Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2m{LOG_TARGET}\
             \u{1b}[0m\u{1b}[2m:\u{1b}[0m scanning storage \u{1b}[3mscanned\u{1b}[0m\u{1b}[2m=\
             \u{1b}[0m8192 \u{1b}[3mper_second\u{1b}[0m\u{1b}[2m=\u{1b}[0m4000"
        );
        let plain = without_colours(&line);
        assert!(plain.ends_with("scanning storage scanned=8192 per_second=4000"));
        assert_eq!(field(&plain, "scanned"), Some(8192));
        assert_eq!(field(&plain, "per_second"), Some(4000));
        assert_eq!(field(&plain, "second"), None);
        assert_eq!(
            field("WARN cloak_proxy: scanned=5 but another target", "scanned"),
            None
        );
    }
}
