//! `CLOAK` admin commands: the steps of moving a partition between the proxies of a cluster
//! (see [`crate::cluster::handoff`]). All but `CLOAK MAP` (the public map, which any client may
//! read) need a connection authenticated as the cluster's admin (`AUTH cloak-admin <secret>`,
//! see `cloak_cluster::ClusterSecret`); the client password grants key commands only, and a
//! proxy without a cluster secret has no admin. None reaches storage by itself.

use super::{Args, Request};
use crate::resp::Reply;

/// A `CLOAK` subcommand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminRequest {
    /// `CLOAK MAP`.
    Map,
    /// `CLOAK KEYID partition`.
    KeyId(usize),
    /// `CLOAK CHECK partition keyid`.
    Check { partition: usize, key_id: String },
    /// `CLOAK RELEASE partition map`.
    Release { partition: usize, map: String },
    /// `CLOAK ACQUIRE partition keyid map`.
    Acquire {
        partition: usize,
        key_id: String,
        map: String,
    },
    /// `CLOAK TAKEOVER partition keyid map`: as `ACQUIRE`, but from an owner that does not
    /// answer (the operator says it is dead; see `cluster::handoff`'s `Owner::Down`).
    Takeover {
        partition: usize,
        key_id: String,
        map: String,
    },
    /// `CLOAK ADOPT map`.
    Adopt(String),
}

impl AdminRequest {
    /// The subcommand's name, as Redis's ACL errors give it (`cloak|release`).
    pub fn name(&self) -> &'static str {
        match self {
            AdminRequest::Map => "map",
            AdminRequest::KeyId(_) => "keyid",
            AdminRequest::Check { .. } => "check",
            AdminRequest::Release { .. } => "release",
            AdminRequest::Acquire { .. } => "acquire",
            AdminRequest::Takeover { .. } => "takeover",
            AdminRequest::Adopt(_) => "adopt",
        }
    }

    /// Whether only the cluster's admin may run it: everything that changes which proxy serves
    /// what, or asks a proxy to reach a partition's storage or tell its key's fingerprint.
    pub fn needs_admin(&self) -> bool {
        !matches!(self, AdminRequest::Map)
    }
}

pub fn map(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(0)?;
    Ok(Request::Admin(AdminRequest::Map))
}

pub fn noforward(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(0)?;
    Ok(Request::NoForward)
}

pub fn keyid(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    Ok(Request::Admin(AdminRequest::KeyId(partition(args)?)))
}

pub fn check(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(2)?;
    let partition = partition(args)?;
    let key_id = text(args)?;
    Ok(Request::Admin(AdminRequest::Check { partition, key_id }))
}

pub fn release(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(2)?;
    let partition = partition(args)?;
    let map = text(args)?;
    Ok(Request::Admin(AdminRequest::Release { partition, map }))
}

pub fn acquire(args: &mut Args) -> Result<Request, Reply> {
    let (partition, key_id, map) = partition_key_map(args)?;
    Ok(Request::Admin(AdminRequest::Acquire {
        partition,
        key_id,
        map,
    }))
}

pub fn takeover(args: &mut Args) -> Result<Request, Reply> {
    let (partition, key_id, map) = partition_key_map(args)?;
    Ok(Request::Admin(AdminRequest::Takeover {
        partition,
        key_id,
        map,
    }))
}

/// `partition keyid map`, the arguments of `ACQUIRE` and `TAKEOVER`.
fn partition_key_map(args: &mut Args) -> Result<(usize, String, String), Reply> {
    args.exactly(3)?;
    Ok((partition(args)?, text(args)?, text(args)?))
}

pub fn adopt(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    Ok(Request::Admin(AdminRequest::Adopt(text(args)?)))
}

/// The next argument as a partition number.
fn partition(args: &mut Args) -> Result<usize, Reply> {
    usize::try_from(args.next_integer()?).map_err(|_| Reply::err("the partition must be a number"))
}

/// The next argument as UTF-8 text.
fn text(args: &mut Args) -> Result<String, Reply> {
    String::from_utf8(args.next_bytes()?.to_vec())
        .map_err(|_| Reply::err("the argument must be UTF-8 text"))
}
