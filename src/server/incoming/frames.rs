//! HTTP/2 frames as they pass a connection, followed by their 9-byte headers only: on the way
//! in, which frames are PINGs that ask for an answer and which open streams; on the way out,
//! where hyper's frames end, so that Turnstile's own GOAWAY goes between two of them and never
//! inside one. The PING policy lives here too.
//!
//! A header block (HEADERS or PUSH_PROMISE without END_HEADERS, then CONTINUATIONs up to the
//! one with END_HEADERS) is followed as one unit: nothing may come between its frames (RFC 9113
//! §4.3), so [`Frames::at_boundary`] is false until the block ends, and a frame a client sends
//! inside a block (its protocol error, which hyper answers by closing the connection) is seen as
//! [`Frame::Other`], never acted on as a PING or a control frame. A property test and the
//! `frames` fuzz target (`follow_check`) hold this against random frame sequences split at
//! random bytes.

use std::time::{Duration, Instant};

/// The client's connection preface (`PRI * HTTP/2.0…`), before its first frame.
pub(super) const PREFACE_LEN: u64 = 24;
const HEADER_LEN: usize = 9;
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const ACK: u8 = 0x1;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
/// GOAWAY's error codes (RFC 9113 §7).
pub(super) const NO_ERROR: u32 = 0x0;
pub(super) const ENHANCE_YOUR_CALM: u32 = 0xb;
/// PINGs too soon after the last one, with no call between, before the connection is closed
/// (grpc-core's default, `GRPC_ARG_HTTP2_MAX_PING_STRIKES`).
const MAX_PING_STRIKES: u32 = 2;

/// A frame whose header has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Frame {
    /// A PING asking for an answer.
    Ping,
    /// HEADERS on `stream`; `ends` when they carry END_STREAM, `whole` when END_HEADERS
    /// (else CONTINUATION frames follow with the rest of the header block).
    Headers {
        stream: u32,
        ends: bool,
        whole: bool,
    },
    /// CONTINUATION of a header block; `whole` when it carries END_HEADERS (the block ends).
    Continuation { whole: bool },
    /// A frame of the connection's own that no stream's order depends on: SETTINGS (and its
    /// ACK), a connection WINDOW_UPDATE, a PING's ACK.
    Control,
    /// DATA on `stream`; `ends` when it carries END_STREAM.
    Data { stream: u32, ends: bool },
    /// RST_STREAM on `stream`.
    Reset(u32),
    /// Anything else.
    Other,
}

/// What passing bytes showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// A frame's header completed.
    Start(Frame),
    /// A frame ended `at` bytes into the bytes passed; `clean` when no header block is open
    /// after it (another frame may go there).
    End { at: usize, clean: bool },
}

/// Where a byte stream of frames is: the header being gathered, or the payload being passed.
#[derive(Debug, Default)]
pub(super) struct Frames {
    header: [u8; HEADER_LEN],
    have: usize,
    skip: usize,
    /// Inside a header block: its first frame passed without END_HEADERS, and no CONTINUATION
    /// with END_HEADERS yet.
    in_block: bool,
}

impl Frames {
    /// Follows `bytes`, telling `seen` of each frame whose header completes in them and of
    /// each frame's end.
    pub(super) fn pass(&mut self, bytes: &[u8], mut seen: impl FnMut(Seen)) {
        let mut at = 0;
        while at < bytes.len() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len() - at);
                self.skip -= n;
                at += n;
                if self.skip == 0 {
                    seen(Seen::End {
                        at,
                        clean: !self.in_block,
                    });
                }
                continue;
            }
            let n = (HEADER_LEN - self.have).min(bytes.len() - at);
            self.header[self.have..self.have + n].copy_from_slice(&bytes[at..at + n]);
            self.have += n;
            at += n;
            if self.have == HEADER_LEN {
                self.have = 0;
                let [l0, l1, l2, kind, flags, s0, s1, s2, s3] = self.header;
                self.skip = usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2);
                let stream = u32::from_be_bytes([s0, s1, s2, s3]) & 0x7fff_ffff;
                let ends = flags & END_STREAM != 0;
                let whole = flags & END_HEADERS != 0;
                let inside = self.in_block;
                if matches!(kind, HEADERS | PUSH_PROMISE | CONTINUATION) {
                    self.in_block = !whole;
                }
                seen(Seen::Start(match kind {
                    CONTINUATION => Frame::Continuation { whole },
                    _ if inside => Frame::Other,
                    PING if flags & ACK == 0 => Frame::Ping,
                    PING | SETTINGS => Frame::Control,
                    WINDOW_UPDATE if stream == 0 => Frame::Control,
                    HEADERS => Frame::Headers {
                        stream,
                        ends,
                        whole,
                    },
                    DATA => Frame::Data { stream, ends },
                    RST_STREAM => Frame::Reset(stream),
                    _ => Frame::Other,
                }));
                if self.skip == 0 {
                    seen(Seen::End {
                        at,
                        clean: !self.in_block,
                    });
                }
            }
        }
    }

    /// Whether the bytes followed so far end where a frame ends, outside any header block:
    /// where a frame of another stream (a GOAWAY) may go.
    pub(super) fn at_boundary(&self) -> bool {
        self.have == 0 && self.skip == 0 && !self.in_block
    }
}

