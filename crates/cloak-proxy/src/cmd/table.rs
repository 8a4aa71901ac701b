//! The one table of supported commands: what the dispatcher runs and what `COMMAND` reports,
//! so the two can never disagree.
//!
//! Names, arities, flags, ACL categories, key positions and docs are Redis's own (from
//! `COMMAND INFO` and `COMMAND DOCS` of `redis-server` 7); a client that plans from them (a
//! cluster client finding keys, a tool listing commands) sees what it would see on Redis for
//! these commands. One line per command, so adding one is adding a line.

use super::{
    Args, Request, admin, client, cluster, connection, expiry, generic, hashes, keys, scripting,
    server, strings, transactions,
};
use crate::resp::Reply;

/// Turns a command's arguments (after its name) into a request, or the error to reply.
pub type Parser = fn(&mut Args) -> Result<Request, Reply>;

/// How a command runs.
pub enum Run {
    Parse(Parser),
    /// A container such as `CLIENT`: the next argument names one of these subcommands; the
    /// parser, if any, takes the container named alone (plain `COMMAND`).
    Container(&'static [Spec], Option<Parser>),
}

/// One supported command, as `COMMAND INFO` and `COMMAND DOCS` describe it.
pub struct Spec {
    /// Lower case; `container|sub` for a subcommand.
    pub name: &'static str,
    /// Redis's arity: the number of words including the name (and a subcommand's container);
    /// negative means at least that many.
    pub arity: i32,
    pub flags: &'static [&'static str],
    pub acl: &'static [&'static str],
    /// First key, last key (negative: counted from the end), step; `(0, 0, 0)` for no keys.
    pub keys: (i32, i32, i32),
    pub group: &'static str,
    pub since: &'static str,
    pub summary: &'static str,
    pub run: Run,
}

impl Spec {
    /// Whether `words` words (name included) fit the arity.
    pub fn arity_allows(&self, words: usize) -> bool {
        let arity = self.arity.unsigned_abs() as usize;
        if self.arity < 0 {
            words >= arity
        } else {
            words == arity
        }
    }

    pub fn subcommands(&self) -> &'static [Spec] {
        match self.run {
            Run::Container(subcommands, _) => subcommands,
            Run::Parse(_) => &[],
        }
    }
}

/// The supported command (or subcommand of `within`) called `name`, any case.
pub fn find<'a>(within: &'a [Spec], name: &str) -> Option<&'a Spec> {
    let short = |spec: &&Spec| spec.name.rsplit('|').next().unwrap_or(spec.name);
    within
        .iter()
        .find(|spec| short(spec).eq_ignore_ascii_case(name))
}

#[rustfmt::skip]
const CLIENT: &[Spec] = &[
    Spec { name: "client|setname", arity: 3, flags: &["noscript", "loading", "stale"], acl: &["@slow", "@connection"], keys: (0, 0, 0), group: "connection", since: "2.6.9", summary: "Set the current connection name", run: Run::Parse(client::setname) },
    Spec { name: "client|getname", arity: 2, flags: &["noscript", "loading", "stale"], acl: &["@slow", "@connection"], keys: (0, 0, 0), group: "connection", since: "2.6.9", summary: "Get the current connection name", run: Run::Parse(client::getname) },
    Spec { name: "client|setinfo", arity: -4, flags: &["noscript", "loading", "stale"], acl: &["@slow", "@connection"], keys: (0, 0, 0), group: "connection", since: "7.2.0", summary: "Set client or connection specific info", run: Run::Parse(client::setinfo) },
    Spec { name: "client|id", arity: 2, flags: &["noscript", "loading", "stale"], acl: &["@slow", "@connection"], keys: (0, 0, 0), group: "connection", since: "5.0.0", summary: "Returns the client ID for the current connection", run: Run::Parse(client::id) },
    Spec { name: "client|info", arity: 2, flags: &["noscript", "loading", "stale"], acl: &["@slow", "@connection"], keys: (0, 0, 0), group: "connection", since: "6.2.0", summary: "Returns information about the current client connection.", run: Run::Parse(client::info) },
    Spec { name: "client|list", arity: -2, flags: &["admin", "noscript", "loading", "stale"], acl: &["@admin", "@slow", "@dangerous", "@connection"], keys: (0, 0, 0), group: "connection", since: "2.4.0", summary: "Get the list of client connections", run: Run::Parse(client::list) },
    Spec { name: "client|no-evict", arity: 3, flags: &["admin", "noscript", "loading", "stale"], acl: &["@admin", "@slow", "@dangerous", "@connection"], keys: (0, 0, 0), group: "connection", since: "7.0.0", summary: "Set client eviction mode for the current connection", run: Run::Parse(client::no_evict) },
    Spec { name: "client|no-touch", arity: 3, flags: &["noscript", "loading", "stale"], acl: &["@slow", "@connection"], keys: (0, 0, 0), group: "connection", since: "7.2.0", summary: "Controls whether commands sent by the client will alter the LRU/LFU of the keys they access", run: Run::Parse(client::no_touch) },
    Spec { name: "client|kill", arity: -3, flags: &["admin", "noscript", "loading", "stale"], acl: &["@admin", "@slow", "@dangerous", "@connection"], keys: (0, 0, 0), group: "connection", since: "2.4.0", summary: "Kill the connection of a client", run: Run::Parse(client::kill) },
];

