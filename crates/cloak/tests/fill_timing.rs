//! What the storage server sees of a restart's fill, and when: neither the pause after the
//! scan nor the pace of the fill's write requests may follow how many live records the store
//! holds (review finding 6).
//!
//! A restart spools the records it recovers to local disk, sorts them, rebuilds the key
//! directory and starts a new scheme instance, whose fill reads the records back as it writes
//! each request. All of that costs time per live record. Two defences: every fill request reads
//! back as many elements whatever it carries (decoys, `cloak_core::recovery`'s records module),
//! and the fill runs on a public clock (`cloak_schemes::shell::fill`): its first request leaves
//! a fixed wait after the scan's last request, each next one a fixed interval later, however
//! long their preparation took.
//!
//! Each test preloads a store (its sealed elements and marker, as the proxy writes them) into a
//! `cloak server` running in this process over an observing backend, which records every
//! request with the time the server got it; then starts the real `cloak proxy` on it, which
//! recovers the store and fills it anew, and compares an empty store with a full one.
//!
//! - *The clock* (`*_fill_clock_hides_the_live_records`, every scheme with a fill): the proxy
//!   runs with `CLOAK_LEAK_DEMO_SLOW_LIVE_RECORD_US`, so the work per live record, after the
//!   scan and in every fill request's preparation, takes far longer than a loaded host's noise.
//!   With the clock, the pause after the scan and the mean gap between fill requests are the
//!   same for both stores; the same comparison catches the fill without it
//!   (`CLOAK_LEAK_DEMO_UNPACED_FILL`, each request sent as soon as it is prepared).
//! - *The decoys* (`*_fill_pace_does_not_follow_live_records`): with
//!   `CLOAK_LEAK_DEMO_SLOW_READ_BACK_US` every element read back takes so long that the fill
//!   overruns its clock and requests leave on the tick after they are prepared: the decoys
//!   keep their pace the same, and the comparison catches the fill that read back live records only
//!   (`CLOAK_LEAK_DEMO_LIVE_READ_BACK`). A tree scheme's request reads back as many elements
//!   as its buckets hold blocks, and its decoys neither read the elements a hostile server
//!   added nor cost less or more than a record's, whatever its length
//!   (`*_fill_reads_do_not_follow_live_records`, with every read made slow in proportion to
//!   the bytes it reads; the same comparison catches the first decoys, drawn from any element
//!   and each read at its own length, `CLOAK_LEAK_DEMO_UNEVEN_DECOYS`, and failed on two
//!   earlier fills).
//!
//! `the_fill_pace_by_live_records_measured` (ignored; `--nocapture`) measures without the
//! amplifiers, for every scheme with a fill, and prints the numbers the README quotes.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use cloak_audit::distinguish::percentiles;
use cloak_core::recovery::leak_demo::{
    LIVE_READ_BACK_ENV, OPENED_SCAN_ENV, SLOW_CLIENT_READ_ENV, SLOW_LIVE_RECORD_ENV,
    SLOW_READ_BACK_ENV, SLOW_READ_BACK_PER_KIB_ENV, SLOW_SCANNED_RECORD_ENV, UNEVEN_DECOYS_ENV,
};
use cloak_core::{
    AccessKind, Entry, Record, RecordLayout, STORE_MARKER, StorageError, StorageOp, StorageReply,
    Trace,
};
use cloak_crypto::{MasterKey, StoreId};
use cloak_schemes::shell::fill::FILL_WINDOW;
use cloak_schemes::{
    LEAK_DEMO_ANSWERS_HANDLED_ENV, LEAK_DEMO_UNPACED_FILL_ENV, SchemeName, SchemeOptions,
};
use cloak_storage::{MemoryStorage, Observing, Storage, TraceHandle, server};
use common::{Running, connect, free_port};
use rand::Rng;

const KEY_SIZE: usize = 16;

/// A `cloak server` in this process, over a backend that records what it receives (and holds
/// its answers to writes as long as `hold_writes` says, once set).
struct Server {
    addr: String,
    storage: Arc<dyn Storage>,
    trace: TraceHandle,
    hold_writes: Arc<AtomicU64>,
    runtime: tokio::runtime::Runtime,
}

/// Memory storage that answers a write only after the microseconds `hold_us` says: a server
/// that holds its answers past the fill's clock.
struct HoldingWrites {
    inner: MemoryStorage,
    hold_us: Arc<AtomicU64>,
}

#[async_trait::async_trait]
impl Storage for HoldingWrites {
    async fn call(&self, op: StorageOp) -> Result<StorageReply, StorageError> {
        let hold = Duration::from_micros(self.hold_us.load(Ordering::Relaxed));
        let holds = matches!(op, StorageOp::Write(_)) && !hold.is_zero();
        let reply = self.inner.call(op).await;
        if holds {
            tokio::time::sleep(hold).await;
        }
        reply
    }

    async fn fence(&self) -> Result<(), StorageError> {
        self.inner.fence().await
    }

    fn describe(&self) -> String {
        "memory, holding write answers".into()
    }
}

impl Server {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let hold_writes = Arc::new(AtomicU64::new(0));
        let (observing, trace) = Observing::new(HoldingWrites {
            inner: MemoryStorage::new(),
            hold_us: hold_writes.clone(),
        });
        let storage: Arc<dyn Storage> = Arc::new(observing);
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        runtime.spawn(server::serve(
            listener,
            storage.clone(),
            std::future::pending(),
        ));
        Self {
            addr,
            storage,
            trace,
            hold_writes,
            runtime,
        }
    }

    fn call(&self, op: StorageOp) {
        self.runtime.block_on(self.storage.call(op)).unwrap();
    }
}

