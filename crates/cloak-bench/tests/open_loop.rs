//! The load generator against servers that misbehave the way real ones do under overload: one
//! that stops reading while its replies are unread (the open-loop deadlock of a client that only
//! reads once its write is done), and one that stops answering (the run must fail, not hang).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cloak_bench::client::ClientError;
use cloak_bench::drive::{Load, drive};
use cloak_bench::workload::{Request, key_name};
use indicatif::ProgressBar;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const VALUE: usize = 16 * 1024;
/// 64 MiB each way: far more than loopback's socket buffers hold (a few MiB per direction).
const REQUESTS: usize = 4096;

/// The bytes of one `SET key:000000000000 <VALUE bytes>` as the client encodes it.
fn set_len() -> usize {
    let name = key_name(0);
    format!(
        "*3\r\n$3\r\nSET\r\n${}\r\n{name}\r\n${VALUE}\r\n",
        name.len()
    )
    .len()
        + VALUE
        + 2
}

/// A server that handles one request at a time: reads it whole, then writes a `VALUE`-byte
/// reply and reads nothing more until that write is done, as a server whose output is stuck
/// behaves once its buffers are full. `answer` false: it reads and never answers.
async fn server(answer: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = vec![0; set_len()];
                let mut reply = format!("${VALUE}\r\n").into_bytes();
                reply.extend(std::iter::repeat_n(b'r', VALUE));
                reply.extend_from_slice(b"\r\n");
                while socket.read_exact(&mut request).await.is_ok() {
                    if answer && socket.write_all(&reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn writes(n: usize) -> Arc<Vec<Request>> {
    Arc::new(vec![
        Request {
            key: 0,
            write: true
        };
        n
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_keeps_reading_while_a_write_is_blocked() {
    let addr = server(true).await;
    let hidden = ProgressBar::hidden();
    // Every request is due at once: the client has 64 MiB to write while 64 MiB of replies
    // come back. Reading only after writing everything leaves both directions full, forever.
    let load = Load {
        clients: 1,
        pipeline: 1,
        rate: Some(1e9),
    };
    let sending = drive(
        addr,
        writes(REQUESTS),
        &[b'v'; VALUE],
        load,
        Duration::from_secs(20),
        &hidden,
    );
    let answered = tokio::time::timeout(Duration::from_secs(60), sending)
        .await
        .expect("the client deadlocked with the server: both directions full")
        .expect("every request is answered");
    assert_eq!(answered.latency.len(), REQUESTS as u64);
    assert_eq!(answered.errors, 0);
}

#[tokio::test]
async fn a_server_that_stops_answering_fails_the_run_after_the_timeout() {
    let addr = server(false).await;
    let hidden = ProgressBar::hidden();
    for rate in [None, Some(1e6)] {
        let load = Load {
            clients: 2,
            pipeline: 4,
            rate,
        };
        let patience = Duration::from_millis(300);
        let sending = drive(addr, writes(10), &[b'v'; VALUE], load, patience, &hidden);
        let outcome = tokio::time::timeout(Duration::from_secs(30), sending)
            .await
            .expect("the client gives up by itself");
        match outcome {
            Err(ClientError::NoReply { waited, .. }) => assert_eq!(waited, patience),
            Err(other) => panic!("expected NoReply, got {other}"),
            Ok(_) => panic!("no request was answered, yet the run succeeded"),
        }
    }
}
