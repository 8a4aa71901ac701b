//! `--storage redis://…` and `redis+cluster://…`: what the URL says, and how addresses become keys.
//!
//! ```text
//! redis://[[USER]:PASSWORD@]HOST:PORT[/DB][?prefix=P]
//! redis+cluster://[[USER]:PASSWORD@]HOST:PORT,HOST:PORT,…[?prefix=P]
//! ```
//!
//! `rediss://` and `rediss+cluster://` are the same over TLS. `USER` is a Redis ACL user (Redis 6
//! and later); without one, the password is the default user's (`requirepass`).
//!
//! An element at address `a` is the key `P ‖ hex(a)`, 32 lowercase hex digits of the address
//! in big-endian order: keys sort as their addresses do (a scan can sort keys to get address
//! order), they never contain `{`/`}` (so no accidental hash tags in a cluster), and several
//! stores share one Redis under different prefixes.

use crate::Addr;

/// The prefix when the URL names none.
pub const DEFAULT_PREFIX: &str = "cloak:";

/// Hex digits of an address in a key (an address is 128 bits).
const ADDR_DIGITS: usize = 32;

/// A node's `HOST[:PORT][/DB]` split into its location and its database number, written as
/// Redis numbers it (`0` when the URL names none).
fn database_of(host: &str) -> (&str, String) {
    let (location, db) = host.split_once('/').unwrap_or((host, ""));
    let db = db.parse::<u64>().map_or(db.to_string(), |n| n.to_string());
    (location, if db.is_empty() { "0".into() } else { db })
}

/// Where a Redis backend is, parsed from its URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisTarget {
    /// Connection URLs for the `redis` crate: one for a single server, the seed nodes of a
    /// cluster.
    pub nodes: Vec<String>,
    /// Whether the nodes are seeds of a Redis Cluster.
    pub cluster: bool,
    /// Whether the nodes speak TLS (`rediss`).
    pub tls: bool,
    /// The prefix of every key the store writes.
    pub prefix: Vec<u8>,
    /// What every node URL starts with: the scheme and the credentials (`redis://:PASSWORD@`).
    node_prefix: String,
}

/// A Redis URL that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("{url:?}: {reason}")]
pub struct UrlError {
    url: String,
    reason: String,
}

