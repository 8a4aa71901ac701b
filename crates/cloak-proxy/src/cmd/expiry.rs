//! Expiry commands: SET's expiry options, SETEX PSETEX GETEX EXPIRE PEXPIRE EXPIREAT PEXPIREAT
//! TTL PTTL EXPIRETIME PEXPIRETIME PERSIST, and TYPE, with Redis's errors.
//!
//! What storage sees (see `cloak_core::engine`): `TTL` and its relatives, and `TYPE`, answer
//! from the proxy's memory and make no storage access at all, like `EXISTS`. `SETEX`, `PSETEX`
//! and `SET … EX` are one write of one key, as `SET` is: the deadline travels sealed inside the
//! element. `EXPIRE`, `PERSIST` and `GETEX` with an option read the key and write it back (a
//! cover read in place of the write when nothing changes, and two cover reads for a key that
//! does not exist, where reads are covered): a GET and a SET of one key, which every scheme
//! hides.

use bytes::Bytes;
use cloak_core::{
    Command, Deadline, ExpireCondition, GetExChange, SetCondition, SetExpiry, TtlUnit, Update,
};

use super::{Args, Request, integer};
use crate::resp::Reply;

/// The options of `SET` (and, a subset, of `GETEX`), as Redis's
/// `parseExtendedStringArgumentsOrReply` reads them: a repeated option is allowed, conflicting
/// ones are a syntax error, and the expiry's value is checked only once all options parsed.
#[derive(Default)]
pub struct ExpiryOptions {
    pub condition: SetCondition,
    pub keep_ttl: bool,
    pub persist: bool,
    /// `SET … GET`: answer the old value.
    pub get: bool,
    /// `(unit in ms, absolute, the value as given)`.
    expiry: Option<(i64, bool, Bytes)>,
}

/// Which command the options belong to: SET takes NX XX KEEPTTL, GETEX takes PERSIST.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum OptionsOf {
    Set,
    GetEx,
}

impl ExpiryOptions {
    /// Reads the options left in `args`.
    pub fn parse(args: &mut Args, of: OptionsOf) -> Result<Self, Reply> {
        let mut options = Self::default();
        let mut unit = None;
        while let Some(option) = args.next() {
            let option = String::from_utf8_lossy(&option).to_uppercase();
            let timed = options.expiry.is_some();
            let free = !timed && !options.keep_ttl && !options.persist;
            match option.as_str() {
                "NX" if of == OptionsOf::Set && options.condition != SetCondition::IfPresent => {
                    options.condition = SetCondition::IfAbsent
                }
                "XX" if of == OptionsOf::Set && options.condition != SetCondition::IfAbsent => {
                    options.condition = SetCondition::IfPresent
                }
                "KEEPTTL" if of == OptionsOf::Set && !timed && !options.persist => {
                    options.keep_ttl = true
                }
                "GET" if of == OptionsOf::Set => options.get = true,
                "PERSIST" if of == OptionsOf::GetEx && !timed && !options.keep_ttl => {
                    options.persist = true
                }
                "EX" | "PX" | "EXAT" | "PXAT"
                    if (free || unit == Some(option.clone())) && args.len() > 0 =>
                {
                    let value = args.next_bytes()?;
                    let (ms, absolute) = match option.as_str() {
                        "EX" => (1000, false),
                        "PX" => (1, false),
                        "EXAT" => (1000, true),
                        _ => (1, true),
                    };
                    options.expiry = Some((ms, absolute, value));
                    unit = Some(option);
                }
                _ => return Err(syntax_error()),
            }
        }
        Ok(options)
    }

    /// The deadline given, checked as Redis checks it (`name` is the command's, for the error).
    pub fn deadline(&self, name: &'static str) -> Result<Option<Deadline>, Reply> {
        let Some((unit, absolute, value)) = &self.expiry else {
            return Ok(None);
        };
        let given = integer(value)?;
        if given <= 0 {
            return Err(invalid_expire(name));
        }
        let ms = given
            .checked_mul(*unit)
            .ok_or_else(|| invalid_expire(name))?;
        Ok(Some(if *absolute {
            Deadline::At(ms)
        } else {
            Deadline::In(ms)
        }))
    }
}

/// `SET key value [NX | XX] [GET] [EX s | PX ms | EXAT t | PXAT t | KEEPTTL]`. With `GET` it is
/// a read-modify-write (see `cloak_core::update`).
pub fn set_options(key: Bytes, value: Bytes, args: &mut Args) -> Result<Request, Reply> {
    let options = ExpiryOptions::parse(args, OptionsOf::Set)?;
    let expiry = match options.deadline("set")? {
        Some(deadline) => Some(SetExpiry::At(deadline)),
        None if options.keep_ttl => Some(SetExpiry::Keep),
        None => None,
    };
    if options.get {
        return Ok(Request::Data(Command::Update {
            key,
            op: Update::Replace {
                value,
                condition: options.condition,
                expiry,
            },
        }));
    }
    Ok(Request::Data(match expiry {
        None => Command::Set {
            key,
            value,
            condition: options.condition,
        },
        Some(expiry) => Command::SetExpiring {
            key,
            value,
            condition: options.condition,
            expiry,
            name: "set",
        },
    }))
}

