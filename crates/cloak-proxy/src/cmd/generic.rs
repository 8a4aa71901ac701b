//! Commands on keys as a whole: COPY RENAME RENAMENX RANDOMKEY KEYS SCAN FLUSHDB FLUSHALL.
//! (UNLINK is DEL and TOUCH is EXISTS, see `keys`: deletes are immediate writes anyway, and no
//! access time is kept.)
//!
//! KEYS, SCAN and RANDOMKEY are answered from the proxy's key directory and cause no storage
//! traffic at all. The flushes are ordinary deletes (a write of an empty record to each key's
//! slot, as DEL). RENAME and COPY read the source and write the destination (and, for
//! RENAME, delete the source) as one engine unit: reads and writes of keys, as GET and SET make.
//! The database a command names is set by the connection (see `cloak_core::database`).

use cloak_core::{Command, Db};

use super::integer;
use super::{Args, Request};
use crate::resp::Reply;

pub fn rename(args: &mut Args) -> Result<Request, Reply> {
    renaming(args, false)
}

pub fn renamenx(args: &mut Args) -> Result<Request, Reply> {
    renaming(args, true)
}

fn renaming(args: &mut Args, only_if_absent: bool) -> Result<Request, Reply> {
    args.exactly(2)?;
    Ok(Request::Data(Command::Rename {
        from: args.next_bytes()?,
        to: args.next_bytes()?,
        only_if_absent,
    }))
}

/// A database number argument, with Redis's errors.
pub(super) fn db(arg: &[u8]) -> Result<Db, Reply> {
    Db::new(integer(arg)?).ok_or_else(|| Reply::err("DB index is out of range"))
}

/// `COPY source destination [DB n] [REPLACE]`.
pub fn copy(args: &mut Args) -> Result<Request, Reply> {
    args.at_least(2)?;
    let (from, to) = (args.next_bytes()?, args.next_bytes()?);
    let mut replace = false;
    let mut to_db = None;
    while let Some(option) = args.next() {
        match option.to_ascii_uppercase().as_slice() {
            b"REPLACE" => replace = true,
            b"DB" => {
                let index = args.next().ok_or_else(|| Reply::err("syntax error"))?;
                to_db = Some(db(&index)?);
            }
            _ => return Err(Reply::err("syntax error")),
        }
    }
    Ok(Request::Data(Command::Copy {
        from,
        to,
        replace,
        to_db,
    }))
}

pub fn randomkey(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(0)?;
    Ok(Request::Data(Command::RandomKey(Db::default())))
}

pub fn keys(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    Ok(Request::Data(Command::Keys {
        db: Db::default(),
        pattern: args.next_bytes()?,
    }))
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`.
pub fn scan(args: &mut Args) -> Result<Request, Reply> {
    args.at_least(1)?;
    let cursor = std::str::from_utf8(&args.next_bytes()?)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Reply::err("invalid cursor"))?;
    let (mut pattern, mut kind, mut count) = (None, None, 10);
    while let Some(option) = args.next() {
        let value = args.next().ok_or_else(|| Reply::err("syntax error"))?;
        match option.to_ascii_uppercase().as_slice() {
            b"MATCH" => pattern = Some(value),
            b"TYPE" => kind = Some(value),
            b"COUNT" => {
                count = usize::try_from(integer(&value)?)
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| Reply::err("syntax error"))?;
            }
            _ => return Err(Reply::err("syntax error")),
        }
    }
    Ok(Request::Data(Command::Scan {
        db: Db::default(),
        cursor,
        pattern,
        kind,
        count,
    }))
}

pub fn flushdb(args: &mut Args) -> Result<Request, Reply> {
    flush_mode(args)?;
    Ok(Request::Data(Command::Flush(Some(Db::default()))))
}

pub fn flushall(args: &mut Args) -> Result<Request, Reply> {
    flush_mode(args)?;
    Ok(Request::Data(Command::Flush(None)))
}

/// `ASYNC` or `SYNC`: both delete at once (deletes are ordinary writes, acknowledged as such).
fn flush_mode(args: &mut Args) -> Result<(), Reply> {
    match args.next() {
        None => Ok(()),
        Some(mode)
            if args.len() == 0
                && (mode.eq_ignore_ascii_case(b"ASYNC") || mode.eq_ignore_ascii_case(b"SYNC")) =>
        {
            Ok(())
        }
        Some(_) => Err(Reply::err("syntax error")),
    }
}
