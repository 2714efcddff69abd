//! Process health as the AND of components, shared by gRPC health (`ratelimit` readiness) and
//! HTTP `/healthcheck`: the counter store can count, a configuration is loaded (only when
//! `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`), and the process is not shutting down.
//! Liveness (gRPC service `""`) is not derived from it and never flaps. A store that fails while
//! its descriptors are decided locally leaves the process healthy but degraded, said by
//! `/healthcheck`.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

/// Health components and a change notification.
#[derive(Debug)]
pub struct Health {
    backend_ready: AtomicBool,
    config_loaded: AtomicBool,
    needs_config: bool,
    shutting_down: AtomicBool,
    /// The loaded configuration has no rules (healthy, but worth saying).
    rules_empty: AtomicBool,
    /// Rules come over xDS and none have arrived yet (`FORCE_START_WITHOUT_INITIAL_CONFIG`).
    awaiting_rules: AtomicBool,
    /// Why the xDS server's last push was refused while no rules are in force yet.
    refused: std::sync::Mutex<Option<String>>,
    /// Serving, but not as configured: a store decided locally (`BACKEND_FAILURE_MODE=local`),
    /// said how and since when.
    degraded: std::sync::Mutex<Option<String>>,
    changed: watch::Sender<bool>,
}

impl Health {
    /// Health that, when `needs_config`, also requires a loaded configuration.
    pub fn new(needs_config: bool, config_loaded: bool) -> Self {
        let health = Self {
            backend_ready: AtomicBool::new(true),
            config_loaded: AtomicBool::new(config_loaded),
            needs_config,
            shutting_down: AtomicBool::new(false),
            rules_empty: AtomicBool::new(false),
            awaiting_rules: AtomicBool::new(false),
            degraded: std::sync::Mutex::new(None),
            refused: std::sync::Mutex::new(None),
            changed: watch::Sender::new(false),
        };
        health.publish();
        health
    }

    fn publish(&self) {
        self.changed.send_replace(self.is_healthy());
    }

    /// Whether every component is healthy.
    pub fn is_healthy(&self) -> bool {
        self.failing().is_empty()
    }

    /// The names of the failing components.
    pub fn failing(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if !self.backend_ready.load(Ordering::Acquire) {
            out.push("backend");
        }
        if self.needs_config && !self.config_loaded.load(Ordering::Acquire) {
            out.push("config");
        }
        if self.shutting_down.load(Ordering::Acquire) {
            out.push("sigterm");
        }
        out
    }

    /// Records whether the counter store can count.
    pub fn set_backend_ready(&self, ready: bool) {
        self.backend_ready.store(ready, Ordering::Release);
        self.publish();
    }

    /// Records that rules are expected from the xDS server and none have arrived yet.
    pub fn set_awaiting_rules(&self) {
        self.awaiting_rules.store(true, Ordering::Release);
    }

    /// Records that the process serves degraded, and how (`None`: it does not).
    pub fn set_degraded(&self, how: Option<String>) {
        *self
            .degraded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = how;
    }

    /// How the process serves degraded, if it does (for `/healthcheck`).
    pub fn degraded(&self) -> Option<String> {
        self.degraded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Records that a configuration is loaded.
    pub fn set_config_loaded(&self) {
        self.awaiting_rules.store(false, Ordering::Release);
        self.set_rules_refused(None);
        self.config_loaded.store(true, Ordering::Release);
        self.publish();
    }

    /// Records whether the loaded configuration has no rules at all (every request then
    /// answers OK without a limit: healthy, but an operator should hear of it).
    pub fn set_rules_empty(&self, empty: bool) {
        self.rules_empty.store(empty, Ordering::Release);
    }

    /// Records why the xDS server's push was refused (`None`: one was taken since).
    pub fn set_rules_refused(&self, why: Option<String>) {
        *self
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = why;
    }

    /// Warnings about a healthy process, for `/healthcheck`.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.rules_empty.load(Ordering::Acquire) {
            out.push(
                "no rate limit rules are loaded (no rule files, or an xDS push without resources)"
                    .to_owned(),
            );
        }
        if self.awaiting_rules.load(Ordering::Acquire) {
            let refused = self
                .refused
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            out.push(match refused {
                Some(why) => format!(
                    "the xDS server's configuration was refused, no rules are in force: {why}"
                ),
                None => {
                    "no rate limit configuration has arrived from the xDS server yet".to_owned()
                }
            });
        }
        out
    }

    /// Marks the process as shutting down (permanently unhealthy).
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
        self.publish();
    }

    /// Whether shutdown has begun.
    pub fn shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// A receiver that sees every change of the overall health.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.changed.subscribe()
    }
}
