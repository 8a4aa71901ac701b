//! The process's worker threads: [`on_every_core`] maps a slice on every core, the results in
//! order.
//!
//! A Cloak batch opens and seals a few thousand independent elements every few milliseconds. The
//! threads that share that work are started once, when the first call needs them, and wait
//! between calls parked on a condition variable (a futex wait: no CPU while idle). Two designs
//! came before, each refused for what it cost:
//!
//! - rayon's pool: its idle workers spin looking for work, and at one batch every 5 ms that
//!   spinning took a fifth of the proxy's samples, CPU the clients and the storage server
//!   needed on a small machine;
//! - scoped threads started per call: a thread start per share, and each new thread got its own
//!   allocator heap, whose pages lingered after it exited (about 3,900 threads over a 75 s
//!   bench; pinned to one core, with no such threads, the proxy's RSS was 18 bytes a key lower
//!   at a million keys).

use std::cell::Cell;
use std::collections::VecDeque;
use std::num::NonZeroUsize;
use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::{self, JoinHandle};

/// Fewest items a share of [`on_every_core`] holds: opening or sealing an element takes about a
/// microsecond (1 KiB values), and handing a share to a parked worker some microseconds to
/// tens of them on a loaded machine, so a smaller share costs more than it saves.
pub(crate) const PER_THREAD: usize = 128;

/// `f` of every item, in order, spread over the machine's cores: the calling thread takes the
/// first share and the process's [`Pool`] the others. A panic in any share is resumed on the
/// caller once every share is over, the caller's own first, then the others' in order.
pub(crate) fn on_every_core<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    // A call too small to share starts no pool: a process that never has a batch to split (the
    // unsafe baseline, most tests) never has idle workers either.
    if items.len() < 2 * PER_THREAD {
        return items.iter().map(f).collect();
    }
    pool().map(items, f)
}

/// [`on_every_core`] for an `f` that changes its item: what opens a batch's elements in their
/// own buffers takes each one out of its slot.
pub(crate) fn on_every_core_mut<T: Send, R: Send>(
    items: &mut [T],
    f: impl Fn(&mut T) -> R + Sync,
) -> Vec<R> {
    if items.len() < 2 * PER_THREAD {
        return items.iter_mut().map(f).collect();
    }
    pool().map_mut(items, f)
}

/// `f(part, parts)` of every part `0..parts`, one part a core (the caller's the first), for
/// `items` items' worth of work split by what the items hold rather than where they sit: work
/// whose every part reads all the items and keeps those of its own (recovery's stale copies,
/// parted by key hash so that the copies of one key meet in one part). Work of fewer items
/// than two shares' worth is one part, on the caller, and starts no pool.
pub(crate) fn in_parts_on_every_core<R: Send>(
    items: usize,
    f: impl Fn(usize, usize) -> R + Sync,
) -> Vec<R> {
    if items < 2 * PER_THREAD || IS_WORKER.get() {
        return vec![f(0, 1)];
    }
    pool().parts(f)
}

/// The process's pool, started by the first call that shares its items.
fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let cores = thread::available_parallelism().map_or(1, NonZeroUsize::get);
        Pool::new(cores - 1)
    })
}

/// A job as the workers see it: its borrows were erased by [`Pool::map`], which outlives it.
type Job = Box<dyn FnOnce() + Send + 'static>;

/// Worker threads parked until a job comes (see the module docs).
pub(crate) struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Signalled once per job queued, and to all when the pool closes.
    wake: Condvar,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    closing: bool,
}

thread_local! {
    /// Whether this thread is one of a pool's workers: a share that itself calls
    /// [`Pool::map`] runs it in place, since waiting on jobs queued behind its own could
    /// deadlock a pool whose workers all wait.
    static IS_WORKER: Cell<bool> = const { Cell::new(false) };
}