#[rustfmt::skip]
const CONFIG: &[Spec] = &[
    Spec { name: "config|get", arity: -3, flags: &["admin", "noscript", "loading", "stale"], acl: &["@admin", "@slow", "@dangerous"], keys: (0, 0, 0), group: "server", since: "2.0.0", summary: "Get the values of configuration parameters", run: Run::Parse(server::config_get) },
];

#[rustfmt::skip]
const COMMAND: &[Spec] = &[
    Spec { name: "command|count", arity: 2, flags: &["loading", "stale"], acl: &["@slow", "@connection"], keys: (0, 0, 0), group: "server", since: "2.8.13", summary: "Get total number of Redis commands", run: Run::Parse(server::command_count) },
    Spec { name: "command|info", arity: -2, flags: &["loading", "stale"], acl: &["@slow", "@connection"], keys: (0, 0, 0), group: "server", since: "2.8.13", summary: "Get array of specific Redis command details, or all when no argument is given.", run: Run::Parse(server::command_info) },
    Spec { name: "command|docs", arity: -2, flags: &["loading", "stale"], acl: &["@slow", "@connection"], keys: (0, 0, 0), group: "server", since: "7.0.0", summary: "Get array of specific Redis command documentation", run: Run::Parse(server::command_docs) },
    Spec { name: "command|list", arity: -2, flags: &["loading", "stale"], acl: &["@slow", "@connection"], keys: (0, 0, 0), group: "server", since: "7.0.0", summary: "Get an array of Redis command names", run: Run::Parse(server::command_list) },
];

#[rustfmt::skip]
const SCRIPT: &[Spec] = &[
    Spec { name: "script|load", arity: 3, flags: &["noscript", "stale"], acl: &["@slow", "@scripting"], keys: (0, 0, 0), group: "scripting", since: "2.6.0", summary: "Load the specified Lua script into the script cache.", run: Run::Parse(scripting::script_load) },
    Spec { name: "script|exists", arity: -3, flags: &["noscript"], acl: &["@slow", "@scripting"], keys: (0, 0, 0), group: "scripting", since: "2.6.0", summary: "Check existence of scripts in the script cache.", run: Run::Parse(scripting::script_exists) },
    Spec { name: "script|flush", arity: -2, flags: &["noscript"], acl: &["@slow", "@scripting"], keys: (0, 0, 0), group: "scripting", since: "2.6.0", summary: "Remove all the scripts from the script cache.", run: Run::Parse(scripting::script_flush) },
];

/// Cloak's own: moving a partition between a cluster's proxies (see `cluster::handoff`).
#[rustfmt::skip]
const CLOAK: &[Spec] = &[
    Spec { name: "cloak|map", arity: 2, flags: &["admin", "noscript", "stale"], acl: &["@admin", "@slow", "@dangerous"], keys: (0, 0, 0), group: "cluster", since: "7.2.0", summary: "Get the newest cluster map this proxy knows, as a cluster file", run: Run::Parse(admin::map) },
    Spec { name: "cloak|keyid", arity: 3, flags: &["admin", "noscript", "stale"], acl: &["@admin", "@slow", "@dangerous"], keys: (0, 0, 0), group: "cluster", since: "7.2.0", summary: "Get the fingerprint of this proxy's key for a partition", run: Run::Parse(admin::keyid) },
    Spec { name: "cloak|check", arity: 4, flags: &["admin", "noscript", "stale"], acl: &["@admin", "@slow", "@dangerous"], keys: (0, 0, 0), group: "cluster", since: "7.2.0", summary: "Check this proxy could start a partition from its storage", run: Run::Parse(admin::check) },
    Spec { name: "cloak|release", arity: 4, flags: &["admin", "noscript", "stale"], acl: &["@admin", "@slow", "@dangerous"], keys: (0, 0, 0), group: "cluster", since: "7.2.0", summary: "Drain a partition into storage and stop serving it", run: Run::Parse(admin::release) },
    Spec { name: "cloak|acquire", arity: 5, flags: &["admin", "noscript", "stale"], acl: &["@admin", "@slow", "@dangerous"], keys: (0, 0, 0), group: "cluster", since: "7.2.0", summary: "Start a partition from its storage and serve it", run: Run::Parse(admin::acquire) },
    Spec { name: "cloak|takeover", arity: 5, flags: &["admin", "noscript", "stale"], acl: &["@admin", "@slow", "@dangerous"], keys: (0, 0, 0), group: "cluster", since: "7.2.0", summary: "Take over a partition whose proxy does not answer, from its storage alone", run: Run::Parse(admin::takeover) },
    Spec { name: "cloak|noforward", arity: 2, flags: &["noscript", "loading", "stale"], acl: &["@slow", "@connection"], keys: (0, 0, 0), group: "cluster", since: "7.2.0", summary: "Never forward this connection's commands to another proxy (what forwarding proxies send each other)", run: Run::Parse(admin::noforward) },
    Spec { name: "cloak|adopt", arity: 3, flags: &["admin", "noscript", "stale"], acl: &["@admin", "@slow", "@dangerous"], keys: (0, 0, 0), group: "cluster", since: "7.2.0", summary: "Route by a newer cluster map", run: Run::Parse(admin::adopt) },
];

