//! Server commands: INFO and COMMAND.

use super::{Args, Request};
use crate::resp::Reply;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandQuery {
    /// `COMMAND` and `COMMAND DOCS`: clients use these for hints; an empty answer is valid.
    Docs,
    Count,
    List,
}

pub fn info(args: &mut Args) -> Result<Request, Reply> {
    if args.len() > 1 {
        return Err(args.arity());
    }
    let section = args
        .next()
        .map(|s| String::from_utf8_lossy(&s).to_lowercase());
    Ok(Request::Info(section))
}

pub fn command(args: &mut Args) -> Result<Request, Reply> {
    let sub = args
        .next()
        .map(|s| String::from_utf8_lossy(&s).to_uppercase());
    let query = match sub.as_deref() {
        None | Some("DOCS") | Some("INFO") => CommandQuery::Docs,
        Some("COUNT") => CommandQuery::Count,
        Some("LIST") => CommandQuery::List,
        Some(other) => {
            return Err(Reply::err(format!(
                "unknown subcommand '{other}'. Try COMMAND COUNT, COMMAND LIST or COMMAND DOCS."
            )));
        }
    };
    args.take_all();
    Ok(Request::Command(query))
}
