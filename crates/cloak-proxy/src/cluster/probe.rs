//! The probes a cluster proxy sends the other proxies: every [`PROBE_EVERY`], on one connection
//! per proxy kept open between probes, `CLOAK.HEALTH` (after `AUTH` when the proxies have a
//! password), whose answer lists that proxy's partitions and whether their storage answers.
//!
//! A probe that fails to connect, times out ([`PROBE_TIMEOUT`]) or gets an answer other than the
//! one the map expects (another cluster file's partitions) marks the proxy as not answering, with
//! why; see [`Health`]. Each probe costs a few bytes on a fixed timer, whatever the workload, and
//! its memory is bounded: an answer longer than [`MAX_ANSWER`] is refused.

use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::health::{Health, PROBE_EVERY, PROBE_TIMEOUT};

/// The longest `CLOAK.HEALTH` answer read: a line per partition, each with one error's text.
const MAX_ANSWER: usize = 64 << 10;

/// Probes every other proxy of the map until dropped (each in its own task of `tasks`).
pub fn spawn_all(
    health: &Arc<Health>,
    password: Option<&str>,
    tasks: &mut tokio::task::JoinSet<()>,
) {
    for proxy in 0..health.map().proxies().len() {
        if proxy != health.me() {
            tasks.spawn(watch(health.clone(), proxy, password.map(str::to_string)));
        }
    }
}

/// Probes `proxy` forever, recording each result.
async fn watch(health: Arc<Health>, proxy: usize, password: Option<String>) {
    let address = health.map().proxies()[proxy].address();
    let expected: Vec<usize> = health.map().hosted_by(proxy).map(|p| p.index).collect();
    let mut connection = None;
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let probe = probe(&mut connection, &address, password.as_deref(), &expected);
        match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
            Ok(Ok(failing)) => health.answered(proxy, failing),
            Ok(Err(why)) => {
                connection = None;
                health.unanswered(proxy, why);
            }
            Err(_) => {
                connection = None;
                health.unanswered(
                    proxy,
                    format!("no answer within {}s", PROBE_TIMEOUT.as_secs()),
                );
            }
        }
    }
}

/// One probe of the proxy at `address` (connecting first if needed): its failing partitions.
async fn probe(
    connection: &mut Option<BufReader<TcpStream>>,
    address: &str,
    password: Option<&str>,
    expected: &[usize],
) -> Result<Vec<(usize, String)>, String> {
    if connection.is_none() {
        *connection = Some(connect(address, password).await?);
    }
    let Some(stream) = connection.as_mut() else {
        return Err("not connected".into());
    };
    send(stream, &["CLOAK.HEALTH"]).await?;
    let answer = read_bulk(stream).await?;
    parse(&answer, expected)
}

async fn connect(address: &str, password: Option<&str>) -> Result<BufReader<TcpStream>, String> {
    let stream = TcpStream::connect(address).await.map_err(|error| {
        if error.kind() == std::io::ErrorKind::ConnectionRefused {
            "connection refused".to_string()
        } else {
            format!("cannot connect: {error}")
        }
    })?;
    let _ = stream.set_nodelay(true);
    let mut stream = BufReader::new(stream);
    if let Some(password) = password {
        send(&mut stream, &["AUTH", password]).await?;
        let line = read_line(&mut stream).await?;
        if line != "+OK" {
            return Err(format!("refused the cluster's password: {line}"));
        }
    }
    Ok(stream)
}

async fn send(stream: &mut BufReader<TcpStream>, args: &[&str]) -> Result<(), String> {
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream
        .get_mut()
        .write_all(request.as_bytes())
        .await
        .map_err(|error| format!("connection lost: {error}"))
}

/// One line of the answer, without its `\r\n`, at most [`MAX_ANSWER`] bytes.
async fn read_line(stream: &mut BufReader<TcpStream>) -> Result<String, String> {
    let mut line = Vec::new();
    let read = (&mut *stream)
        .take(MAX_ANSWER as u64)
        .read_until(b'\n', &mut line)
        .await
        .map_err(|error| format!("connection lost: {error}"))?;
    if read == 0 {
        return Err("closed the connection".into());
    }
    if !line.ends_with(b"\r\n") {
        return Err("answered a line too long or cut short".into());
    }
    line.truncate(line.len() - 2);
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// The bulk string answer to `CLOAK.HEALTH`.
async fn read_bulk(stream: &mut BufReader<TcpStream>) -> Result<String, String> {
    let header = read_line(stream).await?;
    let length = header
        .strip_prefix('$')
        .and_then(|length| length.parse::<usize>().ok())
        .filter(|length| *length <= MAX_ANSWER)
        .ok_or_else(|| format!("answered {header:?}, not its health (not a Cloak proxy?)"))?;
    let mut body = vec![0; length + 2];
    stream
        .read_exact(&mut body)
        .await
        .map_err(|error| format!("connection lost: {error}"))?;
    body.truncate(length);
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The failing partitions of a `CLOAK.HEALTH` answer (lines `N ok` or `N fail why`), which must
/// list exactly the partitions `expected` of the map.
fn parse(answer: &str, expected: &[usize]) -> Result<Vec<(usize, String)>, String> {
    let mut listed = Vec::new();
    let mut failing = Vec::new();
    for line in answer.lines() {
        let (partition, rest) = line.split_once(' ').unwrap_or((line, ""));
        let partition: usize = partition
            .parse()
            .map_err(|_| format!("answered a health line that is not one: {line:?}"))?;
        listed.push(partition);
        match rest.split_once(' ').unwrap_or((rest, "")) {
            ("ok", _) => {}
            ("fail", why) => failing.push((partition, why.to_string())),
            _ => return Err(format!("answered a health line that is not one: {line:?}")),
        }
    }
    if listed != expected {
        return Err(format!(
            "hosts partitions {listed:?}, but the cluster file says {expected:?} (started from \
             another cluster file?)"
        ));
    }
    Ok(failing)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn an_answer_must_list_the_partitions_the_map_gives_the_proxy() {
        assert_eq!(parse("1 ok\n3 ok\n", &[1, 3]), Ok(Vec::new()));
        assert_eq!(
            parse("1 ok\n3 fail storage unreachable: down\n", &[1, 3]),
            Ok(vec![(3, "storage unreachable: down".to_string())])
        );
        let other = parse("1 ok\n", &[1, 3]).unwrap_err();
        assert!(other.contains("hosts partitions [1]"), "{other}");
        let garbage = parse("PONG", &[1]).unwrap_err();
        assert!(garbage.contains("not one"), "{garbage}");
    }
}
