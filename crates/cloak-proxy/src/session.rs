//! One connection's session: its protocol, authentication and client record, the database it
//! selected, the transaction it is queuing (MULTI … EXEC) and whether it watches keys, with
//! Redis's rules for each; and the answer to each request, either from the front end itself or
//! from the engine.
//!
//! Only key commands (`Request::Data`) reach the engine, and so the storage server; every other
//! request is answered here from what the proxy already holds, and causes no storage traffic.
//! On a cluster proxy each key command goes to the core of the partition owning its keys' slot,
//! or gets Redis Cluster's `-MOVED`/`-CROSSSLOT` instead (see [`crate::cluster`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use cloak_cluster::ADMIN_USER;
use cloak_core::{Command, Db, Outcome, database};
use tokio::sync::oneshot;

use crate::FrontEnd;
use crate::budget::Charge;
use crate::clients::Client;
use crate::cluster::forward::Remote;
use crate::cluster::health::OnPartition;
use crate::cluster::{Route, fanout, handoff, replies};
use crate::cmd::{self, ClientRequest, DATABASES, Hello, LibAttribute, Request};
use crate::core::{CoreHandle, Snapshot};
use crate::resp::{Protocol, Reply};
use crate::{info, introspect, server_config};

/// The Redis release whose commands and replies the front end follows, for `HELLO` and `INFO`
/// (clients read it to decide what they may send; `CLIENT SETINFO` and `NO-TOUCH` are 7.2's).
pub const REDIS_VERSION: &str = "7.2.0";

/// What a cluster proxy that hosts no partition (one just added to the cluster) answers where a
/// command would run on its first partition: it has no store to run it on or describe.
const NO_PARTITION: &str = "this proxy hosts no partition yet (move one to it with `cloak \
                            cluster move`); CLUSTER commands answer, key commands are redirected";

/// A reply, ready now or once the engine answers.
pub enum Pending {
    Now(Reply),
    Later(oneshot::Receiver<Outcome>),
    /// The outcome of a command on a partition of a cluster, whose storage failing is
    /// answered with `-CLUSTERDOWN` naming it.
    OnPartition(oneshot::Receiver<Outcome>, OnPartition),
    /// The reply of another proxy to a command forwarded there, and the command's bytes against
    /// the budgets, held until then (see [`crate::cluster::forward`]).
    Forwarded(tokio::task::JoinHandle<Reply>, Charge),
    /// The last reply on this connection (`SHUTDOWN` closes without one, as Redis does).
    Close(Option<Reply>),
}

pub struct Session<'a> {
    front: &'a FrontEnd,
    client: Arc<Client>,
    authenticated: bool,
    /// Authenticated as [`ADMIN_USER`] with the cluster secret: may run the `CLOAK` commands
    /// that move partitions (see [`crate::cmd::AdminRequest::needs_admin`]).
    admin: bool,
    /// Commands queued since MULTI (keys already in the database selected then); `None`
    /// outside a transaction.
    queued: Option<Vec<Command>>,
    /// A command was refused while queuing: EXEC discards the transaction.
    refused: bool,
    /// WATCH was used: the engine must forget this client's watches when it leaves.
    watched: bool,
    /// In a cluster, the partitions whose keys are watched: each partition's engine checks only
    /// its own watches, so a transaction running on another partition must be refused, not run
    /// as if nothing were watched.
    watched_partitions: Vec<usize>,
    /// Sent `CLOAK NOFORWARD` (another proxy, forwarding to this one): its commands are never
    /// forwarded again, so that proxies whose maps disagree do not pass one back and forth.
    no_forward: bool,
}

impl<'a> Session<'a> {
    pub fn new(front: &'a FrontEnd, client: Arc<Client>) -> Self {
        Self {
            front,
            client,
            authenticated: front.password.is_none(),
            admin: false,
            queued: None,
            refused: false,
            watched: false,
            watched_partitions: Vec::new(),
            no_forward: false,
        }
    }

    /// The connection is closing: the engine forgets its watches (it would keep them forever).
    pub async fn close(&mut self) {
        if std::mem::take(&mut self.watched) {
            let _ = self.submit_raw(Command::Unwatch, Charge::nothing()).await;
        }
    }

    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// How long this connection may stay unauthenticated.
    pub fn auth_timeout(&self) -> std::time::Duration {
        self.front.auth_timeout
    }

    /// Tells the client list whether this client is authenticated now (after `AUTH`, `HELLO`
    /// or `RESET`), so only unauthenticated ones count against their share.
    pub fn note_authentication(&self) {
        self.front
            .clients
            .set_authenticated(self.client.id, self.authenticated);
    }

