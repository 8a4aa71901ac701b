//! Wakes the core at the scheme's deadlines to within tens of microseconds, idle or loaded.
//!
//! The scheme's deadlines are times the storage server sees: a batch read leaves at a grid point
//! and its write-back a fixed hold after it. tokio's timer rounds a deadline up to the next whole
//! millisecond and then wakes the core; a loaded core, whose loop reads the clock every turn,
//! noticed the same deadline at once. So an idle proxy released its write-backs on average about
//! a millisecond later than a loaded one, and the read-to-write-back gap the server measures told
//! idle seconds from loaded ones every time (medians 11.4 ms idle, 10.0 ms under a SET load, with
//! a 10 ms hold). A thread of its own waits for the exact deadline on a condition variable (the
//! kernel's high-resolution timers, tens of microseconds of slack) and wakes the core through a
//! [`Notify`]. The woken core still needs one of the runtime's workers: under a heavy client load
//! it can wait behind connection tasks for a while (a loaded core mostly notices the deadline
//! itself, as its loop reads the clock every turn).

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::Notify;

/// A timer thread and the deadline it waits for.
pub(crate) struct DeadlineTimer {
    shared: Arc<Shared>,
    /// The deadline last handed to the thread, so that an unchanged one costs no lock.
    armed: Option<Instant>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    expired: Notify,
}

#[derive(Default)]
struct State {
    deadline: Option<Instant>,
    stop: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is two plain fields, valid whatever a panicking holder left half done.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl DeadlineTimer {
    pub(crate) fn start() -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            expired: Notify::new(),
        });
        let thread = std::thread::Builder::new()
            .name("cloak-deadlines".into())
            .spawn({
                let shared = shared.clone();
                move || wait_for_deadlines(&shared)
            })?;
        Ok(Self {
            shared,
            armed: None,
            thread: Some(thread),
        })
    }

    /// Waits for `deadline` from now on (`None`: for nothing).
    pub(crate) fn arm(&mut self, deadline: Option<Instant>) {
        if self.armed == deadline {
            return;
        }
        self.armed = deadline;
        self.shared.lock().deadline = deadline;
        self.shared.changed.notify_one();
    }

    /// Completes once the armed deadline has passed (at once if it passed since the last wait).
    pub(crate) async fn expired(&self) {
        self.shared.expired.notified().await;
    }
}

impl Drop for DeadlineTimer {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn wait_for_deadlines(shared: &Shared) {
    let mut state = shared.lock();
    while !state.stop {
        state = match state.deadline {
            None => shared
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner),
            Some(at) => {
                let now = Instant::now();
                if at <= now {
                    state.deadline = None;
                    // Stores a permit if the core is busy rather than waiting: it then finds
                    // the deadline passed on its next wait and handles it.
                    shared.expired.notify_one();
                    continue;
                }
                shared
                    .changed
                    .wait_timeout(state, at - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn wakes_at_the_deadline_not_at_the_next_millisecond() {
        let mut timer = DeadlineTimer::start().unwrap();
        let mut late = Vec::new();
        for _ in 0..20 {
            let at = Instant::now() + Duration::from_micros(2_300);
            timer.arm(Some(at));
            timer.expired().await;
            let now = Instant::now();
            assert!(now >= at, "woke {:?} early", at - now);
            late.push(now - at);
        }
        late.sort();
        // tokio's millisecond timer is late by 0.7 ms on average for this deadline; this one by
        // tens of microseconds. The median leaves room for a busy test machine.
        assert!(
            late[late.len() / 2] < Duration::from_micros(500),
            "median lateness {:?}",
            late[late.len() / 2]
        );
    }

    #[tokio::test]
    async fn a_moved_deadline_is_the_one_waited_for() {
        let mut timer = DeadlineTimer::start().unwrap();
        let start = Instant::now();
        timer.arm(Some(start + Duration::from_secs(60)));
        timer.arm(Some(start + Duration::from_millis(5)));
        timer.expired().await;
        assert!(start.elapsed() < Duration::from_secs(30));
    }
}