impl Pool {
    /// A pool of `workers` threads (fewer if the system refuses to start some: the shares are
    /// then fewer, not stuck).
    pub(crate) fn new(workers: usize) -> Self {
        let shared = Arc::new(Shared {
            queue: Mutex::default(),
            wake: Condvar::new(),
        });
        let workers = (0..workers)
            .map_while(|i| {
                let shared = Arc::clone(&shared);
                thread::Builder::new()
                    .name(format!("cloak-worker-{i}"))
                    .spawn(move || work(&shared))
                    .inspect_err(|error| {
                        tracing::warn!(%error, "could not start a worker thread; fewer share the batches");
                    })
                    .ok()
            })
            .collect();
        Self { shared, workers }
    }

    /// `f` of every item, in order: the caller maps the first share, each worker another (see
    /// [`on_every_core`]).
    pub(crate) fn map<T: Sync, R: Send>(&self, items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
        let share = self.share(items.len());
        self.map_shares(items.chunks(share), |share| share.iter().map(&f).collect())
    }

    /// [`Pool::map`] for an `f` that changes its item (see [`on_every_core_mut`]).
    pub(crate) fn map_mut<T: Send, R: Send>(
        &self,
        items: &mut [T],
        f: impl Fn(&mut T) -> R + Sync,
    ) -> Vec<R> {
        let share = self.share(items.len());
        self.map_shares(items.chunks_mut(share), |share| {
            share.iter_mut().map(&f).collect()
        })
    }

    /// [`in_parts_on_every_core`]: as many parts as the pool has threads, the caller's one.
    fn parts<R: Send>(&self, f: impl Fn(usize, usize) -> R + Sync) -> Vec<R> {
        let parts = self.workers.len() + 1;
        self.map_shares(0..parts, |part| vec![f(part, parts)])
    }

    /// How many items one share of `len` holds: at least [`PER_THREAD`], the whole call on a
    /// worker's own thread (see `IS_WORKER`).
    fn share(&self, len: usize) -> usize {
        let threads = (self.workers.len() + 1).min(len / PER_THREAD).max(1);
        if IS_WORKER.get() {
            return len.max(1);
        }
        len.div_ceil(threads).max(1)
    }

    /// `f` of every share, the caller's the first, the workers' the others, their results
    /// concatenated in order.
    fn map_shares<S: Send, R: Send>(
        &self,
        shares: impl Iterator<Item = S>,
        f: impl Fn(S) -> Vec<R> + Sync,
    ) -> Vec<R> {
        let mut shares = shares;
        let Some(first) = shares.next() else {
            return Vec::new();
        };
        let f = &f;
        let results = Results::default();
        let jobs: Vec<Job> = shares
            .enumerate()
            .map(|(index, share)| {
                let done = results.sender();
                let job = move || {
                    let out = panic::catch_unwind(AssertUnwindSafe(|| f(share)));
                    // The caller is still waiting: it waits for this job's sender to go.
                    let _ = done.send((index, out));
                };
                let job: Box<dyn FnOnce() + Send + '_> = Box::new(job);
                // SAFETY: the job borrows the items (through its share) and `f`, which live
                // until this call returns or unwinds; `results` is dropped before either (it is
                // declared after them) and its drop waits until every job's sender has gone,
                // that is until every job has run (or was dropped unrun). So no job outlives
                // what it borrows.
                unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Job>(job) }
            })
            .collect();
        // `chunks` of `share` can make fewer than `threads` shares (16,641 items over 130
        // threads make 129), so the caller waits for the jobs there are, not for `threads - 1`.
        let others = jobs.len();
        if others > 0 {
            self.submit(jobs);
        }
        let mine = panic::catch_unwind(AssertUnwindSafe(|| f(first)));
        let others = results.wait(others);
        let mut out: Vec<R> = mine.unwrap_or_else(|panic| panic::resume_unwind(panic));
        for other in others {
            match other {
                Some(Ok(results)) => out.extend(results),
                Some(Err(panic)) => panic::resume_unwind(panic),
                None => unreachable!("every job sends its share's results before it ends"),
            }
        }
        out
    }

    fn submit(&self, jobs: Vec<Job>) {
        let count = jobs.len();
        lock(&self.shared.queue).jobs.extend(jobs);
        for _ in 0..count {
            self.shared.wake.notify_one();
        }
    }

    /// The pool's threads, for the tests.
    #[cfg(test)]
    fn threads(&self) -> Vec<thread::ThreadId> {
        self.workers.iter().map(|w| w.thread().id()).collect()
    }
}

