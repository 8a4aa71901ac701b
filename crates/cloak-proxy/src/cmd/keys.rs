//! Key commands: GET SET MGET MSET DEL EXISTS DBSIZE, parsed into engine commands. (The database
//! a command names is set by the connection, see `cloak_core::keyspace`.)

use cloak_core::{Command, Db, SetCondition, Update};

use super::{Args, Request};
use crate::resp::Reply;

pub fn get(args: &mut Args) -> Result<Request, Reply> {
    args.expect(1)?;
    Ok(Request::Data(Command::Get(args.next().expect("checked"))))
}

/// `SET key value [NX | XX] [GET]`. Expiry options are refused: Cloak keeps no TTLs. With GET
/// it is a read-modify-write (see `strings`).
pub fn set(args: &mut Args) -> Result<Request, Reply> {
    args.at_least(2)?;
    let key = args.next().expect("checked");
    let value = args.next().expect("checked");
    let mut condition = SetCondition::Always;
    let mut get = false;
    for option in args.by_ref() {
        if option.eq_ignore_ascii_case(b"GET") && !get {
            get = true;
            continue;
        }
        let option = String::from_utf8_lossy(&option).to_uppercase();
        condition = match (option.as_str(), condition) {
            ("NX", SetCondition::Always) => SetCondition::IfAbsent,
            ("XX", SetCondition::Always) => SetCondition::IfPresent,
            ("EX" | "PX" | "EXAT" | "PXAT" | "KEEPTTL", _) => {
                return Err(Reply::err(format!(
                    "SET {option}: expiry is not supported by Cloak (keys live until deleted)"
                )));
            }
            _ => return Err(Reply::err("syntax error")),
        };
    }
    if get {
        return Ok(Request::Data(Command::Update {
            key,
            op: Update::Replace { value, condition },
        }));
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
    args.expect(0)?;
    Ok(Request::Data(Command::DbSize(Db::default())))
}
