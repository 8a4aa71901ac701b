//! The commands the proxy understands, parsed from RESP arguments.
//!
//! Key commands become [`cloak_core::Command`]s for the engine ([`keys`]); connection and server
//! commands are answered by the front end itself ([`connection`], [`server`]). Everything else
//! is refused the way Redis refuses an unknown command.

mod connection;
mod expiry;
mod hashes;
mod keys;
mod server;

use bytes::Bytes;
use cloak_core::Command;

use crate::resp::Reply;

pub use server::CommandQuery;

#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// A key command, run by the engine.
    Data(Command),
    Ping(Option<Bytes>),
    Echo(Bytes),
    Auth {
        user: Option<Bytes>,
        password: Bytes,
    },
    Quit,
    Select(i64),
    Info(Option<String>),
    Command(CommandQuery),
}

impl Request {
    /// Whether a client may send this before authenticating.
    pub fn allowed_before_auth(&self) -> bool {
        matches!(self, Request::Auth { .. } | Request::Quit)
    }
}

/// Names of the supported commands, for `COMMAND COUNT` and `COMMAND LIST`.
pub const NAMES: &[&str] = &[
    "get",
    "set",
    "mget",
    "mset",
    "del",
    "exists",
    "dbsize",
    "ping",
    "echo",
    "auth",
    "quit",
    "select",
    "info",
    "command",
    "setex",
    "psetex",
    "getex",
    "expire",
    "pexpire",
    "expireat",
    "pexpireat",
    "ttl",
    "pttl",
    "expiretime",
    "pexpiretime",
    "persist",
    "type",
    "hset",
    "hsetnx",
    "hget",
    "hmget",
    "hdel",
    "hgetall",
    "hexists",
    "hincrby",
    "hlen",
    "hkeys",
    "hvals",
    "hstrlen",
];

/// The arguments of one command, consumed front to back.
pub struct Args {
    name: String,
    rest: std::vec::IntoIter<Bytes>,
}

impl Iterator for Args {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        self.rest.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.rest.size_hint()
    }
}

impl ExactSizeIterator for Args {}

impl Args {
    pub fn take_all(&mut self) -> Vec<Bytes> {
        self.rest.by_ref().collect()
    }

    /// The error for a wrong number of arguments.
    pub fn arity(&self) -> Reply {
        Reply::err(format!(
            "wrong number of arguments for '{}' command",
            self.name
        ))
    }

    /// Exactly `n` arguments remain, else the arity error.
    pub fn expect(&self, n: usize) -> Result<(), Reply> {
        if self.len() == n {
            Ok(())
        } else {
            Err(self.arity())
        }
    }

    /// At least `n` arguments remain, else the arity error.
    pub fn at_least(&self, n: usize) -> Result<(), Reply> {
        if self.len() >= n {
            Ok(())
        } else {
            Err(self.arity())
        }
    }
}

/// Parses one request; `Err` is the reply to send instead of running anything.
pub fn parse(mut request: Vec<Bytes>) -> Result<Request, Reply> {
    if request.is_empty() {
        return Err(Reply::err("empty command"));
    }
    let name_bytes = request.remove(0);
    let name = String::from_utf8_lossy(&name_bytes).to_lowercase();
    let mut args = Args {
        name: name.clone(),
        rest: request.into_iter(),
    };
    match name.as_str() {
        "get" => keys::get(&mut args),
        "set" => keys::set(&mut args),
        "mget" => keys::mget(&mut args),
        "mset" => keys::mset(&mut args),
        "del" => keys::del(&mut args),
        "exists" => keys::exists(&mut args),
        "dbsize" => keys::dbsize(&mut args),
        "ping" => connection::ping(&mut args),
        "echo" => connection::echo(&mut args),
        "auth" => connection::auth(&mut args),
        "quit" => connection::quit(&mut args),
        "select" => connection::select(&mut args),
        "info" => server::info(&mut args),
        "command" => server::command(&mut args),
        "setex" => expiry::setex(&mut args),
        "psetex" => expiry::psetex(&mut args),
        "getex" => expiry::getex(&mut args),
        "expire" => expiry::expire(&mut args),
        "pexpire" => expiry::pexpire(&mut args),
        "expireat" => expiry::expireat(&mut args),
        "pexpireat" => expiry::pexpireat(&mut args),
        "ttl" => expiry::ttl(&mut args),
        "pttl" => expiry::pttl(&mut args),
        "expiretime" => expiry::expiretime(&mut args),
        "pexpiretime" => expiry::pexpiretime(&mut args),
        "persist" => expiry::persist(&mut args),
        "type" => expiry::type_of(&mut args),
        "hset" => hashes::hset(&mut args),
        "hsetnx" => hashes::hsetnx(&mut args),
        "hget" => hashes::hget(&mut args),
        "hmget" => hashes::hmget(&mut args),
        "hdel" => hashes::hdel(&mut args),
        "hgetall" => hashes::hgetall(&mut args),
        "hexists" => hashes::hexists(&mut args),
        "hincrby" => hashes::hincrby(&mut args),
        "hlen" => hashes::hlen(&mut args),
        "hkeys" => hashes::hkeys(&mut args),
        "hvals" => hashes::hvals(&mut args),
        "hstrlen" => hashes::hstrlen(&mut args),
        _ => Err(unknown(&name_bytes, args.take_all())),
    }
}

