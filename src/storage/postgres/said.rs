//! What PostgreSQL (or the connection to it) said, in words: tokio-postgres's own `Display` of an
//! error is its kind alone ("db error", "error connecting to server"), which hides the SQLSTATE
//! and message an operator needs (28P01 password authentication failed, 42501 permission
//! denied, 25006 read-only transaction). [`Said`] gives the server's severity, SQLSTATE, message,
//! detail and hint, or the kind followed by its causes (the socket's or TLS's error).
//!
//! PostgreSQL never repeats a password in its messages, and the connection's configuration is
//! not part of an error: nothing here can show one.
//!
//! Must not touch: what an error means to the store (`failed` in the parent module decides).

use std::fmt;

/// An error of tokio-postgres, displayed with what the server or the connection said.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Said<'a>(pub(crate) &'a tokio_postgres::Error);

impl fmt::Display for Said<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(db) = self.0.as_db_error() {
            write!(
                f,
                "{}: {} (SQLSTATE {})",
                db.severity(),
                db.message(),
                db.code().code()
            )?;
            if let Some(detail) = db.detail() {
                write!(f, "; {detail}")?;
            }
            if let Some(hint) = db.hint() {
                write!(f, "; hint: {hint}")?;
            }
            return Ok(());
        }
        write!(f, "{}", self.0)?;
        let mut cause = std::error::Error::source(self.0);
        while let Some(e) = cause {
            write!(f, ": {e}")?;
            cause = e.source();
        }
        Ok(())
    }
}

/// A pool's error: what PostgreSQL said when a connection could not be made.
pub(crate) fn pool_error(e: &deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(e) => Said(e).to_string(),
        other => other.to_string(),
    }
}
