//! DNS SRV discovery of memcached servers (`MEMCACHE_SRV`, e.g. a Kubernetes headless
//! Service's `_memcache._tcp.memcached.ns.svc.cluster.local`), through hickory-resolver: every
//! `nameserver` of `/etc/resolv.conf` in turn, its `search` domains and `ndots`, UDP with
//! retries and random query ids, TCP when an answer is truncated. Answers are not cached here,
//! so every refresh asks again and a changed Service is seen at the next refresh. Targets come
//! back as `host:port`, sorted, so every replica builds the same list. Also where a server's
//! `host:port` becomes the address a transport connects to.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{
    ConnectionConfig, NameServerConfig, ProtocolConfig, ResolverConfig, ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;

/// How long one question waits for its answer (hickory retries within `ATTEMPTS`).
const TIMEOUT: Duration = Duration::from_secs(2);
const ATTEMPTS: usize = 2;

/// Why a lookup (or setting up the resolver) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SRV lookup of {name}: {problem}")]
pub struct SrvError {
    /// The name looked up.
    pub name: String,
    /// What went wrong.
    pub problem: String,
}

/// A DNS resolver for SRV questions.
#[derive(Debug, Clone)]
pub struct Resolver {
    inner: TokioResolver,
}

fn options(mut opts: ResolverOpts) -> ResolverOpts {
    opts.cache_size = 0;
    opts.timeout = TIMEOUT;
    opts.attempts = ATTEMPTS;
    opts
}

impl Resolver {
    /// The system's resolver configuration (`/etc/resolv.conf`).
    pub fn system() -> Result<Resolver, SrvError> {
        let problem = |e: &dyn std::fmt::Display| SrvError {
            name: "/etc/resolv.conf".into(),
            problem: e.to_string(),
        };
        let mut builder = TokioResolver::builder_tokio().map_err(|e| problem(&e))?;
        let opts = options(builder.options_mut().clone());
        let inner = builder
            .with_options(opts)
            .build()
            .map_err(|e| problem(&e))?;
        Ok(Resolver { inner })
    }

    /// A resolver asking only `server` (`MEMCACHE_SRV_RESOLVER`), over UDP and TCP.
    pub fn at(server: SocketAddr) -> Result<Resolver, SrvError> {
        let connection = |protocol| {
            let mut c = ConnectionConfig::new(protocol);
            c.port = server.port();
            c
        };
        let mut name_server = NameServerConfig::udp_and_tcp(server.ip());
        name_server.connections = vec![
            connection(ProtocolConfig::Udp),
            connection(ProtocolConfig::Tcp),
        ];
        let config = ResolverConfig::from_name_servers(vec![name_server]);
        let inner = TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
            .with_options(options(ResolverOpts::default()))
            .build()
            .map_err(|e| SrvError {
                name: server.to_string(),
                problem: e.to_string(),
            })?;
        Ok(Resolver { inner })
    }

    /// The `host:port` targets of `name`, sorted.
    pub async fn lookup(&self, name: &str) -> Result<Vec<String>, SrvError> {
        let err = |problem: String| SrvError {
            name: name.to_owned(),
            problem,
        };
        let answer = self
            .inner
            .srv_lookup(name)
            .await
            .map_err(|e| err(e.to_string()))?;
        let mut targets: Vec<String> = answer
            .answers()
            .iter()
            .filter_map(|record| match &record.data {
                RData::SRV(srv) => Some(format!(
                    "{}:{}",
                    srv.target.to_utf8().trim_end_matches('.'),
                    srv.port
                )),
                _ => None,
            })
            .collect();
        if targets.is_empty() {
            return Err(err("no SRV records".into()));
        }
        targets.sort();
        targets.dedup();
        Ok(targets)
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
