//! Moving a partition between the proxies of a cluster (`cloak cluster move`), through the
//! built binary over a real `redis-server`: refused with a clear error, and the partition still
//! serving where it was, when the target lacks its key; moved under load, with a cluster-aware
//! client (the redis crate's cluster client) writing and reading throughout and every
//! acknowledged write read back from the new host; and a proxy that was down during the move
//! learning the new map when it starts, while the proxies' health probes keep every proxy
//! answering across the move.

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cloak_cluster::{ClusterMap, key_slot};
use cloak_testkit::redis_server::RedisServer;

mod common;

use common::{CLOAK, Running, keys_of};

const KEY: &str = "8c6a1f0b2d4e6a8c0e2f4a6c8e0a2c4e6f8a0c2e4a6c8e0f2a4c6e8a0c2e4f6a";
/// Another key: a proxy started with it cannot open the others' partitions.
const OTHER_KEY: &str = "1111111111111111111111111111111111111111111111111111111111111111";
/// The cluster secret: what lets `cloak cluster move` run the admin commands.
const SECRET: &str = "5ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7";

/// Writes the cluster secret into `dir`, as `cloak keygen -o` would (readable by its owner
/// only: the proxies and the tool refuse a secret file others may read).
fn secret_file(dir: &std::path::Path) -> String {
    let path = dir.join("cluster.secret");
    common::write_private(&path, format!("{SECRET}\n"));
    path.to_str().unwrap().to_string()
}

/// The cluster under test: three proxies, six partitions on one Redis (a prefix each).
struct Cluster {
    redis: RedisServer,
    dir: tempfile::TempDir,
    file: std::path::PathBuf,
    secret: String,
    ports: Vec<u16>,
    map: ClusterMap,
}

impl Cluster {
    fn new() -> Self {
        let redis = RedisServer::start();
        let dir = tempfile::tempdir().unwrap();
        let storage = format!("{}?prefix=move:p{{partition}}:", redis.url());
        let (map, file, ports) = common::three_proxy_cluster(dir.path(), &storage);
        let secret = secret_file(dir.path());
        Self {
            redis,
            dir,
            file,
            secret,
            ports,
            map,
        }
    }

    /// Starts proxy `i` with `key`, its own state directory, the original cluster file and the
    /// cluster secret.
    fn start(&self, i: usize, key: &str) -> Running {
        self.start_with(i, key, &["--cluster-secret-file", &self.secret])
    }

