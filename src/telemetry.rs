//! Log set-up: `tracing` to stderr at `LOG_LEVEL`, as text or as JSON lines
//! (`LOG_FORMAT=json`) with the reference's field names: `@timestamp` (RFC 3339, UTC,
//! nanoseconds), `@message` and `level` (logrus names: `error`, `warning`, `info`, `debug`,
//! `trace`), then the event's own fields.
//!
//! Must not touch: anything else in the crate.

use std::fmt;
use std::time::SystemTime;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The target of the few lifecycle events (configuration loaded, serving, draining, stopped).
/// They are logged at INFO, the level they deserve, and stay visible under the reference's
/// default `LOG_LEVEL=WARN` because the filter always lets this target through at INFO: a
/// deploy shows that it started without tripping alerts on warnings.
pub const LIFECYCLE: &str = "turnstile::lifecycle";

/// Installs the global subscriber. `level` is a reference level name (`WARN`, `debug`, …) or a
/// full `tracing` filter directive.
pub fn init(level: &str, json: bool) {
    let level = level.to_ascii_lowercase();
    let level = if level == "warning" {
        "warn".to_owned()
    } else {
        level
    };
    let mut filter = EnvFilter::try_new(&level).unwrap_or_else(|_| EnvFilter::new("warn"));
    if !level.contains(LIFECYCLE)
        && let Ok(directive) = format!("{LIFECYCLE}=info").parse()
    {
        filter = filter.add_directive(directive);
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.event_format(JsonLines).init();
    } else {
        builder.init();
    }
}

/// The JSON line format.
#[derive(Debug, Clone, Copy)]
pub struct JsonLines;

struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(name(field), Value::String(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(name(field), Value::String(value.to_owned()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(name(field), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(name(field), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(name(field), Value::from(value));
    }
}

fn name(field: &Field) -> String {
    if field.name() == "message" {
        "@message".to_owned()
    } else {
        field.name().to_owned()
    }
}

fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "error",
        Level::WARN => "warning",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields(Map::new());
        fields.0.insert(
            "@timestamp".into(),
            Value::String(humantime::format_rfc3339_nanos(SystemTime::now()).to_string()),
        );
        fields.0.insert(
            "level".into(),
            Value::String(level_name(event.metadata().level()).into()),
        );
        event.record(&mut fields);
        writeln!(writer, "{}", Value::Object(fields.0))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn timestamps_are_rfc3339_with_nanoseconds() {
        let t = UNIX_EPOCH + Duration::new(1_795_999_999, 5);
        assert_eq!(
            humantime::format_rfc3339_nanos(t).to_string(),
            "2026-11-30T00:53:19.000000005Z"
        );
    }
}