/// Held while a restart runs (see [`Store::restart`]).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A store to restart: its scheme, size, and how many keys it holds (in slots `0..keys`).
#[derive(Clone, Copy)]
struct Store {
    scheme: SchemeName,
    capacity: u64,
    keys: u64,
    value_size: usize,
    /// Whether every slot without a key holds an element of an empty record, as a Cloak store
    /// does once filled (else only the keys' elements are preloaded).
    empty_elements: bool,
    /// Elements the server holds besides, of no record and as long as the scheme's longest (a
    /// tree scheme's bucket, while its preloaded elements seal one record each): a hostile
    /// server's, which once made a tree scheme's spool mix lengths and its fill stop reading
    /// decoys, and then were decoys themselves, dearer to read than a record's.
    odd_elements: u64,
}

/// Where a store's odd elements ([`Store::odd_elements`]) are: past any scheme's own.
const ODD_ADDRESSES: u128 = 1 << 40;

/// What the server saw of a restart's fill.
struct Fill {
    /// From recovery's last scan request to the next request (the fill's first, or a scan of
    /// the scheme's own).
    pause: Duration,
    /// Between one fill request and the next.
    gaps: Vec<Duration>,
    /// Live records each request carried (what the test knows, holding the key).
    live: Vec<usize>,
    /// From starting the proxy to its `INFO` saying the fill is done (to 20 ms): when it
    /// answers its first read.
    filled: Duration,
    /// Between one of recovery's scan requests and the next.
    scan_gaps: Vec<Duration>,
    /// Reads a client had answered while the fill ran ([`Under::read`]).
    reads: u64,
}

/// What a restart runs under besides its store.
#[derive(Clone, Copy, Default)]
struct Under {
    /// [`READERS`] clients read the store's keys as fast as the proxy answers, from the moment
    /// it listens until its fill is done or each has read `reads_each`.
    read: bool,
    /// Most reads each of those clients makes.
    reads_each: u64,
    /// How long the server holds each answer to a write of the proxy's (none before it starts).
    hold_writes: Duration,
}

/// Clients of [`Under::read`]: each has 32 reads out at a time.
const READERS: usize = 4;

/// Reads keys `key:0..keys` in random order, 32 at a time, as fast as the proxy on `port`
/// answers, while `filling` holds and fewer than `most` are read; checks every value and returns
/// how many were answered before `filling` ended.
fn read_while(filling: &AtomicBool, port: u16, keys: u64, most: u64) -> u64 {
    let mut client = connect(port);
    let mut rng = rand::rng();
    let mut reads = 0;
    while filling.load(Ordering::Relaxed) && reads < most {
        let mut pipe = redis::pipe();
        for _ in 0..32 {
            pipe.get(format!("key:{:012}", rng.random_range(0..keys)));
        }
        let values: Vec<Option<Vec<u8>>> = pipe.query(&mut client).unwrap();
        assert!(
            values.iter().all(Option::is_some),
            "a stored key read as missing"
        );
        // Counted only if answered during the fill: reads that waited for its end do not show
        // that reads are answered during it.
        if filling.load(Ordering::Relaxed) {
            reads += values.len() as u64;
        }
    }
    reads
}

impl Store {
    /// Preloads the store into a fresh server, starts `cloak` (`bin`) on it with `env` and the
    /// `--fill-pace` given, waits for the fill to end, and returns what the server saw of it.
    fn restart(self, bin: &str, env: &[(&str, &str)], fill_pace: &str) -> Fill {
        self.restart_under(bin, env, fill_pace, Under::default())
    }

