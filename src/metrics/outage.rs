//! The local mode's series: descriptors decided in this replica's memory while a store failed,
//! hits handed back to the store after (and those whose hand-back's outcome is unknown), the replica count the share divides by, and whether a
//! store decides locally now.
//!
//! Must not touch: the decision (these are readings the limiter keeps).

use std::fmt::Write;

use crate::limiter::OutageReadings;

/// Writes the local mode's series.
pub(crate) fn render(out: &mut String, r: &OutageReadings, extra: &str) {
    let series: [(&str, &str, &str, u64); 5] = [
        (
            "turnstile_local_decisions_total",
            "descriptors decided in this replica's memory with its share while their store failed",
            "counter",
            r.local_decisions,
        ),
        (
            "turnstile_local_hits_handed_back_total",
            "hits counted locally and added to the store when it answered again",
            "counter",
            r.handed_back,
        ),
        (
            "turnstile_local_hits_unknown_total",
            "hits counted locally whose hand-back failed with its outcome unknown (never resent)",
            "counter",
            r.unknown,
        ),
        (
            "turnstile_store_replicas",
            "replicas sharing the counter store, as learned from their marks or pinned (0: not known)",
            "gauge",
            r.replicas.unwrap_or(0),
        ),
        (
            "turnstile_store_deciding_locally",
            "1 while a counter store that failed is decided in this replica's memory",
            "gauge",
            u64::from(!r.local_since.is_empty()),
        ),
    ];
    for (name, help, kind, value) in series {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        let _ = writeln!(out, "{name}{{{extra}}} {value}");
    }
}
