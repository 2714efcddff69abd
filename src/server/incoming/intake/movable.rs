//! Which held control frames (SETTINGS, a connection WINDOW_UPDATE, PINGs) the intake may hand
//! to hyper ahead of the held bytes before them, and where among the held bytes a frame ends
//! outside any header block (the only places one may be moved to).
//!
//! Must not touch: the held bytes themselves (the intake moves them), the socket.

use std::collections::VecDeque;

use super::super::frames::{Frame, PREFACE_LEN};

/// The held control frames that may go to hyper ahead of the held bytes before them: their
/// positions (start, end), found as frames end (one inside a header block is never seen as a
/// control frame: `frames`); and where, among the held bytes, a frame ends outside any header
/// block, since a frame may be moved only to such a place (hyper may have been handed part of
/// a frame, or of a header block, before the gate shut).
#[derive(Debug)]
pub(super) struct Movable {
    /// Where the frame being read began.
    pub(super) frame_start: u64,
    pub(super) frames: VecDeque<(u64, u64)>,
    /// Held positions past `handed` where a frame ends outside a header block.
    pub(super) clean_ends: VecDeque<u64>,
    /// Whether the bytes handed so far end there (so a frame may go next).
    pub(super) handed_clean: bool,
}

impl Movable {
    /// `frame` ended at `at`, `clean` outside any header block; `withheld`: its bytes are kept in
    /// the intake.
    pub(super) fn ended(&mut self, frame: Frame, at: u64, clean: bool, withheld: bool) {
        let start = std::mem::replace(&mut self.frame_start, at);
        if withheld && matches!(frame, Frame::Ping | Frame::Control) {
            self.frames.push_back((start, at));
        }
        if withheld && clean {
            self.clean_ends.push_back(at);
        }
    }

    /// Hyper now has the bytes up to `handed`; `read_clean`: the bytes read end cleanly.
    pub(super) fn handed(&mut self, handed: u64, read: u64, read_clean: bool) {
        while self.clean_ends.front().is_some_and(|&at| at < handed) {
            self.clean_ends.pop_front();
        }
        self.handed_clean = handed == PREFACE_LEN
            || self.clean_ends.front() == Some(&handed)
            || (handed == read && handed > PREFACE_LEN && read_clean);
    }

    /// The held frame `(start, end)` goes to hyper first, at `handed`: the held clean ends
    /// before it move on by its length, its own end is no longer one.
    pub(super) fn moved(&mut self, handed: u64, start: u64, end: u64) {
        let len = end - start;
        self.clean_ends.retain(|&at| at != end);
        for at in &mut self.clean_ends {
            if *at > handed && *at <= start {
                *at += len;
            }
        }
        for (s, e) in &mut self.frames {
            if *s < start {
                *s += len;
                *e += len;
            }
        }
    }
}

impl Default for Movable {
    /// Nothing held; the first frame begins after the preface.
    fn default() -> Self {
        Movable {
            frame_start: PREFACE_LEN,
            frames: VecDeque::new(),
            clean_ends: VecDeque::new(),
            handed_clean: false,
        }
    }
}