    /// Request limits once authenticated: what the store takes.
    pub fn request_limits(&self) -> crate::resp::RequestLimits {
        self.front.request_limits
    }

    /// The protocol replies are encoded in from now on.
    pub fn protocol(&self) -> Protocol {
        self.client.state().protocol
    }

    /// The proxy-wide budget of request bytes (see [`crate::budget`]).
    pub fn pending(&self) -> &crate::budget::Budget {
        &self.front.pending
    }

    /// Answers a request; `charge` is its bytes against the budgets, held with the command until
    /// its outcome is delivered, and returned at once by every other request.
    pub async fn respond(&mut self, args: Vec<Bytes>, charge: Charge) -> Pending {
        self.front.commands.fetch_add(1, Ordering::Relaxed);
        // Kept only where it may be sent on as it came: the clone shares the arguments' bytes.
        let forwardable = self.forwards().then(|| args.clone());
        let request = match cmd::parse(args) {
            Ok((name, request)) => {
                self.client.saw(name);
                request
            }
            Err(reply) => {
                if self.queued.is_some() {
                    self.refused = true;
                }
                return Pending::Now(reply);
            }
        };
        if !self.authenticated && !request.allowed_before_auth() {
            return Pending::Now(Reply::Error("NOAUTH Authentication required.".into()));
        }
        if self.queued.is_some() {
            return self.queue(Ok(request), charge).await;
        }
        let reply = match request {
            Request::Data(command) => {
                if matches!(command, Command::Unwatch) {
                    self.watched_partitions.clear();
                }
                return self.submit(command, charge, forwardable).await;
            }
            Request::Watch(command) => {
                self.watched = true;
                if let Some(partition) = self.front.cores.partition_for(&command.keys())
                    && !self.watched_partitions.contains(&partition)
                {
                    self.watched_partitions.push(partition);
                }
                return self.submit(command, charge, None).await;
            }
            Request::Eval(eval) => {
                // A script runs on the partition of its keys (they must share a slot).
                let core = match self.front.cores.route_keys(&eval.keys).await {
                    Ok(Route::One(core) | Route::Partition(core, _)) => core,
                    Ok(Route::Every(_)) => match self.front.cores.first() {
                        Some(core) => core,
                        None => return Pending::Now(Reply::err(NO_PARTITION)),
                    },
                    Ok(Route::Remote(remote)) => return Pending::Now(self.refuse_remote(&remote)),
                    Err(reply) => return Pending::Now(reply),
                };
                let caller = crate::scripting::Caller {
                    core,
                    client: self.client.id,
                    db: self.db(),
                    max_key: self.front.max_key,
                };
                self.front.scripts.eval(caller, eval, charge).await
            }
            Request::Script(request) => self.front.scripts.answer(request),
            Request::Multi => {
                self.queued = Some(Vec::new());
                self.refused = false;
                Reply::ok()
            }
            Request::Exec => Reply::err("EXEC without MULTI"),
            Request::Discard => Reply::err("DISCARD without MULTI"),
            Request::Ping(None) => Reply::status("PONG"),
            Request::Ping(Some(message)) | Request::Echo(message) => Reply::Bulk(Some(message)),
            Request::Auth { user, password } => match self.authenticate(user, &password) {
                Ok(()) => Reply::ok(),
                Err(error) => error,
            },
            Request::Quit => return Pending::Close(Some(Reply::ok())),
            // As Redis Cluster: one database, so that a key's slot is all that places it.
            Request::Select(index) if index != 0 && self.front.cores.cluster().is_some() => {
                Reply::err("SELECT is not allowed in cluster mode")
            }
            Request::Select(index) if (0..DATABASES).contains(&index) => {
                self.client.state().db = index;
                Reply::ok()
            }
            Request::Select(_) => Reply::err("DB index is out of range"),
            Request::Hello(hello) => self.hello(hello).unwrap_or_else(|error| error),
            Request::Reset => self.reset().await,
            Request::Client(request) => return self.client_command(request),
            Request::Info(sections) => match self.snapshots().await {
                Ok(Some((first, partitions))) => {
                    Reply::Verbatim(info::render(self.front, &first, &sections, &partitions))
                }
                Ok(None) => Reply::err(NO_PARTITION),
                Err(stopped) => Reply::err(stopped),
            },
            Request::Cluster(request) => replies::answer(&self.front.cores, request),
            Request::ReadOnly => replies::read_only(&self.front.cores),
            Request::Health(nonce) => {
                let secret = self.front.cluster_secret.as_deref();
                replies::health(&self.front.cores, nonce.as_deref(), secret)
            }
            Request::NoForward => {
                self.no_forward = true;
                Reply::ok()
            }
            Request::Admin(request) if request.needs_admin() && !self.admin => {
                // Redis's words for a user without the right to a command; a connection that
                // is not the admin is the default user.
                Reply::Error(format!(
                    "NOPERM User default has no permissions to run the 'cloak|{}' command",
                    request.name()
                ))
            }
            Request::Admin(request) => {
                let secret = self.front.cluster_secret.as_deref();
                handoff::answer(&self.front.cores, secret, request).await
            }
            Request::ConfigGet(patterns) => server_config::get(self.front, &patterns),
            Request::Command(query) => introspect::answer(&query),
            Request::Time => time(),
            Request::Shutdown { abort: true } => Reply::err("No shutdown in progress."),
            Request::Shutdown { abort: false } => {
                // Stops the proxy as Ctrl-C does: no new clients, acknowledged writes drained.
                self.front.shutdown.notify_one();
                return Pending::Close(None);
            }
        };
        Pending::Now(reply)
    }

