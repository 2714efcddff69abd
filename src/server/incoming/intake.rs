//! What a connection has read, on its way to hyper: the frames followed (PINGs, the last stream
//! opened), which requests are half received (HEADERS came, END_STREAM or RST_STREAM not yet),
//! and the bytes read but held back.
//!
//! Why bytes are held back: a client over its part of the calls open (`peers`) is not read
//! further, so its excess waits in the kernel (TCP flow control pushes back on it) instead of in
//! the runtime's queue ahead of every other client's calls. Reading stops only where no request
//! is half received, so a call that is counted open never waits for a body held here (which
//! would hold the client's part until the request deadline).
//!
//! A connection held at the gate is still read a little (up to [`HOLD_AT_GATE`] bytes held),
//! and the connection's own control frames among the held bytes (SETTINGS, a connection
//! WINDOW_UPDATE, PINGs; never one inside a header block) are handed to hyper ahead of the held
//! requests: their order relative to other streams' frames does not matter, and without them a
//! client whose answers wait for flow-control window could never grant it (its requests hold
//! its part open, so the gate stays shut). The held requests keep their order.
//!
//! Must not touch: the socket, hyper's buffers, the peers' counts (the connection does that).

use std::collections::VecDeque;

use super::frames::{Frame, Frames, PREFACE_LEN, Seen};
use movable::Movable;

/// The most bytes a connection held at the gate reads ahead to find control frames (the rest
/// of a flood stays in the kernel).
pub(super) const HOLD_AT_GATE: usize = 16 * 1024;

/// A held buffer emptied is kept if at most this large (a request or two), else given back.
const RELEASE_ABOVE: usize = 1024;

/// What a connection has read and followed; see the module doc.
#[derive(Debug)]
pub(super) struct Intake {
    frames: Frames,
    /// Streams whose request began and has not ended (a few: a list beats a hash here).
    half: Streams,
    /// The effect of the frame whose header passed last, applied at its end.
    pending: Frame,
    /// Bytes read from the socket, and bytes handed to hyper (positions in the stream).
    read: u64,
    handed: u64,
    /// Where being half received changed: (position, no request half received after it).
    changes: VecDeque<(u64, bool)>,
    /// Whether no request is half received at `handed`.
    clean_at_handed: bool,
    /// Bytes read and not yet handed (positions `handed..read`).
    withheld: VecDeque<u8>,
    /// Where requests become open (the client's END_STREAM: all of it sent) and close (the
    /// client's RST_STREAM): counted when handed to hyper.
    marks: VecDeque<(u64, Mark)>,
    /// Streams handed to hyper and not closed; and the changes not yet taken.
    open: Streams,
    opened: u32,
    closed: u32,
    /// PINGs seen since `take_pings`.
    pings: u32,
    last_stream: u32,
    /// The held control frames that may go ahead of the held bytes before them.
    movable: Movable,
}

/// A set of stream ids, as a list: a connection has a few open at once (at most
/// `GRPC_MAX_CONCURRENT_STREAMS`), and a short scan costs less than hashing.
#[derive(Debug, Default)]
struct Streams(Vec<u32>);

impl Streams {
    /// Adds `stream`, which is not there (a client opens each stream once).
    fn insert(&mut self, stream: u32) {
        self.0.push(stream);
    }

