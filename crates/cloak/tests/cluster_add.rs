//! Adding a proxy to a running cluster (`cloak cluster add-proxy`), through the built binary over
//! a real `redis-server`: two proxies, a third added hosting nothing and started from the cluster
//! file made before it (it reads the new map from the others), a partition moved to it, and keys
//! written before the move read back by a cluster-aware client through `-MOVED`. A duplicate
//! name or address, a bad name, a name no map has and a tool without the cluster's secret are
//! refused by name.

use std::process::Command;
use std::time::Duration;

use cloak_cluster::ClusterMap;
use cloak_testkit::redis_server::RedisServer;

mod common;

use common::{CLOAK, Running, keys_of};

const KEY: &str = "8c6a1f0b2d4e6a8c0e2f4a6c8e0a2c4e6f8a0c2e4a6c8e0f2a4c6e8a0c2e4f6a";
const SECRET: &str = "5ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7";

/// `cloak proxy` for proxy `name` from `file`, with its own state directory under `dir`.
fn proxy_args(
    dir: &std::path::Path,
    file: &std::path::Path,
    name: &str,
    secret: &str,
) -> Vec<String> {
    let state = dir.join(format!("state-{name}"));
    let extra = [
        "--state-dir",
        state.to_str().unwrap(),
        "--batch-interval",
        "50ms",
        "--cluster-secret-file",
        secret,
    ];
    common::cluster_proxy_args(file, name, &extra)
}

fn start(args: &[String]) -> Running {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Running::start_with_env(&args, &[("CLOAK_KEY", KEY)], "cloak proxy listening")
}

