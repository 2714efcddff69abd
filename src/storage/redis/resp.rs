//! The few pieces of RESP (Redis's protocol, version 2) the pipelined connection (`pipe`)
//! speaks: commands written as arrays of bulk strings, and replies read one at a time from a
//! buffered stream into the handful of shapes its commands answer with.
//!
//! Must not touch: sockets, queues, what a count means.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use crate::storage::COUNT_CEILING;

/// One reply, as far as this connection's commands need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reply {
    /// `:n`
    Int(i64),
    /// `+OK`: a command done (a `SET` that made its key, `AUTH`).
    Ok,
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
    /// an error or an `OK` (neither command's answer).
    pub(super) fn count(&self) -> Option<u64> {
        match self {
            Reply::Int(count) => Some(u64::try_from(*count).unwrap_or(0)),
            Reply::Nil => Some(0),
            Reply::Text(bytes) => Some(stored_count(bytes)),
            Reply::Ok | Reply::Error(_) => None,
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

/// Reads the next reply. A whole reply already in `read`'s buffer is parsed where it lies (no
/// copy, no system call); one cut by the buffer's end is gathered in `partial` first. A stream
/// that ends, or bytes that are no reply this connection expects (arrays, maps, oversized
/// strings), are errors: the connection is then out of step and must close.
pub(super) async fn read_reply<R: AsyncBufRead + Unpin>(
    read: &mut R,
    partial: &mut Vec<u8>,
) -> io::Result<Reply> {
    partial.clear();
    loop {
        let buffered = read.fill_buf().await?;
        if buffered.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "Redis closed the connection with answers awaited",
            ));
        }
        let had = partial.len();
        let parsed = match had {
            0 => parse_reply(buffered)?,
            _ => {
                partial.extend_from_slice(buffered);
                parse_reply(partial)?
            }
        };
        let Some((reply, used)) = parsed else {
            if had == 0 {
                partial.extend_from_slice(buffered);
            }
            let taken = buffered.len();
            read.consume(taken);
            if partial.len() > MAX_BULK + 32 {
                return Err(garbage("a reply of no sane length"));
            }
            continue;
        };
        read.consume(used - had);
        return Ok(reply);
    }
}

/// The first reply in `bytes` and how many bytes it took; `None` when it is not all there.
fn parse_reply(bytes: &[u8]) -> io::Result<Option<(Reply, usize)>> {
    let Some(end) = bytes.iter().position(|&b| b == b'\n') else {
        return Ok(None);
    };
    let text = bytes[..end]
        .strip_suffix(b"\r")
        .ok_or_else(|| garbage("a reply line without its CRLF"))?;
    let (&kind, rest) = text.split_first().ok_or_else(|| garbage("an empty line"))?;
    let after = end + 1;
    let reply = match kind {
        b':' => Reply::Int(parse(rest)?),
        b'+' if rest == b"OK" => Reply::Ok,
        b'+' => Reply::Text(rest.to_vec()),
        b'-' => Reply::Error(String::from_utf8_lossy(rest).into_owned()),
        b'$' => match parse(rest)? {
            -1 => Reply::Nil,
            len => {
                let len = usize::try_from(len)
                    .ok()
                    .filter(|len| *len <= MAX_BULK)
                    .ok_or_else(|| garbage("a bulk string of no sane length"))?;
                let Some(body) = bytes.get(after..after + len + 2) else {
                    return Ok(None);
                };
                let text = body
                    .strip_suffix(b"\r\n")
                    .ok_or_else(|| garbage("a bulk string without its CRLF"))?;
                return Ok(Some((Reply::Text(text.to_vec()), after + len + 2)));
            }
        },
        _ => {
            return Err(garbage(
                "a reply of a kind no command here is answered with",
            ));
        }
    };
    Ok(Some((reply, after)))
}

/// Parses `input` (its first byte picks a read buffer of 1 to 64 bytes, the rest is the
/// stream) as the reader does, and again through one large buffer: the replies must be the same
/// however the stream is cut. Returns how many were read before the end or an error. For the
/// fuzz target only (`cargo fuzz` sets `cfg(fuzzing)`).
#[cfg(fuzzing)]
pub fn fuzz_replies(input: &[u8]) -> usize {
    let Some((&size, stream)) = input.split_first() else {
        return 0;
    };
    let small = fuzz_read(stream, 1 + usize::from(size % 64));
    let whole = fuzz_read(stream, 64 * 1024);
    assert_eq!(
        small, whole,
        "the replies depend on where the stream is cut"
    );
    small.len()
}

#[cfg(fuzzing)]
fn fuzz_read(stream: &[u8], capacity: usize) -> Vec<Reply> {
    use std::future::Future;
    let mut read = tokio::io::BufReader::with_capacity(capacity, stream);
    let (mut partial, mut replies) = (Vec::new(), Vec::new());
    loop {
        let mut next = std::pin::pin!(read_reply(&mut read, &mut partial));
        // An in-memory reader never waits: one poll finishes the future.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match next.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(Ok(reply)) => replies.push(reply),
            _ => return replies,
        }
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
                Reply::Ok,
                Reply::Nil,
                Reply::Text(b"17".to_vec()),
                Reply::Error("WRONGTYPE no".into()),
                Reply::Int(-3),
            ]
        );
    }

    #[tokio::test]
    async fn replies_cut_anywhere_by_the_buffer_read_the_same() {
        let bytes = b":42\r\n+OK\r\n$-1\r\n$12\r\n170000000000\r\n-WRONGTYPE no\r\n:-3\r\n";
        let whole: Vec<Reply> = replies(bytes).await.into_iter().flatten().collect();
        assert_eq!(whole.len(), 6);
        for capacity in [1, 2, 3, 5, 8, 13] {
            let mut read = tokio::io::BufReader::with_capacity(capacity, &bytes[..]);
            let mut partial = Vec::new();
            for expected in &whole {
                let got = read_reply(&mut read, &mut partial).await.expect("reply");
                assert_eq!(&got, expected, "buffer of {capacity} bytes");
            }
            let end = read_reply(&mut read, &mut partial).await.expect_err("end");
            assert_eq!(end.kind(), io::ErrorKind::UnexpectedEof);
        }
    }

    #[tokio::test]
    async fn a_line_that_never_ends_is_refused_not_gathered_for_ever() {
        let endless = vec![b'+'; MAX_BULK + 4_096];
        let mut read = tokio::io::BufReader::with_capacity(1_024, &endless[..]);
        let error = read_reply(&mut read, &mut Vec::new())
            .await
            .expect_err("refused");
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
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
