//! A Cloak cluster through the built binary: its cluster replies against a real Redis Cluster's
//! (byte for byte where Redis's are deterministic), `redis-cli -c` and `cloak cluster status` on
//! `cloak cluster up`, a proxy of a cluster over a Redis Cluster killed and restarted (only its
//! slots fail meanwhile, with `-CLUSTERDOWN` from the others, and no acknowledged write is lost),
//! and a partition whose storage dies (only its slots fail).
//!
//! The client libraries' cluster clients (redis-py `RedisCluster`, go-redis `ClusterClient`) are
//! in `client_libs.rs`, with the other client-library tests.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use cloak_cluster::{ClusterMap, key_slot};
use cloak_testkit::redis_server::{RedisCluster, RedisServer};

mod common;

use common::{CLOAK, Running, free_port, free_ports, redis_cli};

const KEY: &str = "8c6a1f0b2d4e6a8c0e2f4a6c8e0a2c4e6f8a0c2e4a6c8e0f2a4c6e8a0c2e4f6a";

/// One RESP reply, as its raw bytes, with the raw bytes of its elements if it is an aggregate.
#[derive(Debug, Clone)]
struct Resp {
    raw: String,
    elements: Vec<Resp>,
}

/// Reads one whole reply.
fn read_reply(reader: &mut impl BufRead) -> Resp {
    let mut line = String::new();
    reader.read_line(&mut line).expect("a reply");
    assert!(line.ends_with("\r\n"), "a truncated reply: {line:?}");
    let count = || line[1..line.len() - 2].parse::<i64>().expect("a length");
    let mut raw = line.clone();
    let mut elements = Vec::new();
    match line.as_bytes()[0] {
        b'$' | b'=' if count() >= 0 => {
            let mut body = vec![0; count() as usize + 2];
            reader.read_exact(&mut body).expect("a bulk string");
            raw.push_str(&String::from_utf8_lossy(&body));
        }
        kind @ (b'*' | b'%' | b'~' | b'>') => {
            let per = if kind == b'%' { 2 } else { 1 };
            for _ in 0..count().max(0) * per {
                let element = read_reply(reader);
                raw.push_str(&element.raw);
                elements.push(element);
            }
        }
        _ => {}
    }
    Resp { raw, elements }
}

/// A connection sending commands and reading their replies raw.
struct Raw(BufReader<TcpStream>);

impl Raw {
    fn connect(port: u16) -> Self {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Raw(BufReader::new(stream))
    }

    fn send(&mut self, args: &[&str]) -> Resp {
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        self.0.get_mut().write_all(request.as_bytes()).unwrap();
        read_reply(&mut self.0)
    }
}

/// A Redis node: its port, id and slot ranges.
struct RedisNode {
    port: u16,
    id: String,
    ranges: Vec<(u16, u16)>,
}

/// Each Redis node, from CLUSTER SLOTS.
fn redis_nodes(redis: &RedisCluster) -> Vec<RedisNode> {
    let slots = Raw::connect(redis.nodes[0].port).send(&["CLUSTER", "SLOTS"]);
    let mut nodes: Vec<RedisNode> = Vec::new();
    for entry in &slots.elements {
        let number = |r: &Resp| r.raw[1..r.raw.len() - 2].parse::<u16>().unwrap();
        let bulk = |r: &Resp| r.raw.lines().nth(1).unwrap().to_string();
        let (first, last) = (number(&entry.elements[0]), number(&entry.elements[1]));
        let node = &entry.elements[2];
        let (port, id) = (number(&node.elements[1]), bulk(&node.elements[2]));
        match nodes.iter_mut().find(|node| node.port == port) {
            Some(node) => node.ranges.push((first, last)),
            None => nodes.push(RedisNode {
                port,
                id,
                ranges: vec![(first, last)],
            }),
        }
    }
    nodes
}

