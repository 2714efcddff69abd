//! A deterministic simulation of Envoys against the RLQS assignment logic: an injected clock,
//! the in-process store, no network. Each simulated Envoy enforces its assignment as Envoy's
//! filter does (a token bucket keeps its tokens when its parameters do not change; a new one
//! starts as full as the token bucket it replaces, or full when it replaces none; allow-all before the first assignment; deny-all once expired),
//! reports its bucket at once when its first request creates it, then allowed/denied with the
//! time they cover (whole seconds, as Envoy truncates it) every second (or every 5 s, as Envoy
//! 1.40 does) at its own phase, and takes what the server pushes when a window ends. Per window it
//! prints what was admitted against the limit, each Envoy's share and how long its first
//! request of the window waited; the defaults (`RLQS_MIN_SHARE`, keeping a held bucket within a token, one second of
//! burst) were chosen with it.

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
    /// Admitted in the first 10 s of each window.
    early: Vec<u64>,
    wanted: Vec<u64>,
    first_wanted: Vec<Option<u64>>,
    first_admitted: Vec<Option<u64>>,
    reported_at: u64,
    /// The bucket exists (a first request created it); `created` until its first report.
    bucket: Option<Created>,
    /// When its replica dies and when a new one takes its reports (ms from the start): in
    /// between no report gets through and the assignment held goes on; the new replica's
    /// stream knows nothing of the bucket.
    restart: Option<(u64, u64)>,
    settings: RlqsSettings,
}

/// Where a simulated Envoy's bucket stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Created {
    /// Created by a request in this step: Envoy reports it at once.
    Now,
    /// Reported; periodic reports follow.
    Reported,
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
            early: Vec::new(),
            wanted: Vec::new(),
            first_wanted: Vec::new(),
            first_admitted: Vec::new(),
            reported_at: START_MS,
            bucket: None,
            restart: None,
            settings,
        }
    }

    /// The same Envoy, its replica killed at `down_ms` and replaced at `back_ms`.
    fn restarted(mut self, down_ms: u64, back_ms: u64) -> Self {
        self.restart = Some((down_ms, back_ms));
        self
    }

    /// Whether its replica is down at `t_ms`; at the moment the new one is up, its stream
    /// replaces the old one.
    fn replica_down(&mut self, t_ms: u64) -> bool {
        match self.restart {
            Some((down, back)) if (down..back).contains(&t_ms) => true,
            Some((_, back)) if t_ms == back => {
                self.stream = QuotaStream::new(self.settings);
                false
            }
            _ => false,
        }
    }

    /// The same Envoy reporting every `ms` instead of every second.
    fn reporting_every(mut self, ms: u64) -> Self {
        self.report_every_ms = ms;
        self
    }

    /// Requests arriving in one step, each allowed or denied by the assignment held.
    fn step(&mut self, t_ms: u64, window: usize) {
        if self.admitted.len() <= window {
            self.admitted.resize(window + 1, 0);
            self.early.resize(window + 1, 0);
            self.wanted.resize(window + 1, 0);
            self.first_wanted.resize(window + 1, None);
            self.first_admitted.resize(window + 1, None);
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
            self.first_wanted[window].get_or_insert(t_ms);
            self.bucket.get_or_insert(Created::Now);
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
                if self.admitted[window] == 0 {
                    self.first_admitted[window] = Some(t_ms);
                }
                self.admitted[window] += 1;
                if t_ms % 60_000 < 10_000 {
                    self.early[window] += 1;
                }
            } else {
                self.denied += 1;
            }
        }
    }

    async fn report(&mut self, rules: &RuleSet, limiter: &Limiter<Arc<MemoryStore>>, now_ms: u64) {
        let since = match self.bucket.replace(Created::Reported) {
            Some(Created::Now) => now_ms,
            _ => std::mem::replace(&mut self.reported_at, now_ms),
        };
        self.reported_at = now_ms;
        let usage = Usage {
            bucket: BucketId::new([("user".to_owned(), "shared".to_owned())]).expect("bucket"),
            allowed: std::mem::take(&mut self.allowed),
            denied: std::mem::take(&mut self.denied),
            elapsed_ms: now_ms.saturating_sub(since) / 1_000 * 1_000,
        };
        let decided = self
            .stream
            .on_report("rlqs", vec![usage], rules, limiter, now_ms)
            .await
            .expect("report");
        self.take(decided[0].assignment, now_ms);
    }

    /// What the server pushes when a window ends (no report), as `rlqs::Session` does.
    async fn window_end(
        &mut self,
        rules: &RuleSet,
        limiter: &Limiter<Arc<MemoryStore>>,
        now_ms: u64,
    ) {
        if self
            .stream
            .next_window_end_ms()
            .is_none_or(|end| end > now_ms)
        {
            return;
        }
        let decided = self.stream.refresh(rules, limiter.shadow_mode(), now_ms);
        if let Some(d) = decided.first() {
            self.take(d.assignment, now_ms);
        }
    }

    /// Takes an assignment as Envoy does: an unchanged token bucket keeps its tokens; a new
    /// one starts as full as the token bucket it replaces was (whole tokens), or full when it
    /// replaces none.
    fn take(&mut self, next: Assignment, now_ms: u64) {
        let same = matches!(self.held, Some((held, _)) if held == next);
        if let (false, Assignment::TokenBucket { max_tokens, .. }) = (same, next) {
            let fill = match self.held {
                Some((
                    Assignment::TokenBucket {
                        max_tokens: old, ..
                    },
                    _,
                )) => self.tokens / f64::from(old),
                _ => 1.0,
            };
            self.tokens = (f64::from(max_tokens) * fill).floor();
        }
        self.held = Some((next, now_ms + next.ttl_seconds() * 1_000));
    }
}

