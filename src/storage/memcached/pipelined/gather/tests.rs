use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use tokio::time::Instant;

use super::{Builder, Gather};
use crate::storage::memcached::transport::TransportError;

/// Counts its wakes.
#[derive(Default)]
struct Wakes(AtomicUsize);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn poll(gather: &Gather, wakes: &Arc<Wakes>) -> Poll<()> {
    let waker = Waker::from(Arc::clone(wakes));
    gather.poll_answered(&mut Context::from_waker(&waker))
}

/// A call of five hits: server 7 takes hits 0, 2 and 3 (lines "a", "c", "d"), server 4 takes
/// hits 1 and 4 ("b", "e").
fn two_parts() -> Arc<Gather> {
    let mut builder = Builder::new(32, 2);
    builder.part(7, |lines| {
        lines.extend_from_slice(b"a\nc\nd\n");
        3
    });
    builder.part(4, |lines| {
        lines.extend_from_slice(b"b\ne\n");
        2
    });
    let mut owners = vec![7, 4, 7, 7, 4];
    builder.parts_of(&mut owners);
    assert_eq!(owners, [0, 1, 0, 0, 1]);
    builder.build(5, owners)
}

#[test]
fn each_part_carries_its_own_lines_and_its_answers_land_in_the_hits_order() {
    let gather = two_parts();
    let wakes = Arc::new(Wakes::default());
    let first = gather.ticket(0).expect("part 0");
    let second = gather.ticket(1).expect("part 1");
    assert!(gather.ticket(2).is_none());
    assert_eq!(
        (first.server(), first.lines(), first.count()),
        (7, &b"a\nc\nd\n"[..], 3)
    );
    assert_eq!(
        (second.server(), second.lines(), second.count()),
        (4, &b"b\ne\n"[..], 2)
    );
    assert_eq!(poll(&gather, &wakes), Poll::Pending);
    second.answer(&[20, 50], None);
    assert_eq!(
        wakes.0.load(Ordering::SeqCst),
        0,
        "woken before the last part"
    );
    assert_eq!(poll(&gather, &wakes), Poll::Pending);
    first.answer(&[10, 30, 40], None);
    assert_eq!(
        wakes.0.load(Ordering::SeqCst),
        1,
        "one wake for the whole call"
    );
    assert_eq!(poll(&gather, &wakes), Poll::Ready(()));
    let gathered = gather.finish();
    assert_eq!(gathered.counts, [10, 20, 30, 40, 50]);
    assert!(
        gathered
            .parts
            .iter()
            .all(|s| matches!(s.outcome, Some(Ok(()))))
    );
}

#[test]
fn a_ticket_dropped_unanswered_is_a_closed_connection_and_a_failure_ends_the_wait() {
    let gather = two_parts();
    let wakes = Arc::new(Wakes::default());
    assert_eq!(poll(&gather, &wakes), Poll::Pending);
    // A connection that stopped with the part queued drops its ticket.
    drop(gather.ticket(1).expect("part 1"));
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
    assert_eq!(
        poll(&gather, &wakes),
        Poll::Ready(()),
        "not waiting for part 0"
    );
    let gathered = gather.finish();
    assert!(gathered.parts[0].outcome.is_none());
    match &gathered.parts[1].outcome {
        Some(Err(e)) => assert!(e.is_connection_fault(), "{e}"),
        other => panic!("part 1: {other:?}"),
    }
}

#[test]
fn an_answer_short_of_its_commands_is_a_protocol_error_and_an_outcome_is_given_once() {
    let gather = two_parts();
    let first = gather.ticket(0).expect("part 0");
    first.answer(&[1, 2], None);
    // A second ticket of the same part (never made by a connection) changes nothing.
    gather
        .ticket(0)
        .expect("part 0")
        .fail(TransportError::Overloaded("late".into()));
    let gathered = gather.finish();
    match &gathered.parts[0].outcome {
        Some(Err(TransportError::Protocol(why))) => assert!(why.contains("fewer"), "{why}"),
        other => panic!("part 0: {other:?}"),
    }
}

#[test]
fn the_caller_gone_the_shares_are_abandoned_and_late_answers_go_nowhere() {
    let gather = two_parts();
    let ticket = gather.ticket(0).expect("part 0");
    let written = ticket.written();
    let at = Instant::now();
    written.mark(at);
    assert!(!ticket.abandoned());
    gather.abandon();
    assert!(ticket.abandoned(), "the writer must skip it now");
    let gathered = gather.finish();
    assert_eq!(gathered.parts[0].sent_at, Some(at));
    assert!(gathered.parts.iter().all(|s| s.outcome.is_none()));
    // After the caller took the parts: nothing to record, and no panic.
    ticket.answer(&[1, 2, 3], None);
    written.mark(Instant::now());
    assert!(gather.finish().parts.is_empty());
}
