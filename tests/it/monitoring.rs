//! The dashboard and alerts in `deploy/monitoring/` match the service: every series their
//! queries name exists in `/metrics` of a running Turnstile (rules over xDS, so the config
//! source's series are there too, after real calls), the rules file passes `promtool check
//! rules` and its unit tests (`promtool test rules`, one per alert: fires, and not before, and
//! not for a healthy replica), and the PrometheusRule holds the same groups as the plain file.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use turnstile::pb::ratelimit::config::ratelimit::v3::RateLimitUnit;

use crate::process::http_get;
use crate::support::missing;
use crate::xds::server::{AdsServer, Shared};
use crate::xds::{codes, limit, loopback, start};

fn file(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/monitoring")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every series name (`ratelimit_*`, `turnstile_*`) in PromQL `text`.
fn series(text: &str, out: &mut BTreeSet<String>) {
    let mut word = String::new();
    for c in text.chars().chain([' ']) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        if word.starts_with("ratelimit_") || word.starts_with("turnstile_") {
            out.insert(word.clone());
        }
        word.clear();
    }
}

fn queried() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let dashboard: serde_json::Value =
        serde_json::from_str(&file("grafana-dashboard.json")).expect("dashboard JSON");
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            series(target["expr"].as_str().expect("expr"), &mut names);
        }
    }
    let rules: serde_json::Value =
        serde_saphyr::from_str(&file("alerts.rules.yaml")).expect("rules YAML");
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            series(rule["expr"].as_str().expect("expr"), &mut names);
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_the_dashboard_and_alerts_query_is_served() {
    let shared = Shared::default();
    shared.set("1", vec![limit("m", "mon", "user", RateLimitUnit::Hour, 1)]);
    let ads = AdsServer::start(loopback(), shared, None);
    let p = start(ads.addr, &[]);
    codes(&p, "mon", "ann", 2).await;
    let (_, text) = http_get(p.debug, "/metrics").expect("metrics");
    let served: BTreeSet<String> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect();
    let names = queried();
    assert!(names.len() > 20, "{names:?}");
    // Store gauges exist only on their store (memcached, PostgreSQL): named in turnstile's
    // own table of gauges instead of this memory-store run.
    let store_only = [
        "turnstile_memcached_up",
        "turnstile_postgres_connections",
        "turnstile_store_breaker_open",
    ];
    for name in &names {
        if store_only.contains(&name.as_str()) {
            let table = std::fs::read_to_string(
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/metrics/table.rs"),
            )
            .expect("table");
            assert!(
                table.contains(&format!("\"{name}\"")),
                "{name} is not a gauge Turnstile serves"
            );
            continue;
        }
        assert!(
            served.contains(name),
            "{name} is queried but not in /metrics:\n{text}"
        );
    }
    drop(ads);
}

#[test]
fn the_rules_pass_promtool_and_the_prometheus_rule_holds_the_same_groups() {
    let plain: serde_json::Value =
        serde_saphyr::from_str(&file("alerts.rules.yaml")).expect("rules YAML");
    let operator: serde_json::Value =
        serde_saphyr::from_str(&file("prometheusrule.yaml")).expect("PrometheusRule YAML");
    assert_eq!(operator["kind"], "PrometheusRule");
    assert_eq!(
        operator["spec"]["groups"], plain["groups"],
        "the two files hold the same rules"
    );
    for rule in plain["groups"][0]["rules"].as_array().expect("rules") {
        let alert = rule["alert"].as_str().expect("alert name");
        let runbook = rule["annotations"]["runbook"].as_str().expect("a runbook");
        let anchor = format!("#{}", alert.to_ascii_lowercase());
        assert!(runbook.contains(&anchor), "{alert}: {runbook}");
        let runbooks = std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/runbooks.md"),
        )
        .expect("runbooks");
        assert!(
            runbooks.contains(&format!("## {alert}")),
            "{alert} has a runbook section"
        );
    }
    let Ok(out) = Command::new("promtool")
        .args(["check", "rules"])
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/monitoring/alerts.rules.yaml"))
        .output()
    else {
        return missing("promtool (Debian's prometheus package)");
    };
    assert!(
        out.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Unit tests: every alert fires for its input and not for the healthy replica beside it.
    let tests: serde_json::Value =
        serde_saphyr::from_str(&file("alerts.test.yaml")).expect("test YAML");
    let tested: std::collections::BTreeSet<&str> = tests["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().into_iter().flatten())
        .filter_map(|c| c["alertname"].as_str())
        .collect();
    let alerts: std::collections::BTreeSet<&str> = plain["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert_eq!(tested, alerts, "every alert has a promtool unit test");
    let out = Command::new("promtool")
        .args(["test", "rules"])
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/monitoring/alerts.test.yaml"))
        .output()
        .expect("promtool ran a moment ago");
    assert!(
        out.status.success(),
        "promtool test rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
