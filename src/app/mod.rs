//! The service as one value: [`App::build`] loads the rules, builds the counter store the
//! settings name, binds every listener and prepares the background tasks; [`App::run_until`]
//! serves until its shutdown future resolves, then drains: health turns NOT_SERVING at once,
//! calls are still answered for the drain period (cut short by the `hurry` future), then the
//! listeners close, in-flight calls finish and every background task (sweeper, reload watcher,
//! statsd sink, TLS and SRV refresh) stops with them. The binary runs it with signals; tests run
//! it in process on port 0 and learn the bound addresses from [`App::addresses`].
//!
//! Owns wiring only: no decision, protocol or storage logic lives here.

mod check;
mod descriptors;
mod error;
mod label;
mod listeners;
mod migrate;
mod options;
pub mod runtime;
mod signals;
mod source;
mod store;
mod wiring;

pub use check::{check_config, check_config_cli};
pub use error::AppError;
pub use listeners::Addresses;
use listeners::{Listeners, bind_all};
pub use migrate::{migrate_cli, migrate_main};
use options::{initial_load, server_options};

pub use store::Store;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::clock::{Clock, SystemClock};
use crate::health::Health;
use crate::metrics::mogrify::Mogrifiers;
use crate::metrics::{Instrumented, Metrics};
use crate::reload::RulesHandle;
use crate::rls::ServiceState;
use crate::server::ServerOptions;
use crate::settings::Settings;
use crate::telemetry::LIFECYCLE;
use crate::traces::Tracer;

/// The state every listener serves.
pub type AppState = ServiceState<Instrumented<Store>>;

/// The whole service, built and bound, not yet serving.
pub struct App {
    state: Arc<AppState>,
    listeners: Listeners,
    addresses: Addresses,
    server: ServerOptions,
    drain: Duration,
    tasks: JoinSet<()>,
    admin_token: crate::http::AdminToken,
    /// Where the rules come from, for the status page.
    source: crate::http::Source,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("addresses", &self.addresses)
            .finish_non_exhaustive()
    }
}

/// What the app is built with besides its settings: what a test replaces to run the
/// production wiring under its own control.
#[derive(Debug, Clone)]
pub struct Dependencies {
    /// Where the limiter and the stores read time (a `ManualClock` in tests).
    pub clock: Arc<dyn Clock>,
    /// The main counter store, already built (a test's memcached on its own port, a memory
    /// store of a chosen size); `None` builds it from `BACKEND_TYPE` and its settings.
    pub store: Option<Store>,
}

impl Default for Dependencies {
    /// The system clock; the store the settings name.
    fn default() -> Self {
        Dependencies {
            clock: Arc::new(SystemClock),
            store: None,
        }
    }
}

impl App {
    /// Builds the service from `settings`: rules, store, listeners, background tasks. Must be
    /// called inside a Tokio runtime; nothing is served until [`App::run_until`].
    pub async fn build(settings: Settings) -> Result<App, AppError> {
        App::build_with(settings, Dependencies::default()).await
    }

    /// [`App::build`] with its dependencies given: the production wiring with time a test can
    /// move (a `ManualClock`) and, when given, a store the test built.
    pub async fn build_with(settings: Settings, deps: Dependencies) -> Result<App, AppError> {
        let Dependencies { clock, store } = deps;
        let mut tasks = JoinSet::new();
        let metrics = Arc::new(metrics(&settings)?);
        let initial = initial_load(&settings, &metrics)?;
        sinks(&settings, &metrics, &mut tasks)?;
        tasks.spawn(sample_history(Arc::clone(&metrics)));
        let tracer = match &settings.tracing {
            None => None,
            Some(tracing) => {
                let (tracer, export) = Tracer::start(tracing, metrics.span_counts())?;
                tasks.spawn(export);
                Some(Arc::new(tracer))
            }
        };
        let health = Arc::new(Health::new(
            settings.healthy_needs_config,
            initial.is_some(),
        ));
        if let Some(loaded) = &initial {
            crate::reload::announce(loaded, &health);
        }
        let rules = initial.map(|loaded| loaded.rules);
        let rules = Arc::new(RulesHandle::new(rules));
        let parts = wiring::LimiterParts {
            clock: &clock,
            metrics: &metrics,
            tracer: tracer.as_ref(),
        };
        let limiter = wiring::limiter(&settings, store, parts, &mut tasks).await?;
        let state = Arc::new(ServiceState {
            rules: Arc::clone(&rules),
            limiter,
            metrics: Arc::clone(&metrics),
            response: settings.response.clone(),
            health: Arc::clone(&health),
            tracer,
        });
        source::start(&settings, rules, metrics, health, &mut tasks).await;
        let (listeners, addresses) = bind_all(&settings).await?;
        let tls = match &settings.tls {
            None => None,
            Some(files) => {
                let (config, cert) = crate::tls::server_config(files.server_files())?;
                tasks.spawn(cert.watch());
                Some(config)
            }
        };
        let peers = crate::server::peers_within(&settings.grpc_limits, state.metrics.peers());
        let server = server_options(
            &settings,
            tls,
            state.metrics.open_connections(),
            state.metrics.admission(),
            peers,
        );
        Ok(App {
            state,
            listeners,
            addresses,
            server,
            drain: settings.drain,
            tasks,
            admin_token: crate::http::AdminToken(settings.admin_token_file.clone()),
            source: match &settings.config_source {
                crate::settings::ConfigSource::File => {
                    crate::http::Source::Files(settings.config_dir.clone())
                }
                crate::settings::ConfigSource::Xds(xds) => {
                    crate::http::Source::Xds(xds.server.clone())
                }
            },
        })
    }

