//! The one oracle for the frame follower and the intake, used by their property test and by the
//! `frames` fuzz target: any frame sequence (protocol errors included), split at any bytes and
//! handed to hyper gated or not, must come out with
//! - every frame's end found, and a GOAWAY allowed (`Frames::at_boundary`) exactly where a
//!   frame ends outside a header block, on the write side;
//! - every byte read handed exactly once, each frame intact, the frames that are not the
//!   connection's movable control frames in their order, and a moved control frame never
//!   landing inside a header block, on the read side.
//!
//! The oracle parses whole frames (no splitting) and keeps its own header-block rule, so a
//! follower that loses its place at a split byte disagrees with it.
//!
//! Must not touch: the connection (nothing here runs in the service).

use super::frames::{Frames, PREFACE_LEN, Seen};
use super::intake::Intake;

const HEADERS: u8 = 0x1;
const PUSH_PROMISE: u8 = 0x5;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;

/// A frame of the script: its bytes, and whether (in the sequence as sent) it is a control
/// frame the intake may move ahead of held bytes (a PING, SETTINGS or connection
/// WINDOW_UPDATE outside any header block).
struct Made {
    bytes: Vec<u8>,
    movable: bool,
}

/// Frames from `script`, 3 bytes each (kind and stream, flags, length); each payload starts
/// with the frame's index, so every frame is unique.
fn frames_of(script: &[u8]) -> Vec<Made> {
    let mut in_block = false;
    let mut made = Vec::new();
    for (i, spec) in script.chunks_exact(3).take(256).enumerate() {
        let (kind, stream) = ((spec[0] & 0x0f) % 10, u32::from(spec[0] >> 4));
        let (flags, len) = (spec[1], 2 + usize::from(spec[2] % 62));
        let control = match kind {
            0x6 | 0x4 => true,
            0x8 => stream == 0,
            _ => false,
        };
        let movable = control && !in_block;
        if matches!(kind, HEADERS | PUSH_PROMISE | CONTINUATION) {
            in_block = flags & END_HEADERS == 0;
        }
        let l = u32::try_from(len).unwrap_or(0).to_be_bytes();
        let mut bytes = vec![l[1], l[2], l[3], kind, flags];
        bytes.extend_from_slice(&stream.to_be_bytes());
        let index = u16::try_from(i).unwrap_or(u16::MAX).to_be_bytes();
        bytes.extend_from_slice(&index);
        bytes.resize(9 + len, 0xee);
        made.push(Made { bytes, movable });
    }
    made
}

/// Where each frame ends, and whether a GOAWAY may go there (outside a header block).
fn ends_of(made: &[Made]) -> Vec<(usize, bool)> {
    let (mut at, mut in_block) = (0, false);
    made.iter()
        .map(|m| {
            at += m.bytes.len();
            if matches!(m.bytes[3], HEADERS | PUSH_PROMISE | CONTINUATION) {
                in_block = m.bytes[4] & END_HEADERS == 0;
            }
            (at, !in_block)
        })
        .collect()
}

/// Chunk sizes (1..=32) drawn from `splits`, cycled; one byte at a time when there are none.
fn chunks<'a>(bytes: &'a [u8], splits: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut at = 0;
    let mut draw = splits.iter().cycle();
    std::iter::from_fn(move || {
        if at >= bytes.len() {
            return None;
        }
        let n = draw.next().map_or(1, |b| 1 + usize::from(b % 32));
        let chunk = &bytes[at..(at + n).min(bytes.len())];
        at += chunk.len();
        Some(chunk)
    })
}

/// The write side: frame ends and GOAWAY points, against the oracle.
fn check_writer(made: &[Made], splits: &[u8]) {
    let stream: Vec<u8> = made.iter().flat_map(|m| m.bytes.iter().copied()).collect();
    let expected = ends_of(made);
    let (mut frames, mut found, mut at) = (Frames::default(), Vec::new(), 0);
    assert!(frames.at_boundary(), "nothing passed yet");
    for chunk in chunks(&stream, splits) {
        frames.pass(chunk, |seen| {
            if let Seen::End { at: n, .. } = seen {
                found.push(at + n);
            }
        });
        at += chunk.len();
        let may = expected
            .iter()
            .find(|(end, _)| *end == at)
            .is_some_and(|e| e.1);
        assert_eq!(frames.at_boundary(), may, "a GOAWAY at byte {at}");
    }
    let ends: Vec<usize> = expected.iter().map(|(end, _)| *end).collect();
    assert_eq!(found, ends, "every frame's end found");
}

