//! A deterministic simulation of Envoys against the RLQS assignment logic: an injected clock,
//! the in-process store, no network. Each simulated Envoy enforces its assignment as Envoy's
//! filter does (a token bucket that starts full when its parameters change and keeps its
//! tokens when they do not; allow-all before the first assignment; deny-all once expired),
//! and reports allowed/denied every second (or every 5 s, as Envoy 1.40 does) at its own phase. Per window it prints what was
//! admitted against the limit and each Envoy's share; the defaults (`RLQS_MIN_SHARE`, the
//! hysteresis, one second of burst) were chosen with it.

use std::sync::Arc;

use turnstile::clock::{Clock, ManualClock};
use turnstile::limiter::{Limiter, LimiterSettings};
use turnstile::quota::{Assignment, BucketId, QuotaStream, Usage};
use turnstile::rules::RuleSet;
use turnstile::settings::RlqsSettings;
use turnstile::storage::memory::MemoryStore;

use crate::support::rules;

const RULES: &str = "domain: rlqs\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 120 }\n";
const STEP_MS: u64 = 10;
/// A window-aligned start (1,000,020 s is a multiple of 60).
const START_MS: u64 = 1_000_020 * 1_000;

/// One simulated Envoy.
struct SimEnvoy {
    demand: Box<dyn Fn(u64) -> f64>,
    phase_ms: u64,
    report_every_ms: u64,
    stream: QuotaStream,
    held: Option<(Assignment, u64)>,
    tokens: f64,
    due: f64,
    allowed: u64,
    denied: u64,
    admitted: Vec<u64>,
    wanted: Vec<u64>,
}

impl SimEnvoy {
    fn new(demand: impl Fn(u64) -> f64 + 'static, phase_ms: u64, settings: RlqsSettings) -> Self {
        SimEnvoy {
            demand: Box::new(demand),
            phase_ms,
            report_every_ms: 1_000,
            stream: QuotaStream::new(settings),
            held: None,
            tokens: 0.0,
            due: 0.0,
            allowed: 0,
            denied: 0,
            admitted: Vec::new(),
            wanted: Vec::new(),
        }
    }

    /// Requests arriving in one step, each allowed or denied by the assignment held.
    fn step(&mut self, t_ms: u64, window: usize) {
        if self.admitted.len() <= window {
            self.admitted.resize(window + 1, 0);
            self.wanted.resize(window + 1, 0);
        }
        if let Some((
            Assignment::TokenBucket {
                max_tokens,
                tokens_per_fill,
                fill_interval_seconds,
                ..
            },
            _,
        )) = self.held
        {
            let per_ms = f64::from(tokens_per_fill) / (f64::from(fill_interval_seconds) * 1_000.0);
            self.tokens = (self.tokens + per_ms * STEP_MS as f64).min(f64::from(max_tokens));
        }
        self.due += (self.demand)(t_ms) * STEP_MS as f64 / 1_000.0;
        while self.due >= 1.0 {
            self.due -= 1.0;
            self.wanted[window] += 1;
            let allow = match self.held {
                None => true,
                Some((_, expires)) if t_ms >= expires => false,
                Some((Assignment::AllowAll { .. }, _)) => true,
                Some((Assignment::DenyAll { .. }, _)) => false,
                Some((Assignment::TokenBucket { .. }, _)) => {
                    let ok = self.tokens >= 1.0;
                    if ok {
                        self.tokens -= 1.0;
                    }
                    ok
                }
            };
            if allow {
                self.allowed += 1;
                self.admitted[window] += 1;
            } else {
                self.denied += 1;
            }
        }
    }

    async fn report(&mut self, rules: &RuleSet, limiter: &Limiter<Arc<MemoryStore>>, now_ms: u64) {
        let usage = Usage {
            bucket: BucketId::new([("user".to_owned(), "shared".to_owned())]).expect("bucket"),
            allowed: std::mem::take(&mut self.allowed),
            denied: std::mem::take(&mut self.denied),
        };
        let decided = self
            .stream
            .on_report("rlqs", vec![usage], rules, limiter, now_ms)
            .await
            .expect("report");
        let next = decided[0].assignment;
        let same = matches!(self.held, Some((held, _)) if held == next);
        if let (false, Assignment::TokenBucket { max_tokens, .. }) = (same, next) {
            self.tokens = f64::from(max_tokens);
        }
        self.held = Some((next, now_ms + next.ttl_seconds() * 1_000));
    }
}

/// Runs `envoys` for `windows` minutes; returns per window (admitted, wanted) per Envoy.
async fn simulate(mut envoys: Vec<SimEnvoy>, windows: usize) -> Vec<Vec<(u64, u64)>> {
    let clock = ManualClock::new(START_MS / 1_000);
    clock.set_millis(START_MS);
    let dyn_clock: Arc<dyn Clock> = Arc::new(clock.clone());
    let store = Arc::new(MemoryStore::new(10_000, Arc::clone(&dyn_clock)));
    let limiter = Limiter::new(store, dyn_clock, LimiterSettings::default());
    let rules = rules(&[("rlqs.yaml", RULES)], false);
    let end = windows as u64 * 60_000;
    let mut t = 0;
    while t < end {
        clock.set_millis(START_MS + t);
        let window = (t / 60_000) as usize;
        for envoy in envoys.iter_mut() {
            envoy.step(t, window);
            if t % envoy.report_every_ms == envoy.phase_ms {
                envoy.report(&rules, &limiter, START_MS + t).await;
            }
        }
        t += STEP_MS;
    }
    (0..windows)
        .map(|w| {
            envoys
                .iter()
                .map(|e| (e.admitted[w], e.wanted[w]))
                .collect()
        })
        .collect()
}

