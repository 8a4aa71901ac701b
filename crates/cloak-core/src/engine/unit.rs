//! Units: commands that run alone on their keys (read-modify-writes, MSETNX, RENAME, COPY, and
//! EXEC's queued commands together). A unit starts once the [`Gate`](super::gate) lets it
//! (its keys held, their slots idle), then:
//!
//! 1. reads every key it names, in one go;
//! 2. runs its commands one after the other on those values (type, deadline and data) in
//!    memory (`Engine::interpret`, with [`Update::apply`] for read-modify-writes: string,
//!    expiry and hash updates), which gives every reply;
//! 3. writes each key whose value changed (a delete writes an empty record), in one go;
//! 4. answers once the writes are acknowledged, and lets the keys go.
//!
//! No other client's op on these keys is in the scheme from step 1 to step 4, so the unit is
//! atomic: every other command on its keys takes effect entirely before or entirely after it.
//!
//! A script (EVAL, run by the proxy's Lua) is a unit whose commands come one at a time: after
//! step 1 the unit answers [`Outcome::ScriptStarted`] and keeps its entries; each
//! [`Command::ScriptCall`] is step 2 for one command, answered at once from memory; and
//! [`Command::ScriptEnd`] goes on with step 3. The script runs at the proxy, off the engine, so a
//! long one delays only the commands that wait for its keys, never the engine (nor the times at
//! which it sends the scheme's traffic). What storage sees is what any unit makes: a read of
//! each declared key and a write (or cover) of each, whatever the script did in between.
//!
//! What storage sees: a read of each key's slot and a write of each changed key's slot, the
//! same accesses a GET and a SET of those keys make, which the scheme hides as it hides those.
//! For schemes whose every op makes traffic of its own ([`Scheme::traffic_per_op`]), the count
//! must not depend on the data either: an absent key is read with a cover read (as GET does),
//! and a key the unit may write but leaves unchanged gets a cover read in place of its write,
//! so the traffic is one read per key named plus one access per key a command may write,
//! whatever the values were.
//!
//! [`Scheme::traffic_per_op`]: crate::scheme::Scheme::traffic_per_op

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use bytes::Bytes;

use super::gate::Waiter;
use super::{Engine, Expect, Shape, resolve};
use crate::command::{
    Command, CommandError, GetExChange, Outcome, SetCondition, SetExpiry, TtlUnit,
};
use crate::database;
use crate::envelope::{Entry, Kind};
use crate::hash::Hash;
use crate::scheme::Op;
use crate::update::{Change, Update};

/// What a unit knows of its keys: each one's entry, `None` for no key.
type View = HashMap<Bytes, Option<Entry>>;

/// A unit between its start and its answer.
pub(super) struct Unit {
    client: super::ClientId,
    token: u64,
    commands: Vec<Command>,
    /// EXEC (answers an array), or one command (answers its own reply).
    transaction: bool,
    /// The keys the gate holds for it.
    held: Vec<Bytes>,
    /// The keys it reads, in order, and what they held.
    keys: Vec<Bytes>,
    /// Set once the commands ran: the answer to give when the writes are acknowledged.
    outcome: Option<Outcome>,
    /// A script's entries between its start and its end.
    script: Option<Running>,
}

/// A running script's keys: as read, and as its calls left them so far.
struct Running {
    before: View,
    view: View,
    /// The time every call sees, in Unix milliseconds: the script's start (Redis too freezes
    /// time for a script, so a key cannot expire halfway through it).
    unix: u64,
}

/// The keys a unit's commands read and those they may write.
fn keys_of(commands: &[Command]) -> (Vec<Bytes>, HashSet<Bytes>) {
    let mut read = Vec::new();
    let mut seen = HashSet::new();
    let mut writable = HashSet::new();
    for command in commands {
        for key in command.keys() {
            if seen.insert(key.clone()) {
                read.push(key.clone());
            }
            if command.may_write() {
                writable.insert(key);
            }
        }
    }
    (read, writable)
}