    /// [`Store::restart`], under what `under` says.
    fn restart_under(self, bin: &str, env: &[(&str, &str)], fill_pace: &str, under: Under) -> Fill {
        // One restart at a time: the tests compare timings, and restarts running side by side
        // on a 2-core host would make each other late.
        let _alone = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let server = Server::start();
        let dir = tempfile::tempdir().unwrap();
        let master = MasterKey::from_bytes([7; 32]);
        let key_file = dir.path().join("key");
        common::write_private(&key_file, master.to_hex());
        let layout = RecordLayout {
            max_key: KEY_SIZE,
            max_value: self.value_size,
        };
        let store = StoreId::random().unwrap();
        let mut format =
            cloak_schemes::element_format(self.scheme, layout, &store.key(&master)).unwrap();
        let value = Entry::string(Bytes::from(vec![b'v'; self.value_size])).seal();
        let preloaded = if self.empty_elements {
            self.capacity
        } else {
            self.keys
        };
        let slots: Vec<u64> = (0..preloaded).collect();
        for chunk in slots.chunks(1024) {
            let elements = chunk
                .iter()
                .map(|&slot| {
                    let record = if slot < self.keys {
                        Record {
                            version: 1,
                            key: Bytes::from(format!("key:{slot:012}")),
                            value: value.clone(),
                        }
                    } else {
                        Record::empty()
                    };
                    (
                        u128::from(slot),
                        format.encode(u128::from(slot), slot, &record),
                    )
                })
                .collect();
            server.call(StorageOp::Write(elements));
        }
        let odd_len = SchemeOptions::default().largest_element(self.scheme, layout);
        let odd = Bytes::from(vec![0; odd_len]);
        let odd_addresses: Vec<u128> = (0..self.odd_elements)
            .map(|i| ODD_ADDRESSES + u128::from(i))
            .collect();
        for chunk in odd_addresses.chunks(1024) {
            let elements = chunk
                .iter()
                .map(|&address| (address, odd.clone()))
                .collect();
            server.call(StorageOp::Write(elements));
        }
        server.call(StorageOp::Write(vec![(
            STORE_MARKER,
            store.marker(&master).into(),
        )]));
        server.trace.take();
        let hold_us = under.hold_writes.as_micros() as u64;
        server.hold_writes.store(hold_us, Ordering::Relaxed);

        let port = free_port();
        let storage = format!("tcp://{}", server.addr);
        let listen = format!("127.0.0.1:{port}");
        let (capacity, value_size) = (self.capacity.to_string(), self.value_size.to_string());
        let args = [
            "proxy",
            "--scheme",
            self.scheme.as_str(),
            "--storage",
            &storage,
            "--listen",
            &listen,
            "--key-file",
            key_file.to_str().unwrap(),
            "--capacity",
            &capacity,
            "--key-size",
            "16",
            "--value-size",
            &value_size,
            "--fill-pace",
            fill_pace,
        ]
        .into_iter()
        // Odd elements are damage, which the proxy refuses to start on unless told.
        .chain((self.odd_elements > 0).then_some("--accept-data-loss"))
        .collect::<Vec<_>>();
        let spawned = std::time::Instant::now();
        let proxy = Running::start_bin_with_env(bin, &args, env, "listening");
        let mut client = connect(port);
        let filling = Arc::new(AtomicBool::new(true));
        let readers: Vec<_> = (0..if under.read { READERS } else { 0 })
            .map(|_| {
                let (filling, keys, most) = (filling.clone(), self.keys, under.reads_each);
                std::thread::spawn(move || read_while(&filling, port, keys, most))
            })
            .collect();
        common::wait_until_filled(&mut client, Duration::from_secs(120));
        let filled = spawned.elapsed();
        filling.store(false, Ordering::Relaxed);
        let reads = readers
            .into_iter()
            .map(|reader| reader.join().unwrap())
            .sum();
        assert!(proxy.stop().success());
        let mut fill = fill_of(&server.trace.take(), &mut format);
        fill.filled = filled;
        fill.reads = reads;
        fill
    }
}

/// The fill in `trace`: the writes after the last scan, up to the first other request; and the
/// pause after recovery's scan (the first run of scans; a scan that starts over from the first
/// address is the scheme's own).
fn fill_of(trace: &Trace, format: &mut cloak_core::ElementFormat) -> Fill {
    let first_scan = trace
        .iter()
        .position(|seen| seen.kind == AccessKind::Scan)
        .expect("a restart scans storage");
    let after_recovery = first_scan
        + 1
        + trace[first_scan + 1..]
            .iter()
            .position(|seen| seen.kind != AccessKind::Scan || seen.addrs.is_empty())
            .expect("requests after recovery's scan");
    let pause = trace[after_recovery].at - trace[after_recovery - 1].at;
    let last_scan = trace
        .iter()
        .rposition(|seen| seen.kind == AccessKind::Scan)
        .expect("a restart scans storage");
    let writes: Vec<_> = trace[last_scan + 1..]
        .iter()
        // The deletes of damaged elements come first, if any.
        .skip_while(|seen| seen.kind != AccessKind::Write)
        .take_while(|seen| seen.kind == AccessKind::Write)
        .collect();
    assert!(writes.len() > 2, "a fill of several requests");
    let live = writes
        .iter()
        .map(|write| {
            write
                .addrs
                .iter()
                .zip(&write.values)
                .map(
                    |(address, element)| match format.records(*address, element) {
                        Ok((_, records)) => records.iter().filter(|(_, r)| !r.is_empty()).count(),
                        Err(error) => panic!("a fill element that does not open: {error}"),
                    },
                )
                .sum()
        })
        .collect();
    Fill {
        filled: Duration::ZERO,
        pause,
        gaps: writes.windows(2).map(|w| w[1].at - w[0].at).collect(),
        live,
        scan_gaps: trace[first_scan..after_recovery]
            .windows(2)
            .map(|w| w[1].at - w[0].at)
            .collect(),
        reads: 0,
    }
}

/// The mean of `gaps` in microseconds (0 for none).
fn mean_micros(gaps: &[Duration]) -> i128 {
    gaps.iter().sum::<Duration>().as_micros() as i128 / gaps.len().max(1) as i128
}

fn micros(gaps: &[Duration]) -> impl Iterator<Item = u64> + '_ {
    gaps.iter().map(|gap| gap.as_micros() as u64)
}

/// How many times longer the median gap between fill requests of a full store is than an
/// empty one's (or the other way round) before the pace counts as following the live records.
/// With the amplifier, the fill that reads back live records only was measured at ×68 (Cloak)
/// and ×144 (Waffle) between the two medians; with decoys at ×1.36 and ×1.08, on a loaded host.
const APART: f64 = 3.0;

/// Whether the pace of `scheme`'s fill follows its live records: the median gap between fill
/// requests of an empty store and a full one (same capacity), with the amplifier and `env`.
fn pace_follows_live_records(scheme: SchemeName, env: &[(&str, &str)]) -> bool {
    let store = |keys| Store {
        scheme,
        capacity: 8192,
        keys,
        value_size: 64,
        empty_elements: false,
        odd_elements: 0,
    };
    let mut env = env.to_vec();
    env.push((SLOW_READ_BACK_ENV, "100"));
    let median = |fill: &Fill| percentiles(micros(&fill.gaps))[1].max(1) as f64;
    let empty = store(0).restart(common::CLOAK, &env, "1");
    let full = store(8192).restart(common::CLOAK, &env, "1");
    let (empty, full) = (median(&empty), median(&full));
    let ratio = (full / empty).max(empty / full);
    println!(
        "{scheme} {env:?}: median gap between fill requests {empty} µs empty, {full} µs full \
         (×{ratio:.2})"
    );
    ratio > APART
}

