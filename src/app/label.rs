//! How each counter store is named in traces: its span name, `db.system` and the servers the
//! settings give it (the configured addresses, never credentials).

use super::Store;
use crate::metrics::StoreLabel;
use crate::settings::{Backend, MemcachedServers, RedisSettings, Settings};

/// The label of `store` in `role` (`main`, `per_second`, `durable`).
pub(super) fn store_label(store: &Store, settings: &Settings, role: &'static str) -> StoreLabel {
    let (span, system) = match store {
        Store::Memory(_) => ("Memory Store Execution", "memory"),
        Store::Memcached(_) => ("Memcached Fetch Execution", "memcached"),
        Store::Redis(_) => ("Redis Pipeline Execution", "redis"),
        Store::Postgres(_) => ("PostgreSQL Execution", "postgresql"),
    };
    let named = match (store, &settings.backend) {
        (Store::Memory(_), Backend::Memory { .. })
        | (Store::Memcached(_), Backend::Memcached(_))
        | (Store::Redis(_), Backend::Redis(_))
        | (Store::Postgres(_), Backend::Postgres(_)) => true,
        _ => role != "main",
    };
    let servers = match (role, &settings.backend) {
        // A main store given to the app already built (`Dependencies::store`).
        _ if !named => "given at build".to_owned(),
        ("durable", _) => settings
            .postgres_route
            .as_ref()
            .map(|r| postgres_hosts(&r.settings.config))
            .unwrap_or_default(),
        ("per_second", Backend::Redis(redis)) => redis
            .per_second
            .as_deref()
            .map(redis_servers)
            .unwrap_or_default(),
        (_, Backend::Memory { .. }) => "in-process".to_owned(),
        (_, Backend::Memcached(m)) => match &m.servers {
            MemcachedServers::List(list) => list.join(","),
            MemcachedServers::Srv { name, .. } => format!("SRV {name}"),
        },
        (_, Backend::Redis(redis)) => redis_servers(redis),
        (_, Backend::Postgres(pg)) => postgres_hosts(&pg.config),
    };
    StoreLabel {
        span,
        system,
        servers,
        role,
    }
}

fn redis_servers(redis: &RedisSettings) -> String {
    redis.target.addresses()
}

fn postgres_hosts(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match host {
                tokio_postgres::config::Host::Tcp(h) => format!("{h}:{port}"),
                tokio_postgres::config::Host::Unix(p) => format!("{}:{port}", p.display()),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}
