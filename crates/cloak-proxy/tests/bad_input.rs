//! Bad input gets a clear error and loses nothing; the proxy keeps serving everyone else.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use cloak_core::{Command, Outcome, SetCondition};
use cloak_schemes::SchemeName;
use common::{MAX_KEY, MAX_VALUE, Setup, TestProxy, raw, run};

fn set(key: &str, value: impl Into<Bytes>) -> Command {
    Command::Set {
        key: Bytes::from(key.to_string()),
        value: value.into(),
        condition: SetCondition::Always,
    }
}

fn get(key: &str) -> Command {
    Command::Get(Bytes::from(key.to_string()))
}

async fn still_serves(proxy: &TestProxy) {
    let mut con = proxy.connection().await;
    assert_eq!(run(&mut con, &set("alive", "yes")).await, Ok(Outcome::Ok));
    assert_eq!(
        run(&mut con, &get("alive")).await,
        Ok(Outcome::Value(Some("yes".into())))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_close_only_their_connection() {
    let proxy = Setup::new(SchemeName::Cloak, 100).start().await;
    let mut bystander = proxy.connection().await;
    assert_eq!(run(&mut bystander, &set("k", "v")).await, Ok(Outcome::Ok));

    let reply = raw(&proxy, b"*1\r\n+OK\r\n").await;
    assert_eq!(reply, "-ERR Protocol error: expected '$', got '+'\r\n");
    let reply = raw(&proxy, b"*2\r\n$3\r\nGET\r\n$-7\r\n").await;
    assert_eq!(reply, "-ERR Protocol error: invalid bulk length\r\n");
    let reply = raw(&proxy, b"*3000000000\r\n").await;
    assert_eq!(
        reply,
        "-ERR Protocol error: invalid multibulk length 3000000000: at most 129 arguments \
         (an MSET of --max-keys-per-command pairs)\r\n"
    );
    // An argument longer than a value and a key is refused on its header, before its bytes.
    let reply = raw(&proxy, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$60000000\r\n").await;
    assert_eq!(
        reply,
        format!(
            "-ERR Protocol error: invalid bulk length 60000000: at most {} bytes \
             (--value-size plus --key-size)\r\n",
            MAX_VALUE + MAX_KEY
        )
    );
    // Replies to the well-formed requests before the bad one still arrive, in order.
    let reply = raw(&proxy, b"PING\r\n*1\r\n$4\r\nPING\r\n*1\r\n:1\r\n").await;
    assert_eq!(
        reply,
        "+PONG\r\n+PONG\r\n-ERR Protocol error: expected '$', got ':'\r\n"
    );
    let garbage: Vec<u8> = (0..5000u32).map(|i| (i * 7919 % 251) as u8).collect();
    let _ = raw(&proxy, &garbage).await;

    assert_eq!(
        run(&mut bystander, &get("k")).await,
        Ok(Outcome::Value(Some("v".into())))
    );
    still_serves(&proxy).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_commands_and_bad_arguments_are_refused_and_the_connection_stays() {
    let proxy = Setup::new(SchemeName::Cloak, 100).start().await;
    let reply = raw(&proxy, b"NOSUCHCMD now\r\nGET\r\nSET k v EX 0\r\nPING\r\n").await;
    assert_eq!(
        reply,
        "-ERR unknown command 'NOSUCHCMD', with args beginning with: 'now' \r\n\
         -ERR wrong number of arguments for 'get' command\r\n\
         -ERR invalid expire time in 'set' command\r\n\
         +PONG\r\n"
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_values_and_keys_are_refused_without_effect() {
    let proxy = Setup::new(SchemeName::Cloak, 100).start().await;
    let mut con = proxy.connection().await;
    assert_eq!(run(&mut con, &set("k", "small")).await, Ok(Outcome::Ok));
    let big = Bytes::from(vec![b'x'; MAX_VALUE + 1]);
    let error = run(&mut con, &set("k", big)).await.unwrap_err();
    assert!(
        error.contains(&format!(
            "value is {} bytes, the limit is {MAX_VALUE}",
            MAX_VALUE + 1
        )),
        "{error}"
    );
    // Longer than a key but within a key plus a value: the request arrives whole and gets the
    // precise error (anything longer is refused on its header, see above).
    let long_key = "k".repeat(MAX_KEY + 10);
    let error = run(&mut con, &set(&long_key, "v")).await.unwrap_err();
    assert!(
        error.contains(&format!("key is {} bytes", MAX_KEY + 10)),
        "{error}"
    );
    assert_eq!(
        run(&mut con, &get("k")).await,
        Ok(Outcome::Value(Some("small".into())))
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_are_required_and_checked() {
    let mut setup = Setup::new(SchemeName::Cloak, 100);
    setup.password = Some("s3cret".into());
    let proxy = setup.start().await;
    let reply = raw(
        &proxy,
        b"GET k\r\nAUTH wrong\r\nAUTH bob s3cret\r\nGET k\r\nAUTH s3cret\r\nGET k\r\nAUTH default s3cret\r\n",
    )
    .await;
    assert_eq!(
        reply,
        "-NOAUTH Authentication required.\r\n\
         -WRONGPASS invalid username-password pair or user is disabled.\r\n\
         -WRONGPASS invalid username-password pair or user is disabled.\r\n\
         -NOAUTH Authentication required.\r\n\
         +OK\r\n$-1\r\n+OK\r\n"
    );
    let client = redis::Client::open(format!("redis://:s3cret@{}/", proxy.addr)).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    assert_eq!(run(&mut con, &set("k", "v")).await, Ok(Outcome::Ok));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_store_refuses_new_keys_only() {
    let proxy = Setup::new(SchemeName::Cloak, 10).start().await;
    let mut con = proxy.connection().await;
    for i in 0..10 {
        assert_eq!(
            run(&mut con, &set(&format!("k{i}"), "v")).await,
            Ok(Outcome::Ok)
        );
    }
    let error = run(&mut con, &set("one-too-many", "v")).await.unwrap_err();
    assert!(
        error.contains("store is full: all 10 keys are in use"),
        "{error}"
    );
    assert_eq!(run(&mut con, &set("k3", "updated")).await, Ok(Outcome::Ok));
    assert_eq!(
        run(&mut con, &Command::Del(vec!["k0".into()])).await,
        Ok(Outcome::Integer(1))
    );
    assert_eq!(
        run(&mut con, &set("one-too-many", "v")).await,
        Ok(Outcome::Ok)
    );
    assert_eq!(
        run(&mut con, &get("k3")).await,
        Ok(Outcome::Value(Some("updated".into())))
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_ciphertext_byte_is_reported_never_returned() {
    for scheme in [SchemeName::Cloak, SchemeName::PathOram] {
        flipped_bytes_are_reported(scheme).await;
    }
}

async fn flipped_bytes_are_reported(scheme: SchemeName) {
    let mut setup = Setup::new(scheme, 100);
    setup.options.cloak.cache_size = 0;
    setup.options.cloak.batch_interval = Duration::from_millis(20);
    let proxy = setup.start().await;
    let mut con = proxy.connection().await;
    assert_eq!(
        run(&mut con, &set("secret", "value")).await,
        Ok(Outcome::Ok)
    );
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The server turns malicious: every element it returns has a flipped byte.
    proxy.server.on.store(true, Ordering::Relaxed);
    let error = run(&mut con, &get("secret")).await.unwrap_err();
    assert!(error.contains("failed authentication"), "{error}");
    let info = proxy.stats.snapshot().await.unwrap();
    assert!(info.stats.integrity_failures > 0);
    // The lost value is never replaced by something else: it stays an error.
    proxy.server.on.store(false, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let error = run(&mut con, &get("secret")).await.unwrap_err();
    assert!(error.contains("failed authentication"), "{error}");

    // Everyone else is still served, and rewriting the key heals it.
    still_serves(&proxy).await;
    assert_eq!(
        run(&mut con, &set("secret", "again")).await,
        Ok(Outcome::Ok)
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        run(&mut con, &get("secret")).await,
        Ok(Outcome::Value(Some("again".into())))
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_backend_gives_clear_errors_and_the_proxy_stays_up() {
    for scheme in SchemeName::ALL {
        let mut setup = Setup::new(scheme, 100);
        setup.options.cloak.cache_size = 0;
        let mut proxy = setup.start().await;
        let mut con = proxy.connection().await;
        let keys: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
        for key in &keys {
            assert_eq!(run(&mut con, &set(key, key.clone())).await, Ok(Outcome::Ok));
        }
        // Let the writes reach storage, so reads of keys the proxy does not cache need it.
        tokio::time::sleep(Duration::from_millis(100)).await;
        proxy.stop_storage();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut unavailable = 0;
        for key in &keys {
            match run(&mut con, &get(key)).await {
                Err(error) => {
                    assert!(error.contains("storage unavailable"), "{scheme}: {error}");
                    unavailable += 1;
                }
                // A scheme may answer from what the proxy holds (a cache, a stash), never
                // with anything else.
                Ok(outcome) => assert_eq!(outcome, Outcome::Value(Some(key.clone().into()))),
            }
        }
        assert!(
            unavailable > 0,
            "{scheme}: every read was answered with storage gone"
        );
        assert_eq!(
            run(&mut con, &Command::DbSize(Default::default())).await,
            Ok(Outcome::Integer(50))
        );
        let pong: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
        assert_eq!(pong, "PONG");
        // Don't wait for a drain that cannot finish: the backend is gone.
        drop(proxy);
    }
}
