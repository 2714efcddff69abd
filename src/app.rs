//! The process, start to finish: load the rules, build the counter store the settings name,
//! bind every listener, serve until SIGTERM/SIGINT, then drain: health turns NOT_SERVING at
//! once, calls are still answered for the drain period, then listeners close and in-flight
//! calls finish. Also the `check-config` command. Each failure maps to a distinct exit code.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::clock::{Clock, SystemClock};
use crate::config::{self, ConfigErrors, LoadOptions};
use crate::grpc::{HeaderNames, ResponseSettings, ServiceState};
use crate::health::Health;
use crate::limiter::{Limiter, LimiterSettings};
use crate::metrics::Metrics;
use crate::reload::{Reloader, RulesHandle};
use crate::server::{GrpcListener, ServerOptions};
use crate::settings::{Backend, Settings};
use crate::storage::CounterStore;
use crate::storage::memcached::srv::Resolver;
use crate::storage::memcached::{MemcachedClient, MemcachedOptions, MemcachedStore};
use crate::storage::memory::MemoryStore;

/// Why the process stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The rule files are invalid (exit 78, `EX_CONFIG`).
    #[error("invalid rate limit configuration:\n{0}")]
    Config(#[from] ConfigErrors),
    /// A listener could not be bound (exit 1).
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The counter store could not be set up (exit 1).
    #[error("setting up the counter store: {0}")]
    Storage(String),
    /// The TLS files cannot be used (exit 1).
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// A setting names something this build does not support (exit 64).
    #[error("{0}")]
    Unsupported(String),
    /// The server failed (exit 1).
    #[error(transparent)]
    Serve(#[from] crate::server::ServeError),
}

impl AppError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            AppError::Config(_) => 78,
            AppError::Unsupported(_) => 64,
            _ => 1,
        }
    }
}

fn load_options(settings: &Settings) -> LoadOptions {
    LoadOptions {
        ignore_dotfiles: settings.ignore_dotfiles,
        merge_domains: settings.merge_domains,
    }
}

/// Runs the service until SIGTERM or SIGINT (and the drain after it).
pub async fn run(settings: Settings) -> Result<(), AppError> {
    let metrics = Arc::new(Metrics::new(
        settings.stats_max_keys,
        settings.near_limit_ratio,
        &settings.extra_tags,
    ));
    let rules = match config::load_dir(&settings.config_dir, load_options(&settings)) {
        Ok(loaded) => {
            crate::reload::announce(&loaded);
            metrics.config_loaded(true);
            Some(loaded.rules)
        }
        Err(errors) if settings.force_start_without_config => {
            tracing::error!("starting without configuration: {errors}");
            metrics.config_loaded(false);
            None
        }
        Err(errors) => return Err(errors.into()),
    };
    if let Some(addr) = &settings.statsd {
        crate::metrics::statsd::spawn(Arc::clone(&metrics), addr, settings.stats_flush)
            .map_err(|e| AppError::Unsupported(e.to_string()))?;
    }
    let health = Arc::new(Health::new(settings.healthy_needs_config, rules.is_some()));
    let rules = Arc::new(RulesHandle::new(rules));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let parts = Parts {
        settings,
        rules,
        metrics,
        health,
        clock,
    };
    match parts.settings.backend {
        Backend::Memory => {
            let store = Arc::new(MemoryStore::new(
                parts.settings.memory_max_keys,
                Arc::clone(&parts.clock),
            ));
            let sweeper = Arc::clone(&store);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(5));
                loop {
                    tick.tick().await;
                    sweeper.sweep();
                }
            });
            parts.serve(store).await
        }
        Backend::Memcached => {
            let s = &parts.settings;
            let options = MemcachedOptions {
                servers: s.memcache_servers.clone(),
                pool_size: s.memcache_pool_size,
                timeout: s.memcache_timeout,
                jitter_max_seconds: s.expiration_jitter,
                classic_protocol: s.memcache_classic,
                client: if s.memcache_pipelined {
                    MemcachedClient::Pipelined
                } else {
                    MemcachedClient::Pool
                },
            };
            let store = if s.memcache_srv.is_empty() {
                MemcachedStore::new(options, Arc::clone(&parts.clock))
            } else {
                let mut resolver = Resolver::system();
                if let Some(server) = s.memcache_srv_resolver {
                    resolver.server = server;
                }
                let store = MemcachedStore::discover(
                    &s.memcache_srv,
                    &resolver,
                    options,
                    Arc::clone(&parts.clock),
                )
                .await;
                if let (Ok(store), true) = (&store, !s.memcache_srv_refresh.is_zero()) {
                    store.spawn_refresh(s.memcache_srv.clone(), resolver, s.memcache_srv_refresh);
                }
                store
            }
            .map_err(|e| AppError::Storage(e.to_string()))?;
            parts.serve(store).await
        }
    }
}

struct Parts {
    settings: Settings,
    rules: Arc<RulesHandle>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    clock: Arc<dyn Clock>,
}

