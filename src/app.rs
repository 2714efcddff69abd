//! The process, start to finish: load the rules, build the counter store the settings name,
//! bind the gRPC listener, serve until SIGTERM/SIGINT. Also the `check-config` command. Each
//! failure maps to a distinct exit code.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::clock::{Clock, SystemClock};
use crate::config::{self, ConfigErrors, LoadOptions};
use crate::grpc::{HeaderNames, ResponseSettings, ServiceState};
use crate::limiter::{Limiter, LimiterSettings};
use crate::reload::RulesHandle;
use crate::settings::{Backend, Settings};
use crate::storage::CounterStore;
use crate::storage::memcached::{MemcachedOptions, MemcachedStore};
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
    /// The server failed (exit 1).
    #[error(transparent)]
    Serve(#[from] crate::server::ServeError),
}

impl AppError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            AppError::Config(_) => 78,
            _ => 1,
        }
    }
}

/// Loads the rule directory as the settings say.
pub fn load_rules(settings: &Settings) -> Result<config::Loaded, ConfigErrors> {
    let options = LoadOptions {
        ignore_dotfiles: settings.ignore_dotfiles,
        merge_domains: settings.merge_domains,
    };
    config::load_dir(&settings.config_dir, options)
}

/// Runs the service until SIGTERM or SIGINT.
pub async fn run(settings: Settings) -> Result<(), AppError> {
    let rules = match load_rules(&settings) {
        Ok(loaded) => {
            for warning in &loaded.warnings {
                tracing::warn!("{warning}");
            }
            tracing::info!(
                files = loaded.files,
                domains = loaded.rules.domain_count(),
                "rate limit configuration loaded"
            );
            Some(loaded.rules)
        }
        Err(errors) if settings.force_start_without_config => {
            tracing::error!("starting without configuration: {errors}");
            None
        }
        Err(errors) => return Err(errors.into()),
    };
    let rules = Arc::new(RulesHandle::new(rules));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    match settings.backend {
        Backend::Memory => {
            let store = Arc::new(MemoryStore::new(settings.memory_max_keys, clock.clone()));
            let sweeper = Arc::clone(&store);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(5));
                loop {
                    tick.tick().await;
                    sweeper.sweep();
                }
            });
            serve_with(settings, rules, store, clock).await
        }
        Backend::Memcached => {
            let options = MemcachedOptions {
                servers: settings.memcache_servers.clone(),
                pool_size: settings.memcache_pool_size,
                timeout: settings.memcache_timeout,
                jitter_max_seconds: settings.expiration_jitter,
                classic_protocol: settings.memcache_classic,
            };
            let store = MemcachedStore::new(options, clock.clone())
                .map_err(|e| AppError::Storage(e.to_string()))?;
            serve_with(settings, rules, store, clock).await
        }
    }
}

async fn serve_with<S: CounterStore>(
    settings: Settings,
    rules: Arc<RulesHandle>,
    store: S,
    clock: Arc<dyn Clock>,
) -> Result<(), AppError> {
    let limiter_settings = LimiterSettings {
        key_prefix: settings.key_prefix.clone(),
        shadow_mode: settings.shadow_mode,
        quota_mode: settings.quota_mode,
        fail_open: settings.fail_open,
    };
    let [limit, remaining, reset] = settings.header_names.clone();
    let response = ResponseSettings {
        headers: settings.response_headers.then_some(HeaderNames {
            limit,
            remaining,
            reset,
        }),
        dynamic_metadata: settings.dynamic_metadata,
    };
    let state = Arc::new(ServiceState {
        rules,
        limiter: Limiter::new(store, clock, limiter_settings),
        response,
    });
    let addr = format!("{}:{}", settings.grpc_host, settings.grpc_port);
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|source| AppError::Bind {
            addr: addr.clone(),
            source,
        })?;
    tracing::warn!(%addr, "serving gRPC");
    crate::server::serve(listener, state, shutdown_signal()).await?;
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
    tracing::warn!("shutting down");
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
