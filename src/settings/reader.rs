//! Reading typed values from the environment, with errors that name the variable. A value
//! that cannot be used is reported to the reader, which keeps every problem, and the read goes
//! on with the default: one start-up names every bad setting at once.

use std::cell::RefCell;
use std::time::Duration;

use super::SettingsError;

pub(super) struct Reader<'a> {
    pub(super) env: &'a dyn Fn(&str) -> Option<String>,
    problems: RefCell<Vec<SettingsError>>,
}

impl<'a> Reader<'a> {
    pub(super) fn new(env: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Reader {
            env,
            problems: RefCell::new(Vec::new()),
        }
    }

    /// Keeps `problem`; the settings will not be built.
    pub(super) fn report(&self, problem: SettingsError) {
        self.problems.borrow_mut().push(problem);
    }

    /// The value of `result`, or `fallback` with its error reported.
    pub(super) fn or<T>(&self, result: Result<T, SettingsError>, fallback: T) -> T {
        result.unwrap_or_else(|problem| {
            self.report(problem);
            fallback
        })
    }

    /// Every problem reported, in the order found.
    pub(super) fn into_problems(self) -> Vec<SettingsError> {
        self.problems.into_inner()
    }
}

impl Reader<'_> {
    pub(super) fn string(&self, name: &str, default: &str) -> String {
        (self.env)(name).unwrap_or_else(|| default.to_owned())
    }

    /// A client certificate and its key, given as each variable's name and value (if set):
    /// both, or neither. One without the other is reported, naming the one missing, in the
    /// same words for every client (memcached, Redis, xDS, OTLP).
    pub(super) fn identity(
        &self,
        (cert_name, cert): (&str, Option<String>),
        (key_name, key): (&str, Option<String>),
    ) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
        match (cert, key) {
            (Some(cert), Some(key)) => Some((cert.into(), key.into())),
            (None, None) => None,
            (Some(_), None) => {
                self.report(unpaired(key_name, cert_name));
                None
            }
            (None, Some(_)) => {
                self.report(unpaired(cert_name, key_name));
                None
            }
        }
    }

    /// The value of `name` when it is set and not blank.
    pub(super) fn non_empty(&self, name: &str) -> Option<String> {
        (self.env)(name).filter(|v| !v.trim().is_empty())
    }

    pub(super) fn parsed<T: std::str::FromStr>(&self, name: &str, default: T) -> T
    where
        T::Err: std::fmt::Display,
    {
        match (self.env)(name) {
            None => default,
            Some(v) if v.is_empty() => default,
            Some(v) => {
                let parsed = v
                    .trim()
                    .parse()
                    .map_err(|e: T::Err| err(name, &v, e.to_string()));
                self.or(parsed, default)
            }
        }
    }

    /// Go's `strconv.ParseBool`, as the reference's envconfig uses.
    pub(super) fn bool(&self, name: &str, default: bool) -> bool {
        match (self.env)(name).as_deref() {
            None | Some("") => default,
            Some("1" | "t" | "T" | "TRUE" | "true" | "True") => true,
            Some("0" | "f" | "F" | "FALSE" | "false" | "False") => false,
            Some(v) => self.or(Err(err(name, v, "expected true or false")), default),
        }
    }

    /// A duration within `span`, so that no value accepted here can overflow a deadline or
    /// fail every call.
    pub(super) fn duration(&self, name: &str, default: Duration, span: Span) -> Duration {
        let value = match (self.env)(name) {
            None => return default,
            Some(v) if v.trim().is_empty() => return default,
            Some(v) => v,
        };
        self.or(Self::checked_duration(name, &value, span), default)
    }

    fn checked_duration(name: &str, value: &str, span: Span) -> Result<Duration, SettingsError> {
        let Some(parsed) = parse_duration(value) else {
            return Err(err(
                name,
                value,
                format!(
                    "expected a duration such as 500ms, 10s, 1m or 1h, {}",
                    span.describe()
                ),
            ));
        };
        if span.admits(parsed) {
            Ok(parsed)
        } else {
            Err(err(name, value, span.describe()))
        }
    }

    /// A whole number within `min..=max`.
    pub(super) fn number<T>(&self, name: &str, default: T, min: T, max: T) -> T
    where
        T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
    {
        let value = match (self.env)(name) {
            None => return default,
            Some(v) if v.trim().is_empty() => return default,
            Some(v) => v,
        };
        match value.trim().parse::<T>() {
            Ok(n) if n >= min && n <= max => n,
            _ => {
                let within = format!("a whole number from {min} to {max}");
                self.or(Err(err(name, &value, within)), default)
            }
        }
    }
}

/// The durations a setting accepts: `min..=max`, and 0 where 0 turns the feature off.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    min: Duration,
    max: Duration,
    zero_is_off: bool,
}

/// The longest duration any setting accepts (10 years): far beyond every meaningful value, and
/// far below what a deadline (`Instant + duration`) can hold.
pub(super) const LONGEST: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// A counter store's deadline (`MEMCACHE_TIMEOUT`, `REDIS_TIMEOUT`): at least 10 ms (it also
/// bounds connecting, which a shorter one fails even on loopback), at most an hour.
pub(super) const STORE_TIMEOUT: Span =
    Span::within(Duration::from_millis(10), Duration::from_secs(3600));

/// `EXPIRATION_JITTER_MAX_SECONDS`: at most a day, so that an expiry stays a time the store
/// can hold.
pub(super) fn jitter(r: &Reader<'_>) -> u64 {
    r.number("EXPIRATION_JITTER_MAX_SECONDS", 300u64, 0, 86_400)
}

impl Span {
    /// `min..=max`.
    pub(super) const fn within(min: Duration, max: Duration) -> Span {
        Span {
            min,
            max,
            zero_is_off: false,
        }
    }

    /// 0 (off), or `min..=max`.
    pub(super) const fn off_or(min: Duration, max: Duration) -> Span {
        Span {
            min,
            max,
            zero_is_off: true,
        }
    }

    fn admits(&self, d: Duration) -> bool {
        (self.zero_is_off && d.is_zero()) || (self.min..=self.max).contains(&d)
    }

    fn describe(&self) -> String {
        let text = |d: Duration| humantime::format_duration(d).to_string();
        let off = if self.zero_is_off { " (or 0: off)" } else { "" };
        format!("between {} and {}{off}", text(self.min), text(self.max))
    }
}

pub(super) fn err(name: &str, value: &str, problem: impl Into<String>) -> SettingsError {
    SettingsError {
        name: name.to_owned(),
        value: value.to_owned(),
        problem: problem.into(),
    }
}

/// Parses a Go-style duration made of number+unit parts (`ns`, `us`, `ms`, `s`, `m`, `h`), e.g.
/// `1h30m` or `250ms`. A bare `0` is zero.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(Duration::try_from_secs_f64(number * scale).ok()?)?;
    }
    (!text.is_empty()).then_some(total)
}

/// `missing` is unset while `set`, its other half, is set.
fn unpaired(missing: &str, set: &str) -> SettingsError {
    let why = format!("needed with {set}: a client certificate and its key go together");
    err(missing, "", &why)
}
