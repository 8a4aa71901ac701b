//! Replaying a trace file: one request per line, `KEY` reads KEY and `KEY ANYTHING…` writes KEY
//! (the format of the Cloak authors' traces). Keys are decimal numbers or any other tokens;
//! tokens are numbered in order of first appearance. Lines are read as they are needed, so a
//! trace need not fit in memory.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};

use super::{Request, Workload};

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read trace {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: empty line")]
    Empty { path: PathBuf, line: usize },
}

pub struct Trace {
    path: PathBuf,
    lines: Lines<BufReader<File>>,
    line: usize,
    ids: HashMap<String, u64>,
}

impl Trace {
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        let file = File::open(path).map_err(|source| TraceError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            lines: BufReader::new(file).lines(),
            line: 0,
            ids: HashMap::new(),
        })
    }

    /// Distinct keys seen so far.
    pub fn keys_seen(&self) -> usize {
        self.ids.len()
    }
}

/// Parses one line: the key token, and whether more follows (a write).
pub fn parse_line(line: &str) -> Option<(&str, bool)> {
    let mut words = line.split_whitespace();
    let key = words.next()?;
    Some((key, words.next().is_some()))
}

impl Workload for Trace {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        let Some(text) = self.lines.next() else {
            return Ok(None);
        };
        self.line += 1;
        let text = text.map_err(|source| TraceError::Read {
            path: self.path.clone(),
            source,
        })?;
        let Some((token, write)) = parse_line(&text) else {
            return Err(TraceError::Empty {
                path: self.path.clone(),
                line: self.line,
            });
        };
        let next = self.ids.len() as u64;
        let key = *self.ids.entry(token.to_string()).or_insert(next);
        Ok(Some(Request { key, write }))
    }

    fn describe(&self) -> String {
        format!("trace {}", self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_writes_tokens_and_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.txt");
        std::fs::write(&path, "17\n0xabc some value\n17 v\n\nnever").unwrap();
        let mut t = Trace::open(&path).unwrap();
        let got: Vec<Request> = (0..3).map(|_| t.next_request().unwrap().unwrap()).collect();
        assert_eq!(
            got,
            [
                Request {
                    key: 0,
                    write: false
                },
                Request {
                    key: 1,
                    write: true
                },
                Request {
                    key: 0,
                    write: true
                },
            ]
        );
        let error = t.next_request().unwrap_err().to_string();
        assert!(error.ends_with("t.txt:4: empty line"), "{error}");
        assert!(Trace::open(&dir.path().join("missing")).is_err());
    }
}
