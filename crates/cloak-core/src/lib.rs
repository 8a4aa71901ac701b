//! The sans-io core of Cloak.
//!
//! Nothing here touches a socket, a clock or a file. A [`Scheme`] is a state machine: client
//! operations on logical slots go in, storage requests come out, storage replies go in, client
//! replies come out, and time is whatever instant the driver passes. The [`Engine`] puts the
//! Redis-like command layer on top (key directory, size limits, per-client ordering), so the
//! network proxy, the in-process simulator and the tests all drive the same code.

#![warn(missing_docs)]

pub mod acknowledged;
pub mod command;
pub mod database;
pub mod directory;
pub mod element;
pub mod engine;
pub mod envelope;
pub mod hash;
pub mod integrity;
pub mod journal;
pub mod key_arena;
pub mod keyspace;
pub mod long_double;
pub mod memory;
pub mod outbox;
pub mod pattern;
pub mod recovery;
pub mod scheme;
pub mod sim;
pub mod storage;
pub mod trace;
pub mod update;
mod workers;

pub use command::{
    Command, CommandError, Deadline, ExpireCondition, GetExChange, Outcome, SetCondition,
    SetExpiry, TtlUnit,
};
pub use database::Db;
pub use directory::KeyDirectory;
pub use element::{
    ElementCodec, ElementError, NO_SLOT, Opened, Plaintext, Record, RecordLayout, RecordView, Slot,
};
pub use engine::{ClientId, Engine, EngineStats, Limits};
pub use envelope::{ENVELOPE_LEN, Entry, EnvelopeError, Kind};
pub use hash::HashOp;
pub use integrity::{Damage, Findings, SlotVersions, StaleSlot};
pub use journal::JournalMap;
pub use keyspace::Keyspace;
pub use memory::MemoryStore;
pub use outbox::Outbox;
pub use recovery::{ElementFormat, Recovered, RecoveredRecords, Recovery, RecoveryError};
pub use scheme::{
    JournalId, JournalOp, JournalRequest, Op, OpId, Reply, Scheme, SchemeError, SchemeStats,
};
pub use sim::Simulator;
pub use storage::{
    Addr, ExpectedReply, FENCED_OFF, RequestId, STORE_MARKER, StorageError, StorageOp,
    StorageReply, StorageRequest,
};
pub use trace::{AccessKind, Observed, Trace};
pub use update::Update;