#[rustfmt::skip]
const CLUSTER: &[Spec] = &[
    Spec { name: "cluster|slots", arity: 2, flags: &["stale"], acl: &["@slow"], keys: (0, 0, 0), group: "cluster", since: "3.0.0", summary: "Get array of Cluster slot to node mappings", run: Run::Parse(cluster::slots) },
    Spec { name: "cluster|shards", arity: 2, flags: &["stale"], acl: &["@slow"], keys: (0, 0, 0), group: "cluster", since: "7.0.0", summary: "Get array of cluster slots to node mappings", run: Run::Parse(cluster::shards) },
    Spec { name: "cluster|nodes", arity: 2, flags: &["stale"], acl: &["@slow"], keys: (0, 0, 0), group: "cluster", since: "3.0.0", summary: "Get Cluster config for the node", run: Run::Parse(cluster::nodes) },
    Spec { name: "cluster|info", arity: 2, flags: &["stale"], acl: &["@slow"], keys: (0, 0, 0), group: "cluster", since: "3.0.0", summary: "Provides info about Redis Cluster node state", run: Run::Parse(cluster::info) },
    Spec { name: "cluster|keyslot", arity: 3, flags: &["stale"], acl: &["@slow"], keys: (0, 0, 0), group: "cluster", since: "3.0.0", summary: "Returns the hash slot of the specified key", run: Run::Parse(cluster::keyslot) },
    Spec { name: "cluster|myid", arity: 2, flags: &["stale"], acl: &["@slow"], keys: (0, 0, 0), group: "cluster", since: "3.0.0", summary: "Return the node id", run: Run::Parse(cluster::myid) },
];