impl Drop for Pool {
    /// Lets the workers finish the jobs queued, then stops them (the process's pool is never
    /// dropped; the tests' are).
    fn drop(&mut self) {
        lock(&self.shared.queue).closing = true;
        self.shared.wake.notify_all();
        for worker in self.workers.drain(..) {
            // A worker catches every job's panic, so it cannot have panicked itself.
            let _ = worker.join();
        }
    }
}

/// A worker: runs jobs as they come, parked while there are none.
fn work(shared: &Shared) {
    IS_WORKER.set(true);
    loop {
        let job = {
            let mut queue = lock(&shared.queue);
            loop {
                if let Some(job) = queue.jobs.pop_front() {
                    break job;
                }
                if queue.closing {
                    return;
                }
                queue = shared
                    .wake
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        job();
    }
}

/// The queue's lock. No code panics while holding it (jobs run outside it), so a poisoned lock
/// still holds a consistent queue.
fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What one share of a [`Pool::map`] call gives: its results, or its panic.
type ShareResult<R> = thread::Result<Vec<R>>;

/// The shares' results of one [`Pool::map`] call, by share index. Dropping it, however the call
/// ends, waits for every job holding one of its senders to end (see the safety note there).
struct Results<R> {
    sender: Option<Sender<(usize, ShareResult<R>)>>,
    receiver: Receiver<(usize, ShareResult<R>)>,
}

impl<R> Default for Results<R> {
    fn default() -> Self {
        let (sender, receiver) = mpsc::channel();
        Self {
            sender: Some(sender),
            receiver,
        }
    }
}

impl<R> Results<R> {
    /// A sender for one job.
    fn sender(&self) -> Sender<(usize, ShareResult<R>)> {
        match &self.sender {
            Some(sender) => sender.clone(),
            None => unreachable!("senders are handed out before the wait"),
        }
    }

    /// Waits for every job to end, and gives each of the `shares` shares' results by index.
    fn wait(mut self, shares: usize) -> Vec<Option<ShareResult<R>>> {
        let mut by_share: Vec<Option<ShareResult<R>>> = (0..shares).map(|_| None).collect();
        self.sender = None;
        for (index, result) in self.receiver.iter() {
            by_share[index] = Some(result);
        }
        by_share
    }
}

impl<R> Drop for Results<R> {
    fn drop(&mut self) {
        self.sender = None;
        // Ends once every sender is gone, whether or not its results were taken.
        for _ in self.receiver.iter() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_in_order_from_every_share() {
        let pool = Pool::new(3);
        let items: Vec<u64> = (0..10 * PER_THREAD as u64 + 5).collect();
        let doubled = pool.map(&items, |&i| i * 2);
        assert_eq!(doubled, items.iter().map(|i| i * 2).collect::<Vec<_>>());
    }

    /// Every part runs once and knows how many there are; a call too small to share is one
    /// part.
    #[test]
    fn work_in_parts_runs_each_part_once() {
        let pool = Pool::new(3);
        assert_eq!(
            pool.parts(|part, parts| (part, parts)),
            [(0, 4), (1, 4), (2, 4), (3, 4)]
        );
        assert_eq!(
            in_parts_on_every_core(10, |part, parts| (part, parts)),
            [(0, 1)]
        );
    }

    /// Each item is changed once, by whichever thread maps its share, and the results still
    /// come in order.
    #[test]
    fn items_changed_in_place_come_back_in_order() {
        let pool = Pool::new(3);
        let mut items: Vec<u64> = (0..10 * PER_THREAD as u64 + 5).collect();
        let before = items.clone();
        let old = pool.map_mut(&mut items, |i| std::mem::replace(i, *i * 3));
        assert_eq!(old, before);
        assert_eq!(items, before.iter().map(|i| i * 3).collect::<Vec<_>>());
    }

    /// Every share runs on the caller or on one of the pool's own threads, the same ones call
    /// after call: no thread is started per call. (Which worker takes a job is whichever wakes
    /// first: one may take them all.)
    #[test]
    fn calls_share_the_work_among_the_same_threads() {
        let pool = Pool::new(3);
        let items = vec![(); 4 * PER_THREAD];
        let caller = thread::current().id();
        let mut ran_on = std::collections::HashSet::new();
        for _ in 0..20 {
            ran_on.extend(pool.map(&items, |_| thread::current().id()));
        }
        let workers: std::collections::HashSet<_> = pool.threads().into_iter().collect();
        assert!(ran_on.contains(&caller), "the caller maps the first share");
        ran_on.remove(&caller);
        assert!(!ran_on.is_empty(), "the workers map the others");
        assert!(
            ran_on.is_subset(&workers),
            "shares ran on threads outside the pool: {ran_on:?}, pool {workers:?}"
        );
    }

    #[test]
    fn a_panic_in_any_share_reaches_the_caller_and_the_pool_still_serves() {
        let pool = Pool::new(2);
        let items: Vec<usize> = (0..3 * PER_THREAD).collect();
        for panics_at in [0, items.len() - 1] {
            let caught = panic::catch_unwind(AssertUnwindSafe(|| {
                pool.map(&items, |&i| {
                    assert!(i != panics_at, "item {i} panics");
                    i
                })
            }));
            let payload = caught.expect_err("the panic propagates");
            let message = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .unwrap_or_default();
            assert_eq!(message, format!("item {panics_at} panics"));
        }
        assert_eq!(pool.map(&items, |&i| i), items, "the workers survived");
    }

    #[test]
    fn a_share_that_maps_again_runs_that_in_place() {
        let pool = Pool::new(1);
        let items: Vec<usize> = (0..2 * PER_THREAD).collect();
        let sums = pool.map(&items, |&i| {
            pool.map(&items, |&j| i + j).iter().sum::<usize>()
        });
        let n = items.len();
        let expected: Vec<usize> = (0..n).map(|i| i * n + n * (n - 1) / 2).collect();
        assert_eq!(sums, expected);
    }

    /// An idle worker is parked: over a second without jobs it takes no CPU time. (A worker
    /// that spun or yielded while waiting, as rayon's do, takes much of a core, even with the
    /// other tests' threads running beside it.)
    #[cfg(target_os = "linux")]
    #[test]
    fn idle_workers_take_no_cpu() {
        let pool = Pool::new(1);
        let items = vec![(); 2 * PER_THREAD];
        // The worker's own task in /proc, as it names itself.
        let tasks = pool.map(&items, |_| std::fs::read_link("/proc/thread-self").ok());
        let worker = tasks
            .into_iter()
            .flatten()
            .find(|task| *task != std::fs::read_link("/proc/thread-self").unwrap())
            .expect("the second share ran on the worker");
        // Nanoseconds the worker has run, the first field of its schedstat.
        let cpu_ns = || {
            let schedstat = std::fs::read_to_string(
                std::path::Path::new("/proc")
                    .join(&worker)
                    .join("schedstat"),
            )
            .unwrap();
            schedstat.split(' ').next().unwrap().parse::<u64>().unwrap()
        };
        let before = cpu_ns();
        thread::sleep(std::time::Duration::from_secs(1));
        let idle_ms = (cpu_ns() - before) / 1_000_000;
        // A parked worker runs for microseconds at most (the end of its last job, had it been
        // preempted there): 20 ms is far above that and far below a spinning worker's share.
        assert!(
            idle_ms <= 20,
            "an idle worker ran for {idle_ms} ms of a second"
        );
    }
}
