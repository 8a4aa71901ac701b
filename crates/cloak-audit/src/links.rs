//! Following elements through write-backs by what their clear headers give away.
//!
//! A batch reads some addresses and then writes elements back. If anything readable in the
//! written elements reflects the order they were sealed in, and a scheme seals in the order it
//! read, the server learns which read element each written one is: the secret shuffle. The
//! header's nonce is where a counter would sit (`ClearHeader::nonce_number`), so the server
//! ranks a write-back's elements by it and takes rank `r` to be the element read at position
//! `r` of the batch's read. With random nonces that rank is a random permutation and every
//! link it makes is a guess; with counter nonces and read-order sealing it is the truth.
//!
//! Following the links from batch to batch gives every access an element identity: the same
//! number for the same element as far as the server can tell. The linking attack and the
//! followed-reuse distinguisher work from these identities alone.

use std::collections::HashMap;

use cloak_core::{AccessKind, Addr};
use cloak_crypto::ClearHeader;

use crate::truth::Keys;
use crate::view::{ServerRequest, ServerView};

/// For every access of a view, the element it touched as the server identifies it.
#[derive(Clone, Debug, Default)]
pub struct Elements {
    /// Per access (index into `ServerView::accesses`): its element's number.
    pub of_access: Vec<u32>,
    /// How many elements were told apart.
    pub count: u32,
}

/// A field of the clear header an attacker may order a write-back's elements by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderField {
    Epoch,
    Nonce,
    Generation,
}

impl HeaderField {
    pub const ALL: [HeaderField; 3] = [
        HeaderField::Epoch,
        HeaderField::Nonce,
        HeaderField::Generation,
    ];

    /// The field of `header`, as a number to order by.
    pub fn of(self, header: &ClearHeader) -> u64 {
        match self {
            HeaderField::Epoch => header.epoch,
            HeaderField::Nonce => header.nonce_number(),
            HeaderField::Generation => header.generation,
        }
    }
}

/// The position each written element of `request` takes in nonce order (ties in request
/// order); `None` for writes whose values have no header.
pub fn nonce_ranks(view: &ServerView, request: &ServerRequest) -> Option<Vec<usize>> {
    ranks(view, request, HeaderField::Nonce)
}

/// The position each written element of `request` takes in the order of `field` (ties in
/// request order, which the server sees anyway); `None` for writes whose values have no header.
pub fn ranks(view: &ServerView, request: &ServerRequest, field: HeaderField) -> Option<Vec<usize>> {
    let numbers: Vec<u64> = view
        .accesses_of(request)
        .iter()
        .map(|a| a.header.map(|h| field.of(&h)))
        .collect::<Option<_>>()?;
    let mut order: Vec<usize> = (0..numbers.len()).collect();
    order.sort_by_key(|&j| numbers[j]);
    let mut ranks = vec![0; numbers.len()];
    for (rank, &j) in order.iter().enumerate() {
        ranks[j] = rank;
    }
    Some(ranks)
}

/// Follows every element of `view` through its write-backs by nonce rank.
pub fn follow(view: &ServerView) -> Elements {
    let mut elements = Elements {
        of_access: Vec::with_capacity(view.accesses.len()),
        count: 0,
    };
    let fresh = |count: &mut u32| {
        *count += 1;
        *count - 1
    };
    // The element each address holds now.
    let mut holds: HashMap<Addr, u32> = HashMap::new();
    for request in &view.requests {
        let accesses = view.accesses_of(request);
        match request.kind {
            AccessKind::Read => {
                let found: Vec<u32> = accesses
                    .iter()
                    .map(|a| {
                        *holds
                            .entry(a.addr)
                            .or_insert_with(|| fresh(&mut elements.count))
                    })
                    .collect();
                elements.of_access.extend(&found);
            }
            AccessKind::Write => {
                // The elements the read it writes back found, in read order.
                let from_read: Vec<u32> = request
                    .source
                    .map(|r| {
                        elements.of_access[view.requests[r as usize].accesses.clone()].to_vec()
                    })
                    .unwrap_or_default();
                let ranks = nonce_ranks(view, request).unwrap_or_default();
                for (j, access) in accesses.iter().enumerate() {
                    let linked = ranks.get(j).and_then(|&r| from_read.get(r)).copied();
                    let element = linked.unwrap_or_else(|| fresh(&mut elements.count));
                    holds.insert(access.addr, element);
                    elements.of_access.push(element);
                }
            }
            AccessKind::Delete | AccessKind::Scan => {
                for access in accesses {
                    let element = holds
                        .remove(&access.addr)
                        .unwrap_or_else(|| fresh(&mut elements.count));
                    elements.of_access.push(element);
                }
            }
        }
    }
    elements
}

/// How well the order of a header field names where written elements were read from, checked
/// against what the elements held (which only the key holder knows). Only elements that moved
/// count: one written back where it was read from was read at a position the server saw.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkCheck {
    /// Written elements of write-backs whose content was found in the read, at an address other
    /// than the one written.
    pub elements: u64,
    /// Of those, how many had a rank equal to a read position that held their content.
    pub named: u64,
    /// How many a random rank would name, in expectation.
    pub chance: f64,
}

impl LinkCheck {
    /// Share of elements whose read position the nonce order names.
    pub fn share(&self) -> f64 {
        self.named as f64 / self.elements.max(1) as f64
    }

