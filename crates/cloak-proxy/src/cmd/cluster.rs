//! Cluster commands: `CLUSTER SLOTS SHARDS NODES INFO KEYSLOT MYID`, `READONLY`, `READWRITE`,
//! and Cloak's `CLOAK.HEALTH`.
//!
//! They describe the public cluster map (or, on a proxy that is not part of a cluster, are
//! refused as Redis refuses them with cluster support disabled); none reaches storage.

use bytes::Bytes;

use super::{Args, Request};
use crate::cluster::health_report::MAX_NONCE;
use crate::resp::Reply;

/// A `CLUSTER` subcommand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterRequest {
    Slots,
    Shards,
    Nodes,
    Info,
    KeySlot(Bytes),
    MyId,
}

pub fn slots(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(0)?;
    Ok(Request::Cluster(ClusterRequest::Slots))
}

pub fn shards(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(0)?;
    Ok(Request::Cluster(ClusterRequest::Shards))
}

pub fn nodes(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(0)?;
    Ok(Request::Cluster(ClusterRequest::Nodes))
}

pub fn info(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(0)?;
    Ok(Request::Cluster(ClusterRequest::Info))
}

pub fn keyslot(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(1)?;
    Ok(Request::Cluster(ClusterRequest::KeySlot(
        args.next_bytes()?,
    )))
}

pub fn myid(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(0)?;
    Ok(Request::Cluster(ClusterRequest::MyId))
}

/// `READONLY`: reads may go to replicas. A Cloak cluster has none, so it changes nothing.
pub fn readonly(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(0)?;
    Ok(Request::ReadOnly)
}

/// `CLOAK.HEALTH [nonce]`: Cloak's own, for the other proxies of a cluster (see
/// `cluster::probe`). With a nonce, a proxy that has the cluster secret signs its answer for
/// that question (see `cluster::health_report`); the nonce is bounded, being signed as given.
pub fn health(args: &mut Args) -> Result<Request, Reply> {
    if args.len() > 1 {
        return Err(args.arity());
    }
    let nonce = match args.next() {
        None => None,
        Some(nonce) if nonce.len() <= MAX_NONCE => {
            Some(String::from_utf8_lossy(&nonce).into_owned())
        }
        Some(_) => {
            return Err(Reply::err(format!(
                "the nonce of CLOAK.HEALTH has at most {MAX_NONCE} bytes"
            )));
        }
    };
    Ok(Request::Health(nonce))
}

/// `READWRITE`: the opposite of `READONLY`, equally without effect.
pub fn readwrite(args: &mut Args) -> Result<Request, Reply> {
    args.exactly(0)?;
    Ok(Request::ReadOnly)
}
