//! A bug that kills the core task stops the proxy with an error instead of leaving a listener
//! that answers "the proxy is shutting down" forever.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cloak_core::{
    KeyDirectory, Limits, Op, OpId, Outbox, RequestId, Scheme, SchemeStats, StorageError,
    StorageReply, StorageRequest,
};
use cloak_crypto::{KeyHasher, MasterKey};
use cloak_proxy::ProxyOptions;
use cloak_storage::MemoryStorage;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A scheme with a bug: it panics on the first op.
#[derive(Default)]
struct Panicking {
    out: Outbox,
}

impl Scheme for Panicking {
    fn name(&self) -> &'static str {
        "panicking"
    }
    fn slots(&self) -> u64 {
        16
    }
    fn submit(&mut self, _: Instant, _: OpId, _: Op) {
        panic!("a deliberate bug in the scheme");
    }
    fn handle_storage(
        &mut self,
        _: Instant,
        _: Instant,
        _: RequestId,
        _: Result<StorageReply, StorageError>,
    ) {
    }
    fn handle_timeout(&mut self, _: Instant) {}
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn poll_storage(&mut self) -> Option<StorageRequest> {
        None
    }
    fn outbox(&mut self) -> &mut Outbox {
        &mut self.out
    }
    fn accepts(&self) -> bool {
        true
    }
    fn stats(&self) -> SchemeStats {
        SchemeStats::default()
    }
    fn describe(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_core_stops_the_proxy_with_an_error() {
    let master = MasterKey::generate().unwrap();
    let limits = Limits {
        max_key: 16,
        max_value: 16,
        max_keys_per_command: 4,
    };
    let engine = cloak_core::Engine::new(
        Box::new(Panicking::default()),
        KeyDirectory::new(KeyHasher::new(&master), 16),
        limits,
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let proxy = tokio::spawn(cloak_proxy::run(
        vec![listener.into()],
        engine,
        Arc::new(MemoryStorage::new()),
        ProxyOptions::default(),
        |_| {},
        std::future::pending(),
    ));

    let mut client = TcpStream::connect(addr).await.unwrap();
    client.write_all(b"SET k v\r\n").await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), proxy)
        .await
        .expect("the proxy kept running after its core task panicked")
        .unwrap();
    let error = ended.unwrap_err().to_string();
    assert!(error.contains("core task panicked"), "{error}");

    // The client's connection is closed, and nobody is listening any more.
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut rest))
        .await
        .expect("the connection was closed");
    assert!(TcpStream::connect(addr).await.is_err());
}