/// Redis's message for an unknown command.
fn unknown(name: &[u8], args: Vec<Bytes>) -> Reply {
    let mut message = format!(
        "unknown command '{}', with args beginning with: ",
        printable(name)
    );
    for arg in args.iter().take(8) {
        message.push_str(&format!("'{}' ", printable(arg)));
    }
    Reply::err(message)
}

/// Up to 128 bytes of client input, safe to echo in an error line.
fn printable(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(128)]);
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloak_core::SetCondition;

    fn req(words: &[&str]) -> Result<Request, Reply> {
        parse(words.iter().map(|w| Bytes::from(w.to_string())).collect())
    }

    #[test]
    fn parses_key_commands() {
        assert_eq!(
            req(&["get", "k"]),
            Ok(Request::Data(Command::Get("k".into())))
        );
        assert_eq!(
            req(&["SET", "k", "v", "nx"]),
            Ok(Request::Data(Command::Set {
                key: "k".into(),
                value: "v".into(),
                condition: SetCondition::IfAbsent
            }))
        );
        assert_eq!(
            req(&["MSET", "a", "1", "b", "2"]),
            Ok(Request::Data(Command::MSet(vec![
                ("a".into(), "1".into()),
                ("b".into(), "2".into())
            ])))
        );
        assert_eq!(
            req(&["del", "a", "b"]),
            Ok(Request::Data(Command::Del(vec!["a".into(), "b".into()])))
        );
        assert_eq!(req(&["dbsize"]), Ok(Request::Data(Command::DbSize)));
    }

    #[test]
    fn refuses_bad_arity_options_and_unknown_commands() {
        let err = |words: &[&str]| match req(words) {
            Err(Reply::Error(e)) => e,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            err(&["get"]),
            "ERR wrong number of arguments for 'get' command"
        );
        assert_eq!(
            err(&["mset", "a"]),
            "ERR wrong number of arguments for 'mset' command"
        );
        assert_eq!(err(&["set", "k", "v", "nx", "xx"]), "ERR syntax error");
        assert_eq!(
            err(&["set", "k", "v", "ex", "0"]),
            "ERR invalid expire time in 'set' command"
        );
        assert_eq!(
            err(&["set", "k", "v", "ex", "1", "px", "1"]),
            "ERR syntax error"
        );
        assert_eq!(
            err(&["set", "k", "v", "keepttl", "ex", "1"]),
            "ERR syntax error"
        );
        assert_eq!(err(&["set", "k", "v", "ex"]), "ERR syntax error");
        assert_eq!(
            err(&["set", "k", "v", "ex", "x"]),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            err(&["expire", "k", "1", "nx", "xx"]),
            "ERR NX and XX, GT or LT options at the same time are not compatible"
        );
        assert_eq!(
            err(&["expire", "k", "1", "foo"]),
            "ERR Unsupported option foo"
        );
        assert_eq!(
            err(&["hset", "k", "f"]),
            "ERR wrong number of arguments for 'hset' command"
        );
        assert_eq!(
            err(&["flushall", "x\ny"]),
            "ERR unknown command 'flushall', with args beginning with: 'x?y' "
        );
    }
}
