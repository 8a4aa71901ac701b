//! What a real Redis receives and when, captured on the way: a relay between the proxy and
//! `redis-server` that forwards every byte unchanged and stamps each with the kernel's receive
//! time, turned into the server view the auditor reads (`cloak_core::Observed`).
//!
//! The times are the ones the server itself could take. The relay asks the kernel for receive
//! timestamps (`SO_TIMESTAMPNS`): the kernel stamps each packet as it arrives on the loopback
//! interface, which is when the proxy sent it, so how late the relay's own thread reads does not
//! move a request's time. A request is stamped with the packet that carried its first byte, and
//! its answer with the packet that carried the answer's first byte. The relay does no work for
//! Redis and needs no privilege, unlike Redis's `MONITOR` (which escapes every byte of a binary
//! value and slowed an MSET of a thousand elements from 1 ms to 18 ms) or a packet capture
//! (root). What it adds is one loopback hop before each answer reaches the proxy.
//!
//! The kernel gives one timestamp per read: the last packet's the read took data from. Reads
//! are [`READ_SIZE`] bytes at most, so the read that starts a request ends in the packet that
//! carried its first byte whenever that packet holds at least that much (or the whole request):
//! a request written to an idle connection starts a packet of its own.

use std::io::{self, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use cloak_core::{AccessKind, Addr, Observed, Trace};

/// Most bytes one read takes (see the module comment).
pub const READ_SIZE: usize = 4096;

/// One command as Redis received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TappedCommand {
    /// When its first byte arrived, since the Unix epoch.
    pub sent: Duration,
    /// When the first byte of Redis's answer arrived; `None` if Redis did not answer.
    pub answered: Option<Duration>,
    /// The command name and its arguments.
    pub args: Vec<Bytes>,
}

/// Bytes one side of a connection sent, each read with its kernel receive time.
type Stamped = Vec<(Duration, Bytes)>;

/// A relay on a loopback port of its own to Redis on `upstream`, recording both directions of
/// every connection until [`WireTap::finish`].
pub struct WireTap {
    port: u16,
    stop: Arc<AtomicBool>,
    acceptor: JoinHandle<Vec<Relayed>>,
}

/// One relayed connection: its sockets (to shut them down at the end) and its two pumps, which
/// return what each direction carried.
struct Relayed {
    sockets: [TcpStream; 2],
    requests: JoinHandle<Stamped>,
    answers: JoinHandle<Stamped>,
}

impl WireTap {
    /// Starts relaying connections to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port for the relay");
        // Accepted sockets inherit the option, so the first bytes of a connection are stamped
        // too.
        receive_timestamps(&listener).expect("SO_TIMESTAMPNS on the relay's port");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let port = listener.local_addr().expect("the relay's address").port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let acceptor = std::thread::spawn(move || accept(&listener, upstream, &stopping));
        Self {
            port,
            stop,
            acceptor,
        }
    }

    /// The port the proxy connects to instead of Redis's.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops relaying (connections still open are cut) and hands over every command Redis
    /// received, in the order their first bytes arrived.
    pub fn finish(self) -> Vec<TappedCommand> {
        self.stop.store(true, Ordering::Relaxed);
        let relayed = self.acceptor.join().expect("the relay's acceptor panicked");
        let mut commands = Vec::new();
        for connection in relayed {
            for socket in &connection.sockets {
                // Ends both pumps; a socket already closed has nothing to shut down.
                let _ = socket.shutdown(Shutdown::Both);
            }
            let requests = connection.requests.join().expect("a relay pump panicked");
            let answers = connection.answers.join().expect("a relay pump panicked");
            commands.extend(pair(&requests, &answers));
        }
        commands.sort_by_key(|c| c.sent);
        commands
    }
}

fn accept(listener: &TcpListener, upstream: u16, stop: &AtomicBool) -> Vec<Relayed> {
    let mut relayed = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((client, _)) => relayed.push(relay(client, upstream)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("the relay cannot accept: {e}"),
        }
    }
    relayed
}