/// `scheme`'s fill pace does not follow its live records, and the same check catches the fill
/// that read back live records only.
fn assert_fill_pace_independent_of_live_records(scheme: SchemeName) {
    assert!(
        !pace_follows_live_records(scheme, &[]),
        "{scheme}'s fill pace follows how many live records each request carries"
    );
    assert!(
        pace_follows_live_records(scheme, &[(LIVE_READ_BACK_ENV, "1")]),
        "{scheme}: the leaky fill passed for one whose pace is independent of its records"
    );
}

#[test]
fn cloak_fill_pace_does_not_follow_live_records() {
    assert_fill_pace_independent_of_live_records(SchemeName::Cloak);
}

#[test]
fn waffle_fill_pace_does_not_follow_live_records() {
    assert_fill_pace_independent_of_live_records(SchemeName::Waffle);
}

/// Server-added elements in a tree scheme's store of 8,192 slots: few beside the full store's
/// records, and all the elements of the empty one, so the leaky fill's decoys read them in an
/// empty store and seldom in a full one.
const TREE_ODD_ELEMENTS: u64 = 64;

/// How many times as far apart a full tree store's fill requests come as an empty one's (or
/// the other way round), past the window prepared ahead, with `env`: both stores hold
/// [`TREE_ODD_ELEMENTS`] of a hostile server's, and every element read back from the spool is
/// made slow in proportion to its length, so the fill overruns its clock and each request
/// leaves on the tick after it is prepared.
fn tree_fill_gaps_full_against_empty(scheme: SchemeName, env: &[(&str, &str)]) -> f64 {
    let store = |keys| Store {
        scheme,
        capacity: 8192,
        keys,
        value_size: 2048,
        empty_elements: false,
        odd_elements: TREE_ODD_ELEMENTS,
    };
    let mut env = env.to_vec();
    env.push((SLOW_READ_BACK_PER_KIB_ENV, "50"));
    // Each gap past the window is the time the later request took to prepare, rounded up to
    // the clock's ticks.
    let mean_past_window = |fill: Fill| {
        let gaps = &fill.gaps[FILL_WINDOW.min(fill.gaps.len() - 1)..];
        mean_micros(gaps).max(1) as f64
    };
    let empty = mean_past_window(store(0).restart(common::CLOAK, &env, "1"));
    let full = mean_past_window(store(8000).restart(common::CLOAK, &env, "1"));
    let ratio = (full / empty).max(empty / full);
    println!(
        "{scheme} {env:?}: mean gap past the window {empty} µs empty, {full} µs full \
         (×{ratio:.2})"
    );
    ratio
}

/// How far apart [`tree_fill_gaps_full_against_empty`] may put the two stores' requests.
const TREE_APART: f64 = 1.4;

/// A tree scheme's fill request may carry more blocks than it has buckets, each from an
/// element of its own, and a store's spool may hold elements a hostile server added, as long as
/// a bucket. Past the window, a full store's fill requests must come as
/// far apart as an empty one's. What each earlier fill did, in this comparison:
///
/// - it read back one element a bucket, while a full store's leaf buckets carry about twice as
///   many blocks: ×1.75 (Path ORAM) and ×2.13 (CURIOUS), one odd element, fixed slowness;
/// - its spool of mixed lengths did not list its places, so the full store's fill found no
///   decoy: ×2.07 and ×2.25, as above;
/// - its decoys read any spooled element, the server's too, each at its own length, dearer
///   than a record's (`CLOAK_LEAK_DEMO_UNEVEN_DECOYS`, asserted here): an empty store's
///   requests, all decoys, read them far more often than a full one's. Either of the two
///   defences now in place closes that alone: decoys read only the store's own elements, and every read
///   costs what the longest element's does.
fn assert_tree_fill_reads_do_not_follow_live_records(scheme: SchemeName) {
    let ratio = tree_fill_gaps_full_against_empty(scheme, &[]);
    assert!(
        ratio < TREE_APART,
        "{scheme}: a full store's fill requests came ×{ratio:.2} as far apart as an empty one's"
    );
    let leaky = tree_fill_gaps_full_against_empty(scheme, &[(UNEVEN_DECOYS_ENV, "1")]);
    assert!(
        leaky >= TREE_APART,
        "{scheme}: the fill whose decoys read the server's elements passed (×{leaky:.2})"
    );
}

#[test]
fn path_oram_fill_reads_do_not_follow_live_records() {
    assert_tree_fill_reads_do_not_follow_live_records(SchemeName::PathOram);
}

#[test]
fn curious_fill_reads_do_not_follow_live_records() {
    assert_tree_fill_reads_do_not_follow_live_records(SchemeName::Curious);
}

/// Slots of the store the scan test restarts: sixteen of recovery's scan requests of 4096.
const SCAN_CAPACITY: u64 = 65536;

/// Microseconds each live record adds to opening its scanned chunk in the scan test: 20 ms a
/// full chunk, far above a loaded host's noise.
const SLOW_SCANNED_US: u64 = 5;

