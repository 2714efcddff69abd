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

use turnstile::clock::{Clock, ManualClock, UnixMillis};
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
            .on_report("rlqs", vec![usage], rules, limiter, UnixMillis::new(now_ms))
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
            .next_window_end()
            .is_none_or(|end| end > UnixMillis::new(now_ms))
        {
            return;
        }
        let decided = self
            .stream
            .refresh(rules, limiter.shadow_mode(), UnixMillis::new(now_ms));
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

mod scenarios;
