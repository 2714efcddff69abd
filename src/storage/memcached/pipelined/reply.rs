//! What a memcached server answers to our meta commands on a pipelined connection: [`Reply`]
//! and its parser, which reads replies off a buffered stream in order. The plain forms a
//! counter batch gets (`VA <len>` and a count, `NF`, and the status lines) are parsed in place
//! in the buffer when whole there; anything else goes through the general parser, which also
//! refuses a claimed length beyond any counter instead of allocating it. Fuzzed
//! (`fuzz/fuzz_targets/memcached_replies.rs`).
//!
//! Must not touch: how replies are matched to callers (`connection`'s reader), the commands.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

use crate::storage::memcached::transport::TransportError;

/// One answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reply {
    /// `VA` with the counter's value.
    Value(u64),
    /// `NF`: no such counter.
    NotFound,
    /// `MN`.
    Noop,
    /// `VA` with a token-bucket state and its CAS token (`mg ... v c`).
    State {
        /// The stored TAT.
        value: u128,
        /// The item's CAS token.
        cas: u64,
    },
    /// `EN`: no such item (`mg`).
    Miss,
    /// `HD`: stored (`ms`).
    Stored,
    /// `NS` or `EX` or `NF` to `ms`: someone else created or changed the item first.
    NotStored,
    /// An error line or anything unexpected.
    Error(String),
}

impl Reply {
    /// The count a counter command (`ma`) was answered with: 0 for a counter that does not
    /// exist.
    pub(super) fn into_count(self) -> Result<u64, TransportError> {
        match self {
            Reply::Value(n) => Ok(n),
            Reply::NotFound => Ok(0),
            other => Err(other.unexpected("ma")),
        }
    }

    /// The error of an answer that does not belong to `command`.
    pub(super) fn unexpected(self, command: &str) -> TransportError {
        match self {
            Reply::Error(e) => TransportError::Protocol(e),
            other => TransportError::Protocol(format!("unexpected {other:?} to {command}")),
        }
    }
}

/// The longest value a reply carries: a u128 token-bucket state in decimal is at most 39 digits.
const MAX_VALUE_LEN: usize = 48;

/// Reads one reply (`None` at the end of the stream); `line` and `data` are reused buffers.
pub(super) async fn read_reply<R: AsyncBufRead + Unpin>(
    read: &mut R,
    line: &mut String,
    data: &mut Vec<u8>,
) -> io::Result<Option<Reply>> {
    // A counter's answer or a status line already whole in the buffer (nearly every reply on a
    // busy connection) is parsed in place; anything else, or a reply split across reads, is
    // read by the general parser below, which gives the same answer for what both accept.
    let buffered = read.fill_buf().await?;
    if let Some((reply, used)) = buffered_reply(buffered) {
        read.consume(used);
        return Ok(Some(reply));
    }
    line.clear();
    if read.read_line(line).await? == 0 {
        return Ok(None);
    }
    parse(line, read, data).await.map(Some)
}

/// The reply at the start of `buf` and the bytes it takes, when it is whole there and in one of
/// the plain forms: a status line (`NF`, `MN`, `EN`, `HD`, `NS`, `EX`) or `VA <len>` with up to
/// 20 digits of value (a counter). `None` for anything else, left to [`parse`].
fn buffered_reply(buf: &[u8]) -> Option<(Reply, usize)> {
    // The longest plain line is `VA 20 \r\n`; a longer one is not plain.
    let end = buf.iter().take(16).position(|&b| b == b'\n')?;
    let line = buf[..end].trim_ascii_end();
    let after = end + 1;
    let reply = match line {
        b"NF" => Reply::NotFound,
        b"MN" => Reply::Noop,
        b"EN" => Reply::Miss,
        b"HD" => Reply::Stored,
        b"NS" | b"EX" => Reply::NotStored,
        _ => {
            let len = usize::try_from(decimal(line.strip_prefix(b"VA ")?)?).ok()?;
            if !(1..=20).contains(&len) {
                return None;
            }
            // The value and the two bytes after it (`\r\n`, skipped unread as `parse` does).
            buf.get(after + len + 1)?;
            let value = decimal(&buf[after..after + len])?;
            return Some((Reply::Value(value), after + len + 2));
        }
    };
    Some((reply, after))
}

/// `digits` as a number: ASCII digits only, at least one, and no overflow.
fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        let digit = u64::from(d.checked_sub(b'0').filter(|d| *d <= 9)?);
        n.checked_mul(10)?.checked_add(digit)
    })
}

async fn parse<R: AsyncBufRead + Unpin>(
    line: &str,
    read: &mut R,
    data: &mut Vec<u8>,
) -> io::Result<Reply> {
    let line = line.trim_end();
    let mut words = line.split(' ');
    Ok(match words.next() {
        Some("VA") => {
            // A length beyond any counter is a broken stream, never an allocation to make.
            let len: usize = words
                .next()
                .and_then(|l| l.parse().ok())
                .filter(|len| *len <= MAX_VALUE_LEN)
                .ok_or_else(|| bad(line))?;
            let cas = words.find_map(|w| w.strip_prefix('c').and_then(|c| c.parse().ok()));
            data.clear();
            data.resize(len + 2, 0);
            read.read_exact(data).await?;
            let text = String::from_utf8_lossy(&data[..len]);
            let text = text.trim();
            match (cas, text.parse::<u128>()) {
                (Some(cas), Ok(value)) => Reply::State { value, cas },
                (None, Ok(n)) => u64::try_from(n).map_or_else(
                    |_| Reply::Error(format!("not a counter: {text:?}")),
                    Reply::Value,
                ),
                (_, Err(_)) => Reply::Error(format!("not a counter: {text:?}")),
            }
        }
        Some("NF") => Reply::NotFound,
        Some("MN") => Reply::Noop,
        Some("EN") => Reply::Miss,
        Some("HD") => Reply::Stored,
        Some("NS" | "EX") => Reply::NotStored,
        _ => Reply::Error(line.to_owned()),
    })
}

/// Parses `input` as a stream of replies, as the reader does, and returns how many it read
/// before the end or an error. For the fuzz target only (`cargo fuzz` sets `cfg(fuzzing)`).
#[cfg(fuzzing)]
pub fn fuzz_replies(input: &[u8]) -> usize {
    use std::future::Future;
    let mut read = input;
    let (mut line, mut data) = (String::new(), Vec::new());
    let mut parsed = 0;
    loop {
        let mut next = std::pin::pin!(read_reply(&mut read, &mut line, &mut data));
        // An in-memory reader never waits: one poll finishes the future.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match next.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(Ok(Some(_))) => parsed += 1,
            _ => return parsed,
        }
    }
}

fn bad(line: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("bad memcached answer: {line:?}"),
    )
}

#[cfg(test)]
mod tests;