    /// Share a random order would name.
    pub fn chance_share(&self) -> f64 {
        self.chance / self.elements.max(1) as f64
    }
}

/// Checks every write-back of `view` against `truth` (what each access's element held, indexed
/// like `view.accesses`): does the rank of each written element in the order of `field` name
/// the position it was read from? Elements holding no key (empty slots, dummies) are left out.
pub fn check_links(view: &ServerView, truth: &[Keys], field: HeaderField) -> LinkCheck {
    let mut check = LinkCheck::default();
    for (read, write) in view.write_backs() {
        let Some(ranks) = ranks(view, write, field) else {
            continue;
        };
        let read_truth = truth.get(read.accesses.clone()).unwrap_or_default();
        let read_addrs: Vec<Addr> = view.accesses_of(read).iter().map(|a| a.addr).collect();
        for (index, rank) in write.accesses.clone().zip(ranks) {
            let Some(held) = truth.get(index).filter(|k| !k.is_empty()) else {
                continue;
            };
            let holds_it = |p: usize| read_truth[p].iter().any(|k| held.contains(k));
            let addr = view.accesses[index].addr;
            let stayed = read_addrs
                .iter()
                .zip(0..read_truth.len())
                .any(|(&a, p)| a == addr && holds_it(p));
            if stayed {
                continue;
            }
            let from: Vec<usize> = read_truth
                .iter()
                .enumerate()
                .map(|(p, _)| p)
                .filter(|&p| holds_it(p))
                .collect();
            if from.is_empty() {
                continue;
            }
            check.elements += 1;
            check.named += u64::from(from.contains(&rank));
            check.chance += from.len() as f64 / read_truth.len() as f64;
        }
    }
    check
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use cloak_core::Observed;
    use std::time::Duration;

    /// A sealed-looking element whose nonce counter is `n`.
    fn element(n: u64) -> Bytes {
        let mut bytes = vec![0u8; cloak_crypto::SEAL_OVERHEAD + 4];
        bytes[8..16].copy_from_slice(&n.to_le_bytes());
        Bytes::from(bytes)
    }

    fn op(ms: u64, kind: AccessKind, addrs: &[Addr], nonces: &[u64]) -> Observed {
        Observed {
            at: Duration::from_millis(ms),
            answered: None,
            kind,
            addrs: addrs.to_vec(),
            values: nonces.iter().map(|&n| element(n)).collect(),
        }
    }

    #[test]
    fn counter_nonces_link_each_written_element_to_its_read() {
        use AccessKind::{Read, Write};
        // Batch 1 reads 1, 2, 3 and writes them back shuffled: address 1 gets the element read
        // third (nonce 12), 2 the first (10), 3 the second (11). Batch 2 reads 1 and 2 again.
        let trace = [
            op(0, Read, &[1, 2, 3], &[]),
            op(1, Write, &[1, 2, 3], &[12, 10, 11]),
            op(2, Read, &[2, 1], &[]),
        ];
        let view = ServerView::new(&trace, Duration::ZERO, Duration::from_secs(1));
        let e = follow(&view).of_access;
        let (one, two, three) = (e[0], e[1], e[2]);
        assert_eq!(e[3..6], [three, one, two]);
        assert_eq!(e[6..8], [one, three]);
    }

    #[test]
    fn the_link_check_knows_which_nonce_orders_name_the_read() {
        use AccessKind::{Read, Write};
        let keys = |k: &[u64]| -> Keys { k.iter().copied().collect() };
        // Reads 1, 2, 3 holding keys 10, 20, 30; writes back 20, 30, 10 to 1, 2, 3.
        let truth = [
            keys(&[10]),
            keys(&[20]),
            keys(&[30]),
            keys(&[20]),
            keys(&[30]),
            keys(&[10]),
        ];
        let check = |nonces: &[u64]| {
            let trace = [
                op(0, Read, &[1, 2, 3], &[]),
                op(1, Write, &[1, 2, 3], nonces),
            ];
            let view = ServerView::new(&trace, Duration::ZERO, Duration::from_secs(1));
            check_links(&view, &truth, HeaderField::Nonce)
        };
        // Sealed in read order: 10 (now at 3) first, 20 (at 1) second, 30 (at 2) third.
        let leaky = check(&[101, 102, 100]);
        assert_eq!((leaky.elements, leaky.named), (3, 3));
        assert!((leaky.chance_share() - 1.0 / 3.0).abs() < 1e-12);
        // Sealed in destination order: no element's rank is its read position.
        assert_eq!(check(&[100, 101, 102]).named, 0);
        // The elements carry no generation, epoch or order but their place in the request.
        let trace = [
            op(0, Read, &[1, 2, 3], &[]),
            op(1, Write, &[1, 2, 3], &[101, 102, 100]),
        ];
        let view = ServerView::new(&trace, Duration::ZERO, Duration::from_secs(1));
        assert_eq!(check_links(&view, &truth, HeaderField::Generation).named, 0);
    }

    #[test]
    fn a_write_outside_its_read_batch_links_nothing() {
        use AccessKind::Write;
        let trace = [op(0, Write, &[1, 2], &[0, 1])];
        let view = ServerView::new(&trace, Duration::ZERO, Duration::from_secs(1));
        let elements = follow(&view);
        assert_eq!(elements.count, 2);
    }
}
