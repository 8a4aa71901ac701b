//! Hash commands: HSET HMSET HSETNX HGET HMGET HDEL HGETALL HEXISTS HINCRBY HINCRBYFLOAT HLEN HKEYS
//! HVALS HSTRLEN.
//!
//! A hash is one value (see `cloak_core::hash`), so what storage sees is what a string command
//! makes: a read of one key for HGET and the other reads, and a read then a write of one key for
//! HSET, HMSET, HSETNX, HDEL, HINCRBY and HINCRBYFLOAT (see `cloak_core::engine` for the covers that stand in for
//! accesses a missing key or a failed check would not need).

use bytes::Bytes;
use cloak_core::{Command, HashOp, long_double};

use super::{Args, Request};
use crate::resp::Reply;

/// The key, then the hash command the rest of the arguments make.
fn hash(
    args: &mut Args,
    op: impl FnOnce(&mut Args) -> Result<HashOp, Reply>,
) -> Result<Request, Reply> {
    let key = args.next_bytes()?;
    let op = op(args)?;
    Ok(Request::Data(Command::Hash { key, op }))
}

/// `HSET key field value [field value …]`.
pub fn hset(args: &mut Args) -> Result<Request, Reply> {
    setting(args, HashOp::Set)
}

/// `HMSET key field value [field value …]`: HSET answering OK.
pub fn hmset(args: &mut Args) -> Result<Request, Reply> {
    setting(args, HashOp::MSet)
}

fn setting(args: &mut Args, op: fn(Vec<(Bytes, Bytes)>) -> HashOp) -> Result<Request, Reply> {
    if args.len() < 3 || args.len().is_multiple_of(2) {
        return Err(args.arity());
    }
    hash(args, |args| Ok(op(args.pairs()?)))
}

pub fn hsetnx(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(3)?;
    hash(args, |args| {
        Ok(HashOp::SetNx(args.next_bytes()?, args.next_bytes()?))
    })
}

pub fn hget(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(2)?;
    hash(args, |args| Ok(HashOp::Get(args.next_bytes()?)))
}

pub fn hmget(args: &mut Args) -> Result<Request, Reply> {
    args.at_least(2)?;
    hash(args, |args| Ok(HashOp::MGet(args.take_all())))
}

pub fn hdel(args: &mut Args) -> Result<Request, Reply> {
    args.at_least(2)?;
    hash(args, |args| Ok(HashOp::Del(args.take_all())))
}

pub fn hgetall(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    hash(args, |_| Ok(HashOp::GetAll))
}

pub fn hexists(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(2)?;
    hash(args, |args| Ok(HashOp::Exists(args.next_bytes()?)))
}

pub fn hincrby(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(3)?;
    hash(args, |args| {
        let field = args.next_bytes()?;
        let by = args.next_integer()?;
        Ok(HashOp::IncrBy(field, by))
    })
}

/// `HINCRBYFLOAT key field increment`, the increment checked first as Redis does.
pub fn hincrbyfloat(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(3)?;
    hash(args, |args| {
        let field = args.next_bytes()?;
        let by = args.next_bytes()?;
        if !long_double::is_valid(&by) {
            return Err(Reply::err("value is not a valid float"));
        }
        // Adding a valid float to zero fails only for an infinite one.
        if long_double::add(b"0", &by).is_err() {
            return Err(Reply::err("value is NaN or Infinity"));
        }
        Ok(HashOp::IncrByFloat(field, by))
    })
}

pub fn hlen(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    hash(args, |_| Ok(HashOp::Len))
}

pub fn hkeys(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    hash(args, |_| Ok(HashOp::Keys))
}

pub fn hvals(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    hash(args, |_| Ok(HashOp::Vals))
}

pub fn hstrlen(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(2)?;
    hash(args, |args| Ok(HashOp::StrLen(args.next_bytes()?)))
}
