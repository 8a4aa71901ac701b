//! Shorthands for the commands and outcomes tests write most.

use bytes::Bytes;
use cloak_core::{Command, CommandError, Outcome, SchemeError, SetCondition};

/// `SET key value`.
pub fn set(key: &str, value: &str) -> Command {
    Command::Set {
        key: Bytes::from(key.to_string()),
        value: Bytes::from(value.to_string()),
        condition: SetCondition::Always,
    }
}

/// `GET key`.
pub fn get(key: &str) -> Command {
    Command::Get(Bytes::from(key.to_string()))
}

/// The outcome of a `GET` that found `v`, as `Simulator::execute` returns it.
pub fn value(v: &str) -> Option<Outcome> {
    Some(Outcome::Value(Some(Bytes::from(v.to_string()))))
}

/// The scheme's error, if the outcome is one.
pub fn scheme_error(outcome: &Option<Outcome>) -> Option<&SchemeError> {
    match outcome {
        Some(Outcome::Error(CommandError::Scheme(error))) => Some(error),
        _ => None,
    }
}
