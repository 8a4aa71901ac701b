//! The text of a `CLOAK.HEALTH` answer: written by [`answer`] (from
//! [`super::health::Health::report`]), read by the other proxies' probes ([`super::probe`]) with
//! [`HealthReport::parse`], and by a proxy about to take a partition on (`PartitionHost::
//! peer_health`) with [`ask`]. One format, in one place.
//!
//! ```text
//! epoch E cluster D      the epoch and cluster digest of the map the proxy routes by
//! N ok                   partition N served here
//! N fail why             served here, its storage failing for `why` (one line)
//! N busy                 in hand-off, its storage still used here (draining or starting)
//! N moving               in hand-off, let go or not started
//! mac M                  only after `CLOAK.HEALTH nonce`, from a proxy with the cluster secret
//! ```
//!
//! # Why a move can believe a signed answer
//!
//! A proxy takes a partition (`ACQUIRE`, see [`super::handoff`]) only once the proxy that has it
//! answers that it let it go. That answer travels over the network, in the clear unless the
//! proxies use `--cluster-ca`: whoever can answer in that proxy's place (a man in the middle, a
//! spoofed address) could say "not serving" while it serves, and two proxies would then serve
//! one partition, each overwriting the other's writes. So the asker sends a fresh random nonce
//! (`CLOAK.HEALTH <nonce>`, [`NONCE_BYTES`] from the operating system's CSPRNG), and the
//! answering proxy ends its report with `mac M`: HMAC-SHA256 under the cluster secret over the
//! nonce, its own name in the map and the report's exact bytes
//! (`cloak_cluster::ClusterSecret::sign_health`). The asker believes only a report whose MAC
//! verifies for its nonce and the proxy it meant to ask:
//! - forgery: the secret is never sent between proxies (they ask each other as clients, with
//!   the client password), so someone on the path between two proxies has no way to make a MAC;
//! - replay: an answer recorded earlier (the proxy had let the partition go, then took it back)
//!   carries another nonce, and a nonce is never drawn twice (128 random bits);
//! - another proxy's answer (every proxy holds the same secret, and anyone may ask any proxy
//!   with any nonce): it names another proxy, so it fails the check too.
//!
//! Plain `CLOAK.HEALTH`, without a nonce, is answered unsigned as before: the probes and
//! clients read it for routing and `CLUSTER NODES`, where a lie costs availability (a partition
//! refused or redirected), never two owners.

use std::fmt;
use std::time::Duration;

use cloak_cluster::{ClusterSecret, Proxy};
use ring::rand::{SecureRandom, SystemRandom};

use super::peer::PeerLink;

/// The random bytes of a nonce a proxy sends (hexadecimal on the wire): 128 bits, so that none
/// is drawn twice in the life of any cluster.
pub const NONCE_BYTES: usize = 16;

/// The longest nonce a proxy signs (a question is bounded like any other).
pub const MAX_NONCE: usize = 64;

/// What starts the line that carries the MAC, the answer's last.
const MAC_LINE: &str = "mac ";

/// Why a proxy's health cannot be had, or not believed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HealthError {
    /// It could not be asked (no connection, no answer in time, an error reply).
    #[error("{0}")]
    Unreachable(String),
    /// It answered something that is not a health report.
    #[error("{0}")]
    NotAReport(String),
    /// Asked with a nonce, it answered without a MAC.
    #[error(
        "its health answer is unsigned (a proxy without this cluster's --cluster-secret-file, \
         or someone answering in its place)"
    )]
    Unsigned,
    /// Its MAC does not verify for this question and this proxy.
    #[error(
        "its health answer fails its MAC check under this cluster's secret (forged, replayed, or \
         another proxy's answer)"
    )]
    BadMac,
    /// No nonce could be drawn.
    #[error("cannot draw a nonce from the operating system's random generator")]
    NoRandom,
}

/// What a proxy says of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartitionState {
    /// Served, its storage answering.
    Ok,
    /// Served, its storage failing for this reason.
    Failing(String),
    /// Being handed over, its storage still used by this proxy.
    Busy,
    /// Being handed over, not used by this proxy.
    Moving,
}

impl PartitionState {
    /// Whether the proxy serves the partition.
    pub fn served(&self) -> bool {
        matches!(self, PartitionState::Ok | PartitionState::Failing(_))
    }

    /// Whether the proxy serves the partition or still uses its storage: no other proxy may
    /// start it meanwhile.
    pub fn holds(&self) -> bool {
        self.served() || *self == PartitionState::Busy
    }
}

/// A `CLOAK.HEALTH` answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthReport {
    /// The epoch of the map the proxy routes by.
    pub epoch: u64,
    /// That map's cluster digest.
    pub cluster: String,
    /// What it says of each partition it serves or hands over.
    pub partitions: Vec<(usize, PartitionState)>,
}

