//! Alarms at exact instants, idle or loaded: for the core's deadlines and for storage requests
//! handed over to leave at a time on the scheme's schedule.
//!
//! A batch read leaves at a grid point and its write-back a fixed hold after it: times the
//! storage server sees, so they must not move with the load. tokio's timer rounds a deadline up
//! to the next whole millisecond, while a loaded core, whose loop reads the clock every turn,
//! noticed the same deadline at once; so an idle proxy released its write-backs about a
//! millisecond later than a loaded one, and the read-to-write-back gap the server measures told
//! idle seconds from loaded ones every time (medians 11.4 ms idle, 10.0 ms under a SET load, with
//! a 10 ms hold). A thread of its own waits for each alarm's instant on a channel with a timeout
//! (the kernel's high-resolution timers: tens of microseconds of slack) and completes it.
//!
//! The core wakes through one of these alarms, but a woken core still needs a worker of the
//! clients' runtime, and under a heavy client load it waits behind connection tasks (measured:
//! batch intervals of 20 ms spread to 19.1–20.9 ms at p10–p90). So a scheme hands its timed
//! requests over early (`StorageRequest::not_before`), and the task that sends one waits for its
//! alarm on the storage thread ([`crate::own_thread`]), which does nothing else: the request
//! leaves at its instant whatever the core is doing. Both threads ask for a real-time priority,
//! so that a host whose CPUs are all busy does not make them wait either ([`crate::priority`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::warm_send::WarmSend;

/// Sets alarms; the thread behind it stops once every handle is dropped.
#[derive(Clone)]
pub(crate) struct Alarms {
    set: mpsc::Sender<(Instant, oneshot::Sender<()>)>,
    /// Run at the start of each warmed alarm's spin; `None` if it could not be set up.
    warm_send: Option<Arc<WarmSend>>,
}

/// Completes at its instant (at once if the instant has passed, or if the alarm thread is gone).
pub(crate) struct Alarm {
    ring: oneshot::Receiver<()>,
    /// For a warmed alarm: the instant itself, spun up to after the ring.
    spin_until: Option<Instant>,
    /// For a warmed alarm: the kernel's TCP send path, warmed once at the ring.
    warm_send: Option<Arc<WarmSend>>,
}

/// How long before a warmed alarm's instant its thread is woken, to spin up to the instant.
const WARM_UP: Duration = Duration::from_micros(300);

/// About the longest a warm-up write takes on a cold path: an alarm that rings closer to its
/// instant than this (its thread was busy) skips the warm-up rather than leave late.
const TOUCH_TAKES: Duration = Duration::from_micros(100);

impl Future for Alarm {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Pin::new(&mut self.ring).poll(cx).is_pending() {
            return Poll::Pending;
        }
        if let Some(warm_send) = self.warm_send.take()
            && self
                .spin_until
                .is_some_and(|at| Instant::now() + TOUCH_TAKES < at)
        {
            warm_send.touch();
        }
        if let Some(at) = self.spin_until {
            while Instant::now() < at {
                std::hint::spin_loop();
            }
        }
        Poll::Ready(())
    }
}

impl Alarms {
    /// Starts the alarm thread.
    pub(crate) fn start() -> std::io::Result<Self> {
        let (set, alarms) = mpsc::channel();
        std::thread::Builder::new()
            .name("cloak-alarms".into())
            .spawn(move || {
                crate::priority::raise_this_thread();
                ring_alarms(&alarms);
            })?;
        let warm_send = WarmSend::start()
            .inspect_err(|error| {
                tracing::warn!(
                    %error,
                    "no loopback connection to warm the send path: timed storage requests may \
                     take the kernel longer to send idle than loaded"
                )
            })
            .ok()
            .map(Arc::new);
        Ok(Self { set, warm_send })
    }

    /// An alarm for `at`. Dropping it before then costs nothing but its place in the thread's
    /// table until `at`.
    pub(crate) fn at(&self, at: Instant) -> Alarm {
        let (ring, alarm) = oneshot::channel();
        // A send fails only if the thread is gone; the alarm then completes at once.
        let _ = self.set.send((at, ring));
        Alarm {
            ring: alarm,
            spin_until: None,
            warm_send: None,
        }
    }