/// The mean gap between recovery's scan requests of an empty store and of a full one, with
/// the amplifier and `env`, in microseconds.
fn scan_gaps_empty_and_full(env: &[(&str, &str)]) -> (i128, i128) {
    let store = |keys| Store {
        scheme: SchemeName::Cloak,
        capacity: SCAN_CAPACITY,
        keys,
        value_size: 64,
        empty_elements: true,
        odd_elements: 0,
    };
    let slow = SLOW_SCANNED_US.to_string();
    let mut env = env.to_vec();
    env.push((SLOW_SCANNED_RECORD_ENV, &slow));
    // The amplified opening happens after the scan (a third of a second for the full store):
    // the fill's wait at 10 covers it many times over.
    let mean = |fill: &Fill| mean_micros(&fill.scan_gaps);
    let empty = mean(&store(0).restart(common::CLOAK, &env, "10"));
    let full = mean(&store(SCAN_CAPACITY).restart(common::CLOAK, &env, "10"));
    println!("recovery's scan {env:?}: mean gap between requests {empty} µs empty, {full} µs full");
    (empty, full)
}

/// Recovery's scan shows the server nothing of what its chunks hold (review finding M2): the
/// mean gap between its requests is the same for an empty store and a full one, although each
/// full chunk takes 20 ms longer to open (after the scan); and the same check catches the scan
/// that opened each chunk before its request after next.
#[test]
fn recoverys_scan_pace_does_not_follow_live_records() {
    let follows =
        |(empty, full): (i128, i128)| (full - empty).abs() > i128::from(4096 * SLOW_SCANNED_US) / 2;
    assert!(
        !follows(scan_gaps_empty_and_full(&[])),
        "the gaps between recovery's scan requests follow the live records"
    );
    assert!(
        follows(scan_gaps_empty_and_full(&[(OPENED_SCAN_ENV, "1")])),
        "the scan that opens each chunk as it goes passed for one that hides the live records"
    );
}

/// Slots of the stores the clock tests restart.
const CLOCK_CAPACITY: u64 = 8192;

/// How far apart an empty store's restart and a full one's were, as the server saw them.
struct Apart {
    /// The pause after the scan: full minus empty.
    pause: i128,
    /// The mean gap between fill requests (the fill's length over its requests): full minus
    /// empty. Not the median: without the clock, requests prepared while answers queue up leave
    /// together, so most gaps are near zero and the work shows in the few long ones.
    gap: i128,
    /// The amplifier's extra work for the full store after the scan (every record), and the
    /// share of the later requests' work (the median request's live records) that falls in each
    /// gap, in microseconds.
    pause_work: i128,
    gap_work: i128,
}

impl Apart {
    /// Whether the pause shows the amplified work: more than half of it. With the clock the
    /// two stores differ by an alarm's jitter (microseconds); without it, by all of the work,
    /// which is a sleep and cannot come out shorter.
    fn pause_follows(&self) -> bool {
        self.pause.abs() > self.pause_work / 2
    }

    /// Whether the gaps show the amplified work: more than half of what can show in them.
    /// Without the clock the first window of requests is prepared before the fill starts (its
    /// work is in the pause), so the gaps carry the work of the requests after it, spread over
    /// all gaps (`gap_work`); measured at 1.7–5 times this bound. With the clock the means differ
    /// by well under a millisecond (up to a few for Path ORAM's 8 MiB requests, which the server
    /// takes milliseconds to read).
    fn gap_follows(&self) -> bool {
        self.gap.abs() > self.gap_work / 2
    }
}

/// How a clock test restarts a scheme's stores.
#[derive(Clone, Copy)]
struct ClockTest {
    scheme: SchemeName,
    value_size: usize,
    /// Microseconds each live record's work is made to take (`SLOW_LIVE_RECORD_ENV`), against
    /// the 0.3–0.7 µs measured: enough that a full store's extra work (hundreds of milliseconds
    /// after the scan, tens in each fill request) stands far above a loaded host's noise and
    /// above the time storage takes to answer a fill request.
    slow_live_us: u64,
    /// `--fill-pace`: slow enough that a request's amplified preparation fits in its interval
    /// with room to spare (the default assumes an optimised build and no amplifier).
    fill_pace: &'static str,
}

/// Restarts an empty and a full store as `test` says, with `env`, and says how far apart their
/// timing was.
fn empty_and_full(test: ClockTest, env: &[(&str, &str)]) -> Apart {
    let ClockTest {
        scheme,
        value_size,
        slow_live_us,
        fill_pace,
    } = test;
    // Both stores hold an element for every slot, as every scheme's store does after its
    // first fill: the time before the fill given for opening the scanned elements follows
    // their count, which the server knows, and here only the records differ.
    let store = |keys| Store {
        scheme,
        capacity: CLOCK_CAPACITY,
        keys,
        value_size,
        empty_elements: true,
        odd_elements: 0,
    };
    let slow = slow_live_us.to_string();
    let mut env = env.to_vec();
    env.push((SLOW_LIVE_RECORD_ENV, &slow));
    let empty = store(0).restart(common::CLOAK, &env, fill_pace);
    let full = store(CLOCK_CAPACITY).restart(common::CLOAK, &env, fill_pace);
    let mean = |fill: &Fill| mean_micros(&fill.gaps);
    let mut live = full.live.clone();
    live.sort_unstable();
    let requests = full.live.len() as i128;
    let request_work = i128::from(live[live.len() / 2] as u64 * slow_live_us);
    let apart = Apart {
        pause: full.pause.as_micros() as i128 - empty.pause.as_micros() as i128,
        gap: mean(&full) - mean(&empty),
        pause_work: i128::from(CLOCK_CAPACITY * slow_live_us),
        gap_work: request_work * (requests - FILL_WINDOW as i128).max(0) / (requests - 1),
    };
    println!(
        "{scheme} {env:?} --fill-pace {fill_pace}: pause after the scan {} µs empty, {} µs full \
         (full store's extra work {} µs); mean gap between {} fill requests {} µs empty, {} µs \
         full (extra work {} µs a gap)",
        empty.pause.as_micros(),
        full.pause.as_micros(),
        apart.pause_work,
        full.gaps.len() + 1,
        mean(&empty),
        mean(&full),
        apart.gap_work,
    );
    apart
}

