//! Whether a recovery scan found the whole, current store, and the words for what it did not.
//!
//! A hostile server chooses what a scan shows, so a start checks two things before it trusts it:
//! - every element opens under the store's key at the address it was found at: a corrupted,
//!   truncated, swapped or foreign element does not ([`Damage`]);
//! - every slot is at least as new as the proxy last knew storage to hold it ([`SlotVersions`],
//!   kept in the proxy's state directory): a key whose element the server deleted, replaced with
//!   an older copy, or brought back after a `DEL`, is older than that ([`StaleSlot`]).
//!
//! What the second check cannot see is what the proxy never wrote down: versions acknowledged
//! after the last time it saved them (see `cloak_proxy::ledger` for when that is).

use std::collections::HashMap;
use std::fmt;

use bytes::Bytes;
use cloak_crypto::CryptoError;

use crate::element::{ElementError, Slot};
use crate::storage::Addr;

/// The newest version of each slot that storage (with the journal) must hold: every write the
/// proxy acknowledged, `DEL`s included (an empty record's version).
pub type SlotVersions = HashMap<Slot, u64>;

/// How many addresses or slots a message names before it says "…".
const NAMED: usize = 8;

/// The addresses of elements with one kind of fault, in scan order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// The addresses.
    pub addresses: Vec<Addr>,
}

impl Tally {
    /// How many.
    pub fn count(&self) -> u64 {
        self.addresses.len() as u64
    }
}

/// Elements a scan found that are not this store's elements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Damage {
    /// Failed authentication: altered, moved from another address, or sealed under another key.
    pub unauthentic: Tally,
    /// Too short to be a sealed element at all.
    pub short: Tally,
    /// Not records of this store's layout: authentic (or plaintext) records of other sizes, or
    /// elements of a length none of this store's has (not opened).
    pub malformed: Tally,
}

impl Damage {
    /// Counts the element at `address` under the fault `error` names.
    pub fn record(&mut self, address: Addr, error: &ElementError) {
        let tally = match error {
            ElementError::Crypto(CryptoError::Truncated(_)) => &mut self.short,
            ElementError::Crypto(CryptoError::Tampered | CryptoError::NotThisRun)
            | ElementError::Missing => &mut self.unauthentic,
            ElementError::WrongLength(len) if *len < cloak_crypto::SEAL_OVERHEAD => &mut self.short,
            ElementError::Malformed(_)
            | ElementError::WrongSlot { .. }
            | ElementError::WrongLength(_) => &mut self.malformed,
        };
        tally.addresses.push(address);
    }

    /// Damaged elements of every kind.
    pub fn count(&self) -> u64 {
        self.unauthentic.count() + self.short.count() + self.malformed.count()
    }

    /// Every damaged element's address.
    pub fn addresses(&self) -> impl Iterator<Item = Addr> + '_ {
        [&self.unauthentic, &self.short, &self.malformed]
            .into_iter()
            .flat_map(|tally| tally.addresses.iter().copied())
    }

    /// Whether nothing is damaged.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }
}

/// A slot storage holds older than the proxy last knew it, or not at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleSlot {
    /// The slot.
    pub slot: Slot,
    /// The version the proxy last knew storage to hold.
    pub expected: u64,
    /// The newest version recovery found, if any.
    pub found: Option<u64>,
    /// The key the found record holds (none when nothing, or a freed slot, was found).
    pub key: Option<Bytes>,
}

/// Everything a start found wrong with storage; empty when the store is whole and current.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// Elements the scan read.
    pub elements: u64,
    /// Elements that are not this store's.
    pub damage: Damage,
    /// By slot.
    pub stale: Vec<StaleSlot>,
}

impl Findings {
    /// Compares what recovery found (`found` gives a slot's version and key, if it found the
    /// slot) with what storage must hold.
    pub fn new<'a>(
        elements: u64,
        damage: Damage,
        found: impl Fn(Slot) -> Option<(u64, Option<&'a [u8]>)>,
        expected: &SlotVersions,
    ) -> Self {
        let mut stale: Vec<StaleSlot> = expected
            .iter()
            // Version 0 is a slot no client ever wrote: nothing to find.
            .filter(|(_, version)| **version > 0)
            .filter_map(|(&slot, &expected)| match found(slot) {
                Some((version, _)) if version >= expected => None,
                found => Some(StaleSlot {
                    slot,
                    expected,
                    found: found.map(|(version, _)| version),
                    key: found.and_then(|(_, key)| key.map(Bytes::copy_from_slice)),
                }),
            })
            .collect();
        stale.sort_unstable_by_key(|s| s.slot);
        Self {
            elements,
            damage,
            stale,
        }
    }

    /// Whether storage is whole and current.
    pub fn is_clean(&self) -> bool {
        self.damage.is_empty() && self.stale.is_empty()
    }

    fn missing(&self) -> impl Iterator<Item = &StaleSlot> {
        self.stale.iter().filter(|s| s.found.is_none())
    }

    fn older(&self) -> impl Iterator<Item = &StaleSlot> {
        self.stale.iter().filter(|s| s.found.is_some())
    }

    /// The most likely reason, from the pattern of faults.
    fn likely_cause(&self) -> &'static str {
        let d = &self.damage;
        if self.elements > 0 && d.unauthentic.count() == self.elements {
            "no element opens with this key: the proxy has the wrong key (check --key-file or \
             CLOAK_KEY), or the storage holds another store"
        } else if self.elements > 0 && d.malformed.count() == self.elements {
            "no element has this store's record size: the store was written with another \
             --value-size or --key-size"
        } else if self.elements == 0 {
            "storage is empty: it lost everything, or the proxy points at the wrong storage \
             (check --storage and its key prefix)"
        } else {
            "the storage server deleted, altered or rolled back elements (a damaged or hostile \
             server, or storage restored from an older backup)"
        }
    }
}

