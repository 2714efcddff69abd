//! The caller's deadline, as the `grpc-timeout` header carries it.

use std::time::Duration;

/// A `grpc-timeout` header's value: up to eight digits and a unit (`H`, `M`, `S`, `m`, `u`,
/// `n`), as the gRPC over HTTP/2 protocol writes it; `None` when it is not that.
pub(super) fn grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let amount: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(amount * 3_600),
        b'M' => Duration::from_secs(amount * 60),
        b'S' => Duration::from_secs(amount),
        b'm' => Duration::from_millis(amount),
        b'u' => Duration::from_micros(amount),
        b'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::grpc_timeout;

    #[test]
    fn grpc_timeouts_are_read_in_every_unit_and_nonsense_is_none() {
        assert_eq!(grpc_timeout(b"20m"), Some(Duration::from_millis(20)));
        assert_eq!(grpc_timeout(b"1S"), Some(Duration::from_secs(1)));
        assert_eq!(grpc_timeout(b"2M"), Some(Duration::from_secs(120)));
        assert_eq!(grpc_timeout(b"1H"), Some(Duration::from_secs(3_600)));
        assert_eq!(grpc_timeout(b"500u"), Some(Duration::from_micros(500)));
        assert_eq!(
            grpc_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in [&b""[..], b"m", b"20", b"20x", b"-1m", b"123456789m", b"2 m"] {
            assert_eq!(
                grpc_timeout(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