/// A GOAWAY frame: the last stream the server will answer, the error code, and a reason.
pub(super) fn goaway(last_stream: u32, code: u32, reason: &str) -> Vec<u8> {
    let len = 8 + reason.len();
    let mut frame = Vec::with_capacity(HEADER_LEN + len);
    let len = u32::try_from(len).unwrap_or(8).to_be_bytes();
    frame.extend_from_slice(&[len[1], len[2], len[3], GOAWAY, 0, 0, 0, 0, 0]);
    frame.extend_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    frame.extend_from_slice(&code.to_be_bytes());
    frame.extend_from_slice(reason.as_bytes());
    frame
}

/// gRPC servers' PING policy: a PING less than `min_interval` after the previous one, with no
/// call started between them and none open, is a strike; past [`MAX_PING_STRIKES`] the
/// connection is closed with GOAWAY `ENHANCE_YOUR_CALM` ("too_many_pings").
#[derive(Debug)]
pub(super) struct PingPolicy {
    min_interval: Duration,
    strikes: u32,
    last: Option<(Instant, u64)>,
}

impl PingPolicy {
    pub(super) fn new(min_interval: Duration) -> PingPolicy {
        PingPolicy {
            min_interval,
            strikes: 0,
            last: None,
        }
    }

    /// A PING came at `now`, after `calls` calls on the connection, with `busy` calls open:
    /// whether the connection has now had too many.
    pub(super) fn ping(&mut self, now: Instant, calls: u64, busy: bool) -> bool {
        match self.last {
            _ if busy => self.strikes = 0,
            Some((_, before)) if before != calls => self.strikes = 0,
            Some((at, _)) if now.saturating_duration_since(at) < self.min_interval => {
                self.strikes += 1;
            }
            _ => {}
        }
        self.last = Some((now, calls));
        self.strikes > MAX_PING_STRIKES
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{ENHANCE_YOUR_CALM, Frame, Frames, PingPolicy, Seen, goaway};

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len()).expect("small").to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn frames_are_followed_across_any_split_of_the_bytes() {
        let mut bytes = frame(0x4, 0, 0, &[0; 12]); // SETTINGS
        bytes.extend(frame(0x6, 0, 0, &[7; 8])); // PING
        bytes.extend(frame(0x6, 1, 0, &[7; 8])); // PING ACK
        bytes.extend(frame(0x1, 4, 5, &[1; 30])); // HEADERS on stream 5
        bytes.extend(frame(0x0, 1, 5, &[2; 70])); // DATA
        for split in 1..bytes.len() {
            let (mut frames, mut seen) = (Frames::default(), Vec::new());
            let (mut ends, mut offset) = (Vec::new(), 0);
            for chunk in bytes.chunks(split) {
                frames.pass(chunk, |s| match s {
                    Seen::Start(f) => seen.push(f),
                    Seen::End { at, .. } => ends.push(offset + at),
                });
                offset += chunk.len();
            }
            assert_eq!(
                seen,
                [
                    Frame::Control,
                    Frame::Ping,
                    Frame::Control,
                    Frame::Headers {
                        stream: 5,
                        ends: false,
                        whole: true
                    },
                    Frame::Data {
                        stream: 5,
                        ends: true
                    }
                ],
                "chunks of {split}"
            );
            assert_eq!(
                ends,
                [21, 38, 55, 94, 173],
                "where each frame ends, chunks of {split}"
            );
            assert!(frames.at_boundary());
        }
        let mut frames = Frames::default();
        frames.pass(&bytes[..bytes.len() - 1], |_| {});
        assert!(!frames.at_boundary(), "one byte of DATA is still to come");
    }

    #[test]
    fn a_goaway_frame_says_the_last_stream_the_code_and_why() {
        let f = goaway(7, ENHANCE_YOUR_CALM, "too_many_pings");
        assert_eq!(&f[..9], &[0, 0, 22, 0x7, 0, 0, 0, 0, 0]);
        assert_eq!(&f[9..13], &7u32.to_be_bytes());
        assert_eq!(&f[13..17], &0xbu32.to_be_bytes());
        assert_eq!(&f[17..], b"too_many_pings");
    }

    #[test]
    fn pings_too_close_without_calls_strike_and_calls_forgive() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut policy = PingPolicy::new(Duration::from_secs(10));
        // Pings at the allowed pace never strike.
        for i in 0..10 {
            assert!(!policy.ping(at(i * 10_000), 0, false));
        }
        // Three quick pings strike three times: the third is one too many.
        let mut policy = PingPolicy::new(Duration::from_secs(10));
        assert!(!policy.ping(at(0), 0, false));
        assert!(!policy.ping(at(1), 0, false));
        assert!(!policy.ping(at(2), 0, false));
        assert!(policy.ping(at(3), 0, false));
        // A call between two quick pings, or a call open, forgives them.
        let mut policy = PingPolicy::new(Duration::from_secs(10));
        for i in 0..10 {
            assert!(!policy.ping(at(i), i, false), "a call came between");
        }
        for i in 0..10 {
            assert!(!policy.ping(at(20 + i), 10, true), "a call is open");
        }
    }
}
