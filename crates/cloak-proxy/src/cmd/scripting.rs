//! Scripting commands: EVAL EVALSHA EVAL_RO EVALSHA_RO and SCRIPT LOAD|EXISTS|FLUSH, parsed here
//! and run by [`crate::scripting`].

use bytes::Bytes;

use super::{Args, Request};
use crate::resp::Reply;

/// Which script an EVAL names.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// EVAL: the script itself.
    Body(Bytes),
    /// EVALSHA: the SHA1 of a script run or loaded before.
    Sha(Bytes),
}

/// An EVAL and its relatives.
#[derive(Debug, Clone, PartialEq)]
pub struct Eval {
    pub source: Source,
    /// KEYS: the keys the script may touch (it may touch no other, see `scripting`).
    pub keys: Vec<Bytes>,
    /// ARGV.
    pub args: Vec<Bytes>,
    /// EVAL_RO, EVALSHA_RO: write commands are refused.
    pub read_only: bool,
}

/// A SCRIPT subcommand.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptRequest {
    Load(Bytes),
    Exists(Vec<Bytes>),
    Flush,
}

pub fn eval(args: &mut Args) -> Result<Request, Reply> {
    evaluating(args, Source::Body, false)
}

pub fn evalsha(args: &mut Args) -> Result<Request, Reply> {
    evaluating(args, Source::Sha, false)
}

pub fn eval_ro(args: &mut Args) -> Result<Request, Reply> {
    evaluating(args, Source::Body, true)
}

pub fn evalsha_ro(args: &mut Args) -> Result<Request, Reply> {
    evaluating(args, Source::Sha, true)
}

/// `script numkeys [key …] [arg …]`, with Redis's errors for a bad key count.
fn evaluating(
    args: &mut Args,
    source: fn(Bytes) -> Source,
    read_only: bool,
) -> Result<Request, Reply> {
    args.at_least(2)?;
    let script = args.next_bytes()?;
    let count = args.next_integer()?;
    if count < 0 {
        return Err(Reply::err("Number of keys can't be negative"));
    }
    let mut rest = args.take_all();
    if count as u64 > rest.len() as u64 {
        return Err(Reply::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    let args = rest.split_off(count as usize);
    Ok(Request::Eval(Eval {
        source: source(script),
        keys: rest,
        args,
        read_only,
    }))
}

pub fn script_load(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    Ok(Request::Script(ScriptRequest::Load(args.next_bytes()?)))
}

pub fn script_exists(args: &mut Args) -> Result<Request, Reply> {
    args.at_least(1)?;
    Ok(Request::Script(ScriptRequest::Exists(args.take_all())))
}

/// `SCRIPT FLUSH [ASYNC | SYNC]`: both forget every script at once.
pub fn script_flush(args: &mut Args) -> Result<Request, Reply> {
    match args.take_all().as_slice() {
        [] => Ok(Request::Script(ScriptRequest::Flush)),
        [mode] if mode.eq_ignore_ascii_case(b"async") || mode.eq_ignore_ascii_case(b"sync") => {
            Ok(Request::Script(ScriptRequest::Flush))
        }
        [_] => Err(Reply::err("SCRIPT FLUSH only support SYNC|ASYNC option")),
        _ => Err(args.arity()),
    }
}