impl RedisTarget {
    /// Parses a `redis[s]://` or `redis[s]+cluster://` URL; `None` if it is neither.
    pub fn parse(url: &str) -> Option<Result<Self, UrlError>> {
        let (scheme, rest) = url.split_once("://")?;
        let (cluster, tls) = match scheme {
            "redis" => (false, false),
            "rediss" => (false, true),
            "redis+cluster" => (true, false),
            "rediss+cluster" => (true, true),
            _ => return None,
        };
        let node_scheme = if tls { "rediss" } else { "redis" };
        let error = |reason: &str| UrlError {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        Some((|| {
            let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
            let mut prefix = DEFAULT_PREFIX.as_bytes().to_vec();
            for pair in query.split('&').filter(|p| !p.is_empty()) {
                match pair.split_once('=') {
                    Some(("prefix", value)) => prefix = value.as_bytes().to_vec(),
                    _ => return Err(error("the only option is ?prefix=P")),
                }
            }
            let (node_prefix, hosts) = match location.rsplit_once('@') {
                Some((credentials, hosts)) => (format!("{node_scheme}://{credentials}@"), hosts),
                None => (format!("{node_scheme}://"), location),
            };
            if hosts.is_empty() {
                return Err(error("no HOST:PORT"));
            }
            let nodes = if cluster {
                if hosts.contains('/') {
                    return Err(error("a cluster has only database 0; remove the /DB"));
                }
                hosts
                    .split(',')
                    .map(|node| match node.trim() {
                        "" => Err(error("an empty node in the list")),
                        node => Ok(format!("{node_prefix}{node}")),
                    })
                    .collect::<Result<Vec<_>, _>>()?
            } else {
                if hosts.contains(',') {
                    return Err(error("several nodes: use redis+cluster:// for a cluster"));
                }
                vec![format!("{node_prefix}{hosts}")]
            };
            Ok(Self {
                nodes,
                cluster,
                tls,
                prefix,
                node_prefix,
            })
        })())
    }

    /// The Redis key of address `addr`: the prefix, then 32 hexadecimal digits.
    pub fn key(&self, addr: Addr) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.key_len());
        key.extend_from_slice(&self.prefix);
        key.extend_from_slice(format!("{addr:0ADDR_DIGITS$x}").as_bytes());
        key
    }

    /// The length of every key of this store: the prefix and the address in hex.
    pub fn key_len(&self) -> usize {
        self.prefix.len() + ADDR_DIGITS
    }

    /// The address a key of this store names; `None` for other keys.
    pub fn addr(&self, key: &[u8]) -> Option<Addr> {
        let hex = key.strip_prefix(self.prefix.as_slice())?;
        if hex.len() != ADDR_DIGITS || !hex.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        Addr::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
    }

    /// A SCAN pattern matching this store's keys and no others: the prefix (glob characters
    /// escaped), then exactly `ADDR_DIGITS` hex digits. Every key it matches is
    /// [`RedisTarget::key_len`] bytes long, which bounds SCAN's answers.
    pub fn pattern(&self) -> Vec<u8> {
        let mut pattern = Vec::with_capacity(2 * self.prefix.len() + ADDR_DIGITS * 8);
        for &b in &self.prefix {
            if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
                pattern.push(b'\\');
            }
            pattern.push(b);
        }
        for _ in 0..ADDR_DIGITS {
            pattern.extend_from_slice(b"[0-9a-f]");
        }
        pattern
    }

    /// The key that holds a cluster write in progress (see `redis`'s module notes).
    pub fn intent_key(&self) -> Vec<u8> {
        self.prefixed(b"write-in-progress")
    }

    /// The key that names the last fence raised on a single Redis (see `RedisStorage::fence`):
    /// not an element's (no 32 hex digits), so a scan never lists it.
    pub fn fence_key(&self) -> Vec<u8> {
        self.prefixed(b"fence")
    }

    /// The key `name` under this store's prefix.
    fn prefixed(&self, name: &[u8]) -> Vec<u8> {
        [self.prefix.as_slice(), name].concat()
    }

    /// The URL of a cluster node at `host:port`, with the scheme and credentials of the seeds
    /// (every node of a cluster takes the same).
    pub fn node_url(&self, host: &str, port: u16) -> String {
        if host.contains(':') {
            format!("{}[{host}]:{port}", self.node_prefix)
        } else {
            format!("{}{host}:{port}", self.node_prefix)
        }
    }

    /// A node URL's `HOST[:PORT]`, without scheme or credentials (for messages).
    pub fn node_host<'a>(&self, url: &'a str) -> &'a str {
        url.strip_prefix(self.node_prefix.as_str()).unwrap_or(url)
    }

    /// Each node's `HOST[:PORT][/DB]`, without scheme or credentials.
    fn hosts(&self) -> Vec<&str> {
        self.nodes.iter().map(|n| self.node_host(n)).collect()
    }

    /// Where this store's keys live, one `host:port/db prefix` per node with the defaults filled
    /// in (port 6379, database 0, the host in lower case), whatever the URL's spelling: two
    /// stores that share one of these write the same keys.
    pub fn keyspaces(&self) -> Vec<String> {
        let prefix = String::from_utf8_lossy(&self.prefix);
        self.hosts()
            .into_iter()
            .map(|host| {
                let (location, db) = database_of(host);
                // An IPv6 address without a port ends in ']'.
                let (name, port) = match location.rsplit_once(':') {
                    Some((name, port)) if !location.ends_with(']') => (name, port),
                    _ => (location, "6379"),
                };
                format!("{}:{port}/{db} {prefix}", name.to_ascii_lowercase())
            })
            .collect()
    }

    /// The name each connection of a proxy of this store gives itself (`CLIENT SETNAME`), the
    /// same for every proxy of the store and different for another store on the same Redis:
    /// a proxy that starts finds the connections of the one before it by this name, and ends
    /// them (see `RedisStorage::fence`). A hash of the prefix and the database, which Redis
    /// sees in every command anyway; a hash, because a prefix may hold bytes a name may not.
    pub fn client_name(&self) -> String {
        let db = self
            .hosts()
            .first()
            .map_or("0".into(), |host| database_of(host).1);
        let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
        for part in [
            b"cloak proxy of".as_slice(),
            db.as_bytes(),
            b"/",
            &self.prefix,
        ] {
            hash.update(part);
        }
        let digest = hash.finish();
        let first = u64::from_be_bytes(digest.as_ref()[..8].try_into().expect("8 of 32 bytes"));
        format!("cloak-{first:016x}")
    }

    /// The URL without its password, for logs and `INFO`.
    pub fn describe(&self) -> String {
        let hosts = self.hosts();
        let scheme = match (self.tls, self.cluster) {
            (false, false) => "redis",
            (true, false) => "rediss",
            (false, true) => "redis+cluster",
            (true, true) => "rediss+cluster",
        };
        format!(
            "{scheme}://{}?prefix={}",
            hosts.join(","),
            String::from_utf8_lossy(&self.prefix)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_name_is_the_stores_whatever_the_spelling_and_differs_between_stores() {
        let name = |url: &str| RedisTarget::parse(url).unwrap().unwrap().client_name();
        let same = name("redis://h:6379");
        assert_eq!(name("redis://:pw@H:6379/0?prefix=cloak:"), same);
        assert_eq!(
            name("redis+cluster://a:1,b:2?prefix=cloak:"),
            name("redis+cluster://b:2?prefix=cloak:")
        );
        assert_ne!(name("redis://h:6379?prefix=other:"), same);
        assert_ne!(name("redis://h:6379/1"), same);
        // What CLIENT SETNAME takes: no spaces, whatever the prefix holds.
        let odd = name("redis://h?prefix=a%20b%0A");
        assert!(odd.starts_with("cloak-") && odd.len() == 22, "{odd}");
    }

    #[test]
    fn keyspaces_fill_in_the_defaults() {
        let keyspaces = |url: &str| RedisTarget::parse(url).unwrap().unwrap().keyspaces();
        let plain = keyspaces("redis://127.0.0.1:17501");
        assert_eq!(plain, vec!["127.0.0.1:17501/0 cloak:"]);
        assert_eq!(keyspaces("redis://127.0.0.1:17501?prefix=cloak:"), plain);
        assert_eq!(keyspaces("rediss://u:pw@127.0.0.1:17501/0"), plain);
        assert_eq!(
            keyspaces("redis://LocalHost"),
            vec!["localhost:6379/0 cloak:"]
        );
        assert_ne!(keyspaces("redis://127.0.0.1:17501/1"), plain);
        assert_ne!(keyspaces("redis://127.0.0.1:17501?prefix=p1:"), plain);
        assert_eq!(
            keyspaces("redis+cluster://a:1,b:2?prefix=x"),
            vec!["a:1/0 x", "b:2/0 x"]
        );
    }

    #[test]
    fn urls_parse_into_nodes_and_a_prefix() {
        let single = RedisTarget::parse("redis://:pw@127.0.0.1:6379/2?prefix=app1:")
            .unwrap()
            .unwrap();
        assert_eq!(single.nodes, vec!["redis://:pw@127.0.0.1:6379/2"]);
        assert!(!single.cluster);
        assert_eq!(single.prefix, b"app1:");
        assert_eq!(single.describe(), "redis://127.0.0.1:6379/2?prefix=app1:");

        let cluster = RedisTarget::parse("redis+cluster://h1:7000,h2:7001")
            .unwrap()
            .unwrap();
        assert_eq!(cluster.nodes, vec!["redis://h1:7000", "redis://h2:7001"]);
        assert!(cluster.cluster);
        assert_eq!(cluster.prefix, DEFAULT_PREFIX.as_bytes());

        assert!(RedisTarget::parse("tcp://h:1").is_none());

        let secure = RedisTarget::parse("rediss://cloak:pw@h:6390")
            .unwrap()
            .unwrap();
        assert_eq!(secure.nodes, vec!["rediss://cloak:pw@h:6390"]);
        assert!(secure.tls && !secure.cluster);
        assert_eq!(secure.describe(), "rediss://h:6390?prefix=cloak:");
        let secure = RedisTarget::parse("rediss+cluster://u:p@h1:1,h2:2")
            .unwrap()
            .unwrap();
        assert_eq!(secure.nodes, vec!["rediss://u:p@h1:1", "rediss://u:p@h2:2"]);
        assert!(secure.tls && secure.cluster);
        for bad in [
            "redis://",
            "redis://h:1?prefx=x",
            "redis://h1:1,h2:2",
            "redis+cluster://h1:1,,h2:2",
            "redis+cluster://h1:1/3",
        ] {
            assert!(RedisTarget::parse(bad).unwrap().is_err(), "{bad}");
        }
    }

    #[test]
    fn cluster_nodes_take_the_seeds_scheme_and_credentials() {
        let t = RedisTarget::parse("rediss+cluster://user:pw@a:1,b:2")
            .unwrap()
            .unwrap();
        assert_eq!(
            t.node_url("10.0.0.3", 7000),
            "rediss://user:pw@10.0.0.3:7000"
        );
        assert_eq!(t.node_url("::1", 7000), "rediss://user:pw@[::1]:7000");
        assert_eq!(t.node_host(&t.nodes[1]), "b:2");
        let plain = RedisTarget::parse("redis+cluster://a:1").unwrap().unwrap();
        assert_eq!(plain.node_url("h", 9), "redis://h:9");
        assert_eq!(plain.node_host(&plain.node_url("h", 9)), "h:9");
    }

    #[test]
    fn keys_sort_like_addresses_and_round_trip() {
        let t = RedisTarget::parse("redis://h:1?prefix=a*b:")
            .unwrap()
            .unwrap();
        let addrs = [0u128, 1, 255, 256, 1 << 64, u128::MAX];
        let keys: Vec<Vec<u8>> = addrs.iter().map(|&a| t.key(a)).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        for (a, k) in addrs.iter().zip(&keys) {
            assert_eq!(t.addr(k), Some(*a));
            assert!(!k.contains(&b'{'));
        }
        assert_eq!(t.addr(b"a*b:zz"), None);
        assert_eq!(t.addr(&t.intent_key()), None);
        let hex = b"[0-9a-f]".repeat(32);
        assert_eq!(t.pattern(), [&b"a\\*b:"[..], &hex].concat());
    }
}
