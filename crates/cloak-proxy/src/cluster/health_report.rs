//! The text of a `CLOAK.HEALTH` answer: written by [`super::health::Health::report`], read by
//! the other proxies' probes ([`super::probe`]) and by a proxy about to take a partition on
//! (`PartitionHost::peer_health`). One format, in one place.
//!
//! ```text
//! epoch E cluster D      the epoch and cluster digest of the map the proxy routes by
//! N ok                   partition N served here
//! N fail why             served here, its storage failing for `why` (one line)
//! N busy                 in hand-off, its storage still used here (draining or starting)
//! N moving               in hand-off, let go or not started
//! ```

use std::fmt;

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
}
