//! Unit tests of fairness between peers: allotments of the limit, RLQS streams, and which
//! connection a cap closes.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use super::{CloseReason, ConnectionLimits, Fair, Gate, PeerId, Peers};
use crate::metrics::PeerReadings;

fn peers(max: usize, per_peer: usize) -> (Arc<Peers>, Arc<PeerReadings>) {
    let readings = Arc::new(PeerReadings::default());
    let limits = ConnectionLimits { max, per_peer };
    (Peers::new(limits, 2, Arc::clone(&readings)), readings)
}

fn ip(last: u8) -> PeerId {
    PeerId::of_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)))
}

#[test]
fn a_peer_alone_may_wait_and_a_peer_over_its_part_beside_others_is_over() {
    let (peers, readings) = peers(100, 100);
    let (a, b) = (peers.peer(ip(2), None), peers.peer(ip(3), None));
    // Alone: within the whole limit, then alone over it.
    let held: Vec<_> = (0..4).map(|_| a.enter()).collect();
    assert_eq!(a.fair(4), Fair::Alone);
    assert_eq!(b.fair(4), Fair::Within, "a newcomer's allotment is 4 / 2");
    // B becomes active: A's allotment is halved, B stays within its own.
    let b_held = b.enter();
    assert_eq!(
        a.fair(4),
        Fair::Over {
            holding: 4,
            allotment: 2,
            active: 2
        }
    );
    assert_eq!(b.fair(4), Fair::Within);
    assert_eq!((readings.active(), peers.decisions()), (2, 5));
    assert_eq!(readings.active(), 2);
    drop(b_held);
    assert_eq!(a.fair(4), Fair::Alone, "B is no longer active");
    drop(held);
    assert_eq!((readings.active(), peers.decisions()), (0, 0));
    assert_eq!(readings.take_largest_share(), 0.8, "A held 4 of 5 at most");
}

#[test]
fn the_same_identity_is_the_same_peer_while_held_and_certificates_are_told_apart() {
    let (peers, _) = peers(100, 100);
    let a = peers.peer(ip(2), None);
    assert!(Arc::ptr_eq(&a, &peers.peer(ip(2), None)));
    let mapped: IpAddr = "::ffff:127.0.0.2".parse().expect("ip");
    assert_eq!(PeerId::of_address(mapped), ip(2), "IPv4-mapped is IPv4");
    assert_ne!(
        PeerId::of_certificate(b"one"),
        PeerId::of_certificate(b"two")
    );
    let text = peers
        .peer(PeerId::of_certificate(b"one"), Some(mapped))
        .to_string();
    assert!(text.starts_with("client certificate "), "{text}");
    assert!(text.ends_with("(from ::ffff:127.0.0.2)"), "{text}");
}

#[test]
fn rlqs_streams_are_capped_per_peer() {
    let (peers, _) = peers(100, 100);
    let (a, b) = (peers.peer(ip(2), None), peers.peer(ip(3), None));
    let cap = peers.stream_cap();
    let first = a.open_stream(cap).expect("first");
    let _second = a.open_stream(cap).expect("second");
    assert!(a.open_stream(cap).is_none(), "a third is over the cap of 2");
    assert!(b.open_stream(cap).is_some(), "another peer has its own");
    drop(first);
    assert!(
        a.open_stream(cap).is_some(),
        "a closed stream frees its place"
    );
}

#[test]
fn at_the_cap_the_longest_idle_connection_of_the_largest_peer_is_closed() {
    let (peers, readings) = peers(3, 10);
    let conns = peers.connections();
    let hog = peers.peer(ip(2), None);
    let first = conns.open(Arc::clone(&hog));
    let second = conns.open(Arc::clone(&hog));
    let _busy = second.state().call();
    let small = conns.open(peers.peer(ip(4), None));
    // Full: a newcomer closes the hog's idle connection, not its busy one nor the small peer's.
    let _newcomer = conns.open(peers.peer(ip(3), None));
    assert_eq!(first.state().closing(), Some(CloseReason::MakeRoom));
    assert_eq!(second.state().closing(), None);
    assert_eq!(small.state().closing(), None);
    assert_eq!(conns.live(), 3);
    assert_eq!(hog.connections(), 1);
    assert_eq!(readings.closed_total(CloseReason::MakeRoom), 1);
}

#[test]
fn a_peer_at_its_own_cap_closes_its_own_longest_idle() {
    let (peers, readings) = peers(100, 2);
    let conns = peers.connections();
    let a = peers.peer(ip(2), None);
    let first = conns.open(Arc::clone(&a));
    let second = conns.open(Arc::clone(&a));
    let _open = first.state().call(); // the first is busy: the second is the idle one
    let third = conns.open(Arc::clone(&a));
    assert_eq!(second.state().closing(), Some(CloseReason::PeerCap));
    assert_eq!(
        (first.state().closing(), third.state().closing()),
        (None, None)
    );
    assert_eq!(a.connections(), 2);
    assert_eq!(readings.closed_total(CloseReason::PeerCap), 1);
    drop(second);
    assert_eq!(
        a.connections(),
        2,
        "a closed connection was already uncounted"
    );
}