    /// Starts proxy `i` with `key`, its own state directory, the original cluster file, and
    /// `extra` flags.
    fn start_with(&self, i: usize, key: &str, extra: &[&str]) -> Running {
        let args = self.args(i, extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Running::start_with_env(&args, &[("CLOAK_KEY", key)], "cloak proxy listening")
    }

    /// The arguments that start proxy `i` (see [`Cluster::start_with`]).
    fn args(&self, i: usize, extra: &[&str]) -> Vec<String> {
        let state = self.dir.path().join(format!("state{i}"));
        let mut args: Vec<String> = [
            "proxy",
            "--cluster",
            self.file.to_str().unwrap(),
            "--node",
            &format!("p{i}"),
            "--capacity",
            "200",
            "--state-dir",
            state.to_str().unwrap(),
            // Six partitions batching on a shared 2-core machine: a slow schedule.
            "--batch-interval",
            "50ms",
        ]
        .map(str::to_string)
        .to_vec();
        args.extend(extra.iter().map(|arg| arg.to_string()));
        args
    }

    /// `cloak cluster move`, through proxy 0.
    fn move_partition(&self, partition: usize, to: &str) -> (bool, String) {
        move_partition(self.ports[0], partition, to, &self.secret)
    }

    /// Keys of partition `partition`.
    fn keys_of(&self, partition: usize, count: usize) -> Vec<String> {
        keys_of(&self.map, partition, count)
    }
}

/// `cloak cluster move` through the proxy on `port` with the secret in `secret`: whether it
/// succeeded, and what it printed.
fn move_partition(port: u16, partition: usize, to: &str, secret: &str) -> (bool, String) {
    let out = Command::new(CLOAK)
        .env_remove("CLOAK_CLUSTER_SECRET_FILE")
        .args([
            "cluster",
            "move",
            "--partition",
            &partition.to_string(),
            "--to",
            to,
            "--node",
            &format!("127.0.0.1:{port}"),
            "--cluster-secret-file",
            secret,
        ])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A connection to `port` authenticated as the cluster's admin.
fn admin(port: u16) -> redis::Connection {
    let mut con = common::connect(port);
    redis::cmd("AUTH")
        .arg("cloak-admin")
        .arg(SECRET)
        .query::<()>(&mut con)
        .unwrap();
    con
}

/// What a plain connection to `port` answers to `GET key` (an error as its text).
fn get(port: u16, key: &str) -> String {
    match redis::cmd("GET")
        .arg(key)
        .query::<Option<String>>(&mut common::connect(port))
    {
        Ok(value) => value.unwrap_or_else(|| "(nil)".into()),
        Err(error) => error.to_string(),
    }
}

#[test]
fn a_partition_moves_under_load_and_a_proxy_that_missed_it_learns_the_map() {
    let cluster = Cluster::new();
    let mut proxies: Vec<Option<Running>> = vec![
        Some(cluster.start(0, KEY)),
        Some(cluster.start(1, KEY)),
        // p2 has another key: it cannot take the others' partitions.
        Some(cluster.start(2, OTHER_KEY)),
    ];
    let ports = cluster.ports.clone();
    let keys = cluster.keys_of(0, 40);
    let slot = key_slot(keys[0].as_bytes());

    // Refused: p2 lacks partition 0's key. Nothing changed: p0 still serves it.
    let _: () = redis::cmd("SET")
        .arg(&keys[0])
        .arg("before")
        .query(&mut common::connect(ports[0]))
        .unwrap();
    let (moved, text) = cluster.move_partition(0, "p2");
    assert!(!moved, "{text}");
    assert!(
        text.contains("p2 cannot take partition 0; nothing changed")
            && text.contains("is not the one its elements are sealed with"),
        "{text}"
    );
    assert_eq!(get(ports[0], &keys[0]), "before");

    // Nobody can hand p1 the partition while p0 serves it: an ACQUIRE with the map one move
    // ahead is refused (p0 has not released it), and so is a map that is not one move ahead.
    let known: String = redis::cmd("CLOAK")
        .arg("MAP")
        .query(&mut admin(ports[1]))
        .unwrap();
    let known = ClusterMap::from_toml(&known).unwrap();
    let key_id: String = redis::cmd("CLOAK")
        .arg("KEYID")
        .arg(0)
        .query(&mut admin(ports[1]))
        .unwrap();
    let acquire = |map: &ClusterMap| {
        redis::cmd("CLOAK")
            .arg("ACQUIRE")
            .arg(0)
            .arg(&key_id)
            .arg(map.to_toml())
            .query::<()>(&mut admin(ports[1]))
            .unwrap_err()
            .to_string()
    };
    let forged = known.moved(0, "p1").unwrap();
    let refused = acquire(&forged);
    assert!(refused.contains("p0 still serves partition 0"), "{refused}");
    let jumped = forged.moved(2, "p0").unwrap();
    let refused = acquire(&jumped);
    assert!(refused.contains("not this proxy's map"), "{refused}");
    let absurd = known.clone().with_epochs(u64::MAX, &[]);
    let refused = redis::cmd("CLOAK")
        .arg("ADOPT")
        .arg(absurd.to_toml())
        .query::<()>(&mut admin(ports[1]))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("beyond any a cluster reaches"),
        "{refused}"
    );
    assert_eq!(get(ports[0], &keys[0]), "before");
    assert!(get(ports[1], &keys[0]).contains(&format!("127.0.0.1:{}", ports[0])));

    // p2 goes down: it misses the move and must learn it when it starts.
    proxies[2].take().unwrap().kill();

    // Under load: one client writes and reads partition 0's keys throughout the move.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, keys, seed) = (stop.clone(), keys.clone(), ports[0]);
        std::thread::spawn(move || write_and_read(&keys, seed, &stop))
    };
    std::thread::sleep(Duration::from_secs(2));
    let (moved, text) = cluster.move_partition(0, "p1");
    assert!(moved, "{text}");
    assert!(
        text.contains("partition 0 moved from p0 to p1 (map epoch 1)"),
        "{text}"
    );
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::SeqCst);
    let load = writer.join().unwrap();
    assert!(
        load.wrong.is_empty(),
        "wrong answers during the move: {:?}",
        load.wrong
    );
    assert!(
        load.acknowledged_after_move > 0,
        "no write was acknowledged after the move (errors: {:?})",
        load.errors
    );

    // Every acknowledged write reads back from the new host; the old one redirects there.
    for (key, value) in &load.acknowledged {
        assert_eq!(&get(ports[1], key), value, "{key} on the new host");
    }
    let answer = get(ports[0], &keys[0]);
    assert!(
        answer.contains(&format!("{slot} 127.0.0.1:{}", ports[1])),
        "the old host answers {answer:?}"
    );

    // p2 starts from the original file, and learns from the others that p1 has partition 0.
    proxies[2] = Some(cluster.start(2, OTHER_KEY));
    let answer = get(ports[2], &keys[0]);
    assert!(
        answer.contains(&format!("{slot} 127.0.0.1:{}", ports[1])),
        "p2 redirects partition 0's slot to {answer:?}, not to p1"
    );

    // The health probes follow the move: well past the node timeout (3 s) no proxy flags
    // another, and the old host still redirects the moved slot rather than refusing it.
    std::thread::sleep(Duration::from_secs(5));
    for port in &ports {
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut common::connect(*port))
            .unwrap();
        assert!(
            !nodes.contains("fail"),
            "the proxy on {port} flags another after the move:\n{nodes}"
        );
    }
    let answer = get(ports[0], &keys[0]);
    assert!(
        answer.contains(&format!("{slot} 127.0.0.1:{}", ports[1])),
        "after the move settled the old host answers {answer:?}"
    );

    // The map p1 keeps is signed: changed on disk (partition 0 given back to p0, its MAC
    // left as it was), it stops p1's next start, named, instead of being believed.
    proxies[1].take().unwrap().kill();
    let kept = cluster.dir.path().join("state1").join("cluster.toml");
    let text = std::fs::read_to_string(&kept).unwrap();
    assert!(text.starts_with("mac = "), "{text}");
    let tampered = text.replacen("proxy = \"p1\"", "proxy = \"p0\"", 1);
    assert_ne!(tampered, text);
    std::fs::write(&kept, tampered).unwrap();
    let args = cluster.args(1, &["--cluster-secret-file", &cluster.secret]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let refused = common::fails(&args);
    assert!(
        refused.contains(kept.to_str().unwrap())
            && refused.contains("(epoch 1) fails its MAC check under this cluster's secret"),
        "{refused}"
    );
}