/// A cluster file with one proxy and one partition per Redis node, owning that node's slots:
/// the two clusters then route every key alike. Returns the file and the proxies' ports.
fn mirror(redis: &RedisCluster, dir: &std::path::Path) -> (std::path::PathBuf, Vec<u16>) {
    let mut file = String::from("storage = \"memory\"\n");
    let mut ports = Vec::new();
    for (i, RedisNode { ranges, .. }) in redis_nodes(redis).iter().enumerate() {
        let port = free_port();
        ports.push(port);
        let slots: Vec<String> = ranges.iter().map(|(f, l)| format!("{f}-{l}")).collect();
        file.push_str(&format!(
            "[[proxy]]\nname = \"p{i}\"\naddress = \"127.0.0.1:{port}\"\n\
             [[partition]]\nslots = \"{}\"\nproxy = \"p{i}\"\n",
            slots.join(",")
        ));
    }
    let path = dir.join("cluster.toml");
    std::fs::write(&path, file).unwrap();
    (path, ports)
}

fn start_proxy(file: &std::path::Path, node: &str, extra: &[&str]) -> Running {
    let mut args = vec![
        "proxy",
        "--cluster",
        file.to_str().unwrap(),
        "--node",
        node,
        "--capacity",
        "200",
    ];
    args.extend_from_slice(extra);
    Running::start_with_env(&args, &[("CLOAK_KEY", KEY)], "cloak proxy listening")
}

/// Redis's text with each node's id and port replaced by the proxy's that mirrors it.
fn as_cloak(text: &str, redis: &[RedisNode], map: &ClusterMap) -> String {
    let mut text = text.to_string();
    for (RedisNode { port, id, .. }, proxy) in redis.iter().zip(map.proxies()) {
        text = text
            .replace(id, &proxy.id)
            .replace(&format!(":{port}\r\n"), &format!(":{}\r\n", proxy.port))
            .replace(&format!(":{port} "), &format!(":{} ", proxy.port))
            .replace(&format!(":{port}@"), &format!(":{}@", proxy.port))
            .replace(&format!(":{port}\n"), &format!(":{}\n", proxy.port));
    }
    text
}

/// A key whose slot the first node serves, other than `not`'s slot.
fn local_key(ranges: &[(u16, u16)], not: Option<&str>) -> String {
    (0..)
        .map(|i| format!("local{i}"))
        .find(|key| {
            let slot = key_slot(key.as_bytes());
            ranges.iter().any(|(f, l)| (*f..=*l).contains(&slot))
                && not.is_none_or(|other| key_slot(other.as_bytes()) != slot)
        })
        .unwrap()
}