/// "1 slot", "2 slots".
fn slots(n: usize) -> String {
    format!("{n} slot{}", if n == 1 { "" } else { "s" })
}

/// `first` as a list, with "…" when `count` is larger.
fn list<T: fmt::Display>(first: impl Iterator<Item = T>, count: usize) -> String {
    let named: Vec<String> = first.take(NAMED).map(|x| x.to_string()).collect();
    let more = if count > named.len() { ", …" } else { "" };
    format!("{}{more}", named.join(", "))
}

impl fmt::Display for Findings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.elements;
        let tallies = [
            (
                &self.damage.unauthentic,
                "failed authentication (altered, moved between addresses, or sealed with another key)",
            ),
            (
                &self.damage.short,
                "are too short to be sealed elements (truncated)",
            ),
            (
                &self.damage.malformed,
                "do not hold records of this store's layout (another size)",
            ),
        ];
        writeln!(f, "storage does not hold the store as this proxy left it:")?;
        for (tally, what) in tallies {
            if !tally.addresses.is_empty() {
                writeln!(
                    f,
                    "  - {} of {n} elements {what}; addresses {}",
                    tally.count(),
                    list(tally.addresses.iter(), tally.addresses.len())
                )?;
            }
        }
        let missing: Vec<&StaleSlot> = self.missing().collect();
        if !missing.is_empty() {
            writeln!(
                f,
                "  - missing from storage (no element holds them): {}; slot (last acknowledged \
                 version): {}",
                slots(missing.len()),
                list(
                    missing
                        .iter()
                        .map(|s| format!("{} (v{})", s.slot, s.expected)),
                    missing.len()
                )
            )?;
        }
        let older: Vec<&StaleSlot> = self.older().collect();
        if !older.is_empty() {
            writeln!(
                f,
                "  - older than the proxy last wrote them (rolled back, or brought back after a \
                 DEL): {}; slot key (found version < acknowledged version): {}",
                slots(older.len()),
                list(
                    older.iter().map(|s| {
                        let key = s.key.as_ref().map_or_else(
                            || "(freed)".to_string(),
                            |k| format!("{:?}", String::from_utf8_lossy(k)),
                        );
                        format!(
                            "{} {key} (v{} < v{})",
                            s.slot,
                            s.found.unwrap_or(0),
                            s.expected
                        )
                    }),
                    older.len()
                )
            )?;
        }
        write!(f, "likely cause: {}", self.likely_cause())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(version: u64, key: &'static [u8]) -> (u64, Option<Bytes>) {
        (version, (!key.is_empty()).then(|| Bytes::from_static(key)))
    }

    /// A lookup of `records` for [`Findings::new`].
    fn found<'a>(
        records: &'a [(Slot, (u64, Option<Bytes>))],
    ) -> impl Fn(Slot) -> Option<(u64, Option<&'a [u8]>)> {
        |slot| {
            let (_, (version, key)) = records.iter().find(|(s, _)| *s == slot)?;
            Some((*version, key.as_deref()))
        }
    }

    #[test]
    fn missing_older_and_resurrected_slots_are_stale_and_newer_ones_are_not() {
        let records = vec![
            (1, record(5, b"a")), // as acknowledged
            (2, record(9, b"b")), // newer than the ledger: a write after it was saved
            (3, record(4, b"c")), // rolled back
            (4, record(6, b"d")), // brought back after a DEL at version 7
        ];
        let expected = SlotVersions::from([(1, 5), (2, 8), (3, 6), (4, 7), (5, 3), (6, 0)]);
        let findings = Findings::new(10, Damage::default(), found(&records), &expected);
        let stale: Vec<(Slot, Option<u64>)> =
            findings.stale.iter().map(|s| (s.slot, s.found)).collect();
        assert_eq!(stale, vec![(3, Some(4)), (4, Some(6)), (5, None)]);
        let text = findings.to_string();
        assert!(
            text.contains("missing from storage (no element holds them): 1 slot;"),
            "{text}"
        );
        assert!(text.contains("5 (v3)"), "{text}");
        assert!(text.contains("3 \"c\" (v4 < v6)"), "{text}");
        assert!(text.contains("rolled back"), "{text}");
    }

    #[test]
    fn faults_are_sorted_by_kind_and_a_wrong_key_is_named() {
        let mut damage = Damage::default();
        for address in 0..20 {
            damage.record(address, &ElementError::Crypto(CryptoError::Tampered));
        }
        let findings = Findings::new(20, damage.clone(), found(&[]), &SlotVersions::new());
        assert!(!findings.is_clean());
        let text = findings.to_string();
        assert!(
            text.contains("20 of 20 elements failed authentication"),
            "{text}"
        );
        assert!(text.contains("0, 1, 2, 3, 4, 5, 6, 7, …"), "{text}");
        assert!(text.contains("wrong key"), "{text}");

        damage.record(99, &ElementError::Crypto(CryptoError::Truncated(3)));
        damage.record(98, &ElementError::Malformed("wrong length"));
        assert_eq!((damage.short.count(), damage.malformed.count()), (1, 1));
        assert_eq!(damage.addresses().count(), 22);
        let text = Findings::new(30, damage, found(&[]), &SlotVersions::new()).to_string();
        assert!(text.contains("1 of 30 elements are too short"), "{text}");
        assert!(text.contains("deleted, altered or rolled back"), "{text}");
    }

    #[test]
    fn a_whole_current_store_is_clean() {
        let records = vec![(1, record(5, b"a")), (2, record(6, b""))];
        let expected = SlotVersions::from([(1, 5), (2, 6)]);
        assert!(Findings::new(2, Damage::default(), found(&records), &expected).is_clean());
    }
}
