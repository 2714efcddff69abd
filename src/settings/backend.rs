//! The counter store's settings (`BACKEND_TYPE` and the settings only its backend reads), as
//! types that admit only meaningful combinations.

use std::num::NonZeroUsize;
use std::time::Duration;

use super::SettingsError;
use super::reader::{LONGEST, Reader, Span, err};

/// Which counter store to use (`BACKEND_TYPE`), with the settings that only it reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Backend {
    /// In-process (`memory`, the default).
    Memory {
        /// `MEMORY_MAX_KEYS`: the bound on live counters.
        max_keys: usize,
    },
    /// memcached (`memcache`).
    Memcached(MemcachedSettings),
    /// Redis or Valkey (`redis`).
    Redis(super::redis::RedisSettings),
    /// PostgreSQL (`postgres`): every limit durable.
    Postgres(Box<super::postgres::PostgresSettings>),
}

/// The memcached backend's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct MemcachedSettings {
    /// Where the servers are.
    pub servers: MemcachedServers,
    /// How each server is talked to: the store's own options.
    pub client: MemcachedClient,
    /// `MEMCACHE_TLS` and its files: TLS to every server (pipelined transport only).
    pub tls: Option<MemcachedTls>,
}

/// `MEMCACHE_TLS=true` with `MEMCACHE_TLS_*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemcachedTls {
    /// `MEMCACHE_TLS_CACERT`: the CA the servers' certificates chain to (the system's roots
    /// when unset).
    pub ca: Option<std::path::PathBuf>,
    /// `MEMCACHE_TLS_CLIENT_CERT` and `MEMCACHE_TLS_CLIENT_KEY`: a client certificate (both or
    /// neither).
    pub client: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// `MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION`: the chain is verified, the name is not.
    pub skip_hostname_verification: bool,
}

/// `MEMCACHE_HOST_PORT` or `MEMCACHE_SRV`: exactly one of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemcachedServers {
    /// `MEMCACHE_HOST_PORT` split on commas (never empty).
    List(Vec<String>),
    /// `MEMCACHE_SRV`, re-resolved every `refresh` (`MEMCACHE_SRV_REFRESH`; `None` = never)
    /// through `resolver` (`MEMCACHE_SRV_RESOLVER`; `None` = the system's).
    Srv {
        /// The SRV name.
        name: String,
        /// How often to look it up again.
        refresh: Option<Duration>,
        /// The DNS server to ask.
        resolver: Option<std::net::SocketAddr>,
    },
}

/// How commands reach memcached (`MEMCACHE_CLIENT`, `MEMCACHE_CLASSIC_PROTOCOL`): the store's
/// own type, built here directly.
pub use crate::storage::memcached::{MemcachedClient, MemcachedTransport};

/// `BACKEND_TYPE`, lower-cased. Unset, it is `memory`, unless `REDIS_URL` is set: the
/// reference's default is `redis`, and deployments written for it (Envoy Gateway's, the
/// reference's compose files) name only `REDIS_URL`; counting those in process would split
/// every limit per replica.
pub fn backend_type(env: &dyn Fn(&str) -> Option<String>) -> String {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    match (set("BACKEND_TYPE"), set("REDIS_URL")) {
        (Some(kind), _) => kind.trim().to_ascii_lowercase(),
        (None, Some(_)) => "redis".into(),
        (None, None) => "memory".into(),
    }
}

/// Whether `MEMCACHE_CLASSIC_PROTOCOL` is set true (as Go's `strconv.ParseBool` reads it),
/// for `check-config`, which reads no other setting.
pub fn memcached_classic_protocol(env: &dyn Fn(&str) -> Option<String>) -> bool {
    env("MEMCACHE_CLASSIC_PROTOCOL")
        .is_some_and(|v| matches!(v.trim(), "1" | "t" | "T" | "TRUE" | "true" | "True"))
}

/// `MEMORY_MAX_KEYS`'s default.
pub(super) const MEMORY_MAX_KEYS: usize = 1_000_000;

pub(super) fn backend(r: &Reader<'_>) -> Result<Backend, SettingsError> {
    let kind = backend_type(r.env);
    match kind.as_str() {
        "" | "memory" => Ok(Backend::Memory {
            max_keys: r.number("MEMORY_MAX_KEYS", MEMORY_MAX_KEYS, 1, 1_000_000_000),
        }),
        "memcache" | "memcached" => Ok(Backend::Memcached(memcached(r))),
        "redis" => Ok(Backend::Redis(super::redis::redis(r))),
        "postgres" | "postgresql" => Ok(Backend::Postgres(Box::new(super::postgres::postgres(r)?))),
        other => Err(err(
            "BACKEND_TYPE",
            other,
            "expected memory, memcache, redis or postgres",
        )),
    }
}

