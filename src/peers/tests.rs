//! Unit tests of fairness between peers: parts of the limit, RLQS streams, and which
//! connection a cap closes.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use super::{CloseReason, ConnectionLimits, Fair, PeerId, Peers};
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
    assert_eq!(b.fair(4), Fair::Within, "a newcomer's part is 4 / 2");
    // B becomes active: A's part is halved, B stays within its own.
    let b_held = b.enter();
    assert_eq!(
        a.fair(4),
        Fair::Over {
            held: 4,
            part: 2,
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
