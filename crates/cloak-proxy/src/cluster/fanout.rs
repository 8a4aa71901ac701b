//! Commands without keys on a cluster proxy: run on every partition it hosts, answered as one
//! store would answer for all of them (as a Redis Cluster node answers for its own slots).
//!
//! DBSIZE adds the partitions' counts, KEYS joins their lists, RANDOMKEY takes the first key
//! found, FLUSHDB/FLUSHALL and UNWATCH answer once all did; the first error, if any, is the
//! answer. SCAN walks the partitions one after another: its cursor carries the partition's
//! position among the hosted ones in its top 16 bits and that partition's own cursor (a slot
//! number, below 2^48) in the rest.

use bytes::Bytes;
use cloak_core::{ClientId, Command, Outcome};
use tokio::sync::oneshot;

use super::Hosted;
use crate::budget::Charge;
use crate::core::CoreStopped;

/// Bits of a cluster SCAN cursor that hold a partition's own cursor.
const INNER_BITS: u32 = 48;

/// Whether `command` is one this module runs on every partition (rather than one of them).
pub fn answers(command: &Command) -> bool {
    matches!(
        command,
        Command::DbSize(_)
            | Command::Keys { .. }
            | Command::Scan { .. }
            | Command::RandomKey(_)
            | Command::Flush(_)
            | Command::Unwatch
    )
}

/// Submits `command` (one without keys) to the hosted partitions; the receiver yields the
/// merged outcome. `charge` is held until every partition has answered.
pub async fn submit(
    hosted: &Hosted,
    client: ClientId,
    command: Command,
    charge: Charge,
) -> Result<oneshot::Receiver<Outcome>, CoreStopped> {
    if let Command::Scan { cursor, .. } = &command {
        let cursor = *cursor;
        return scan(hosted, client, command, cursor, charge).await;
    }
    let mut answers = Vec::with_capacity(hosted.cores().len());
    for (_, core) in hosted.cores() {
        answers.push(
            core.submit(client, command.clone(), Charge::nothing())
                .await?,
        );
    }
    let (reply, merged) = oneshot::channel();
    if answers.is_empty() {
        // A proxy hosting no partition yet answers as an empty store, like a Redis Cluster node
        // without slots: a merge of nothing would be a bare +OK, which RANDOMKEY's client
        // would take for a key.
        let _ = reply.send(empty_store(&command));
        return Ok(merged);
    }
    tokio::spawn(async move {
        let _charge = charge;
        let mut outcomes = Vec::with_capacity(answers.len());
        for answer in answers {
            // A partition that stopped answers nothing; so does the merge (the client is told
            // the proxy is shutting down).
            let Ok(outcome) = answer.await else { return };
            outcomes.push(outcome);
        }
        let _ = reply.send(merge(outcomes));
    });
    Ok(merged)
}

/// What an empty store answers to `command` (one of those [`answers`] takes).
fn empty_store(command: &Command) -> Outcome {
    match command {
        Command::DbSize(_) => Outcome::Integer(0),
        Command::Keys { .. } => Outcome::Values(Vec::new()),
        Command::RandomKey(_) => Outcome::Value(None),
        _ => Outcome::Ok,
    }
}

/// One store's answer from the answers of several partitions to the same command.
fn merge(outcomes: Vec<Outcome>) -> Outcome {
    if let Some(error) = outcomes
        .iter()
        .find(|outcome| matches!(outcome, Outcome::Error(_)))
    {
        return error.clone();
    }
    let mut merged: Option<Outcome> = None;
    for outcome in outcomes {
        merged = Some(match (merged, outcome) {
            (None, outcome) => outcome,
            (Some(Outcome::Integer(a)), Outcome::Integer(b)) => Outcome::Integer(a + b),
            (Some(Outcome::Values(mut a)), Outcome::Values(b)) => {
                a.extend(b);
                Outcome::Values(a)
            }
            (Some(Outcome::Value(None)), found @ Outcome::Value(_)) => found,
            (Some(kept), _) => kept,
        });
    }
    merged.unwrap_or(Outcome::Ok)
}

/// SCAN over the hosted partitions in turn (see the module's docs for the cursor).
async fn scan(
    hosted: &Hosted,
    client: ClientId,
    mut command: Command,
    cursor: u64,
    charge: Charge,
) -> Result<oneshot::Receiver<Outcome>, CoreStopped> {
    let position = (cursor >> INNER_BITS) as usize;
    let (reply, merged) = oneshot::channel();
    let Some((_, core)) = hosted.cores().get(position) else {
        // A cursor this proxy never gave: the end, as Redis answers a cursor past its table.
        let _ = reply.send(scan_reply(0, Vec::new()));
        return Ok(merged);
    };
    if let Command::Scan { cursor: inner, .. } = &mut command {
        *inner = cursor & ((1 << INNER_BITS) - 1);
    }
    let answer = core.submit(client, command, charge).await?;
    let partitions = hosted.cores().len();
    tokio::spawn(async move {
        let Ok(outcome) = answer.await else { return };
        let _ = reply.send(match outcome {
            Outcome::Multi(mut parts) if parts.len() == 2 => {
                let keys = match parts.pop() {
                    Some(Outcome::Values(keys)) => keys,
                    _ => Vec::new(),
                };
                let inner = match parts.pop() {
                    Some(Outcome::Value(Some(next))) => {
                        String::from_utf8_lossy(&next).parse::<u64>().unwrap_or(0)
                    }
                    _ => 0,
                };
                let next = match inner {
                    0 if position + 1 < partitions => ((position + 1) as u64) << INNER_BITS,
                    0 => 0,
                    inner => ((position as u64) << INNER_BITS) | inner,
                };
                scan_reply(next, keys)
            }
            other => other,
        });
    });
    Ok(merged)
}

/// SCAN's answer: the next cursor and the keys.
fn scan_reply(next: u64, keys: Vec<Option<Bytes>>) -> Outcome {
    Outcome::Multi(vec![
        Outcome::Value(Some(Bytes::from(next.to_string()))),
        Outcome::Values(keys),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_merge_as_one_store_would_answer() {
        assert_eq!(
            merge(vec![Outcome::Integer(2), Outcome::Integer(3)]),
            Outcome::Integer(5)
        );
        let key = |k: &'static str| Some(Bytes::from(k));
        assert_eq!(
            merge(vec![
                Outcome::Values(vec![key("a")]),
                Outcome::Values(vec![key("b"), key("c")])
            ]),
            Outcome::Values(vec![key("a"), key("b"), key("c")])
        );
        assert_eq!(
            merge(vec![Outcome::Value(None), Outcome::Value(key("x"))]),
            Outcome::Value(key("x"))
        );
        assert_eq!(merge(vec![Outcome::Ok, Outcome::Ok]), Outcome::Ok);
        let error = Outcome::Error(cloak_core::CommandError::NoSuchKey);
        assert_eq!(merge(vec![Outcome::Ok, error.clone()]), error);
    }
}
