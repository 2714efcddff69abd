//! Deterministic reference models of the algorithms, written from their definitions in
//! docs/algorithms.md and independently of the limiter: exact rational arithmetic (a small
//! fraction type over u128), an injected clock in milliseconds, and brute force where a closed
//! form would only repeat the limiter's algebra (the sliding window's wait is found by trying
//! every millisecond).

use std::cmp::Ordering;
use std::collections::HashMap;

/// A non-negative fraction `num / den` (den > 0), compared exactly.
#[derive(Debug, Clone, Copy)]
pub struct Frac {
    pub num: u128,
    pub den: u128,
}

impl Frac {
    pub fn int(n: u128) -> Frac {
        Frac { num: n, den: 1 }
    }
    pub fn new(num: u128, den: u128) -> Frac {
        Frac { num, den }
    }
    pub fn add(self, o: Frac) -> Frac {
        Frac::new(self.num * o.den + o.num * self.den, self.den * o.den).reduce()
    }
    /// `self - o`, or 0 when `o` is larger.
    pub fn sub(self, o: Frac) -> Frac {
        let (a, b) = (self.num * o.den, o.num * self.den);
        Frac::new(a.saturating_sub(b), self.den * o.den).reduce()
    }
    pub fn mul(self, o: Frac) -> Frac {
        Frac::new(self.num * o.num, self.den * o.den).reduce()
    }
    pub fn min(self, o: Frac) -> Frac {
        if self.cmp(&o) == Ordering::Greater {
            o
        } else {
            self
        }
    }
    pub fn floor(self) -> u128 {
        self.num / self.den
    }
    pub fn ceil(self) -> u128 {
        self.num.div_ceil(self.den)
    }
    fn reduce(self) -> Frac {
        fn gcd(a: u128, b: u128) -> u128 {
            if b == 0 { a } else { gcd(b, a % b) }
        }
        let g = gcd(self.num, self.den).max(1);
        Frac::new(self.num / g, self.den / g)
    }
    pub fn cmp(&self, o: &Frac) -> Ordering {
        (self.num * o.den).cmp(&(o.num * self.den))
    }
}

/// What the model says of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub over: bool,
    pub remaining: u64,
    pub reset_ms: u64,
}

/// Sliding window: per-window hit counts (every counted hit, admitted or not, as the store
/// counts them); estimate = current + previous × (share of the previous window still inside
/// the sliding period).
#[derive(Debug, Default)]
pub struct Sliding {
    pub limit: u64,
    pub period_ms: u64,
    counts: HashMap<(String, u64), u64>,
}

impl Sliding {
    pub fn new(limit: u64, period_ms: u64) -> Self {
        Sliding {
            limit,
            period_ms,
            counts: HashMap::new(),
        }
    }

    fn estimate(&self, key: &str, now: u64, extra: u64) -> Frac {
        let window = now / self.period_ms;
        let cur = self
            .counts
            .get(&(key.to_owned(), window))
            .copied()
            .unwrap_or(0)
            + extra;
        let prev = match window {
            0 => 0,
            w => self
                .counts
                .get(&(key.to_owned(), w - 1))
                .copied()
                .unwrap_or(0),
        };
        let into = now % self.period_ms;
        let weight = Frac::new(
            u128::from(self.period_ms - into),
            u128::from(self.period_ms),
        );
        Frac::int(u128::from(cur)).add(Frac::int(u128::from(prev)).mul(weight))
    }

    pub fn call(&mut self, key: &str, now: u64, hits: u64, refund: bool) -> Answer {
        let window = now / self.period_ms;
        let count = self.counts.entry((key.to_owned(), window)).or_insert(0);
        *count = if refund {
            count.saturating_sub(hits)
        } else {
            *count + hits
        };
        let estimate = self.estimate(key, now, 0);
        let limit = Frac::int(u128::from(self.limit));
        let over = !refund && estimate.cmp(&limit) == Ordering::Greater;
        let to_end = self.period_ms - now % self.period_ms;
        let reset_ms = if over {
            // The first later millisecond at which one more hit would be admitted.
            (1..=3 * self.period_ms)
                .find(|d| {
                    self.estimate(key, now + d, 0).add(Frac::int(1)).cmp(&limit)
                        != Ordering::Greater
                })
                .unwrap_or(to_end)
        } else {
            to_end
        };
        Answer {
            over,
            remaining: if over {
                0
            } else {
                limit.sub(estimate).floor() as u64
            },
            reset_ms,
        }
    }
}

/// Token bucket: tokens refill continuously at `rate` per period up to `capacity`; a take of
/// n happens entirely or not at all.
#[derive(Debug, Default)]
pub struct Bucket {
    pub rate: u64,
    pub capacity: u64,
    pub period_ms: u64,
    state: HashMap<String, (Frac, u64)>,
}

impl Bucket {
    pub fn new(rate: u64, burst: u64, period_ms: u64) -> Self {
        Bucket {
            rate,
            capacity: rate + burst,
            period_ms,
            state: HashMap::new(),
        }
    }

    pub fn call(&mut self, key: &str, now: u64, hits: u64, refund: bool) -> Answer {
        let capacity = Frac::int(u128::from(self.capacity));
        let (tokens, at) = self.state.get(key).copied().unwrap_or((capacity, now));
        let refill = Frac::new(
            u128::from(now - at) * u128::from(self.rate),
            u128::from(self.period_ms),
        );
        let mut tokens = tokens.add(refill).min(capacity);
        let wanted = Frac::int(u128::from(hits.max(1)));
        let over = !refund && tokens.cmp(&wanted) == Ordering::Less;
        if refund {
            tokens = tokens.add(Frac::int(u128::from(hits))).min(capacity);
        } else if !over {
            tokens = tokens.sub(Frac::int(u128::from(hits)));
        }
        self.state.insert(key.to_owned(), (tokens, now));
        let whole = tokens.floor();
        // Milliseconds for `missing` tokens to come back: missing × period / rate, rounded up.
        let wait = |missing: Frac| {
            missing
                .mul(Frac::new(u128::from(self.period_ms), u128::from(self.rate)))
                .ceil() as u64
        };
        let reset_ms = if over {
            wait(Frac::int(whole + 1).sub(tokens))
        } else {
            wait(capacity.sub(tokens))
        };
        Answer {
            over,
            // Over the limit, remaining is 0 (as for every algorithm and the reference).
            remaining: if over { 0 } else { whole as u64 },
            reset_ms,
        }
    }
}

/// Concurrency: requests in flight per key; a lease is forgotten `period` after its last change.
#[derive(Debug, Default)]
pub struct Leases {
    pub limit: u64,
    pub period_ms: u64,
    state: HashMap<String, (u64, u64)>,
}

impl Leases {
    pub fn new(limit: u64, period_ms: u64) -> Self {
        Leases {
            limit,
            period_ms,
            state: HashMap::new(),
        }
    }

    pub fn call(&mut self, key: &str, now: u64, hits: u64, refund: bool) -> Answer {
        let (count, changed) = self.state.get(key).copied().unwrap_or((0, now));
        let count = if now / 1000 >= changed / 1000 + self.period_ms / 1000 {
            0
        } else {
            count
        };
        let after = if refund {
            count.saturating_sub(hits)
        } else {
            count + hits
        };
        // Every lease and every release moves the expiry; a check (0 hits) does not.
        if hits > 0 || refund {
            self.state.insert(key.to_owned(), (after, now));
        }
        let over = !refund && after > self.limit;
        Answer {
            over,
            remaining: if over {
                0
            } else {
                self.limit.saturating_sub(after)
            },
            reset_ms: self.period_ms,
        }
    }
}