#[test]
fn a_move_left_unfinished_settles_by_itself_and_no_other_move_starts_meanwhile() {
    let cluster = Cluster::new();
    let _proxies: Vec<Running> = (0..3).map(|i| cluster.start(i, KEY)).collect();
    let ports = &cluster.ports;
    let zero = &cluster.keys_of(0, 1)[0];
    let one = &cluster.keys_of(1, 1)[0];
    for key in [zero, one] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("before")
            .query(&mut common::connect(ports[0]))
            .unwrap();
    }
    let command = |port: u16, args: &[&str]| -> Result<(), String> {
        redis::cmd(args[0])
            .arg(&args[1..])
            .query::<()>(&mut admin(port))
            .map_err(|error| error.to_string())
    };
    let map: String = redis::cmd("CLOAK")
        .arg("MAP")
        .query(&mut common::connect(ports[0]))
        .unwrap();
    let epoch0 = ClusterMap::from_toml(&map).unwrap();

    // A move's tool stops right after p0 released partition 0 to p1.
    let epoch1 = epoch0.moved(0, "p1").unwrap();
    command(ports[0], &["CLOAK", "RELEASE", "0", &epoch1.to_toml()]).unwrap();
    // Meanwhile no other hand-off starts on p0, and the tool refuses any move.
    let second = epoch1.moved(2, "p0").unwrap();
    let key_id: String = redis::cmd("CLOAK")
        .arg("KEYID")
        .arg(2)
        .query(&mut admin(ports[0]))
        .unwrap();
    let acquire = ["CLOAK", "ACQUIRE", "2", &key_id, &second.to_toml()];
    let refused = command(ports[0], &acquire).unwrap_err();
    assert!(
        refused.contains("partition 0 is being handed over on this proxy"),
        "{refused}"
    );
    let (moved, text) = move_partition(ports[1], 2, "p0", &cluster.secret);
    assert!(
        !moved && text.contains("partition 0") && text.contains("in flight"),
        "{text}"
    );
    // p1 never takes it: p0 takes it back by itself, under the next epoch.
    let back = wait_for(|| get(ports[0], zero) == "before");
    assert!(
        back,
        "p0 never took partition 0 back: {}",
        get(ports[0], zero)
    );
    let map: String = redis::cmd("CLOAK")
        .arg("MAP")
        .query(&mut common::connect(ports[0]))
        .unwrap();
    let epoch2 = ClusterMap::from_toml(&map).unwrap();
    assert_eq!(epoch2, epoch1.moved(0, "p0").unwrap());

    // Another stops after p2 took partition 1 and before anyone adopted the map: p0 sees that
    // p2 serves it and adopts the map, redirecting instead of answering -TRYAGAIN for good.
    for port in &ports[1..] {
        command(*port, &["CLOAK", "ADOPT", &epoch2.to_toml()]).unwrap();
    }
    let epoch3 = epoch2.moved(1, "p2").unwrap();
    command(ports[0], &["CLOAK", "RELEASE", "1", &epoch3.to_toml()]).unwrap();
    let key_id: String = redis::cmd("CLOAK")
        .arg("KEYID")
        .arg(1)
        .query(&mut admin(ports[0]))
        .unwrap();
    command(
        ports[2],
        &["CLOAK", "ACQUIRE", "1", &key_id, &epoch3.to_toml()],
    )
    .unwrap();
    let redirected = wait_for(|| get(ports[0], one).contains(&format!("127.0.0.1:{}", ports[2])));
    assert!(redirected, "p0 answers {}", get(ports[0], one));
    assert_eq!(get(ports[2], one), "before");
}

/// How long the source of the move in the next test waits for its drain.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

#[test]
fn a_move_whose_storage_does_not_answer_fails_in_time_and_the_partition_serves_again() {
    let cluster = Cluster::new();
    let release = format!("{}s", RELEASE_TIMEOUT.as_secs());
    let extra = [
        "--cluster-secret-file",
        &cluster.secret,
        "--release-timeout",
        &release,
    ];
    let _p0 = cluster.start_with(0, KEY, &extra);
    let _others: Vec<Running> = (1..3).map(|i| cluster.start(i, KEY)).collect();
    let ports = &cluster.ports;
    let key = &cluster.keys_of(0, 1)[0];
    let set = |value: &str| {
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query::<()>(&mut common::connect(ports[0]))
            .unwrap();
    };
    set("before");
    let epoch = |port: u16| {
        let map: String = redis::cmd("CLOAK")
            .arg("MAP")
            .query(&mut common::connect(port))
            .unwrap();
        ClusterMap::from_toml(&map).unwrap().epoch()
    };
    let epoch0 = epoch(ports[0]);

    // Storage stops taking writes (reads, and so the target's check that it reaches storage,
    // still pass) for longer than the release may wait; the write is acknowledged (from the
    // journal) but cannot reach storage.
    let pause = RELEASE_TIMEOUT * 4;
    cluster
        .redis
        .cli(&["CLIENT", "PAUSE", &pause.as_millis().to_string(), "WRITE"]);
    let paused = Instant::now();
    set("after");
    let (moved, text) = cluster.move_partition(0, "p1");
    let took = paused.elapsed();
    assert!(!moved, "{text}");
    assert!(
        took < pause,
        "the move failed only after {took:?}, once storage answered again: {text}"
    );
    assert!(
        text.contains("the move failed: p0 did not release partition 0")
            && text.contains(&format!(
                "did not drain into storage within {RELEASE_TIMEOUT:?}"
            ))
            && text.contains("acknowledged writes not yet in storage")
            && !text.contains(" 0 acknowledged writes not yet in storage"),
        "{text}"
    );
    assert_eq!(epoch(ports[0]), epoch0, "the map changed");

    // Storage answers again: p0 serves the partition again, the acknowledged write in it, and
    // the other proxies still send its keys to p0.
    cluster.redis.cli(&["CLIENT", "UNPAUSE"]);
    let served = wait_for(|| get(ports[0], key) == "after");
    assert!(
        served,
        "p0 does not serve partition 0 again: {}",
        get(ports[0], key)
    );
    set("again");
    assert_eq!(get(ports[0], key), "again");
    let redirected = get(ports[1], key);
    assert!(
        redirected.contains(&format!("127.0.0.1:{}", ports[0])),
        "p1 sends partition 0's keys to {redirected:?}, not to p0"
    );
    assert_eq!(epoch(ports[0]), epoch0, "the map changed");
}

