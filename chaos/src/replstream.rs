//! Attach to a master's replication stream as a replica would: `SYNC` over a
//! raw socket, skip the RDB payload, then collect every command the master
//! propagates.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

pub struct Stream {
    stop: Arc<AtomicBool>,
    commands: Arc<Mutex<Vec<Vec<String>>>>,
    thread: Option<JoinHandle<()>>,
}

fn read_line(r: &mut impl BufRead) -> std::io::Result<String> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

/// One RESP array of bulk strings (what a master propagates), a packed
/// effect spelled out as its text form (see [`spell_out`]).
fn read_command(r: &mut impl BufRead) -> std::io::Result<Vec<String>> {
    let header = read_line(r)?;
    let n: usize = header
        .strip_prefix('*')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an array: {header:?}")))?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let h = read_line(r)?;
        let len: usize = h
            .strip_prefix('$')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("not a bulk string: {h:?}")))?;
        let mut buf = vec![0; len + 2];
        r.read_exact(&mut buf)?;
        buf.truncate(len);
        out.push(buf);
    }
    Ok(spell_out(out))
}

/// `LOCK.SETSTATE key token state` and `LOCK.SETHOLDER key token state`
/// carry their values packed in `state` (`redis_lock_core::effect`); the
/// checks read the text form, one value per argument: `LOCK.SETSTATE key
/// token fence deadline granted [extends [OWNER label]]`, `LOCK.SETHOLDER
/// key limit count token fence deadline granted extends [OWNER label]`. A
/// state that does not unpack reads as `<bad state>`, which no check takes
/// for an absolute time.
fn spell_out(command: Vec<Vec<u8>>) -> Vec<String> {
    let text = |arg: &[u8]| String::from_utf8_lossy(arg).to_string();
    match redis_lock_core::effect::spell_out(&command) {
        None => command.iter().map(|a| text(a)).collect(),
        Some(Ok(spelled)) => spelled.iter().map(|a| text(a)).collect(),
        Some(Err(_)) => {
            let mut out: Vec<String> = command[..3].iter().map(|a| text(a)).collect();
            out.push("<bad state>".into());
            out
        }
    }
}

pub fn attach(addr: &str) -> Result<Stream, String> {
    let mut sock = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    sock.write_all(b"SYNC\r\n").map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(sock.try_clone().map_err(|e| e.to_string())?);
    // Newlines are keep-alives while the master saves; then `$<len>` and the
    // RDB payload, without a trailing CRLF.
    let len: usize = loop {
        let line = read_line(&mut reader).map_err(|e| format!("SYNC: {e}"))?;
        if line.is_empty() {
            continue;
        }
        break line
            .strip_prefix('$')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("SYNC: unexpected {line:?}"))?;
    };
    let mut rdb = vec![0; len];
    reader
        .read_exact(&mut rdb)
        .map_err(|e| format!("SYNC payload: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let commands = Arc::new(Mutex::new(Vec::new()));
    let (stop2, commands2) = (stop.clone(), commands.clone());
    let thread = thread::spawn(move || {
        while !stop2.load(Ordering::Relaxed) {
            // A partial command cut by the read timeout would desync the
            // parser, so wait for data before starting one.
            match reader.fill_buf() {
                Ok([]) => return,
                Ok(_) => {}
                Err(_) => continue,
            }
            // A command has started: read it whole, with a longer timeout.
            let _ = sock.set_read_timeout(Some(Duration::from_secs(5)));
            let cmd = read_command(&mut reader).map_err(|e| eprintln!("replication stream: {e}"));
            let _ = sock.set_read_timeout(Some(Duration::from_millis(200)));
            let cmd = cmd.ok();
            match cmd {
                Some(cmd) => commands2
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(cmd),
                None => return,
            }
        }
        drop(sock);
    });
    Ok(Stream {
        stop,
        commands,
        thread: Some(thread),
    })
}

impl Stream {
    /// Stop reading once a command on `key` has gone by (a write the
    /// harness made last: everything before it has been read, however far
    /// behind a busy machine left this reader), or after `limit`; every
    /// command seen.
    pub fn stop_after(self, key: &str, limit: Duration) -> Vec<Vec<String>> {
        let start = std::time::Instant::now();
        let mut looked = 0;
        while start.elapsed() < limit {
            let commands = self.commands.lock().unwrap_or_else(|e| e.into_inner());
            if commands[looked..]
                .iter()
                .any(|c| c.get(1).is_some_and(|k| k == key))
            {
                break;
            }
            looked = commands.len();
            drop(commands);
            thread::sleep(Duration::from_millis(10));
        }
        self.stop()
    }

    /// Stop reading; every command seen so far.
    pub fn stop(mut self) -> Vec<Vec<String>> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.commands.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::spell_out;
    use redis_lock_core::effect::{pack, Permits, State};

    fn args(parts: &[&[u8]]) -> Vec<Vec<u8>> {
        parts.iter().map(|p| p.to_vec()).collect()
    }

    #[test]
    fn packed_effects_read_as_their_text_form() {
        let state = State {
            fence: 7,
            deadline_ms: 1_764_601_230_000,
            granted_ms: 1_764_601_200_000,
            extends: 0,
            owner: None,
            lease: None,
        };
        let packed = pack(None, &state);
        assert_eq!(
            spell_out(args(&[b"LOCK.SETSTATE", b"k", b"t", packed.bytes()])),
            [
                "LOCK.SETSTATE",
                "k",
                "t",
                "7",
                "1764601230000",
                "1764601200000"
            ]
        );
        let extended = pack(
            None,
            &State {
                extends: 2,
                ..state
            },
        );
        assert_eq!(
            spell_out(args(&[b"lock.setstate", b"k", b"t", extended.bytes()])).len(),
            7
        );
        let holder = pack(Some(Permits { limit: 3, count: 1 }), &state);
        assert_eq!(
            spell_out(args(&[b"LOCK.SETHOLDER", b"k", b"t", holder.bytes()]))[2..5],
            ["3", "1", "t"]
        );
        assert_eq!(
            spell_out(args(&[b"LOCK.SETSTATE", b"k", b"t", b"junk"]))[3],
            "<bad state>"
        );
        assert_eq!(spell_out(args(&[b"DEL", b"k"])), ["DEL", "k"]);
    }
}
