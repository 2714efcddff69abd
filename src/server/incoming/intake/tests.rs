//! The intake's bookkeeping on frames built by hand: what is handed when gated, the marks of
//! requests opened and reset, and control frames moved ahead of held requests.

use super::Intake;

fn frame(kind: u8, flags: u8, stream: u32, payload: usize) -> Vec<u8> {
    let len = u32::try_from(payload).expect("small").to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend(std::iter::repeat_n(0, payload));
    f
}

/// The preface, then a request on stream 1 (HEADERS, DATA with END_STREAM) and the HEADERS
/// of one on stream 3.
fn bytes() -> (Vec<u8>, usize, usize) {
    let mut b = vec![b'P'; 24];
    b.extend(frame(0x1, 0x4, 1, 20));
    let mid_request = b.len() + 5;
    b.extend(frame(0x0, 0x1, 1, 30));
    let after_first = b.len();
    b.extend(frame(0x1, 0x4, 3, 20));
    (b, mid_request, after_first)
}

#[test]
fn ungated_everything_goes_and_gated_stops_where_no_request_is_half_received() {
    let (b, mid, after_first) = bytes();
    let mut intake = Intake::default();
    intake.follow(&b, true);
    assert_eq!(intake.allowance(false), u64::MAX);
    // Gated before anything was handed: nothing is half received yet.
    assert_eq!(intake.allowance(true), 0);
    // Handed into the middle of the first request: gated, it may finish that request only.
    intake.hand(mid as u64);
    assert_eq!(intake.allowance(true), (after_first - mid) as u64);
    intake.hand((after_first - mid) as u64);
    assert_eq!(intake.allowance(true), 0, "the second request waits");
    assert_eq!(intake.last_stream(), 3);
}

#[test]
fn a_request_whose_end_is_not_read_yet_may_be_handed_whole() {
    let (b, mid, after_first) = bytes();
    let mut intake = Intake::default();
    intake.follow(&b[..after_first - 10], true);
    // Inside a frame header, before any request began: nothing is half received.
    intake.hand(30);
    assert_eq!(intake.allowance(true), 0);
    // Inside the first request's DATA, whose end has not been read yet.
    intake.hand((mid - 30) as u64);
    assert_eq!(intake.allowance(true), u64::MAX, "its end is still to come");
    intake.follow(&b[after_first - 10..], true);
    assert_eq!(intake.allowance(true), (after_first - mid) as u64);
}

#[test]
fn held_bytes_are_handed_in_order_and_a_reset_ends_a_request() {
    let (mut b, _, _) = bytes();
    b.extend(frame(0x3, 0, 3, 4)); // RST_STREAM on stream 3
    let mut intake = Intake::default();
    intake.follow(&b, true);
    let mut out = vec![0u8; b.len()];
    let mut buf = tokio::io::ReadBuf::new(&mut out);
    assert_eq!(intake.hand_withheld(40, &mut buf), 40);
    assert_eq!(intake.hand_withheld(usize::MAX, &mut buf), b.len() - 40);
    assert_eq!(buf.filled(), &b[..]);
    assert!(!intake.holds());
    assert_eq!(
        intake.allowance(true),
        0,
        "the reset request is no longer half received"
    );
    assert_eq!(
        intake.take_changes(),
        (1, 0),
        "one request sent whole; the other reset before it was"
    );
    intake.close(1);
    intake.close(1);
    assert_eq!(intake.take_changes(), (0, 1), "closed once");
    assert_eq!(intake.open_streams(), 0);
}

#[test]
fn requests_count_as_open_once_sent_whole_and_handed() {
    let (b, _, after_first) = bytes();
    let mut intake = Intake::default();
    intake.follow(&b, true);
    assert_eq!(intake.take_changes(), (0, 0), "withheld, not handed");
    intake.hand(after_first as u64);
    assert_eq!(intake.take_changes(), (1, 0));
    intake.hand((b.len() - after_first) as u64);
    assert_eq!(
        (intake.take_changes(), intake.open_streams()),
        ((0, 0), 1),
        "the second request is not sent whole yet"
    );
}

