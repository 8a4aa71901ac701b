//! The requests written on a pipelined connection and not answered yet, shared by whoever
//! writes them and the task that reads the answers (the Redis pipe and the `cloak server`
//! client). Answers come in the order requests were sent, so the oldest waiting request gets
//! the next answer. Once the connection fails, the requests still waiting are handed back to
//! be failed, and no new one is taken: a request is never left waiting on a dead connection.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

/// Requests waiting on one connection, oldest first; `Err` (saying why) once it is dead.
pub(crate) struct Waiting<T>(Arc<Mutex<Result<VecDeque<T>, String>>>);

impl<T> Clone for Waiting<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T> Waiting<T> {
    /// A live connection's queue, empty.
    pub fn new() -> Self {
        Self(Arc::new(Mutex::new(Ok(VecDeque::new()))))
    }

    fn lock(&self) -> MutexGuard<'_, Result<VecDeque<T>, String>> {
        // A panic elsewhere while holding the lock leaves the queue whole: go on using it.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the connection is still alive.
    pub fn alive(&self) -> bool {
        self.lock().is_ok()
    }

    /// Whether `other` is this same queue (the same connection).
    pub fn is(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Adds a request about to be written; on a dead connection, hands it back with why.
    pub fn push(&self, request: T) -> Result<(), (T, String)> {
        match &mut *self.lock() {
            Ok(queue) => {
                queue.push_back(request);
                Ok(())
            }
            Err(why) => Err((request, why.clone())),
        }
    }

    /// What `look` says of the oldest waiting request (`None`: none waits); `Err` with why
    /// once the connection is dead.
    pub fn oldest<R>(&self, look: impl FnOnce(Option<&T>) -> R) -> Result<R, String> {
        match &*self.lock() {
            Ok(queue) => Ok(look(queue.front())),
            Err(why) => Err(why.clone()),
        }
    }

    /// Takes the oldest waiting request, the one the answer just read is for.
    pub fn pop(&self) -> Result<Option<T>, String> {
        match &mut *self.lock() {
            Ok(queue) => Ok(queue.pop_front()),
            Err(why) => Err(why.clone()),
        }
    }

    /// Marks the connection dead for `why` (the first reason given stays) and hands back the
    /// requests that were waiting, oldest first, for the caller to fail; none if it was dead
    /// already.
    pub fn fail(&self, why: &str) -> VecDeque<T> {
        let mut state = self.lock();
        match &*state {
            Ok(_) => std::mem::replace(&mut *state, Err(why.to_string())).unwrap_or_default(),
            Err(_) => VecDeque::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_leave_in_order_and_a_failed_queue_hands_them_back_once() {
        let waiting = Waiting::new();
        waiting.push(1).unwrap();
        waiting.push(2).unwrap();
        waiting.push(3).unwrap();
        assert_eq!(waiting.oldest(|r| r.copied()), Ok(Some(1)));
        assert_eq!(waiting.pop(), Ok(Some(1)));
        assert_eq!(waiting.fail("gone"), VecDeque::from([2, 3]));
        assert!(!waiting.alive());
        assert!(waiting.fail("again").is_empty(), "handed back once");
        assert_eq!(waiting.push(4), Err((4, "gone".to_string())));
        assert_eq!(waiting.pop(), Err("gone".to_string()));
        assert!(waiting.is(&waiting.clone()));
        assert!(!waiting.is(&Waiting::new()));
    }
}
