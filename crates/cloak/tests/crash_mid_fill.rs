//! A proxy killed in the middle of the fill that follows a restart: the new layout's fill
//! overwrites addresses that held recovered records before the requests carrying those records'
//! new addresses land, so at that moment storage holds some acknowledged records nowhere. The
//! next start must still find every one of them, and start cleanly.
//!
//! The fill is cut where it is by a relay between proxy and server that forwards the proxy's
//! requests up to a byte budget and then closes the server's side: the server applies the whole
//! requests it got (about half the fill), and the proxy, waiting for answers that never come,
//! is killed with SIGKILL. Before that, `INFO` must say the proxy is still loading.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use common::{Running, connect, free_port};

/// More than one chunk of Path ORAM's journal copy of the recovered records (4,096).
const KEYS: usize = 5000;
const CAPACITY: &str = "8192";
const VALUE_SIZE: &str = "64";

/// Forwards connections from `listen` to `upstream`; once `budget` bytes went upstream, it
/// forwards no more, closes each upstream connection's sending side, and says on the returned
/// channel when upstream has closed them all (it has then applied all it was sent).
fn cut_relay(listen: &str, upstream: String, budget: u64) -> mpsc::Receiver<()> {
    let listener = TcpListener::bind(listen).unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let (drained, done) = mpsc::channel();
    std::thread::spawn(move || {
        for proxy in listener.incoming().map_while(Result::ok) {
            let server = TcpStream::connect(&upstream).unwrap();
            let (sent, drained) = (sent.clone(), drained.clone());
            let (mut from_server, mut to_proxy) =
                (server.try_clone().unwrap(), proxy.try_clone().unwrap());
            // Answers flow back untouched until the server closes; once the proxy is gone they
            // are read and dropped, so the server never waits on a full socket.
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut from_server, &mut to_proxy);
                let _ = std::io::copy(&mut from_server, &mut std::io::sink());
                let _ = drained.send(());
            });
            std::thread::spawn(move || forward_until(proxy, server, &sent, budget));
        }
    });
    done
}

/// Copies `from` to `to` while the bytes sent by every connection stay within `budget`, then
/// closes `to`'s sending side and drops what `from` sends until it closes (the proxy's side stays
/// open, so it waits for answers instead of seeing the link fail).
fn forward_until(mut from: TcpStream, mut to: TcpStream, sent: &AtomicU64, budget: u64) {
    let mut buffer = [0u8; 16 * 1024];
    while let Ok(n @ 1..) = from.read(&mut buffer) {
        let before = sent.fetch_add(n as u64, Ordering::SeqCst);
        let room = budget.saturating_sub(before).min(n as u64) as usize;
        if to.write_all(&buffer[..room]).is_err() || room < n {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = std::io::copy(&mut from, &mut std::io::sink());
}

fn proxy_args<'a>(
    storage: &'a str,
    listen: &'a str,
    state: &'a str,
    scheme: &'a str,
) -> Vec<&'a str> {
    vec![
        "proxy",
        "--storage",
        storage,
        "--listen",
        listen,
        "--state-dir",
        state,
        "--scheme",
        scheme,
        "--capacity",
        CAPACITY,
        "--value-size",
        VALUE_SIZE,
        "--batch-interval",
        "5ms",
    ]
}

#[test]
fn a_proxy_killed_in_the_middle_of_its_fill_loses_nothing() {
    for scheme in ["cloak", "waffle", "pancake", "curious", "path-oram"] {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let state = state.to_str().unwrap();
        let server_addr = format!("127.0.0.1:{}", free_port());
        let _server = Running::start(&["server", "--listen", &server_addr], "listening");
        let direct = format!("tcp://{server_addr}");
        let listen = format!("127.0.0.1:{}", free_port());
        let port: u16 = listen.rsplit(':').next().unwrap().parse().unwrap();

        // A store of KEYS keys, written and stopped cleanly.
        let proxy = Running::start(&proxy_args(&direct, &listen, state, scheme), "listening");
        let mut con = connect(port);
        for chunk in (0..KEYS).collect::<Vec<_>>().chunks(500) {
            let mut mset = redis::cmd("MSET");
            for i in chunk {
                mset.arg(format!("k{i}")).arg(format!("value {i}"));
            }
            let () = mset.query(&mut con).unwrap();
        }
        drop(con);
        assert!(proxy.stop().success(), "{scheme}");

        // A restart through the relay, killed once about half of its fill reached the server.
        let relay_addr = format!("127.0.0.1:{}", free_port());
        let element_bytes = 300; // a 64-byte value's element, sealed, with its request framing
        let budget = CAPACITY.parse::<u64>().unwrap() * element_bytes / 2;
        let drained = cut_relay(&relay_addr, server_addr.clone(), budget);
        let relayed = format!("tcp://{relay_addr}");
        let cut = Running::start(&proxy_args(&relayed, &listen, state, scheme), "listening");
        drained
            .recv_timeout(Duration::from_secs(60))
            .expect("the relay cut the fill");
        // Meanwhile INFO says the proxy is loading, and how far its fill got.
        let info: String = redis::cmd("INFO")
            .arg("persistence")
            .query(&mut connect(port))
            .unwrap();
        let percent: f64 = info
            .lines()
            .find_map(|line| line.strip_prefix("loading_loaded_perc:"))
            .and_then(|percent| percent.trim().parse().ok())
            .unwrap_or_else(|| panic!("{scheme}: no loading_loaded_perc in {info}"));
        // Path ORAM's whole tree is one fill request here, so none of it has landed: 0%.
        assert!(
            info.contains("loading:1") && (0.0..100.0).contains(&percent),
            "{scheme}: {info}"
        );
        cut.kill();

        // The next start finds every key.
        let proxy = Running::start(&proxy_args(&direct, &listen, state, scheme), "listening");
        let keys: Vec<String> = (0..KEYS).map(|i| format!("k{i}")).collect();
        let got: Vec<Option<String>> = redis::cmd("MGET")
            .arg(&keys)
            .query(&mut connect(port))
            .unwrap();
        for (i, value) in got.iter().enumerate() {
            assert_eq!(
                value.as_deref(),
                Some(&*format!("value {i}")),
                "{scheme}: k{i}"
            );
        }
        assert!(proxy.stop().success(), "{scheme}");
    }
}
