//! How much request data the proxy holds between reading a request and answering it.
//!
//! A decoded command stays in memory until its outcome is delivered: in the core's channel and
//! the engine's lanes. Without a bound on bytes, the bounds on counts (a pipeline of 1,024 per
//! connection, 10,000 connections) still let one authenticated client park gigabytes of large
//! `MSET`s. Each request is charged its size before it is started, and the charge travels with
//! the command until the core delivers its outcome (so a command the core still holds stays
//! charged even if its connection is gone). A connection whose charges reach the per-connection
//! limit, or any connection once the whole proxy's reach the proxy-wide one, stops reading its
//! socket until outcomes come back (TCP pushes back on the client). Smaller clients are not
//! starved: the proxy-wide pool hands out permits in the order they were asked for, and no
//! connection may hold more than its own share.
//!
//! Not charged: the request a connection is reading (its bytes in the read buffer) and the one
//! decoded and waiting for its charge, each at most the largest request the limits allow
//! (`--max-keys-per-command` pairs of `--value-size` plus `--key-size`). So the proxy holds at
//! most this budget plus two such requests per connection, bounded through `--max-clients`.
//! Charging the read buffer too would let partly read requests hold the whole pool while each
//! waits for more of it to finish reading: a deadlock among connections. Replies waiting to be
//! written are not charged either: each connection's are bounded by `--client-reply-limit`, so
//! together by that times `--max-clients` (a proxy-wide bound on them is still to come).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Request bytes the whole proxy holds at most, unless `--max-pending-bytes` says otherwise.
pub const DEFAULT_PROXY_PENDING_BYTES: usize = 512 << 20;

/// Request bytes one connection holds at most: a pipeline of its largest requests fits several
/// times over, a flood of them waits.
pub const CONNECTION_PENDING_BYTES: usize = 32 << 20;

/// Permits are kibibytes, and every request costs at least one: the command's own bookkeeping
/// (its outcome channel, its place in the queues) is memory too, so a flood of tiny requests is
/// bounded as well.
const UNIT: usize = 1024;

/// A pool of request bytes; [`Budget::acquire`] waits until a request fits.
#[derive(Clone)]
pub struct Budget {
    permits: Arc<Semaphore>,
    /// The most one request is charged: a request larger than the pool (possible only with
    /// limits set very high) waits for the whole pool instead of forever.
    most: u32,
}

impl Budget {
    pub(crate) fn new(bytes: usize) -> Self {
        let units = (bytes / UNIT).clamp(1, u32::MAX as usize);
        Self {
            permits: Arc::new(Semaphore::new(units)),
            most: units as u32,
        }
    }

    fn units(&self, bytes: usize) -> u32 {
        (bytes / UNIT + 1).min(self.most as usize) as u32
    }

    /// Waits until `bytes` fit, and charges them until the returned permit is dropped.
    pub(crate) async fn acquire(&self, bytes: usize) -> OwnedSemaphorePermit {
        let units = self.units(bytes);
        self.permits
            .clone()
            .acquire_many_owned(units)
            .await
            // Budgets are never closed.
            .unwrap_or_else(|_| unreachable!("request budgets are never closed"))
    }

    /// Bytes charged now (for INFO and tests).
    pub(crate) fn used(&self) -> usize {
        (self.most as usize - self.permits.available_permits()) * UNIT
    }
}

/// The charges of one request, returned when its outcome is delivered.
pub struct Charge {
    _connection: OwnedSemaphorePermit,
    _proxy: OwnedSemaphorePermit,
}

impl Charge {
    /// A charge of nothing, for what the proxy itself sends on a client's behalf (the UNWATCH
    /// of a closing or reset connection).
    pub(crate) fn nothing() -> Self {
        let pool = Arc::new(Semaphore::new(2));
        let take = || {
            pool.clone()
                .try_acquire_owned()
                .unwrap_or_else(|_| unreachable!("a fresh pool has both permits"))
        };
        Charge {
            _connection: take(),
            _proxy: take(),
        }
    }
}

/// Charges a request of `bytes` to its connection and then to the proxy (in that order, so a
/// connection at its own limit holds nothing of the shared pool while it waits).
pub(crate) async fn charge(connection: &Budget, proxy: &Budget, bytes: usize) -> Charge {
    let _connection = connection.acquire(bytes).await;
    let _proxy = proxy.acquire(bytes).await;
    Charge {
        _connection,
        _proxy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_full_budget_waits_until_a_charge_is_returned() {
        let connection = Budget::new(8 * UNIT);
        let proxy = Budget::new(1 << 20);
        let first = charge(&connection, &proxy, 6 * UNIT).await;
        assert_eq!(connection.used(), 7 * UNIT);
        let second = tokio::time::timeout(
            Duration::from_millis(50),
            charge(&connection, &proxy, 3 * UNIT),
        )
        .await;
        assert!(second.is_err(), "the second request must wait");
        drop(first);
        let _second = charge(&connection, &proxy, 3 * UNIT).await;
        assert_eq!(proxy.used(), 4 * UNIT);
    }

    #[tokio::test]
    async fn a_request_larger_than_the_pool_takes_the_whole_pool() {
        let pool = Budget::new(4 * UNIT);
        let all = pool.acquire(1 << 30).await;
        assert_eq!(pool.used(), 4 * UNIT);
        drop(all);
        assert_eq!(pool.used(), 0);
    }
}