fn relay(client: TcpStream, upstream: u16) -> Relayed {
    let server = TcpStream::connect(("127.0.0.1", upstream)).expect("Redis accepts the relay");
    receive_timestamps(&server).expect("SO_TIMESTAMPNS on the relay's connection to Redis");
    for socket in [&client, &server] {
        socket.set_nonblocking(false).expect("a blocking socket");
        socket.set_nodelay(true).expect("TCP_NODELAY");
    }
    let clone = |s: &TcpStream| s.try_clone().expect("a second socket handle");
    let requests = {
        let (from, to) = (clone(&client), clone(&server));
        std::thread::spawn(move || pump(&from, to))
    };
    let answers = {
        let (from, to) = (clone(&server), clone(&client));
        std::thread::spawn(move || pump(&from, to))
    };
    Relayed {
        sockets: [client, server],
        requests,
        answers,
    }
}

/// Forwards `from` to `to` until either closes, recording what passed.
fn pump(from: &TcpStream, mut to: TcpStream) -> Stamped {
    let mut record = Vec::new();
    let mut buf = vec![0u8; READ_SIZE];
    loop {
        let (n, at) = match receive(from, &mut buf) {
            Ok((0, _)) | Err(_) => break,
            Ok(read) => read,
        };
        // The kernel turns stamping on shortly after the first socket asks for it (deferred
        // work): packets in that moment have no stamp and get the relay's clock, which is
        // later by however long the relay took to read.
        let at = at.unwrap_or_else(unix_now);
        record.push((at, Bytes::copy_from_slice(&buf[..n])));
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    // Tells the other end this direction is done (it may be closed already).
    let _ = to.shutdown(Shutdown::Write);
    record
}

/// Asks the kernel to stamp what `socket` receives.
fn receive_timestamps(socket: &impl AsRawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: the descriptor is open for the call (`socket` is borrowed), and the option value
    // is a live c_int whose size is passed with it.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One read into `buf`, with the kernel's receive time (since the Unix epoch) if it gave one.
fn receive(socket: &TcpStream, buf: &mut [u8]) -> io::Result<(usize, Option<Duration>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for one control message holding a timespec, aligned as cmsghdr needs.
    let mut control = [0u64; 8];
    // SAFETY: an all-zero msghdr is valid (no name, no buffers); the fields set below point at
    // `iov` and `control`, which outlive the call.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = std::mem::size_of_val(&control) as _;
    let read = loop {
        // SAFETY: `message` describes writable buffers of the stated sizes (`buf` through
        // `iov`, and `control`), all alive for the call.
        let read = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut message, 0) };
        if read >= 0 {
            break read as usize;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    };
    let mut stamp = None;
    // SAFETY: `message` was filled by recvmsg; CMSG_FIRSTHDR and CMSG_NXTHDR stay within
    // `msg_controllen` bytes of `control` and return null past the last header.
    let mut header = unsafe { libc::CMSG_FIRSTHDR(&message) };
    while !header.is_null() {
        // SAFETY: a non-null header from CMSG_FIRSTHDR/CMSG_NXTHDR lies within `control`.
        let cmsg = unsafe { &*header };
        if cmsg.cmsg_level == libc::SOL_SOCKET && cmsg.cmsg_type == libc::SCM_TIMESTAMPNS {
            // SAFETY: an SCM_TIMESTAMPNS message carries one timespec; its data may be
            // unaligned, so it is read as such.
            let time: libc::timespec =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(header).cast()) };
            stamp = Some(Duration::new(time.tv_sec as u64, time.tv_nsec as u32));
        }
        // SAFETY: as for CMSG_FIRSTHDR above.
        header = unsafe { libc::CMSG_NXTHDR(&message, header) };
    }
    Ok((read, stamp))
}

/// The commands of one connection, each with the time of its first byte, matched in order with
/// the answers (Redis answers every command of a connection, in order).
fn pair(requests: &Stamped, answers: &Stamped) -> Vec<TappedCommand> {
    let answered = values(answers);
    values(requests)
        .into_iter()
        .enumerate()
        .map(|(i, (sent, request))| TappedCommand {
            sent,
            answered: answered.get(i).map(|(at, _)| *at),
            args: arguments(&request).unwrap_or_default(),
        })
        .collect()
}