#[test]
fn proxies_reach_each_other_over_tls_and_a_peer_without_the_clusters_ca_is_refused_by_name() {
    let cluster = Cluster::new();
    let ours = common::certs(&cluster.dir.path().join("ours"));
    let theirs = common::certs(&cluster.dir.path().join("theirs"));
    let file = |dir: &std::path::Path, name: &str| dir.join(name).display().to_string();
    let (cert, key, ca) = (
        file(&ours, "server.pem"),
        file(&ours, "server.key"),
        file(&ours, "ca.pem"),
    );
    let serve_tls = ["--tls-cert", &cert, "--tls-key", &key];
    let secret = ["--cluster-secret-file", cluster.secret.as_str()];
    // Clients must use TLS, so the proxies must reach each other over it too.
    let args = cluster.args(0, &[&serve_tls[..], &secret[..]].concat());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let refused = common::fails(&args);
    assert!(
        refused.contains("must be reached over TLS too: give --cluster-ca"),
        "{refused}"
    );
    fn with_ca<'a>(tls: &[&'a str], secret: &[&'a str], ca: &'a str) -> Vec<&'a str> {
        [tls, secret, &["--cluster-ca", ca]].concat()
    }
    let _p0 = cluster.start_with(0, KEY, &with_ca(&serve_tls, &secret, &ca));
    let _p1 = cluster.start_with(1, KEY, &with_ca(&serve_tls, &secret, &ca));
    // p2 trusts another CA: it cannot tell the others are of its cluster.
    let stranger_ca = file(&theirs, "ca.pem");
    let _p2 = cluster.start_with(2, KEY, &with_ca(&serve_tls, &secret, &stranger_ca));
    let ports = &cluster.ports;
    let client = |port: u16| common::rust_client(port, &ours.join("ca.pem"));
    let zero = &cluster.keys_of(0, 1)[0];
    let _: () = redis::cmd("SET")
        .arg(zero)
        .arg("before")
        .query(&mut client(ports[0]))
        .unwrap();

    // Past the node timeout (3 s): p0 and p1 probe each other (and p2) over TLS; p2 has failed
    // them, and says why.
    std::thread::sleep(Duration::from_secs(5));
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut client(ports[0]))
        .unwrap();
    assert!(!nodes.contains("fail"), "p0 flags a proxy:\n{nodes}");
    let refused = redis::cmd("GET")
        .arg(zero)
        .query::<Option<String>>(&mut client(ports[2]))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("partition 0 on proxy p0")
            && refused.contains("TLS handshake failed")
            && refused.contains("is it of this cluster's CA?"),
        "{refused}"
    );

    // A move over TLS (the secret with it); the tool without the CA cannot reach the proxies.
    let node = format!("127.0.0.1:{}", ports[0]);
    let tool = |extra: &[&str]| {
        let (moved, text, _) = move_tool(&node, &cluster.secret, extra);
        (moved, text)
    };
    let (moved, text) = tool(&[]);
    assert!(!moved && text.contains("cannot read the map"), "{text}");
    let (moved, text) = tool(&["--cluster-ca", &ca]);
    assert!(moved, "{text}");
    let redirected = redis::cmd("GET")
        .arg(zero)
        .query::<Option<String>>(&mut client(ports[0]))
        .unwrap_err()
        .to_string();
    assert!(
        redirected.contains(&format!("127.0.0.1:{}", ports[1])),
        "{redirected}"
    );
    let value: Option<String> = redis::cmd("GET")
        .arg(zero)
        .query(&mut client(ports[1]))
        .unwrap();
    assert_eq!(value.as_deref(), Some("before"));
}

