//! Log set-up: `tracing` to stderr at `LOG_LEVEL`, as text or as JSON lines
//! (`LOG_FORMAT=json`) with the reference's field names: `@timestamp` (RFC 3339, UTC,
//! nanoseconds), `@message` and `level` (logrus names: `error`, `warning`, `info`, `debug`,
//! `trace`), then the event's own fields.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Installs the global subscriber. `level` is a reference level name (`WARN`, `debug`, …) or a
/// full `tracing` filter directive.
pub fn init(level: &str, json: bool) {
    let level = level.to_ascii_lowercase();
    let level = if level == "warning" {
        "warn".to_owned()
    } else {
        level
    };
    let filter = EnvFilter::try_new(&level).unwrap_or_else(|_| EnvFilter::new("warn"));
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

/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` for a time after the epoch.
pub fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (proleptic Gregorian), after H. Hinnant's public-domain algorithm.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_nanos()
    )
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
            Value::String(rfc3339(SystemTime::now())),
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
    use super::rfc3339;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        let t = UNIX_EPOCH + Duration::new(1_795_999_999, 5);
        assert_eq!(rfc3339(t), "2026-11-30T00:53:19.000000005Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000000000Z"
        );
    }
}
