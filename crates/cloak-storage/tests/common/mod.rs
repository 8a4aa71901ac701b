//! What the storage tests share.

use bytes::Bytes;
use cloak_storage::tls::ServerTls;
use cloak_storage::tls::certs::{QuickStart, write_quick_start};
use cloak_storage::tls::server::ServerTlsFiles;
use cloak_storage::{StorageError, StorageReply};

/// After answers refused as too long (since `started`): checks they were refused at once, not
/// by a timeout, and that `read`, a read of `count` addresses on a new connection, is answered
/// with `count` elements of `element` bytes.
pub async fn refused_at_once_then_answered(
    started: std::time::Instant,
    read: impl std::future::Future<Output = Result<StorageReply, StorageError>>,
    count: usize,
    element: usize,
) {
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "refused at once, not by timeout: {:?}",
        started.elapsed()
    );
    let StorageReply::Values(values) = read.await.expect("a new connection, and an answer") else {
        panic!("a read answers values")
    };
    assert_eq!(values, vec![Some(Bytes::from(vec![b'v'; element])); count]);
}

/// Quick-start certificates written to `dir`, and a TLS listener's setup with its server
/// certificate (asking clients for none).
pub fn quick_start_tls(dir: &std::path::Path) -> (QuickStart, ServerTls) {
    let files = write_quick_start(dir, &[]).unwrap();
    let tls = ServerTls::load(ServerTlsFiles {
        cert: files.server.0.clone(),
        key: files.server.1.clone(),
        client_ca: None,
    })
    .unwrap();
    (files, tls)
}

/// What a proxy fenced off by a later one gets when it writes on: `write` (made anew for each
/// try) fails, within three tries, with the error saying the proxy was fenced off
/// ([`StorageError::is_fenced_off`]; the first try may only find its connection closed).
/// Panics if a write is applied.
pub async fn fenced_off<F>(write: impl Fn() -> F) -> StorageError
where
    F: std::future::Future<Output = Result<StorageReply, StorageError>>,
{
    for _ in 0..3 {
        match write().await {
            Ok(_) => panic!("a fenced-off proxy's write was applied"),
            Err(error) if error.is_fenced_off() => return error,
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
    panic!("not refused by name within three tries")
}

/// Waits until the peer of `stream` closes it, at most 5 s (`what` says who should have).
pub async fn closed_by_peer(stream: &mut tokio::net::TcpStream, what: &str) {
    use tokio::io::AsyncReadExt;
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.read_to_end(&mut rest),
    )
    .await;
    assert!(closed.is_ok(), "{what}");
}
