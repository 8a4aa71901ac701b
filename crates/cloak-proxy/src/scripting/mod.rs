//! Lua scripts (EVAL and its relatives), run at the proxy with an embedded Lua 5.1 as Redis's.
//!
//! A script is one engine unit (see `cloak_core::engine::unit`): the engine holds and reads the
//! keys the script declares (KEYS) before it starts, each `redis.call` then runs on those
//! entries in memory, and when the script returns the engine writes what changed. No other
//! client's command on those keys comes in between, so the script is atomic, as in Redis. A
//! script may only touch the keys it declares (Redis asks the same of scripts, and requires it
//! in a cluster); a call naming another key fails.
//!
//! **What storage sees.** Nothing new: the script itself runs here, at the proxy, and storage
//! only sees the unit's accesses: a read of each declared key's slot and, once the script is
//! done, a write (or, for schemes with traffic per op, a cover access) of each, all through the
//! scheme's fixed traffic like a GET and a SET of those keys. How many calls the script made,
//! which ones, their results and how long it ran never reach storage: the unit's traffic depends
//! only on how many keys it declares, which the client chose, as it chooses the keys of an MSET.
//! Its duration only delays when the unit's writes are handed to the scheme, which hides arrival
//! times as it hides any client's.
//!
//! **Why a blocking thread.** The script runs on a thread of tokio's blocking pool, and each
//! `redis.call` is sent to the core (as `Command::ScriptCall`) and waited for there. So the core
//! stays what it is, a loop that never runs client code: a long script holds up only the
//! commands that wait for its keys, never the engine nor the times at which the scheme's traffic
//! leaves. (Running the script inside the engine would have been simpler to write, but a busy
//! script would then have stalled every client and shifted the timing storage sees; mlua's async
//! mode would have kept it on a runtime worker, where a loop without calls blocks that worker.)
//! A script that runs longer than the proxy's limit is stopped with an error (Redis only starts
//! answering BUSY to others then); its calls so far stay applied, as Redis keeps them.

mod lua;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use cloak_core::{ClientId, Db};

use crate::budget::Charge;
use crate::cmd::{Eval, ScriptRequest, Source};
use crate::core::CoreHandle;
use crate::resp::Reply;

/// How long a script may run unless the proxy is told otherwise (Redis's
/// `busy-reply-threshold`, after which Redis answers other clients BUSY).
pub const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(5);

/// The script cache (scripts run or loaded, by SHA1, as `SCRIPT LOAD` and `EVALSHA` use it) and
/// the time limit.
pub struct Scripts {
    bodies: Mutex<HashMap<String, Bytes>>,
    limit: Duration,
}

/// Where a script's calls go: the core, as this client, in this database.
pub struct Caller {
    pub core: CoreHandle,
    pub client: ClientId,
    pub db: Db,
    /// The longest stored key, for the databases' key encoding.
    pub max_key: usize,
}

impl Scripts {
    pub fn new(limit: Duration) -> Self {
        Self {
            bodies: Mutex::new(HashMap::new()),
            limit,
        }
    }

    /// Answers `SCRIPT LOAD`, `SCRIPT EXISTS` and `SCRIPT FLUSH`.
    pub fn answer(&self, request: ScriptRequest) -> Reply {
        match request {
            ScriptRequest::Load(body) => Reply::bulk(self.load(body)),
            ScriptRequest::Exists(shas) => Reply::Array(
                shas.iter()
                    .map(|sha| Reply::Integer(i64::from(self.body(sha).is_some())))
                    .collect(),
            ),
            ScriptRequest::Flush => {
                self.cache().clear();
                Reply::ok()
            }
        }
    }

    /// Runs an EVAL on a blocking thread (see the module's docs) and gives its reply.
    pub async fn eval(&self, caller: Caller, eval: Eval, charge: Charge) -> Reply {
        let (body, sha) = match eval.source {
            // Redis caches every script EVAL runs, so EVALSHA finds it afterwards.
            Source::Body(body) => {
                let sha = self.load(body.clone());
                (body, sha)
            }
            Source::Sha(sha) => match self.body(&sha) {
                Some(body) => (body, String::from_utf8_lossy(&sha).to_ascii_lowercase()),
                None => {
                    return Reply::Error("NOSCRIPT No matching script. Please use EVAL.".into());
                }
            },
        };
        let script = lua::Script {
            body,
            sha,
            keys: eval.keys,
            args: eval.args,
            read_only: eval.read_only,
            limit: self.limit,
        };
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || script.run(&caller, &runtime, charge))
            .await
            .unwrap_or_else(|_| Reply::err("the script's thread failed"))
    }

    /// Caches `body`; its SHA1 in hex.
    fn load(&self, body: Bytes) -> String {
        let sha = sha1_hex(&body);
        self.cache().insert(sha.clone(), body);
        sha
    }

    /// The cached script with this SHA1 (in hex, any case).
    fn body(&self, sha: &[u8]) -> Option<Bytes> {
        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
        self.cache().get(&sha).cloned()
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bytes>> {
        // A panic elsewhere cannot leave the map half-changed (each use is one call on it).
        self.bodies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// SHA1 in lower-case hex, as Redis names scripts (and `redis.sha1hex` answers).
pub fn sha1_hex(bytes: &[u8]) -> String {
    hex::encode(ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        bytes,
    ))
}
