//! The few pieces of RESP (Redis's protocol, version 2) the pipelined connection (`pipe`)
//! speaks: commands written as arrays of bulk strings, and replies read one at a time from a
//! buffered stream into the handful of shapes its commands answer with.
//!
//! Must not touch: sockets, queues, what a count means.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

use crate::storage::COUNT_CEILING;

/// One reply, as far as this connection's commands need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reply {
    /// `:n`
    Int(i64),
    /// A null bulk string (`$-1`): a missing key, or a `SET … NX` that found one.
    Nil,
    /// A simple (`+OK`) or bulk string's bytes.
    Text(Vec<u8>),
    /// `-ERR …`: what Redis said.
    Error(String),
}

impl Reply {
    /// What Redis said, when this is an error.
    pub(super) fn said(&self) -> Option<&str> {
        match self {
            Reply::Error(said) => Some(said),
            _ => None,
        }
    }

    /// The count an `INCRBY` or `GET` answered: a missing counter is 0, a value that is not a
    /// count reads as the ceiling (as the script reads it), a negative one as 0; `None` for
    /// an error.
    pub(super) fn count(&self) -> Option<u64> {
        match self {
            Reply::Int(count) => Some(u64::try_from(*count).unwrap_or(0)),
            Reply::Nil => Some(0),
            Reply::Text(bytes) => Some(stored_count(bytes)),
            Reply::Error(_) => None,
        }
    }
}

/// A counter's stored value as a count: a negative one is 0, one that is not a number reads
/// as the ceiling (as the script reads it).
pub(super) fn stored_count(bytes: &[u8]) -> u64 {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.parse::<i64>().ok())
        .map_or(COUNT_CEILING, |count| u64::try_from(count).unwrap_or(0))
}

/// Appends a command (an array of bulk strings) to `out`.
pub(super) fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(args.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    for arg in args {
        bulk(out, arg);
    }
}

/// One bulk string: `$<len>\r\n<bytes>\r\n`.
fn bulk(out: &mut Vec<u8>, arg: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(arg.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(arg);
    out.extend_from_slice(b"\r\n");
}

/// `SET key 0 NX EX ttl`, as [`command`] writes it, its fixed parts written whole: a
/// request's hot path writes one per added counter.
pub(super) fn set_zero_nx_ex(out: &mut Vec<u8>, key: &[u8], ttl: u64) {
    out.extend_from_slice(b"*6\r\n$3\r\nSET\r\n");
    bulk(out, key);
    out.extend_from_slice(b"$1\r\n0\r\n$2\r\nNX\r\n$2\r\nEX\r\n");
    bulk(out, itoa::Buffer::new().format(ttl).as_bytes());
}

/// `INCRBY key n`, as [`command`] writes it.
pub(super) fn incrby(out: &mut Vec<u8>, key: &[u8], n: u64) {
    out.extend_from_slice(b"*3\r\n$6\r\nINCRBY\r\n");
    bulk(out, key);
    bulk(out, itoa::Buffer::new().format(n).as_bytes());
}

/// `GET key`, as [`command`] writes it.
pub(super) fn get(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
    bulk(out, key);
}

/// Bulk strings longer than this are refused (no command here is answered with one).
const MAX_BULK: usize = 64 * 1024;

/// Reads the next reply, reusing `line`. A stream that ends, or bytes that are no reply this
/// connection expects (arrays, maps, oversized strings), are errors: the connection is then
/// out of step and must close.
pub(super) async fn read_reply<R: AsyncBufRead + Unpin>(
    read: &mut R,
    line: &mut Vec<u8>,
) -> io::Result<Reply> {
    line.clear();
    if read.read_until(b'\n', line).await? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "Redis closed the connection with answers awaited",
        ));
    }
    let text = line
        .strip_suffix(b"\r\n")
        .ok_or_else(|| garbage("a reply line without its CRLF"))?;
    let (&kind, rest) = text.split_first().ok_or_else(|| garbage("an empty line"))?;
    match kind {
        b':' => parse(rest).map(Reply::Int),
        b'+' => Ok(Reply::Text(rest.to_vec())),
        b'-' => Ok(Reply::Error(String::from_utf8_lossy(rest).into_owned())),
        b'$' => match parse(rest)? {
            -1 => Ok(Reply::Nil),
            len => {
                let len = usize::try_from(len)
                    .ok()
                    .filter(|len| *len <= MAX_BULK)
                    .ok_or_else(|| garbage("a bulk string of no sane length"))?;
                let mut bytes = vec![0; len + 2];
                read.read_exact(&mut bytes).await?;
                if !bytes.ends_with(b"\r\n") {
                    return Err(garbage("a bulk string without its CRLF"));
                }
                bytes.truncate(len);
                Ok(Reply::Text(bytes))
            }
        },
        _ => Err(garbage(
            "a reply of a kind no command here is answered with",
        )),
    }
}

fn parse(digits: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| garbage("a number that is not one"))
}

fn garbage(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("Redis sent {what}; the connection is out of step"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn replies(bytes: &[u8]) -> Vec<io::Result<Reply>> {
        let mut read = bytes;
        let mut line = Vec::new();
        let mut out = Vec::new();
        while !read.is_empty() {
            let reply = read_reply(&mut read, &mut line).await;
            let stop = reply.is_err();
            out.push(reply);
            if stop {
                break;
            }
        }
        out
    }

    #[tokio::test]
    async fn reads_each_kind_a_command_here_is_answered_with() {
        let got = replies(b":42\r\n+OK\r\n$-1\r\n$2\r\n17\r\n-WRONGTYPE no\r\n:-3\r\n").await;
        let got: Vec<Reply> = got.into_iter().map(|r| r.expect("reply")).collect();
        assert_eq!(
            got,
            vec![
                Reply::Int(42),
                Reply::Text(b"OK".to_vec()),
                Reply::Nil,
                Reply::Text(b"17".to_vec()),
                Reply::Error("WRONGTYPE no".into()),
                Reply::Int(-3),
            ]
        );
    }

    #[tokio::test]
    async fn bytes_out_of_step_are_errors_not_replies() {
        for bytes in [
            &b"*1\r\n:1\r\n"[..],
            b":12x\r\n",
            b":1\n",
            b"$5\r\nab\r\n",
            b"$99999999\r\n",
            b"",
        ] {
            let mut read = bytes;
            let mut line = Vec::new();
            let error = read_reply(&mut read, &mut line).await.expect_err("error");
            assert!(
                matches!(
                    error.kind(),
                    io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof
                ),
                "{bytes:?}: {error}"
            );
        }
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        command(&mut out, &[b"INCRBY", b"k\r\nx", b"12"]);
        assert_eq!(out, b"*3\r\n$6\r\nINCRBY\r\n$4\r\nk\r\nx\r\n$2\r\n12\r\n");
    }

    #[test]
    fn the_hot_commands_are_written_as_command_writes_them() {
        let key = b"ratelimit_bench_k\r\n_1733300000";
        for n in [0, 1, 9, 10, 12_345, u64::MAX] {
            let digits = n.to_string();
            let (mut fixed, mut general) = (Vec::new(), Vec::new());
            set_zero_nx_ex(&mut fixed, key, n);
            let set: [&[u8]; 6] = [b"SET", key, b"0", b"NX", b"EX", digits.as_bytes()];
            command(&mut general, &set);
            incrby(&mut fixed, key, n);
            command(&mut general, &[b"INCRBY", key, digits.as_bytes()]);
            get(&mut fixed, key);
            command(&mut general, &[b"GET", key]);
            assert_eq!(fixed, general, "{n}");
        }
    }
}
