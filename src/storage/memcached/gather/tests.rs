use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

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
fn two_shares() -> Arc<Gather> {
    let mut builder = Builder::new(32, 2);
    builder.share(7, |lines| {
        lines.extend_from_slice(b"a\nc\nd\n");
        3
    });
    builder.share(4, |lines| {
        lines.extend_from_slice(b"b\ne\n");
        2
    });
    let mut owners = vec![7, 4, 7, 7, 4];
    builder.shares_of(&mut owners);
    assert_eq!(owners, [0, 1, 0, 0, 1]);
    builder.build(5, owners)
}

#[test]
fn each_share_carries_its_own_lines_and_its_answers_land_in_the_hits_order() {
    let gather = two_shares();
    let wakes = Arc::new(Wakes::default());
    let first = gather.ticket(0).expect("share 0");
    let second = gather.ticket(1).expect("share 1");
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
        "woken before the last share"
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
            .shares
            .iter()
            .all(|s| matches!(s.outcome, Some(Ok(()))))
    );
}

#[test]
fn a_ticket_dropped_unanswered_is_a_closed_connection_and_a_failure_ends_the_wait() {
    let gather = two_shares();
    let wakes = Arc::new(Wakes::default());
    assert_eq!(poll(&gather, &wakes), Poll::Pending);
    // A connection that stopped with the share queued drops its ticket.
    drop(gather.ticket(1).expect("share 1"));
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
    assert_eq!(
        poll(&gather, &wakes),
        Poll::Ready(()),
        "not waiting for share 0"
    );
    let gathered = gather.finish();
    assert!(gathered.shares[0].outcome.is_none());
    match &gathered.shares[1].outcome {
        Some(Err(e)) => assert!(e.is_connection_fault(), "{e}"),
        other => panic!("share 1: {other:?}"),
    }
}

#[test]
fn an_answer_short_of_its_commands_is_a_protocol_error_and_an_outcome_is_given_once() {
    let gather = two_shares();
    let first = gather.ticket(0).expect("share 0");
    first.answer(&[1, 2], None);
    // A second ticket of the same share (never made by a connection) changes nothing.
    gather
        .ticket(0)
        .expect("share 0")
        .fail(TransportError::Overloaded("late".into()));
    let gathered = gather.finish();
    match &gathered.shares[0].outcome {
        Some(Err(TransportError::Protocol(why))) => assert!(why.contains("fewer"), "{why}"),
        other => panic!("share 0: {other:?}"),
    }
}

#[test]
fn the_caller_gone_the_shares_are_abandoned_and_late_answers_go_nowhere() {
    let gather = two_shares();
    let ticket = gather.ticket(0).expect("share 0");
    let written = ticket.written();
    let at = Instant::now();
    written.mark(at);
    assert!(!ticket.abandoned());
    gather.abandon();
    assert!(ticket.abandoned(), "the writer must skip it now");
    let gathered = gather.finish();
    assert_eq!(gathered.shares[0].sent_at, Some(at));
    assert!(gathered.shares.iter().all(|s| s.outcome.is_none()));
    // After the caller took the shares: nothing to record, and no panic.
    ticket.answer(&[1, 2, 3], None);
    written.mark(Instant::now());
    assert!(gather.finish().shares.is_empty());
}
