//! A new scheme instance's initial fill: every element of its storage written once, in chunks
//! with a few requests in flight, before its first batch (Cloak and Waffle answer reads
//! meanwhile from the recovered records, with no storage request). It writes everything
//! whatever the data, so it shows the server nothing but the store's size. A large store's fill takes
//! minutes, so it logs how far it got every few seconds ([`Progress`]); only the log sees that.
//!
//! **When each request leaves** ([`Pace`]). After a restart the fill carries the recovered
//! records, and the work of preparing a request (reading its records back from the spool,
//! copying them into elements) and the work between the scan and the fill (opening the scanned
//! elements, sorting the records, the key directory, reading every record back for the schemes
//! that load them) grow with how many live records there are. Had a request left as soon as it was prepared, the server would
//! read the key count off the pause after its scan and, request by request, off the gaps
//! between them (review finding 6: about half a microsecond a record remained after decoy
//! reads). So a restart's fill runs on a public clock ([`FillClock`]): its first request leaves
//! a fixed wait after the scan's last answer, and each one after a fixed interval after the one
//! before; a request is prepared ahead (the window of [`FILL_WINDOW`] requests holds prepared
//! ones too) and handed to the driver with its instant (`StorageRequest::not_before`), so how
//! long it took to prepare never shows. The wait and the interval are computed from public
//! quantities only: the store's slots and elements, the elements the scan read (the server's
//! count), the element size and the request's size, scaled by the operator's `--fill-pace`
//! (never from a measured cost, which would follow the records). What the server sees is then a function of those and of its own answers: a
//! request whose window is full waits for storage's answer, which the server caused, and then
//! leaves no earlier than two intervals after that answer ([`Pace::answered`]). Without that rule a
//! server that held its answers past the clock made every later request leave as soon as it was
//! prepared, and so showed how long each took to prepare (review finding M1).
//!
//! What remains: a request prepared after its instant (a host far slower than the defaults
//! assume, or an overloaded one: on this project's 2-core machine, a 10M-key fill sharing the
//! cores with the bench's clients and the storage server had 0–96 of 9,770 requests late, by
//! up to 14 ms) leaves late, on a later tick of the clock ([`Pace::send`]), and how many ticks
//! it slipped may follow its records or the proxy's load. Such requests are counted and logged
//! with the most one was late by when the fill ends, so the operator can raise `--fill-pace`.
//! The price is time: a sparse store's fill takes as long as a full one's.

use std::ops::Range;
use std::time::{Duration, Instant};

use cloak_core::recovery::Progress;
use cloak_core::recovery::pace::{time_for_elements, time_to_open, times};
use cloak_core::{Outbox, Slot, StorageOp};

use super::{Io, RequestPurpose};

/// Fill requests in flight at once: enough to keep storage busy, few enough that a large store's
/// fill does not queue megabytes at the driver.
pub const FILL_WINDOW: usize = 4;

/// What a fill writes, as its clock needs it: every field is public (the server sees the store's
/// size, every element's length and every request's).
#[derive(Clone, Copy, Debug)]
pub struct FillShape {
    /// Slots the store holds (recovery's and the new instance's work per record is bounded by
    /// them).
    pub slots: u64,
    /// Elements the fill writes.
    pub elements: u64,
    /// Bytes of each element.
    pub element_len: usize,
    /// Elements per fill request.
    pub request: u64,
    /// Elements of the spool each element written reads back (real or decoy): one, or a tree
    /// scheme's blocks a bucket, each of which may come from an element of its own (see
    /// `crate::shell::recovered::take_for_fill`). The interval gives the reads past the first
    /// the time recovery's opening does (the first is in the time per element written).
    pub reads_per_element: u64,
}

/// The default wait after the scan, per unit of a [`FillShape`], at `--fill-pace 1`, beside the
/// time for opening the scanned elements: chosen with slack over the work measured in the test
/// build (it covers 750 ms of work after a million-key scan with 2.2 s), so that a request is
/// rarely prepared after its instant. Each is a constant: what the pace must never be is a
/// measurement of the work at run time, which follows the records. The time for opening the
/// scanned elements and a request's interval are recovery's
/// ([`cloak_core::recovery::pace`]).
mod default_pace {
    use std::time::Duration;