/// Whether `done` holds within 30 s (checked every 200 ms).
fn wait_for(mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

#[test]
fn only_the_clusters_admin_may_move_partitions_not_a_client_with_the_password() {
    let cluster = Cluster::new();
    let with_secret = ["--password", "pw", "--cluster-secret-file", &cluster.secret];
    let _p0 = cluster.start_with(0, KEY, &with_secret);
    let _p1 = cluster.start_with(1, KEY, &with_secret);
    // p2 has no cluster secret: it has no admin at all.
    let _p2 = cluster.start_with(2, KEY, &["--password", "pw"]);
    let ports = &cluster.ports;
    let client = |port: u16| {
        let mut con = common::connect(port);
        redis::cmd("AUTH").arg("pw").query::<()>(&mut con).unwrap();
        con
    };
    let answer = |con: &mut redis::Connection, args: &[&str]| -> String {
        match redis::cmd(args[0]).arg(&args[1..]).query::<String>(con) {
            Ok(value) => value,
            Err(error) => error.to_string(),
        }
    };
    let mut con = client(ports[1]);
    let map: String = redis::cmd("CLOAK").arg("MAP").query(&mut con).unwrap();
    let moved = ClusterMap::from_toml(&map)
        .unwrap()
        .moved(0, "p1")
        .unwrap()
        .to_toml();
    let attempts: [&[&str]; 5] = [
        &["CLOAK", "KEYID", "0"],
        &["CLOAK", "CHECK", "0", "x"],
        &["CLOAK", "RELEASE", "0", &moved],
        &["CLOAK", "ACQUIRE", "0", "x", &moved],
        &["CLOAK", "ADOPT", &moved],
    ];
    let refused = |con: &mut redis::Connection| {
        for args in attempts {
            let got = answer(con, args);
            let name = args[1].to_lowercase();
            assert!(
                got.to_uppercase().contains("NOPERM")
                    && got.contains(&format!(
                        "User default has no permissions to run the 'cloak|{name}' command"
                    )),
                "{args:?} answered {got}"
            );
        }
    };
    refused(&mut con);
    // A wrong secret is refused as Redis refuses a wrong password, and changes nothing.
    let wrong = answer(&mut con, &["AUTH", "cloak-admin", "not-the-secret-at-all"]);
    assert!(wrong.contains("WRONGPASS"), "{wrong}");
    refused(&mut con);
    // The admin may; RESET and AUTH as the client take the right away again.
    let fine = answer(&mut con, &["AUTH", "cloak-admin", SECRET]);
    assert_eq!(fine, "OK");
    let key_id = answer(&mut con, &["CLOAK", "KEYID", "0"]);
    assert_eq!(key_id.len(), 16, "{key_id}");
    assert_eq!(answer(&mut con, &["AUTH", "pw"]), "OK");
    refused(&mut con);
    answer(&mut con, &["AUTH", "cloak-admin", SECRET]);
    answer(&mut con, &["RESET"]);
    answer(&mut con, &["AUTH", "pw"]);
    refused(&mut con);
    // A proxy without a cluster secret has no admin.
    let none = answer(&mut client(ports[2]), &["AUTH", "cloak-admin", SECRET]);
    assert!(none.contains("WRONGPASS"), "{none}");

    // The tool with a wrong secret is refused at its first step; nothing moved.
    let wrong_file = cluster.dir.path().join("wrong.secret");
    common::write_private(&wrong_file, "not-the-secret-at-all\n");
    let (moved_it, text) = move_partition(ports[0], 0, "p1", wrong_file.to_str().unwrap());
    assert!(!moved_it && text.contains("WRONGPASS"), "{text}");
    let key = &cluster.keys_of(0, 1)[0];
    let mut on_p0 = client(ports[0]);
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("v")
        .query(&mut on_p0)
        .unwrap();
    // With the secret it moves (p2, which has no admin, is named as not taking the new map).
    let (moved_it, text) = cluster.move_partition(0, "p1");
    assert!(moved_it, "{text}");
    assert!(text.contains("p2 at 127.0.0.1"), "{text}");
    let redirected = answer(&mut on_p0, &["GET", key]);
    assert!(
        redirected.contains(&format!("127.0.0.1:{}", ports[1])),
        "{redirected}"
    );
    assert_eq!(answer(&mut client(ports[1]), &["GET", key]), "v");
}

#[test]
fn a_move_to_a_proxy_that_cannot_reach_the_storage_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Partitions 0 and 1 (p0's) each on a cloak server that admits only proxies with its
    // storage secret; the others in their proxies' memory. p1 has no secret.
    let secret = dir.path().join("storage.secret");
    let made = Command::new(CLOAK).arg("keygen").output().unwrap();
    common::write_private(&secret, made.stdout);
    let secret = secret.to_str().unwrap();
    let servers: Vec<(Running, u16)> = (0..2)
        .map(|_| {
            let port = common::free_port();
            let listen = format!("127.0.0.1:{port}");
            let args = [
                "server",
                "--listen",
                &listen,
                "--storage-secret-file",
                secret,
            ];
            (Running::start(&args, "listening"), port)
        })
        .collect();
    let ports: Vec<u16> = (0..3).map(|_| common::free_port()).collect();
    let mut file = String::new();
    for (i, port) in ports.iter().enumerate() {
        file += &format!("[[proxy]]\nname = \"p{i}\"\naddress = \"127.0.0.1:{port}\"\n");
    }
    let map = ClusterMap::even(
        &(0..3)
            .map(|i| (format!("p{i}"), format!("127.0.0.1:{}", ports[i])))
            .collect::<Vec<_>>(),
        6,
        "memory",
    )
    .unwrap();
    for partition in map.partitions() {
        let slots: Vec<String> = partition.slots.iter().map(|r| r.to_string()).collect();
        let storage = match servers.get(partition.index) {
            Some((_, port)) => format!("tcp://127.0.0.1:{port}"),
            None => "memory".into(),
        };
        file += &format!(
            "[[partition]]\nslots = \"{}\"\nproxy = \"p{}\"\nstorage = \"{storage}\"\n",
            slots.join(","),
            partition.proxy
        );
    }
    let file_path = dir.path().join("cluster.toml");
    std::fs::write(&file_path, file).unwrap();
    let cluster_secret = secret_file(dir.path());
    let start = |i: usize, extra: &[&str]| {
        let mut args = vec!["proxy", "--cluster", file_path.to_str().unwrap(), "--node"];
        let node = format!("p{i}");
        args.push(&node);
        args.extend_from_slice(&["--capacity", "200"]);
        args.extend_from_slice(&["--cluster-secret-file", &cluster_secret]);
        args.extend_from_slice(extra);
        Running::start_with_env(&args, &[("CLOAK_KEY", KEY)], "cloak proxy listening")
    };
    let _p0 = start(0, &["--storage-secret-file", secret]);
    let _p1 = start(1, &[]);
    let key = keys_of(&map, 0, 1).remove(0);
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("before")
        .query(&mut common::connect(ports[0]))
        .unwrap();

    let (moved, text) = move_partition(ports[0], 0, "p1", &cluster_secret);
    assert!(!moved, "{text}");
    assert!(
        text.contains("p1 cannot take partition 0; nothing changed")
            && text.contains("cannot reach partition 0's storage")
            && text.contains("requires a storage secret"),
        "{text}"
    );
    // Still served where it was, and writable.
    assert_eq!(get(ports[0], &key), "before");
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("after")
        .query(&mut common::connect(ports[0]))
        .unwrap();
    assert_eq!(get(ports[0], &key), "after");
    let redirected = get(ports[1], &key);
    assert!(
        redirected.contains(&format!("127.0.0.1:{}", ports[0])),
        "p1 sends partition 0's keys to {redirected:?}, not to p0"
    );
}

/// What the client saw while the partition moved.
struct Load {
    /// The last acknowledged value of each key (keys whose last write failed are left out: it
    /// may or may not have happened).
    acknowledged: HashMap<String, String>,
    acknowledged_after_move: usize,
    /// A read that did not return the value just acknowledged.
    wrong: Vec<String>,
    errors: Vec<String>,
}

/// Writes and reads `keys` in turn through a cluster client seeded with `seed` until `stop`.
fn write_and_read(keys: &[String], seed: u16, stop: &AtomicBool) -> Load {
    let client =
        redis::cluster::ClusterClientBuilder::new(vec![format!("redis://127.0.0.1:{seed}/")])
            .response_timeout(Duration::from_secs(5))
            // A hand-off answers -TRYAGAIN after a second; a few retries ride it out, and a
            // move that never finishes fails the test instead of hanging it.
            .retries(5)
            .max_retry_wait(500)
            .build()
            .unwrap();
    let mut con = client.get_connection().unwrap();
    let mut load = Load {
        acknowledged: HashMap::new(),
        acknowledged_after_move: 0,
        wrong: Vec::new(),
        errors: Vec::new(),
    };
    let started = Instant::now();
    let mut round = 0;
    while !stop.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(60) {
        for key in keys {
            round += 1;
            let value = format!("v{round}");
            match redis::cmd("SET").arg(key).arg(&value).query::<()>(&mut con) {
                Ok(()) => {
                    load.acknowledged.insert(key.clone(), value.clone());
                }
                Err(error) => {
                    load.acknowledged.remove(key);
                    load.errors.push(format!("SET {key}: {error}"));
                    continue;
                }
            }
            match redis::cmd("GET").arg(key).query::<Option<String>>(&mut con) {
                Ok(Some(got)) if got == value => {}
                Ok(got) => load.wrong.push(format!("GET {key}: {got:?}, not {value}")),
                Err(error) => load.errors.push(format!("GET {key}: {error}")),
            }
        }
        if cluster_moved(seed) {
            load.acknowledged_after_move += 1;
        }
    }
    load
}

/// Whether the proxy at `seed` already redirects partition 0's slots (slot 0) elsewhere.
fn cluster_moved(seed: u16) -> bool {
    let slots: redis::Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut common::connect(seed))
        .unwrap();
    !starts_with_slot_zero_on(&slots, seed)
}