impl HealthReport {
    /// Reads an answer, or says why it is not one.
    pub fn parse(answer: &str) -> Result<Self, String> {
        let mut lines = answer.lines();
        let (epoch, cluster) = lines
            .next()
            .and_then(|line| line.strip_prefix("epoch "))
            .and_then(|line| line.split_once(" cluster "))
            .and_then(|(epoch, cluster)| Some((epoch.parse::<u64>().ok()?, cluster)))
            .ok_or_else(|| format!("answered {answer:?}, not its health (an older Cloak?)"))?;
        let partitions = lines
            .map(|line| {
                let not_one = || format!("answered a health line that is not one: {line:?}");
                let (partition, rest) = line.split_once(' ').unwrap_or((line, ""));
                let partition: usize = partition.parse().map_err(|_| not_one())?;
                let state = match rest.split_once(' ').unwrap_or((rest, "")) {
                    ("ok", _) => PartitionState::Ok,
                    ("fail", why) => PartitionState::Failing(why.to_string()),
                    ("busy", _) => PartitionState::Busy,
                    ("moving", _) => PartitionState::Moving,
                    _ => return Err(not_one()),
                };
                Ok((partition, state))
            })
            .collect::<Result<_, String>>()?;
        Ok(Self {
            epoch,
            cluster: cluster.to_string(),
            partitions,
        })
    }

    /// Whether the proxy serves `partition` or still uses its storage.
    pub fn holds(&self, partition: usize) -> bool {
        self.state_of(partition).is_some_and(PartitionState::holds)
    }

    /// What the proxy says of `partition`; `None`: it neither serves nor hands it over.
    pub fn state_of(&self, partition: usize) -> Option<&PartitionState> {
        (self.partitions.iter())
            .find(|(index, _)| *index == partition)
            .map(|(_, state)| state)
    }

    /// A partition the proxy is handing over (draining, starting or waiting), if any.
    pub fn in_hand_off(&self) -> Option<(usize, &PartitionState)> {
        (self.partitions.iter())
            .find(|(_, state)| !state.served())
            .map(|(partition, state)| (*partition, state))
    }
}

impl fmt::Display for HealthReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "epoch {} cluster {}", self.epoch, self.cluster)?;
        for (partition, state) in &self.partitions {
            match state {
                PartitionState::Ok => writeln!(f, "{partition} ok")?,
                // One line each: the cause may be any text storage's client gave.
                PartitionState::Failing(why) => {
                    writeln!(f, "{partition} fail {}", why.replace(['\r', '\n'], " "))?
                }
                PartitionState::Busy => writeln!(f, "{partition} busy")?,
                PartitionState::Moving => writeln!(f, "{partition} moving")?,
            }
        }
        Ok(())
    }
}

/// The answer to `CLOAK.HEALTH [nonce]` of the proxy named `proxy` whose health is `report`:
/// the report, and, asked with a nonce by a proxy that has the cluster `secret`, the `mac` line
/// (see the module docs). The only writer of an answer.
pub fn answer(
    report: &HealthReport,
    nonce: Option<&str>,
    proxy: &str,
    secret: Option<&ClusterSecret>,
) -> String {
    let text = report.to_string();
    match (nonce, secret) {
        (Some(nonce), Some(secret)) => {
            let mac = secret.sign_health(nonce, proxy, &text);
            format!("{text}{MAC_LINE}{mac}\n")
        }
        // Without a secret there is nothing to sign with: the asker, which needs a MAC, refuses
        // the answer by name (a proxy without a secret has no admin, and so never moves).
        _ => text,
    }
}

impl HealthReport {
    /// Reads `answer` to `CLOAK.HEALTH nonce` from the proxy named `proxy`: a report only if its
    /// MAC verifies under `secret` for that nonce and that proxy (see the module docs).
    pub fn verified(
        answer: &str,
        nonce: &str,
        proxy: &str,
        secret: &ClusterSecret,
    ) -> Result<Self, HealthError> {
        let (text, mac) = split_mac(answer).ok_or(HealthError::Unsigned)?;
        if !secret.verifies_health(nonce, proxy, text, mac) {
            return Err(HealthError::BadMac);
        }
        Self::parse(text).map_err(HealthError::NotAReport)
    }
}

/// The report's text and the MAC of an answer that ends with a `mac` line. No line of a report
/// starts with `mac ` (the first is `epoch …`, the others a partition's number).
fn split_mac(answer: &str) -> Option<(&str, &str)> {
    let body = answer.strip_suffix('\n')?;
    let start = body.rfind('\n').map_or(0, |newline| newline + 1);
    let mac = body[start..].strip_prefix(MAC_LINE)?;
    Some((&answer[..start], mac))
}