/// The read side: everything read is handed once, intact, in an order the rules allow.
fn check_intake(made: &[Made], splits: &[u8]) {
    let preface = [b'P'; PREFACE_LEN as usize];
    let body: Vec<u8> = made.iter().flat_map(|m| m.bytes.iter().copied()).collect();
    let sent: Vec<u8> = preface.iter().copied().chain(body).collect();
    let mut intake = Intake::default();
    let mut out = Vec::new();
    let mut draw = splits.iter().copied().cycle();
    for chunk in chunks(&sent, splits) {
        intake.follow(chunk, true);
        let gated = draw.next().is_some_and(|b| b & 1 == 1);
        let room = draw.next().map_or(64, |b| 1 + usize::from(b) * 4);
        hand_once(&mut intake, gated, room, &mut out);
    }
    while intake.holds() {
        hand_once(&mut intake, false, 4096, &mut out);
    }
    assert_eq!(out.len(), sent.len(), "every byte read handed once");
    assert_eq!(&out[..preface.len()], &preface, "the preface first");
    check_order(made, &out[preface.len()..]);
}

/// One read by hyper, as the connection's gate makes it.
fn hand_once(intake: &mut Intake, gated: bool, room: usize, out: &mut Vec<u8>) {
    let mut space = vec![0u8; room];
    let mut buf = tokio::io::ReadBuf::new(&mut space);
    let allowed = usize::try_from(intake.allowance(gated)).unwrap_or(usize::MAX);
    if allowed == 0 {
        intake.hand_control(&mut buf);
    } else if intake.holds() {
        intake.hand_withheld(allowed, &mut buf);
    }
    out.extend_from_slice(buf.filled());
}

/// `handed` holds the script's frames, each whole; the unmovable ones in order, the movable
/// ones in order among themselves, and none of those moved landing inside a header block.
fn check_order(made: &[Made], handed: &[u8]) {
    let index = |f: &[u8]| usize::from(u16::from_be_bytes([f[9], f[10]]));
    let (mut at, mut in_block) = (0, false);
    let (mut fixed, mut moving) = (made.iter().enumerate().filter(|(_, m)| !m.movable), 0);
    let mut movables = made.iter().enumerate().filter(|(_, m)| m.movable);
    while at < handed.len() {
        let len = 9 + (usize::from(handed[at + 1]) << 8 | usize::from(handed[at + 2]));
        let frame = &handed[at..at + len];
        let i = index(frame);
        let expected = if made.get(i).is_some_and(|m| m.movable) {
            assert!(!in_block, "control frame {i} moved inside a header block");
            movables.next()
        } else {
            fixed.next()
        };
        let (want, m) = expected.unwrap_or_else(|| panic!("frame {i} handed out of order"));
        assert_eq!(want, i, "frame {i} handed out of order");
        assert_eq!(frame, &m.bytes[..], "frame {i} handed intact");
        if matches!(frame[3], HEADERS | PUSH_PROMISE | CONTINUATION) {
            in_block = frame[4] & END_HEADERS == 0;
        }
        at += len;
        moving += usize::from(m.movable);
    }
    assert_eq!(moving, made.iter().filter(|m| m.movable).count());
}

/// Both checks on one input: its first half the frame script, its second the splits.
/// Public only for the fuzz target, which reaches it through `server::fuzz_frames`.
#[cfg_attr(not(fuzzing), allow(unreachable_pub))]
pub fn check(data: &[u8]) {
    let (script, splits) = data.split_at(data.len() / 2);
    let made = frames_of(script);
    check_writer(&made, splits);
    check_intake(&made, splits);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn frames_split_anywhere_are_followed_and_handed_intact(
            data in proptest::collection::vec(any::<u8>(), 0..600)
        ) {
            super::check(&data);
        }
    }

    #[test]
    fn a_goaway_waits_for_the_end_of_a_header_block() {
        // HEADERS without END_HEADERS, CONTINUATION without, CONTINUATION with, then DATA.
        let script = [0x11, 0, 5, 0x19, 0, 7, 0x19, 0x4, 3, 0x10, 0x1, 9];
        let made = super::frames_of(&script);
        let ends = super::ends_of(&made);
        let may: Vec<bool> = ends.iter().map(|e| e.1).collect();
        assert_eq!(may, [false, false, true, true]);
        for splits in [&[0u8][..], &[3], &[31, 0, 7]] {
            super::check_writer(&made, splits);
        }
    }
}
