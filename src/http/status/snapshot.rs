//! What the status page shows, as one JSON document (`/debug/status`): read from the service
//! state at the moment of the call, nothing kept here.
//!
//! Must not touch: rendering (`page`, the script), the decision.

use std::path::PathBuf;

use serde::Serialize;

use crate::limiter::Destination;
use crate::metrics::history::HistorySnapshot;
use crate::metrics::top::TopSnapshot;
use crate::metrics::{CloseReason, ShedReason};
use crate::rls::ServiceState;
use crate::rules::Rate;
use crate::storage::{CounterStore, Gauge};

/// Where the rules come from, as the settings say.
#[derive(Debug, Clone)]
pub enum Source {
    /// Files under this directory (`RUNTIME_ROOT`/`RUNTIME_SUBDIRECTORY`, or `--config-dir`).
    Files(PathBuf),
    /// An ADS stream from this control plane (`CONFIG_GRPC_XDS_SERVER_URL`).
    Xds(String),
}

/// The whole page's data.
#[derive(Debug, Serialize)]
pub(super) struct Snapshot {
    pub(super) version: &'static str,
    pub(super) ready: bool,
    pub(super) failing: Vec<&'static str>,
    pub(super) notes: Vec<String>,
    pub(super) rules: Rules,
    pub(super) stores: Vec<Store>,
    pub(super) local_mode: LocalMode,
    pub(super) peers: Peers,
    pub(super) top: TopSnapshot,
    pub(super) history: HistorySnapshot,
}

#[derive(Debug, Serialize)]
pub(super) struct Rules {
    /// `files` or `xds`.
    pub(super) source: &'static str,
    /// The directory, or the control plane.
    pub(super) from: String,
    /// The xDS version in force.
    pub(super) xds_version: Option<String>,
    pub(super) limits: Vec<RuleLine>,
}

#[derive(Debug, Serialize)]
pub(super) struct RuleLine {
    pub(super) rule: String,
    pub(super) limit: String,
    pub(super) shadow_mode: bool,
}

#[derive(Debug, Serialize)]
pub(super) struct Store {
    pub(super) server: String,
    /// `closed` (calls go through), `open` (failing at once but for probes), or `up`/`down`
    /// for a server without a breaker reading.
    pub(super) state: &'static str,
    pub(super) opens: u64,
}

#[derive(Debug, Serialize)]
pub(super) struct LocalMode {
    /// The stores deciding in this replica's memory now.
    pub(super) deciding_locally: Vec<&'static str>,
    pub(super) local_decisions: u64,
    pub(super) handed_back: u64,
}

#[derive(Debug, Serialize)]
pub(super) struct Peers {
    pub(super) active: u32,
    pub(super) shed: Vec<(&'static str, u64)>,
    pub(super) closed: Vec<(&'static str, u64)>,
}

/// The page's data now, `listed` values per rule and kind.
pub(super) fn take<S: CounterStore>(
    state: &ServiceState<S>,
    source: &Source,
    listed: usize,
) -> Snapshot {
    let metrics = &state.metrics;
    let mut notes: Vec<String> = state.health.degraded().into_iter().collect();
    notes.extend(state.health.warnings());
    let outage = state.limiter.outage_readings();
    let readings = &metrics.peers;
    Snapshot {
        version: env!("CARGO_PKG_VERSION"),
        ready: state.health.is_healthy(),
        failing: state.health.failing(),
        notes,
        rules: rules(state, source),
        stores: stores(&state.limiter.gauges()),
        local_mode: LocalMode {
            deciding_locally: outage
                .local_since
                .iter()
                .map(|(d, _)| store_name(*d))
                .collect(),
            local_decisions: outage.local_decisions,
            handed_back: outage.handed_back,
        },
        peers: Peers {
            active: readings.active(),
            shed: ShedReason::ALL
                .iter()
                .map(|r| (r.label(), readings.shed_total(*r)))
                .collect(),
            closed: CloseReason::ALL
                .iter()
                .map(|r| (r.label(), readings.closed_total(*r)))
                .collect(),
        },
        top: metrics.top.snapshot(listed),
        history: metrics.history(),
    }
}

fn rules<S: CounterStore>(state: &ServiceState<S>, source: &Source) -> Rules {
    let (kind, from) = match source {
        Source::Files(dir) => ("files", dir.display().to_string()),
        Source::Xds(server) => ("xds", server.clone()),
    };
    let mut limits: Vec<RuleLine> = state
        .rules
        .load()
        .map(|rules| {
            rules
                .limits()
                .iter()
                .map(|l| RuleLine {
                    rule: l.full_key.clone(),
                    limit: match l.rate {
                        Rate::Limited(p) => format!(
                            "{} per {} {}{}",
                            p.requests_per_unit,
                            p.period.multiplier(),
                            p.unit().name().to_ascii_lowercase(),
                            match p.algorithm.name() {
                                "fixed_window" => String::new(),
                                other => format!(" ({other})"),
                            }
                        ),
                        Rate::Unlimited { .. } => "unlimited".to_owned(),
                    },
                    shadow_mode: l.shadow_mode,
                })
                .collect()
        })
        .unwrap_or_default();
    limits.sort_by(|a, b| a.rule.cmp(&b.rule));
    Rules {
        source: kind,
        from,
        xds_version: state.metrics.source.version().map(|v| v.to_string()),
        limits,
    }
}

fn stores(gauges: &[Gauge]) -> Vec<Store> {
    let mut out: Vec<Store> = Vec::new();
    for gauge in gauges {
        match gauge {
            Gauge::Breaker {
                server,
                open,
                opens,
                ..
            } => out.push(Store {
                server: server.clone(),
                state: if *open { "open" } else { "closed" },
                opens: *opens,
            }),
            Gauge::MemoryCounters(_) => out.push(Store {
                server: "memory (this process)".to_owned(),
                state: "up",
                opens: 0,
            }),
            _ => {}
        }
    }
    out
}

fn store_name(destination: Destination) -> &'static str {
    match destination {
        Destination::Main => "the main store",
        Destination::PerSecond => "the per-second store",
        Destination::Durable => "the durable store",
    }
}
