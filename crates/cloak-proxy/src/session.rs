//! What a connection remembers between its commands: the database it selected, and the
//! transaction it is queuing (MULTI … EXEC), with Redis's rules for both.

use cloak_core::{Command, Db, keyspace};

use crate::cmd::Request;
use crate::resp::Reply;

/// What the connection should do with a request, given the session.
pub enum Step {
    /// Answer this at once.
    Reply(Reply),
    /// Send this command (its keys in the session's database) to the engine.
    Submit(Command),
    /// Tell the engine to forget this client's watches, and answer this at once.
    Unwatch(Reply),
    /// Not a session matter: the connection handles the request as usual.
    Pass(Request),
}

#[derive(Default)]
pub struct Session {
    db: Db,
    /// Commands queued since MULTI (keys already in the database selected then); `None`
    /// outside a transaction.
    queued: Option<Vec<Command>>,
    /// A command was refused while queuing: EXEC discards the transaction.
    refused: bool,
    /// WATCH was used: the engine must forget this client's watches when it leaves.
    pub watched: bool,
}

impl Session {
    /// Takes a parsed request (or the error it parsed to), with stored keys at most `max_key`
    /// bytes long.
    pub fn step(&mut self, parsed: Result<Request, Reply>, max_key: usize) -> Step {
        if self.queued.is_some() {
            return self.queue(parsed, max_key);
        }
        let request = match parsed {
            Ok(request) => request,
            Err(reply) => return Step::Reply(reply),
        };
        match request {
            Request::Data(command) => self.submit(command, max_key),
            Request::Watch(command) => {
                self.watched = true;
                self.submit(command, max_key)
            }
            Request::Select(index) => match Db::new(index) {
                Some(db) => {
                    self.db = db;
                    Step::Reply(Reply::ok())
                }
                None => Step::Reply(Reply::err("DB index is out of range")),
            },
            Request::Multi => {
                self.queued = Some(Vec::new());
                self.refused = false;
                Step::Reply(Reply::ok())
            }
            Request::Exec => Step::Reply(Reply::err("EXEC without MULTI")),
            Request::Discard => Step::Reply(Reply::err("DISCARD without MULTI")),
            other => Step::Pass(other),
        }
    }

    fn submit(&self, command: Command, max_key: usize) -> Step {
        match keyspace::in_db(command, self.db, max_key) {
            Ok(command) => Step::Submit(command),
            Err(error) => Step::Reply(Reply::err(error)),
        }
    }

    /// Inside MULTI: queue key commands, run EXEC and DISCARD, refuse the rest. As in Redis, a
    /// command refused while queuing (unknown, wrong arguments) makes EXEC discard everything,
    /// while a nested MULTI or a WATCH is only refused.
    fn queue(&mut self, parsed: Result<Request, Reply>, max_key: usize) -> Step {
        let request = match parsed {
            Ok(request) => request,
            Err(reply) => {
                self.refused = true;
                return Step::Reply(reply);
            }
        };
        match request {
            Request::Data(command) => match keyspace::in_db(command, self.db, max_key) {
                Ok(command) => {
                    self.queued.get_or_insert_default().push(command);
                    Step::Reply(Reply::Status("QUEUED"))
                }
                Err(error) => {
                    self.refused = true;
                    Step::Reply(Reply::err(error))
                }
            },
            Request::Exec => {
                let commands = self.queued.take().unwrap_or_default();
                if std::mem::take(&mut self.refused) {
                    // Redis forgets the watches of a discarded transaction too.
                    return Step::Unwatch(Reply::Error(
                        "EXECABORT Transaction discarded because of previous errors.".into(),
                    ));
                }
                Step::Submit(Command::Transaction(commands))
            }
            Request::Discard => {
                self.queued = None;
                self.refused = false;
                Step::Submit(Command::Unwatch)
            }
            Request::Multi => Step::Reply(Reply::err("MULTI calls can not be nested")),
            Request::Watch(_) => Step::Reply(Reply::err("WATCH inside MULTI is not allowed")),
            Request::Quit => Step::Pass(Request::Quit),
            _ => {
                self.refused = true;
                Step::Reply(Reply::err(
                    "only key commands can be queued inside MULTI by Cloak",
                ))
            }
        }
    }
}
