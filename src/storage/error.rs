//! Why a store could not answer: a [`StorageError`] is its kind (what the gRPC edge, the
//! metrics and the spans decide by), what happened in the store's terms, and the error that
//! caused it when there is one (an I/O error, a driver's error), kept for `source()`.
//!
//! Must not touch: how an edge maps a kind to a status (that is the edge's).

use std::sync::Arc;

/// What kind of failure a [`StorageError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The store (or one of its servers) cannot be reached.
    Unavailable,
    /// The store did not answer within its deadline.
    Timeout,
    /// The store answered something we did not expect.
    Protocol,
    /// The store is full of live counters and will not create another.
    Full,
    /// A conditional update lost its race more times than allowed (other replicas write the
    /// same key): nothing was decided.
    Contended,
    /// Turnstile itself could not send the commands in time (its queues are full, or it is too
    /// busy to write them): nothing is known about the store, which is not marked down.
    Overloaded,
}

impl ErrorKind {
    /// The kind as one word (`unavailable`, `timeout`, …), for spans and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Full => "full",
            ErrorKind::Contended => "contended",
            ErrorKind::Overloaded => "overloaded",
        }
    }

    /// How a message of this kind begins.
    fn heading(self) -> &'static str {
        match self {
            ErrorKind::Unavailable => "counter store unavailable",
            ErrorKind::Timeout => "counter store timed out",
            ErrorKind::Protocol => "counter store protocol error",
            ErrorKind::Full => "counter store full",
            ErrorKind::Contended => "counter store contended",
            ErrorKind::Overloaded => "Turnstile is overloaded",
        }
    }
}

/// Why a store could not answer. The gRPC edge maps the kind to `UNAVAILABLE` or
/// `RESOURCE_EXHAUSTED` (or fails open when configured to).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {what}", kind.heading())]
pub struct StorageError {
    kind: ErrorKind,
    what: String,
    #[source]
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
    /// Nothing of the call reached the store (a breaker refused it, or Turnstile's own queue
    /// did): what it carried was not applied and may be sent again.
    unsent: bool,
}

impl PartialEq for StorageError {
    /// Same kind, same words (the cause is not compared).
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.what == other.what
    }
}

impl Eq for StorageError {}

impl StorageError {
    /// An error of `kind`, saying `what` happened in the store's terms.
    pub fn new(kind: ErrorKind, what: impl Into<String>) -> StorageError {
        StorageError {
            kind,
            what: what.into(),
            source: None,
            unsent: false,
        }
    }

    /// [`ErrorKind::Unavailable`].
    pub fn unavailable(what: impl Into<String>) -> StorageError {
        StorageError::new(ErrorKind::Unavailable, what)
    }

    /// [`ErrorKind::Timeout`].
    pub fn timeout(what: impl Into<String>) -> StorageError {
        StorageError::new(ErrorKind::Timeout, what)
    }

    /// [`ErrorKind::Protocol`].
    pub fn protocol(what: impl Into<String>) -> StorageError {
        StorageError::new(ErrorKind::Protocol, what)
    }

    /// [`ErrorKind::Full`].
    pub fn full(what: impl Into<String>) -> StorageError {
        StorageError::new(ErrorKind::Full, what)
    }

    /// [`ErrorKind::Contended`].
    pub fn contended(what: impl Into<String>) -> StorageError {
        StorageError::new(ErrorKind::Contended, what)
    }

    /// [`ErrorKind::Overloaded`].
    pub fn overloaded(what: impl Into<String>) -> StorageError {
        StorageError::new(ErrorKind::Overloaded, what)
    }

    /// The same error, caused by `cause` (kept for `source()`).
    pub fn caused_by(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(cause));
        self
    }

    /// The same error, known to have sent nothing to the store (a breaker refused the call, or
    /// Turnstile's own queue did).
    pub fn unsent(mut self) -> Self {
        self.unsent = true;
        self
    }

    /// The same error for a call of several parts of which others may have been applied: no
    /// longer taken for unsent.
    pub fn maybe_applied(mut self) -> Self {
        self.unsent = false;
        self
    }

    /// Whether nothing of the call reached the store, so that what it carried was certainly
    /// not applied (any other failure may have been applied in part, or whole).
    pub fn was_unsent(&self) -> bool {
        self.unsent
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What happened, in the store's terms (the message without its heading).
    pub fn what(&self) -> &str {
        &self.what
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::{ErrorKind, StorageError};

    #[test]
    fn the_message_heads_with_the_kind_and_the_cause_is_kept() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = StorageError::unavailable("memcached 10.0.0.1:11211 is down").caused_by(io);
        assert_eq!(
            e.to_string(),
            "counter store unavailable: memcached 10.0.0.1:11211 is down"
        );
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert_eq!(
            e.source().map(ToString::to_string).as_deref(),
            Some("refused")
        );
        assert_eq!(
            StorageError::overloaded("queue full").to_string(),
            "Turnstile is overloaded: queue full"
        );
        assert_eq!(
            e,
            StorageError::unavailable("memcached 10.0.0.1:11211 is down")
        );
    }

    #[test]
    fn unsent_is_said_by_the_part_that_knows_and_unsaid_for_a_call_of_parts() {
        let refused = StorageError::unavailable("breaker open");
        assert!(!refused.was_unsent(), "not said: the outcome is unknown");
        let refused = refused.unsent();
        assert!(refused.was_unsent());
        assert!(
            !refused.maybe_applied().was_unsent(),
            "another part of the call may have been applied"
        );
    }
}
