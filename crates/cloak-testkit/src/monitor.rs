//! What a real Redis receives, captured with `MONITOR`: every command it runs, with its time to
//! the microsecond, turned into the server view the auditor reads (`cloak_core::Observed`).
//!
//! A `MONITOR` line is `+<seconds>.<micros> [<db> <client>] "CMD" "arg" …`, each argument
//! quoted with C-style escapes (`\\`, `\"`, `\n`, `\r`, `\t`, `\a`, `\b`, `\xHH`). Binary
//! elements come out four times larger, so captures keep values small.

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use cloak_core::{AccessKind, Addr, Observed, Trace};

/// One command as Redis ran it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonitorCommand {
    /// When Redis ran it, since the Unix epoch.
    pub at: Duration,
    /// The command name and its arguments, unescaped.
    pub args: Vec<Bytes>,
}

/// A `MONITOR` connection collecting every command until [`Monitor::finish`].
pub struct Monitor {
    stream: TcpStream,
    reader: JoinHandle<Vec<MonitorCommand>>,
}

impl Monitor {
    /// Starts monitoring the Redis on `port`; commands run from now on are captured.
    pub fn start(port: u16) -> Self {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("Redis accepts MONITOR");
        stream.write_all(b"MONITOR\r\n").expect("MONITOR is sent");
        let mut reader = BufReader::new(stream.try_clone().expect("a second socket handle"));
        let mut ok = String::new();
        reader.read_line(&mut ok).expect("MONITOR is answered");
        assert_eq!(ok.trim_end(), "+OK", "MONITOR refused");
        let reader = std::thread::spawn(move || {
            let mut commands = Vec::new();
            let mut line = Vec::new();
            while matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
                if let Some(command) = parse_line(&line) {
                    commands.push(command);
                }
                line.clear();
            }
            commands
        });
        Self { stream, reader }
    }

    /// Stops monitoring and hands over what was captured.
    pub fn finish(self) -> Vec<MonitorCommand> {
        // Closing the socket ends the reader's loop; a failure means it is closed already.
        let _ = self.stream.shutdown(Shutdown::Both);
        self.reader.join().expect("the MONITOR reader panicked")
    }
}

/// One `MONITOR` line; `None` for anything else (a status line, a truncated line).
pub fn parse_line(line: &[u8]) -> Option<MonitorCommand> {
    let line = line.strip_prefix(b"+")?;
    let space = line.iter().position(|&b| b == b' ')?;
    let stamp = std::str::from_utf8(&line[..space]).ok()?;
    let (seconds, micros) = stamp.split_once('.')?;
    let at =
        Duration::from_secs(seconds.parse().ok()?) + Duration::from_micros(micros.parse().ok()?);
    let rest = &line[space + 1..];
    let client_end = rest.iter().position(|&b| b == b']')?;
    let mut args = Vec::new();
    let mut bytes = rest[client_end + 1..].iter().copied();
    loop {
        match bytes.next() {
            Some(b'"') => args.push(Bytes::from(quoted(&mut bytes)?)),
            Some(b' ') => {}
            Some(b'\r' | b'\n') | None => break,
            Some(_) => return None,
        }
    }
    (!args.is_empty()).then_some(MonitorCommand { at, args })
}

/// The rest of a quoted argument, after its opening quote, unescaped.
fn quoted(bytes: &mut impl Iterator<Item = u8>) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        match bytes.next()? {
            b'"' => return Some(out),
            b'\\' => out.push(match bytes.next()? {
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'a' => 7,
                b'b' => 8,
                b'x' => {
                    let hex = [bytes.next()?, bytes.next()?];
                    u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?
                }
                other => other,
            }),
            b => out.push(b),
        }
    }
}

/// The storage requests among `commands`, as the auditor's server view: MGET a read, MSET a
/// write, DEL a delete, of the keys `addr_of` recognises as elements (other commands and keys
/// are left out). Times are since `since` (a time since the Unix epoch, as [`unix_now`] gives).
/// Redis answers a command as it runs it and `MONITOR` stamps the run, so each request counts
/// as answered when it ran.
pub fn to_trace(
    commands: &[MonitorCommand],
    since: Duration,
    addr_of: impl Fn(&[u8]) -> Option<Addr>,
) -> Trace {
    let mut trace = Trace::new();
    for command in commands {
        let name = command.args[0].to_ascii_uppercase();
        let args = &command.args[1..];
        let (kind, addrs, values) = match name.as_slice() {
            b"MGET" => (AccessKind::Read, keys(args, &addr_of), Vec::new()),
            b"DEL" => (AccessKind::Delete, keys(args, &addr_of), Vec::new()),
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
        let at = command.at.saturating_sub(since);
        trace.push(Observed {
            at,
            answered: Some(at),
            kind,
            addrs,
            values,
        });
    }
    trace
}

/// The time since the Unix epoch, on the clock `MONITOR` stamps commands with.
pub fn unix_now() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

fn keys(args: &[Bytes], addr_of: impl Fn(&[u8]) -> Option<Addr>) -> Vec<Addr> {
    args.iter().filter_map(|key| addr_of(key)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_escaped_binary_arguments() {
        let line =
            br#"+1732527284.000042 [0 127.0.0.1:50000] "MSET" "k:01" "a\x00\"\\\n\xff" "k:02" "b""#;
        let command = parse_line(line).unwrap();
        assert_eq!(command.at, Duration::new(1_732_527_284, 42_000));
        let args: Vec<&[u8]> = command.args.iter().map(|a| a.as_ref()).collect();
        assert_eq!(
            args,
            [&b"MSET"[..], b"k:01", b"a\0\"\\\n\xff", b"k:02", b"b"]
        );
        assert_eq!(parse_line(b"+OK\r\n"), None);
    }

    #[test]
    fn element_commands_become_a_server_view() {
        let lines: [&[u8]; 4] = [
            br#"+100.000000 [0 127.0.0.1:1] "MGET" "k:01" "k:02""#,
            br#"+100.000500 [0 127.0.0.1:1] "PING""#,
            br#"+100.001000 [0 127.0.0.1:1] "MSET" "k:02" "x" "other" "y" "k:01" "z""#,
            br#"+100.002000 [0 127.0.0.1:1] "DEL" "k:01""#,
        ];
        let commands: Vec<MonitorCommand> = lines.iter().filter_map(|l| parse_line(l)).collect();
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
        assert_eq!(trace[1].at, Duration::from_millis(1));
        assert_eq!(trace[1].addrs, [2, 1]);
        assert_eq!(trace[1].values, [Bytes::from("x"), Bytes::from("z")]);
        assert_eq!(
            (trace[2].kind, &trace[2].addrs[..]),
            (AccessKind::Delete, &[1][..])
        );
    }
}
