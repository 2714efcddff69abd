//! Reading typed values from the environment, with errors that name the variable.

use std::time::Duration;

use super::SettingsError;

pub(super) struct Reader<'a> {
    pub(super) env: &'a dyn Fn(&str) -> Option<String>,
}

impl Reader<'_> {
    pub(super) fn string(&self, name: &str, default: &str) -> String {
        (self.env)(name).unwrap_or_else(|| default.to_owned())
    }

    pub(super) fn parsed<T: std::str::FromStr>(
        &self,
        name: &str,
        default: T,
    ) -> Result<T, SettingsError>
    where
        T::Err: std::fmt::Display,
    {
        match (self.env)(name) {
            None => Ok(default),
            Some(v) if v.is_empty() => Ok(default),
            Some(v) => v
                .trim()
                .parse()
                .map_err(|e: T::Err| err(name, &v, e.to_string())),
        }
    }

    /// Go's `strconv.ParseBool`, as the reference's envconfig uses.
    pub(super) fn bool(&self, name: &str, default: bool) -> Result<bool, SettingsError> {
        match (self.env)(name).as_deref() {
            None | Some("") => Ok(default),
            Some("1" | "t" | "T" | "TRUE" | "true" | "True") => Ok(true),
            Some("0" | "f" | "F" | "FALSE" | "false" | "False") => Ok(false),
            Some(v) => Err(err(name, v, "expected true or false")),
        }
    }

    pub(super) fn duration(
        &self,
        name: &str,
        default: Duration,
    ) -> Result<Duration, SettingsError> {
        match (self.env)(name) {
            None => Ok(default),
            Some(v) if v.is_empty() => Ok(default),
            Some(v) => parse_duration(&v)
                .ok_or_else(|| err(name, &v, "expected a duration such as 500ms, 10s, 1m or 1h")),
        }
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
        total += Duration::try_from_secs_f64(number * scale).ok()?;
    }
    (!text.is_empty()).then_some(total)
}
