//! The counter and token-bucket commands of the pooled transport, one async-memcached call (or the
//! classic `incr` → `add` → `incr` fallback) each: create-or-add with the count after, refund,
//! lease with a TTL update, and a token-bucket state's read and compare-and-swap.
//!
//! Must not touch: the pool, deadlines, health (those are `pooled`'s and the store's).

use async_memcached::{AsciiProtocol, Client, Error, MetaProtocol, Status};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::storage::Change;
use crate::storage::memcached::transport::{Command, StateWrite, StoredState};

/// Which command family a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::storage::memcached) enum Protocol {
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

pub(super) fn not_found(err: &Error) -> bool {
    matches!(err, Error::Protocol(Status::NotFound))
}

/// Adds `n` (0 = read only; a missing counter is not created) and returns the count after.
/// `exptime` is memcached's: seconds, or an absolute Unix time beyond 30 days.
pub(super) async fn add(
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
pub(super) async fn sub(
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

/// A lease or release (`ma` with `T`, which sets the TTL on every change).
pub(super) async fn lease(conn: &mut Client, command: &Command<'_>) -> Result<u64, Error> {
    let b64 = STANDARD.encode(command.key);
    let ttl = format!("T{}", command.exptime);
    let result = match command.change {
        Change::Release(n) => {
            conn.meta_decrement(&b64, false, None, Some(n), Some(&["b", &ttl, "v"]))
                .await
        }
        Change::Lease(n) | Change::Add(n) | Change::Sub(n) => {
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

/// Reads a token-bucket state and its CAS token.
pub(super) async fn read_state(conn: &mut Client, key: &str) -> Result<Option<StoredState>, Error> {
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
        (Ok(value), Some(cas)) => Ok(Some(StoredState { value, cas })),
        _ => Err(Error::Protocol(Status::Error(
            async_memcached::ErrorKind::Protocol(Some(format!(
                "not a token-bucket state: {text:?}"
            ))),
        ))),
    }
}

/// Writes a token-bucket state by compare-and-swap (or add when new); `false` if another won.
pub(super) async fn write_state(conn: &mut Client, write: StateWrite<'_>) -> Result<bool, Error> {
    let b64 = STANDARD.encode(write.key);
    let ttl = format!("T{}", write.exptime);
    let mode = write
        .cas
        .map_or_else(|| "ME".to_owned(), |c| format!("C{c}"));
    let data = write.value.to_string();
    match conn
        .meta_set(&b64, data.as_str(), false, None, Some(&["b", &ttl, &mode]))
        .await
    {
        Ok(_) => Ok(true),
        Err(Error::Protocol(Status::NotStored | Status::Exists | Status::NotFound)) => Ok(false),
        Err(e) => Err(e),
    }
}
