//! One script's run: a fresh Lua 5.1 state with Redis's `redis` library, KEYS and ARGV, the
//! unit opened and ended around it, and Redis's conversions between Lua values and replies.

use std::time::{Duration, Instant};

use bytes::Bytes;
use cloak_core::{Command, Outcome, database};
use mlua::{HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState};
use tokio::runtime::Handle;

use super::{Caller, sha1_hex};
use crate::budget::Charge;
use crate::cmd::{self, Request, table};
use crate::connection::to_reply;
use crate::core::CoreStopped;
use crate::resp::Reply;

/// Lua instructions between two looks at the clock.
const CLOCK_EVERY: u32 = 1000;
/// Memory a script's Lua state may take.
const MEMORY_LIMIT: usize = 64 << 20;

/// A script, ready to run.
pub struct Script {
    pub body: Bytes,
    pub sha: String,
    pub keys: Vec<Bytes>,
    pub args: Vec<Bytes>,
    pub read_only: bool,
    pub limit: Duration,
}

/// A `redis.call` that failed: its error reply and the script's line.
#[derive(Debug, thiserror::Error)]
#[error("{reply}")]
struct CallFailed {
    reply: String,
    line: Option<usize>,
}

/// The script ran past the time limit, at this line.
#[derive(Debug, thiserror::Error)]
#[error("the script ran past its time limit")]
struct TimedOut {
    line: Option<usize>,
}

/// How a script's calls reach the engine: through its unit.
struct Bridge<'a> {
    caller: &'a Caller,
    runtime: &'a Handle,
    unit: u64,
    read_only: bool,
}

impl Script {
    /// Compiles, opens the unit, runs, ends the unit: the client's reply. Blocks the thread.
    pub fn run(self, caller: &Caller, runtime: &Handle, charge: Charge) -> Reply {
        let lua = match Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::default(),
        ) {
            Ok(lua) => lua,
            Err(error) => return Reply::err(format!("cannot start Lua: {error}")),
        };
        let function = match lua
            .load(&self.body[..])
            .set_name("@user_script")
            .into_function()
        {
            Ok(function) => function,
            Err(mlua::Error::SyntaxError { message, .. }) => {
                return Reply::err(format!("Error compiling script (new function): {message}"));
            }
            Err(error) => return Reply::err(format!("Error compiling script: {error}")),
        };
        let declared = match database::in_db(
            Command::Script(self.keys.clone()),
            caller.db,
            caller.max_key,
        ) {
            Ok(command) => command,
            Err(error) => return Reply::Error(error.redis_line()),
        };
        let unit = match submit(caller, runtime, declared, Charge::nothing()) {
            Ok(Outcome::ScriptStarted(unit)) => unit,
            Ok(other) => return to_reply(other),
            Err(stopped) => return Reply::err(stopped),
        };
        let bridge = Bridge {
            caller,
            runtime,
            unit,
            read_only: self.read_only,
        };
        let reply = self.call(&lua, function, &bridge);
        // The unit ends whatever the script did: what its calls changed is written (Redis too
        // keeps a failed script's writes), and the keys are let go.
        match submit(caller, runtime, Command::ScriptEnd(unit), charge) {
            Ok(Outcome::Error(error)) => Reply::Error(error.redis_line()),
            Ok(_) => reply,
            Err(stopped) => Reply::err(stopped),
        }
    }

    /// Runs the compiled script with the `redis` library, KEYS and ARGV, within the limits.
    fn call(&self, lua: &Lua, function: mlua::Function, bridge: &Bridge) -> Reply {
        let started = Instant::now();
        let limit = self.limit;
        let set_up = || -> mlua::Result<()> {
            lua.set_memory_limit(MEMORY_LIMIT)?;
            let globals = lua.globals();
            // Redis's sandbox has no file access.
            globals.raw_set("dofile", Value::Nil)?;
            globals.raw_set("loadfile", Value::Nil)?;
            globals.raw_set("KEYS", strings(lua, &self.keys)?)?;
            globals.raw_set("ARGV", strings(lua, &self.args)?)?;
            lua.set_hook(
                HookTriggers::new().every_nth_instruction(CLOCK_EVERY),
                move |_, debug| {
                    if started.elapsed() > limit {
                        let line = debug.current_line();
                        Err(mlua::Error::external(TimedOut { line }))
                    } else {
                        Ok(VmState::Continue)
                    }
                },
            )
        };
        if let Err(error) = set_up() {
            return Reply::err(format!("cannot set up the script: {error}"));
        }
        let result = lua.scope(|scope| {
            let redis = redis_library(lua, scope, bridge)?;
            lua.globals().raw_set("redis", redis)?;
            function.call::<Value>(())
        });
        match result {
            Ok(value) => reply_of(&value),
            Err(error) => self.failure(&error),
        }
    }

    /// A script's error as Redis words it: the error, then which script and where.
    fn failure(&self, error: &mlua::Error) -> Reply {
        let (message, line) = if let Some(failed) = cause::<CallFailed>(error) {
            (failed.reply.clone(), failed.line)
        } else if let Some(timed_out) = cause::<TimedOut>(error) {
            let message = format!(
                "ERR Script killed: it ran longer than {} ms, the proxy's limit for a script",
                self.limit.as_millis()
            );
            (message, timed_out.line)
        } else {
            let text = match error {
                mlua::Error::RuntimeError(text) | mlua::Error::MemoryError(text) => text.clone(),
                other => other.to_string(),
            };
            // Redis reports the message alone; mlua adds Lua's traceback.
            let text = text
                .split("\nstack traceback:")
                .next()
                .unwrap_or_default()
                .to_string();
            let line = text
                .strip_prefix("user_script:")
                .and_then(|rest| rest.split(':').next())
                .and_then(|line| line.parse().ok());
            (format!("ERR {text}"), line)
        };
        let line = line.map_or_else(|| "?".to_string(), |line| line.to_string());
        Reply::Error(format!(
            "{message} script: {}, on @user_script:{line}.",
            self.sha
        ))
    }
}

