//! Read-modify-write string commands: INCR INCRBY DECR DECRBY INCRBYFLOAT APPEND STRLEN
//! GETRANGE SETRANGE GETSET GETDEL SETNX MSETNX.
//!
//! Each becomes one engine unit (`cloak_core::Command::Update`, or `MSetNx`) that reads its key
//! and writes it back with nothing of another client in between. What the storage server sees
//! is a read and a write of the key's slot, exactly what a GET followed by a SET of it makes,
//! which every scheme already hides (see `cloak_core::engine::unit`). Arguments are checked
//! here, before anything runs, with Redis's exact errors.

use bytes::Bytes;
use cloak_core::{Command, SetCondition, Update, long_double};

use super::{Args, Request};
use crate::resp::Reply;

fn update(key: Bytes, op: Update) -> Request {
    Request::Data(Command::Update { key, op })
}

pub fn incr(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    Ok(update(args.next_bytes()?, Update::IncrBy(1)))
}

pub fn decr(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    Ok(update(args.next_bytes()?, Update::IncrBy(-1)))
}

pub fn incrby(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(2)?;
    let key = args.next_bytes()?;
    Ok(update(key, Update::IncrBy(args.next_integer()?)))
}

pub fn decrby(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(2)?;
    let key = args.next_bytes()?;
    let decrement = args.next_integer()?;
    let increment = decrement
        .checked_neg()
        .ok_or_else(|| Reply::err("decrement would overflow"))?;
    Ok(update(key, Update::IncrBy(increment)))
}

pub fn incrbyfloat(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(2)?;
    let key = args.next_bytes()?;
    let increment = args.next_bytes()?;
    if !long_double::is_valid(&increment) {
        return Err(Reply::err("value is not a valid float"));
    }
    Ok(update(key, Update::IncrByFloat(increment)))
}

pub fn append(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(2)?;
    let key = args.next_bytes()?;
    Ok(update(key, Update::Append(args.next_bytes()?)))
}

pub fn strlen(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    Ok(update(args.next_bytes()?, Update::Strlen))
}

pub fn getrange(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(3)?;
    let key = args.next_bytes()?;
    let start = args.next_integer()?;
    let end = args.next_integer()?;
    Ok(update(key, Update::GetRange { start, end }))
}

pub fn setrange(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(3)?;
    let key = args.next_bytes()?;
    let offset = args.next_integer()?;
    let offset = usize::try_from(offset).map_err(|_| Reply::err("offset is out of range"))?;
    Ok(update(
        key,
        Update::SetRange {
            offset,
            value: args.next_bytes()?,
        },
    ))
}

pub fn getset(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(2)?;
    let key = args.next_bytes()?;
    Ok(update(
        key,
        Update::Replace {
            value: args.next_bytes()?,
            condition: SetCondition::Always,
            // GETSET drops the key's deadline, as SET does.
            expiry: None,
        },
    ))
}

pub fn getdel(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    Ok(update(args.next_bytes()?, Update::GetDel))
}

pub fn setnx(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(2)?;
    let key = args.next_bytes()?;
    Ok(update(key, Update::SetIfAbsent(args.next_bytes()?)))
}

pub fn msetnx(args: &mut Args) -> Result<Request, Reply> {
    Ok(Request::Data(Command::MSetNx(args.pairs()?)))
}
