//! `PROMETHEUS_MAPPER_YAML`: statsd_exporter mapping files, which name the reference's statsd
//! series in Prometheus (the reference runs statsd_exporter's mapper inside itself, and Envoy
//! Gateway mounts its own mapping file for it). Supported as statsd_exporter reads them: glob
//! matches (`*` is one or more characters within a dot-separated part, every part must match)
//! tried first, in file order, then regex matches (unanchored, as Go's `regexp` finds them);
//! `name` and `labels` with `$1`, `${1}` or `${name}` captures; `match_metric_type` (`counter`,
//! `gauge`, `observer`); `action: drop`; `defaults.match_type`. A series that no mapping
//! matches keeps its statsd name with every character Prometheus does not allow turned into
//! `_`. Other keys (`timer_type`, `buckets`, `ttl`, …) are about how statsd_exporter stores
//! observations and are read and ignored: the series mapped here are counters.
//!
//! YAML is read here with the crate the rule loader uses; this file is the only other user.
//!
//! Must not touch: the rule loader, the series themselves (`render` decides what is mapped).

use std::collections::BTreeMap;
use std::path::Path;

use regex::Regex;
use serde::Deserialize;
use serde_saphyr::Spanned;

use glob::{expand, glob, glob_captures};

/// A mapping file that cannot be used, in its terms.
#[derive(Debug, thiserror::Error)]
#[error("{origin}{at}: {message}", at = at(*.line, *.column))]
pub struct MapperError {
    /// The file.
    pub origin: String,
    /// 1-based line (0: the whole file).
    pub line: u64,
    /// 1-based column.
    pub column: u64,
    /// What is wrong and what belongs there.
    pub message: String,
}

fn at(line: u64, column: u64) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(":{line}:{column}")
    }
}

/// What kind of statsd metric a series is (`match_metric_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricType {
    /// A statsd counter.
    Counter,
    /// A statsd gauge.
    Gauge,
    /// A timer, histogram or distribution (`timer` is the older name).
    #[serde(alias = "timer")]
    Observer,
}

#[derive(Debug, Deserialize)]
struct RawFile {
    #[serde(default)]
    defaults: RawDefaults,
    #[serde(default)]
    mappings: Vec<RawMapping>,
}

#[derive(Debug, Default, Deserialize)]
struct RawDefaults {
    #[serde(default)]
    match_type: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawMapping {
    #[serde(rename = "match")]
    pattern: Spanned<String>,
    #[serde(default)]
    match_type: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    match_metric_type: Option<MetricType>,
}

#[derive(Debug)]
enum Matcher {
    /// The parts of a glob, each split at its `*`s.
    Glob(Vec<Vec<String>>),
    Regex(Regex),
}

#[derive(Debug)]
struct Mapping {
    matcher: Matcher,
    name: String,
    labels: Vec<(String, String)>,
    drop: bool,
    metric_type: Option<MetricType>,
}

/// The mappings of one file: globs first, then regexes, each in file order.
#[derive(Debug, Default)]
pub struct Mapper {
    mappings: Vec<Mapping>,
}

/// Where a statsd series goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Mapped {
    /// Not exported.
    Drop,
    /// Exported as `name` with `labels` (sorted by name).
    Series {
        /// The Prometheus name.
        name: String,
        /// The labels.
        labels: Vec<(String, String)>,
    },
}

impl Mapper {
    /// Reads a mapping file.
    pub fn load(path: &Path) -> Result<Mapper, MapperError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| MapperError {
            origin: origin.clone(),
            line: 0,
            column: 0,
            message: format!("cannot read the statsd mapping file (PROMETHEUS_MAPPER_YAML): {e}"),
        })?;
        Self::parse(&origin, &text)
    }

    /// Parses mapping text; `origin` names it in errors.
    pub fn parse(origin: &str, text: &str) -> Result<Mapper, MapperError> {
        let error = |line: u64, column: u64, message: String| MapperError {
            origin: origin.to_owned(),
            line,
            column,
            message,
        };
        let raw: RawFile = serde_saphyr::from_str(text).map_err(|e| {
            let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
            error(
                line,
                column,
                format!(
                    "not a statsd_exporter mapping file: {}",
                    e.without_snippet()
                ),
            )
        })?;
        let default_type = raw.defaults.match_type.unwrap_or_else(|| "glob".into());
        let (mut globs, mut regexes) = (Vec::new(), Vec::new());
        for m in raw.mappings {
            let (line, column) = (m.pattern.referenced.line(), m.pattern.referenced.column());
            let fail = |message: String| error(line, column, message);
            let drop = match m.action.as_deref() {
                None | Some("map") => false,
                Some("drop") => true,
                Some(other) => return Err(fail(format!("action {other:?}: expected map or drop"))),
            };
            let name = match (m.name, drop) {
                (Some(name), _) => name,
                (None, true) => String::new(),
                (None, false) => {
                    return Err(fail("this mapping sets no `name` for the series".into()));
                }
            };
            let pattern = m.pattern.value;
            let mapping = |matcher| Mapping {
                matcher,
                name,
                labels: m.labels.into_iter().collect(),
                drop,
                metric_type: m.match_metric_type,
            };
            match m.match_type.as_deref().unwrap_or(&default_type) {
                "glob" => globs.push(mapping(Matcher::Glob(glob(&pattern)))),
                "regex" => {
                    let regex = Regex::new(&pattern).map_err(|e| {
                        fail(format!(
                            "match {pattern:?} is not a regular expression: {e}"
                        ))
                    })?;
                    regexes.push(mapping(Matcher::Regex(regex)));
                }
                other => {
                    return Err(fail(format!(
                        "match_type {other:?}: expected glob or regex"
                    )));
                }
            }
        }
        globs.extend(regexes);
        Ok(Mapper { mappings: globs })
    }

    /// Where the statsd series `name` of type `kind` goes.
    pub fn map(&self, name: &str, kind: MetricType) -> Mapped {
        for m in &self.mappings {
            if m.metric_type.is_some_and(|t| t != kind) {
                continue;
            }
            let expanded = match &m.matcher {
                Matcher::Glob(parts) => glob_captures(parts, name).map(|captures| {
                    let expand = |template: &str| expand(template, &captures);
                    (
                        expand(&m.name),
                        m.labels
                            .iter()
                            .map(|(k, v)| (k.clone(), expand(v)))
                            .collect(),
                    )
                }),
                Matcher::Regex(regex) => regex.captures(name).map(|captures| {
                    let expand = |template: &str| {
                        let mut out = String::new();
                        captures.expand(template, &mut out);
                        out
                    };
                    (
                        expand(&m.name),
                        m.labels
                            .iter()
                            .map(|(k, v)| (k.clone(), expand(v)))
                            .collect(),
                    )
                }),
            };
            if let Some((series, labels)) = expanded {
                return if m.drop {
                    Mapped::Drop
                } else {
                    Mapped::Series {
                        name: escape_name(&series),
                        labels,
                    }
                };
            }
        }
        Mapped::Series {
            name: escape_name(name),
            labels: Vec::new(),
        }
    }
}

/// A Prometheus metric name: every character outside `[a-zA-Z0-9_:]` becomes `_`, and a
/// leading digit gets a `_` before it.
fn escape_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

mod glob;
#[cfg(test)]
mod tests;