/// Sends `command` to the core as this client and waits for its outcome.
fn submit(
    caller: &Caller,
    runtime: &Handle,
    command: Command,
    charge: Charge,
) -> Result<Outcome, CoreStopped> {
    runtime.block_on(async {
        let receiver = caller.core.submit(caller.client, command, charge).await?;
        receiver.await.map_err(|_| CoreStopped)
    })
}

/// The innermost error of type `E` behind `error` (a callback's error comes wrapped).
fn cause<E: std::error::Error + 'static>(error: &mlua::Error) -> Option<&E> {
    match error {
        mlua::Error::CallbackError { cause: inner, .. } => cause(inner),
        mlua::Error::ExternalError(external) => external.downcast_ref::<E>(),
        _ => None,
    }
}

/// A Lua array of byte strings (KEYS, ARGV).
fn strings(lua: &Lua, items: &[Bytes]) -> mlua::Result<Table> {
    lua.create_sequence_from(
        items
            .iter()
            .map(|item| lua.create_string(&item[..]))
            .collect::<mlua::Result<Vec<_>>>()?,
    )
}

/// Redis's `redis` table: `call`, `pcall`, `error_reply`, `status_reply`, `sha1hex`, `log`.
fn redis_library<'scope>(
    lua: &Lua,
    scope: &'scope mlua::Scope<'scope, '_>,
    bridge: &'scope Bridge<'scope>,
) -> mlua::Result<Table> {
    let redis = lua.create_table()?;
    redis.raw_set(
        "call",
        scope.create_function(move |lua, args: MultiValue| bridge.call(lua, args, false))?,
    )?;
    redis.raw_set(
        "pcall",
        scope.create_function(move |lua, args: MultiValue| bridge.call(lua, args, true))?,
    )?;
    redis.raw_set(
        "error_reply",
        lua.create_function(|lua, text: mlua::String| {
            reply_table(lua, "err", &error_text(&text.to_string_lossy()))
        })?,
    )?;
    redis.raw_set(
        "status_reply",
        lua.create_function(|lua, text: mlua::String| {
            reply_table(lua, "ok", &text.to_string_lossy())
        })?,
    )?;
    redis.raw_set(
        "sha1hex",
        lua.create_function(|_, text: mlua::String| Ok(sha1_hex(&text.as_bytes())))?,
    )?;
    redis.raw_set(
        "log",
        lua.create_function(|_, (_level, text): (i64, mlua::String)| {
            tracing::info!(target: "cloak::script", "{}", text.to_string_lossy());
            Ok(())
        })?,
    )?;
    for (name, level) in [
        ("LOG_DEBUG", 0),
        ("LOG_VERBOSE", 1),
        ("LOG_NOTICE", 2),
        ("LOG_WARNING", 3),
    ] {
        redis.raw_set(name, level)?;
    }
    Ok(redis)
}

/// `redis.error_reply`'s text: a leading `-` dropped, and `ERR` put before a message without
/// an error code (a first word), as Redis 7 does.
fn error_text(text: &str) -> String {
    match text.strip_prefix('-') {
        Some(rest) if rest.contains(' ') => rest.to_string(),
        Some(rest) => format!("ERR {rest}"),
        None if text.contains(' ') => text.to_string(),
        None => format!("ERR {text}"),
    }
}

/// `{err = text}` or `{ok = text}`.
fn reply_table(lua: &Lua, field: &str, text: &str) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    table.raw_set(field, text)?;
    Ok(table)
}