impl Engine {
    /// Starts a unit the gate let through: reads its keys (step 1).
    pub(super) fn begin_unit(&mut self, now: Instant, waiter: Waiter) {
        let Waiter {
            client,
            token,
            command,
            keys: held,
            ..
        } = waiter;
        if let Err(error) = self.check(&command) {
            self.gate.release(&held);
            self.finish(token, Outcome::Error(error));
            return;
        }
        self.forget_expired_named(now, &command);
        let (commands, transaction) = match command {
            Command::Transaction(commands) => {
                // EXEC forgets the client's watches whatever happens, as in Redis; a watched
                // key written since WATCH makes it answer nil without running anything.
                if self.watches.unwatch(client) {
                    self.gate.release(&held);
                    self.finish(token, Outcome::Aborted);
                    return;
                }
                (commands, true)
            }
            single => (vec![single], false),
        };
        let (keys, _) = keys_of(&commands);
        let id = self.next_unit;
        self.next_unit += 1;
        let slots: Vec<_> = keys.iter().map(|key| self.directory.get(key)).collect();
        let ops = match self.cover {
            Some(_) => keys.len(),
            None => slots.iter().flatten().count(),
        };
        self.units.insert(
            id,
            Unit {
                client,
                token,
                commands,
                transaction,
                held,
                keys: keys.clone(),
                outcome: None,
                script: None,
            },
        );
        if ops == 0 {
            self.unit_read(now, id, vec![None; keys.len()], None);
            return;
        }
        let command = self.wait(token, Shape::UnitRead(id), keys.len(), ops);
        for (index, (key, slot)) in keys.into_iter().zip(slots).enumerate() {
            match slot {
                Some(slot) => self.start_op(
                    now,
                    client,
                    command,
                    slot,
                    Expect::Entry(key, index),
                    Op::Read,
                ),
                None => self.cover(now, client, command),
            }
        }
    }

    /// The reads are back: runs the commands and writes what changed (steps 2 and 3).
    pub(super) fn unit_read(
        &mut self,
        now: Instant,
        id: u64,
        values: Vec<Option<Bytes>>,
        error: Option<CommandError>,
    ) {
        let Some(unit) = self.units.get(&id) else {
            return;
        };
        if let Some(error) = error {
            self.end_unit(id, Some(Outcome::Error(error)));
            return;
        }
        let entries: Result<Vec<Option<Entry>>, _> = values
            .into_iter()
            .map(|value| value.map(|sealed| Entry::open(&sealed)).transpose())
            .collect();
        let entries = match entries {
            Ok(entries) => entries,
            Err(error) => {
                self.end_unit(id, Some(Outcome::Error(error.into())));
                return;
            }
        };
        let before: View = unit.keys.iter().cloned().zip(entries).collect();
        let unix = self.clock.unix_ms(now);
        if let [Command::Script(_)] = unit.commands[..] {
            let token = unit.token;
            if let Some(unit) = self.units.get_mut(&id) {
                unit.script = Some(Running {
                    view: before.clone(),
                    before,
                    unix,
                });
            }
            self.finish(token, Outcome::ScriptStarted(id));
            return;
        }
        let mut view = before.clone();
        let commands = unit.commands.clone();
        let mut outcomes: Vec<Outcome> = commands
            .iter()
            .map(|command| self.interpret(&mut view, &before, command, unix))
            .collect();
        let outcome = match unit.transaction {
            true => Outcome::Multi(outcomes),
            false => outcomes.pop().unwrap_or(Outcome::Ok),
        };
        if let Some(unit) = self.units.get_mut(&id) {
            unit.outcome = Some(outcome);
        }
        self.write_back(now, id, &before, &view);
    }

    /// Step 3: writes each of the unit's keys whose entry changed from `before` to `view` (with
    /// covers for those its commands may write but left as they were), or answers at once if
    /// there is none.
    fn write_back(&mut self, now: Instant, id: u64, before: &View, view: &View) {
        let Some(unit) = self.units.get(&id) else {
            return;
        };
        let (client, keys) = (unit.client, unit.keys.clone());
        let (_, writable) = keys_of(&unit.commands);
        let mut writes = Vec::new();
        let mut covers = 0;
        for key in keys {
            let (old, new) = (&before[&key], &view[&key]);
            if old != new {
                writes.push((key.clone(), new.clone()));
            } else if self.cover.is_some() && writable.contains(&key) {
                covers += 1;
            }
        }
        if writes.is_empty() && covers == 0 {
            self.end_unit(id, None);
            return;
        }
        let token = self.units.get(&id).map_or(0, |unit| unit.token);
        let command = self.wait(token, Shape::UnitWritten(id), 0, writes.len() + covers);
        for _ in 0..covers {
            self.cover(now, client, command);
        }
        for (key, value) in writes {
            self.watches.touched(&key);
            match value {
                Some(entry) => {
                    let Some((slot, _)) = self.insert_key(&key) else {
                        // `interpret` refused every new key the store had no room for.
                        tracing::error!("a unit's new key found no free slot");
                        continue;
                    };
                    self.write(now, client, command, slot, key, entry, Expect::Written);
                }
                None => {
                    if let Some(slot) = self.remove_key(&key) {
                        self.delete_slot(now, client, command, slot, Expect::Written);
                    }
                }
            }
        }
    }

