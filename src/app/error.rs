//! Why the service stopped with an error, and the exit code each reason gives the process.

use crate::config::ConfigErrors;

/// Why the process stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The rule files are invalid (exit 78, `EX_CONFIG`).
    #[error("invalid rate limit configuration:\n{0}")]
    Config(#[from] ConfigErrors),
    /// A listener could not be bound (exit 1).
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address as configured.
        addr: String,
        /// Why the bind failed.
        source: std::io::Error,
    },
    /// The counter store could not be set up (exit 1).
    #[error("setting up the counter store: {0}")]
    Storage(#[from] crate::storage::StorageError),
    /// The TLS files cannot be used (exit 1).
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The statsd mapping file (`PROMETHEUS_MAPPER_YAML`) cannot be used (exit 78).
    #[error("invalid statsd mapping file: {0}")]
    Mapper(#[from] crate::metrics::mapper::MapperError),
    /// A setting names something this build does not support (exit 64).
    #[error("{0}")]
    Unsupported(String),
    /// Tracing is on but its exporter cannot be set up (exit 78).
    #[error("tracing: {0}")]
    Tracing(#[from] crate::traces::TracingError),
    /// The server failed (exit 1).
    #[error(transparent)]
    Serve(#[from] crate::server::ServeError),
}

impl AppError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            AppError::Config(_) | AppError::Mapper(_) => 78,
            AppError::Unsupported(_) => 64,
            _ => 1,
        }
    }
}