/// Whether `CLUSTER SLOTS` gives slot 0 to the proxy on `port`.
fn starts_with_slot_zero_on(slots: &redis::Value, port: u16) -> bool {
    let redis::Value::Array(ranges) = slots else {
        return false;
    };
    ranges.iter().any(|range| {
        let redis::Value::Array(fields) = range else {
            return false;
        };
        matches!(
            (&fields[0], &fields[2]),
            (redis::Value::Int(0), redis::Value::Array(node))
                if matches!(node.get(1), Some(redis::Value::Int(p)) if *p == i64::from(port))
        )
    })
}

/// How [`FakeProxy`] answers `CLOAK.HEALTH` in the place of a proxy (a man in the middle, or
/// whoever took its address).
#[derive(Clone, Copy, Debug)]
enum Answer {
    /// A report that serves nothing, unsigned.
    Unsigned,
    /// The same, with a made-up MAC.
    MadeUpMac,
    /// Passes the question on to the proxy on this port and its answer back, as it is: a real
    /// proxy's signed answer, to whatever nonce was asked.
    Relay(u16),
}

/// Something on a proxy's address that speaks RESP: `AUTH` is accepted, `CLOAK.HEALTH` is
/// answered as [`Answer`] says (a report naming the cluster digest `digest`), `CLOAK MAP` with
/// `map` (if any); anything else is an error.
struct FakeProxy {
    port: u16,
    answer: Arc<std::sync::Mutex<Answer>>,
}

impl FakeProxy {
    /// Listens on a free port, and answers once [`FakeProxy::serve`] says what.
    fn bind() -> (std::net::TcpListener, u16) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        (listener, port)
    }

    fn serve(listener: std::net::TcpListener, digest: String, map: Option<String>) -> Self {
        let port = listener.local_addr().unwrap().port();
        let answer = Arc::new(std::sync::Mutex::new(Answer::Unsigned));
        let shared = answer.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (answer, digest, map) = (shared.clone(), digest.clone(), map.clone());
                std::thread::spawn(move || serve_fake(stream, &answer, &digest, map.as_deref()));
            }
        });
        Self { port, answer }
    }

    fn answer(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }
}

/// Reads one RESP array of bulk strings (a client's command), or `None` at the end.
fn read_command(reader: &mut impl std::io::BufRead) -> Option<Vec<String>> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let count: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let length: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut arg = vec![0; length + 2];
        std::io::Read::read_exact(reader, &mut arg).ok()?;
        arg.truncate(length);
        args.push(String::from_utf8(arg).ok()?);
    }
    Some(args)
}

/// A command as a client sends it.
fn encode(args: &[String]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len());
    for arg in args {
        out += &format!("${}\r\n{arg}\r\n", arg.len());
    }
    out.into_bytes()
}

fn bulk(text: &str) -> Vec<u8> {
    format!("${}\r\n{text}\r\n", text.len()).into_bytes()
}