/// `SETEX key seconds value`.
pub fn setex(args: &mut Args) -> Result<Request, Reply> {
    set_for(args, 1000, "setex")
}

/// `PSETEX key milliseconds value`.
pub fn psetex(args: &mut Args) -> Result<Request, Reply> {
    set_for(args, 1, "psetex")
}

fn set_for(args: &mut Args, unit: i64, name: &'static str) -> Result<Request, Reply> {
    args.exactly(3)?;
    let key = args.next_bytes()?;
    let time = args.next_bytes()?;
    let value = args.next_bytes()?;
    let options = ExpiryOptions {
        expiry: Some((unit, false, time)),
        ..ExpiryOptions::default()
    };
    let deadline = options.deadline(name)?.expect("given above");
    Ok(Request::Data(Command::SetExpiring {
        key,
        value,
        condition: SetCondition::Always,
        expiry: SetExpiry::At(deadline),
        name,
    }))
}

/// `GETEX key [EX s | PX ms | EXAT t | PXAT t | PERSIST]`.
pub fn getex(args: &mut Args) -> Result<Request, Reply> {
    args.at_least(1)?;
    let key = args.next_bytes()?;
    let options = ExpiryOptions::parse(args, OptionsOf::GetEx)?;
    let change = match options.deadline("getex")? {
        Some(deadline) => Some(GetExChange::At(deadline)),
        None if options.persist => Some(GetExChange::Persist),
        None => None,
    };
    Ok(Request::Data(Command::GetEx {
        key,
        change,
        name: "getex",
    }))
}

pub fn expire(args: &mut Args) -> Result<Request, Reply> {
    expire_with(args, 1000, false, "expire")
}

pub fn pexpire(args: &mut Args) -> Result<Request, Reply> {
    expire_with(args, 1, false, "pexpire")
}

pub fn expireat(args: &mut Args) -> Result<Request, Reply> {
    expire_with(args, 1000, true, "expireat")
}

pub fn pexpireat(args: &mut Args) -> Result<Request, Reply> {
    expire_with(args, 1, true, "pexpireat")
}

/// Redis's `expireGenericCommand`: options first, then the time (negative is allowed: the key
/// goes at once).
fn expire_with(
    args: &mut Args,
    unit: i64,
    absolute: bool,
    name: &'static str,
) -> Result<Request, Reply> {
    args.at_least(2)?;
    let key = args.next_bytes()?;
    let time = args.next_bytes()?;
    let condition = expire_condition(args)?;
    let given = integer(&time)?;
    let ms = given
        .checked_mul(unit)
        .ok_or_else(|| invalid_expire(name))?;
    let deadline = if absolute {
        Deadline::At(ms)
    } else {
        Deadline::In(ms)
    };
    Ok(Request::Data(Command::Expire {
        key,
        deadline,
        condition,
        name,
    }))
}

/// `NX | XX | GT | LT`, with Redis's errors for unknown and conflicting options.
fn expire_condition(args: &mut Args) -> Result<ExpireCondition, Reply> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in args.by_ref() {
        match String::from_utf8_lossy(&option).to_uppercase().as_str() {
            "NX" => nx = true,
            "XX" => xx = true,
            "GT" => gt = true,
            "LT" => lt = true,
            _ => {
                return Err(Reply::err(format!(
                    "Unsupported option {}",
                    String::from_utf8_lossy(&option)
                )));
            }
        }
    }
    if nx && (xx || gt || lt) {
        return Err(Reply::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(Reply::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    Ok(match (nx, xx, gt, lt) {
        (true, ..) => ExpireCondition::IfNone,
        // GT already fails for a key without a deadline, so XX adds nothing to it.
        (_, _, true, _) => ExpireCondition::IfLater,
        (_, true, _, true) => ExpireCondition::IfSomeAndEarlier,
        (_, _, _, true) => ExpireCondition::IfEarlier,
        (_, true, _, _) => ExpireCondition::IfSome,
        _ => ExpireCondition::Always,
    })
}

pub fn ttl(args: &mut Args) -> Result<Request, Reply> {
    ttl_in(args, TtlUnit::Seconds)
}

pub fn pttl(args: &mut Args) -> Result<Request, Reply> {
    ttl_in(args, TtlUnit::Millis)
}

pub fn expiretime(args: &mut Args) -> Result<Request, Reply> {
    ttl_in(args, TtlUnit::UnixSeconds)
}

pub fn pexpiretime(args: &mut Args) -> Result<Request, Reply> {
    ttl_in(args, TtlUnit::UnixMillis)
}

fn ttl_in(args: &mut Args, unit: TtlUnit) -> Result<Request, Reply> {
    args.exactly(1)?;
    let key = args.next_bytes()?;
    Ok(Request::Data(Command::Ttl { key, unit }))
}

pub fn persist(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    Ok(Request::Data(Command::Persist(args.next_bytes()?)))
}

/// `TYPE key`: answered from memory.
pub fn type_of(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    Ok(Request::Data(Command::Type(args.next_bytes()?)))
}

fn syntax_error() -> Reply {
    Reply::err("syntax error")
}

fn invalid_expire(name: &str) -> Reply {
    Reply::err(format!("invalid expire time in '{name}' command"))
}