fn print_table(name: &str, limit: u64, result: &[Vec<(u64, u64)>]) {
    println!("{name}: limit {limit} per window");
    for (w, envoys) in result.iter().enumerate() {
        let total: u64 = envoys.iter().map(|e| e.0).sum();
        let shares: Vec<String> = envoys
            .iter()
            .map(|(a, d)| format!("{a}/{d} ({:.0} %)", *a as f64 * 100.0 / total.max(1) as f64))
            .collect();
        let error = (total as f64 - limit as f64) * 100.0 / limit as f64;
        println!(
            "  window {w}: admitted {total} ({error:+.1} %), per Envoy admitted/wanted: {}",
            shares.join(", ")
        );
    }
}

/// Every window admits the limit within 10 %, and the second Envoy (20 % of demand) at least
/// 90 % of its demand's share.
fn assert_shared_by_demand(result: &[Vec<(u64, u64)>]) {
    for (w, envoys) in result.iter().enumerate() {
        let total: u64 = envoys.iter().map(|e| e.0).sum();
        assert!(
            total.abs_diff(120) <= 12,
            "window {w}: {total} admitted for a limit of 120"
        );
        let low_share = envoys[1].0 as f64 / total as f64;
        assert!(
            low_share >= 0.9 * 0.2,
            "window {w}: the 20 % Envoy got {low_share:.2} of the admitted"
        );
    }
}

#[tokio::test]
async fn skewed_demand_above_the_limit_is_shared_by_demand_within_ten_percent() {
    let s = RlqsSettings::default();
    let envoys = vec![SimEnvoy::new(|_| 8.0, 0, s), SimEnvoy::new(|_| 2.0, 370, s)];
    let result = simulate(envoys, 4).await;
    print_table("80/20 at 10 req/s", 120, &result);
    assert_shared_by_demand(&result);
}

#[tokio::test]
async fn skewed_demand_with_reports_every_five_seconds_as_envoy_1_40_sends_them() {
    // Envoy 1.40 reports every 5 s whatever `reporting_interval` says (measured).
    let s = RlqsSettings::default();
    let mut envoys = vec![
        SimEnvoy::new(|_| 8.0, 0, s),
        SimEnvoy::new(|_| 2.0, 2_370, s),
    ];
    for envoy in &mut envoys {
        envoy.report_every_ms = 5_000;
    }
    let result = simulate(envoys, 4).await;
    print_table("80/20 at 10 req/s, reports every 5 s", 120, &result);
    assert_shared_by_demand(&result);
}

#[tokio::test]
async fn many_envoys_with_changing_demand_and_a_quiet_one() {
    let s = RlqsSettings::default();
    // Four busy Envoys whose demand steps up and down mid-window, and one that asks for a
    // request every 20 s.
    let mut envoys: Vec<SimEnvoy> = (0..4)
        .map(|i| {
            SimEnvoy::new(
                move |t| if (t / 30_000 + i) % 2 == 0 { 6.0 } else { 1.0 },
                i * 230,
                s,
            )
        })
        .collect();
    envoys.push(SimEnvoy::new(|_| 0.05, 910, s));
    let result = simulate(envoys, 4).await;
    print_table("4 stepping Envoys + 1 quiet", 120, &result);
    for (w, envoys) in result.iter().enumerate() {
        let total: u64 = envoys.iter().map(|e| e.0).sum();
        assert!(
            total.abs_diff(120) <= 12,
            "window {w}: {total} admitted for a limit of 120"
        );
        let (quiet_admitted, quiet_wanted) = envoys[4];
        assert!(
            quiet_admitted + 1 >= quiet_wanted,
            "window {w}: the quiet Envoy got {quiet_admitted} of {quiet_wanted}"
        );
    }
}

#[tokio::test]
async fn demand_under_the_limit_is_admitted() {
    let s = RlqsSettings::default();
    let envoys = vec![SimEnvoy::new(|_| 1.2, 0, s), SimEnvoy::new(|_| 0.5, 500, s)];
    let result = simulate(envoys, 3).await;
    print_table("under the limit (102 of 120 wanted)", 120, &result);
    for (w, envoys) in result.iter().enumerate() {
        let admitted: u64 = envoys.iter().map(|e| e.0).sum();
        let wanted: u64 = envoys.iter().map(|e| e.1).sum();
        assert!(
            admitted as f64 >= 0.95 * wanted as f64,
            "window {w}: {admitted} of {wanted} admitted under the limit"
        );
    }
}