/// Asks the proxy on `port` `args` and returns its answer's bytes (a bulk string or a line).
fn relay(port: u16, args: &[String]) -> Vec<u8> {
    use std::io::{BufRead, Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(&encode(args)).unwrap();
    let mut reader = std::io::BufReader::new(stream);
    let mut head = String::new();
    reader.read_line(&mut head).unwrap();
    let mut answer = head.clone().into_bytes();
    if let Some(length) = head.trim_end().strip_prefix('$') {
        let mut body = vec![0; length.parse::<usize>().unwrap() + 2];
        reader.read_exact(&mut body).unwrap();
        answer.extend(body);
    }
    answer
}

fn serve_fake(
    stream: std::net::TcpStream,
    answer: &std::sync::Mutex<Answer>,
    digest: &str,
    map: Option<&str>,
) {
    use std::io::Write;
    let mut writer = stream.try_clone().unwrap();
    let mut reader = std::io::BufReader::new(stream);
    while let Some(args) = read_command(&mut reader) {
        let name = args[0].to_uppercase();
        let serves_nothing = format!("epoch 0 cluster {digest}\n");
        let reply = match (name.as_str(), args.get(1).map(|a| a.to_uppercase())) {
            ("AUTH", _) => b"+OK\r\n".to_vec(),
            ("CLOAK", Some(sub)) if sub == "MAP" && map.is_some() => bulk(map.unwrap_or("")),
            ("CLOAK.HEALTH", _) => match *answer.lock().unwrap() {
                Answer::Unsigned => bulk(&serves_nothing),
                Answer::MadeUpMac => bulk(&format!("{serves_nothing}mac {}\n", "ab".repeat(32))),
                Answer::Relay(port) => relay(port, &args),
            },
            _ => b"-ERR not here\r\n".to_vec(),
        };
        if writer.write_all(&reply).is_err() {
            return;
        }
    }
}

/// The bug this guards against: a proxy took a partition on the word of whoever answered at its
/// owner's address. Here a fake answers at p0's address in the cluster file (p0 itself serves on
/// another port, `--listen`), saying p0 serves nothing: unsigned, with a made-up MAC, or with
/// another proxy's real signed answer to p1's nonce. p1 must refuse ACQUIRE every time, naming
/// p0 and why, and p0 must keep serving. Relaying p0's own answer works: the MAC is p0's, end
/// to end, so a move goes through even over a link nobody trusts.
#[test]
fn an_owner_whose_health_answer_does_not_verify_is_not_taken_over() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("{}?prefix=forge:p{{partition}}:", redis.url());
    let ports: Vec<u16> = (0..3).map(|_| common::free_port()).collect();
    // The map puts p0 where the fake listens; p0 itself listens on ports[0] (`--listen`).
    let (listener, fake_port) = FakeProxy::bind();
    let proxies: Vec<(String, String)> = (0..3)
        .map(|i| {
            let port = if i == 0 { fake_port } else { ports[i] };
            (format!("p{i}"), format!("127.0.0.1:{port}"))
        })
        .collect();
    let map = ClusterMap::even(&proxies, 6, &storage).unwrap();
    // The fake's report names the cluster's digest and epoch: only its MAC can give it away.
    let fake = FakeProxy::serve(listener, map.cluster_digest(), None);
    assert_eq!(fake.port, fake_port);
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, map.to_toml()).unwrap();
    let secret = secret_file(dir.path());
    let start = |i: usize| {
        let listen = format!("127.0.0.1:{}", ports[i]);
        let state = dir.path().join(format!("state{i}"));
        let args = [
            "proxy",
            "--cluster",
            file.to_str().unwrap(),
            "--node",
            &format!("p{i}"),
            "--listen",
            &listen,
            "--capacity",
            "200",
            "--state-dir",
            state.to_str().unwrap(),
            "--batch-interval",
            "50ms",
            "--cluster-secret-file",
            &secret,
        ];
        Running::start_with_env(&args, &[("CLOAK_KEY", KEY)], "cloak proxy listening")
    };
    let _proxies: Vec<Running> = (0..3).map(start).collect();
    let key = keys_of(&map, 0, 1).remove(0);
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("before")
        .query(&mut common::connect(ports[0]))
        .unwrap();
    let key_id: String = redis::cmd("CLOAK")
        .arg("KEYID")
        .arg(0)
        .query(&mut admin(ports[1]))
        .unwrap();
    let next = map.moved(0, "p1").unwrap();
    let acquire = || {
        redis::cmd("CLOAK")
            .arg("ACQUIRE")
            .arg(0)
            .arg(&key_id)
            .arg(next.to_toml())
            .query::<()>(&mut admin(ports[1]))
            .map_err(|error| error.to_string())
    };
    let cases = [
        (Answer::Unsigned, "its health answer is unsigned"),
        (Answer::MadeUpMac, "its health answer fails its MAC check"),
        // p2's real answer, signed for p1's nonce, but by p2: not p0's.
        (
            Answer::Relay(ports[2]),
            "its health answer fails its MAC check",
        ),
    ];
    for (answer, why) in cases {
        fake.answer(answer);
        let refused = acquire().expect_err("p1 took partition 0 on a forged answer");
        assert!(
            refused.contains("cannot confirm that p0 has let partition 0 go")
                && refused.contains(why),
            "{answer:?}: {refused}"
        );
        // p0 still serves it; p1 does not.
        assert_eq!(get(ports[0], &key), "before");
        let on_p1 = get(ports[1], &key);
        let to_p0 = format!("{} 127.0.0.1:{fake_port}", key_slot(key.as_bytes()));
        assert!(on_p1.contains(&to_p0), "{answer:?}: {on_p1}");
    }

    // p0's own signed answer, relayed: believed (p0 serves it, so still refused, for that).
    fake.answer(Answer::Relay(ports[0]));
    let refused = acquire().unwrap_err();
    assert!(refused.contains("p0 still serves partition 0"), "{refused}");
    // Once p0 has let it go, p1 takes it on p0's signed word, through the same relay.
    let _: () = redis::cmd("CLOAK")
        .arg("RELEASE")
        .arg(0)
        .arg(next.to_toml())
        .query(&mut admin(ports[0]))
        .unwrap();
    acquire().expect("p1 takes partition 0 once p0 signed that it let it go");
    assert_eq!(get(ports[1], &key), "before");
}

/// `cloak cluster move --partition 0 --to p1` through `node`, with the secret in `secret` and
/// `extra` flags: whether it succeeded, what it printed, and how long it took.
fn move_tool(node: &str, secret: &str, extra: &[&str]) -> (bool, String, Duration) {
    let started = Instant::now();
    let out = Command::new(CLOAK)
        .env_remove("CLOAK_CLUSTER_SECRET_FILE")
        .args([
            "cluster",
            "move",
            "--partition",
            "0",
            "--to",
            "p1",
            "--node",
            node,
        ])
        .args(["--cluster-secret-file", secret])
        .args(extra)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text, started.elapsed())
}

/// This machine's address on its way to 10.0.0.0/8, if it has one that is not loopback (no
/// packet is sent: connecting a UDP socket only picks a route).
fn non_loopback_ip() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("10.255.255.1:1").ok()?;
    Some(socket.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
}

#[test]
fn the_move_tool_sends_the_secret_in_the_clear_only_to_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path());
    // Refused before any connection: 10.255.255.1 is not routed, and a connection attempt
    // would wait for the tool's 5 s timeout.
    let (moved, text, took) = move_tool("10.255.255.1:1", &secret, &[]);
    assert!(!moved, "{text}");
    assert!(
        text.contains(
            "refusing to send the password of cloak-admin in the clear to 10.255.255.1:1 \
             (10.255.255.1, not a loopback address)"
        ) && text.contains("give --cluster-ca FILE")
            && text.contains("--allow-plaintext-secret"),
        "{text}"
    );
    assert!(
        took < Duration::from_secs(4),
        "took {took:?}: it tried to connect"
    );

    // Where this machine has a non-loopback address, a listener there shows what reaches it:
    // nothing without the flag; with it, the secret in the clear (what the flag warns of).
    let Some(ip) = non_loopback_ip() else {
        eprintln!("no non-loopback address here: the listener half is skipped");
        return;
    };
    let Ok(listener) = std::net::TcpListener::bind((ip, 0)) else {
        eprintln!("cannot listen on {ip}: the listener half is skipped");
        return;
    };
    let node = listener.local_addr().unwrap().to_string();
    let (moved, text, _) = move_tool(&node, &secret, &[]);
    assert!(!moved && text.contains("not a loopback address"), "{text}");
    listener.set_nonblocking(true).unwrap();
    assert!(
        listener.accept().is_err(),
        "the tool connected to {node} without --allow-plaintext-secret"
    );
    listener.set_nonblocking(false).unwrap();
    let seen = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut first = vec![0; 512];
        let read = std::io::Read::read(&mut stream, &mut first).unwrap();
        String::from_utf8_lossy(&first[..read]).to_string()
    });
    let (moved, text, _) = move_tool(&node, &secret, &["--allow-plaintext-secret"]);
    assert!(!moved && !text.contains("refusing"), "{text}");
    assert!(text.contains("warning: --allow-plaintext-secret"), "{text}");
    let seen = seen.join().unwrap();
    assert!(
        seen.contains("cloak-admin") && seen.contains(SECRET),
        "{seen:?}"
    );
}