    /// The database this connection selected.
    fn db(&self) -> Db {
        Db::new(self.client.state().db).unwrap_or_default()
    }

    /// Sends a key command to the engine, its keys in the selected database; or, given the
    /// `request` it came in, to the proxy that hosts its slot if this session forwards.
    async fn submit(
        &mut self,
        command: Command,
        charge: Charge,
        request: Option<Vec<Bytes>>,
    ) -> Pending {
        let max_key = self.front.max_key;
        let command = match database::in_db(command, self.db(), max_key) {
            Ok(command) => command,
            Err(error) => return Pending::Now(Reply::Error(error.redis_line())),
        };
        let route = self.front.cores.route(&command).await;
        match (route, request, self.front.cores.forwarder()) {
            (Ok(Route::Remote(remote)), Some(request), Some(forwarder)) => {
                Pending::Forwarded(forwarder.forward(remote, request), charge)
            }
            (route, _, _) => self.run_routed(route, command, charge).await,
        }
    }

    /// Whether this session forwards commands for other proxies' slots there.
    fn forwards(&self) -> bool {
        self.front.cores.forwarder().is_some() && !self.no_forward
    }

    /// What a command for another proxy's slot gets when it is not forwarded: `-MOVED`, as a
    /// Redis Cluster node answers, or on a session that forwards single commands, why this one
    /// is not (a client that relies on forwarding does not follow `-MOVED`).
    fn refuse_remote(&self, remote: &Remote) -> Reply {
        if self.forwards() {
            remote.not_forwarded()
        } else {
            remote.moved()
        }
    }

    /// Sends a command to the core (in a cluster: the one of its keys' partition, or every
    /// hosted partition for a command without keys).
    async fn submit_raw(&mut self, command: Command, charge: Charge) -> Pending {
        let route = self.front.cores.route(&command).await;
        self.run_routed(route, command, charge).await
    }

    /// Sends a command where `route` says; a command for another proxy's slot is refused.
    async fn run_routed(
        &mut self,
        route: Result<Route, Reply>,
        command: Command,
        charge: Charge,
    ) -> Pending {
        let client = self.client.id;
        let submitted = match route {
            Err(reply) => return Pending::Now(reply),
            Ok(Route::Remote(remote)) => return Pending::Now(self.refuse_remote(&remote)),
            Ok(Route::One(core)) => core.submit(client, command, charge).await,
            Ok(Route::Partition(core, on)) => {
                return match core.submit(client, command, charge).await {
                    Ok(outcome) => Pending::OnPartition(outcome, on),
                    Err(stopped) => Pending::Now(Reply::err(stopped)),
                };
            }
            Ok(Route::Every(hosted)) if fanout::answers(&command) => {
                fanout::submit(&hosted, client, command, charge).await
            }
            // A transaction of commands without keys runs where one store's would.
            Ok(Route::Every(_)) => match self.front.cores.first() {
                Some(core) => core.submit(client, command, charge).await,
                None => return Pending::Now(Reply::err(NO_PARTITION)),
            },
        };
        match submitted {
            Ok(outcome) => Pending::Later(outcome),
            Err(stopped) => Pending::Now(Reply::err(stopped)),
        }
    }

    /// The first store's snapshot, and in a cluster every hosted partition's; `None` for a
    /// cluster proxy that hosts no partition.
    async fn snapshots(
        &self,
    ) -> Result<Option<(Snapshot, Vec<(usize, Snapshot)>)>, crate::core::CoreStopped> {
        let Some(first) = self.front.cores.first() else {
            return Ok(None);
        };
        let first = first.snapshot().await?;
        let mut partitions = Vec::new();
        if let Some(hosted) = self.front.cores.cluster() {
            for (index, core) in hosted.cores() {
                partitions.push((*index, CoreHandle::snapshot(core).await?));
            }
        }
        Ok(Some((first, partitions)))
    }

