//! All of Turnstile's TLS, on rustls with ring: the PEM files (`pem`), the client
//! configurations of every client (`client`: the stores, the xDS control plane, the OTLP
//! collector) and the gRPC server's TLS and mTLS with certificate reload (`server`). The bottom
//! layer: it knows no settings and no component; each caller passes its files and decides what
//! is its own (ALPN, session resumption, the server name it checks).
//!
//! Must not touch: settings, listeners, what any connection carries.

mod client;
mod pem;
mod server;
mod verify;

pub use client::{Verify, client_config, client_config_of};
pub use pem::{PemFile, pem_certificates, private_key, roots, roots_of};
pub use server::{ReloadingCert, ServerFiles, handshake, server_config};

/// A TLS file or configuration problem.
#[derive(Debug, thiserror::Error)]
#[error("TLS: {0}")]
pub struct TlsError(String);

impl TlsError {
    /// What went wrong, without the `TLS:` prefix (for callers with their own error type).
    pub fn into_message(self) -> String {
        self.0
    }
}

/// `e` followed by each of its causes (`a: b: c`), a cause left out when the text before it
/// already says it: how a client's connection error says what TLS said (unknown issuer, expired,
/// the names a certificate is valid for) rather than only "transport error".
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !out.contains(&said) {
            out.push_str(": ");
            out.push_str(&said);
        }
        cause = c.source();
    }
    out
}