    /// The wait after the scan, whatever the store.
    pub const WAIT: Duration = Duration::from_millis(100);
    /// The wait after the scan, per slot (sorting the records, the key directory).
    pub const WAIT_PER_SLOT: Duration = Duration::from_nanos(1_000);
    /// The wait after the scan, per byte of storage (the schemes that read every record back
    /// before their fill, the journal some of them write first).
    pub const WAIT_PER_BYTE: Duration = Duration::from_nanos(1);
}

/// The public clock a restart's fill runs on (see the module docs): counted from the instant
/// the proxy took recovery's last scan answer (the server sent it, and the proxy's work up to
/// then does not follow the records).
#[derive(Clone, Copy, Debug)]
pub struct FillClock {
    /// When the proxy took recovery's last scan answer.
    pub scanned: Instant,
    /// Elements that scan read (the server sent them): recovery opens them all after its last
    /// request, so the wait before the fill gives them time (see [`FillClock::first_request`]).
    pub scanned_elements: u64,
    /// `--fill-pace`: scales every wait and interval of the default pace (1 by default; larger
    /// is slower).
    pub scale: f64,
}

impl FillClock {
    /// The clock of a restart whose recovery took its last scan answer at `scanned`, after
    /// `scanned_elements` elements, at the default pace scaled by `scale`. `None` (each request
    /// leaves when prepared) only in a `leak-demo` build with
    /// `crate::LEAK_DEMO_UNPACED_FILL_ENV` set: the leak of review finding 6 that
    /// `crates/cloak/tests/fill_timing.rs` must catch.
    pub fn for_restart(scanned: Instant, scanned_elements: u64, scale: f64) -> Option<Self> {
        (!leak_demo_unpaced()).then_some(Self {
            scanned,
            scanned_elements,
            scale,
        })
    }

    /// The pace of a fill of `shape` that starts as soon as recovery is done: its first request
    /// leaves at [`FillClock::first_request`].
    pub fn pace(&self, shape: FillShape) -> Pace {
        self.pace_from(self.first_request(shape), shape)
    }

    /// The instant a fill's first request (or a scheme's first request after the scan, a scan of
    /// its own) leaves: a wait after the scan long enough for what recovery and the new instance
    /// do before it at the default pace, whatever the records (opening every scanned element,
    /// then the rest), plus the preparation of the requests the window prepares ahead.
    pub fn first_request(&self, shape: FillShape) -> Instant {
        let stored = shape.elements.saturating_mul(shape.element_len as u64);
        let rest = default_pace::WAIT
            + times(default_pace::WAIT_PER_SLOT, shape.slots)
            + times(default_pace::WAIT_PER_BYTE, stored);
        self.opened(shape.elements, shape.element_len)
            + rest.mul_f64(self.scale)
            + self.interval(shape) * FILL_WINDOW as u32
    }

    /// The instant the time for opening the scanned elements ends, on this clock: no request
    /// after the scan (the fill's first, the deletes of damaged elements) leaves before it. It
    /// counts the elements the scan read (the server's count, which it knows), and never fewer
    /// than `store_elements`, the store's own, of `element_len` bytes: a store the server holds
    /// only partly (a fresh one, a preload of live records only) then waits as long as a full
    /// one.
    pub fn opened(&self, store_elements: u64, element_len: usize) -> Instant {
        let opened = self.scanned_elements.max(store_elements);
        self.scanned + time_to_open(opened, element_len, self.scale)
    }

    /// The pace of a fill of `shape` whose requests are prepared from `now` on (a scheme that
    /// scans storage itself before filling it): the first leaves once the window's requests
    /// can be prepared.
    pub fn pace_after(&self, now: Instant, shape: FillShape) -> Pace {
        self.pace_from(now + self.interval(shape) * FILL_WINDOW as u32, shape)
    }

    /// Time between two fill requests of `shape`.
    fn interval(&self, shape: FillShape) -> Duration {
        let extra_reads = shape.request * shape.reads_per_element.saturating_sub(1);
        time_for_elements(shape.request, shape.element_len, self.scale)
            + time_to_open(extra_reads, shape.element_len, self.scale)
    }

    fn pace_from(&self, first: Instant, shape: FillShape) -> Pace {
        Pace {
            next: Some(first),
            interval: self.interval(shape),
            reads_per_element: shape.reads_per_element,
            sent: 0,
            late: 0,
            most_late: Duration::ZERO,
        }
    }
}