    /// Inside MULTI: queue key commands, run EXEC and DISCARD, refuse the rest. As in Redis, a
    /// command refused while queuing (unknown, wrong arguments) makes EXEC discard everything,
    /// while a nested MULTI or a WATCH is only refused.
    async fn queue(&mut self, parsed: Result<Request, Reply>, charge: Charge) -> Pending {
        let request = match parsed {
            Ok(request) => request,
            Err(reply) => {
                self.refused = true;
                return Pending::Now(reply);
            }
        };
        let reply = match request {
            // A command for another proxy's slots, or spanning slots, is refused now, as Redis
            // Cluster refuses it while queuing, and the transaction is discarded.
            Request::Data(command) => {
                let queued = match self.front.cores.route(&command).await {
                    Err(refused) => Err(refused),
                    Ok(Route::Remote(remote)) => Err(self.refuse_remote(&remote)),
                    Ok(_) => database::in_db(command, self.db(), self.front.max_key)
                        .map_err(|error| Reply::Error(error.redis_line())),
                };
                match queued {
                    Ok(command) => {
                        self.queued.get_or_insert_default().push(command);
                        Reply::status("QUEUED")
                    }
                    Err(error) => {
                        self.refused = true;
                        error
                    }
                }
            }
            Request::Exec => {
                let commands = self.queued.take().unwrap_or_default();
                if std::mem::take(&mut self.refused) {
                    // Redis forgets the watches of a discarded transaction too.
                    self.watched_partitions.clear();
                    let _ = self.submit_raw(Command::Unwatch, charge).await;
                    return Pending::Now(Reply::Error(
                        "EXECABORT Transaction discarded because of previous errors.".into(),
                    ));
                }
                let transaction = Command::Transaction(commands);
                if let Some(refusal) = self.watched_elsewhere(&transaction) {
                    let _ = self.submit_raw(Command::Unwatch, charge).await;
                    return Pending::Now(refusal);
                }
                self.watched_partitions.clear();
                return self.submit_raw(transaction, charge).await;
            }
            Request::Discard => {
                self.queued = None;
                self.refused = false;
                self.watched_partitions.clear();
                return self.submit_raw(Command::Unwatch, charge).await;
            }
            Request::Multi => Reply::err("MULTI calls can not be nested"),
            Request::Watch(_) => Reply::err("WATCH inside MULTI is not allowed"),
            Request::Quit => return Pending::Close(Some(Reply::ok())),
            Request::Reset => self.reset().await,
            _ => {
                self.refused = true;
                Reply::err("only key commands can be queued inside MULTI by Cloak")
            }
        };
        Pending::Now(reply)
    }

    /// In a cluster, the refusal for a transaction that would run on another partition than a
    /// key it watches (forgetting the watches, as EXEC does): that partition's engine would
    /// run it without knowing of the watch. (A Redis node checks every watch it holds; the
    /// partitions hosted here answer as one node but keep their own.)
    fn watched_elsewhere(&mut self, transaction: &Command) -> Option<Reply> {
        let runs_on = self.front.cores.partition_for(&transaction.keys())?;
        let watched = std::mem::take(&mut self.watched_partitions);
        let elsewhere = watched.into_iter().find(|&p| p != runs_on)?;
        Some(Reply::Error(format!(
            "CROSSSLOT Keys in request don't hash to the same slot (a WATCHed key is in \
             partition {elsewhere}, the transaction's keys in partition {runs_on}; Cloak checks \
             a WATCH only within its partition)"
        )))
    }

