//! The meta-protocol command lines Turnstile sends: counters (`ma`), leases, and token-bucket states
//! (`mg ... c` and `ms ... C<cas>`), each key base64-encoded (`b`). Pure byte building, shared by
//! the pipelined connection; the answers are parsed in `pipelined`.
//!
//! Must not touch: sockets, queues, how answers are matched to callers.

use std::io::Write;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::storage::Change;
use crate::storage::memcached::transport::{Command, StateWrite};

/// Appends the key, base64-encoded, to `out` (no intermediate string).
fn push_key(out: &mut Vec<u8>, key: &str) {
    let start = out.len();
    out.resize(start + base64::encoded_len(key.len(), true).unwrap_or(0), 0);
    let written = STANDARD.encode_slice(key, &mut out[start..]).unwrap_or(0);
    out.truncate(start + written);
}

/// Appends ` {flag}{n}`: one numeric flag of a meta command.
fn push_flag(out: &mut Vec<u8>, flag: u8, n: u64) {
    out.push(b' ');
    out.push(flag);
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends `ma` for adding `n` (0 reads without creating), creating with TTL `exptime` when
/// missing. The hot path: numbers written without `core::fmt`.
fn push_add(out: &mut Vec<u8>, key: &str, n: u64, exptime: u64) {
    out.extend_from_slice(b"ma ");
    push_key(out, key);
    if n == 0 {
        out.extend_from_slice(b" b D0 v\r\n");
    } else {
        out.extend_from_slice(b" b");
        push_flag(out, b'N', exptime);
        push_flag(out, b'J', n);
        push_flag(out, b'D', n);
        out.extend_from_slice(b" v\r\n");
    }
}

/// Appends `ma` in decrement mode (floors at zero; a missing counter stays missing).
fn push_sub(out: &mut Vec<u8>, key: &str, n: u64) {
    out.extend_from_slice(b"ma ");
    push_key(out, key);
    let _ = write!(out, " b MD D{n} v\r\n");
}

/// Appends `ma` for a lease: add `n`, creating with TTL `exptime` when missing, and set the TTL
/// to `exptime` either way (`n` = 0 reads without creating or touching).
fn push_lease(out: &mut Vec<u8>, key: &str, n: u64, exptime: u64) {
    if n == 0 {
        return push_add(out, key, 0, exptime);
    }
    out.extend_from_slice(b"ma ");
    push_key(out, key);
    let _ = write!(out, " b N{exptime} J{n} D{n} T{exptime} v\r\n");
}

/// Appends `ma` for a release: subtract `n` (floors at zero; a missing counter stays missing)
/// and set the TTL of an existing counter to `exptime`.
fn push_release(out: &mut Vec<u8>, key: &str, n: u64, exptime: u64) {
    out.extend_from_slice(b"ma ");
    push_key(out, key);
    let _ = write!(out, " b MD D{n} T{exptime} v\r\n");
}

/// The most bytes the `ma` line of a counter command on a key of `key_len` bytes takes: `ma `,
/// the key as [`push_key`] writes it, and at most ` b MD N… J… D… T… v\r\n` with 20-digit
/// numbers; so that a call's lines are written into one buffer sized once.
pub(super) fn counter_line_max(key_len: usize) -> usize {
    // Keys are bounded far below an overflow; were one not, the buffer would only grow.
    let key = base64::encoded_len(key_len, true).unwrap_or(0);
    key + 3 + 6 + 4 * 22 + 4
}

/// Appends the `ma` line of one counter command.
pub(super) fn push_counter(out: &mut Vec<u8>, c: &Command<'_>) {
    match c.change {
        Change::Add(n) => push_add(out, c.key, n, c.exptime),
        Change::Sub(n) => push_sub(out, c.key, n),
        Change::Lease(n) => push_lease(out, c.key, n, c.exptime),
        Change::Release(n) => push_release(out, c.key, n, c.exptime),
    }
}

/// Appends `mg` for a token-bucket state with its CAS token.
pub(super) fn push_read_state(out: &mut Vec<u8>, key: &str) {
    out.extend_from_slice(b"mg ");
    push_key(out, key);
    out.extend_from_slice(b" b v c\r\n");
}

/// Appends `ms` writing a token-bucket state: compare-and-swap against `cas`, or add (create only if
/// missing) when `cas` is `None`.
pub(super) fn push_write_state(out: &mut Vec<u8>, write: StateWrite<'_>) {
    let (data, exptime) = (write.value.to_string(), write.exptime);
    out.extend_from_slice(b"ms ");
    push_key(out, write.key);
    let _ = match write.cas {
        Some(cas) => write!(out, " {} b T{exptime} C{cas}\r\n{data}\r\n", data.len()),
        None => write!(out, " {} b T{exptime} ME\r\n{data}\r\n", data.len()),
    };
}

#[cfg(test)]
mod tests {
    use super::{Change, Command, StateWrite, push_add, push_counter, push_sub};

    fn add_line(key: &str, n: u64, exptime: u64) -> Vec<u8> {
        let mut out = Vec::new();
        push_add(&mut out, key, n, exptime);
        out
    }

    fn sub_line(key: &str, n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        push_sub(&mut out, key, n);
        out
    }

    #[test]
    fn a_counter_line_never_outgrows_its_bound() {
        let long = "k".repeat(250);
        for key in ["", "k", "ke", "key", long.as_str()] {
            for change in [
                Change::Add(u64::MAX),
                Change::Sub(u64::MAX),
                Change::Lease(u64::MAX),
                Change::Release(u64::MAX),
                Change::READ,
            ] {
                let mut out = Vec::new();
                push_counter(
                    &mut out,
                    &Command {
                        key,
                        change,
                        exptime: u64::MAX,
                    },
                );
                assert!(
                    out.len() <= super::counter_line_max(key.len()),
                    "{key:?} {change:?}: {}",
                    out.len()
                );
            }
        }
    }

    #[test]
    fn command_lines() {
        assert_eq!(
            add_line("a b", 3, 60),
            b"ma YSBi b N60 J3 D3 v\r\n".to_vec()
        );
        assert_eq!(add_line("k", 0, 60), b"ma aw== b D0 v\r\n".to_vec());
        assert_eq!(sub_line("k", 2), b"ma aw== b MD D2 v\r\n".to_vec());
        let mut out = Vec::new();
        super::push_lease(&mut out, "k", 1, 60);
        super::push_release(&mut out, "k", 1, 60);
        super::push_read_state(&mut out, "k");
        let write = |cas| StateWrite {
            key: "k",
            value: 42,
            cas,
            exptime: 9,
        };
        super::push_write_state(&mut out, write(Some(7)));
        super::push_write_state(&mut out, write(None));
        assert_eq!(
            String::from_utf8_lossy(&out),
            "ma aw== b N60 J1 D1 T60 v\r\nma aw== b MD D1 T60 v\r\nmg aw== b v c\r\n\
             ms aw== 2 b T9 C7\r\n42\r\nms aw== 2 b T9 ME\r\n42\r\n"
        );
    }
}
