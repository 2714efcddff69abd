//! A validated rate-limit request in domain terms. Built by the gRPC edge (which validates and
//! resolves `hits_addend`), read by the limiter. Its texts are borrowed from the message they
//! were decoded from whenever they can be (`'a`), so a request costs no allocation per text.

use std::borrow::Cow;

use crate::rules::{Algorithm, Unit};

/// One key/value entry of a descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Entry key (never empty).
    pub key: Cow<'a, str>,
    /// Entry value (may be empty).
    pub value: Cow<'a, str>,
}

/// A limit sent by the proxy instead of the configured one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitOverride {
    /// Allowed hits per window.
    pub requests_per_unit: u32,
    /// The window unit.
    pub unit: Unit,
    /// The matched rule's algorithm (an override keeps it); a fixed window when no rule
    /// matches. Set by the limiter, not by the request.
    pub algorithm: Algorithm,
}

/// One descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor<'a> {
    /// Ordered entries (never empty).
    pub entries: Vec<Entry<'a>>,
    /// `descriptor.limit`.
    pub limit_override: Option<LimitOverride>,
    /// Resolved hits: the descriptor's `hits_addend` when present (0 = check only), otherwise
    /// the request's, where 0 means 1.
    pub hits: u64,
    /// `is_negative_hits`: refund `hits` instead of adding them.
    pub refund: bool,
    /// The descriptor's own `hits_addend`, when it was sent (for dynamic metadata).
    pub hits_addend: Option<u64>,
}

/// A whole request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    /// The domain (never empty).
    pub domain: Cow<'a, str>,
    /// The descriptors (never empty).
    pub descriptors: Vec<Descriptor<'a>>,
    /// The request-level `hits_addend` as sent (for dynamic metadata).
    pub hits_addend: u32,
}
