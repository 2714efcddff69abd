//! A `rate_limit`'s rate (`unit`, `unit_multiplier`, `algorithm`, `burst`) and what it gets when
//! the store fails (`on_store_failure`, `fail_open`), each checked
//! against what the others allow, with file:line:col and what belongs there on every error.
//!
//! Must not touch: the rest of the descriptor (that is `compile`'s), YAML parsing.

use super::compile::FileCompiler;
use super::raw::{Pos, RawRateLimit};
use crate::rules::{Algorithm, MAX_PERIOD_SECONDS, PerUnit, Period, Rate, StoreFailure, Unit};

impl FileCompiler<'_> {
    /// The limit's rate: unit, period and algorithm, each checked against what the others allow.
    /// `None` (with every error recorded) when any part is wrong.
    pub(super) fn rate(&mut self, raw: &RawRateLimit, pos: Pos, path: &str) -> Option<Rate> {
        self.note_extensions(raw, path);
        let at = |s: Option<Pos>| s.unwrap_or(pos);
        let unit = raw.unit.as_ref().and_then(|u| Unit::parse(&u.value));
        let unit_pos = at(raw.unit.as_ref().map(|u| Pos::from(u.referenced)));
        let unit_text = raw.unit.as_ref().map_or("", |u| u.value.as_str());
        if raw.unlimited {
            let mut ok = true;
            if unit.is_some() {
                let message = "should not specify rate limit unit when unlimited";
                self.error(unit_pos, &format!("{path}.unit"), message);
                ok = false;
            }
            for (key, found) in [
                (
                    "algorithm",
                    raw.algorithm.as_ref().map(|a| Pos::from(a.referenced)),
                ),
                (
                    "unit_multiplier",
                    raw.unit_multiplier
                        .as_ref()
                        .map(|m| Pos::from(m.referenced)),
                ),
                ("burst", raw.burst.as_ref().map(|b| Pos::from(b.referenced))),
            ] {
                if let Some(found) = found {
                    let message = format!(
                        "an unlimited rate_limit is never counted, so `{key}` means nothing here \
                         (remove it, or remove `unlimited: true`)"
                    );
                    self.error(found, &format!("{path}.{key}"), message);
                    ok = false;
                }
            }
            return ok.then_some(Rate::Unlimited {
                written: raw.requests_per_unit,
            });
        }
        let Some(unit) = unit else {
            let message = format!(
                "invalid rate limit unit '{unit_text}' (one of second, minute, hour, day, week, \
                 month, year)"
            );
            self.error(unit_pos, &format!("{path}.unit"), message);
            return None;
        };
        let period = self.period(raw, unit, path)?;
        let algorithm = self.algorithm(raw, pos, path)?;
        let rate = PerUnit {
            requests_per_unit: raw.requests_per_unit,
            period,
            algorithm,
        };
        self.within_store(&rate, raw, pos, path)
            .then_some(Rate::Limited(rate))
    }

    /// Whether the store in use counts `rate` exactly; an error naming the store otherwise.
    fn within_store(&mut self, rate: &PerUnit, raw: &RawRateLimit, pos: Pos, path: &str) -> bool {
        if self.store.windows_only
            && matches!(
                rate.algorithm,
                Algorithm::TokenBucket { .. } | Algorithm::Concurrency
            )
        {
            let (at, path) = match &raw.algorithm {
                Some(a) => (Pos::from(a.referenced), format!("{path}.algorithm")),
                None => (pos, path.to_owned()),
            };
            let message = format!(
                "{} counts fixed_window and sliding_window only (memcached's classic commands \
                 have no compare-and-swap); use one of those, or memcached 1.6+ with meta \
                 commands (MEMCACHE_CLASSIC_PROTOCOL=false)",
                self.store.name
            );
            self.error(at, &path, message);
            return false;
        }
        let (Algorithm::TokenBucket { burst }, Some(bound)) =
            (rate.algorithm, self.store.bucket_capacity_period_ms)
        else {
            return true;
        };
        let capacity = u128::from(rate.requests_per_unit) + u128::from(burst);
        let period_ms = rate.period.length().as_millis();
        if capacity * period_ms < bound {
            return true;
        }
        let (at, path) = match &raw.burst {
            Some(b) => (Pos::from(b.referenced), format!("{path}.burst")),
            None => (pos, path.to_owned()),
        };
        let message = format!(
            "a token bucket of capacity {capacity} (requests_per_unit + burst) over {period_ms} \
             ms is more than {} counts exactly (capacity x period in ms must stay below {bound}); \
             lower requests_per_unit or burst, or use a shorter period",
            self.store.name
        );
        self.error(at, &path, message);
        false
    }

    /// Records every key of this map that only Turnstile reads.
    fn note_extensions(&mut self, raw: &RawRateLimit, path: &str) {
        let used = [
            (
                "unit_multiplier",
                raw.unit_multiplier.as_ref().map(|s| s.referenced),
            ),
            ("algorithm", raw.algorithm.as_ref().map(|s| s.referenced)),
            ("burst", raw.burst.as_ref().map(|s| s.referenced)),
            ("fail_open", raw.fail_open.as_ref().map(|s| s.referenced)),
            (
                "on_store_failure",
                raw.on_store_failure.as_ref().map(|s| s.referenced),
            ),
        ];
        for (key, at) in used {
            if let Some(at) = at {
                let at = Pos::from(at);
                self.extensions.push(format!(
                    "{}:{}:{}: {path}.{key}: a Turnstile extension; envoyproxy/ratelimit refuses \
                     this file (unknown key '{key}')",
                    self.origin, at.line, at.column
                ));
            }
        }
    }

    /// `unit` × `unit_multiplier`, at least one unit and at most ten years.
    fn period(&mut self, raw: &RawRateLimit, unit: Unit, path: &str) -> Option<Period> {
        let Some(multiplier) = &raw.unit_multiplier else {
            return Some(Period::one(unit));
        };
        let at = Pos::from(multiplier.referenced);
        let period = u32::try_from(multiplier.value)
            .ok()
            .and_then(|m| Period::new(unit, m));
        if period.is_none() {
            let message = if multiplier.value == 0 {
                "unit_multiplier must be at least 1 (the period is unit × unit_multiplier)"
                    .to_owned()
            } else {
                format!(
                    "unit_multiplier {} makes a period longer than 10 years (at most {} for unit \
                     '{}')",
                    multiplier.value,
                    MAX_PERIOD_SECONDS / unit.seconds(),
                    unit.name().to_ascii_lowercase()
                )
            };
            self.error(at, &format!("{path}.unit_multiplier"), message);
        }
        period
    }

    /// `on_store_failure` (`unavailable`, `open` or `local`) or `fail_open` (`true` = open);
    /// `None` when neither is given (the process-wide mode). Both given is an error, as is a
    /// name that is not a mode.
    pub(super) fn on_store_failure(
        &mut self,
        raw: &RawRateLimit,
        path: &str,
    ) -> Result<Option<StoreFailure>, ()> {
        let fail_open = raw.fail_open.as_ref().map(|f| f.value);
        let Some(named) = &raw.on_store_failure else {
            return Ok(fail_open.and_then(|open| open.then_some(StoreFailure::Open)));
        };
        let at = Pos::from(named.referenced);
        let key = format!("{path}.on_store_failure");
        let Some(mode) = StoreFailure::named(&named.value) else {
            let message = format!(
                "unknown store failure mode '{}' (one of {})",
                named.value,
                StoreFailure::NAMES.join(", ")
            );
            self.error(at, &key, message);
            return Err(());
        };
        if fail_open.is_some() {
            let message = "give either on_store_failure or fail_open, not both (fail_open: true is on_store_failure: open)";
            self.error(at, &key, message);
            return Err(());
        }
        Ok(Some(mode))
    }

    /// `algorithm` (default fixed_window) and `burst` (token_bucket only).
    fn algorithm(&mut self, raw: &RawRateLimit, pos: Pos, path: &str) -> Option<Algorithm> {
        let name = raw
            .algorithm
            .as_ref()
            .map_or("fixed_window", |a| a.value.as_str());
        let burst = raw.burst.as_ref().map_or(0, |b| b.value);
        let algorithm = match name {
            "fixed_window" => Algorithm::FixedWindow,
            "sliding_window" => Algorithm::SlidingWindow,
            "token_bucket" => Algorithm::TokenBucket { burst },
            "concurrency" => Algorithm::Concurrency,
            other => {
                let at = raw
                    .algorithm
                    .as_ref()
                    .map_or(pos, |a| Pos::from(a.referenced));
                let message = format!(
                    "unknown algorithm '{other}' (one of {})",
                    Algorithm::NAMES.join(", ")
                );
                self.error(at, &format!("{path}.algorithm"), message);
                return None;
            }
        };
        if let Some(b) = &raw.burst
            && !matches!(algorithm, Algorithm::TokenBucket { .. })
        {
            let message = format!(
                "burst applies only to `algorithm: token_bucket` (this limit is {})",
                algorithm.name()
            );
            self.error(Pos::from(b.referenced), &format!("{path}.burst"), message);
            return None;
        }
        Some(algorithm)
    }
}