/// A waker that counts its wakes.
struct Counting(std::sync::atomic::AtomicUsize);

impl std::task::Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn a_close_wakes_as_many_queued_connections_as_it_leaves_room_for_and_none_is_left() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (peers, _) = peers(10_000, 10_000);
    peers.set_budget(4); // a allotment of 8 requests open, the least there is
    let conns = peers.connections();
    let peer = peers.peer(ip(2), None);
    let mut handles: Vec<_> = (0..1_000).map(|_| conns.open(Arc::clone(&peer))).collect();
    let counts: Vec<Arc<Counting>> = (0..1_000)
        .map(|_| Arc::new(Counting(AtomicUsize::new(0))))
        .collect();
    let wakes = |i: usize| counts[i].0.load(Ordering::Relaxed);
    peer.requests_opened(8);
    for (conn, count) in handles.iter().zip(&counts) {
        let waker = std::task::Waker::from(Arc::clone(count));
        assert!(conn.state().wait_at_gate(&waker), "8 of 8 open: shut");
        assert!(
            conn.state().wait_at_gate(&waker),
            "queued once however often"
        );
    }
    assert_eq!(peer.waiting_at_gate(), 1_000);
    // The first in the queue closed: it is skipped, the next takes the one place freed.
    drop(handles.remove(0));
    peer.requests_closed(1);
    assert_eq!((wakes(0), wakes(1), wakes(2)), (0, 1, 0));
    assert_eq!(
        (1..1_000).map(wakes).sum::<usize>(),
        1,
        "one place, one wake"
    );
    assert_eq!(peer.waiting_at_gate(), 998);
    // Woken, it reads (its pass taken); had it to wait again, it would queue at the back.
    let again = std::task::Waker::from(Arc::clone(&counts[1]));
    assert!(handles[0].state().take_pass(), "woken with a pass");
    peer.requests_opened(1);
    assert!(handles[0].state().wait_at_gate(&again));
    assert_eq!(peer.waiting_at_gate(), 999);
    // Three close: three places, the next three in the queue.
    peer.requests_closed(3);
    assert_eq!((2..5).map(wakes).collect::<Vec<_>>(), vec![1, 1, 1]);
    assert_eq!((5..1_000).map(wakes).sum::<usize>(), 0);
    // With others queued, a connection without a pass meets the gate shut although the allotment
    // has room (it would take a woken one's place); with its pass it meets the peer's gate.
    assert_eq!(peer.gate(), Gate::Narrow, "5 of 8 open");
    assert_eq!(handles[9].state().gate(false), Gate::Shut);
    assert_eq!(handles[1].state().gate(true), Gate::Narrow);
    // A woken one that finds nothing to read hands its turn to the next in the queue.
    assert!(handles[1].state().take_pass());
    peer.turn_ended();
    assert_eq!((wakes(5), wakes(6)), (1, 0), "the next one, and only it");
    // Nothing open: no later close would wake anyone, so every queued connection is woken.
    peer.requests_closed(5);
    assert_eq!(peer.waiting_at_gate(), 0);
    assert!(
        (1..1_000).all(|i| wakes(i) >= 1),
        "no connection left at the gate"
    );
    assert_eq!(wakes(1), 2, "the requeued one, once more");
}

#[test]
fn an_http_request_waits_while_its_peer_is_at_its_allotment_and_a_close_lets_it_in() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let (peers, _) = peers(10_000, 10_000);
    peers.set_budget(4); // an allotment of 8 requests open
    let peer = peers.peer(ip(2), None);
    let other = peers.peer(ip(3), None);
    peer.requests_opened(8);
    let mut cx = Context::from_waker(Waker::noop());
    let mut first = std::pin::pin!(peer.request_turn());
    let mut second = std::pin::pin!(peer.request_turn());
    assert!(first.as_mut().poll(&mut cx).is_pending(), "8 of 8 open");
    assert!(second.as_mut().poll(&mut cx).is_pending(), "8 of 8 open");
    // Another peer is not held by this one's requests.
    let mut theirs = std::pin::pin!(other.request_turn());
    let Poll::Ready(theirs) = theirs.as_mut().poll(&mut cx) else {
        panic!("another peer's request waited behind this one's")
    };
    assert_eq!(other.requests(), 1);
    peer.requests_closed(1);
    let Poll::Ready(open) = first.as_mut().poll(&mut cx) else {
        panic!("a close left room and the waiting request did not take it")
    };
    assert_eq!(peer.requests(), 8, "counted in the peer's requests open");
    assert!(
        second.as_mut().poll(&mut cx).is_pending(),
        "one close, one place"
    );
    drop(open);
    assert!(
        second.as_mut().poll(&mut cx).is_ready(),
        "its close lets the next in"
    );
    drop(theirs);
    assert_eq!(other.requests(), 0, "closed when dropped");
}