    /// One call of the running script `id` (step 2 for one command): its outcome, from memory.
    pub(super) fn script_call(
        &mut self,
        client: super::ClientId,
        id: u64,
        command: &Command,
    ) -> Outcome {
        let Some(mut running) = self
            .units
            .get_mut(&id)
            .filter(|unit| unit.client == client)
            .and_then(|unit| unit.script.take())
        else {
            return Outcome::Error(CommandError::NoRunningScript);
        };
        let outcome = if command
            .keys()
            .iter()
            .all(|key| running.before.contains_key(key))
        {
            self.interpret(&mut running.view, &running.before, command, running.unix)
        } else {
            Outcome::Error(CommandError::UndeclaredKey)
        };
        if let Some(unit) = self.units.get_mut(&id) {
            unit.script = Some(running);
        }
        outcome
    }

    /// The running script `id` finished: writes what it changed (step 3), answering `token`
    /// once they are acknowledged.
    pub(super) fn script_end(
        &mut self,
        now: Instant,
        client: super::ClientId,
        token: u64,
        id: u64,
    ) {
        let Some(unit) = self.units.get_mut(&id).filter(|unit| unit.client == client) else {
            self.finish(token, Outcome::Error(CommandError::NoRunningScript));
            return;
        };
        let Some(running) = unit.script.take() else {
            self.finish(token, Outcome::Error(CommandError::NoRunningScript));
            return;
        };
        unit.token = token;
        self.write_back(now, id, &running.before, &running.view);
    }

    /// The writes are acknowledged (step 4), or failed.
    pub(super) fn unit_written(&mut self, id: u64, error: Option<CommandError>) {
        self.end_unit(id, error.map(Outcome::Error));
    }

    /// Answers the unit (with `failure` in place of its outcome) and lets its keys go.
    fn end_unit(&mut self, id: u64, failure: Option<Outcome>) {
        let Some(unit) = self.units.remove(&id) else {
            return;
        };
        self.gate.release(&unit.held);
        let outcome = failure.or(unit.outcome).unwrap_or(Outcome::Ok);
        self.finish(unit.token, outcome);
        self.gate_moved = true;
    }