    /// An alarm for `at` whose waiting thread wakes [`WARM_UP`] early and spins up to `at`.
    /// A CPU that was idle runs slowly for a while after it wakes (it leaves a power-saving
    /// state, and a virtual CPU must be scheduled by its host first), so work started at the
    /// instant took longer on an idle host than on a busy one: the read-to-write-back gap on
    /// the wire was 70 µs longer idle (medians 10.13 against 10.06 ms). Spinning through the
    /// wake-up puts the thread in the same state at the instant whatever the load; the kernel's
    /// TCP send path is warmed at the start of the spin ([`crate::warm_send`]).
    pub(crate) fn warmed(&self, at: Instant) -> Alarm {
        let mut alarm = self.at(at.checked_sub(WARM_UP).unwrap_or(at));
        alarm.spin_until = Some(at);
        alarm.warm_send = self.warm_send.clone();
        alarm
    }
}

fn ring_alarms(alarms: &mpsc::Receiver<(Instant, oneshot::Sender<()>)>) {
    // Keyed by instant and arrival, so that two alarms for one instant both ring.
    let mut pending: BTreeMap<(Instant, u64), oneshot::Sender<()>> = BTreeMap::new();
    let mut arrivals = 0u64;
    loop {
        let now = Instant::now();
        while let Some(entry) = pending.first_entry() {
            if entry.key().0 > now {
                break;
            }
            // The receiver may be gone (the core moved its deadline): nothing to ring.
            let _ = entry.remove().send(());
        }
        let next = match pending.first_key_value() {
            Some(((at, _), _)) => alarms.recv_timeout(at.saturating_duration_since(now)),
            None => alarms.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match next {
            Ok((at, ring)) => {
                arrivals += 1;
                pending.insert((at, arrivals), ring);
            }
            Err(RecvTimeoutError::Timeout) => {}
            // Every handle is gone: the proxy is stopping, and the alarms still set complete
            // at once as their senders drop.
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rings_at_the_instant_not_at_the_next_millisecond() {
        let alarms = Alarms::start().unwrap();
        // tokio's millisecond timer is late by 0.7 ms on average for this instant, in every
        // round; this one by tens of microseconds. The median of the best of three rounds of
        // twenty leaves room for a test machine busy for a while.
        let mut medians = Vec::new();
        for _ in 0..3 {
            let mut late = Vec::new();
            for _ in 0..20 {
                let at = Instant::now() + Duration::from_micros(2_300);
                alarms.at(at).await;
                let now = Instant::now();
                assert!(now >= at, "rang {:?} early", at - now);
                late.push(now - at);
            }
            late.sort();
            medians.push(late[late.len() / 2]);
            if medians
                .last()
                .is_some_and(|m| *m < Duration::from_micros(500))
            {
                return;
            }
        }
        panic!("median lateness in three rounds: {medians:?}");
    }

    #[tokio::test]
    async fn a_warmed_alarm_completes_at_its_instant_not_at_its_warm_up() {
        let alarms = Alarms::start().unwrap();
        for _ in 0..5 {
            let at = Instant::now() + Duration::from_millis(2);
            alarms.warmed(at).await;
            assert!(Instant::now() >= at, "completed before its instant");
        }
    }

    #[tokio::test]
    async fn alarms_ring_in_the_order_of_their_instants_not_of_their_setting() {
        let alarms = Alarms::start().unwrap();
        let start = Instant::now();
        let far = alarms.at(start + Duration::from_secs(60));
        let near = alarms.at(start + Duration::from_millis(5));
        let same = alarms.at(start + Duration::from_millis(5));
        near.await;
        same.await;
        assert!(start.elapsed() < Duration::from_secs(30));
        drop(far);
        drop(alarms);
    }

    #[tokio::test]
    async fn an_alarm_completes_at_once_once_the_thread_is_gone() {
        let alarms = Alarms::start().unwrap();
        let late = alarms.at(Instant::now() + Duration::from_secs(3600));
        drop(alarms);
        tokio::time::timeout(Duration::from_secs(10), late)
            .await
            .expect("the alarm completes when its thread stops");
    }
}