async fn bind(addr: &str) -> Result<TcpListener, AppError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| AppError::Bind {
            addr: addr.to_owned(),
            source,
        })
}

impl Parts {
    async fn serve<S: CounterStore>(self, store: S) -> Result<(), AppError> {
        let s = &self.settings;
        let limiter_settings = LimiterSettings {
            key_prefix: s.key_prefix.clone(),
            shadow_mode: s.shadow_mode,
            quota_mode: s.quota_mode,
            fail_open: s.fail_open,
            local_cache_bytes: s.local_cache_bytes,
        };
        let [limit, remaining, reset] = s.header_names.clone();
        let response = ResponseSettings {
            headers: s.response_headers.then_some(HeaderNames {
                limit,
                remaining,
                reset,
            }),
            dynamic_metadata: s.dynamic_metadata,
        };
        let state = Arc::new(ServiceState {
            rules: Arc::clone(&self.rules),
            limiter: Limiter::new(
                store,
                Arc::clone(&self.clock),
                limiter_settings,
                Arc::clone(&self.metrics),
            ),
            response,
            health: Arc::clone(&self.health),
        });

        let (grpc_addr, grpc) = match &s.grpc_uds {
            None => {
                let addr = format!("{}:{}", s.grpc_host, s.grpc_port);
                let listener = bind(&addr).await?;
                (addr, GrpcListener::Tcp(listener))
            }
            Some(path) => {
                if s.tls.is_some() {
                    return Err(AppError::Unsupported(
                        "GRPC_UDS cannot be combined with GRPC_SERVER_USE_TLS".into(),
                    ));
                }
                // A socket file left by an earlier process would make the bind fail.
                let _ = std::fs::remove_file(path);
                let addr = format!("unix:{}", path.display());
                let listener =
                    tokio::net::UnixListener::bind(path).map_err(|source| AppError::Bind {
                        addr: addr.clone(),
                        source,
                    })?;
                (addr, GrpcListener::Unix(listener))
            }
        };
        let http = bind(&s.http_addr).await?;
        let debug = bind(&s.debug_addr).await?;
        let prometheus = match &s.prometheus {
            Some((addr, path)) => Some((bind(addr).await?, path.clone())),
            None => None,
        };
        tracing::warn!(grpc = %grpc_addr, http = %s.http_addr, debug = %s.debug_addr, "serving");

        // Stop: the signal flips health at once; listeners close after the drain period.
        let (stop_tx, stop_rx) = watch::channel(false);
        let drain = s.drain;
        let health = Arc::clone(&self.health);
        tokio::spawn(async move {
            shutdown_signal().await;
            health.begin_shutdown();
            tracing::warn!(
                ?drain,
                "shutting down: health is NOT_SERVING; answering calls during the drain period"
            );
            tokio::time::sleep(drain).await;
            let _ = stop_tx.send(true);
        });
        let stopped = move || {
            let mut rx = stop_rx.clone();
            async move {
                let _ = rx.wait_for(|stop| *stop).await;
            }
        };

        let reloader = Reloader {
            handle: Arc::clone(&self.rules),
            load: {
                let (dir, options) = (s.config_dir.clone(), load_options(s));
                Box::new(move || config::load_dir(&dir, options))
            },
            dir: s.config_dir.clone(),
            metrics: Arc::clone(&self.metrics),
            health: Arc::clone(&self.health),
        };
        let watcher = tokio::spawn(reloader.run());

        let mut http_tasks = vec![
            tokio::spawn(crate::http::serve(
                http,
                crate::http::api_router(Arc::clone(&state)),
                stopped(),
            )),
            tokio::spawn(crate::http::serve(
                debug,
                crate::http::debug_router(Arc::clone(&state)),
                stopped(),
            )),
        ];
        if let Some((listener, path)) = prometheus {
            let router = crate::http::prometheus_router(&path, Arc::clone(&state));
            http_tasks.push(tokio::spawn(crate::http::serve(
                listener,
                router,
                stopped(),
            )));
        }
        let tls = match &s.tls {
            None => None,
            Some(files) => {
                let (config, cert) = crate::tls::server_config(files)?;
                cert.spawn_watch();
                Some(config)
            }
        };
        let options = ServerOptions {
            max_connection_age: Some(s.max_connection_age),
            tls,
        };
        let served = crate::server::serve(grpc, state, options, stopped()).await;
        watcher.abort();
        for task in http_tasks {
            if let Ok(Err(e)) = task.await {
                tracing::error!(error = %e, "HTTP listener failed");
            }
        }
        tracing::warn!("stopped");
        served.map_err(AppError::from)
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot listen for signals; stop the process with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
}

/// `turnstile check-config DIR`: prints `all rate limit configs ok` or every error.
pub fn check_config(dir: &std::path::Path, options: LoadOptions) -> Result<String, ConfigErrors> {
    config::load_dir(dir, options).map(|loaded| {
        let mut out = String::new();
        for warning in loaded.warnings {
            out.push_str(&format!("warning: {warning}\n"));
        }
        out.push_str("all rate limit configs ok");
        out
    })
}