/// The restart `test` describes shows the server nothing of its live records, pause or pace,
/// and the same check catches the fill that sends each request as soon as it is prepared.
fn assert_fill_clock_hides_live_records(test: ClockTest) {
    let scheme = test.scheme;
    let clocked = empty_and_full(test, &[]);
    assert!(
        !clocked.pause_follows(),
        "{scheme}: the pause after the scan follows the live records"
    );
    assert!(
        !clocked.gap_follows(),
        "{scheme}: the gaps between fill requests follow the live records"
    );
    let unpaced = empty_and_full(test, &[(LEAK_DEMO_UNPACED_FILL_ENV, "1")]);
    assert!(
        unpaced.pause_follows() && unpaced.gap_follows(),
        "{scheme}: the fill without its clock passed for one that hides the live records"
    );
}

/// A clock test of `scheme` with 64-byte values: requests of 256 to 1024 elements.
fn small_values(scheme: SchemeName) -> ClockTest {
    ClockTest {
        scheme,
        value_size: 64,
        slow_live_us: 20,
        fill_pace: "30",
    }
}

#[test]
fn cloak_fill_clock_hides_the_live_records() {
    assert_fill_clock_hides_live_records(small_values(SchemeName::Cloak));
}

#[test]
fn waffle_fill_clock_hides_the_live_records() {
    assert_fill_clock_hides_live_records(small_values(SchemeName::Waffle));
}

#[test]
fn pancake_fill_clock_hides_the_live_records() {
    assert_fill_clock_hides_live_records(small_values(SchemeName::Pancake));
}

#[test]
fn curious_fill_clock_hides_the_live_records() {
    assert_fill_clock_hides_live_records(small_values(SchemeName::Curious));
}

/// Path ORAM's requests are 8 MiB of buckets: 2 KiB values make a fill of several of them. The
/// server takes milliseconds to read each (tens under load), so the amplifier is larger, and
/// their interval leaves room for it.
#[test]
fn path_oram_fill_clock_hides_the_live_records() {
    assert_fill_clock_hides_live_records(ClockTest {
        scheme: SchemeName::PathOram,
        value_size: 2048,
        slow_live_us: 100,
        fill_pace: "20",
    });
}

/// How a reads test restarts a full store.
#[derive(Clone, Copy)]
struct ReadsTest {
    scheme: SchemeName,
    capacity: u64,
    /// Bytes of each key's value.
    value_size: usize,
    /// Most reads each client makes (see [`Under`]).
    reads_each: u64,
    /// Microseconds each read answered from the recovered records is made to take longer.
    client_read_us: &'static str,
    /// Whether each element the fill reads back is made 20 µs longer too (about 70 µs with
    /// the sleep's granularity: 36 ms a request of 1024 on two cores).
    slow_read_back: bool,
    /// How long the server holds each answer to a fill write.
    hold_writes: Duration,
}

/// The mean gap between the fill requests of a full store's restart with no client and with
/// clients reading its keys throughout the fill (answered from the recovered records, with no
/// storage request), in microseconds, with `env`.
fn fill_gaps_idle_and_read(test: ReadsTest, env: &[(&str, &str)]) -> (i128, i128) {
    let scheme = test.scheme;
    let store = Store {
        scheme,
        capacity: test.capacity,
        keys: test.capacity,
        value_size: test.value_size,
        empty_elements: false,
        odd_elements: 0,
    };
    let mut env = env.to_vec();
    env.push((SLOW_CLIENT_READ_ENV, test.client_read_us));
    if test.slow_read_back {
        env.push((SLOW_READ_BACK_ENV, "20"));
    }
    let mean = |fill: &Fill| mean_micros(&fill.gaps);
    let under = |read| Under {
        read,
        reads_each: test.reads_each,
        hold_writes: test.hold_writes,
    };
    let idle = store.restart_under(common::CLOAK, &env, "30", under(false));
    let read = store.restart_under(common::CLOAK, &env, "30", under(true));
    assert!(
        read.reads > 0,
        "{scheme}: no read was answered during the fill"
    );
    println!(
        "{scheme} {env:?}, write answers held {:?}: mean gap between {} fill requests {} µs \
         idle, {} µs with {} reads answered during the fill; pause after the scan {} µs idle, \
         {} µs read",
        test.hold_writes,
        idle.gaps.len() + 1,
        mean(&idle),
        mean(&read),
        read.reads,
        idle.pause.as_micros(),
        read.pause.as_micros(),
    );
    (mean(&idle), mean(&read))
}

/// How far apart the mean gaps between fill requests may be, idle and read, before the reads
/// count as moving the fill: where reads do not move it they were measured 1-155 µs apart
/// (155 with the server holding its answers), where they do 7.6-39.7 ms apart.
const READS_MOVE_THE_FILL_US: i128 = 1000;

fn reads_move_the_fill((idle, read): (i128, i128)) -> bool {
    (read - idle).abs() > READS_MOVE_THE_FILL_US
}

