//! `CONFIG GET`: the Redis settings clients and tools ask about, with the proxy's real values.
//!
//! Only parameters with a true answer are listed; anything else matches nothing, as an unknown
//! parameter does on Redis. Nothing here reaches the storage server.

use bytes::Bytes;

use crate::FrontEnd;
use crate::cmd::DATABASES;
use crate::glob;
use crate::resp::Reply;

/// Every parameter and its value, in the order replies list them.
fn parameters(front: &FrontEnd) -> Vec<(&'static str, String)> {
    vec![
        ("bind", front.listen.ip().to_string()),
        ("port", front.listen.port().to_string()),
        ("maxclients", front.max_clients.to_string()),
        ("databases", DATABASES.to_string()),
        // The proxy never closes a client for being idle.
        ("timeout", "0".into()),
        // A full store refuses new keys; nothing is ever evicted.
        ("maxmemory-policy", "noeviction".into()),
        (
            "proto-max-bulk-len",
            front.request_limits.max_bulk.to_string(),
        ),
        // No snapshots: the data lives in storage, which persists it (or not) itself.
        ("save", String::new()),
    ]
}

/// The parameters matching any of `patterns` (globs, any case), each once.
pub fn get(front: &FrontEnd, patterns: &[Bytes]) -> Reply {
    Reply::map(
        parameters(front)
            .into_iter()
            .filter(|(name, _)| {
                patterns
                    .iter()
                    .any(|pattern| glob::matches(pattern, name.as_bytes(), true))
            })
            .map(|(name, value)| (name, Reply::bulk(value))),
    )
}
