//! Key commands: GET SET MGET MSET DEL EXISTS DBSIZE, parsed into engine commands.

use cloak_core::{Command, SetCondition};

use super::{Args, Request};
use crate::resp::Reply;

pub fn get(args: &mut Args) -> Result<Request, Reply> {
    args.expect(1)?;
    Ok(Request::Data(Command::Get(args.next().expect("checked"))))
}

/// `SET key value [NX | XX]`. Expiry options are refused: Cloak keeps no TTLs.
pub fn set(args: &mut Args) -> Result<Request, Reply> {
    args.at_least(2)?;
    let key = args.next().expect("checked");
    let value = args.next().expect("checked");
    let mut condition = SetCondition::Always;
    for option in args.by_ref() {
        let option = String::from_utf8_lossy(&option).to_uppercase();
        condition = match (option.as_str(), condition) {
            ("NX", SetCondition::Always) => SetCondition::IfAbsent,
            ("XX", SetCondition::Always) => SetCondition::IfPresent,
            ("EX" | "PX" | "EXAT" | "PXAT" | "KEEPTTL", _) => {
                return Err(Reply::err(format!(
                    "SET {option}: expiry is not supported by Cloak (keys live until deleted)"
                )));
            }
            ("GET", _) => return Err(Reply::err("SET GET is not supported by Cloak")),
            _ => return Err(Reply::err("syntax error")),
        };
    }
    Ok(Request::Data(Command::Set {
        key,
        value,
        condition,
    }))
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