/// Every supported command, in the order `COMMAND` lists them.
#[rustfmt::skip]
pub const COMMANDS: &[Spec] = &[
    Spec { name: "get", arity: 2, flags: &["readonly", "fast"], acl: &["@read", "@string", "@fast"], keys: (1, 1, 1), group: "string", since: "1.0.0", summary: "Get the value of a key", run: Run::Parse(keys::get) },
    Spec { name: "set", arity: -3, flags: &["write", "denyoom"], acl: &["@write", "@string", "@slow"], keys: (1, 1, 1), group: "string", since: "1.0.0", summary: "Set the string value of a key", run: Run::Parse(keys::set) },
    Spec { name: "mget", arity: -2, flags: &["readonly", "fast"], acl: &["@read", "@string", "@fast"], keys: (1, -1, 1), group: "string", since: "1.0.0", summary: "Get the values of all the given keys", run: Run::Parse(keys::mget) },
    Spec { name: "mset", arity: -3, flags: &["write", "denyoom"], acl: &["@write", "@string", "@slow"], keys: (1, -1, 2), group: "string", since: "1.0.1", summary: "Set multiple keys to multiple values", run: Run::Parse(keys::mset) },
    Spec { name: "del", arity: -2, flags: &["write"], acl: &["@keyspace", "@write", "@slow"], keys: (1, -1, 1), group: "generic", since: "1.0.0", summary: "Delete a key", run: Run::Parse(keys::del) },
    Spec { name: "exists", arity: -2, flags: &["readonly", "fast"], acl: &["@keyspace", "@read", "@fast"], keys: (1, -1, 1), group: "generic", since: "1.0.0", summary: "Determine if a key exists", run: Run::Parse(keys::exists) },
    Spec { name: "dbsize", arity: 1, flags: &["readonly", "fast"], acl: &["@keyspace", "@read", "@fast"], keys: (0, 0, 0), group: "server", since: "1.0.0", summary: "Return the number of keys in the selected database", run: Run::Parse(keys::dbsize) },
    Spec { name: "setex", arity: 4, flags: &["write", "denyoom"], acl: &["@write", "@string", "@slow"], keys: (1, 1, 1), group: "string", since: "2.0.0", summary: "Set the value and expiration of a key", run: Run::Parse(expiry::setex) },
    Spec { name: "psetex", arity: 4, flags: &["write", "denyoom"], acl: &["@write", "@string", "@slow"], keys: (1, 1, 1), group: "string", since: "2.6.0", summary: "Set the value and expiration in milliseconds of a key", run: Run::Parse(expiry::psetex) },
    Spec { name: "getex", arity: -2, flags: &["write", "fast"], acl: &["@write", "@string", "@fast"], keys: (1, 1, 1), group: "string", since: "6.2.0", summary: "Get the value of a key and optionally set its expiration", run: Run::Parse(expiry::getex) },
    Spec { name: "expire", arity: -3, flags: &["write", "fast"], acl: &["@keyspace", "@write", "@fast"], keys: (1, 1, 1), group: "generic", since: "1.0.0", summary: "Set a key's time to live in seconds", run: Run::Parse(expiry::expire) },
    Spec { name: "pexpire", arity: -3, flags: &["write", "fast"], acl: &["@keyspace", "@write", "@fast"], keys: (1, 1, 1), group: "generic", since: "2.6.0", summary: "Set a key's time to live in milliseconds", run: Run::Parse(expiry::pexpire) },
    Spec { name: "expireat", arity: -3, flags: &["write", "fast"], acl: &["@keyspace", "@write", "@fast"], keys: (1, 1, 1), group: "generic", since: "1.2.0", summary: "Set the expiration for a key as a UNIX timestamp", run: Run::Parse(expiry::expireat) },
    Spec { name: "pexpireat", arity: -3, flags: &["write", "fast"], acl: &["@keyspace", "@write", "@fast"], keys: (1, 1, 1), group: "generic", since: "2.6.0", summary: "Set the expiration for a key as a UNIX timestamp specified in milliseconds", run: Run::Parse(expiry::pexpireat) },
    Spec { name: "ttl", arity: 2, flags: &["readonly", "fast"], acl: &["@keyspace", "@read", "@fast"], keys: (1, 1, 1), group: "generic", since: "1.0.0", summary: "Get the time to live for a key in seconds", run: Run::Parse(expiry::ttl) },
    Spec { name: "pttl", arity: 2, flags: &["readonly", "fast"], acl: &["@keyspace", "@read", "@fast"], keys: (1, 1, 1), group: "generic", since: "2.6.0", summary: "Get the time to live for a key in milliseconds", run: Run::Parse(expiry::pttl) },
    Spec { name: "expiretime", arity: 2, flags: &["readonly", "fast"], acl: &["@keyspace", "@read", "@fast"], keys: (1, 1, 1), group: "generic", since: "7.0.0", summary: "Get the expiration Unix timestamp for a key", run: Run::Parse(expiry::expiretime) },
    Spec { name: "pexpiretime", arity: 2, flags: &["readonly", "fast"], acl: &["@keyspace", "@read", "@fast"], keys: (1, 1, 1), group: "generic", since: "7.0.0", summary: "Get the expiration Unix timestamp for a key in milliseconds", run: Run::Parse(expiry::pexpiretime) },
    Spec { name: "persist", arity: 2, flags: &["write", "fast"], acl: &["@keyspace", "@write", "@fast"], keys: (1, 1, 1), group: "generic", since: "2.2.0", summary: "Remove the expiration from a key", run: Run::Parse(expiry::persist) },
    Spec { name: "type", arity: 2, flags: &["readonly", "fast"], acl: &["@keyspace", "@read", "@fast"], keys: (1, 1, 1), group: "generic", since: "1.0.0", summary: "Determine the type stored at key", run: Run::Parse(expiry::type_of) },
    Spec { name: "hset", arity: -4, flags: &["write", "denyoom", "fast"], acl: &["@write", "@hash", "@fast"], keys: (1, 1, 1), group: "hash", since: "2.0.0", summary: "Set the string value of a hash field", run: Run::Parse(hashes::hset) },
    Spec { name: "hsetnx", arity: 4, flags: &["write", "denyoom", "fast"], acl: &["@write", "@hash", "@fast"], keys: (1, 1, 1), group: "hash", since: "2.0.0", summary: "Set the value of a hash field, only if the field does not exist", run: Run::Parse(hashes::hsetnx) },
    Spec { name: "hget", arity: 3, flags: &["readonly", "fast"], acl: &["@read", "@hash", "@fast"], keys: (1, 1, 1), group: "hash", since: "2.0.0", summary: "Get the value of a hash field", run: Run::Parse(hashes::hget) },
    Spec { name: "hmget", arity: -3, flags: &["readonly", "fast"], acl: &["@read", "@hash", "@fast"], keys: (1, 1, 1), group: "hash", since: "2.0.0", summary: "Get the values of all the given hash fields", run: Run::Parse(hashes::hmget) },
    Spec { name: "hdel", arity: -3, flags: &["write", "fast"], acl: &["@write", "@hash", "@fast"], keys: (1, 1, 1), group: "hash", since: "2.0.0", summary: "Delete one or more hash fields", run: Run::Parse(hashes::hdel) },
    Spec { name: "hgetall", arity: 2, flags: &["readonly"], acl: &["@read", "@hash", "@slow"], keys: (1, 1, 1), group: "hash", since: "2.0.0", summary: "Get all the fields and values in a hash", run: Run::Parse(hashes::hgetall) },
    Spec { name: "hexists", arity: 3, flags: &["readonly", "fast"], acl: &["@read", "@hash", "@fast"], keys: (1, 1, 1), group: "hash", since: "2.0.0", summary: "Determine if a hash field exists", run: Run::Parse(hashes::hexists) },
    Spec { name: "hincrby", arity: 4, flags: &["write", "denyoom", "fast"], acl: &["@write", "@hash", "@fast"], keys: (1, 1, 1), group: "hash", since: "2.0.0", summary: "Increment the integer value of a hash field by the given number", run: Run::Parse(hashes::hincrby) },
    Spec { name: "hincrbyfloat", arity: 4, flags: &["write", "denyoom", "fast"], acl: &["@write", "@hash", "@fast"], keys: (1, 1, 1), group: "hash", since: "2.6.0", summary: "Increment the float value of a hash field by the given amount", run: Run::Parse(hashes::hincrbyfloat) },
    Spec { name: "hmset", arity: -4, flags: &["write", "denyoom", "fast"], acl: &["@write", "@hash", "@fast"], keys: (1, 1, 1), group: "hash", since: "2.0.0", summary: "Set multiple hash fields to multiple values", run: Run::Parse(hashes::hmset) },
    Spec { name: "hlen", arity: 2, flags: &["readonly", "fast"], acl: &["@read", "@hash", "@fast"], keys: (1, 1, 1), group: "hash", since: "2.0.0", summary: "Get the number of fields in a hash", run: Run::Parse(hashes::hlen) },
    Spec { name: "hkeys", arity: 2, flags: &["readonly"], acl: &["@read", "@hash", "@slow"], keys: (1, 1, 1), group: "hash", since: "2.0.0", summary: "Get all the fields in a hash", run: Run::Parse(hashes::hkeys) },
    Spec { name: "hvals", arity: 2, flags: &["readonly"], acl: &["@read", "@hash", "@slow"], keys: (1, 1, 1), group: "hash", since: "2.0.0", summary: "Get all the values in a hash", run: Run::Parse(hashes::hvals) },
    Spec { name: "hstrlen", arity: 3, flags: &["readonly", "fast"], acl: &["@read", "@hash", "@fast"], keys: (1, 1, 1), group: "hash", since: "3.2.0", summary: "Get the length of the value of a hash field", run: Run::Parse(hashes::hstrlen) },
    Spec { name: "incr", arity: 2, flags: &["write", "denyoom", "fast"], acl: &["@write", "@string", "@fast"], keys: (1, 1, 1), group: "string", since: "1.0.0", summary: "Increment the integer value of a key by one", run: Run::Parse(strings::incr) },
    Spec { name: "incrby", arity: 3, flags: &["write", "denyoom", "fast"], acl: &["@write", "@string", "@fast"], keys: (1, 1, 1), group: "string", since: "1.0.0", summary: "Increment the integer value of a key by the given amount", run: Run::Parse(strings::incrby) },
    Spec { name: "decr", arity: 2, flags: &["write", "denyoom", "fast"], acl: &["@write", "@string", "@fast"], keys: (1, 1, 1), group: "string", since: "1.0.0", summary: "Decrement the integer value of a key by one", run: Run::Parse(strings::decr) },
    Spec { name: "decrby", arity: 3, flags: &["write", "denyoom", "fast"], acl: &["@write", "@string", "@fast"], keys: (1, 1, 1), group: "string", since: "1.0.0", summary: "Decrement the integer value of a key by the given number", run: Run::Parse(strings::decrby) },
    Spec { name: "incrbyfloat", arity: 3, flags: &["write", "denyoom", "fast"], acl: &["@write", "@string", "@fast"], keys: (1, 1, 1), group: "string", since: "2.6.0", summary: "Increment the float value of a key by the given amount", run: Run::Parse(strings::incrbyfloat) },
    Spec { name: "append", arity: 3, flags: &["write", "denyoom", "fast"], acl: &["@write", "@string", "@fast"], keys: (1, 1, 1), group: "string", since: "2.0.0", summary: "Append a value to a key", run: Run::Parse(strings::append) },
    Spec { name: "strlen", arity: 2, flags: &["readonly", "fast"], acl: &["@read", "@string", "@fast"], keys: (1, 1, 1), group: "string", since: "2.2.0", summary: "Get the length of the value stored in a key", run: Run::Parse(strings::strlen) },
    Spec { name: "getrange", arity: 4, flags: &["readonly"], acl: &["@read", "@string", "@slow"], keys: (1, 1, 1), group: "string", since: "2.4.0", summary: "Get a substring of the string stored at a key", run: Run::Parse(strings::getrange) },
    Spec { name: "setrange", arity: 4, flags: &["write", "denyoom"], acl: &["@write", "@string", "@slow"], keys: (1, 1, 1), group: "string", since: "2.2.0", summary: "Overwrite part of a string at key starting at the specified offset", run: Run::Parse(strings::setrange) },
    Spec { name: "getset", arity: 3, flags: &["write", "denyoom", "fast"], acl: &["@write", "@string", "@fast"], keys: (1, 1, 1), group: "string", since: "1.0.0", summary: "Set the string value of a key and return its old value", run: Run::Parse(strings::getset) },
    Spec { name: "getdel", arity: 2, flags: &["write", "fast"], acl: &["@write", "@string", "@fast"], keys: (1, 1, 1), group: "string", since: "6.2.0", summary: "Get the value of a key and delete the key", run: Run::Parse(strings::getdel) },
    Spec { name: "setnx", arity: 3, flags: &["write", "denyoom", "fast"], acl: &["@write", "@string", "@fast"], keys: (1, 1, 1), group: "string", since: "1.0.0", summary: "Set the value of a key, only if the key does not exist", run: Run::Parse(strings::setnx) },
    Spec { name: "msetnx", arity: -3, flags: &["write", "denyoom"], acl: &["@write", "@string", "@slow"], keys: (1, -1, 2), group: "string", since: "1.0.1", summary: "Set multiple keys to multiple values, only if none of the keys exist", run: Run::Parse(strings::msetnx) },
    Spec { name: "unlink", arity: -2, flags: &["write", "fast"], acl: &["@keyspace", "@write", "@fast"], keys: (1, -1, 1), group: "generic", since: "4.0.0", summary: "Delete a key asynchronously in another thread. Otherwise it is just as DEL, but non blocking.", run: Run::Parse(keys::del) },
    Spec { name: "touch", arity: -2, flags: &["readonly", "fast"], acl: &["@keyspace", "@read", "@fast"], keys: (1, -1, 1), group: "generic", since: "3.2.1", summary: "Alters the last access time of a key(s). Returns the number of existing keys specified.", run: Run::Parse(keys::exists) },
    Spec { name: "copy", arity: -3, flags: &["write", "denyoom"], acl: &["@keyspace", "@write", "@slow"], keys: (1, 2, 1), group: "generic", since: "6.2.0", summary: "Copy a key", run: Run::Parse(generic::copy) },
    Spec { name: "rename", arity: 3, flags: &["write"], acl: &["@keyspace", "@write", "@slow"], keys: (1, 2, 1), group: "generic", since: "1.0.0", summary: "Rename a key", run: Run::Parse(generic::rename) },
    Spec { name: "renamenx", arity: 3, flags: &["write", "fast"], acl: &["@keyspace", "@write", "@fast"], keys: (1, 2, 1), group: "generic", since: "1.0.0", summary: "Rename a key, only if the new key does not exist", run: Run::Parse(generic::renamenx) },
    Spec { name: "randomkey", arity: 1, flags: &["readonly"], acl: &["@keyspace", "@read", "@slow"], keys: (0, 0, 0), group: "generic", since: "1.0.0", summary: "Return a random key from the keyspace", run: Run::Parse(generic::randomkey) },
    Spec { name: "keys", arity: 2, flags: &["readonly"], acl: &["@keyspace", "@read", "@slow", "@dangerous"], keys: (0, 0, 0), group: "generic", since: "1.0.0", summary: "Find all keys matching the given pattern", run: Run::Parse(generic::keys) },
    Spec { name: "scan", arity: -2, flags: &["readonly"], acl: &["@keyspace", "@read", "@slow"], keys: (0, 0, 0), group: "generic", since: "2.8.0", summary: "Incrementally iterate the keys space", run: Run::Parse(generic::scan) },
    Spec { name: "flushdb", arity: -1, flags: &["write"], acl: &["@keyspace", "@write", "@slow", "@dangerous"], keys: (0, 0, 0), group: "server", since: "1.0.0", summary: "Remove all keys from the current database", run: Run::Parse(generic::flushdb) },
    Spec { name: "flushall", arity: -1, flags: &["write"], acl: &["@keyspace", "@write", "@slow", "@dangerous"], keys: (0, 0, 0), group: "server", since: "1.0.0", summary: "Remove all keys from all databases", run: Run::Parse(generic::flushall) },
    Spec { name: "multi", arity: 1, flags: &["noscript", "loading", "stale", "fast", "allow_busy"], acl: &["@fast", "@transaction"], keys: (0, 0, 0), group: "transactions", since: "1.2.0", summary: "Mark the start of a transaction block", run: Run::Parse(transactions::multi) },
    Spec { name: "exec", arity: 1, flags: &["noscript", "loading", "stale", "skip_slowlog"], acl: &["@slow", "@transaction"], keys: (0, 0, 0), group: "transactions", since: "1.2.0", summary: "Execute all commands issued after MULTI", run: Run::Parse(transactions::exec) },
    Spec { name: "discard", arity: 1, flags: &["noscript", "loading", "stale", "fast", "allow_busy"], acl: &["@fast", "@transaction"], keys: (0, 0, 0), group: "transactions", since: "2.0.0", summary: "Discard all commands issued after MULTI", run: Run::Parse(transactions::discard) },
    Spec { name: "watch", arity: -2, flags: &["noscript", "loading", "stale", "fast", "allow_busy"], acl: &["@fast", "@transaction"], keys: (1, -1, 1), group: "transactions", since: "2.2.0", summary: "Watch the given keys to determine execution of the MULTI/EXEC block", run: Run::Parse(transactions::watch) },
    Spec { name: "unwatch", arity: 1, flags: &["noscript", "loading", "stale", "fast", "allow_busy"], acl: &["@fast", "@transaction"], keys: (0, 0, 0), group: "transactions", since: "2.2.0", summary: "Forget about all watched keys", run: Run::Parse(transactions::unwatch) },
    Spec { name: "eval", arity: -3, flags: &["noscript", "stale", "skip_monitor", "no_mandatory_keys", "movablekeys"], acl: &["@slow", "@scripting"], keys: (0, 0, 0), group: "scripting", since: "2.6.0", summary: "Execute a Lua script server side", run: Run::Parse(scripting::eval) },
    Spec { name: "evalsha", arity: -3, flags: &["noscript", "stale", "skip_monitor", "no_mandatory_keys", "movablekeys"], acl: &["@slow", "@scripting"], keys: (0, 0, 0), group: "scripting", since: "2.6.0", summary: "Execute a Lua script server side", run: Run::Parse(scripting::evalsha) },
    Spec { name: "eval_ro", arity: -3, flags: &["readonly", "noscript", "stale", "skip_monitor", "no_mandatory_keys", "movablekeys"], acl: &["@slow", "@scripting"], keys: (0, 0, 0), group: "scripting", since: "7.0.0", summary: "Execute a read-only Lua script server side", run: Run::Parse(scripting::eval_ro) },
    Spec { name: "evalsha_ro", arity: -3, flags: &["readonly", "noscript", "stale", "skip_monitor", "no_mandatory_keys", "movablekeys"], acl: &["@slow", "@scripting"], keys: (0, 0, 0), group: "scripting", since: "7.0.0", summary: "Execute a read-only Lua script server side", run: Run::Parse(scripting::evalsha_ro) },
    Spec { name: "script", arity: -2, flags: &[], acl: &["@slow"], keys: (0, 0, 0), group: "scripting", since: "2.6.0", summary: "A container for Lua scripts management commands", run: Run::Container(SCRIPT, None) },
    Spec { name: "ping", arity: -1, flags: &["fast"], acl: &["@fast", "@connection"], keys: (0, 0, 0), group: "connection", since: "1.0.0", summary: "Ping the server", run: Run::Parse(connection::ping) },
    Spec { name: "echo", arity: 2, flags: &["loading", "stale", "fast"], acl: &["@fast", "@connection"], keys: (0, 0, 0), group: "connection", since: "1.0.0", summary: "Echo the given string", run: Run::Parse(connection::echo) },
    Spec { name: "auth", arity: -2, flags: &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"], acl: &["@fast", "@connection"], keys: (0, 0, 0), group: "connection", since: "1.0.0", summary: "Authenticate to the server", run: Run::Parse(connection::auth) },
    Spec { name: "quit", arity: -1, flags: &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"], acl: &["@fast", "@connection"], keys: (0, 0, 0), group: "connection", since: "1.0.0", summary: "Close the connection", run: Run::Parse(connection::quit) },
    Spec { name: "select", arity: 2, flags: &["loading", "stale", "fast"], acl: &["@fast", "@connection"], keys: (0, 0, 0), group: "connection", since: "1.0.0", summary: "Change the selected database for the current connection", run: Run::Parse(connection::select) },
    Spec { name: "hello", arity: -1, flags: &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"], acl: &["@fast", "@connection"], keys: (0, 0, 0), group: "connection", since: "6.0.0", summary: "Handshake with Redis", run: Run::Parse(connection::hello) },
    Spec { name: "reset", arity: 1, flags: &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"], acl: &["@fast", "@connection"], keys: (0, 0, 0), group: "connection", since: "6.2.0", summary: "Reset the connection", run: Run::Parse(connection::reset) },
    Spec { name: "client", arity: -2, flags: &[], acl: &["@slow"], keys: (0, 0, 0), group: "connection", since: "2.4.0", summary: "A container for client connection commands", run: Run::Container(CLIENT, None) },
    Spec { name: "info", arity: -1, flags: &["loading", "stale"], acl: &["@slow", "@dangerous"], keys: (0, 0, 0), group: "server", since: "1.0.0", summary: "Get information and statistics about the server", run: Run::Parse(server::info) },
    Spec { name: "config", arity: -2, flags: &[], acl: &["@slow"], keys: (0, 0, 0), group: "server", since: "2.0.0", summary: "A container for server configuration commands", run: Run::Container(CONFIG, None) },
    Spec { name: "command", arity: -1, flags: &["loading", "stale"], acl: &["@slow", "@connection"], keys: (0, 0, 0), group: "server", since: "2.8.13", summary: "Get array of Redis command details", run: Run::Container(COMMAND, Some(server::command)) },
    Spec { name: "time", arity: 1, flags: &["loading", "stale", "fast"], acl: &["@fast"], keys: (0, 0, 0), group: "server", since: "2.6.0", summary: "Return the current server time", run: Run::Parse(server::time) },
    Spec { name: "cloak", arity: -2, flags: &[], acl: &["@slow"], keys: (0, 0, 0), group: "cluster", since: "7.2.0", summary: "A container for Cloak's cluster admin commands", run: Run::Container(CLOAK, None) },
    Spec { name: "cluster", arity: -2, flags: &[], acl: &["@slow"], keys: (0, 0, 0), group: "cluster", since: "3.0.0", summary: "A container for cluster commands", run: Run::Container(CLUSTER, None) },
    Spec { name: "readonly", arity: 1, flags: &["loading", "stale", "fast"], acl: &["@fast", "@connection"], keys: (0, 0, 0), group: "cluster", since: "3.0.0", summary: "Enables read queries for a connection to a cluster replica node", run: Run::Parse(cluster::readonly) },
    Spec { name: "readwrite", arity: 1, flags: &["loading", "stale", "fast"], acl: &["@fast", "@connection"], keys: (0, 0, 0), group: "cluster", since: "3.0.0", summary: "Disables read queries for a connection to a cluster replica node", run: Run::Parse(cluster::readwrite) },
    Spec { name: "cloak.health", arity: -1, flags: &["loading", "stale", "fast"], acl: &["@fast"], keys: (0, 0, 0), group: "cluster", since: "0.1.0", summary: "Cloak's own: whether each partition this proxy hosts can serve (probed by the other proxies of a cluster); with a nonce, signed under the cluster secret", run: Run::Parse(cluster::health) },
    Spec { name: "shutdown", arity: -1, flags: &["admin", "noscript", "loading", "stale", "no_multi", "allow_busy"], acl: &["@admin", "@slow", "@dangerous"], keys: (0, 0, 0), group: "server", since: "1.0.0", summary: "Synchronously save the dataset to disk and then shut down the server", run: Run::Parse(server::shutdown) },
];
