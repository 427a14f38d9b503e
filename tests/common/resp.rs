//! A client on a plain socket, for tests that need every byte of a reply
//! (a token must not show; a reply must be byte for byte the server's own):
//! no AUTH, HELLO or CLIENT SETINFO unless the test sends them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::Server;

/// A RESP2/RESP3 reply, as much as these tests need.
#[derive(Clone, Debug, PartialEq)]
pub enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Null,
    Array(Vec<Resp>),
    Map(Vec<(Resp, Resp)>),
    /// Double, boolean, big number, verbatim string: kept as text.
    Other(String),
}

/// A plain socket: no AUTH, no HELLO, no CLIENT SETINFO unless the test
/// sends them, and every byte of each reply kept.
pub struct RawClient {
    reader: BufReader<TcpStream>,
}

impl RawClient {
    pub fn connect(server: &Server) -> RawClient {
        let stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
        stream
            .set_read_timeout(Some(super::scaled(Duration::from_secs(10))))
            .unwrap();
        RawClient {
            reader: BufReader::new(stream),
        }
    }

    /// Send one command; its reply, decoded and as raw bytes.
    pub fn call(&mut self, args: &[&[u8]]) -> (Resp, Vec<u8>) {
        self.send(args);
        let mut raw = Vec::new();
        let reply = self.read(&mut raw);
        (reply, raw)
    }

    /// Send one command, without reading its reply.
    pub fn send(&mut self, args: &[&[u8]]) {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
        self.reader.get_mut().write_all(&out).expect("send");
    }

    fn line(&mut self, raw: &mut Vec<u8>) -> String {
        let mut line = Vec::new();
        self.reader
            .read_until(b'\n', &mut line)
            .expect("read reply");
        assert!(line.ends_with(b"\r\n"), "truncated reply: {line:?}");
        raw.extend_from_slice(&line);
        String::from_utf8_lossy(&line[..line.len() - 2]).to_string()
    }

    /// The next reply, decoded; its bytes are added to `raw`.
    pub fn read(&mut self, raw: &mut Vec<u8>) -> Resp {
        let line = self.line(raw);
        let (kind, rest) = line.split_at(1);
        let count = || rest.parse::<i64>().expect("length");
        match kind {
            "+" => Resp::Simple(rest.into()),
            "-" => Resp::Error(rest.into()),
            ":" => Resp::Int(count()),
            "_" => Resp::Null,
            "$" | "=" | "!" if count() < 0 => Resp::Null,
            "$" | "=" | "!" => {
                let mut body = vec![0u8; count() as usize + 2];
                self.reader.read_exact(&mut body).expect("read bulk");
                raw.extend_from_slice(&body);
                body.truncate(body.len() - 2);
                match kind {
                    "$" => Resp::Bulk(body),
                    "!" => Resp::Error(String::from_utf8_lossy(&body).into()),
                    _ => Resp::Other(String::from_utf8_lossy(&body).into()),
                }
            }
            "*" | "~" | ">" if count() < 0 => Resp::Null,
            "*" | "~" | ">" => Resp::Array((0..count()).map(|_| self.read(raw)).collect()),
            "%" => Resp::Map(
                (0..count())
                    .map(|_| (self.read(raw), self.read(raw)))
                    .collect(),
            ),
            "|" => {
                // An attribute: read and skip it, the reply follows.
                for _ in 0..count() * 2 {
                    self.read(raw);
                }
                self.read(raw)
            }
            "," | "#" | "(" => Resp::Other(rest.into()),
            _ => panic!("unknown reply type {line:?}"),
        }
    }
}
