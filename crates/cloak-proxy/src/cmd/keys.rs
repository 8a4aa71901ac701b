//! Key commands: GET SET MGET MSET DEL EXISTS DBSIZE, parsed into engine commands. (The database
//! a command names is set by the connection, see `cloak_core::database`.)

use cloak_core::{Command, Db};

use super::{Args, Request, expiry};
use crate::resp::Reply;

pub fn get(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    Ok(Request::Data(Command::Get(args.next_bytes()?)))
}

/// `SET key value [NX | XX] [EX | PX | EXAT | PXAT | KEEPTTL]` (options: [`expiry`]).
pub fn set(args: &mut Args) -> Result<Request, Reply> {
    args.at_least(2)?;
    let key = args.next_bytes()?;
    let value = args.next_bytes()?;
    expiry::set_options(key, value, args)
}

pub fn mget(args: &mut Args) -> Result<Request, Reply> {
    args.at_least(1)?;
    Ok(Request::Data(Command::MGet(args.take_all())))
}

pub fn mset(args: &mut Args) -> Result<Request, Reply> {
    Ok(Request::Data(Command::MSet(args.pairs()?)))
}

pub fn del(args: &mut Args) -> Result<Request, Reply> {
    args.at_least(1)?;
    Ok(Request::Data(Command::Del(args.take_all())))
}

pub fn exists(args: &mut Args) -> Result<Request, Reply> {
    args.at_least(1)?;
    Ok(Request::Data(Command::Exists(args.take_all())))
}

pub fn dbsize(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(0)?;
    Ok(Request::Data(Command::DbSize(Db::default())))
}
