//! The handshake and connection commands on the wire: `HELLO` and RESP3, `AUTH`, `RESET`,
//! `CLIENT`, `SHUTDOWN`, with the exact bytes `redis-server` 7 sends for the same requests. And
//! none of the front end's own commands reaches the storage server.

mod common;

use std::time::Duration;

use cloak_schemes::SchemeName;
use common::{Setup, TestProxy, raw, read_all};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `requests` (inline commands, one per line) on a fresh connection and returns what
/// comes back until the proxy closes or goes quiet.
async fn exchange(proxy: &TestProxy, requests: &str) -> String {
    raw(proxy, requests.as_bytes()).await
}

/// `HELLO`'s reply, for a client id, in RESP3 (a map) or RESP2 (a flat array).
fn hello_reply(resp3: bool, id: u64) -> String {
    let head = if resp3 { "%7" } else { "*14" };
    let proto = if resp3 { 3 } else { 2 };
    format!(
        "{head}\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.2.0\r\n\
         $5\r\nproto\r\n:{proto}\r\n$2\r\nid\r\n:{id}\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n\
         $4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_switches_the_protocol_of_every_later_reply() {
    let proxy = Setup::new(SchemeName::Unsafe, 100).start().await;
    let reply = exchange(
        &proxy,
        "HELLO 3\r\nGET nosuch\r\nMGET a b\r\nCONFIG GET maxclients\r\nCLIENT GETNAME\r\n\
         HELLO 2\r\nGET nosuch\r\nCONFIG GET maxclients\r\n",
    )
    .await;
    // The first client of a proxy has id 1.
    let expected = [
        hello_reply(true, 1),
        "_\r\n*2\r\n_\r\n_\r\n%1\r\n$10\r\nmaxclients\r\n$5\r\n10000\r\n_\r\n".into(),
        hello_reply(false, 1),
        "$-1\r\n*2\r\n$10\r\nmaxclients\r\n$5\r\n10000\r\n".into(),
    ]
    .concat();
    assert_eq!(reply, expected);

    let info = exchange(&proxy, "HELLO 3\r\nINFO persistence\r\n").await;
    assert!(
        info.ends_with("=30\r\ntxt:# Persistence\r\nloading:0\r\n\r\n"),
        "INFO is a verbatim string in RESP3: {info:?}"
    );

    let errors = exchange(
        &proxy,
        "HELLO 4\r\nHELLO x\r\nHELLO 3 FOO\r\nHELLO 3 AUTH default\r\nHELLO 3 SETNAME a\x01b\r\n\
         GET nosuch\r\n",
    )
    .await;
    assert_eq!(
        errors,
        "-NOPROTO unsupported protocol version\r\n\
         -ERR Protocol version is not an integer or out of range\r\n\
         -ERR Syntax error in HELLO option 'FOO'\r\n\
         -ERR Syntax error in HELLO option 'AUTH'\r\n\
         -ERR Client names cannot contain spaces, newlines or special characters.\r\n\
         $-1\r\n",
        "a failed HELLO leaves the connection in RESP2"
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_authenticates_and_reset_forgets_it() {
    let mut setup = Setup::new(SchemeName::Unsafe, 100);
    setup.password = Some("s3cret".into());
    let proxy = setup.start().await;
    let reply = exchange(
        &proxy,
        "HELLO 3\r\nHELLO 3 AUTH default wrong\r\nHELLO 3 AUTH default s3cret SETNAME app\r\n\
         CLIENT GETNAME\r\nRESET\r\nGET k\r\nCLIENT GETNAME\r\n",
    )
    .await;
    let expected = [
        "-NOAUTH HELLO must be called with the client already authenticated, otherwise the \
         HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
         select the RESP protocol version at the same time\r\n\
         -WRONGPASS invalid username-password pair or user is disabled.\r\n"
            .to_string(),
        hello_reply(true, 1),
        "$3\r\napp\r\n+RESET\r\n-NOAUTH Authentication required.\r\n\
         -NOAUTH Authentication required.\r\n"
            .into(),
    ]
    .concat();
    assert_eq!(reply, expected);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_are_listed_and_can_be_killed() {
    let proxy = Setup::new(SchemeName::Unsafe, 100).start().await;
    let mut victim = TcpStream::connect(proxy.addr).await.unwrap();
    victim
        .write_all(b"CLIENT SETNAME victim\r\nCLIENT SETINFO LIB-NAME tester\r\nCLIENT ID\r\n")
        .await
        .unwrap();
    let reply = read_all(&mut victim).await;
    let id: u64 = reply
        .rsplit(':')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{reply:?}"));

    let list = exchange(&proxy, "CLIENT LIST\r\n").await;
    assert!(
        list.contains(&format!(
            "id={id} addr={} laddr={} name=victim ",
            victim.local_addr().unwrap(),
            proxy.addr
        )),
        "{list}"
    );
    assert!(list.contains(" cmd=client|id user=default resp=2 lib-name=tester lib-ver=\n"));

    let kill = exchange(
        &proxy,
        &format!("CLIENT KILL ID {id}\r\nCLIENT KILL 10.0.0.1:1\r\nCLIENT KILL ID 99999\r\n"),
    )
    .await;
    assert_eq!(kill, ":1\r\n-ERR No such client\r\n:0\r\n");
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), victim.read_to_end(&mut rest)).await;
    assert!(matches!(closed, Ok(Ok(0))), "the killed client is closed");
    assert!(!exchange(&proxy, "CLIENT LIST\r\n").await.contains("victim"));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_needs_auth_and_stops_the_proxy_cleanly() {
    let mut setup = Setup::new(SchemeName::Cloak, 100);
    setup.password = Some("s3cret".into());
    let proxy = setup.start().await;
    let reply = exchange(
        &proxy,
        "SHUTDOWN\r\nAUTH s3cret\r\nSET k v\r\nSHUTDOWN ABORT\r\nSHUTDOWN NOSAVE SAVE\r\n\
         SHUTDOWN NOSAVE NOW\r\nPING\r\n",
    )
    .await;
    // SHUTDOWN closes the connection without a reply, as on Redis; PING is never answered.
    assert_eq!(
        reply,
        "-NOAUTH Authentication required.\r\n+OK\r\n+OK\r\n-ERR No shutdown in progress.\r\n\
         -ERR syntax error\r\n"
    );
    proxy.stopped(Duration::from_secs(10)).await;
}

/// Everything the front end answers itself (the handshake, `CLIENT`, `INFO`, `CONFIG`,
/// `COMMAND`, `TIME`, errors) causes no storage request. With the unsafe scheme every storage
/// request comes from a client's key command, so the trace shows any that slipped through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn front_end_commands_cause_no_storage_traffic() {
    let proxy = Setup::new(SchemeName::Unsafe, 100).start().await;
    let mut con = proxy.connection().await;
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query_async(&mut con)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = proxy.trace.len();
    exchange(
        &proxy,
        "HELLO 3 SETNAME x\r\nPING\r\nECHO hi\r\nCLIENT LIST\r\nCLIENT INFO\r\nCLIENT ID\r\n\
         CLIENT NO-EVICT on\r\nCLIENT NO-TOUCH on\r\nINFO\r\nCONFIG GET *\r\nCOMMAND\r\n\
         COMMAND DOCS\r\nCOMMAND COUNT\r\nTIME\r\nSELECT 0\r\nRESET\r\nNOSUCH x\r\nGET\r\n",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(proxy.trace.len(), before, "no storage request was added");
    let _: Option<String> = redis::cmd("GET")
        .arg("k")
        .query_async(&mut con)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        proxy.trace.len() > before,
        "a key command does reach storage, so the check above can see one"
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_exec_is_a_nil_array_in_either_protocol() {
    let proxy = Setup::new(SchemeName::Unsafe, 100).start().await;
    // A client's own write to a key it watches aborts its transaction, as in Redis.
    let transaction = "WATCH k\r\nSET k x\r\nMULTI\r\nGET k\r\nEXEC\r\n";
    let reply = exchange(
        &proxy,
        &format!("HELLO 3\r\n{transaction}HELLO 2\r\n{transaction}"),
    )
    .await;
    let expected = [
        hello_reply(true, 1),
        "+OK\r\n+OK\r\n+OK\r\n+QUEUED\r\n_\r\n".into(),
        hello_reply(false, 1),
        "+OK\r\n+OK\r\n+OK\r\n+QUEUED\r\n*-1\r\n".into(),
    ]
    .concat();
    assert_eq!(reply, expected);
    proxy.shutdown().await;
}
