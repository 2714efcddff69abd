//! Who is limited: per rule, the descriptor values answered OVER_LIMIT and those near their
//! limit (hits above `NEAR_LIMIT_RATIO` of it, 80 % by default), over the last two to three
//! minutes, in bounded `SpaceSaving` summaries. `GET /debug/top` and the status page read
//! [`TopLimited::snapshot`]; `TOP_LIMITED_SERIES` renders the first N of each rule.
//!
//! **Window.** Time is cut into epochs of [`EPOCH`] (one minute); a rule keeps the summaries of
//! the current epoch and the [`EPOCHS`] - 1 before it, and a snapshot merges them: the last
//! two full minutes and the current one so far.
//!
//! **Error bound.** Within one epoch of total weight `Nᵢ`, an estimate is at most `Nᵢ / ENTRIES`
//! above the truth. Merged, an item absent from a full epoch may have had up to that epoch's
//! lightest count there, which is added to its estimate and its error; so every reported
//! `count` is at least the value's true refusals in the window and at most `error` above them,
//! with `error ≤ N / ENTRIES` for the window's `N` refusals of that rule. Any value with more
//! than `N / ENTRIES` refusals is listed.
//!
//! **Memory.** A value is identified by the 128-bit XXH3 of its entries and shown by at most
//! [`SHOWN_BYTES`] of them (cut at a character boundary, marked `cut`). Each summary holds
//! [`ENTRIES`] values; a rule has two summaries (over, near) per epoch; at most [`MAX_RULES`]
//! rules are tracked, refusals of further rules are counted as `untracked`. Measured with a
//! counting allocator (tests/allocations.rs): one rule under 1,000,000 distinct refused values
//! holds 104,941 bytes (about 102 KiB), within [`RULE_BYTES`]; [`MAX_RULES`] rules at most
//! about 14 MiB.
//!
//! Must not touch: the decision (it is read, never made), rendering outside its own JSON.

mod summary;

pub(crate) use summary::SpaceSaving;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;

use crate::clock::{Clock, SystemClock};

/// Values kept per summary.
pub const ENTRIES: usize = 32;
/// Epochs kept per rule: the current one and the ones before it.
pub const EPOCHS: usize = 3;
/// One epoch, in milliseconds.
pub const EPOCH: u64 = 60_000;
/// Rules with a summary; refusals of rules past this are counted, not summarised.
pub const MAX_RULES: usize = 128;
/// Bytes of a descriptor's keys and values shown per value.
pub const SHOWN_BYTES: usize = 200;
/// The measured bound of one rule's summaries, in bytes (every epoch full of values shown at
/// [`SHOWN_BYTES`]): measured 104,941 bytes, rounded up.
pub const RULE_BYTES: usize = 112 * 1024;

/// A descriptor value as shown: its entries, cut to [`SHOWN_BYTES`].
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Shown {
    /// `[key, value]` pairs as the client sent them (JSON escapes them).
    pub entries: Vec<[String; 2]>,
    /// Whether entries or bytes were left out.
    pub cut: bool,
}

/// A summarised value: its identity and how it is shown.
#[derive(Debug, Clone)]
struct Value {
    id: u128,
    shown: Arc<Shown>,
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        self.id == other.id
    }
}
impl Eq for Value {}
impl std::hash::Hash for Value {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}
impl std::borrow::Borrow<u128> for Value {
    fn borrow(&self) -> &u128 {
        &self.id
    }
}

/// One epoch of a rule.
#[derive(Debug)]
struct Epoch {
    number: u64,
    over: SpaceSaving<Value>,
    near: SpaceSaving<Value>,
}

impl Epoch {
    fn new(number: u64) -> Epoch {
        Epoch {
            number,
            over: SpaceSaving::new(ENTRIES),
            near: SpaceSaving::new(ENTRIES),
        }
    }
}

/// A rule's epochs, a ring indexed by epoch number.
#[derive(Debug)]
struct RuleTop {
    epochs: Vec<Epoch>,
}

/// One listed value of a rule.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Listed {
    /// The descriptor as the client sent it.
    pub descriptor: Shown,
    /// Hits in the window: at least the true number, at most `error` above it.
    pub count: u64,
    /// How far `count` may be above the truth.
    pub error: u64,
    /// `count` over the rule's hits of this kind in the window.
    pub share: f64,
}

