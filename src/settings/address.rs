//! Store addresses (`host:port`) checked at start, so that an address no connection can ever use
//! is refused with the variable's name instead of a service that never becomes ready.
//!
//! Must not touch: name resolution (a name that does not resolve yet may resolve later, as in
//! Kubernetes while a Service comes up), sockets.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::SettingsError;
use super::reader::err;

/// Checks one `host:port` (`[v6]:port` for an IPv6 literal) given in `name`; `Ok` keeps the
/// text as written. `whole` is the variable's full value, for the error.
pub(super) fn host_port(name: &str, whole: &str, address: &str) -> Result<(), SettingsError> {
    problem(address).map_or(Ok(()), |problem| {
        Err(err(
            name,
            whole,
            format!("'{address}' {problem}; expected host:port, e.g. 10.0.0.7:6379 or cache:11211"),
        ))
    })
}

/// Checks a comma-separated list of `host:port`, every entry non-empty.
pub(super) fn host_ports(name: &str, whole: &str) -> Result<Vec<String>, SettingsError> {
    let mut out = Vec::new();
    for (i, item) in whole.split(',').map(str::trim).enumerate() {
        if item.is_empty() {
            return Err(err(
                name,
                whole,
                format!(
                    "entry {} of the comma-separated list is empty; expected host:port,host:port",
                    i + 1
                ),
            ));
        }
        host_port(name, whole, item)?;
        out.push(item.to_owned());
    }
    Ok(out)
}

/// What is wrong with `address`, in words; `None` when it is a usable `host:port`.
fn problem(address: &str) -> Option<String> {
    if let Some((scheme, _)) = address.split_once("://") {
        return Some(format!(
            "has a scheme ({scheme}://), which this setting does not take"
        ));
    }
    let (host, port) = if let Some(rest) = address.strip_prefix('[') {
        let Some((v6, port)) = rest.split_once("]:") else {
            return Some("has no port after the bracketed IPv6 address".into());
        };
        if v6.parse::<Ipv6Addr>().is_err() {
            return Some(format!(
                "has '{v6}' in brackets, which is not an IPv6 address"
            ));
        }
        (None, port)
    } else {
        let Some((host, port)) = address.rsplit_once(':') else {
            return Some("has no port".into());
        };
        if host.contains(':') {
            return Some(
                "has more than one ':' (an IPv6 address goes in brackets: [::1]:6379)".into(),
            );
        }
        (Some(host), port)
    };
    match port.parse::<u16>() {
        Ok(0) => return Some("has port 0, which no server listens on".into()),
        Ok(_) => {}
        Err(_) => return Some(format!("has port '{port}', not a number from 1 to 65535")),
    }
    match host {
        Some(host) if !is_host(host) => Some(format!(
            "has host '{host}', which is neither a DNS name nor an IPv4 address"
        )),
        _ => None,
    }
}

/// A DNS name (letters, digits, `-`, `_`, dot-separated labels of 1 to 63 bytes) or an IPv4
/// literal.
fn is_host(host: &str) -> bool {
    if host.parse::<Ipv4Addr>().is_ok() {
        return true;
    }
    !host.is_empty()
        && host.len() <= 253
        && host.trim_end_matches('.').split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::problem;

    #[test]
    fn usable_addresses() {
        for ok in [
            "localhost:6379",
            "127.0.0.1:1",
            "[::1]:11211",
            "redis.default.svc.cluster.local:6379",
            "cache-0.cache:11211",
            "my_host:65535",
        ] {
            assert_eq!(problem(ok), None, "{ok}");
        }
    }

    #[test]
    fn unusable_addresses_say_why() {
        for (bad, says) in [
            ("localhost:notaport", "not a number"),
            ("127.0.0.1:99999", "not a number"),
            ("not a url", "no port"),
            (":::", "more than one ':'"),
            ("redis://127.0.0.1:1/0", "scheme"),
            ("localhost", "no port"),
            ("a:b:c", "more than one ':'"),
            (":6379", "neither a DNS name"),
            ("host:0", "port 0"),
            ("[zz]:1", "not an IPv6"),
            ("[::1]", "no port"),
            ("a b:1", "neither a DNS name"),
        ] {
            let problem = problem(bad).unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(problem.contains(says), "{bad}: {problem}");
        }
    }
}