#[test]
fn the_move_tool_refuses_a_map_no_proxy_of_the_cluster_signed() {
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path());
    let other =
        cloak_cluster::ClusterSecret::new(b"another-cluster-secret-0123456789", "x").unwrap();
    for (sign, why) in [
        (
            true,
            "(epoch 1) fails its MAC check under this cluster's secret",
        ),
        (false, "(epoch 1) carries no MAC"),
    ] {
        let (listener, port) = FakeProxy::bind();
        let proxies = [
            ("p0".to_string(), format!("127.0.0.1:{port}")),
            ("p1".to_string(), "127.0.0.1:1".to_string()),
        ];
        let even = ClusterMap::even(&proxies, 4, "memory").unwrap();
        // A map one move on, as a proxy would answer after a move: made by no proxy of ours.
        let moved = even.moved(0, "p1").unwrap();
        let text = match sign {
            true => moved.to_signed_toml(&other),
            false => moved.to_toml(),
        };
        let _fake = FakeProxy::serve(listener, even.cluster_digest(), Some(text));
        let node = format!("127.0.0.1:{port}");
        let (moved, text, _) = move_tool(&node, &secret, &[]);
        assert!(!moved, "{text}");
        assert!(
            text.contains(&format!("the map of the proxy at {node} is refused"))
                && text.contains(why),
            "{text}"
        );
    }
}

#[test]
fn a_secret_file_others_may_read_is_refused_by_the_proxy_and_the_tool() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let wide = dir.path().join("wide.secret");
    std::fs::write(&wide, format!("{SECRET}\n")).unwrap();
    std::fs::set_permissions(&wide, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = wide.to_str().unwrap();
    let named = |text: &str| {
        text.contains(&format!("the cluster secret file {path} has mode 0644"))
            && text.contains(&format!("chmod 600 {path}"))
    };
    let (moved, text, _) = move_tool("127.0.0.1:1", path, &[]);
    assert!(!moved && named(&text), "{text}");
    let (_, file, _) = common::three_proxy_cluster(dir.path(), "memory");
    let args = [
        "proxy",
        "--cluster",
        file.to_str().unwrap(),
        "--node",
        "p0",
        "--cluster-secret-file",
        path,
    ];
    let refused = common::fails(&args);
    assert!(named(&refused), "{refused}");
    // Made private, it is read (the tool then fails only to reach the proxy).
    std::fs::set_permissions(&wide, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (moved, text, _) = move_tool("127.0.0.1:1", path, &[]);
    assert!(
        !moved && text.contains("cannot read the map") && !named(&text),
        "{text}"
    );
}

/// `cloak cluster move --source-down`: refused while the source answers (by the tool, and by
/// the target itself when asked straight), refused without `--accept-data-loss`; once p0 is
/// killed, p1 takes partition 0 over from storage alone: the stored key is read back there, p2
/// redirects to p1, writes work; and p0, restarted with its state dir, adopts the newer map
/// and redirects to p1 instead of serving partition 0.
#[test]
fn a_partition_whose_proxy_is_dead_is_taken_over_only_once_it_does_not_answer() {
    let cluster = Cluster::new();
    let p0 = cluster.start(0, KEY);
    let _p1 = cluster.start(1, KEY);
    let _p2 = cluster.start(2, KEY);
    let ports = &cluster.ports;
    let key = cluster.keys_of(0, 1).remove(0);
    let mut client = common::connect(ports[0]);
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("stored")
        .query(&mut client)
        .unwrap();
    common::wait_until_stored(&mut client, Duration::from_secs(30));
    let p1 = format!("127.0.0.1:{}", ports[1]);
    let takeover = ["--source-down", "--accept-data-loss"];

    let (moved, text, _) = move_tool(&p1, &cluster.secret, &takeover);
    assert!(!moved, "{text}");
    assert!(
        text.contains("p0 at") && text.contains("it is not down"),
        "{text}"
    );
    let (moved, text, _) = move_tool(&p1, &cluster.secret, &["--source-down"]);
    assert!(!moved, "{text}");
    assert!(text.contains("--accept-data-loss"), "{text}");
    // The target checks for itself: asked straight, it refuses while p0 answers.
    let key_id: String = redis::cmd("CLOAK")
        .arg("KEYID")
        .arg(0)
        .query(&mut admin(ports[1]))
        .unwrap();
    let next = cluster.map.moved(0, "p1").unwrap().to_toml();
    let refused = redis::cmd("CLOAK")
        .arg("TAKEOVER")
        .arg(0)
        .arg(&key_id)
        .arg(&next)
        .query::<()>(&mut admin(ports[1]))
        .expect_err("p1 must not take partition 0 while p0 answers");
    assert!(refused.to_string().contains("it is not dead"), "{refused}");
    assert_eq!(get(ports[0], &key), "stored");
    assert!(get(ports[1], &key).contains(&format!("127.0.0.1:{}", ports[0])));

    p0.kill();
    let p2 = format!("127.0.0.1:{}", ports[2]);
    let (moved, text, _) = move_tool(&p2, &cluster.secret, &takeover);
    assert!(moved, "{text}");
    assert!(
        text.contains("partition 0 taken over by p1 from p0, which did not answer")
            && text.contains("writes p0 acknowledged but had not yet stored are not in it"),
        "{text}"
    );
    assert_eq!(get(ports[1], &key), "stored");
    let redirected = get(ports[2], &key);
    assert!(redirected.contains(&p1), "p2 sends it to {redirected:?}");
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("after")
        .query(&mut common::connect(ports[1]))
        .unwrap();
    assert_eq!(get(ports[1], &key), "after");

    let _p0 = cluster.start(0, KEY);
    let redirected = get(ports[0], &key);
    assert!(
        redirected.contains(&p1),
        "restarted p0 answers {redirected:?}"
    );
    assert_eq!(get(ports[1], &key), "after");
}