/// A fresh nonce, in hexadecimal.
fn nonce() -> Result<String, HealthError> {
    let mut bytes = [0u8; NONCE_BYTES];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| HealthError::NoRandom)?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// Asks `proxy` (over `link`, within `timeout`) for its health. With the cluster `secret`, a
/// fresh nonce goes with the question and only an answer that proxy signed for it is returned
/// (what a move relies on, see the module docs); without one, nothing could be checked, and the
/// answer is read as it comes (such a proxy has no admin, so it is never asked during a move).
pub async fn ask(
    link: &PeerLink,
    proxy: &Proxy,
    secret: Option<&ClusterSecret>,
    timeout: Duration,
) -> Result<HealthReport, HealthError> {
    let address = proxy.address();
    let Some(secret) = secret else {
        let answer = (link.ask(&address, &["CLOAK.HEALTH"], timeout).await)
            .map_err(HealthError::Unreachable)?;
        return HealthReport::parse(&answer).map_err(HealthError::NotAReport);
    };
    let nonce = nonce()?;
    let answer = (link.ask(&address, &["CLOAK.HEALTH", &nonce], timeout).await)
        .map_err(HealthError::Unreachable)?;
    HealthReport::verified(&answer, &nonce, &proxy.name, secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_reads_back_as_written() {
        let report = HealthReport {
            epoch: 3,
            cluster: "c0ffee".into(),
            partitions: vec![
                (1, PartitionState::Ok),
                (2, PartitionState::Failing("down\r\nhard".into())),
                (4, PartitionState::Busy),
                (5, PartitionState::Moving),
            ],
        };
        let text = report.to_string();
        assert_eq!(
            text,
            "epoch 3 cluster c0ffee\n1 ok\n2 fail down  hard\n4 busy\n5 moving\n"
        );
        let read = HealthReport::parse(&text).unwrap();
        assert_eq!(
            read.partitions[1].1,
            PartitionState::Failing("down  hard".into())
        );
        assert!(read.holds(1) && read.holds(2) && read.holds(4));
        assert!(!read.holds(5) && !read.holds(3));
    }

    #[test]
    fn only_the_named_proxys_answer_to_this_nonce_is_believed() {
        let secret = ClusterSecret::new(b"0123456789abcdef0123", "f").unwrap();
        let other = ClusterSecret::new(b"0123456789abcdef0124", "f").unwrap();
        let report = HealthReport {
            epoch: 3,
            cluster: "c0ffee".into(),
            partitions: vec![(1, PartitionState::Ok), (4, PartitionState::Busy)],
        };
        let signed = answer(&report, Some("n1"), "a", Some(&secret));
        assert!(signed.starts_with(&report.to_string()) && signed.contains("\nmac "));
        assert_eq!(
            HealthReport::verified(&signed, "n1", "a", &secret),
            Ok(report.clone())
        );
        // A replay to another question, another proxy's answer, another cluster's secret.
        let wrong = |answer: &str, nonce, proxy, secret| {
            HealthReport::verified(answer, nonce, proxy, secret).unwrap_err()
        };
        assert_eq!(wrong(&signed, "n2", "a", &secret), HealthError::BadMac);
        assert_eq!(wrong(&signed, "n1", "b", &secret), HealthError::BadMac);
        assert_eq!(wrong(&signed, "n1", "a", &other), HealthError::BadMac);
        // The report changed under its MAC: a partition it serves left out.
        let cut = signed.replacen("1 ok\n", "", 1);
        assert_eq!(wrong(&cut, "n1", "a", &secret), HealthError::BadMac);
        // "Not serving anything", unsigned or with a made-up MAC.
        let empty = HealthReport {
            partitions: Vec::new(),
            ..report.clone()
        };
        let unsigned = answer(&empty, Some("n1"), "a", None);
        assert_eq!(unsigned, empty.to_string());
        assert_eq!(wrong(&unsigned, "n1", "a", &secret), HealthError::Unsigned);
        let made_up = format!("{unsigned}mac {}\n", "00".repeat(32));
        assert_eq!(wrong(&made_up, "n1", "a", &secret), HealthError::BadMac);
        assert_eq!(wrong("mac zz\n", "n1", "a", &secret), HealthError::BadMac);
        // Plain `CLOAK.HEALTH` is answered unsigned, as before.
        assert_eq!(
            answer(&report, None, "a", Some(&secret)),
            report.to_string()
        );
    }

    #[test]
    fn nonces_are_fresh_hex() {
        let (one, two) = (nonce().unwrap(), nonce().unwrap());
        assert_eq!(one.len(), 2 * NONCE_BYTES);
        assert!(one.len() <= MAX_NONCE && one.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(one, two);
    }
}
