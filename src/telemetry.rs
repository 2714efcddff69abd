//! Log set-up: `tracing` to stderr at `LOG_LEVEL`, as text or JSON (`LOG_FORMAT=json`).

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `level` is a reference level name (`WARN`, `debug`, …) or a
/// full `tracing` filter directive.
pub fn init(level: &str, json: bool) {
    let filter =
        EnvFilter::try_new(level.to_ascii_lowercase()).unwrap_or_else(|_| EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}