#[test]
fn control_frames_held_behind_requests_go_first_and_the_requests_keep_their_marks() {
    let (mut b, _, after_first) = bytes();
    let settings = frame(0x4, 0, 0, 6);
    let window = frame(0x8, 0, 0, 4);
    let stream_window = frame(0x8, 0, 3, 4); // on a withheld stream: never moved
    b.extend(frame(0x0, 0x1, 3, 10)); // the second request's DATA, END_STREAM
    b.extend(&stream_window);
    b.extend(&settings);
    b.extend(&window);
    let mut intake = Intake::default();
    intake.follow(&b, true);
    let mut out = vec![0u8; b.len()];
    let mut buf = tokio::io::ReadBuf::new(&mut out);
    assert_eq!(intake.hand_withheld(after_first, &mut buf), after_first);
    assert_eq!(intake.take_changes(), (1, 0));
    assert_eq!(intake.allowance(true), 0, "gated: the second request waits");
    assert_eq!(intake.hand_control(&mut buf), settings.len());
    assert_eq!(intake.hand_control(&mut buf), window.len());
    assert_eq!(intake.hand_control(&mut buf), 0, "nothing else may move");
    assert_eq!(
        intake.take_changes(),
        (0, 0),
        "no request opened by moving them"
    );
    let rest = intake.withheld();
    assert_eq!(intake.hand_withheld(rest, &mut buf), rest);
    assert_eq!(
        intake.take_changes(),
        (1, 0),
        "the second request, once handed"
    );
    let mut expected = b[..after_first].to_vec();
    expected.extend(&settings);
    expected.extend(&window);
    expected.extend(&b[after_first..b.len() - settings.len() - window.len()]);
    assert_eq!(
        buf.filled(),
        &expected[..],
        "everything handed once, requests in order"
    );
}

#[test]
fn a_control_frame_inside_a_header_block_is_not_moved() {
    let mut b = vec![b'P'; 24];
    b.extend(frame(0x1, 0x0, 1, 10)); // HEADERS without END_HEADERS
    b.extend(frame(0x4, 0, 0, 6)); // SETTINGS inside the block (the client's error)
    b.extend(frame(0x9, 0x4, 1, 10)); // CONTINUATION, END_HEADERS
    b.extend(frame(0x6, 0, 0, 8)); // PING after the block
    let mut intake = Intake::default();
    intake.follow(&b, true);
    let mut out = vec![0u8; b.len()];
    let mut buf = tokio::io::ReadBuf::new(&mut out);
    assert_eq!(intake.hand_control(&mut buf), 24, "the preface first");
    assert_eq!(
        intake.hand_control(&mut buf),
        17,
        "then the PING, not the SETTINGS"
    );
    assert_eq!(&buf.filled()[24..], &b[b.len() - 17..]);
}

#[test]
fn a_control_frame_waits_for_the_end_of_a_frame_or_block_hyper_has_part_of() {
    let mut b = vec![b'P'; 24];
    b.extend(frame(0x1, 0x0, 1, 10)); // HEADERS without END_HEADERS
    let in_block = b.len() + 4;
    b.extend(frame(0x9, 0x4, 1, 10)); // CONTINUATION, END_HEADERS
    let block_end = b.len();
    b.extend(frame(0x0, 0x1, 1, 30)); // DATA, END_STREAM
    b.extend(frame(0x6, 0, 0, 8)); // PING
    let mut intake = Intake::default();
    intake.follow(&b, true);
    let mut out = vec![0u8; b.len()];
    let mut buf = tokio::io::ReadBuf::new(&mut out);
    // Hyper was handed part of the CONTINUATION before the gate shut.
    assert_eq!(intake.hand_withheld(in_block, &mut buf), in_block);
    assert_eq!(
        intake.hand_control(&mut buf),
        block_end - in_block,
        "the rest of the header block, and nothing of the DATA"
    );
    assert_eq!(intake.hand_control(&mut buf), 17, "then the PING");
    assert_eq!(&buf.filled()[..block_end], &b[..block_end]);
    assert_eq!(&buf.filled()[block_end..], &b[b.len() - 17..]);
}

#[test]
fn a_held_buffer_is_given_back_once_handed_and_a_small_one_is_kept() {
    let mut b = vec![b'P'; 24];
    for stream in (1..200u32).step_by(2) {
        b.extend(frame(0x1, 0x4, stream, 100));
        b.extend(frame(0x0, 0x1, stream, 60));
    }
    let mut intake = Intake::default();
    intake.follow(&b, true);
    assert!(
        intake.withheld.capacity() >= b.len(),
        "all of it is withheld"
    );
    let mut store = vec![0u8; b.len()];
    let mut buf = tokio::io::ReadBuf::new(&mut store);
    assert_eq!(intake.hand_withheld(usize::MAX, &mut buf), b.len());
    assert_eq!(buf.filled(), &b[..], "handed unchanged");
    assert_eq!(
        intake.withheld.capacity(),
        0,
        "a 16 KiB buffer is not kept for an idle life"
    );
    // A request or two: the buffer is kept for the next one.
    let small = frame(0x1, 0x4, 201, 40);
    intake.follow(&small, true);
    let mut store = vec![0u8; small.len()];
    let mut buf = tokio::io::ReadBuf::new(&mut store);
    assert_eq!(intake.hand_withheld(usize::MAX, &mut buf), small.len());
    assert!(intake.withheld.capacity() > 0 && intake.withheld.capacity() <= super::RELEASE_ABOVE);
}
