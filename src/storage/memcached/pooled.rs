//! The pooled transport: async-memcached connections in a bb8 pool per server, one command in
//! flight per connection, and the counter operations on them: the meta arithmetic command that
//! creates-or-increments atomically and returns the count after the hit, and the classic
//! `incr` → `add` → `incr` fallback for servers without meta commands. The only place that
//! knows bb8 and async-memcached.

use std::time::Duration;

use async_memcached::{AsciiProtocol, Client, Error, MetaProtocol, Status};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bb8::Pool;
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, try_join_all};

use std::sync::atomic::Ordering;

use super::transport::{Command, Connections, Sent, Transport, TransportError};
use crate::storage::Op;

/// Creates pooled connections; the check-out test is off (it costs a round trip per use), and
/// a connection whose operation was cancelled reports itself broken and is dropped.
#[derive(Debug)]
pub(super) struct Manager {
    /// `host:port`; the host is resolved on every connect (IPv4 preferred: the client crate
    /// speaks IPv4 only).
    server: String,
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
pub(super) async fn resolve(server: &str) -> std::io::Result<std::net::SocketAddr> {
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
pub(super) enum Protocol {
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
async fn add(
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
async fn sub(conn: &mut Client, protocol: Protocol, key: &str, n: u64) -> Result<u64, Error> {
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

/// A lease or release (`ma` with `T`, which sets the TTL on every change).
async fn lease(conn: &mut Client, command: &Command<'_>) -> Result<u64, Error> {
    let b64 = STANDARD.encode(command.key);
    let ttl = format!("T{}", command.exptime);
    let result = match command.op {
        Op::Release(n) => {
            conn.meta_decrement(&b64, false, None, Some(n), Some(&["b", &ttl, "v"]))
                .await
        }
        Op::Lease(n) | Op::Add(n) | Op::Sub(n) => {
            let vivify = format!("N{}", command.exptime);
            let initial = format!("J{n}");
            let flags = ["b", &vivify, &initial, &ttl, "v"];
            conn.meta_increment(&b64, false, None, Some(n), Some(&flags))
                .await
        }
    };
    match result {
        Ok(value) => parse_count(value.as_ref().and_then(|v| v.data.as_deref())),
        Err(e) if not_found(&e) => Ok(0),
        Err(e) => Err(e),
    }
}

/// Reads a bucket state and its CAS token.
async fn read_state(conn: &mut Client, key: &str) -> Result<Option<(u128, u64)>, Error> {
    let b64 = STANDARD.encode(key);
    let Some(value) = conn
        .meta_get(&b64, false, None, Some(&["b", "v", "c"]))
        .await?
    else {
        return Ok(None);
    };
    let text = value
        .data
        .as_deref()
        .map(|d| String::from_utf8_lossy(d).trim().to_owned())
        .unwrap_or_default();
    match (text.parse::<u128>(), value.cas) {
        (Ok(state), Some(cas)) => Ok(Some((state, cas))),
        _ => Err(Error::Protocol(Status::Error(
            async_memcached::ErrorKind::Protocol(Some(format!("not a bucket state: {text:?}"))),
        ))),
    }
}

/// Writes a bucket state by compare-and-swap (or add when new); `false` if another won.
async fn write_state(
    conn: &mut Client,
    key: &str,
    value: u128,
    cas: Option<u64>,
    exptime: u64,
) -> Result<bool, Error> {
    let b64 = STANDARD.encode(key);
    let ttl = format!("T{exptime}");
    let mode = cas.map_or_else(|| "ME".to_owned(), |c| format!("C{c}"));
    let data = value.to_string();
    match conn
        .meta_set(&b64, data.as_str(), false, None, Some(&["b", &ttl, &mode]))
        .await
    {
        Ok(_) => Ok(true),
        Err(Error::Protocol(Status::NotStored | Status::Exists | Status::NotFound)) => Ok(false),
        Err(e) => Err(e),
    }
}

impl From<Error> for TransportError {
    fn from(err: Error) -> Self {
        match err {
            Error::Connect(e) => TransportError::Connect(e),
            Error::Io(e) => TransportError::Io(e),
            Error::Protocol(status) => TransportError::Protocol(format!("{status:?}")),
            other => TransportError::Io(std::io::Error::other(other.to_string())),
        }
    }
}

/// The pooled transport to one server.
#[derive(Debug)]
pub(super) struct Pooled {
    pool: Pool<Manager>,
    protocol: Protocol,
}

impl Pooled {
    /// A pool of up to `size` connections to `server`, made lazily; checking a connection out
    /// waits at most `timeout`.
    pub(super) fn new(server: String, size: u32, timeout: Duration, protocol: Protocol) -> Self {
        let pool = Pool::builder()
            .max_size(size)
            .min_idle(None)
            .test_on_check_out(false)
            .connection_timeout(timeout)
            .build_unchecked(Manager { server });
        Self { pool, protocol }
    }

    /// A pooled connection. Waiting for a busy pool is Turnstile's own queueing: running out
    /// of time there is overload, not a fault of the server.
    async fn connection(&self) -> Result<bb8::PooledConnection<'_, Manager>, TransportError> {
        self.pool.get().await.map_err(|e| match e {
            bb8::RunError::User(e) => e.into(),
            bb8::RunError::TimedOut => TransportError::Overloaded(
                "no pooled memcached connection became free in time".into(),
            ),
        })
    }

    async fn one(&self, command: &Command<'_>, sent: &Sent) -> Result<u64, TransportError> {
        let mut conn = self.connection().await?;
        // With a connection in hand, the command goes straight to the server.
        sent.store(true, Ordering::Release);
        let count = match command.op {
            Op::Add(n) => add(&mut conn, self.protocol, command.key, n, command.exptime).await,
            Op::Sub(n) => sub(&mut conn, self.protocol, command.key, n).await,
            Op::Lease(0) => add(&mut conn, self.protocol, command.key, 0, command.exptime).await,
            Op::Lease(_) | Op::Release(_) => {
                self.meta_only("a concurrency limit")?;
                lease(&mut conn, command).await
            }
        };
        Ok(count?)
    }

    /// Classic commands cannot set a TTL on update or compare-and-swap here: the algorithms
    /// that need them are refused with a clear error rather than counted wrongly.
    fn meta_only(&self, what: &str) -> Result<(), TransportError> {
        match self.protocol {
            Protocol::Meta => Ok(()),
            Protocol::Classic => Err(TransportError::Protocol(format!(
                "{what} needs memcached meta commands (memcached 1.6 or later); \
                 MEMCACHE_TRANSPORT=classic supports fixed and sliding windows only"
            ))),
        }
    }
}

impl Transport for Pooled {
    fn apply<'a>(
        &'a self,
        commands: &'a [Command<'a>],
        sent: &'a Sent,
    ) -> BoxFuture<'a, Result<Vec<u64>, TransportError>> {
        async move {
            let distinct = commands
                .iter()
                .enumerate()
                .all(|(i, c)| commands[..i].iter().all(|o| o.key != c.key));
            if distinct {
                // One connection per command, all at once.
                try_join_all(commands.iter().map(|c| self.one(c, sent))).await
            } else {
                // The same counter twice: in order, so each answer is the count after exactly
                // the hits before it.
                let mut counts = Vec::with_capacity(commands.len());
                for command in commands {
                    counts.push(self.one(command, sent).await?);
                }
                Ok(counts)
            }
        }
        .boxed()
    }

    fn read_state<'a>(
        &'a self,
        key: &'a str,
        sent: &'a Sent,
    ) -> BoxFuture<'a, Result<Option<(u128, u64)>, TransportError>> {
        async move {
            self.meta_only("a token bucket")?;
            let mut conn = self.connection().await?;
            sent.store(true, Ordering::Release);
            Ok(read_state(&mut conn, key).await?)
        }
        .boxed()
    }

    fn write_state<'a>(
        &'a self,
        key: &'a str,
        value: u128,
        cas: Option<u64>,
        exptime: u64,
        sent: &'a Sent,
    ) -> BoxFuture<'a, Result<bool, TransportError>> {
        async move {
            self.meta_only("a token bucket")?;
            let mut conn = self.connection().await?;
            sent.store(true, Ordering::Release);
            Ok(write_state(&mut conn, key, value, cas, exptime).await?)
        }
        .boxed()
    }

    fn probe(&self) -> BoxFuture<'_, Result<(), TransportError>> {
        async move {
            let mut conn = self.connection().await?;
            conn.version().await?;
            Ok(())
        }
        .boxed()
    }

    fn reset(&self) {
        // Broken connections report themselves (`has_broken`) and are dropped by the pool.
    }

    fn connections(&self) -> Connections {
        let state = self.pool.state();
        Connections {
            open: u64::from(state.connections),
            idle: u64::from(state.idle_connections),
        }
    }
}