#[test]
fn cluster_replies_match_a_real_redis_cluster() {
    let redis = RedisCluster::start(3);
    let nodes = redis_nodes(&redis);
    let dir = tempfile::tempdir().unwrap();
    let (file, ports) = mirror(&redis, dir.path());
    let map = ClusterMap::from_toml(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let _proxies: Vec<Running> = (0..3)
        .map(|i| start_proxy(&file, &format!("p{i}"), &["--scheme", "unsafe"]))
        .collect();
    // Each proxy probes the others from its start (the first ones found the later ones not yet
    // listening): wait until every one has seen them all answer.
    for port in &ports {
        let ok = "cluster_slots_ok:16384\r\n";
        let info = wait_for_reply(*port, &["CLUSTER", "INFO"], ok);
        assert!(info.contains(ok), "{info}");
    }
    let (mine, other) = (
        local_key(&nodes[0].ranges, None),
        local_key(&nodes[0].ranges, Some(&local_key(&nodes[0].ranges, None))),
    );
    let elsewhere = (0..)
        .map(|i| format!("away{i}"))
        .find(|key| {
            !nodes[0]
                .ranges
                .iter()
                .any(|(f, l)| (*f..=*l).contains(&key_slot(key.as_bytes())))
        })
        .unwrap();
    let tagged_a = format!("{{{mine}}}.a");
    let tagged_b = format!("{{{mine}}}.b");
    let script = "return redis.call('GET', KEYS[1])";
    let session: Vec<Vec<&str>> = vec![
        vec!["CLUSTER", "SLOTS"],
        vec!["CLUSTER", "KEYSLOT", "{user1000}.following"],
        vec!["CLUSTER", "KEYSLOT"],
        vec!["CLUSTER", "KEYSLOT", "a", "b"],
        vec!["CLUSTER", "FROB"],
        vec!["CLUSTER", "MYID", "x"],
        vec!["GET", &elsewhere],
        vec!["SET", &elsewhere, "v"],
        vec!["MGET", &mine, &elsewhere],
        vec!["DEL", &mine, &other],
        vec!["EXISTS", &mine, &other],
        vec!["WATCH", &mine, &other],
        vec!["SET", &mine, "1"],
        vec!["GET", &mine],
        vec!["MSET", &tagged_a, "x", &tagged_b, "y"],
        vec!["MGET", &tagged_a, &tagged_b, &mine],
        vec!["READONLY"],
        vec!["READWRITE"],
        vec!["SELECT", "1"],
        vec!["SELECT", "0"],
        vec!["EVAL", script, "1", &elsewhere],
        vec!["EVAL", script, "2", &mine, &other],
        vec!["EVAL", script, "1", &mine],
        vec!["MULTI"],
        vec!["SET", &mine, "2"],
        vec!["GET", &elsewhere],
        vec!["EXEC"],
        vec!["MULTI"],
        vec!["SET", &mine, "3"],
        vec!["GET", &tagged_a],
        vec!["EXEC"],
        vec!["MULTI"],
        vec!["SET", &mine, "4"],
        vec!["SET", &other, "4"],
        vec!["EXEC"],
        vec!["DEL", &mine, &tagged_a],
        vec!["DEL", &mine],
        vec!["DEL", &tagged_a, &tagged_b],
        vec!["KEYS", "*"],
        vec!["DBSIZE"],
        vec!["HELLO", "3"],
        vec!["CLUSTER", "SLOTS"],
    ];
    let (mut at_redis, mut at_cloak) = (Raw::connect(nodes[0].port), Raw::connect(ports[0]));
    let mut differences = Vec::new();
    for command in &session {
        let expected = as_cloak(&at_redis.send(command).raw, &nodes, &map);
        let got = at_cloak.send(command).raw;
        // HELLO's reply names each server's own version and client id; only its mode matters.
        let (expected, got) = if command[0] == "HELLO" {
            let mode = |text: &str| text.contains("$4\r\nmode\r\n$7\r\ncluster\r\n");
            (mode(&expected).to_string(), mode(&got).to_string())
        } else {
            (expected, got)
        };
        if expected != got {
            differences.push(format!(
                "{command:?}:\n  redis: {expected:?}\n  cloak: {got:?}"
            ));
        }
    }
    // SHARDS lists shards in no particular order; NODES has times and epochs of Redis's own.
    let shards = |port: u16, translate: bool| {
        let reply = Raw::connect(port).send(&["CLUSTER", "SHARDS"]);
        let mut shards: Vec<String> = reply
            .elements
            .iter()
            .map(|shard| {
                if translate {
                    as_cloak(&shard.raw, &nodes, &map)
                } else {
                    shard.raw.clone()
                }
            })
            .collect();
        shards.sort();
        shards
    };
    if shards(nodes[1].port, true) != shards(ports[1], false) {
        differences.push(format!(
            "CLUSTER SHARDS:\n  redis: {:?}\n  cloak: {:?}",
            shards(nodes[1].port, true),
            shards(ports[1], false)
        ));
    }
    let node_lines = |port: u16, translate: bool| {
        let reply = Raw::connect(port).send(&["CLUSTER", "NODES"]).raw;
        let text = if translate {
            as_cloak(&reply, &nodes, &map)
        } else {
            reply
        };
        let mut lines: Vec<String> = text
            .lines()
            .skip(1)
            .filter(|line| !line.is_empty())
            .map(|line| {
                let mut fields: Vec<&str> = line.split(' ').collect();
                // The bus port, ping and pong times and the epoch are each server's own.
                fields[1] = fields[1].split('@').next().unwrap();
                for field in [4, 5, 6] {
                    fields[field] = "_";
                }
                fields.join(" ")
            })
            .collect();
        lines.sort();
        lines
    };
    if node_lines(nodes[2].port, true) != node_lines(ports[2], false) {
        differences.push(format!(
            "CLUSTER NODES:\n  redis: {:?}\n  cloak: {:?}",
            node_lines(nodes[2].port, true),
            node_lines(ports[2], false)
        ));
    }
    let info = |port: u16| -> Vec<String> {
        let reply = Raw::connect(port).send(&["CLUSTER", "INFO"]).raw;
        reply.lines().skip(1).take(7).map(String::from).collect()
    };
    if info(nodes[0].port) != info(ports[0]) {
        differences.push(format!(
            "CLUSTER INFO:\n  redis: {:?}\n  cloak: {:?}",
            info(nodes[0].port),
            info(ports[0])
        ));
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

#[test]
fn redis_cli_follows_redirections_in_cluster_up_and_status_lists_every_partition() {
    let port = free_ports(3);
    let first = port.to_string();
    let _cluster = Running::start(
        &[
            "cluster",
            "up",
            "--proxies",
            "3",
            "--partitions",
            "12",
            "--port",
            &first,
            "--capacity",
            "200",
        ],
        "Cloak cluster is up",
    );
    let cli = |args: &[&str]| redis_cli(&[&["-c", "-p", &first], args].concat());
    // "foo" is slot 12182, on the third proxy: redis-cli follows the MOVED.
    assert_eq!(cli(&["SET", "foo", "bar"]), "OK");
    assert_eq!(cli(&["GET", "foo"]), "bar");
    assert_eq!(
        redis_cli(&["-p", &first, "GET", "foo"]),
        format!("MOVED 12182 127.0.0.1:{}", port + 2)
    );
    assert_eq!(cli(&["MSET", "{user1}.a", "1", "{user1}.b", "2"]), "OK");
    assert_eq!(cli(&["MGET", "{user1}.a", "{user1}.b"]), "1\n2");
    assert_eq!(
        cli(&["MGET", "foo", "{user1}.a"]),
        "CROSSSLOT Keys in request don't hash to the same slot"
    );
    let status = Command::new(CLOAK)
        .args(["cluster", "status", "--node", &format!("127.0.0.1:{first}")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{text}");
    assert_eq!(text.matches("  up  ").count(), 3, "{text}");
    assert_eq!(text.matches("  partition ").count(), 12, "{text}");
    // "foo" is in partition 8 (slots 10922-12287), the {user1} keys in partition 5.
    assert!(
        text.contains("partition 8 slots 10922-12287: 1 of 200 keys"),
        "{text}"
    );
    assert_eq!(text.matches(", health ok").count(), 12, "{text}");
    assert!(
        text.contains("partition 5 slots 6826-8191: 2 of 200 keys"),
        "{text}"
    );
}

/// Found by review: WATCH on one partition and EXEC of a transaction on another ran the
/// transaction as if nothing were watched (each partition's engine knows only its own
/// watches). It is refused now, and a WATCH within the transaction's partition still works.
#[test]
fn a_watch_on_another_partition_than_the_transaction_is_refused_not_ignored() {
    let port = free_port();
    let _cluster = Running::start(
        &[
            "cluster",
            "up",
            "--proxies",
            "1",
            "--partitions",
            "2",
            "--port",
            &port.to_string(),
            "--capacity",
            "100",
        ],
        "Cloak cluster is up",
    );
    let (mut client, mut other) = (Raw::connect(port), Raw::connect(port));
    // "b" is slot 3300 (partition 0), "a" slot 15495 and "{b}a" slot 3300.
    assert_eq!(client.send(&["WATCH", "b"]).raw, "+OK\r\n");
    assert_eq!(client.send(&["MULTI"]).raw, "+OK\r\n");
    assert_eq!(client.send(&["SET", "a", "1"]).raw, "+QUEUED\r\n");
    assert_eq!(other.send(&["SET", "b", "changed"]).raw, "+OK\r\n");
    let exec = client.send(&["EXEC"]).raw;
    assert!(exec.starts_with("-CROSSSLOT "), "{exec}");
    assert!(exec.contains("partition 0"), "{exec}");
    assert_eq!(other.send(&["GET", "a"]).raw, "$-1\r\n", "nothing ran");

    // Within one partition the watch is kept, as Redis keeps it.
    assert_eq!(client.send(&["WATCH", "b"]).raw, "+OK\r\n");
    assert_eq!(client.send(&["MULTI"]).raw, "+OK\r\n");
    assert_eq!(client.send(&["SET", "{b}a", "1"]).raw, "+QUEUED\r\n");
    assert_eq!(other.send(&["SET", "b", "again"]).raw, "+OK\r\n");
    assert_eq!(client.send(&["EXEC"]).raw, "*-1\r\n");
    // And a transaction with no watch left runs.
    assert_eq!(client.send(&["MULTI"]).raw, "+OK\r\n");
    assert_eq!(client.send(&["SET", "a", "1"]).raw, "+QUEUED\r\n");
    assert_eq!(client.send(&["EXEC"]).raw, "*1\r\n+OK\r\n");
}

/// The proxy (of `ports`) serving `key`'s slot, by the map.
fn owner(map: &ClusterMap, key: &str) -> usize {
    map.partition_of(key_slot(key.as_bytes())).proxy
}

#[test]
fn a_killed_proxy_fails_only_its_slots_and_restarts_without_losing_a_write() {
    let redis = RedisCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("{}?prefix=test:p{{partition}}:", redis.url());
    let (map, file, ports) = common::three_proxy_cluster(dir.path(), &storage);
    let address = |i: usize| map.proxies()[i].address();
    let state = |i: usize| dir.path().join(format!("state{i}")).display().to_string();
    // Six partitions' batches (two per proxy) go to one local Redis Cluster on a shared
    // machine: a slow schedule keeps them from crowding out everything else.
    let start = |i: usize| {
        start_proxy(
            &file,
            &format!("p{i}"),
            &["--state-dir", &state(i), "--batch-interval", "50ms"],
        )
    };
    let mut running: Vec<Option<Running>> = (0..3).map(|i| Some(start(i))).collect();
    let keys: Vec<String> = (0..60).map(|i| format!("key:{i}")).collect();
    let con = |proxy: usize| common::connect(ports[proxy]);
    for key in &keys {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(format!("v-{key}"))
            .query(&mut con(owner(&map, key)))
            .unwrap();
    }
    running[1].take().unwrap().kill();
    // A live proxy answers the killed one's slots with -CLUSTERDOWN naming the partition, the
    // proxy and why, once it has failed it (a few probes).
    let dead = keys.iter().find(|key| owner(&map, key) == 1).unwrap();
    let slot = key_slot(dead.as_bytes());
    let refusal = wait_for_reply(ports[0], &["GET", dead], "-CLUSTERDOWN");
    let partition = map.partition_of(slot).index;
    assert!(
        refusal.starts_with(&format!(
            "-CLUSTERDOWN Hash slot {slot} not served: partition {partition} on proxy p1 ({}): \
             the proxy does not answer since ",
            address(1)
        )),
        "{refusal}"
    );
    assert!(refusal.contains("connection refused"), "{refusal}");
    // Each proxy probes on its own clock: the third may still only suspect the dead one.
    let nodes = wait_for_reply(ports[2], &["CLUSTER", "NODES"], " master,fail - ");
    let line = nodes
        .lines()
        .find(|line| line.contains(&address(1)))
        .unwrap();
    assert!(
        line.contains(" master,fail - ") && line.contains(" disconnected"),
        "{nodes}"
    );
    let failed: u16 = map
        .hosted_by(1)
        .flat_map(|p| p.slots.iter().map(|r| r.last - r.first + 1))
        .sum();
    let info = Raw::connect(ports[2]).send(&["CLUSTER", "INFO"]).raw;
    assert!(info.contains("cluster_state:fail\r\n"), "{info}");
    assert!(
        info.contains(&format!("cluster_slots_fail:{failed}\r\n")),
        "{info}"
    );
    // A cluster client gets an error for the killed proxy's keys, and is served the others
    // (and writes to them go on).
    let client = redis::cluster::ClusterClient::builder(vec![format!("redis://{}/", address(0))])
        .retries(1)
        .min_retry_wait(10)
        .max_retry_wait(200)
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut cluster = client.get_connection().unwrap();
    for key in &keys {
        let got: redis::RedisResult<String> = redis::cmd("GET").arg(key).query(&mut cluster);
        if owner(&map, key) == 1 {
            assert!(got.is_err(), "{key} on the killed proxy: {got:?}");
            continue;
        }
        assert_eq!(got.unwrap(), format!("v-{key}"), "{key} on a live proxy");
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(format!("w-{key}"))
            .query(&mut cluster)
            .unwrap();
    }
    for key in &keys {
        let proxy = owner(&map, key);
        if proxy != 1 {
            assert_eq!(
                get_patiently(ports[proxy], key),
                format!("w-{key}"),
                "{key}"
            );
        }
    }
    let status = Command::new(CLOAK)
        .args(["cluster", "status", "--node", &address(0)])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(!status.status.success(), "{text}");
    assert!(text.contains(&format!("{}  DOWN", address(1))), "{text}");
    assert!(text.contains("sees it as fail): its slots"), "{text}");
    running[1] = Some(start(1));
    for key in &keys {
        let got = get_patiently(ports[owner(&map, key)], key);
        let written = if owner(&map, key) == 1 { "v" } else { "w" };
        assert_eq!(got, format!("{written}-{key}"), "{key} after the restart");
    }
    // Once it answers again, the others serve its slots again (by -MOVED to it).
    wait_for_reply(ports[0], &["GET", dead], "-MOVED");
    let info = wait_for_reply(ports[2], &["CLUSTER", "INFO"], "cluster_state:ok");
    assert!(info.contains("cluster_state:ok"), "{info}");
}

/// The raw reply of `command` through `port` once it contains `expected` (asked again every
/// 200 ms for up to 30 s: failing a proxy takes a few probes), or the last one.
fn wait_for_reply(port: u16, command: &[&str], expected: &str) -> String {
    let start = std::time::Instant::now();
    loop {
        let reply = Raw::connect(port).send(command).raw;
        if reply.contains(expected) || start.elapsed() > Duration::from_secs(30) {
            return reply;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_partition_whose_storage_dies_fails_only_its_slots() {
    let mut redis = [RedisServer::start(), RedisServer::start()];
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let file = dir.path().join("cluster.toml");
    std::fs::write(
        &file,
        format!(
            "[[proxy]]\nname = \"p0\"\naddress = \"127.0.0.1:{port}\"\n\
             [[partition]]\nslots = \"0-8191\"\nproxy = \"p0\"\nstorage = \"{}\"\n\
             [[partition]]\nslots = \"8192-16383\"\nproxy = \"p0\"\nstorage = \"{}\"\n",
            redis[0].url(),
            redis[1].url()
        ),
    )
    .unwrap();
    let state = dir.path().join("state").display().to_string();
    // A scheme that reads storage for every GET, so the failure shows on the first read after
    // it (Cloak's own scheme answers keys it holds at the proxy meanwhile; its batches fail).
    let metrics = format!("127.0.0.1:{}", free_port());
    let _proxy = start_proxy(
        &file,
        "p0",
        &[
            "--state-dir",
            &state,
            "--scheme",
            "unsafe",
            "--metrics",
            &metrics,
        ],
    );
    let in_partition = |partition: u16| {
        (0..)
            .map(|i| format!("key:{i}"))
            .find(|key| key_slot(key.as_bytes()) / 8192 == partition)
            .unwrap()
    };
    let (healthy, dying) = (in_partition(0), in_partition(1));
    let mut con = common::connect(port);
    for key in [&healthy, &dying] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("before")
            .query(&mut con)
            .unwrap();
    }
    // INFO and the metrics give each partition's figures.
    let info = Raw::connect(port)
        .send(&["INFO", "scheme", "latency", "storage"])
        .raw;
    for field in ["keys:1", "latency_samples:", "storage:redis://"] {
        for partition in 0..2 {
            let field = format!("partition_{partition}_{field}");
            assert!(info.contains(&field), "{field} in {info}");
        }
    }
    let mut http = TcpStream::connect(&metrics).unwrap();
    http.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut page = String::new();
    std::io::Read::read_to_string(&mut http, &mut page).unwrap();
    for partition in 0..2 {
        let line = format!("cloak_keys{{scheme=\"unsafe\",partition=\"{partition}\"}} 1\n");
        assert!(page.contains(&line), "{line} in {page}");
    }
    redis[1].kill();
    let slot = key_slot(dying.as_bytes());
    let refusal = wait_for_reply(port, &["GET", &dying], "-CLUSTERDOWN");
    assert!(
        refusal.starts_with(&format!(
            "-CLUSTERDOWN Hash slot {slot} not served: partition 1 on proxy p0 (127.0.0.1:{port}): \
             storage unreachable since "
        )),
        "{refusal}"
    );
    // The other partition serves reads and writes meanwhile.
    let _: () = redis::cmd("SET")
        .arg(&healthy)
        .arg("during")
        .query(&mut con)
        .unwrap();
    let got: String = redis::cmd("GET").arg(&healthy).query(&mut con).unwrap();
    assert_eq!(got, "during");
    let info = Raw::connect(port).send(&["CLUSTER", "INFO"]).raw;
    assert!(info.contains("cluster_state:fail\r\n"), "{info}");
    assert!(info.contains("cluster_slots_fail:8192\r\n"), "{info}");
    let partitions = Raw::connect(port).send(&["INFO", "partitions"]).raw;
    assert!(partitions.contains("partition_0_health:ok"), "{partitions}");
    assert!(
        partitions.contains("partition_1_health:fail storage unreachable since "),
        "{partitions}"
    );
    // Its storage back (with what it held), the partition serves again, nothing lost.
    redis[1].restart();
    let back = wait_for_reply(port, &["GET", &dying], "before");
    assert_eq!(back, "$6\r\nbefore\r\n");
    let info = wait_for_reply(port, &["CLUSTER", "INFO"], "cluster_state:ok");
    assert!(info.contains("cluster_state:ok"), "{info}");
}

/// GET through `port`, again on a connection error (a loaded machine can stall a freshly
/// started proxy's first answers) for up to 30 s; any answer is returned as it is.
fn get_patiently(port: u16, key: &str) -> String {
    let start = std::time::Instant::now();
    loop {
        match redis::cmd("GET").arg(key).query(&mut common::connect(port)) {
            Ok(value) => return value,
            Err(error) if error.is_io_error() && start.elapsed() < Duration::from_secs(30) => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(error) => panic!("GET {key} through port {port}: {error}"),
        }
    }
}

#[test]
fn a_proxy_started_from_another_clusters_file_is_failed_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (map, file, ports) = common::three_proxy_cluster(dir.path(), "memory");
    // The same proxies hosting the same partitions, but partition 0 ends one slot earlier: a
    // file of another cluster that only its digest tells apart.
    let first = &map.partitions()[0].slots[0];
    let second = &map.partitions()[1].slots[0];
    let text = std::fs::read_to_string(&file).unwrap();
    let other_text = text
        .replace(
            &format!("\"{}-{}\"", first.first, first.last),
            &format!("\"{}-{}\"", first.first, first.last - 1),
        )
        .replace(
            &format!("\"{}-{}\"", second.first, second.last),
            &format!("\"{}-{}\"", second.first - 1, second.last),
        );
    assert_ne!(text, other_text);
    let other = dir.path().join("other.toml");
    std::fs::write(&other, other_text).unwrap();
    let _p0 = start_proxy(&file, "p0", &[]);
    let _p1 = start_proxy(&file, "p1", &[]);
    let _p2 = start_proxy(&other, "p2", &[]);
    let key = (0..)
        .map(|i| format!("key:{i}"))
        .find(|key| owner(&map, key) == 2)
        .unwrap();
    let refusal = wait_for_reply(ports[0], &["GET", &key], "-CLUSTERDOWN");
    assert!(
        refusal.contains("on proxy p2") && refusal.contains("is of another cluster"),
        "{refusal}"
    );
    // The proxies of one file still see each other.
    let nodes = Raw::connect(ports[0]).send(&["CLUSTER", "NODES"]).raw;
    let p1 = nodes
        .lines()
        .find(|line| line.contains(&map.proxies()[1].address()))
        .unwrap();
    assert!(!p1.contains("fail"), "{nodes}");
}
