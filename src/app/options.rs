//! The settings turned into the options of each part the service is wired from: the rule
//! loader, the first load, the gRPC server and the limiter.
//!
//! Must not touch: listeners, tasks, serving (that is `app`'s wiring).

use std::sync::Arc;

use super::AppError;
use crate::config::{self, LoadOptions, StoreBounds};
use crate::metrics::Metrics;
use crate::server::ServerOptions;
use crate::settings::{Backend, ConfigSource, Settings};

pub(super) fn load_options(settings: &Settings) -> LoadOptions {
    LoadOptions {
        ignore_dotfiles: settings.ignore_dotfiles,
        merge_domains: settings.merge_domains,
        store: store_bounds(
            matches!(settings.backend, Backend::Redis(_)),
            matches!(&settings.backend, Backend::Memcached(m)
                if m.client.transport == crate::settings::MemcachedTransport::Classic),
        ),
    }
}

/// What the counter store counts exactly (Redis: token buckets within its scripts' exact
/// range; memory and memcached compute in 128-bit integers, without a bound; memcached's
/// classic commands: windows only).
pub(super) fn store_bounds(redis: bool, memcached_classic: bool) -> StoreBounds {
    if redis {
        StoreBounds {
            name: "BACKEND_TYPE=redis",
            bucket_capacity_period_ms: Some(crate::storage::redis::TOKEN_BUCKET_MAX_SCALE),
            windows_only: false,
        }
    } else if memcached_classic {
        StoreBounds {
            name: "MEMCACHE_CLASSIC_PROTOCOL=true",
            bucket_capacity_period_ms: None,
            windows_only: true,
        }
    } else {
        StoreBounds::default()
    }
}

/// The first load (`None` when forced to start without a valid configuration).
pub(super) fn initial_load(
    settings: &Settings,
    metrics: &Metrics,
) -> Result<Option<config::Loaded>, AppError> {
    if matches!(settings.config_source, ConfigSource::Xds(_)) {
        // Rules arrive over the stream; files are not read.
        return Ok(None);
    }
    match config::load_dir(&settings.config_dir, load_options(settings)) {
        Ok(loaded) => {
            metrics.config_loaded(true);
            Ok(Some(loaded))
        }
        Err(errors) if settings.force_start_without_config => {
            tracing::error!("starting without configuration: {errors}");
            metrics.config_loaded(false);
            Ok(None)
        }
        Err(errors) => Err(errors.into()),
    }
}

pub(super) fn server_options(
    s: &Settings,
    tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    open_connections: Arc<crate::metrics::OpenConnections>,
    admission: Arc<crate::metrics::AdmissionReadings>,
    peers: Arc<crate::peers::Peers>,
) -> ServerOptions {
    ServerOptions {
        peers,
        limits: s.grpc_limits,
        max_connection_age: Some(s.max_connection_age),
        tls,
        open_connections,
        admission,
        rlqs: s.rlqs,
    }
}