/// What one Envoy got in one window.
#[derive(Debug, Clone, Copy)]
struct Served {
    admitted: u64,
    /// Admitted in the window's first 10 s.
    early: u64,
    wanted: u64,
    /// From its first request in the window to its first admitted one (ms), if any was.
    wait_ms: Option<u64>,
}

/// Runs `envoys` for `windows` minutes; returns per window what each Envoy got.
async fn simulate(mut envoys: Vec<SimEnvoy>, windows: usize) -> Vec<Vec<Served>> {
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
            if envoy.replica_down(t) {
                continue;
            }
            envoy.window_end(&rules, &limiter, START_MS + t).await;
            let due = match envoy.bucket {
                None => false,
                Some(Created::Now) => true,
                Some(Created::Reported) => t % envoy.report_every_ms == envoy.phase_ms,
            };
            if due {
                envoy.report(&rules, &limiter, START_MS + t).await;
            }
        }
        t += STEP_MS;
    }
    (0..windows)
        .map(|w| {
            envoys
                .iter()
                .map(|e| Served {
                    admitted: e.admitted[w],
                    early: e.early[w],
                    wanted: e.wanted[w],
                    wait_ms: e.first_admitted[w]
                        .zip(e.first_wanted[w])
                        .map(|(a, w)| a - w),
                })
                .collect()
        })
        .collect()
}

fn print_table(name: &str, limit: u64, result: &[Vec<Served>]) {
    println!("{name}: limit {limit} per window");
    for (w, envoys) in result.iter().enumerate() {
        let total: u64 = envoys.iter().map(|e| e.admitted).sum();
        let shares: Vec<String> = envoys
            .iter()
            .map(|e| {
                let share = e.admitted as f64 * 100.0 / total.max(1) as f64;
                let wait = e.wait_ms.map_or("-".to_owned(), |ms| ms.to_string());
                format!(
                    "{}/{} ({share:.0} %, first after {wait} ms)",
                    e.admitted, e.wanted
                )
            })
            .collect();
        let error = (total as f64 - limit as f64) * 100.0 / limit as f64;
        println!(
            "  window {w}: admitted {total} ({error:+.1} %), per Envoy admitted/wanted: {}",
            shares.join(", ")
        );
    }
}

