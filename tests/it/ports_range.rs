//! The ports `ports.rs` hands out: below the ephemeral range (with a Redis bus port's offset)
//! and never twice. (Its own file: `tests/allocations.rs` shares `ports.rs`, and a test there
//! would run beside its allocation count.)

use crate::ports::free_port;

#[test]
fn ports_are_below_the_ephemeral_range_and_never_repeat() {
    let ephemeral_from: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next().and_then(|p| p.parse().ok()))
        .unwrap_or(32_768);
    let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
    let mut distinct = ports.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        ports.len(),
        "a port handed out twice: {ports:?}"
    );
    assert!(
        ports
            .iter()
            .all(|&p| u32::from(p) + 10_000 < ephemeral_from),
        "a port (or its Redis bus port) in the ephemeral range from {ephemeral_from}: {ports:?}"
    );
}