/// What [`assert_reads_during_the_fill_do_not_move_it`] runs: the store's values, how many reads
/// its clients make, and how slow each read is made to overrun the fill's clock.
struct ReadsDuringTheFill {
    /// Bytes of each value: a tree scheme's fill writes 8 MiB of buckets a request, so its
    /// store of [`CLOCK_CAPACITY`] keys takes 2 KiB values to make a fill of many requests.
    value_size: usize,
    /// Most reads each client makes: a scheme that queues an access for every op answered
    /// during the fill takes no more ops once its queue is full (Path ORAM's holds 1,024 ops,
    /// Pancake's 10,000), and the clients would then wait for the fill, past their timeout where
    /// its intervals are long.
    reads_each: u64,
    /// Microseconds each read is made to take in the run that must be caught: more than the
    /// fill's window of intervals over the reads in flight, so the reads delay its requests.
    overrun_us: &'static str,
}

/// A dense scheme's store: 64-byte values, clients reading throughout, 50 ms reads to overrun
/// its fill's intervals (76 ms for Cloak, Waffle and Pancake at this size and pace).
const DENSE_READS: ReadsDuringTheFill = ReadsDuringTheFill {
    value_size: 64,
    reads_each: u64::MAX,
    overrun_us: "50000",
};

/// Reads during a restart's fill are answered from the recovered records, on the thread that
/// prepares the fill's requests: the requests still leave on the fill's public clock, so the
/// server cannot tell a fill during which clients read from one during which none did (every
/// read's work is made 200 µs longer, and four clients keep 32 each in flight: thousands of
/// reads, or as many as [`ReadsDuringTheFill::reads_each`] allows). The same check catches reads
/// whose work overruns the clock (see [`ReadsDuringTheFill::overrun_us`]: the requests they
/// delay leave late).
///
/// The fill without its clock is no such counterpart: preparing its requests back to back keeps
/// that thread busy, and the clients' reads wait instead of delaying it (a few hundred were
/// answered during such a fill, which kept its pace).
fn assert_reads_during_the_fill_do_not_move_it(scheme: SchemeName, run: ReadsDuringTheFill) {
    let test = |client_read_us| ReadsTest {
        scheme,
        capacity: CLOCK_CAPACITY,
        value_size: run.value_size,
        reads_each: run.reads_each,
        client_read_us,
        slow_read_back: true,
        hold_writes: Duration::ZERO,
    };
    assert!(
        !reads_move_the_fill(fill_gaps_idle_and_read(test("200"), &[])),
        "{scheme}: the gaps between fill requests follow the reads during the fill"
    );
    assert!(
        reads_move_the_fill(fill_gaps_idle_and_read(test(run.overrun_us), &[])),
        "{scheme}: reads that overrun the fill's clock passed for reads that do not move it"
    );
}

#[test]
fn cloak_reads_during_the_fill_do_not_move_it() {
    assert_reads_during_the_fill_do_not_move_it(SchemeName::Cloak, DENSE_READS);
}

#[test]
fn waffle_reads_during_the_fill_do_not_move_it() {
    assert_reads_during_the_fill_do_not_move_it(SchemeName::Waffle, DENSE_READS);
}

#[test]
fn pancake_reads_during_the_fill_do_not_move_it() {
    assert_reads_during_the_fill_do_not_move_it(SchemeName::Pancake, DENSE_READS);
}

#[test]
fn path_oram_reads_during_the_fill_do_not_move_it() {
    // Its fill's intervals are 1.66 s, four of them in its window: 128 reads in flight of 100 ms
    // each (12.8 s, below the clients' timeout of 20 s) overrun them. Two pipelines of 32 a
    // client stay below its queue of 1,024 ops.
    let run = ReadsDuringTheFill {
        value_size: 2048,
        reads_each: 2 * 32,
        overrun_us: "100000",
    };
    assert_reads_during_the_fill_do_not_move_it(SchemeName::PathOram, run);
}

/// A server that holds its answers to the fill's writes past the clock (each 400 ms, longer
/// than the window's four intervals of 76 ms) paces the fill itself: a request leaves an
/// interval after the answer that made room for it (`Pace::answered`). That interval counts
/// from when the answer arrived, so clients reading meanwhile, who keep the proxy's core busy
/// when answers come, do not move the fill; the same check catches the proxy that counts it
/// from when the core handled the answer (`LEAK_DEMO_ANSWERS_HANDLED_ENV`). Cloak's fill; the
/// arrival is handed to every scheme the same way (`Scheme::handle_storage`).
#[test]
fn reads_during_a_fill_the_server_holds_do_not_move_it() {
    let test = ReadsTest {
        scheme: SchemeName::Cloak,
        capacity: 4 * CLOCK_CAPACITY,
        value_size: 64,
        reads_each: u64::MAX,
        client_read_us: "300",
        // A request is prepared once the answer before it is handled, and must be ready an
        // interval after that answer arrived: the reads' delay (up to 128 of them, 45 ms)
        // and the preparation must fit in it, so the fill's own read-back is not slowed.
        slow_read_back: false,
        hold_writes: Duration::from_millis(400),
    };
    let leaky = fill_gaps_idle_and_read(test, &[(LEAK_DEMO_ANSWERS_HANDLED_ENV, "1")]);
    assert!(
        !reads_move_the_fill(fill_gaps_idle_and_read(test, &[])),
        "the gaps between the held fill's requests follow the reads during the fill"
    );
    assert!(
        reads_move_the_fill(leaky),
        "the fill timed from handled answers passed for one timed from their arrival"
    );
}

