//! Connection commands: PING ECHO AUTH QUIT SELECT HELLO RESET.
//!
//! None of these reaches the storage server: they change or describe this connection only.

use bytes::Bytes;

use super::{Args, Request, integer};
use crate::resp::{Protocol, Reply};

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hello {
    /// `None` keeps the connection's protocol.
    pub protocol: Option<Protocol>,
    pub auth: Option<(Bytes, Bytes)>,
    pub name: Option<Bytes>,
}

pub fn ping(args: &mut Args) -> Result<Request, Reply> {
    if args.len() > 1 {
        return Err(args.arity());
    }
    Ok(Request::Ping(args.next()))
}

pub fn echo(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    Ok(Request::Echo(args.next_bytes()?))
}

/// `AUTH password` or `AUTH username password` (the only user is `default`).
pub fn auth(args: &mut Args) -> Result<Request, Reply> {
    match args.len() {
        1 => Ok(Request::Auth {
            user: None,
            password: args.next_bytes()?,
        }),
        2 => Ok(Request::Auth {
            user: args.next(),
            password: args.next_bytes()?,
        }),
        _ => Err(args.arity()),
    }
}

pub fn quit(args: &mut Args) -> Result<Request, Reply> {
    args.take_all();
    Ok(Request::Quit)
}

/// How many logical databases `SELECT` chooses from (`CONFIG GET databases`): Redis's default
/// 16, the databases of `cloak_core::database`.
pub const DATABASES: i64 = cloak_core::database::DATABASES as i64;

/// `SELECT index`; the index is checked against [`DATABASES`] when it runs.
pub fn select(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    Ok(Request::Select(args.next_integer()?))
}

/// Parsed in Redis's order, with its errors: the version, then each option.
pub fn hello(args: &mut Args) -> Result<Request, Reply> {
    let mut hello = Hello::default();
    let Some(version) = args.next() else {
        return Ok(Request::Hello(hello));
    };
    hello.protocol = match integer(&version).ok() {
        Some(2) => Some(Protocol::Resp2),
        Some(3) => Some(Protocol::Resp3),
        Some(_) => return Err(Reply::Error("NOPROTO unsupported protocol version".into())),
        None => {
            return Err(Reply::err(
                "Protocol version is not an integer or out of range",
            ));
        }
    };
    while let Some(option) = args.next() {
        let more = args.len();
        if option.eq_ignore_ascii_case(b"AUTH") && more >= 2 {
            hello.auth = args.next().zip(args.next());
        } else if option.eq_ignore_ascii_case(b"SETNAME") && more >= 1 {
            let name = args.next_bytes()?;
            super::client::check_name(&name)?;
            hello.name = Some(name);
        } else {
            return Err(Reply::err(format!(
                "Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(&option)
            )));
        }
    }
    Ok(Request::Hello(hello))
}

pub fn reset(_: &mut Args) -> Result<Request, Reply> {
    Ok(Request::Reset)
}