/// Whether a restart's fill goes without its clock (see [`FillClock::for_restart`]).
fn leak_demo_unpaced() -> bool {
    #[cfg(feature = "leak-demo")]
    {
        std::env::var_os(crate::LEAK_DEMO_UNPACED_FILL_ENV).is_some()
    }
    #[cfg(not(feature = "leak-demo"))]
    false
}

/// When each of a fill's requests leaves (see the module docs).
#[derive(Debug)]
pub struct Pace {
    /// The instant the next request leaves; `None` for a fill with nothing to hide (a new
    /// store's, or records handed over in memory by a test or tool): each leaves when prepared.
    next: Option<Instant>,
    interval: Duration,
    /// The fill's [`FillShape::reads_per_element`]: the interval gives a request time for
    /// that many spool reads an element, and [`Pace::reads`] tells the scheme to make them.
    reads_per_element: u64,
    sent: u64,
    /// Requests prepared after their instant, and the most one of them was late by.
    late: u64,
    most_late: Duration,
}

impl Pace {
    /// The pace of a fill of `shape` on `clock`, or one whose requests leave as soon as they
    /// are prepared without one.
    pub fn new(clock: Option<FillClock>, shape: FillShape) -> Self {
        match clock {
            Some(clock) => clock.pace(shape),
            None => Self {
                reads_per_element: shape.reads_per_element,
                ..Self::unpaced()
            },
        }
    }

    /// Every request leaves as soon as it is prepared.
    pub fn unpaced() -> Self {
        Self {
            next: None,
            interval: Duration::ZERO,
            reads_per_element: 1,
            sent: 0,
            late: 0,
            most_late: Duration::ZERO,
        }
    }

    /// The spool reads (real or decoy) a request writing `elements` elements makes: those its
    /// interval gives it time for. One number for both, so the reads a scheme makes and the
    /// time its clock allows cannot drift apart (a tree scheme used to compute each itself).
    pub fn reads(&self, elements: u64) -> usize {
        usize::try_from(elements.saturating_mul(self.reads_per_element)).unwrap_or(usize::MAX)
    }

    /// Hands `op`, the fill's next request, prepared now, to `io` with the instant it leaves.
    ///
    /// A request prepared after its instant leaves on the clock's next tick instead, a whole
    /// number of intervals later, and the requests after it keep to that: the server learns
    /// how many intervals it slipped, not how long it took to prepare to the microsecond (it
    /// used to leave as soon as prepared, and the ones after it too until the clock caught up).
    ///
    /// Not a power of two of intervals, which would tell the server only about how late a
    /// request was to within a factor of two: tried, a fill that overran its clock throughout
    /// (every read back slowed in the wire test) then jumped between slips of 2^k and 2^(k+1)
    /// intervals on the host's noise, and an empty Waffle store's requests came ×1.84 as far
    /// apart as a full one's (×1.00 with whole intervals).
    ///
    /// Reads the real clock, only for a request prepared too late: a paced fill runs only in a
    /// real proxy (a simulator's starts hand their records over without a clock).
    pub fn send<P: RequestPurpose>(&mut self, io: &mut Io<P>, purpose: P, op: StorageOp) {
        self.sent += 1;
        let Some(due) = self.next else {
            io.send(purpose, op);
            return;
        };
        let late_by = Instant::now().saturating_duration_since(due);
        let leaves = if late_by.is_zero() {
            due
        } else {
            self.late += 1;
            self.most_late = self.most_late.max(late_by);
            due + ticks_covering(late_by, self.interval)
        };
        self.next = Some(leaves + self.interval);
        io.send_at(leaves, purpose, op);
    }

    /// Storage's answer to a request arrived at `arrived`, which frees its place in the window:
    /// the request prepared in that place leaves no earlier than two intervals after it
    /// (`AFTER_AN_ANSWER`). While answers come on time this changes nothing (that request's
    /// instant is later already); an answer held back by the server moves the clock by the
    /// server's own delay, never by how long the next request took to prepare nor by how long
    /// the proxy, busy with clients, took to get to the answer (which is why this is the
    /// arrival, not the handling).
    pub fn answered(&mut self, arrived: Instant) {
        if let Some(next) = &mut self.next {
            *next = (*next).max(arrived + self.interval * AFTER_AN_ANSWER);
        }
    }

