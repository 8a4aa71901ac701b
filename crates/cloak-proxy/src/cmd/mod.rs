//! The commands the proxy understands, parsed from RESP arguments.
//!
//! Which commands exist is [`table`]'s one list. Key commands become [`cloak_core::Command`]s
//! for the engine (`keys`); connection, client and server commands are answered by the front
//! end itself (`connection`, `client`, `server`). Everything else is refused the way Redis
//! refuses an unknown command.

mod admin;
mod client;
mod cluster;
mod connection;
mod expiry;
mod generic;
mod hashes;
mod keys;
mod scripting;
mod server;
mod strings;
pub mod table;
mod transactions;

use bytes::Bytes;
use cloak_core::Command;

use crate::resp::Reply;

pub use admin::AdminRequest;
pub use client::{ClientRequest, KillFilter, LibAttribute};
pub use cluster::ClusterRequest;
pub use connection::{DATABASES, Hello};
pub use scripting::{Eval, ScriptRequest, Source};
pub use server::CommandQuery;

/// A parsed request. Only [`Request::Data`] reaches the engine (and so storage); the front end
/// answers every other one from what it holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// A key command, run by the engine.
    Data(Command),
    /// `PING [message]`.
    Ping(Option<Bytes>),
    Echo(Bytes),
    /// `AUTH [user] password`.
    Auth {
        user: Option<Bytes>,
        password: Bytes,
    },
    Quit,
    /// `SELECT index`.
    Select(i64),
    /// `HELLO`: protocol, authentication and name at once.
    Hello(Hello),
    /// `RESET`: the connection back to its initial state.
    Reset,
    /// A `CLIENT` subcommand.
    Client(ClientRequest),
    /// Lower-case section names; empty for the default sections.
    Info(Vec<String>),
    /// `CONFIG GET pattern…`.
    ConfigGet(Vec<Bytes>),
    /// `COMMAND` and its subcommands.
    Command(CommandQuery),
    /// `TIME`.
    Time,
    /// `SHUTDOWN`, or with `abort`, `SHUTDOWN ABORT`.
    Shutdown {
        abort: bool,
    },
    Multi,
    Exec,
    Discard,
    /// WATCH (a `Command::Watch`), which the connection refuses inside MULTI.
    Watch(Command),
    /// EVAL and its relatives (run by `crate::scripting`).
    Eval(Eval),
    /// A `SCRIPT` subcommand.
    Script(ScriptRequest),
    /// A `CLUSTER` subcommand.
    Cluster(ClusterRequest),
    /// `READONLY` or `READWRITE`: accepted in a cluster (there are no replicas to read from).
    ReadOnly,
    /// `CLOAK.HEALTH [nonce]`: whether each partition hosted here can serve (what the other
    /// proxies of a cluster probe); with a nonce, signed for that question.
    Health(Option<String>),
    /// A `CLOAK` admin subcommand (moving partitions between a cluster's proxies).
    Admin(AdminRequest),
    /// `CLOAK NOFORWARD`: this connection's commands are never forwarded to another proxy. A
    /// proxy that forwards marks its connections to the others so (see
    /// [`crate::cluster::forward`]).
    NoForward,
}

impl Request {
    /// Whether a client may send this before authenticating (Redis's `no_auth` commands;
    /// `HELLO` without `AUTH` is refused when it runs).
    pub fn allowed_before_auth(&self) -> bool {
        matches!(
            self,
            Request::Auth { .. } | Request::Quit | Request::Hello(_) | Request::Reset
        )
    }
}

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

    /// The next argument, or the arity error if there is none. Commands check their arity
    /// first, as Redis's command table does (so `INCRBY k x extra` is an arity error, not an
    /// integer one); this error is then only reached by a command whose check is wrong, and it
    /// is still the right one.
    pub fn next_bytes(&mut self) -> Result<Bytes, Reply> {
        self.next().ok_or_else(|| self.arity())
    }

    /// The next argument as an integer ([`integer`]), or the arity error if there is none.
    pub fn next_integer(&mut self) -> Result<i64, Reply> {
        integer(&self.next_bytes()?)
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
        arity_error(&self.name)
    }

    /// Exactly `n` arguments remain, else the arity error.
    pub fn exactly(&self, n: usize) -> Result<(), Reply> {
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

/// An integer argument as Redis reads one (`string2ll`: an optional minus sign and digits, no
/// `+`, no spaces, no leading zeros, within 64 bits), or Redis's error for one that is not.
pub fn integer(arg: &[u8]) -> Result<i64, Reply> {
    cloak_core::hash::parse_integer(arg)
        .ok_or_else(|| Reply::err("value is not an integer or out of range"))
}

/// Parses one request into the command's name (`client|list` for a subcommand, as Redis names
/// it) and what to run; `Err` is the reply to send instead of running anything.
pub fn parse(mut request: Vec<Bytes>) -> Result<(&'static str, Request), Reply> {
    if request.is_empty() {
        return Err(Reply::err("empty command"));
    }
    let words = request.len();
    let name_bytes = request.remove(0);
    let name = String::from_utf8_lossy(&name_bytes);
    let Some(mut spec) = table::find(table::COMMANDS, &name) else {
        return Err(unknown(&name_bytes, request));
    };
    loop {
        if !spec.arity_allows(words) {
            return Err(arity_error(spec.name));
        }
        let parse = match spec.run {
            table::Run::Parse(parse) => parse,
            table::Run::Container(_, Some(parse)) if request.is_empty() => parse,
            // The arity check above keeps a container that needs a subcommand from coming here
            // without one.
            table::Run::Container(_, None) if request.is_empty() => {
                return Err(arity_error(spec.name));
            }
            table::Run::Container(subcommands, _) => {
                let sub = request.remove(0);
                spec =
                    table::find(subcommands, &String::from_utf8_lossy(&sub)).ok_or_else(|| {
                        Reply::err(format!(
                            "unknown subcommand '{}'. Try {} HELP.",
                            printable(&sub),
                            spec.name.to_uppercase()
                        ))
                    })?;
                continue;
            }
        };
        let request = parse(&mut Args {
            name: spec.name.to_string(),
            rest: request.into_iter(),
        })?;
        return Ok((spec.name, request));
    }
}

/// Redis's error for a wrong number of arguments.
fn arity_error(name: &str) -> Reply {
    Reply::err(format!("wrong number of arguments for '{name}' command"))
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
        parse(words.iter().map(|w| Bytes::from(w.to_string())).collect()).map(|(_, r)| r)
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
            err(&["client", "setname"]),
            "ERR wrong number of arguments for 'client|setname' command"
        );
        assert_eq!(
            err(&["client"]),
            "ERR wrong number of arguments for 'client' command"
        );
        assert_eq!(
            err(&["CLIENT", "Frob"]),
            "ERR unknown subcommand 'Frob'. Try CLIENT HELP."
        );
        assert_eq!(
            err(&["time", "x"]),
            "ERR wrong number of arguments for 'time' command"
        );
        assert_eq!(
            err(&["frobnicate", "x\ny"]),
            "ERR unknown command 'frobnicate', with args beginning with: 'x?y' "
        );
    }
}
