//! The live rule set: one atomically swappable `Arc<RuleSet>`, and the watcher that reloads it.
//! A request does one lock-free load; a reload builds the new set to the side and swaps it in
//! with one store, so a failed reload never disturbs the rules being served.
//!
//! Must not touch: protobuf types, storage.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc::UnboundedSender;

use crate::config::{ConfigErrors, Loaded};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::rules::RuleSet;
use crate::telemetry::LIFECYCLE;

/// The rules being served; empty until a configuration has loaded.
#[derive(Debug, Default)]
pub struct RulesHandle {
    current: ArcSwapOption<RuleSet>,
}

impl RulesHandle {
    /// A handle serving `rules`.
    pub fn new(rules: Option<RuleSet>) -> Self {
        Self {
            current: ArcSwapOption::from(rules.map(Arc::new)),
        }
    }

    /// The rules now, if any have loaded.
    pub fn load(&self) -> Option<Arc<RuleSet>> {
        self.current.load_full()
    }

    /// Serves `rules` from now on.
    pub fn store(&self, rules: RuleSet) {
        self.current.store(Some(Arc::new(rules)));
    }
}

/// Reloads the rules from their directory on change: inotify events on the directory (and
/// its parent and grandparent, so Kubernetes ConfigMap `..data` swaps and `RUNTIME_ROOT`
/// symlink swaps are seen), debounced, plus a periodic fingerprint check of every file as a
/// fallback for missed events. A new rule set is built to the side and swapped in whole; a
/// failed reload keeps the old rules, logs the full error and counts `config_load_error`.
pub struct Reloader {
    /// The live rules.
    pub handle: Arc<RulesHandle>,
    /// Loads the rule directory.
    pub load: Box<dyn Fn() -> Result<Loaded, ConfigErrors> + Send + Sync>,
    /// The directory being watched.
    pub dir: PathBuf,
    /// Counts loads.
    pub metrics: Arc<Metrics>,
    /// Learns that a configuration is loaded.
    pub health: Arc<Health>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// Logs a successful load (its warnings, then what was loaded) and tells `health` whether any
/// rules were loaded at all.
pub fn announce(loaded: &Loaded, health: &Health) {
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    let empty = loaded.rules.domain_count() == 0;
    health.set_rules_empty(empty);
    if empty {
        tracing::warn!(
            files = loaded.files,
            "no rate limit rules are loaded: every request answers OK without a limit"
        );
    }
    tracing::info!(
        target: LIFECYCLE,
        files = loaded.files,
        domains = loaded.rules.domain_count(),
        "rate limit configuration loaded"
    );
}

/// How long events are collected before a reload (editors and ConfigMap updates write in steps).
const DEBOUNCE: Duration = Duration::from_millis(200);
/// How often the files are fingerprinted in case an event was missed.
const POLL: Duration = Duration::from_secs(10);

impl Reloader {
    /// Loads once; on success swaps the rules in. Returns whether it succeeded.
    pub fn reload_once(&self) -> bool {
        match (self.load)() {
            Ok(loaded) => {
                announce(&loaded, &self.health);
                self.handle.store(loaded.rules);
                self.metrics.config_loaded(true);
                self.health.set_config_loaded();
                true
            }
            Err(errors) => {
                tracing::error!(
                    "rate limit configuration not reloaded, the previous one stays in force:\n{errors}"
                );
                self.metrics.config_loaded(false);
                false
            }
        }
    }

    /// Watches and reloads until the task is dropped.
    pub async fn run(self) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let mut seen = fingerprint(&self.dir);
        let mut watcher = None;
        loop {
            if watcher.is_none() {
                watcher = watch(&self.dir, tx.clone());
            }
            let changed = tokio::select! {
                event = rx.recv() => event.is_some(),
                () = tokio::time::sleep(POLL) => {
                    let now = fingerprint(&self.dir);
                    now != seen
                }
            };
            if !changed {
                continue;
            }
            // Something moved: watch afresh after this round (a swapped symlink has a new target).
            watcher = None;
            // Debounce: wait until the events stop for a moment.
            loop {
                tokio::time::sleep(DEBOUNCE).await;
                let mut more = false;
                while rx.try_recv().is_ok() {
                    more = true;
                }
                if !more {
                    break;
                }
            }
            let now = fingerprint(&self.dir);
            if now != seen {
                seen = now;
                self.reload_once();
            }
        }
    }
}

/// Watches `dir` (recursively) and its two nearest ancestors (not recursively); events go to
/// `tx`. Re-made after every change, so a swapped symlink is followed to its new target.
fn watch(dir: &Path, tx: UnboundedSender<()>) -> Option<RecommendedWatcher> {
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_))) {
            let _ = tx.send(());
        }
    })
    .map_err(|e| tracing::warn!(error = %e, "cannot watch the config directory; polling only"))
    .ok()?;
    if let Err(e) = watcher.watch(dir, RecursiveMode::Recursive) {
        tracing::debug!(error = %e, dir = %dir.display(), "cannot watch the config directory yet");
    }
    for ancestor in dir.ancestors().skip(1).take(2) {
        let _ = watcher.watch(ancestor, RecursiveMode::NonRecursive);
    }
    Some(watcher)
}

/// Path, length and modification time of every file under `dir` (following symlinks).
fn fingerprint(dir: &Path) -> Vec<(PathBuf, u64, Option<std::time::SystemTime>)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                pending.push(path);
            } else {
                out.push((path, meta.len(), meta.modified().ok()));
            }
        }
    }
    out.sort();
    out
}