    /// Removes `stream`; whether it was there.
    fn remove(&mut self, stream: u32) -> bool {
        match self.0.iter().position(|s| *s == stream) {
            Some(at) => {
                self.0.swap_remove(at);
                true
            }
            None => false,
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// A stream's opening or the client's reset of it, at a position.
#[derive(Debug, Clone, Copy)]
enum Mark {
    Open(u32),
    Reset(u32),
}

impl Default for Intake {
    fn default() -> Self {
        Intake {
            frames: Frames::default(),
            half: Streams::default(),
            pending: Frame::Other,
            read: 0,
            handed: 0,
            changes: VecDeque::new(),
            clean_at_handed: true,
            withheld: VecDeque::new(),
            marks: VecDeque::new(),
            open: Streams::default(),
            opened: 0,
            closed: 0,
            pings: 0,
            last_stream: 0,
            movable: Movable::default(),
        }
    }
}

impl Intake {
    /// Bytes read from the socket so far.
    pub(super) fn read(&self) -> u64 {
        self.read
    }

    /// The highest stream a client opened.
    pub(super) fn last_stream(&self) -> u32 {
        self.last_stream
    }

    /// PINGs seen since the last call.
    pub(super) fn take_pings(&mut self) -> u32 {
        std::mem::take(&mut self.pings)
    }

    /// Whether bytes are held back.
    pub(super) fn holds(&self) -> bool {
        !self.withheld.is_empty()
    }

    /// Follows `bytes` just read; `hold`: they are kept here until handed out.
    pub(super) fn follow(&mut self, bytes: &[u8], hold: bool) {
        let start = self.read;
        self.read += bytes.len() as u64;
        if hold {
            self.withheld.extend(bytes);
        }
        let skip = usize::try_from(PREFACE_LEN.saturating_sub(start)).unwrap_or(usize::MAX);
        let Some(frames) = bytes.get(skip.min(bytes.len())..) else {
            return;
        };
        let base = start + skip as u64;
        let Intake {
            frames: follower,
            half,
            pending,
            changes,
            marks,
            pings,
            last_stream,
            movable,
            ..
        } = self;
        follower.pass(frames, |seen| match seen {
            Seen::Start(frame) => {
                *pending = frame;
                match frame {
                    Frame::Ping => *pings += 1,
                    Frame::Headers { stream, .. } => *last_stream = (*last_stream).max(stream),
                    _ => {}
                }
            }
            Seen::End { at, clean } => {
                let was_clean = half.is_empty();
                let at = base + at as u64;
                let frame = std::mem::replace(pending, Frame::Other);
                movable.ended(frame, at, clean, hold);
                match frame {
                    // A request is open once the client has sent all of it, until answered: a
                    // stream whose client half stays open (RLQS) is not a request waiting.
                    Frame::Headers {
                        stream, ends: true, ..
                    }
                    | Frame::Data { stream, ends: true } => {
                        marks.push_back((at, Mark::Open(stream)));
                    }
                    Frame::Reset(stream) => marks.push_back((at, Mark::Reset(stream))),
                    _ => {}
                }
                match frame {
                    Frame::Headers {
                        stream,
                        ends: false,
                        ..
                    } => {
                        half.insert(stream);
                    }
                    Frame::Headers {
                        stream, ends: true, ..
                    }
                    | Frame::Data { stream, ends: true }
                    | Frame::Reset(stream) => {
                        half.remove(stream);
                    }
                    _ => {}
                }
                if half.is_empty() != was_clean {
                    changes.push_back((at, half.is_empty()));
                }
            }
        });
    }

    /// How many of the bytes read and not handed may be handed now: all of them, or when
    /// `gated`, only up to where no request is half received (none when that is already so).
    pub(super) fn allowance(&self, gated: bool) -> u64 {
        if !gated {
            return u64::MAX;
        }
        if self.clean_at_handed {
            return 0;
        }
        self.changes
            .iter()
            .find(|(_, clean)| *clean)
            .map_or(u64::MAX, |(at, _)| at - self.handed)
    }

    /// `n` more bytes went to hyper.
    pub(super) fn hand(&mut self, n: u64) {
        self.handed += n;
        let read_clean = self.frames.at_boundary();
        self.movable.handed(self.handed, self.read, read_clean);
        while let Some(&(at, mark)) = self.marks.front() {
            if at > self.handed {
                break;
            }
            self.marks.pop_front();
            match mark {
                Mark::Open(stream) => {
                    self.open.insert(stream);
                    self.opened += 1;
                }
                Mark::Reset(stream) => self.close(stream),
            }
        }
        while let Some(&(at, clean)) = self.changes.front() {
            if at > self.handed {
                break;
            }
            self.clean_at_handed = clean;
            self.changes.pop_front();
        }
    }

    /// The server ended or reset `stream` (its frame went out).
    pub(super) fn close(&mut self, stream: u32) {
        if self.open.remove(stream) {
            self.closed += 1;
        }
    }

    /// Streams opened and closed since the last call.
    pub(super) fn take_changes(&mut self) -> (u32, u32) {
        (
            std::mem::take(&mut self.opened),
            std::mem::take(&mut self.closed),
        )
    }

    /// Streams handed to hyper and not closed.
    pub(super) fn open_streams(&self) -> u32 {
        u32::try_from(self.open.len()).unwrap_or(u32::MAX)
    }

    /// Bytes held.
    pub(super) fn withheld(&self) -> usize {
        self.withheld.len()
    }

    /// Hands the first held control frame into `out`, ahead of the held bytes before it (see
    /// the module doc); how many bytes (0: none held whole, or no room in `out`).
    pub(super) fn hand_control(&mut self, out: &mut tokio::io::ReadBuf<'_>) -> usize {
        let (movable, handed) = (&mut self.movable.frames, self.handed);
        while movable.front().is_some_and(|&(start, _)| start < handed) {
            movable.pop_front();
        }
        let Some(&(start, end)) = movable.front() else {
            return 0;
        };
        if !self.movable.handed_clean {
            // Hyper has part of a frame or of a header block: the rest of it goes first (a
            // frame never lands inside another), and no more of what is held.
            let next = match self.movable.clean_ends.front() {
                _ if handed < PREFACE_LEN => Some(&PREFACE_LEN),
                next => next,
            };
            let rest = next.map_or(0, |&at| at - handed);
            return self.hand_withheld(usize::try_from(rest).unwrap_or(0), out);
        }
        let len = end - start;
        let Ok(n) = usize::try_from(len) else {
            return 0;
        };
        if end > self.read || out.remaining() < n {
            return 0;
        }
        self.movable.frames.pop_front();
        let from = usize::try_from(start - handed).unwrap_or(usize::MAX);
        let frame: Vec<u8> = self.withheld.drain(from..from + n).collect();
        self.release_if_empty();
        out.put_slice(&frame);
        // The held bytes before it now come after it: their positions move on by its length.
        let moved = |at: &mut u64| {
            if *at > handed && *at <= start {
                *at += len;
            }
        };
        self.marks.iter_mut().for_each(|(at, _)| moved(at));
        self.changes.iter_mut().for_each(|(at, _)| moved(at));
        self.movable.moved(handed, start, end);
        self.hand(len);
        // A whole frame outside any header block ended where hyper is now.
        self.movable.handed_clean = true;
        n
    }

    /// Hands up to `most` held bytes into `out`; how many.
    pub(super) fn hand_withheld(&mut self, most: usize, out: &mut tokio::io::ReadBuf<'_>) -> usize {
        let n = most.min(self.withheld.len()).min(out.remaining());
        let (front, back) = self.withheld.as_slices();
        let from_front = n.min(front.len());
        out.put_slice(&front[..from_front]);
        out.put_slice(&back[..n - from_front]);
        self.withheld.drain(..n);
        self.release_if_empty();
        self.hand(n as u64);
        n
    }

    /// Gives back the held bytes' buffer once they are all handed: a connection that waited
    /// at the gate once does not keep up to [`HOLD_AT_GATE`] bytes for the rest of its life
    /// (thousands of mostly idle connections in a mesh).
    fn release_if_empty(&mut self) {
        if self.withheld.is_empty() && self.withheld.capacity() > RELEASE_ABOVE {
            self.withheld = VecDeque::new();
        }
    }
}

mod movable;
#[cfg(test)]
mod tests;
