//! Warms the kernel's TCP send path just before a timed storage request leaves, so that the
//! time the kernel takes to put it on the wire does not depend on the load.
//!
//! A request on the schedule leaves at its instant to within a few microseconds whatever the
//! load ([`crate::wake`]), but the kernel then took longer to send it when the host was idle:
//! its TCP code and data had gone cold in the caches, while under a client load the proxy's own
//! client sockets keep them warm. On the wire the read and the write-back of a batch reached
//! Redis about 30–40 µs earlier against the schedule under a saturating SET load than idle
//! (`scripts/measure-batch-timing`), and a server averaging many batches could tell loaded
//! seconds from idle ones. A timed writer that knows nothing of any load shows the same, and
//! shows the cure (45 KB written to a loopback TCP socket every 20 ms, `write()` time p50): 84
//! µs idle against 32 µs under an unrelated Redis load; with 64 bytes first written to another
//! loopback TCP socket 200 µs before, 23 µs idle and 21 µs loaded. Writing to a Unix socket or
//! to `/dev/null` instead did not help (39–50 µs): it is the TCP path that must be warm.
//!
//! So every timed request first sends a few bytes through a private loopback TCP connection of
//! the proxy's own, which a thread of its own reads and discards. None of it reaches the storage
//! server; what it changes is only how long the kernel takes, and it does so before every timed
//! request, idle or loaded, so the warm-up itself follows the public schedule.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};

/// The few bytes each warm-up sends: enough to run the whole send and receive path.
const TOUCH: [u8; 64] = [0; 64];

/// A loopback connection that does not open at once never will (a firewall dropping SYNs):
/// the proxy then starts without the warm-up rather than wait the kernel's minutes.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// One end of a private loopback TCP connection; the other end is read by a thread that
/// discards what it reads and stops when this end is dropped.
pub(crate) struct WarmSend {
    stream: TcpStream,
}

impl WarmSend {
    /// Opens the connection and starts its reading thread.
    pub(crate) fn start() -> std::io::Result<Self> {
        let (warm, mut far_end) = Self::connect()?;
        std::thread::Builder::new()
            .name("cloak-warm-send".into())
            .spawn(move || {
                let mut sink = [0u8; 4096];
                // Ends when the sending end closes (0) or fails.
                while matches!(far_end.read(&mut sink), Ok(n) if n > 0) {}
            })?;
        Ok(warm)
    }

    /// The connection, and its far end for the caller to read.
    fn connect() -> std::io::Result<(Self, TcpStream)> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let stream = TcpStream::connect_timeout(&listener.local_addr()?, CONNECT_TIMEOUT)?;
        // Another local user may connect to the listener first: take only our own connection.
        let far_end = loop {
            let (far_end, from) = listener.accept()?;
            if from == stream.local_addr()? {
                break far_end;
            }
        };
        // Like a storage connection's: each write leaves at once.
        stream.set_nodelay(true)?;
        // A warm-up never waits: if the reader fell behind, this one is skipped.
        stream.set_nonblocking(true)?;
        Ok((Self { stream }, far_end))
    }

    /// Runs the kernel's TCP send path once.
    pub(crate) fn touch(&self) {
        match (&self.stream).write(&TOUCH) {
            Ok(_) => {}
            // The reader is behind (a host too busy to run it): this warm-up is skipped, the
            // path is warm anyway.
            Err(error) if error.kind() == ErrorKind::WouldBlock => {}
            Err(error) => tracing::debug!(%error, "warming the send path failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touching_never_blocks_even_when_nothing_is_read() {
        let (warm, _unread) = WarmSend::connect().unwrap();
        // 64 MB, far more than the socket buffers hold: were a touch to wait for its reader, a
        // stalled reader would stall the storage thread, and this would never end.
        for _ in 0..1_000_000 {
            warm.touch();
        }
    }
}
