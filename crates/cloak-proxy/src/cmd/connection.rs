//! Connection commands: PING ECHO AUTH QUIT SELECT.

use super::{Args, Request};
use crate::resp::Reply;

pub fn ping(args: &mut Args) -> Result<Request, Reply> {
    if args.len() > 1 {
        return Err(args.arity());
    }
    Ok(Request::Ping(args.next()))
}

pub fn echo(args: &mut Args) -> Result<Request, Reply> {
    args.expect(1)?;
    Ok(Request::Echo(args.next().expect("checked")))
}

/// `AUTH password` or `AUTH username password` (the only user is `default`).
pub fn auth(args: &mut Args) -> Result<Request, Reply> {
    match args.len() {
        1 => Ok(Request::Auth {
            user: None,
            password: args.next().expect("checked"),
        }),
        2 => Ok(Request::Auth {
            user: args.next(),
            password: args.next().expect("checked"),
        }),
        _ => Err(args.arity()),
    }
}

pub fn quit(args: &mut Args) -> Result<Request, Reply> {
    args.take_all();
    Ok(Request::Quit)
}

/// Only database 0 exists; clients that select it explicitly keep working.
pub fn select(args: &mut Args) -> Result<Request, Reply> {
    args.expect(1)?;
    let index = args.next().expect("checked");
    match std::str::from_utf8(&index)
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(n) => Ok(Request::Select(n)),
        None => Err(Reply::err("value is not an integer or out of range")),
    }
}
