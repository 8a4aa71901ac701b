//! MULTI EXEC DISCARD WATCH UNWATCH. The connection queues commands between MULTI and EXEC
//! (see `session`); EXEC hands them to the engine as one unit, which runs them with nothing of
//! another client in between. WATCH and UNWATCH are bookkeeping in the engine: no storage
//! traffic.

use cloak_core::Command;

use super::{Args, Request};
use crate::resp::Reply;

pub fn multi(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(0)?;
    Ok(Request::Multi)
}

pub fn exec(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(0)?;
    Ok(Request::Exec)
}

pub fn discard(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(0)?;
    Ok(Request::Discard)
}

pub fn watch(args: &mut Args) -> Result<Request, Reply> {
    args.at_least(1)?;
    Ok(Request::Watch(Command::Watch(args.take_all())))
}

pub fn unwatch(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(0)?;
    Ok(Request::Data(Command::Unwatch))
}