/// Every window admits the limit within 10 %; the second Envoy (20 % of demand) gets at least
/// its demand's share, give or take one request; and in no window does an Envoy wait from its
/// first request to its first admitted one longer than a second plus one token at the pace it
/// is admitted at (a stream denied at a window's end gets a new bucket when the next starts,
/// not at its next report; a bucket that replaces a drained one starts empty, as in Envoy).
fn assert_shared_by_demand(result: &[Vec<Served>]) {
    for (w, envoys) in result.iter().enumerate() {
        let total: u64 = envoys.iter().map(|e| e.admitted).sum();
        assert!(
            total.abs_diff(120) <= 12,
            "window {w}: {total} admitted for a limit of 120"
        );
        let low = envoys[1].admitted;
        assert!(
            (low + 1) as f64 >= 0.2 * total as f64,
            "window {w}: the 20 % Envoy got {low} of {total} admitted"
        );
        for (i, e) in envoys.iter().enumerate() {
            let one_token_ms = 60_000 / e.admitted.max(1);
            assert!(
                e.wait_ms.is_some_and(|ms| ms <= 1_000 + one_token_ms),
                "window {w}: Envoy {i} waited {:?} ms for its first admission",
                e.wait_ms
            );
        }
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
    let envoys = vec![
        SimEnvoy::new(|_| 8.0, 0, s).reporting_every(5_000),
        SimEnvoy::new(|_| 2.0, 2_370, s).reporting_every(5_000),
    ];
    let result = simulate(envoys, 4).await;
    print_table("80/20 at 10 req/s, reports every 5 s", 120, &result);
    assert_shared_by_demand(&result);
}

/// Two Envoys (16 and 4 requests a second) whose bucket appears at `start_ms`, reporting every
/// 5 s, the 4-per-second one just before the other.
async fn appearing_at(start_ms: u64) -> Vec<Vec<Served>> {
    let s = RlqsSettings::default();
    let from = move |rate: f64| move |t: u64| if t >= start_ms { rate } else { 0.0 };
    let phase = start_ms % 5_000;
    let envoys = vec![
        SimEnvoy::new(from(16.0), phase + 10, s).reporting_every(5_000),
        SimEnvoy::new(from(4.0), phase, s).reporting_every(5_000),
    ];
    let result = simulate(envoys, 4).await;
    print_table(
        &format!("80/20 at 20 req/s from {start_ms} ms, reports every 5 s"),
        120,
        &result,
    );
    // Paced through its first window: the 20 % Envoy has at most half its part after 10 s.
    let early = result[1][1].early;
    assert!(
        early <= 12,
        "the 20 % Envoy had {early} in the first 10 s of its first window"
    );
    result
}

#[tokio::test]
async fn a_bucket_that_appears_everywhere_at_once_is_shared_by_demand_from_its_first_window() {
    // Half a second before a window, as in the real-Envoy test: in the first window the 20 %
    // Envoy is the first to report (it used to see itself as nearly all of the demand and
    // take its whole part in the first 10 s).
    let result = appearing_at(59_500).await;
    assert_shared_by_demand(&result[1..]);
    // Just after a window's start: nothing of a previous window to go by, only each Envoy's
    // first report (one request each).
    let result = appearing_at(60_300).await;
    assert_shared_by_demand(&result[2..]);
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
        let total: u64 = envoys.iter().map(|e| e.admitted).sum();
        assert!(
            total.abs_diff(120) <= 12,
            "window {w}: {total} admitted for a limit of 120"
        );
        let Served {
            admitted: quiet_admitted,
            wanted: quiet_wanted,
            ..
        } = envoys[4];
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
        let admitted: u64 = envoys.iter().map(|e| e.admitted).sum();
        let wanted: u64 = envoys.iter().map(|e| e.wanted).sum();
        assert!(
            admitted as f64 >= 0.95 * wanted as f64,
            "window {w}: {admitted} of {wanted} admitted under the limit"
        );
    }
}

#[tokio::test]
async fn whichever_envoy_reports_first_the_small_one_gets_its_share() {
    // The Envoy that reports first sees the other's count up to a report interval old; it
    // must not take the small one's part for it (16 and 4 requests a second, reports every
    // 5 s, phases 10 ms and 2.5 s apart in both orders, and across a window's end).
    for (a, b) in [(0, 10), (10, 0), (0, 2_500), (2_500, 0), (4_990, 0)] {
        let s = RlqsSettings::default();
        let envoys = vec![
            SimEnvoy::new(|_| 16.0, a, s).reporting_every(5_000),
            SimEnvoy::new(|_| 4.0, b, s).reporting_every(5_000),
        ];
        let result = simulate(envoys, 4).await;
        print_table(
            &format!("16 and 4 req/s, reports at phases {a} and {b} ms"),
            120,
            &result,
        );
        assert_shared_by_demand(&result);
    }
}

#[tokio::test]
async fn the_small_envoy_gets_its_share_after_its_replica_restarts() {
    // As in the real-Envoy test: 16 and 4 requests a second, reports every 5 s; the 4-per-second
    // Envoy's replica dies 13 s before a window ends and a new one takes its reports 2 s later
    // (its first report there covers the time since its last one). Its new stream has seen
    // none of the window before and only part of the one it starts in, while the counts in the
    // store hold all of its earlier demand.
    for down in [80_000, 100_000, 107_000] {
        let s = RlqsSettings::default();
        let envoys = vec![
            SimEnvoy::new(|_| 16.0, 10, s).reporting_every(5_000),
            SimEnvoy::new(|_| 4.0, 2_370, s)
                .reporting_every(5_000)
                .restarted(down, down + 2_000),
        ];
        let result = simulate(envoys, 4).await;
        print_table(
            &format!("16 and 4 req/s, the small one's replica down at {down} ms for 2 s"),
            120,
            &result,
        );
        assert_shared_by_demand(&result);
    }
}
