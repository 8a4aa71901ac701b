//! Journal gates: what must wait until the journal holds records before it writes to storage.
//!
//! A write-back that removes a block from storage (the block it fetched) may be sent only once
//! the journal holds that block; the initial fill likewise waits for recovered blocks it could
//! not place. If the journal fails, the gate keeps the subORAM and tries again after a backoff:
//! storage keeps the block until the journal has it.

use std::time::Instant;

use cloak_core::{NO_SLOT, Record, Slot, StorageError};

use super::{Curious, Gate, Purpose, Stage};

impl Curious {
    /// Journals the cached records of `slots` (blocks about to leave storage); `gate` proceeds
    /// once they are durable.
    ///
    /// Every write-back waits for a journal commit, also when it removes nothing from storage:
    /// if only accesses that fetched a block waited, the pause between a path read and its
    /// write-back would tell the server which accesses fetched one (and so, for instance, how
    /// often clients hit the cache). An access with nothing to keep journals a [`NO_SLOT`]
    /// marker, which recovery ignores, and waits like the others.
    pub(super) fn wait_for_journal(&mut self, gate: Gate, slots: Vec<u32>) {
        let mut journal = None;
        for slot in slots {
            // A block evicted again since (only after a journal failure) is in storage.
            if let Some(record) = self.cache.record(slot).cloned() {
                journal = Some(self.io.out.keep(Slot::from(slot), record));
            }
        }
        if journal.is_none() && matches!(gate, Gate::Access(_)) {
            journal = Some(self.io.out.keep(NO_SLOT, Record::empty()));
        }
        match journal {
            Some(id) => self.gates.entry(id).or_default().push(gate),
            None => self.pass_gate(gate),
        }
    }

    pub(super) fn pass_gate(&mut self, gate: Gate) {
        match gate {
            Gate::Fill => {
                self.fill_gate = None;
                self.pump_fill(None);
            }
            Gate::Access(id) => {
                let Some(access) = self.accesses.get_mut(&id) else {
                    return;
                };
                if let Stage::Journaling { write, evicted, .. } =
                    std::mem::replace(&mut access.stage, Stage::Queued)
                {
                    access.stage = Stage::Writing { evicted };
                    self.io.send(Purpose::Write(id), write);
                }
            }
        }
    }

    /// The journal could not keep what `gate` waits for: keep it again after a backoff (the
    /// blocks must not leave storage before it holds them).
    pub(super) fn journal_failed(&mut self, now: Instant, gate: Gate, reason: &str) {
        tracing::error!(%reason, ?gate, "journal failed; storage keeps the blocks until it works");
        self.journal_retry
            .fail(now, StorageError(reason.to_string()), gate);
    }

    pub(super) fn gated_slots(&self, gate: Gate) -> Vec<u32> {
        match gate {
            Gate::Fill => self.fill_gate.clone().unwrap_or_default(),
            Gate::Access(id) => match self.accesses.get(&id).map(|a| &a.stage) {
                Some(Stage::Journaling { keeps, .. }) => keeps.clone(),
                _ => Vec::new(),
            },
        }
    }
}
