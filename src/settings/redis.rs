//! The Redis backend's settings (`BACKEND_TYPE=redis`), with the reference's names, forms and
//! defaults. Settings the reference has and Turnstile does not support yet are refused at start
//! with their name, never silently ignored.

use std::time::Duration;

use super::reader::{LONGEST, Reader, STORE_TIMEOUT, Span, err, jitter};
use super::{SettingsError, address};

/// The Redis backend's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RedisSettings {
    /// Where Redis is (`REDIS_TYPE`, `REDIS_URL`, `REDIS_SOCKET_TYPE`).
    pub target: RedisTarget,
    /// `REDIS_AUTH`: `pass` or `user:pass`.
    pub auth: Option<RedisAuth>,
    /// `REDIS_POOL_SIZE`: accepted; connections are multiplexed (one per node carries every
    /// request pipelined), so no pool is kept.
    pub pool_size: u32,
    /// `REDIS_TIMEOUT`: the deadline of one operation (default 10 s, as the reference; Envoy's
    /// own deadline is usually far shorter).
    pub timeout: Duration,
    /// `EXPIRATION_JITTER_MAX_SECONDS`.
    pub jitter_max_seconds: u64,
    /// `REDIS_TLS` and its files: TLS to every Redis node (single or cluster).
    pub tls: Option<RedisTls>,
    /// `REDIS_KEY_LAYOUT`: the reference's key bytes for fixed windows (default, so both
    /// services share counters during a cut-over) or Turnstile's unambiguous layout.
    pub key_layout: KeyLayout,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: when a request would take one fixed-window
    /// counter over its limit, only the counters that would go over are incremented (Redis
    /// only, as in the reference).
    pub stop_increment_when_over_limit: bool,
    /// `REDIS_PERSECOND` and its `REDIS_PERSECOND_*` mirror: a second Redis for the counters of
    /// limits whose unit is SECOND.
    pub per_second: Option<Box<RedisSettings>>,
}