impl Bridge<'_> {
    /// `redis.call` (`protected`: `redis.pcall`): runs a command on the unit and converts its
    /// reply; a failed `call` raises the error, a failed `pcall` returns it as `{err = …}`.
    fn call(&self, lua: &Lua, args: MultiValue, protected: bool) -> mlua::Result<Value> {
        let reply = match words(lua, args) {
            Ok(words) => self.run(words),
            Err(reply) => reply,
        };
        match reply {
            Reply::Error(reply) if !protected => {
                let line = lua.inspect_stack(1, |debug| debug.current_line()).flatten();
                Err(mlua::Error::external(CallFailed { reply, line }))
            }
            reply => lua_of(lua, reply),
        }
    }

    /// One command of the script, with Redis's errors for what a script may not call.
    fn run(&self, words: Vec<Bytes>) -> Reply {
        let name = String::from_utf8_lossy(&words[0]).to_string();
        let Some(spec) = table::find(table::COMMANDS, &name) else {
            return Reply::err("Unknown Redis command called from script");
        };
        if !spec.arity_allows(words.len()) {
            return Reply::err("Wrong number of args calling Redis command from script");
        }
        if spec.flags.contains(&"noscript") {
            return Reply::err("This Redis command is not allowed from script");
        }
        if self.read_only && spec.flags.contains(&"write") {
            return Reply::err("Write commands are not allowed from read-only scripts.");
        }
        let command = match cmd::parse(words) {
            Ok((_, Request::Data(command))) => command,
            // Only key commands run inside a script here (connection and server commands
            // answer from the connection, which the script does not have).
            Ok(_) => return Reply::err("This Redis command is not allowed from script"),
            Err(reply) => return reply,
        };
        let command = match database::in_db(command, self.caller.db, self.caller.max_key) {
            Ok(command) => command,
            Err(error) => return Reply::Error(error.redis_line()),
        };
        let call = Command::ScriptCall {
            unit: self.unit,
            command: Box::new(command),
        };
        submit(self.caller, self.runtime, call, Charge::nothing()).map_or_else(Reply::err, to_reply)
    }
}

/// A call's arguments as words: strings, and numbers as Lua prints them.
fn words(lua: &Lua, args: MultiValue) -> Result<Vec<Bytes>, Reply> {
    if args.is_empty() {
        return Err(Reply::err(
            "Please specify at least one argument for this redis lib call",
        ));
    }
    args.into_iter()
        .map(|arg| match arg {
            Value::String(_) | Value::Integer(_) | Value::Number(_) => lua
                .coerce_string(arg)
                .ok()
                .flatten()
                .map(|text| Bytes::copy_from_slice(&text.as_bytes())),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Reply::err("Lua redis lib command arguments must be strings or integers"))
}

/// Redis's reply-to-Lua conversion: integers to numbers, bulk strings to strings, nil to
/// false, arrays (and RESP2's flat maps) to tables, status to `{ok = …}`, errors to `{err = …}`.
fn lua_of(lua: &Lua, reply: Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Integer(n) => Value::Integer(n),
        Reply::Bulk(Some(bytes)) => Value::String(lua.create_string(&bytes[..])?),
        Reply::Verbatim(text) => Value::String(lua.create_string(&text)?),
        Reply::Bulk(None) | Reply::NilArray => Value::Boolean(false),
        Reply::Status(text) => Value::Table(reply_table(lua, "ok", &text)?),
        Reply::Error(text) => Value::Table(reply_table(lua, "err", &text)?),
        Reply::Array(items) | Reply::Set(items) => sequence(lua, items)?,
        Reply::Map(fields) => sequence(
            lua,
            fields
                .into_iter()
                .flat_map(|(key, value)| [key, value])
                .collect(),
        )?,
    })
}

fn sequence(lua: &Lua, items: Vec<Reply>) -> mlua::Result<Value> {
    let values = items
        .into_iter()
        .map(|item| lua_of(lua, item))
        .collect::<mlua::Result<Vec<_>>>()?;
    Ok(Value::Table(lua.create_sequence_from(values)?))
}

/// Redis's Lua-to-reply conversion: numbers to integers (truncated), strings to bulk strings,
/// true to 1, false and nil to nil, `{err = …}` to an error, `{ok = …}` to a status, and other
/// tables to arrays up to their first nil.
fn reply_of(value: &Value) -> Reply {
    match value {
        Value::Integer(n) => Reply::Integer(*n),
        Value::Number(n) => Reply::Integer(*n as i64),
        Value::String(text) => Reply::Bulk(Some(Bytes::copy_from_slice(&text.as_bytes()))),
        Value::Boolean(true) => Reply::Integer(1),
        Value::Table(table) => {
            let field = |name: &str| match table.raw_get::<Value>(name) {
                Ok(Value::String(text)) => Some(text.to_string_lossy()),
                _ => None,
            };
            if let Some(error) = field("err") {
                return Reply::Error(error);
            }
            if let Some(status) = field("ok") {
                return Reply::status(status);
            }
            let mut items = Vec::new();
            for index in 1.. {
                match table.raw_get::<Value>(index) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(item) => items.push(reply_of(&item)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Bulk(None),
    }
}
