//! The `2n` labels and which replica each one is.
//!
//! A *cell* is one label of storage. It is named after the replica it was made for — key `k`'s
//! `j`-th replica has label `PRF(k, j)`, the dummy key's `PRF(D, j)` — and keeps that label
//! forever, even when replica swapping (§5.1) hands it to another key: the proxy then remembers
//! the new owner, as the paper's label mapping does. A cell also records whose record storage
//! holds there right now (`holds`), which differs from its owner only while a swap waits for
//! its first write, and the generation its element is bound to.
//!
//! Replica lists are kept lean: one cell per slot in a vector, further replicas (only keys
//! hotter than `1/n` have them) in a map.

use hashbrown::HashMap;

use cloak_core::{Addr, NO_SLOT, Slot};
use cloak_crypto::Prf;

/// The owner of dummy replicas (the paper's key `D`).
pub const DUMMY: u32 = u32::MAX;

#[derive(Clone, Debug)]
pub struct Cell {
    /// The replica the label was made for: `(key, j)`, key [`DUMMY`] for dummies.
    pub name: (u32, u32),
    pub owner: u32,
    /// Whose record storage holds here; the owner's unless a swap is pending.
    pub holds: u32,
    /// The generation the element here is bound to.
    pub generation: u64,
}

impl Cell {
    pub fn pending(&self) -> bool {
        self.holds != self.owner
    }
}

/// Slot as written into elements (dummies carry [`NO_SLOT`]).
pub fn element_slot(owner: u32) -> Slot {
    if owner == DUMMY {
        NO_SLOT
    } else {
        Slot::from(owner)
    }
}

pub struct Replicas {
    prf: Prf,
    cells: Vec<Cell>,
    /// First replica of every slot.
    first: Vec<u32>,
    /// Further replicas of slots that have more than one, in replica order.
    more: HashMap<u32, Vec<u32>>,
    dummies: Vec<u32>,
}

impl Replicas {
    /// `counts[k]` replicas of every slot and `dummies` dummy replicas, in cells ordered by
    /// `order` (a permutation of the replica list, so storage learns nothing from the order in
    /// which labels are first written). Every cell starts at generation 0: unwritten.
    pub fn new(
        prf: Prf,
        counts: &[u32],
        dummies: u64,
        shuffle: impl FnOnce(&mut [(u32, u32)]),
    ) -> Self {
        let mut names: Vec<(u32, u32)> = counts
            .iter()
            .enumerate()
            .flat_map(|(k, &r)| (0..r).map(move |j| (k as u32, j)))
            .chain((0..dummies as u32).map(|j| (DUMMY, j)))
            .collect();
        shuffle(&mut names);
        let mut replicas = Self {
            prf,
            cells: Vec::with_capacity(names.len()),
            first: vec![0; counts.len()],
            more: HashMap::new(),
            dummies: Vec::new(),
        };
        let mut by_name: Vec<(u32, u32, u32)> = names
            .iter()
            .enumerate()
            .map(|(cell, &(k, j))| (k, j, cell as u32))
            .collect();
        // Replica lists in replica order.
        by_name.sort_unstable();
        for (k, j, cell) in by_name {
            match (k, j) {
                (DUMMY, _) => replicas.dummies.push(cell),
                (_, 0) => replicas.first[k as usize] = cell,
                _ => replicas.more.entry(k).or_default().push(cell),
            }
        }
        replicas.cells = names
            .into_iter()
            .map(|name| Cell {
                name,
                owner: name.0,
                holds: name.0,
                generation: 0,
            })
            .collect();
        replicas
    }

    pub fn len(&self) -> usize {
        self.cells.len()
    }

    pub fn cell(&self, cell: u32) -> &Cell {
        &self.cells[cell as usize]
    }

    pub fn cell_mut(&mut self, cell: u32) -> &mut Cell {
        &mut self.cells[cell as usize]
    }

    pub fn cells(&self) -> impl Iterator<Item = (u32, &Cell)> {
        self.cells.iter().enumerate().map(|(i, c)| (i as u32, c))
    }

    pub fn label(&self, cell: u32) -> Addr {
        let (key, j) = self.cells[cell as usize].name;
        self.prf.label(element_slot(key), u64::from(j))
    }

    /// Replicas of `owner` (a slot or [`DUMMY`]).
    pub fn count(&self, owner: u32) -> usize {
        if owner == DUMMY {
            return self.dummies.len();
        }
        1 + self.more.get(&owner).map_or(0, Vec::len)
    }

    /// The `j`-th replica of slot `slot`.
    pub fn replica(&self, slot: u32, j: usize) -> u32 {
        match j {
            0 => self.first[slot as usize],
            _ => self.more[&slot][j - 1],
        }
    }

    /// Every replica cell of `owner`, in replica order.
    pub fn of(&self, owner: u32) -> Vec<u32> {
        if owner == DUMMY {
            return self.dummies.clone();
        }
        let mut cells = vec![self.first[owner as usize]];
        if let Some(more) = self.more.get(&owner) {
            cells.extend_from_slice(more);
        }
        cells
    }

    /// Appends `cell` to `owner`'s replicas and makes it the owner's.
    pub fn push(&mut self, owner: u32, cell: u32) {
        self.cells[cell as usize].owner = owner;
        if owner == DUMMY {
            self.dummies.push(cell);
        } else {
            self.more.entry(owner).or_default().push(cell);
        }
    }

    /// Removes `owner`'s replicas beyond the first `keep` and returns them (never the first
    /// replica of a slot: every key keeps one).
    pub fn truncate(&mut self, owner: u32, keep: usize) -> Vec<u32> {
        if owner == DUMMY {
            return self.dummies.split_off(keep.min(self.dummies.len()));
        }
        let keep_more = keep.max(1) - 1;
        let Some(more) = self.more.get_mut(&owner) else {
            return Vec::new();
        };
        let removed = more.split_off(keep_more.min(more.len()));
        if more.is_empty() {
            self.more.remove(&owner);
        }
        removed
    }
}