/// `cloak cluster …` through the proxy on `port` with the secret in `secret`: whether it
/// succeeded, its stdout, and its stderr.
fn tool(port: u16, secret: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(CLOAK)
        .env_remove("CLOAK_CLUSTER_SECRET_FILE")
        .arg("cluster")
        .args(args)
        .args(["--node", &format!("127.0.0.1:{port}")])
        .args(["--cluster-secret-file", secret])
        .output()
        .unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).to_string();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn a_proxy_added_to_a_running_cluster_starts_from_the_old_file_and_takes_a_partition() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("{}?prefix=add:p{{partition}}:", redis.url());
    let (map, file, ports) = common::proxy_cluster(dir.path(), &storage, 2, 4);
    let secret_path = dir.path().join("cluster.secret");
    common::write_private(&secret_path, format!("{SECRET}\n"));
    let secret = secret_path.to_str().unwrap();
    let _p0 = start(&proxy_args(dir.path(), &file, "p0", secret));
    let _p1 = start(&proxy_args(dir.path(), &file, "p1", secret));

    // Keys of partition 0 (p0's), written before anything changes.
    let keys = keys_of(&map, 0, 20);
    let mut on_p0 = common::connect(ports[0]);
    for key in &keys {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(format!("before-{key}"))
            .query(&mut on_p0)
            .unwrap();
    }

    let port = common::free_port();
    let address = format!("127.0.0.1:{port}");
    let add = |name: &str, address: &str, secret: &str| {
        tool(
            ports[1],
            secret,
            &["add-proxy", "--name", name, "--address", address],
        )
    };
    // Without the cluster's secret the tool gets nowhere.
    let wrong = dir.path().join("wrong.secret");
    common::write_private(&wrong, "not-the-secret-at-all\n");
    let (ok, _, err) = add("p2", &address, wrong.to_str().unwrap());
    assert!(!ok && err.contains("WRONGPASS"), "{err}");
    // Nor can a client with the password send the map itself.
    let mut client = common::connect(ports[0]);
    let sneaked = map.with_proxy("p2", &address).unwrap().to_toml();
    let refused = redis::cmd("CLOAK")
        .arg("ADOPT")
        .arg(&sneaked)
        .query::<String>(&mut client)
        .unwrap_err()
        .to_string();
    assert!(refused.to_uppercase().contains("NOPERM"), "{refused}");

    let (ok, new_file, err) = add("p2", &address, secret);
    assert!(ok, "{err}");
    let added = ClusterMap::from_signed_toml(
        &new_file,
        Some(&cloak_cluster::ClusterSecret::new(SECRET.as_bytes(), "t").unwrap()),
    )
    .unwrap();
    assert_eq!(added.epoch(), 1);
    assert_eq!(added.proxy_named("p2"), Some(2));
    assert_eq!(added.hosted_by(2).count(), 0);
    // Both proxies list it, with no slots.
    for port in &ports {
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut common::connect(*port))
            .unwrap();
        let line = nodes
            .lines()
            .find(|line| line.contains(&address))
            .unwrap_or_else(|| panic!("no line for p2 in {nodes}"));
        assert_eq!(line.split(' ').count(), 8, "p2 has slots? {line}");
    }

    // A second proxy of that name, or at that address, or with a name that is not one.
    let (ok, _, err) = add("p2", "127.0.0.1:1", secret);
    assert!(
        !ok && err.contains("two proxies are called \"p2\""),
        "{err}"
    );
    let (ok, _, err) = add("p3", &format!("127.0.0.1:{}", ports[0]), secret);
    assert!(!ok && err.contains("both have the address"), "{err}");
    let (ok, _, err) = add("p 3", "127.0.0.1:1", secret);
    assert!(!ok && err.contains("is not a proxy name"), "{err}");

    // A name no map has is refused at start, by name.
    let stranger = proxy_args(dir.path(), &file, "p9", secret);
    let stranger: Vec<&str> = stranger.iter().map(String::as_str).collect();
    let why = common::fails(&stranger);
    assert!(why.contains("\"p9\" is not one of the proxies"), "{why}");

    // p2 starts from the file made before it: the others' map names it.
    let metrics = format!("127.0.0.1:{}", common::free_port());
    let mut p2_args = proxy_args(dir.path(), &file, "p2", secret);
    p2_args.extend(["--metrics".to_string(), metrics.clone()]);
    let p2 = start(&p2_args);
    // Its metrics are there, for no partition yet (not "the core stopped").
    let page = scrape(&metrics);
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(!page.contains("partition=\""), "{page}");
    // It answers INFO by name rather than from a partition it does not have.
    let info = redis::cmd("INFO")
        .query::<String>(&mut common::connect(port))
        .unwrap_err()
        .to_string();
    assert!(info.contains("hosts no partition"), "{info}");
    // Commands without keys answer as an empty store, as a Redis Cluster node without slots.
    let mut empty = common::connect(port);
    let size: i64 = redis::cmd("DBSIZE").query(&mut empty).unwrap();
    let any: Option<String> = redis::cmd("RANDOMKEY").query(&mut empty).unwrap();
    let listed: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut empty).unwrap();
    assert_eq!((size, any, listed.len()), (0, None, 0));

    let (ok, out, err) = tool(
        ports[1],
        secret,
        &["move", "--partition", "0", "--to", "p2"],
    );
    assert!(ok, "{out}{err}");

    // A cluster client that knows only p0 follows -MOVED to p2 and reads every key back.
    let client =
        redis::cluster::ClusterClientBuilder::new(vec![format!("redis://127.0.0.1:{}/", ports[0])])
            .response_timeout(Duration::from_secs(5))
            .retries(5)
            .build()
            .unwrap();
    let mut con = client.get_connection().unwrap();
    for key in &keys {
        let got: Option<String> = redis::cmd("GET").arg(key).query(&mut con).unwrap();
        assert_eq!(got.as_deref(), Some(format!("before-{key}").as_str()));
    }
    let moved = redis::cmd("GET")
        .arg(&keys[0])
        .query::<Option<String>>(&mut common::connect(ports[0]))
        .unwrap_err()
        .to_string();
    assert!(moved.contains(&address), "{moved}");
    // p2's metrics now give the partition it took.
    let page = scrape(&metrics);
    assert!(
        page.starts_with("HTTP/1.1 200") && page.contains("partition=\"0\""),
        "{page}"
    );
    // And the metrics server, which outlives the proxy, does not keep its cores from stopping.
    assert!(p2.stop().success());
}

/// The `/metrics` page at `addr`, status line included.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut http = std::net::TcpStream::connect(addr).unwrap();
    http.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut page = String::new();
    http.read_to_string(&mut page).unwrap();
    page
}