/// Measures what the fill's clock costs in time to the first read: a restart of a sparse store
/// and of a full one of the same capacity, with the clock at its default pace and at
/// `--fill-pace 0.01` (a hundredth of every wait and interval: next to no clock), one after
/// the other, and prints the time from starting the proxy until its fill is done.
/// `CLOAK_FILL_TIMING_BIN` names the binary (a release build, for realistic numbers),
/// `CLOAK_FILL_TIMING_CAPACITY` the capacity (1,000,000), `CLOAK_FILL_TIMING_VALUE_SIZE` the
/// value size (1024) and `CLOAK_FILL_TIMING_SPARSE` the sparse store's keys (1000).
#[test]
#[ignore = "a measurement: prints numbers, asserts nothing"]
fn the_clocks_cost_in_time_to_the_first_read_measured() {
    let bin = std::env::var("CLOAK_FILL_TIMING_BIN").unwrap_or(common::CLOAK.to_string());
    let number = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let capacity = number("CLOAK_FILL_TIMING_CAPACITY", 1_000_000);
    let value_size = number("CLOAK_FILL_TIMING_VALUE_SIZE", 1024) as usize;
    let sparse = number("CLOAK_FILL_TIMING_SPARSE", 1000);
    let scheme: SchemeName = std::env::var("CLOAK_FILL_TIMING_SCHEME")
        .ok()
        .map_or(SchemeName::Cloak, |name| name.parse().unwrap());
    for keys in [sparse, capacity] {
        for pace in ["1", "0.01"] {
            let store = Store {
                scheme,
                capacity,
                keys,
                value_size,
                empty_elements: false,
                odd_elements: 0,
            };
            let fill = store.restart(&bin, &[], pace);
            println!(
                "{scheme}, {keys} of {capacity} keys of {value_size} bytes, --fill-pace {pace}: \
                 filled {:.2} s after the proxy started; pause after the scan {:.0} ms, {} fill \
                 requests, mean gap {:.2} ms",
                fill.filled.as_secs_f64(),
                fill.pause.as_secs_f64() * 1e3,
                fill.live.len(),
                fill.gaps.iter().sum::<Duration>().as_secs_f64() * 1e3 / fill.gaps.len() as f64,
            );
        }
    }
}

/// Pearson's correlation of `xs` and `ys`.
fn correlation(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
        syy += (y - my) * (y - my);
    }
    sxy / (sxx * syy).sqrt()
}

/// Measures, without the amplifiers, the gaps between fill requests of an empty, a half-full
/// and a full store and the pause after the scan, for every scheme with a fill: with the fill
/// as it is, without its clock, and without its clock reading back live records only; prints
/// them with the correlation of each request's gap with the live records it carried. `CLOAK_FILL_TIMING_BIN` names the binary to run (a release
/// build with the `cloak-schemes/leak-demo` feature, for realistic numbers),
/// `CLOAK_FILL_TIMING_CAPACITY` the stores' capacity (32768), `CLOAK_FILL_TIMING_VALUE_SIZE`
/// their value size (1024) and `CLOAK_FILL_TIMING_SCHEME` one scheme to measure (all).
#[test]
#[ignore = "a measurement: prints numbers, asserts nothing"]
fn the_fill_pace_by_live_records_measured() {
    let bin = std::env::var("CLOAK_FILL_TIMING_BIN").unwrap_or(common::CLOAK.to_string());
    let capacity: u64 = std::env::var("CLOAK_FILL_TIMING_CAPACITY")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(32_768);
    let value_size: usize = std::env::var("CLOAK_FILL_TIMING_VALUE_SIZE")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1024);
    let only: Option<SchemeName> = std::env::var("CLOAK_FILL_TIMING_SCHEME")
        .ok()
        .map(|name| name.parse().unwrap());
    let schemes = [
        SchemeName::Cloak,
        SchemeName::Waffle,
        SchemeName::Pancake,
        SchemeName::Curious,
        SchemeName::PathOram,
    ];
    for scheme in schemes.into_iter().filter(|s| only.is_none_or(|o| o == *s)) {
        for (name, env) in [
            (
                "live only, no clock",
                vec![(LIVE_READ_BACK_ENV, "1"), (LEAK_DEMO_UNPACED_FILL_ENV, "1")],
            ),
            ("decoys, no clock", vec![(LEAK_DEMO_UNPACED_FILL_ENV, "1")]),
            ("decoys and clock", vec![]),
        ] {
            let (mut gaps, mut live) = (Vec::new(), Vec::new());
            for keys in [0, capacity / 2, capacity] {
                let store = Store {
                    scheme,
                    capacity,
                    keys,
                    value_size,
                    empty_elements: false,
                    odd_elements: 0,
                };
                let fill = store.restart(&bin, &env, "1");
                let [p10, p50, p90, _] = percentiles(micros(&fill.gaps));
                let mean_live = fill.live.iter().sum::<usize>() / fill.live.len();
                println!(
                    "{scheme} ({name}), {keys} of {capacity} keys: {} requests, {mean_live} live \
                     records each on average; gap between requests p10/p50/p90 {p10} / {p50} / \
                     {p90} µs; pause after the scan {:.1} ms",
                    fill.live.len(),
                    fill.pause.as_secs_f64() * 1e3
                );
                gaps.extend(micros(&fill.gaps).map(|us| us as f64));
                live.extend(fill.live[1..].iter().map(|&n| n as f64));
            }
            println!(
                "{scheme} ({name}): correlation of a request's gap with its live records {:.2}",
                correlation(&live, &gaps)
            );
        }
    }
}
