//! Server commands: INFO, CONFIG GET, COMMAND, TIME, SHUTDOWN.
//!
//! None of these reaches the storage server: they describe the proxy from what it already
//! holds (its counters, settings and command table), or stop it the way Ctrl-C does.

use bytes::Bytes;

use super::{Args, Request};
use crate::resp::Reply;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandQuery {
    /// Plain `COMMAND`: every command's details.
    All,
    Count,
    List,
    /// `COMMAND INFO [name…]`; no names means all.
    Info(Vec<Bytes>),
    /// `COMMAND DOCS [name…]`; no names means all.
    Docs(Vec<Bytes>),
}

/// `INFO [section …]`.
pub fn info(args: &mut Args) -> Result<Request, Reply> {
    let sections = args
        .map(|s| String::from_utf8_lossy(&s).to_lowercase())
        .collect();
    Ok(Request::Info(sections))
}

/// `CONFIG GET pattern [pattern …]`.
pub fn config_get(args: &mut Args) -> Result<Request, Reply> {
    Ok(Request::ConfigGet(args.take_all()))
}

pub fn command(args: &mut Args) -> Result<Request, Reply> {
    // `COMMAND` alone; with a subcommand the table sends it to the parsers below.
    args.exactly(0)?;
    Ok(Request::Command(CommandQuery::All))
}

pub fn command_count(_: &mut Args) -> Result<Request, Reply> {
    Ok(Request::Command(CommandQuery::Count))
}

/// `COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]`: only the
/// unfiltered list is served; a filter is refused rather than answered wrongly.
pub fn command_list(args: &mut Args) -> Result<Request, Reply> {
    if args.len() > 0 {
        return Err(Reply::err(
            "COMMAND LIST FILTERBY is not supported by Cloak",
        ));
    }
    Ok(Request::Command(CommandQuery::List))
}

pub fn command_info(args: &mut Args) -> Result<Request, Reply> {
    Ok(Request::Command(CommandQuery::Info(args.take_all())))
}

pub fn command_docs(args: &mut Args) -> Result<Request, Reply> {
    Ok(Request::Command(CommandQuery::Docs(args.take_all())))
}

pub fn time(_: &mut Args) -> Result<Request, Reply> {
    Ok(Request::Time)
}

/// `SHUTDOWN [NOSAVE | SAVE] [NOW] [FORCE] [ABORT]`. Every form stops the proxy the same way:
/// there is no snapshot to save or skip (storage holds the data; a clean stop drains it and
/// saves the ledger either way), and no wait for replicas that `NOW` could skip.
pub fn shutdown(args: &mut Args) -> Result<Request, Reply> {
    let (mut save, mut nosave, mut abort, mut other) = (false, false, false, false);
    for option in args.by_ref() {
        match String::from_utf8_lossy(&option).to_lowercase().as_str() {
            "save" => save = true,
            "nosave" => nosave = true,
            "abort" => abort = true,
            "now" | "force" => other = true,
            _ => return Err(Reply::err("syntax error")),
        }
    }
    if (save && nosave) || (abort && (save || nosave || other)) {
        return Err(Reply::err("syntax error"));
    }
    Ok(Request::Shutdown { abort })
}