    /// Logs, once the fill is done, how many of its requests were prepared too late to leave on
    /// the clock (their timing may follow the records they carried).
    pub fn report(&self) {
        if self.late > 0 {
            tracing::warn!(
                late = self.late,
                most_late_us = self.most_late.as_micros() as u64,
                requests = self.sent,
                "fill requests were prepared after their instant on the fill's public clock and \
                left late: their timing may tell the storage server how many keys the store \
                holds; raise --fill-pace"
            );
        } else if self.next.is_some() {
            tracing::info!(requests = self.sent, "every fill request left on its clock");
        }
    }
}

/// Intervals the request prepared after a held answer gets before it leaves ([`Pace::answered`]):
/// it is prepared only once the answer frees its place in the window, and one interval, the
/// time budgeted for preparing a request, left it no slack, so a server that held every answer
/// made requests late, the channel the clock closes. Two leave that much again; while the
/// server answers within two intervals, the window's four keep the fill on its clock.
const AFTER_AN_ANSWER: u32 = 2;

/// The least whole number of `interval`s that is at least `late_by` (`late_by` itself without
/// an interval). Counted in nanoseconds: a count of ticks capped at `u32::MAX` fell short of
/// `late_by` for a tiny interval (`--fill-pace 0.01`, one-element requests) and an overrun of a
/// minute, and the request left before it was prepared.
fn ticks_covering(late_by: Duration, interval: Duration) -> Duration {
    let step = interval.as_nanos();
    if step == 0 {
        return late_by;
    }
    let covering = late_by.as_nanos().div_ceil(step) * step;
    Duration::from_nanos(u64::try_from(covering).unwrap_or(u64::MAX))
}

/// Where the fill is: which elements are written, and how many requests are unanswered.
pub struct Fill {
    elements: u64,
    chunk: u64,
    window: usize,
    next: u64,
    outstanding: usize,
    landed: Landed,
    pace: Pace,
}

/// How much of a fill is in storage, logged every few seconds ([`Progress`]).
pub struct Landed {
    elements: u64,
    landed: u64,
    progress: Progress,
}

impl Landed {
    /// None of `elements` in storage yet.
    pub fn new(elements: u64) -> Self {
        Self {
            elements,
            landed: 0,
            progress: Progress::every(Progress::INTERVAL),
        }
    }

    /// A request of `chunk` elements, or the last one, shorter, is in storage.
    pub fn chunk(&mut self, chunk: u64) {
        // Counted in whole chunks and capped at the total: the one short chunk may land before
        // others, so the count is off by less than a chunk until the fill ends.
        self.landed = (self.landed + chunk).min(self.elements);
        self.progress.filled(self.landed, self.elements);
    }

    /// Elements in storage, of all the fill writes.
    pub fn status(&self) -> (u64, u64) {
        (self.landed, self.elements)
    }
}

impl Fill {
    /// A fill of `elements`, `chunk` per request, at most [`FILL_WINDOW`] requests prepared or
    /// in flight, each leaving on `pace`.
    pub fn new(elements: u64, chunk: u64, pace: Pace) -> Self {
        Self::with_window(elements, chunk, FILL_WINDOW, pace)
    }

    /// The public shape of a fill of `elements` elements of `element_len` bytes for a store of
    /// `slots` slots, `chunk` per request (for [`FillClock::pace`]).
    pub fn shape(slots: u64, elements: u64, element_len: usize, chunk: u64) -> FillShape {
        FillShape {
            slots,
            elements,
            element_len,
            request: chunk.min(elements),
            reads_per_element: 1,
        }
    }

    fn with_window(elements: u64, chunk: u64, window: usize, pace: Pace) -> Self {
        Self {
            elements,
            chunk,
            window,
            next: 0,
            outstanding: 0,
            landed: Landed::new(elements),
            pace,
        }
    }

    /// Replaces the pace, before the first request (a scheme that scans storage itself paces
    /// its fill from the scan's end).
    pub fn set_pace(&mut self, pace: Pace) {
        debug_assert_eq!(self.next, 0, "the fill has not started");
        self.pace = pace;
    }

    /// Hands the request of the chunk [`Fill::next_chunk`] gave to `io`, to leave on the pace.
    pub fn send<P: RequestPurpose>(&mut self, io: &mut Io<P>, purpose: P, op: StorageOp) {
        self.pace.send(io, purpose, op);
    }

    /// The spool reads the request of `chunk` makes (see [`Pace::reads`]).
    pub fn reads(&self, chunk: &Range<u64>) -> usize {
        self.pace.reads(chunk.end - chunk.start)
    }