/// TLS to Redis (`REDIS_TLS=true`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisTls {
    /// `REDIS_TLS_CACERT`: the CA bundle (PEM) that signs the servers' certificates; the
    /// system's roots when unset.
    pub ca: Option<std::path::PathBuf>,
    /// `REDIS_TLS_CLIENT_CERT` and `REDIS_TLS_CLIENT_KEY`: a client certificate (mTLS).
    pub client: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`: accept a server certificate for another name.
    pub skip_hostname_verification: bool,
}

/// Where Redis is (`REDIS_TYPE`, `REDIS_SOCKET_TYPE`, `REDIS_URL`) and its credentials: the
/// store's own types, built here directly.
pub use crate::storage::redis::{RedisAuth, RedisTarget};

/// Which key bytes fixed-window counters use (`REDIS_KEY_LAYOUT`; the reference's by default on
/// Redis): the limiter's own type, built here directly.
pub use crate::limiter::KeyLayout;

pub(super) fn redis(r: &Reader<'_>) -> RedisSettings {
    let mut settings = one_redis(r);
    settings.per_second = per_second(r).map(|mut second| {
        // One key layout for every counter the limiter keeps.
        second.key_layout = settings.key_layout;
        second
    });
    settings
}

/// `REDIS_PERSECOND` with the `REDIS_PERSECOND_*` settings, read as the main ones are; each
/// problem is reported under its `REDIS_PERSECOND_*` name.
fn per_second(r: &Reader<'_>) -> Option<Box<RedisSettings>> {
    if !r.bool("REDIS_PERSECOND", false) {
        return None;
    }
    let mirror = |name: &str| match name.strip_prefix("REDIS_") {
        Some(rest) => (r.env)(&format!("REDIS_PERSECOND_{rest}")),
        None => (r.env)(name),
    };
    let second = Reader::new(&mirror);
    let settings = one_redis(&second);
    for mut problem in second.into_problems() {
        if let Some(rest) = problem.name.strip_prefix("REDIS_") {
            problem.name = format!("REDIS_PERSECOND_{rest}");
        }
        // Settings without the prefix (`EXPIRATION_JITTER_MAX_SECONDS`, …) are the main
        // ones, already reported.
        if problem.name.starts_with("REDIS_PERSECOND_") {
            r.report(problem);
        }
    }
    Some(Box::new(settings))
}

fn one_redis(r: &Reader<'_>) -> RedisSettings {
    let empty = r.string("REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT");
    if !empty.eq_ignore_ascii_case("wait") {
        r.report(err(
            "REDIS_POOL_ON_EMPTY_BEHAVIOR",
            &empty,
            "only WAIT (connections are multiplexed; requests never wait for a pool)",
        ));
    }
    // Accepted for compatibility, validated, and documented as having no effect here: commands
    // are pipelined on multiplexed connections as they arrive (no write-flush window or limit),
    // and the start never waits for Redis (connections are made lazily, with a backoff of
    // 50 ms doubling to 1 s, ±25 %, between attempts).
    let any = Span::within(Duration::ZERO, LONGEST);
    r.duration("REDIS_PIPELINE_WINDOW", Duration::ZERO, any);
    r.number("REDIS_PIPELINE_LIMIT", 0u64, 0, u64::MAX);
    r.number("REDIS_CLUSTER_PIPELINE_PARALLELISM", 1u64, 0, u64::MAX);
    r.duration(
        "REDIS_STARTUP_INITIAL_INTERVAL",
        Duration::from_secs(1),
        any,
    );
    r.duration("REDIS_STARTUP_MAX_INTERVAL", Duration::from_secs(30), any);
    r.duration("REDIS_STARTUP_MAX_ELAPSED_TIME", Duration::ZERO, any);
    let pool_size = r.number("REDIS_POOL_SIZE", 10u32, 1, 10_000);
    let target = r.or(target(r), RedisTarget::Unix(String::new()));
    let tls = r.or(tls(r), None);
    if tls.is_some() && matches!(target, RedisTarget::Unix(_)) {
        r.report(err(
            "REDIS_TLS",
            "true",
            "false with REDIS_SOCKET_TYPE=unix (TLS needs REDIS_SOCKET_TYPE=tcp)",
        ));
    }
    // Accepted and validated: readiness always follows Redis (a PING every 500 ms; NOT_SERVING
    // while no connection answers), which is what `true` asks of the reference.
    r.bool("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false);
    RedisSettings {
        per_second: None,
        stop_increment_when_over_limit: r.bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false),
        target,
        tls,
        auth: RedisAuth::parse(&r.string("REDIS_AUTH", "")),
        pool_size,
        timeout: r.duration("REDIS_TIMEOUT", Duration::from_secs(10), STORE_TIMEOUT),
        jitter_max_seconds: jitter(r),
        key_layout: key_layout(r),
    }
}

/// `REDIS_KEY_LAYOUT`.
fn key_layout(r: &Reader<'_>) -> KeyLayout {
    match r.string("REDIS_KEY_LAYOUT", "reference").as_str() {
        "reference" => KeyLayout::Reference,
        "turnstile" => KeyLayout::Turnstile,
        other => {
            let problem = err("REDIS_KEY_LAYOUT", other, "expected reference or turnstile");
            r.or(Err(problem), KeyLayout::Reference)
        }
    }
}

fn tls(r: &Reader<'_>) -> Result<Option<RedisTls>, SettingsError> {
    if !r.bool("REDIS_TLS", false) {
        return Ok(None);
    }
    let path = |name: &str| {
        Some(r.string(name, ""))
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
    };
    let var = |name| (name, r.non_empty(name));
    let client = r.identity(var("REDIS_TLS_CLIENT_CERT"), var("REDIS_TLS_CLIENT_KEY"));
    Ok(Some(RedisTls {
        ca: path("REDIS_TLS_CACERT"),
        client,
        skip_hostname_verification: r.bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false),
    }))
}

fn target(r: &Reader<'_>) -> Result<RedisTarget, SettingsError> {
    let url = r.string("REDIS_URL", "/var/run/nutcracker/ratelimit.sock");
    let socket = r.string("REDIS_SOCKET_TYPE", "unix").to_ascii_lowercase();
    let list: Vec<String> = url
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let kind = r.string("REDIS_TYPE", "single").to_ascii_lowercase();
    match kind.as_str() {
        "single" => match socket.as_str() {
            "tcp" if list.len() == 1 => {
                address::host_port("REDIS_URL", &url, url.trim())?;
                Ok(RedisTarget::Tcp(url.trim().to_owned()))
            }
            "unix" if url.trim().is_empty() => Err(err(
                "REDIS_URL",
                &url,
                "a unix socket path (REDIS_SOCKET_TYPE=unix)",
            )),
            "unix" => Ok(RedisTarget::Unix(url)),
            "tcp" => Err(err(
                "REDIS_URL",
                &url,
                "REDIS_TYPE=single takes one host:port",
            )),
            other => Err(err("REDIS_SOCKET_TYPE", other, "expected tcp or unix")),
        },
        "cluster" if socket == "tcp" && !list.is_empty() => Ok(RedisTarget::Cluster(
            address::host_ports("REDIS_URL", &url)?,
        )),
        "sentinel" if socket == "tcp" && list.len() >= 2 => {
            let (master, sentinels) = url.split_once(',').unwrap_or((&url, ""));
            Ok(RedisTarget::Sentinel {
                master: master.trim().to_owned(),
                sentinels: address::host_ports("REDIS_URL", sentinels).map_err(|mut e| {
                    e.value = url.clone();
                    e
                })?,
                sentinel_auth: RedisAuth::parse(&r.string("REDIS_SENTINEL_AUTH", "")),
            })
        }
        "cluster" | "sentinel" if socket != "tcp" => Err(err(
            "REDIS_SOCKET_TYPE",
            &socket,
            format!("REDIS_TYPE={kind} needs tcp"),
        )),
        "cluster" => Err(err(
            "REDIS_URL",
            &url,
            "expected host:port,host:port,... (seed nodes)",
        )),
        "sentinel" => Err(err(
            "REDIS_URL",
            &url,
            "expected master_name,host:port,host:port,... (the sentinels)",
        )),
        other => Err(err(
            "REDIS_TYPE",
            other,
            "expected single, sentinel or cluster",
        )),
    }
}

#[cfg(test)]
mod tests;
