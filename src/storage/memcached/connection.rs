//! One memcached connection (async-memcached) in a bb8 pool, and the counter operations on it:
//! the meta arithmetic command that creates-or-increments atomically and returns the count
//! after the hit, and the classic `incr` → `add` → `incr` fallback for servers without meta
//! commands.

use async_memcached::{AsciiProtocol, Client, Error, MetaProtocol, Status};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// Creates pooled connections; the check-out test is off (it costs a round trip per use), and
/// a connection whose operation was cancelled reports itself broken and is dropped.
#[derive(Debug)]
pub(crate) struct Manager {
    /// `host:port`; the host is resolved on every connect (IPv4 preferred: the client crate
    /// speaks IPv4 only).
    pub(crate) server: String,
}

impl bb8::ManageConnection for Manager {
    type Connection = Client;
    type Error = Error;

    async fn connect(&self) -> Result<Client, Error> {
        let addr = resolve(&self.server).await.map_err(Error::Connect)?;
        Client::new(format!("tcp://{addr}")).await
    }

    async fn is_valid(&self, conn: &mut Client) -> Result<(), Error> {
        conn.version().await.map(|_| ())
    }

    fn has_broken(&self, conn: &mut Client) -> bool {
        conn.is_closed()
    }
}

/// Resolves `host:port`, preferring IPv4 (the client crate speaks IPv4 only).
pub(crate) async fn resolve(server: &str) -> std::io::Result<std::net::SocketAddr> {
    let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host(server).await?.collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{server} has no address"),
            )
        })
}

/// Which command family a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// `ma` (memcached ≥ 1.6).
    Meta,
    /// `incr`/`add`/`decr`/`get`.
    Classic,
}

fn parse_count(data: Option<&[u8]>) -> Result<u64, Error> {
    let text = data
        .map(|d| String::from_utf8_lossy(d).trim().to_owned())
        .unwrap_or_default();
    text.parse().map_err(|_| {
        Error::Protocol(Status::Error(async_memcached::ErrorKind::Protocol(Some(
            format!("not a counter: {text:?}"),
        ))))
    })
}

fn not_found(err: &Error) -> bool {
    matches!(err, Error::Protocol(Status::NotFound))
}

/// Adds `n` (0 = read only; a missing counter is not created) and returns the count after.
/// `exptime` is memcached's: seconds, or an absolute Unix time beyond 30 days.
pub(crate) async fn add(
    conn: &mut Client,
    protocol: Protocol,
    key: &str,
    n: u64,
    exptime: u64,
) -> Result<u64, Error> {
    match protocol {
        Protocol::Meta => {
            let b64 = STANDARD.encode(key);
            let result = if n == 0 {
                conn.meta_increment(&b64, false, None, Some(0), Some(&["b", "v"]))
                    .await
            } else {
                let ttl = format!("N{exptime}");
                let initial = format!("J{n}");
                conn.meta_increment(
                    &b64,
                    false,
                    None,
                    Some(n),
                    Some(&["b", &ttl, &initial, "v"]),
                )
                .await
            };
            match result {
                Ok(value) => parse_count(value.as_ref().and_then(|v| v.data.as_deref())),
                Err(e) if not_found(&e) => Ok(0),
                Err(e) => Err(e),
            }
        }
        Protocol::Classic => classic_add(conn, key, n, exptime).await,
    }
}

/// Classic commands accept our keys as they are: printable ASCII without spaces, ≤ 186 bytes.
async fn classic_add(conn: &mut Client, key: &str, n: u64, exptime: u64) -> Result<u64, Error> {
    if n == 0 {
        return match conn.get(key).await? {
            Some(value) => parse_count(value.data.as_deref()),
            None => Ok(0),
        };
    }
    match conn.increment(key, n).await {
        Ok(count) => return Ok(count),
        Err(e) if not_found(&e) => {}
        Err(e) => return Err(e),
    }
    let ttl = i64::try_from(exptime).unwrap_or(i64::MAX);
    match conn.add(key, n.to_string().as_str(), Some(ttl), None).await {
        Ok(()) => Ok(n),
        // Another client created it between our incr and add: count on top of theirs.
        Err(Error::Protocol(Status::NotStored)) => conn.increment(key, n).await,
        Err(e) => Err(e),
    }
}

/// Refunds `n` (never below zero; a missing counter stays missing) and returns the count after.
pub(crate) async fn sub(
    conn: &mut Client,
    protocol: Protocol,
    key: &str,
    n: u64,
) -> Result<u64, Error> {
    let result = match protocol {
        Protocol::Meta => {
            let b64 = STANDARD.encode(key);
            conn.meta_decrement(&b64, false, None, Some(n), Some(&["b", "v"]))
                .await
                .and_then(|v| parse_count(v.as_ref().and_then(|v| v.data.as_deref())))
        }
        Protocol::Classic => conn.decrement(key, n).await,
    };
    match result {
        Err(e) if not_found(&e) => Ok(0),
        other => other,
    }
}