/// The whole RESP values in a stream, each with the time of the read that brought its first
/// byte (a value cut off by the end of the stream is left out).
fn values(stream: &Stamped) -> Vec<(Duration, Bytes)> {
    let whole: Bytes = stream
        .iter()
        .flat_map(|(_, bytes)| bytes.iter().copied())
        .collect::<Vec<u8>>()
        .into();
    // Where each read starts in `whole`, and its time.
    let mut starts = Vec::with_capacity(stream.len());
    let mut offset = 0;
    for (at, bytes) in stream {
        starts.push((offset, *at));
        offset += bytes.len();
    }
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(end) = value_end(&whole, at) {
        let read = starts.partition_point(|&(start, _)| start <= at) - 1;
        out.push((starts[read].1, whole.slice(at..end)));
        at = end;
    }
    out
}

/// Where the RESP value starting at `at` ends; `None` if `bytes` stops before it does.
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    let (kind, line, after) = line(bytes, at)?;
    match kind {
        b'+' | b'-' | b':' => Some(after),
        b'$' => match parse(line)? {
            n if n < 0 => Some(after),
            n => {
                let end = after + n as usize + 2;
                (end <= bytes.len()).then_some(end)
            }
        },
        b'*' => {
            let mut end = after;
            for _ in 0..parse(line)?.max(0) {
                end = value_end(bytes, end)?;
            }
            Some(end)
        }
        _ => panic!("not RESP2 at byte {at}: {:?}", bytes[at] as char),
    }
}

/// The type byte, the rest of the line, and where the next line starts.
fn line(bytes: &[u8], at: usize) -> Option<(u8, &[u8], usize)> {
    let kind = *bytes.get(at)?;
    let rest = &bytes[at + 1..];
    let cr = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((kind, &rest[..cr], at + 1 + cr + 2))
}

fn parse(digits: &[u8]) -> Option<i64> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The arguments of a request (an array of bulk strings); `None` for anything else.
fn arguments(request: &Bytes) -> Option<Vec<Bytes>> {
    let (kind, count, mut at) = line(request, 0)?;
    if kind != b'*' {
        return None;
    }
    let mut args = Vec::new();
    for _ in 0..parse(count)? {
        let (kind, length, start) = line(request, at)?;
        let length = usize::try_from(parse(length)?).ok()?;
        if kind != b'$' {
            return None;
        }
        args.push(request.slice(start..start + length));
        at = start + length + 2;
    }
    Some(args)
}

/// The storage requests among `commands`, as the auditor's server view: MGET a read, MSET a
/// write, DEL a delete, of the keys `addr_of` recognises as elements (other commands and keys
/// are left out). Times are since `since` (a time since the Unix epoch, as [`unix_now`] gives).
pub fn to_trace(
    commands: &[TappedCommand],
    since: Duration,
    addr_of: impl Fn(&[u8]) -> Option<Addr>,
) -> Trace {
    let mut trace = Trace::new();
    for command in commands {
        let Some((name, args)) = command.args.split_first() else {
            continue;
        };
        let keys =
            |args: &[Bytes]| -> Vec<Addr> { args.iter().filter_map(|k| addr_of(k)).collect() };
        let (kind, addrs, values) = match name.to_ascii_uppercase().as_slice() {
            b"MGET" => (AccessKind::Read, keys(args), Vec::new()),
            b"DEL" => (AccessKind::Delete, keys(args), Vec::new()),
            b"MSET" => {
                let pairs: Vec<(Addr, Bytes)> = args
                    .chunks_exact(2)
                    .filter_map(|pair| Some((addr_of(&pair[0])?, pair[1].clone())))
                    .collect();
                let (addrs, values) = pairs.into_iter().unzip();
                (AccessKind::Write, addrs, values)
            }
            _ => continue,
        };
        if addrs.is_empty() {
            continue;
        }
        trace.push(Observed {
            at: command.sent.saturating_sub(since),
            answered: command.answered.map(|at| at.saturating_sub(since)),
            kind,
            addrs,
            values,
        });
    }
    trace
}