    /// `AUTH [user] password`, and `HELLO … AUTH`: the users are `default` (the client
    /// password, or none) and, on a cluster proxy with a cluster secret, [`ADMIN_USER`]. A failed
    /// attempt leaves the connection as it was, as in Redis.
    fn authenticate(&mut self, user: Option<Bytes>, password: &[u8]) -> Result<(), Reply> {
        let wrong =
            || Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into());
        if user.as_deref() == Some(ADMIN_USER.as_bytes()) {
            // Without a secret there is no admin user: admin commands are refused to everyone.
            let secret = self.front.cluster_secret.as_ref().ok_or_else(wrong)?;
            if !secret.admits(password) {
                return Err(wrong());
            }
            self.authenticated = true;
            self.admin = true;
            return Ok(());
        }
        let user_ok = user.as_deref().is_none_or(|u| u == b"default");
        let password_ok = match &self.front.password {
            // Redis's default user without a password takes any with its name, but refuses the
            // one-argument form as a likely misconfiguration.
            None if user.is_none() => {
                return Err(Reply::err(
                    "AUTH <password> called without any password configured for the default \
                     user. Are you sure your configuration is correct?",
                ));
            }
            None => true,
            Some(expected) => constant_time_eq(password, expected.as_bytes()),
        };
        if user_ok && password_ok {
            self.authenticated = true;
            self.admin = false;
            Ok(())
        } else {
            Err(wrong())
        }
    }

    /// Redis's order: authenticate, refuse an unauthenticated client, then name the client and
    /// switch protocol; the reply is already in the new protocol.
    fn hello(&mut self, hello: Hello) -> Result<Reply, Reply> {
        if let Some((user, password)) = hello.auth {
            self.authenticate(Some(user), &password)?;
        }
        if !self.authenticated {
            return Err(Reply::Error(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise \
                 the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the \
                 client and select the RESP protocol version at the same time"
                    .into(),
            ));
        }
        let mut state = self.client.state();
        if let Some(name) = hello.name {
            state.name = (!name.is_empty()).then_some(name);
        }
        if let Some(protocol) = hello.protocol {
            state.protocol = protocol;
        }
        Ok(Reply::map([
            ("server", Reply::bulk("redis")),
            ("version", Reply::bulk(REDIS_VERSION)),
            ("proto", Reply::Integer(state.protocol.version().into())),
            ("id", Reply::Integer(self.client.id as i64)),
            (
                "mode",
                Reply::bulk(if self.front.cores.cluster().is_some() {
                    "cluster"
                } else {
                    "standalone"
                }),
            ),
            ("role", Reply::bulk("master")),
            ("modules", Reply::Array(Vec::new())),
        ]))
    }

    /// `RESET`: back to a fresh connection's state (RESP2, no name, database 0, flags off, no
    /// transaction, no watched keys, and unauthenticated when a password is set). The library
    /// name and version stay, as in Redis.
    async fn reset(&mut self) -> Reply {
        self.queued = None;
        self.refused = false;
        self.watched_partitions.clear();
        if std::mem::take(&mut self.watched) {
            let _ = self.submit_raw(Command::Unwatch, Charge::nothing()).await;
        }
        let mut state = self.client.state();
        state.protocol = Protocol::Resp2;
        state.name = None;
        state.db = 0;
        state.no_evict = false;
        state.no_touch = false;
        self.authenticated = self.front.password.is_none();
        self.admin = false;
        Reply::status("RESET")
    }

    fn client_command(&mut self, request: ClientRequest) -> Pending {
        let client = &self.client;
        let reply = match request {
            ClientRequest::SetName(name) => {
                client.state().name = (!name.is_empty()).then_some(name);
                Reply::ok()
            }
            ClientRequest::GetName => Reply::Bulk(client.state().name.clone()),
            ClientRequest::SetInfo(LibAttribute::Name, value) => {
                client.state().lib_name = Some(value);
                Reply::ok()
            }
            ClientRequest::SetInfo(LibAttribute::Version, value) => {
                client.state().lib_ver = Some(value);
                Reply::ok()
            }
            ClientRequest::Id => Reply::Integer(client.id as i64),
            ClientRequest::Info => Reply::Verbatim(client.describe()),
            ClientRequest::List { ids, only_normal } => Reply::Verbatim(if only_normal {
                self.front.clients.describe(&ids)
            } else {
                String::new()
            }),
            ClientRequest::NoEvict(on) => {
                client.state().no_evict = on;
                Reply::ok()
            }
            ClientRequest::NoTouch(on) => {
                client.state().no_touch = on;
                Reply::ok()
            }
            ClientRequest::Kill(filter) => {
                let (killed, me) = self.front.clients.kill(&filter, client.id);
                let reply = match (filter.old_form, killed) {
                    (true, 0) => Reply::err("No such client"),
                    (true, _) => Reply::ok(),
                    (false, n) => Reply::Integer(n as i64),
                };
                // A client that kills itself still gets its reply, then the connection closes.
                return if me {
                    Pending::Close(Some(reply))
                } else {
                    Pending::Now(reply)
                };
            }
        };
        Pending::Now(reply)
    }
}

/// `TIME`: seconds and microseconds since the Unix epoch, as two bulk strings.
fn time() -> Reply {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Reply::Array(vec![
        Reply::bulk(now.as_secs().to_string()),
        Reply::bulk(now.subsec_micros().to_string()),
    ])
}

/// Compares without an early exit, so response time does not reveal how much of a guessed
/// password was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
