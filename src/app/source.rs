//! Starts the rules' one source (`CONFIG_TYPE`): the file watcher, or the xDS client. Without
//! `FORCE_START_WITHOUT_INITIAL_CONFIG`, an xDS start waits here until the first rules are in
//! force, so nothing is served before them (as the reference waits); with it, the service
//! serves at once and `/healthcheck` says that no rules have arrived yet.
//!
//! Must not touch: listeners, serving.

use std::sync::Arc;

use tokio::task::JoinSet;

use super::options::load_options;
use crate::config;
use crate::health::Health;
use crate::metrics::Metrics;
use crate::reload::{Reloader, RulesHandle};
use crate::settings::{ConfigSource, Settings};
use crate::telemetry::LIFECYCLE;
use crate::xds::XdsSource;

/// Spawns the source on `tasks`; returns once the service may start serving.
pub(super) async fn start(
    settings: &Settings,
    handle: Arc<RulesHandle>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    tasks: &mut JoinSet<()>,
) {
    let options = load_options(settings);
    let ConfigSource::Xds(xds) = &settings.config_source else {
        let dir = settings.config_dir.clone();
        let reloader = Reloader {
            handle,
            load: {
                let dir = dir.clone();
                Box::new(move || config::load_dir(&dir, options))
            },
            dir,
            metrics,
            health,
        };
        tasks.spawn(reloader.run());
        return;
    };
    let source = XdsSource {
        settings: (**xds).clone(),
        options,
        handle,
        metrics,
        health: Arc::clone(&health),
    };
    if settings.force_start_without_config {
        health.set_awaiting_rules();
        tasks.spawn(source.run(None));
        return;
    }
    let (first, arrived) = tokio::sync::oneshot::channel();
    tasks.spawn(source.run(Some(first)));
    tracing::info!(
        target: LIFECYCLE,
        server = %xds.server,
        "waiting for the first rate limit configuration from the xDS server before serving"
    );
    let _ = arrived.await;
}