/// A rule's summary over the window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RuleSummary {
    /// The rule (`domain.key_value.key`, as `/rlconfig` names it).
    pub rule: String,
    /// Hits answered OVER_LIMIT in the window.
    pub refused: u64,
    /// The values refused, heaviest first.
    pub over_limit: Vec<Listed>,
    /// Hits above the near-limit threshold and within the limit in the window.
    pub near: u64,
    /// The values near their limit, heaviest first.
    pub near_limit: Vec<Listed>,
}

/// The whole snapshot (`/debug/top`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TopSnapshot {
    /// The window: from this many milliseconds ago to now.
    pub window_ms: u64,
    /// Values kept per rule and kind; `error ≤ refused / entries`.
    pub entries: usize,
    /// Rules, the most refused first.
    pub rules: Vec<RuleSummary>,
    /// Hits of rules past [`MAX_RULES`], not summarised.
    pub untracked: u64,
}

/// The summaries of every rule.
#[derive(Debug)]
pub struct TopLimited {
    clock: Arc<dyn Clock>,
    rules: Mutex<HashMap<String, Arc<Mutex<RuleTop>>>>,
    untracked: AtomicU64,
}

impl Default for TopLimited {
    fn default() -> Self {
        TopLimited::new(Arc::new(SystemClock))
    }
}

/// Which summary a hit goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Answered OVER_LIMIT.
    Over,
    /// Above the near-limit threshold, within the limit.
    Near,
}

impl TopLimited {
    /// Summaries on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> TopLimited {
        TopLimited {
            clock,
            rules: Mutex::default(),
            untracked: AtomicU64::new(0),
        }
    }

    /// Adds `hits` of `kind` to the descriptor `entries` (key, value pairs) under `rule`.
    pub fn record<'e>(
        &self,
        rule: &str,
        entries: impl Iterator<Item = (&'e str, &'e str)> + Clone,
        kind: Kind,
        hits: u64,
    ) {
        if hits == 0 {
            return;
        }
        let Some(top) = self.rule(rule) else {
            self.untracked.fetch_add(hits, Ordering::Relaxed);
            return;
        };
        let id = identity(entries.clone());
        let number = self.clock.now().millis() / EPOCH;
        let mut top = top.lock().unwrap_or_else(PoisonError::into_inner);
        let epoch = top.current(number);
        let summary = match kind {
            Kind::Over => &mut epoch.over,
            Kind::Near => &mut epoch.near,
        };
        summary.add(&id, hits, || Value {
            id,
            shown: Arc::new(shown(entries)),
        });
    }

    /// A rule's summaries, made on its first hit while fewer than [`MAX_RULES`] exist.
    fn rule(&self, rule: &str) -> Option<Arc<Mutex<RuleTop>>> {
        let mut rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(top) = rules.get(rule) {
            return Some(Arc::clone(top));
        }
        if rules.len() >= MAX_RULES {
            return None;
        }
        let top = Arc::new(Mutex::new(RuleTop { epochs: Vec::new() }));
        rules.insert(rule.to_owned(), Arc::clone(&top));
        Some(top)
    }

    /// Every rule's summary over the window, the first `limit` values of each kind.
    pub fn snapshot(&self, limit: usize) -> TopSnapshot {
        let number = self.clock.now().millis() / EPOCH;
        let rules: Vec<(String, Arc<Mutex<RuleTop>>)> = {
            let rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
            rules
                .iter()
                .map(|(k, v)| (k.clone(), Arc::clone(v)))
                .collect()
        };
        let mut out: Vec<RuleSummary> = rules
            .into_iter()
            .map(|(rule, top)| {
                let top = top.lock().unwrap_or_else(PoisonError::into_inner);
                let live = || top.epochs.iter().filter(|e| live(e.number, number));
                let (refused, over_limit) = merge(live().map(|e| &e.over), limit);
                let (near, near_limit) = merge(live().map(|e| &e.near), limit);
                RuleSummary {
                    rule,
                    refused,
                    over_limit,
                    near,
                    near_limit,
                }
            })
            .filter(|r| r.refused + r.near > 0)
            .collect();
        out.sort_by(|a, b| b.refused.cmp(&a.refused).then(a.rule.cmp(&b.rule)));
        TopSnapshot {
            window_ms: EPOCH * (EPOCHS as u64 - 1) + self.clock.now().millis() % EPOCH,
            entries: ENTRIES,
            rules: out,
            untracked: self.untracked.load(Ordering::Relaxed),
        }
    }
}

