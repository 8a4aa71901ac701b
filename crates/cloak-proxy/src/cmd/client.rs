//! `CLIENT` subcommands: names, library info, ids, the client list, eviction flags and KILL.
//!
//! None of these reaches the storage server: they read or change the proxy's own record of its
//! connections.

use bytes::Bytes;

use super::integer;
use super::{Args, Request};
use crate::resp::Reply;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientRequest {
    /// An empty name clears it.
    SetName(Bytes),
    GetName,
    SetInfo(LibAttribute, Bytes),
    Id,
    Info,
    /// `CLIENT LIST`, only these ids if some are given; `only_normal == false` lists nobody
    /// (`TYPE master|replica|pubsub`: the proxy has no such clients).
    List {
        ids: Vec<u64>,
        only_normal: bool,
    },
    NoEvict(bool),
    NoTouch(bool),
    Kill(KillFilter),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LibAttribute {
    Name,
    Version,
}

/// Which clients `CLIENT KILL` closes: those matching every given field.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KillFilter {
    pub id: Option<u64>,
    pub addr: Option<String>,
    pub laddr: Option<String>,
    pub user: Option<String>,
    /// Clients connected at least this many seconds.
    pub max_age: Option<u64>,
    /// `TYPE master|replica|pubsub` matches nobody here.
    pub no_normal: bool,
    /// Whether the caller itself is spared (the new form's default).
    pub skip_me: bool,
    /// The old form, `CLIENT KILL addr:port`: replies OK or an error, not a count.
    pub old_form: bool,
}

/// Redis's rule for names and library info: printable ASCII without spaces.
fn printable_without_spaces(value: &[u8]) -> bool {
    value.iter().all(|b| (b'!'..=b'~').contains(b))
}

/// A client name Redis accepts, else its error.
pub fn check_name(name: &[u8]) -> Result<(), Reply> {
    if printable_without_spaces(name) {
        Ok(())
    } else {
        Err(Reply::err(
            "Client names cannot contain spaces, newlines or special characters.",
        ))
    }
}

fn request(client: ClientRequest) -> Result<Request, Reply> {
    Ok(Request::Client(client))
}

pub fn setname(args: &mut Args) -> Result<Request, Reply> {
    let name = args.next_bytes()?;
    check_name(&name)?;
    request(ClientRequest::SetName(name))
}

pub fn getname(_: &mut Args) -> Result<Request, Reply> {
    request(ClientRequest::GetName)
}

/// `CLIENT SETINFO LIB-NAME name` or `CLIENT SETINFO LIB-VER version`.
pub fn setinfo(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(2)?;
    let (attribute, value) = (args.next_bytes()?, args.next_bytes()?);
    let (attribute, label) = if attribute.eq_ignore_ascii_case(b"lib-name") {
        (LibAttribute::Name, "lib-name")
    } else if attribute.eq_ignore_ascii_case(b"lib-ver") {
        (LibAttribute::Version, "lib-ver")
    } else {
        return Err(Reply::err(format!(
            "Unrecognized option '{}'",
            String::from_utf8_lossy(&attribute)
        )));
    };
    if !printable_without_spaces(&value) {
        return Err(Reply::err(format!(
            "{label} cannot contain spaces, newlines or special characters."
        )));
    }
    request(ClientRequest::SetInfo(attribute, value))
}

pub fn id(_: &mut Args) -> Result<Request, Reply> {
    request(ClientRequest::Id)
}

pub fn info(_: &mut Args) -> Result<Request, Reply> {
    request(ClientRequest::Info)
}

/// `CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id …]`.
pub fn list(args: &mut Args) -> Result<Request, Reply> {
    let mut ids = Vec::new();
    let mut only_normal = true;
    while let Some(option) = args.next() {
        if option.eq_ignore_ascii_case(b"TYPE") && args.len() >= 1 {
            let kind = args.next_bytes()?;
            only_normal = client_type(&kind)?;
        } else if option.eq_ignore_ascii_case(b"ID") && args.len() >= 1 {
            for id in args.by_ref() {
                match integer(&id).ok() {
                    Some(id) if id > 0 => ids.push(id as u64),
                    _ => return Err(Reply::err("Invalid client ID")),
                }
            }
        } else {
            return Err(Reply::err("syntax error"));
        }
    }
    request(ClientRequest::List { ids, only_normal })
}

/// Whether a `TYPE` names the clients the proxy has (`normal`), else Redis's error for a type
/// it does not know.
fn client_type(kind: &[u8]) -> Result<bool, Reply> {
    let kind = String::from_utf8_lossy(kind);
    match kind.to_lowercase().as_str() {
        "normal" => Ok(true),
        "master" | "replica" | "slave" | "pubsub" => Ok(false),
        _ => Err(Reply::err(format!("Unknown client type '{kind}'"))),
    }
}

fn on_off(args: &mut Args) -> Result<bool, Reply> {
    match args.next() {
        Some(value) if value.eq_ignore_ascii_case(b"on") => Ok(true),
        Some(value) if value.eq_ignore_ascii_case(b"off") => Ok(false),
        _ => Err(Reply::err("syntax error")),
    }
}

/// The proxy never evicts a client for memory, so this only records the client's wish.
pub fn no_evict(args: &mut Args) -> Result<Request, Reply> {
    request(ClientRequest::NoEvict(on_off(args)?))
}

/// The proxy keeps no access times for keys, so this only records the client's wish.
pub fn no_touch(args: &mut Args) -> Result<Request, Reply> {
    request(ClientRequest::NoTouch(on_off(args)?))
}

/// `CLIENT KILL addr:port` or `CLIENT KILL <filter value> …`.
pub fn kill(args: &mut Args) -> Result<Request, Reply> {
    let mut filter = KillFilter {
        skip_me: true,
        ..KillFilter::default()
    };
    if args.len() == 1 {
        let addr = args.next_bytes()?;
        filter.addr = Some(String::from_utf8_lossy(&addr).into_owned());
        filter.skip_me = false;
        filter.old_form = true;
        return request(ClientRequest::Kill(filter));
    }
    while let Some(field) = args.next() {
        let Some(value) = args.next() else {
            return Err(Reply::err("syntax error"));
        };
        let text = String::from_utf8_lossy(&value).into_owned();
        match String::from_utf8_lossy(&field).to_lowercase().as_str() {
            "id" => match integer(&value).ok() {
                Some(id) if id > 0 => filter.id = Some(id as u64),
                _ => return Err(Reply::err("client-id should be greater than 0")),
            },
            "addr" => filter.addr = Some(text),
            "laddr" => filter.laddr = Some(text),
            "user" => filter.user = Some(text),
            "type" => filter.no_normal = !client_type(&value)?,
            "maxage" => match integer(&value).ok() {
                Some(age) if age >= 0 => filter.max_age = Some(age as u64),
                _ => return Err(Reply::err("syntax error")),
            },
            "skipme" => {
                filter.skip_me = match text.to_lowercase().as_str() {
                    "yes" => true,
                    "no" => false,
                    _ => return Err(Reply::err("syntax error")),
                }
            }
            _ => return Err(Reply::err("syntax error")),
        }
    }
    request(ClientRequest::Kill(filter))
}
