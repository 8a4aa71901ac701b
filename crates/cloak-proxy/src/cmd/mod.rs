//! The commands the proxy understands, parsed from RESP arguments.
//!
//! Key commands become [`cloak_core::Command`]s for the engine ([`keys`]); connection and server
//! commands are answered by the front end itself ([`connection`], [`server`]). Everything else
//! is refused the way Redis refuses an unknown command.

mod connection;
mod keys;
mod keyspace;
mod server;
mod strings;
mod transactions;

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
    Multi,
    Exec,
    Discard,
    /// WATCH (a `Command::Watch`), which the connection refuses inside MULTI.
    Watch(Command),
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
    "incr",
    "incrby",
    "decr",
    "decrby",
    "incrbyfloat",
    "append",
    "strlen",
    "getrange",
    "setrange",
    "getset",
    "getdel",
    "setnx",
    "msetnx",
    "unlink",
    "touch",
    "copy",
    "rename",
    "renamenx",
    "randomkey",
    "keys",
    "scan",
    "flushdb",
    "flushall",
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
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

    /// The next argument, after an arity check made sure there is one (empty if there is not).
    pub fn first(&mut self) -> Bytes {
        self.next().unwrap_or_default()
    }

    /// The rest as key-value pairs (MSET, MSETNX): at least one pair, else the arity error.
    pub fn pairs(&mut self) -> Result<Vec<(Bytes, Bytes)>, Reply> {
        if self.len() == 0 || !self.len().is_multiple_of(2) {
            return Err(self.arity());
        }
        let flat = self.take_all();
        Ok(flat
            .chunks_exact(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect())
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
        "incr" => strings::incr(&mut args),
        "incrby" => strings::incrby(&mut args),
        "decr" => strings::decr(&mut args),
        "decrby" => strings::decrby(&mut args),
        "incrbyfloat" => strings::incrbyfloat(&mut args),
        "append" => strings::append(&mut args),
        "strlen" => strings::strlen(&mut args),
        "getrange" => strings::getrange(&mut args),
        "setrange" => strings::setrange(&mut args),
        "getset" => strings::getset(&mut args),
        "getdel" => strings::getdel(&mut args),
        "setnx" => strings::setnx(&mut args),
        "msetnx" => strings::msetnx(&mut args),
        "unlink" => keys::del(&mut args),
        "touch" => keys::exists(&mut args),
        "copy" => keyspace::copy(&mut args),
        "rename" => keyspace::rename(&mut args),
        "renamenx" => keyspace::renamenx(&mut args),
        "randomkey" => keyspace::randomkey(&mut args),
        "keys" => keyspace::keys(&mut args),
        "scan" => keyspace::scan(&mut args),
        "flushdb" => keyspace::flushdb(&mut args),
        "flushall" => keyspace::flushall(&mut args),
        "multi" => transactions::multi(&mut args),
        "exec" => transactions::exec(&mut args),
        "discard" => transactions::discard(&mut args),
        "watch" => transactions::watch(&mut args),
        "unwatch" => transactions::unwatch(&mut args),
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
        assert_eq!(
            req(&["dbsize"]),
            Ok(Request::Data(Command::DbSize(Default::default())))
        );
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
        assert!(err(&["set", "k", "v", "ex", "10"]).contains("expiry"));
        assert_eq!(
            err(&["frobnicate", "x\ny"]),
            "ERR unknown command 'frobnicate', with args beginning with: 'x?y' "
        );
    }
}