    /// Where the app listens.
    pub fn addresses(&self) -> &Addresses {
        &self.addresses
    }

    /// The state the listeners serve (rules, limiter, metrics, health).
    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// Serves until `shutdown` resolves, then drains for the drain period (or until `hurry`
    /// resolves, whichever is first) and stops everything.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
        hurry: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), AppError> {
        let App {
            state,
            listeners,
            addresses,
            server,
            drain,
            mut tasks,
            admin_token,
            source,
        } = self;
        tracing::info!(target: LIFECYCLE, ?addresses, "serving");
        if !runtime::lifo_slot_off() {
            tracing::warn!(
                target: LIFECYCLE,
                "built without --cfg tokio_unstable: the runtime's LIFO slot is on, so HTTP/2 \
                 responses leave one write each (see src/app/runtime.rs)"
            );
        }
        let tracer = state.tracer.clone();
        let (stop_tx, stop_rx) = watch::channel(false);
        let health = Arc::clone(&state.health);
        tasks.spawn(async move {
            shutdown.await;
            health.begin_shutdown();
            tracing::info!(
                target: LIFECYCLE,
                ?drain,
                "shutting down: health is NOT_SERVING; answering calls during the drain period (a second signal stops at once)"
            );
            tokio::select! {
                () = tokio::time::sleep(drain) => {}
                () = hurry => tracing::info!(target: LIFECYCLE, "drain cut short"),
            }
            let _ = stop_tx.send(true);
        });
        let stopped = move || {
            let mut rx = stop_rx.clone();
            async move {
                let _ = rx.wait_for(|stop| *stop).await;
            }
        };
        let mut http = JoinSet::new();
        let api = crate::http::api_router(Arc::clone(&state), Arc::clone(&server.peers));
        http.spawn(crate::http::serve(listeners.http, api, stopped()));
        let debug = crate::http::debug_router(Arc::clone(&state), admin_token, source);
        http.spawn(crate::http::serve(listeners.debug, debug, stopped()));
        if let Some((listener, path)) = listeners.prometheus {
            let router = crate::http::prometheus_router(&path, Arc::clone(&state));
            http.spawn(crate::http::serve(listener, router, stopped()));
        }
        let served = crate::server::serve(listeners.grpc, state, server, stopped()).await;
        while let Some(done) = http.join_next().await {
            if let Ok(Err(e)) = done {
                tracing::error!(error = %e, "HTTP listener failed");
            }
        }
        if let Some(tracer) = &tracer {
            // The last spans, while the export task still runs (bounded: the collector may be
            // away).
            let _ = tokio::time::timeout(Duration::from_secs(5), tracer.shutdown()).await;
        }
        tasks.shutdown().await;
        tracing::info!(target: LIFECYCLE, "stopped");
        served.map_err(AppError::from)
    }
}

/// The metrics the settings ask for (`PROMETHEUS_MAPPER_YAML`,
/// `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`, `DISABLE_STATS`, `TOP_LIMITED_SERIES`).
fn metrics(settings: &Settings) -> Result<Metrics, AppError> {
    let mut metrics = Metrics::new(
        settings.stats_max_keys,
        settings.near_limit_ratio,
        &settings.extra_tags,
    );
    if let Some(path) = &settings.prometheus_mapper {
        metrics = metrics.with_mapper(crate::metrics::mapper::Mapper::load(path)?);
    }
    if settings.response_time_ms {
        metrics = metrics.with_response_time_in_ms();
    }
    if settings.disable_stats {
        metrics = metrics.without_stats();
    }
    metrics = metrics.with_top_series(settings.top_limited_series);
    Ok(metrics)
}

/// Samples each rule's hits and refusals for the status page, every step, until shutdown.
async fn sample_history(metrics: Arc<Metrics>) {
    let step = std::time::Duration::from_millis(crate::metrics::history::STEP);
    let mut ticks = tokio::time::interval(step);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        metrics.sample_history();
    }
}

/// The statsd or DogStatsD sink, when one is on.
fn sinks(
    settings: &Settings,
    metrics: &Arc<Metrics>,
    tasks: &mut JoinSet<()>,
) -> Result<(), AppError> {
    let (addr, mogrifiers) = match (&settings.statsd, &settings.dogstatsd) {
        (Some(addr), _) => (addr, Mogrifiers::default()),
        (None, Some(dog)) => (
            &dog.addr,
            Mogrifiers::new(&dog.mogrifiers).map_err(|e| AppError::Unsupported(e.to_string()))?,
        ),
        (None, None) => return Ok(()),
    };
    let sink =
        crate::metrics::statsd::sink(Arc::clone(metrics), addr, settings.stats_flush, mogrifiers)
            .map_err(|e| AppError::Unsupported(e.to_string()))?;
    tasks.spawn(sink);
    Ok(())
}

/// Runs the service until SIGTERM or SIGINT (and the drain after it; a second signal ends the
/// drain at once).
pub async fn run(settings: Settings) -> Result<(), AppError> {
    let app = App::build(settings).await?;
    let (first, second) = signals::first_and_second();
    app.run_until(first, second).await
}