fn memcached(r: &Reader<'_>) -> MemcachedSettings {
    let text = r.string("MEMCACHE_HOST_PORT", "");
    let list = if text.trim().is_empty() {
        Vec::new()
    } else {
        r.or(
            super::address::host_ports("MEMCACHE_HOST_PORT", &text),
            vec![text.clone()],
        )
    };
    let srv = r.string("MEMCACHE_SRV", "");
    let servers = match (list.is_empty(), srv.is_empty()) {
        (false, true) => MemcachedServers::List(list),
        (true, false) => MemcachedServers::Srv {
            name: srv,
            refresh: Some(r.duration(
                "MEMCACHE_SRV_REFRESH",
                Duration::ZERO,
                Span::off_or(Duration::from_secs(1), LONGEST),
            ))
            .filter(|d| !d.is_zero()),
            resolver: match r.string("MEMCACHE_SRV_RESOLVER", "") {
                v if v.is_empty() => None,
                v => r.or(
                    v.parse()
                        .map(Some)
                        .map_err(|_| err("MEMCACHE_SRV_RESOLVER", &v, "expected ip:port")),
                    None,
                ),
            },
        },
        _ => {
            r.report(err(
                "MEMCACHE_HOST_PORT",
                &list.join(","),
                "BACKEND_TYPE=memcache needs exactly one of MEMCACHE_HOST_PORT and MEMCACHE_SRV",
            ));
            MemcachedServers::List(list)
        }
    };
    let transport = transport(r);
    let client = MemcachedClient {
        transport,
        pool_size: r.number("MEMCACHE_MAX_IDLE_CONNS", 8u32, 1, 10_000),
        pipelined_connections: r
            .non_empty("MEMCACHE_PIPELINED_CONNECTIONS")
            .and_then(|_| NonZeroUsize::new(r.number("MEMCACHE_PIPELINED_CONNECTIONS", 1, 1, 256))),
        timeout: r.duration(
            "MEMCACHE_TIMEOUT",
            Duration::from_millis(100),
            super::reader::STORE_TIMEOUT,
        ),
        jitter_max_seconds: super::reader::jitter(r),
    };
    MemcachedSettings {
        servers,
        client,
        tls: memcached_tls(r, transport),
    }
}

/// `MEMCACHE_TLS` and its files; the pooled transports (`MEMCACHE_CLIENT=pool`,
/// `MEMCACHE_CLASSIC_PROTOCOL`) have no TLS, and say so.
fn memcached_tls(r: &Reader<'_>, transport: MemcachedTransport) -> Option<MemcachedTls> {
    if !r.bool("MEMCACHE_TLS", false) {
        return None;
    }
    if transport != MemcachedTransport::Pipelined {
        let why =
            "TLS is spoken by MEMCACHE_CLIENT=pipelined (the default) only, with meta commands";
        r.report(err("MEMCACHE_TLS", "true", why));
    }
    let path = |name: &str| r.non_empty(name).map(std::path::PathBuf::from);
    let var = |name| (name, r.non_empty(name));
    let client = r.identity(
        var("MEMCACHE_TLS_CLIENT_CERT"),
        var("MEMCACHE_TLS_CLIENT_KEY"),
    );
    Some(MemcachedTls {
        ca: path("MEMCACHE_TLS_CACERT"),
        client,
        skip_hostname_verification: r.bool("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", false),
    })
}

/// `MEMCACHE_CLASSIC_PROTOCOL` and `MEMCACHE_CLIENT`.
fn transport(r: &Reader<'_>) -> MemcachedTransport {
    let client = r.string("MEMCACHE_CLIENT", "pipelined");
    match (r.bool("MEMCACHE_CLASSIC_PROTOCOL", false), client.as_str()) {
        (true, _) => MemcachedTransport::Classic,
        (false, "pipelined") => MemcachedTransport::Pipelined,
        (false, "pool") => MemcachedTransport::Pool,
        (false, other) => {
            let problem = err("MEMCACHE_CLIENT", other, "expected pipelined or pool");
            r.or(Err(problem), MemcachedTransport::Pipelined)
        }
    }
}
