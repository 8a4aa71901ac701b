//! Key commands: GET SET MGET MSET DEL EXISTS DBSIZE, parsed into engine commands.

use cloak_core::Command;

use super::{Args, Request, expiry};
use crate::resp::Reply;

pub fn get(args: &mut Args) -> Result<Request, Reply> {
    args.expect(1)?;
    Ok(Request::Data(Command::Get(args.next().expect("checked"))))
}

/// `SET key value [NX | XX] [EX | PX | EXAT | PXAT | KEEPTTL]` (options: [`expiry`]).
pub fn set(args: &mut Args) -> Result<Request, Reply> {
    args.at_least(2)?;
    let key = args.next().expect("checked");
    let value = args.next().expect("checked");
    expiry::set_options(key, value, args)
}

pub fn mget(args: &mut Args) -> Result<Request, Reply> {
    args.at_least(1)?;
    Ok(Request::Data(Command::MGet(args.take_all())))
}

pub fn mset(args: &mut Args) -> Result<Request, Reply> {
    if args.len() == 0 || !args.len().is_multiple_of(2) {
        return Err(args.arity());
    }
    let flat = args.take_all();
    let pairs = flat
        .chunks_exact(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect();
    Ok(Request::Data(Command::MSet(pairs)))
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
    args.expect(0)?;
    Ok(Request::Data(Command::DbSize))
}
