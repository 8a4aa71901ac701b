//! Loopback ports for the processes a test starts: the test picks a port, the child binds it
//! later (often seconds later, after a recovery scan or a restart).
//!
//! A port taken with `bind(0)` comes from the system's ephemeral range, which is also where every
//! outgoing connection's local port comes from. Between the test letting go of the port and the
//! child binding it, any connection made meanwhile (a client's, a proxy's to its storage, a
//! sibling test's) may take it; two proxies of one test were once given the same address. So
//! ports are handed out below the ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`),
//! where no connection takes a local port, never twice in one process, and only if they can be
//! bound now. Where the ephemeral range leaves no room below it, `bind(0)` is the fallback.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::{Mutex, MutexGuard};

/// The lowest port handed out: above the well-known ports and most registered services'.
const FIRST: u16 = 20_000;
/// A Redis Cluster node's bus port is its port plus this.
const BUS_OFFSET: u16 = 10_000;

/// A loopback port nobody listens on now, never handed out before in this process; with `bus`,
/// its cluster bus port (+10,000) is free too.
pub fn free_port(bus: bool) -> u16 {
    free_ports(1, bus)
}

/// The first of `count` consecutive loopback ports nobody listens on now, none handed out before
/// in this process (`cloak cluster up` takes consecutive ports from its `--port`); with `bus`,
/// their cluster bus ports are free too.
pub fn free_ports(count: u16, bus: bool) -> u16 {
    let mut given = given();
    let free =
        |port: u16| bindable(port) && (!bus || port.checked_add(BUS_OFFSET).is_some_and(bindable));
    // Below the ephemeral range, bus ports included; each process starts at its own offset, so
    // test processes run side by side rarely probe the same ports.
    let end = ephemeral_start().saturating_sub(BUS_OFFSET);
    let mut first = given
        .next
        .unwrap_or(FIRST + (std::process::id() % 16) as u16 * 128);
    while first.saturating_add(count) <= end {
        let ports = first..first + count;
        if ports.clone().all(free) {
            given.next = Some(first + count);
            given.ports.extend(ports);
            return first;
        }
        first += 1;
    }
    // No room below the ephemeral range: ports from it, as the system hands them out.
    loop {
        let first = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let ports = first..first.saturating_add(count);
        let fits = usize::from(count) == ports.len();
        if fits && ports.clone().all(|p| !given.ports.contains(&p) && free(p)) {
            given.ports.extend(ports);
            return first;
        }
    }
}

/// The ports handed out in this process, and where to look next below the ephemeral range.
struct Given {
    ports: BTreeSet<u16>,
    next: Option<u16>,
}

fn given() -> MutexGuard<'static, Given> {
    static GIVEN: Mutex<Given> = Mutex::new(Given {
        ports: BTreeSet::new(),
        next: None,
    });
    // A test that panicked holding the lock left the set as it was: still right.
    GIVEN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn bindable(port: u16) -> bool {
    port != 0 && TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// The first port of the system's ephemeral range (Linux's default where it cannot be read).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_never_handed_out_twice_and_stay_clear_of_the_ephemeral_range() {
        let first = free_ports(3, false);
        let more: Vec<u16> = (0..50).map(|_| free_port(false)).collect();
        let bus = free_port(true);
        let mut all: Vec<u16> = (first..first + 3).chain(more).chain([bus]).collect();
        if ephemeral_start() >= FIRST + BUS_OFFSET + 1_000 {
            let end = ephemeral_start() - BUS_OFFSET;
            assert!(all.iter().all(|&p| (FIRST..end).contains(&p)), "{all:?}");
        }
        let handed = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), handed, "a port handed out twice");
        assert!(bindable(bus) && bindable(bus + BUS_OFFSET));
    }
}
