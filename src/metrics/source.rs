//! The state of the rules' source as metrics and as words: whether the xDS stream is up, the
//! version in force, NACKs, and when rules last changed. The xDS client writes it; `/metrics`,
//! `/rlconfig` and `/healthcheck` read it.
//!
//! Must not touch: the source itself (`xds`, `reload`).

use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::clock::{Clock, SystemClock, UnixMillis};

/// What the rules' source reports.
#[derive(Debug, Default)]
pub struct SourceStatus {
    xds: AtomicBool,
    connected: AtomicBool,
    version: RwLock<Option<Arc<str>>>,
    updates: AtomicU64,
    nacks: AtomicU64,
    superseded: AtomicU64,
    last_update_ms: AtomicU64,
}

fn now_ms() -> u64 {
    SystemClock.now().millis()
}

impl SourceStatus {
    /// Records that rules come over xDS (the metrics below are rendered only then).
    pub fn set_xds(&self) {
        self.xds.store(true, Ordering::Release);
    }

    /// Whether rules come over xDS.
    pub fn is_xds(&self) -> bool {
        self.xds.load(Ordering::Acquire)
    }

    /// Records whether the stream to the ADS server is up.
    pub fn set_connected(&self, up: bool) {
        self.connected.store(up, Ordering::Release);
    }

    /// Records that `version` was accepted and is in force.
    pub fn accepted(&self, version: &str) {
        if let Ok(mut current) = self.version.write() {
            *current = Some(Arc::from(version));
        }
        self.updates.fetch_add(1, Ordering::Relaxed);
        self.last_update_ms.store(now_ms(), Ordering::Release);
    }

    /// Records a refused push.
    pub fn nacked(&self) {
        self.nacks.fetch_add(1, Ordering::Relaxed);
    }

    /// Records pushes replaced by a newer one before they were compiled.
    pub fn superseded(&self, n: u64) {
        self.superseded.fetch_add(n, Ordering::Relaxed);
    }

    /// The version in force, if any was accepted.
    pub fn version(&self) -> Option<Arc<str>> {
        self.version.read().ok().and_then(|v| v.clone())
    }

    /// Prometheus text of the source's state (nothing when rules come from files).
    pub(crate) fn render(&self, out: &mut String, extra: &str) {
        if !self.is_xds() {
            return;
        }
        let sep = if extra.is_empty() { "" } else { "," };
        let mut gauge = |name: &str, help: &str, kind: &str, value: String| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{extra}}} {value}"
            );
        };
        let connected = u8::from(self.connected.load(Ordering::Acquire));
        gauge(
            "turnstile_config_source_connected",
            "1 while the stream to the xDS server is up",
            "gauge",
            connected.to_string(),
        );
        gauge(
            "turnstile_config_source_updates_total",
            "xDS pushes accepted",
            "counter",
            self.updates.load(Ordering::Relaxed).to_string(),
        );
        gauge(
            "turnstile_config_source_nacks_total",
            "xDS pushes refused (NACKed); the rules in force stayed",
            "counter",
            self.nacks.load(Ordering::Relaxed).to_string(),
        );
        gauge(
            "turnstile_config_source_superseded_total",
            "xDS pushes replaced by a newer push before they were compiled (only the newest is \
             compiled and answered)",
            "counter",
            self.superseded.load(Ordering::Relaxed).to_string(),
        );
        let last = self.last_update_ms.load(Ordering::Acquire);
        if last > 0 {
            gauge(
                "turnstile_config_source_last_update_timestamp_seconds",
                "when the rules in force were accepted (Unix time)",
                "gauge",
                format!("{:.3}", Duration::from_millis(last).as_secs_f64()),
            );
            gauge(
                "turnstile_config_source_seconds_since_update",
                "seconds since the rules in force were accepted",
                "gauge",
                format!(
                    "{:.3}",
                    SystemClock.now().since(UnixMillis::new(last)).as_secs_f64()
                ),
            );
        }
        if let Some(version) = self.version() {
            let name = "turnstile_config_source_version_info";
            let _ = writeln!(
                out,
                "# HELP {name} the xDS version in force\n# TYPE {name} gauge\n{name}{{version=\"{}\"{sep}{extra}}} 1",
                super::label::escape(&version)
            );
        }
    }
}