    /// The elements the next request writes, while the window has room.
    pub fn next_chunk(&mut self) -> Option<Range<u64>> {
        if self.outstanding >= self.window || self.next >= self.elements {
            return None;
        }
        let range = self.next..(self.next + self.chunk).min(self.elements);
        self.next = range.end;
        self.outstanding += 1;
        Some(range)
    }

    /// A fill request is in storage, its answer having arrived at `arrived`; the recovered
    /// records it carried, as (slot, version), no longer need the journal.
    pub fn written(&mut self, arrived: Instant, recovered: Vec<(u32, u64)>, out: &mut Outbox) {
        self.outstanding -= 1;
        self.pace.answered(arrived);
        self.landed.chunk(self.chunk);
        for (slot, version) in recovered {
            out.release(Slot::from(slot), version);
        }
        if self.is_done() {
            self.pace.report();
        }
    }

    /// While the fill runs: elements in storage, of all it writes.
    pub fn filling(&self) -> Option<(u64, u64)> {
        (!self.is_done()).then_some(self.landed.status())
    }

    /// Every element is in storage.
    pub fn is_done(&self) -> bool {
        self.next == self.elements && self.outstanding == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Write;
    impl RequestPurpose for Write {}

    /// The instants the requests `io` holds leave at.
    fn leaving(io: &mut Io<Write>) -> Vec<Option<Instant>> {
        std::iter::from_fn(|| io.poll())
            .map(|request| request.not_before)
            .collect()
    }

    #[test]
    fn a_clocked_fill_leaves_at_instants_from_its_shape_alone() {
        let scanned = Instant::now() + Duration::from_secs(3600);
        // 10 slots and elements of 100 bytes, 4 a request: a wait of 11 µs to open the ten
        // elements, then 100 ms + 10 µs + 1 µs, and
        // an interval of 4 × (2 µs + 300 ns).
        let shape = Fill::shape(10, 10, 100, 4);
        let interval = Duration::from_nanos(9_200);
        let first = scanned + Duration::from_micros(100_022) + interval * 4;
        for scale in [1.0, 2.0] {
            let clock = FillClock {
                scanned,
                scanned_elements: 0,
                scale,
            };
            assert_eq!(
                clock.first_request(shape),
                scanned
                    + Duration::from_micros(100_022).mul_f64(scale)
                    + interval.mul_f64(scale) * 4
            );
            // A thousand scanned elements of 100 bytes to open first: 1000 × (1 µs + 100 ns),
            // less the store's ten, which an empty scan is given too.
            let after_opening = FillClock {
                scanned_elements: 1000,
                ..clock
            };
            assert_eq!(
                after_opening.first_request(shape) - clock.first_request(shape),
                Duration::from_micros(1_089).mul_f64(scale)
            );
        }
        let mut pace = FillClock {
            scanned,
            scanned_elements: 0,
            scale: 1.0,
        }
        .pace(shape);
        let mut io = Io::default();
        for _ in 0..3 {
            pace.send(&mut io, Write, StorageOp::Write(Vec::new()));
        }
        assert_eq!(
            leaving(&mut io),
            [
                Some(first),
                Some(first + interval),
                Some(first + interval * 2)
            ]
        );
        assert_eq!(pace.late, 0);
    }

    #[test]
    fn a_late_request_is_counted_and_leaves_on_a_later_tick_and_an_unpaced_one_at_once() {
        let long_ago = Instant::now() - Duration::from_secs(10);
        let mut pace = FillClock {
            scanned: long_ago,
            scanned_elements: 0,
            scale: 1.0,
        }
        .pace(Fill::shape(10, 10, 100, 4));
        let mut io = Io::default();
        let (due, prepared) = (pace.next.expect("paced"), Instant::now());
        pace.send(&mut io, Write, StorageOp::Write(Vec::new()));
        assert_eq!(pace.late, 1);
        assert!(
            pace.most_late > Duration::from_secs(9),
            "how late is told: {:?}",
            pace.most_late
        );
        // It leaves on a tick of the clock, a whole number of intervals after its instant, and
        // the next is due a tick after it.
        let leaves = leaving(&mut io)[0].expect("paced");
        let slipped = (leaves - due).as_nanos();
        assert!(leaves >= prepared, "not before it was prepared");
        assert_eq!(slipped % pace.interval.as_nanos(), 0, "{slipped} ns");
        assert_eq!(pace.next, Some(leaves + pace.interval));
        let mut unpaced = Pace::unpaced();
        unpaced.send(&mut io, Write, StorageOp::Write(Vec::new()));
        assert_eq!(leaving(&mut io).last(), Some(&None));
        assert_eq!(unpaced.late, 0);
    }

    /// A tree scheme reads back several spool elements for each bucket it writes: its clock
    /// gives those reads recovery's opening time, on top of what every fill's element gets,
    /// and its pace tells it how many to make.
    #[test]
    fn a_fill_reading_several_elements_an_element_gets_their_time_too() {
        let clock = FillClock {
            scanned: Instant::now(),
            scanned_elements: 0,
            scale: 1.0,
        };
        let one = Fill::shape(1000, 1000, 4000, 100);
        let four = FillShape {
            reads_per_element: 4,
            ..one
        };
        assert_eq!(
            clock.interval(four),
            clock.interval(one) + time_to_open(300, 4000, 1.0)
        );
        // And the scheme is told to make exactly those reads, clock or none.
        assert_eq!(Pace::new(Some(clock), four).reads(100), 400);
        assert_eq!(Pace::new(None, four).reads(100), 400);
        assert_eq!(Pace::new(Some(clock), one).reads(100), 100);
    }

    #[test]
    fn ticks_cover_the_lateness_whatever_the_interval() {
        let interval = Duration::from_nanos(20);
        let late_by = Duration::from_secs(90);
        assert_eq!(
            ticks_covering(late_by, interval),
            late_by,
            "90 s is whole ticks"
        );
        let late_by = late_by + Duration::from_nanos(1);
        assert_eq!(
            ticks_covering(late_by, interval),
            late_by + Duration::from_nanos(19)
        );
        assert_eq!(ticks_covering(late_by, Duration::ZERO), late_by);
    }

    #[test]
    fn a_request_after_a_held_answer_leaves_two_intervals_after_it_whatever_its_preparation() {
        let scanned = Instant::now();
        let shape = Fill::shape(10, 10, 100, 4);
        let interval = Duration::from_nanos(9_200);
        let mut pace = FillClock {
            scanned,
            scanned_elements: 0,
            scale: 1.0,
        }
        .pace(shape);
        let first = FillClock {
            scanned,
            scanned_elements: 0,
            scale: 1.0,
        }
        .first_request(shape);
        let mut io = Io::default();
        pace.send(&mut io, Write, StorageOp::Write(Vec::new()));
        pace.send(&mut io, Write, StorageOp::Write(Vec::new()));
        // An answer on time, two intervals before the next request's instant: it keeps its
        // place on the clock.
        pace.answered(first);
        pace.send(&mut io, Write, StorageOp::Write(Vec::new()));
        // An answer the server held an hour: the next request leaves two intervals after it,
        // not whenever it happens to be prepared.
        let held = first + Duration::from_secs(3600);
        pace.answered(held);
        pace.send(&mut io, Write, StorageOp::Write(Vec::new()));
        pace.send(&mut io, Write, StorageOp::Write(Vec::new()));
        assert_eq!(
            leaving(&mut io),
            [
                Some(first),
                Some(first + interval),
                Some(first + interval * 2),
                Some(held + interval * 2),
                Some(held + interval * 3)
            ]
        );
    }

    #[test]
    fn chunks_cover_everything_within_the_window() {
        let mut fill = Fill::with_window(10, 4, 2, Pace::unpaced());
        assert_eq!(fill.next_chunk(), Some(0..4));
        assert_eq!(fill.next_chunk(), Some(4..8));
        assert_eq!(fill.next_chunk(), None, "window full");
        assert_eq!(fill.filling(), Some((0, 10)));
        let mut out = Outbox::default();
        let now = Instant::now();
        fill.written(now, vec![(3, 7)], &mut out);
        assert_eq!(fill.filling(), Some((4, 10)), "a chunk landed");
        assert_eq!(fill.next_chunk(), Some(8..10));
        fill.written(now, Vec::new(), &mut out);
        assert!(!fill.is_done());
        fill.written(now, Vec::new(), &mut out);
        assert!(fill.is_done() && fill.next_chunk().is_none());
        assert_eq!(fill.filling(), None, "done");
        assert!(
            out.poll_journal().is_some(),
            "the recovered record is released"
        );
    }
}
