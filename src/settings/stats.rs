//! Settings of the stats sinks: `USE_PROMETHEUS`, `USE_STATSD`, `USE_DOG_STATSD` with its
//! mogrifiers, and `DISABLE_STATS`, which turns them all off.

use super::reader::{Reader, err};
use super::{Prometheus, SettingsError, listen_addr};

/// The sinks the environment asks for.
pub(super) struct Sinks {
    pub(super) prometheus: Option<Prometheus>,
    pub(super) statsd: Option<String>,
    pub(super) dogstatsd: Option<DogStatsd>,
    pub(super) disabled: bool,
}

/// Every sink setting; `DISABLE_STATS` wins over every sink, as in the reference.
pub(super) fn sinks(r: &Reader<'_>) -> Sinks {
    let disabled = r.bool("DISABLE_STATS", false);
    let (prometheus, statsd) = (prometheus(r), statsd(r));
    let dogstatsd = r.or(dogstatsd(r, statsd.is_some(), prometheus.is_some()), None);
    if disabled {
        return Sinks {
            prometheus: None,
            statsd: None,
            dogstatsd: None,
            disabled,
        };
    }
    Sinks {
        prometheus,
        statsd,
        dogstatsd,
        disabled,
    }
}

/// `USE_PROMETHEUS` with `PROMETHEUS_ADDR` and `PROMETHEUS_PATH`.
fn prometheus(r: &Reader<'_>) -> Option<Prometheus> {
    r.bool("USE_PROMETHEUS", false).then(|| Prometheus {
        addr: listen_addr(&r.string("PROMETHEUS_ADDR", ":9090")),
        path: r.string("PROMETHEUS_PATH", "/metrics"),
    })
}

/// `USE_STATSD` with `STATSD_HOST` and `STATSD_PORT`.
fn statsd(r: &Reader<'_>) -> Option<String> {
    if !r.bool("USE_STATSD", false) {
        return None;
    }
    Some(format!(
        "{}:{}",
        r.string("STATSD_HOST", "localhost"),
        r.parsed("STATSD_PORT", 8125u16)
    ))
}

/// The DogStatsD sink (`USE_DOG_STATSD`): UDP to `STATSD_HOST:STATSD_PORT`, tags in
/// DogStatsD's `|#k:v` form instead of dotted names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DogStatsd {
    /// `STATSD_HOST:STATSD_PORT`.
    pub addr: String,
    /// `USE_DOG_STATSD_MOGRIFIERS`, in the order named: the first whose pattern matches a
    /// metric name rewrites it.
    pub mogrifiers: Vec<Mogrifier>,
}

/// One mogrifier, `DOG_STATSD_MOGRIFIER_<X>_{PATTERN,NAME,TAGS}`: a metric name matching
/// `pattern` is sent as `name`, with `tags`; `$0`, `$1`, … in both stand for the match and
/// its groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mogrifier {
    /// `<X>`, for messages.
    pub id: String,
    /// `DOG_STATSD_MOGRIFIER_<X>_PATTERN`: a regular expression (checked here).
    pub pattern: String,
    /// `DOG_STATSD_MOGRIFIER_<X>_NAME`: the new metric name.
    pub name: String,
    /// `DOG_STATSD_MOGRIFIER_<X>_TAGS` (`k:v,k2:v2`): tag names and value templates.
    pub tags: Vec<(String, String)>,
}

fn dogstatsd(
    r: &Reader<'_>,
    statsd: bool,
    prometheus: bool,
) -> Result<Option<DogStatsd>, SettingsError> {
    if !r.bool("USE_DOG_STATSD", false) {
        return Ok(None);
    }
    if statsd || prometheus {
        let other = if statsd {
            "USE_STATSD"
        } else {
            "USE_PROMETHEUS"
        };
        return Err(err(
            "USE_DOG_STATSD",
            "true",
            format!("only one stats sink at a time: unset {other} or USE_DOG_STATSD"),
        ));
    }
    let mut mogrifiers = Vec::new();
    let names = r.string("USE_DOG_STATSD_MOGRIFIERS", "");
    for id in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if let Some(m) = r.or(mogrifier(r, id).map(Some), None) {
            mogrifiers.push(m);
        }
    }
    Ok(Some(DogStatsd {
        addr: format!(
            "{}:{}",
            r.string("STATSD_HOST", "localhost"),
            r.parsed("STATSD_PORT", 8125u16)
        ),
        mogrifiers,
    }))
}

fn mogrifier(r: &Reader<'_>, id: &str) -> Result<Mogrifier, SettingsError> {
    let var = |part: &str| format!("DOG_STATSD_MOGRIFIER_{id}_{part}");
    let required = |part: &str| {
        r.non_empty(&var(part)).ok_or_else(|| {
            err(
                &var(part),
                "",
                format!("required for the mogrifier {id} named in USE_DOG_STATSD_MOGRIFIERS"),
            )
        })
    };
    let pattern = required("PATTERN")?;
    if let Err(e) = regex::Regex::new(&pattern) {
        return Err(err(
            &var("PATTERN"),
            &pattern,
            format!("not a regular expression: {e}"),
        ));
    }
    let name = required("NAME")?;
    let mut tags = Vec::new();
    let text = r.string(&var("TAGS"), "");
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match pair.split_once(':') {
            Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => {
                tags.push((k.trim().to_owned(), v.trim().to_owned()));
            }
            _ => {
                return Err(err(
                    &var("TAGS"),
                    &text,
                    "tag:template pairs separated by commas, e.g. domain:$1,descriptor:$2",
                ));
            }
        }
    }
    Ok(Mogrifier {
        id: id.to_owned(),
        pattern,
        name,
        tags,
    })
}

/// `EXTRA_TAGS`: `key:value` pairs whose keys are label names.
pub(super) fn parse_tags(text: &str) -> Result<Vec<(String, String)>, SettingsError> {
    let mut tags = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once(':') else {
            return Err(err(
                "EXTRA_TAGS",
                text,
                "expected key:value pairs separated by commas",
            ));
        };
        let valid = !k.is_empty()
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !k.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(err(
                "EXTRA_TAGS",
                text,
                format!("'{k}' is not a valid label name"),
            ));
        }
        tags.push((k.to_owned(), v.to_owned()));
    }
    Ok(tags)
}

/// `NEAR_LIMIT_RATIO`: from 0 to 1.
pub(super) fn near_limit_ratio(r: &Reader<'_>) -> f64 {
    const DEFAULT: f64 = 0.8;
    let ratio: f64 = r.parsed("NEAR_LIMIT_RATIO", DEFAULT);
    if (0.0..=1.0).contains(&ratio) {
        ratio
    } else {
        let problem = err("NEAR_LIMIT_RATIO", &ratio.to_string(), "between 0 and 1");
        r.or(Err(problem), DEFAULT)
    }
}