impl RuleTop {
    /// The epoch `number`, replacing the oldest when it is new.
    fn current(&mut self, number: u64) -> &mut Epoch {
        let slot = (number % EPOCHS as u64) as usize;
        while self.epochs.len() <= slot {
            // A slot never used: no epoch number matches it.
            self.epochs.push(Epoch::new(u64::MAX));
        }
        if self.epochs[slot].number != number {
            self.epochs[slot] = Epoch::new(number);
        }
        &mut self.epochs[slot]
    }
}

/// Whether epoch `epoch` is in the window that ends in epoch `now`.
fn live(epoch: u64, now: u64) -> bool {
    epoch <= now && now - epoch < EPOCHS as u64
}

/// The epochs' summaries merged: the total and the first `limit` values with their bounds.
fn merge<'s>(
    summaries: impl Iterator<Item = &'s SpaceSaving<Value>>,
    limit: usize,
) -> (u64, Vec<Listed>) {
    let summaries: Vec<&SpaceSaving<Value>> = summaries.collect();
    let total: u64 = summaries.iter().map(|s| s.total()).sum();
    let mut merged: HashMap<u128, (Arc<Shown>, u64, u64)> = HashMap::new();
    for s in &summaries {
        for e in s.heaviest() {
            let slot = merged
                .entry(e.item.id)
                .or_insert_with(|| (Arc::clone(&e.item.shown), 0, 0));
            slot.1 += e.count;
            slot.2 += e.error;
        }
    }
    // A value absent from a full epoch may have weighed up to that epoch's lightest count.
    for (id, slot) in merged.iter_mut() {
        for s in &summaries {
            let heaviest = s.heaviest();
            if s.len() == ENTRIES && !heaviest.iter().any(|e| e.item.id == *id) {
                let lightest = heaviest.last().map_or(0, |e| e.count);
                slot.1 += lightest;
                slot.2 += lightest;
            }
        }
    }
    let mut listed: Vec<Listed> = merged
        .into_values()
        .map(|(shown, count, error)| Listed {
            descriptor: (*shown).clone(),
            count,
            error,
            share: if total == 0 {
                0.0
            } else {
                count.min(total) as f64 / total as f64
            },
        })
        .collect();
    listed.sort_by(|a, b| b.count.cmp(&a.count).then(a.error.cmp(&b.error)));
    listed.truncate(limit);
    (total, listed)
}

/// The 128-bit XXH3 of the entries, each length-prefixed (no two lists share an encoding).
fn identity<'e>(entries: impl Iterator<Item = (&'e str, &'e str)>) -> u128 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for (key, value) in entries {
        for part in [key, value] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
    }
    hasher.digest128()
}

/// The entries as shown: whole while they fit in [`SHOWN_BYTES`], the rest cut.
fn shown<'e>(entries: impl Iterator<Item = (&'e str, &'e str)>) -> Shown {
    let mut left = SHOWN_BYTES;
    let mut out = Shown {
        entries: Vec::new(),
        cut: false,
    };
    for (key, value) in entries {
        if left == 0 {
            out.cut = true;
            break;
        }
        let key = cut(key, &mut left, &mut out.cut);
        let value = cut(value, &mut left, &mut out.cut);
        out.entries.push([key, value]);
    }
    out.entries.shrink_to_fit();
    out
}

/// `text` within `left` bytes (at a character boundary), `left` lowered by what was taken.
fn cut(text: &str, left: &mut usize, was_cut: &mut bool) -> String {
    let mut end = text.len().min(*left);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    *was_cut |= end < text.len();
    *left -= end;
    text[..end].to_owned()
}

#[cfg(test)]
mod tests;