    /// Runs one command on the unit's entries in memory at `unix` (Unix milliseconds): its
    /// reply, and its effect on `view`. `before` holds what the keys held when the unit began
    /// (for new keys' room).
    fn interpret(&self, view: &mut View, before: &View, command: &Command, unix: u64) -> Outcome {
        if let Err(error) = self.check(command) {
            return Outcome::Error(error);
        }
        let get = |view: &View, key: &Bytes| view.get(key).cloned().flatten();
        // A string's data, for GET and MGET (a hash reads as nil in MGET).
        let string = |view: &View, key: &Bytes| {
            get(view, key)
                .filter(|entry| entry.kind == Kind::String)
                .map(|entry| entry.data)
        };
        // Whether the store has a slot for every key this unit would have created, once
        // `adding` exist too (slots of keys deleted meanwhile come back only once released).
        let room = |view: &View, adding: &[&Bytes]| {
            let mut new: HashSet<&Bytes> = view
                .iter()
                .filter(|(key, value)| value.is_some() && before[*key].is_none())
                .map(|(key, _)| key)
                .collect();
            new.extend(adding.iter().filter(|key| before[**key].is_none()));
            self.directory
                .has_room_for(new.into_iter().map(|key| &key[..]))
        };
        let full = || {
            Outcome::Error(CommandError::StoreFull {
                capacity: self.directory.capacity(),
            })
        };
        let max_value = self.limits.max_value;
        // A read-modify-write of one key, through the one `Update::apply`.
        let update = |view: &mut View, key: &Bytes, update: Update| {
            let (change, outcome) = update.apply(get(view, key), unix, max_value);
            match change {
                Change::Keep => {}
                Change::Put(entry) => {
                    if !room(view, &[key]) {
                        return full();
                    }
                    view.insert(key.clone(), Some(entry));
                }
                Change::Delete => {
                    view.insert(key.clone(), None);
                }
            }
            outcome
        };
        match command {
            Command::Get(key) => match get(view, key) {
                Some(entry) if entry.kind != Kind::String => {
                    Outcome::Error(CommandError::WrongType)
                }
                entry => Outcome::Value(entry.map(|entry| entry.data)),
            },
            Command::MGet(keys) => Outcome::Values(keys.iter().map(|k| string(view, k)).collect()),
            Command::Exists(keys) => {
                Outcome::Integer(keys.iter().filter(|k| get(view, k).is_some()).count() as i64)
            }
            Command::Set {
                key,
                value,
                condition,
            } => set(
                view,
                key,
                Entry::string(value.clone()),
                *condition,
                room,
                full,
            ),
            Command::SetExpiring {
                key,
                value,
                condition,
                expiry,
                name,
            } => {
                let deadline = match expiry {
                    SetExpiry::Keep => get(view, key).and_then(|entry| entry.deadline),
                    SetExpiry::At(deadline) => match resolve(*deadline, unix, name) {
                        Ok(at) => Some(at as u64),
                        Err(outcome) => return outcome,
                    },
                };
                let entry = Entry {
                    deadline,
                    ..Entry::string(value.clone())
                };
                set(view, key, entry, *condition, room, full)
            }
            Command::MSet(pairs) => {
                if !room(view, &pairs.iter().map(|(k, _)| k).collect::<Vec<_>>()) {
                    return full();
                }
                for (key, value) in pairs {
                    view.insert(key.clone(), Some(Entry::string(value.clone())));
                }
                Outcome::Ok
            }
            Command::MSetNx(pairs) => {
                if pairs.iter().any(|(key, _)| get(view, key).is_some()) {
                    return Outcome::Integer(0);
                }
                if !room(view, &pairs.iter().map(|(k, _)| k).collect::<Vec<_>>()) {
                    return full();
                }
                for (key, value) in pairs {
                    view.insert(key.clone(), Some(Entry::string(value.clone())));
                }
                Outcome::Integer(1)
            }
            Command::Del(keys) => {
                let mut deleted = 0;
                for key in keys {
                    if let Some(value) = view.get_mut(key)
                        && value.take().is_some()
                    {
                        deleted += 1;
                    }
                }
                Outcome::Integer(deleted)
            }
            Command::DbSize(db) => {
                let max_key = self.limits.max_key;
                let change: i64 = view
                    .iter()
                    .filter(|(key, _)| database::db_of(key, max_key) == *db)
                    .map(|(key, now)| i64::from(now.is_some()) - i64::from(before[key].is_some()))
                    .sum();
                Outcome::Integer(self.db_size(*db) as i64 + change)
            }
            Command::Update { key, op } => update(view, key, op.clone()),
            Command::Expire {
                key,
                deadline,
                condition,
                name,
            } => match resolve(*deadline, unix, name) {
                Ok(at) => update(
                    view,
                    key,
                    Update::Expire {
                        at,
                        condition: *condition,
                    },
                ),
                Err(outcome) => outcome,
            },
            Command::Persist(key) => update(view, key, Update::Persist),
            Command::GetEx { key, change, name } => {
                let at = match change {
                    None => {
                        return match get(view, key) {
                            Some(entry) if entry.kind != Kind::String => {
                                Outcome::Error(CommandError::WrongType)
                            }
                            entry => Outcome::Value(entry.map(|entry| entry.data)),
                        };
                    }
                    Some(GetExChange::Persist) => None,
                    Some(GetExChange::At(deadline)) => match resolve(*deadline, unix, name) {
                        Ok(at) => Some(at),
                        Err(outcome) => return outcome,
                    },
                };
                update(view, key, Update::GetEx(at))
            }
            Command::Hash { key, op } if op.is_read() => match get(view, key) {
                None => op.read(None),
                Some(entry) if entry.kind != Kind::Hash => Outcome::Error(CommandError::WrongType),
                Some(entry) => match Hash::decode(&entry.data) {
                    Ok(hash) => op.read(Some(&hash)),
                    Err(_) => Outcome::Error(CommandError::MalformedHash),
                },
            },
            Command::Hash { key, op } => update(view, key, Update::Hash(op.clone())),
            Command::Ttl { key, unit } => {
                let Some(entry) = get(view, key) else {
                    return Outcome::Integer(-2);
                };
                Outcome::Integer(match entry.deadline {
                    None => -1,
                    Some(at) => ttl(at, *unit, unix),
                })
            }
            Command::Type(key) => {
                Outcome::Status(get(view, key).map_or("none", |entry| entry.kind.name()))
            }
            Command::Rename {
                from,
                to,
                only_if_absent,
            } => {
                // The entry moves whole: its type and its deadline go with it, as in Redis.
                let Some(entry) = get(view, from) else {
                    return Outcome::Error(CommandError::NoSuchKey);
                };
                let done = |renamed: bool| match (only_if_absent, renamed) {
                    (false, _) => Outcome::Ok,
                    (true, renamed) => Outcome::Integer(i64::from(renamed)),
                };
                if from == to {
                    return done(false);
                }
                if *only_if_absent && get(view, to).is_some() {
                    return done(false);
                }
                if !room(view, &[to]) {
                    return full();
                }
                view.insert(from.clone(), None);
                view.insert(to.clone(), Some(entry));
                done(true)
            }
            Command::Copy {
                from, to, replace, ..
            } => {
                if from == to {
                    return Outcome::Error(CommandError::SameObject);
                }
                // The copy has the source's type and deadline, as in Redis.
                let Some(entry) = get(view, from) else {
                    return Outcome::Integer(0);
                };
                if !replace && get(view, to).is_some() {
                    return Outcome::Integer(0);
                }
                if !room(view, &[to]) {
                    return full();
                }
                view.insert(to.clone(), Some(entry));
                Outcome::Integer(1)
            }
            Command::Keys { .. } => Outcome::Error(CommandError::NotInTransaction("KEYS")),
            Command::Scan { .. } => Outcome::Error(CommandError::NotInTransaction("SCAN")),
            Command::RandomKey(_) => Outcome::Error(CommandError::NotInTransaction("RANDOMKEY")),
            Command::Flush(_) => Outcome::Error(CommandError::NotInTransaction("FLUSHDB")),
            Command::Watch(_) | Command::Unwatch => {
                Outcome::Error(CommandError::NotInTransaction("WATCH"))
            }
            Command::Transaction(_) => Outcome::Error(CommandError::NotInTransaction("MULTI")),
            Command::Script(_) | Command::ScriptCall { .. } | Command::ScriptEnd(_) => {
                Outcome::Error(CommandError::NotInTransaction("EVAL"))
            }
        }
    }
}

/// `SET` in a unit: `entry` under `key` unless `condition` fails.
fn set(
    view: &mut View,
    key: &Bytes,
    entry: Entry,
    condition: SetCondition,
    room: impl Fn(&View, &[&Bytes]) -> bool,
    full: impl Fn() -> Outcome,
) -> Outcome {
    let exists = view.get(key).is_some_and(Option::is_some);
    let holds = match condition {
        SetCondition::Always => true,
        SetCondition::IfAbsent => !exists,
        SetCondition::IfPresent => exists,
    };
    if !holds {
        return Outcome::Value(None);
    }
    if !room(view, &[key]) {
        return full();
    }
    view.insert(key.clone(), Some(entry));
    Outcome::Ok
}

/// `TTL` and its relatives for a deadline `at`, at `unix` (both Unix milliseconds).
pub(super) fn ttl(at: u64, unit: TtlUnit, unix: u64) -> i64 {
    let at = at as i64;
    let left = (at - unix as i64).max(0);
    // Redis rounds to the nearest second.
    match unit {
        TtlUnit::Seconds => (left + 500) / 1000,
        TtlUnit::Millis => left,
        TtlUnit::UnixSeconds => (at + 500) / 1000,
        TtlUnit::UnixMillis => at,
    }
}
