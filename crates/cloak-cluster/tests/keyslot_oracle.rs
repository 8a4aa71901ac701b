//! `key_slot` against a real `redis-server`'s `CLUSTER KEYSLOT`, for keys with and without hash
//! tags, binary keys and the edge cases of the tag rule.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use cloak_cluster::key_slot;
use cloak_testkit::redis_server::RedisServer;

/// Keys that exercise every branch of the tag rule, then pseudo-random binary keys.
fn keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = [
        "",
        "foo",
        "{user1000}.following",
        "{user1000}.followers",
        "foo{}{bar}",
        "foo{{bar}}zap",
        "foo{bar}{zap}",
        "{",
        "}",
        "{}",
        "a{b",
        "a}b{c}",
        "{a}",
        "x{a}y",
        "123456789",
    ]
    .iter()
    .map(|key| key.as_bytes().to_vec())
    .collect();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for length in 0..2000usize {
        keys.push(
            (0..length % 40)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    // Braces often enough that tags are common.
                    match state % 8 {
                        0 => b'{',
                        1 => b'}',
                        _ => (state >> 8) as u8,
                    }
                })
                .collect(),
        );
    }
    keys
}

#[test]
fn key_slots_match_redis_cluster_keyslot() {
    let redis = RedisServer::start_with(&["--cluster-enabled", "yes"], true);
    let mut stream = TcpStream::connect(("127.0.0.1", redis.port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let keys = keys();
    let mut request = Vec::new();
    for key in &keys {
        request.extend_from_slice(b"*3\r\n$7\r\nCLUSTER\r\n$7\r\nKEYSLOT\r\n");
        request.extend_from_slice(format!("${}\r\n", key.len()).as_bytes());
        request.extend_from_slice(key);
        request.extend_from_slice(b"\r\n");
    }
    stream.write_all(&request).unwrap();
    let mut replies = BufReader::new(stream);
    for key in &keys {
        let mut line = String::new();
        replies.read_line(&mut line).unwrap();
        let redis_slot: u16 = line
            .trim_end()
            .strip_prefix(':')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("redis answered {line:?}"));
        assert_eq!(key_slot(key), redis_slot, "key {key:?}");
    }
}