/// The time since the Unix epoch, on the clock the kernel stamps packets with.
pub fn unix_now() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn stamped(parts: &[(u64, &[u8])]) -> Stamped {
        parts
            .iter()
            .map(|&(ms, b)| (Duration::from_millis(ms), Bytes::copy_from_slice(b)))
            .collect()
    }

    #[test]
    fn requests_take_the_time_of_their_first_byte_and_answers_pair_in_order() {
        let requests = stamped(&[
            (1, b"*2\r\n$4\r\nMGET\r\n$1\r\na\r\n*3\r\n$4\r\nMS"),
            (2, b"ET\r\n$1\r\na\r\n$2\r\n\x00\r\r\n"),
            (3, b"*1\r\n$4\r\nPING\r\n"),
        ]);
        let answers = stamped(&[(5, b"*1\r\n$-1\r\n+O"), (6, b"K\r\n")]);
        let commands = pair(&requests, &answers);
        let at = |ms| Duration::from_millis(ms);
        assert_eq!(commands.len(), 3);
        assert_eq!(
            (commands[0].sent, commands[0].answered),
            (at(1), Some(at(5)))
        );
        assert_eq!(
            (commands[1].sent, commands[1].answered),
            (at(1), Some(at(5)))
        );
        assert_eq!(commands[1].args[2], Bytes::from_static(b"\x00\r"));
        assert_eq!((commands[2].sent, commands[2].answered), (at(3), None));
    }

    #[test]
    fn element_commands_become_a_server_view() {
        let command = |ms: u64, args: &[&'static [u8]]| TappedCommand {
            sent: Duration::from_millis(100_000 + ms),
            answered: Some(Duration::from_millis(100_000 + ms + 1)),
            args: args.iter().map(|a| Bytes::from_static(a)).collect(),
        };
        let commands = [
            command(0, &[b"MGET", b"k:01", b"k:02"]),
            command(1, &[b"PING"]),
            command(2, &[b"MSET", b"k:02", b"x", b"other", b"y", b"k:01", b"z"]),
            command(3, &[b"del", b"k:01"]),
        ];
        let addr_of = |key: &[u8]| -> Option<Addr> {
            let hex = std::str::from_utf8(key.strip_prefix(b"k:")?).ok()?;
            Addr::from_str_radix(hex, 16).ok()
        };
        let trace = to_trace(&commands, Duration::from_secs(100), addr_of);
        assert_eq!(trace.len(), 3);
        assert_eq!(
            (trace[0].kind, &trace[0].addrs[..]),
            (AccessKind::Read, &[1, 2][..])
        );
        assert_eq!(trace[1].at, Duration::from_millis(2));
        assert_eq!(trace[1].answered, Some(Duration::from_millis(3)));
        assert_eq!(trace[1].addrs, [2, 1]);
        assert_eq!(trace[1].values, [Bytes::from("x"), Bytes::from("z")]);
        assert_eq!(trace[2].kind, AccessKind::Delete);
    }

    /// A stand-in for Redis that answers every request line with `+OK` after a pause.
    fn slow_echo() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            let mut buf = [0u8; 64];
            while let Ok(n @ 1..) = socket.read(&mut buf) {
                std::thread::sleep(Duration::from_millis(30));
                socket
                    .write_all(&b"+OK\r\n".repeat(buf[..n].iter().filter(|&&b| b == b'*').count()))
                    .unwrap();
            }
        });
        port
    }

    #[test]
    fn stamps_requests_when_they_were_sent_not_when_the_relay_read_them() {
        let tap = WireTap::start(slow_echo());
        let mut client = TcpStream::connect(("127.0.0.1", tap.port())).unwrap();
        let mut sent = Vec::new();
        for _ in 0..3 {
            sent.push(unix_now());
            client.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
            let mut ok = [0u8; 5];
            client.read_exact(&mut ok).unwrap();
            assert_eq!(&ok, b"+OK\r\n");
        }
        drop(client);
        std::thread::sleep(Duration::from_millis(50));
        let commands = tap.finish();
        assert_eq!(commands.len(), 3);
        for (command, sent) in commands.iter().zip(sent) {
            let answered = command.answered.expect("answered");
            // Stamped within a few ms of the write (the kernel's clock, not the relay's
            // thread), and answered after Redis's 30 ms pause.
            assert!(command.sent >= sent && command.sent - sent < Duration::from_millis(10));
            assert!(
                answered - command.sent >= Duration::from_millis(30),
                "{command:?}"
            );
        }
    }
}
