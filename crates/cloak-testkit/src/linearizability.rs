//! Linearizability of a single register whose writes all carry distinct values.
//!
//! With distinct values every read names the write it saw, and the history is linearizable
//! exactly when (Gibbons and Korach, "Testing shared memories", 1997):
//! 1. no read finishes before the write it saw starts;
//! 2. the *forward zones* of any two values are disjoint;
//! 3. no *backward zone* lies inside a forward zone;
//!
//! where the zone of value `v` spans from the earliest response to the latest invocation among
//! `v`'s write and reads: forward if the earliest response comes first, backward otherwise.
//! The register starts absent; reads of nothing see a virtual initial write at time zero.

use std::collections::HashMap;

/// One completed operation; times in any monotonic unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub invoked: u64,
    pub returned: u64,
    pub kind: Kind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Write(Vec<u8>),
    /// What the read returned; `None` for nothing.
    Read(Option<Vec<u8>>),
}

/// `Ok(())` if the history is linearizable, else a description of one violation.
pub fn check(history: &[Event]) -> Result<(), String> {
    // Cluster operations by value; `None` is the initial absent value.
    struct Cluster {
        write: Option<(u64, u64)>,
        min_returned: u64,
        max_invoked: u64,
    }
    let mut clusters: HashMap<Option<Vec<u8>>, Cluster> = HashMap::new();
    clusters.insert(
        None,
        Cluster {
            write: Some((0, 0)),
            min_returned: 0,
            max_invoked: 0,
        },
    );
    for e in history {
        if e.returned < e.invoked {
            return Err(format!("operation returned before it was invoked: {e:?}"));
        }
        if let Kind::Write(v) = &e.kind {
            let c = clusters.entry(Some(v.clone())).or_insert(Cluster {
                write: None,
                min_returned: u64::MAX,
                max_invoked: 0,
            });
            if c.write.is_some() {
                return Err(format!(
                    "value {:?} written twice",
                    String::from_utf8_lossy(v)
                ));
            }
            c.write = Some((e.invoked, e.returned));
            c.min_returned = c.min_returned.min(e.returned);
            c.max_invoked = c.max_invoked.max(e.invoked);
        }
    }
    for e in history {
        if let Kind::Read(v) = &e.kind {
            let Some(c) = clusters.get_mut(v) else {
                return Err(format!("read returned a value nobody wrote: {e:?}"));
            };
            let (w_inv, _) = c.write.expect("every cluster has its write");
            if e.returned < w_inv {
                return Err(format!(
                    "read returned before the write it saw began: {e:?}"
                ));
            }
            c.min_returned = c.min_returned.min(e.returned);
            c.max_invoked = c.max_invoked.max(e.invoked);
        }
    }
    let mut forward = Vec::new();
    let mut backward = Vec::new();
    for (value, c) in &clusters {
        if c.min_returned < c.max_invoked {
            forward.push((c.min_returned, c.max_invoked, value));
        } else {
            backward.push((c.max_invoked, c.min_returned, value));
        }
    }
    forward.sort();
    for pair in forward.windows(2) {
        if pair[1].0 < pair[0].1 {
            return Err(format!(
                "values {:?} and {:?} were each seen while the other was current",
                pair[0].2, pair[1].2
            ));
        }
    }
    for &(lo, hi, value) in &backward {
        for &(flo, fhi, fvalue) in &forward {
            if flo < lo && hi < fhi {
                return Err(format!(
                    "value {value:?} was read and written entirely while {fvalue:?} was current"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(i: u64, r: u64, v: &str) -> Event {
        Event {
            invoked: i,
            returned: r,
            kind: Kind::Write(v.into()),
        }
    }
    fn r(i: u64, ret: u64, v: Option<&str>) -> Event {
        Event {
            invoked: i,
            returned: ret,
            kind: Kind::Read(v.map(Into::into)),
        }
    }

    #[test]
    fn accepts_linearizable_histories() {
        assert!(
            check(&[
                w(1, 2, "a"),
                r(3, 4, Some("a")),
                w(5, 6, "b"),
                r(7, 8, Some("b"))
            ])
            .is_ok()
        );
        // Concurrent write: either value may be read.
        assert!(check(&[w(1, 5, "a"), r(2, 3, None), r(4, 6, Some("a"))]).is_ok());
        assert!(check(&[w(1, 10, "a"), w(2, 9, "b"), r(11, 12, Some("a"))]).is_ok());
        assert!(check(&[w(1, 10, "a"), w(2, 9, "b"), r(11, 12, Some("b"))]).is_ok());
    }

    #[test]
    fn rejects_stale_and_future_reads() {
        // Stale: b overwrote a before the read began.
        assert!(check(&[w(1, 2, "a"), w(3, 4, "b"), r(5, 6, Some("a"))]).is_err());
        // Future: read finished before the write began.
        assert!(check(&[r(1, 2, Some("a")), w(3, 4, "a")]).is_err());
        // Nothing after a completed write.
        assert!(check(&[w(1, 2, "a"), r(3, 4, None)]).is_err());
        // New-old inversion between two reads during one long write.
        assert!(
            check(&[
                w(1, 2, "a"),
                w(3, 20, "b"),
                r(4, 5, Some("b")),
                r(6, 7, Some("a"))
            ])
            .is_err()
        );
        // Unknown value.
        assert!(check(&[r(1, 2, Some("z"))]).is_err());
    }
}
