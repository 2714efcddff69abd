//! The options of the decision and its answer, built as their owners' own types: the
//! limiter's (`CACHE_KEY_PREFIX`, `SHADOW_MODE`, `QUOTA_MODE`, `BACKEND_FAILURE_MODE` and its
//! older form `BACKEND_FAIL_OPEN`, `BACKEND_LOCAL_REPLICAS`, `LOCAL_CACHE_SIZE_IN_BYTES`, and from the backend the key layout and
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`) and the RLS response's (`LIMIT_*_HEADER`s,
//! `RESPONSE_DYNAMIC_METADATA`).

use super::reader::{Reader, err};
use super::{Backend, HeaderNames, KeyLayout};
use crate::limiter::StoreFailure;

/// What goes into a RateLimit response beyond the statuses (the RLS edge's own options).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseSettings {
    /// `LIMIT_RESPONSE_HEADERS_ENABLED` with the header names (`LIMIT_*_HEADER`).
    pub headers: Option<HeaderNames>,
    /// `RESPONSE_DYNAMIC_METADATA`.
    pub dynamic_metadata: bool,
}

/// The limiter's own options (`CACHE_KEY_PREFIX`, `SHADOW_MODE`, `QUOTA_MODE`,
/// `BACKEND_FAILURE_MODE`, `BACKEND_LOCAL_REPLICAS`, `LOCAL_CACHE_SIZE_IN_BYTES`, and from the backend's settings the key
/// layout and `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`), built here directly.
pub use crate::limiter::LimiterSettings;

/// `LIMIT_RESPONSE_HEADERS_ENABLED` with `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER`,
/// `LIMIT_RESET_HEADER`, and `RESPONSE_DYNAMIC_METADATA`.
pub(super) fn response(r: &Reader<'_>) -> ResponseSettings {
    let d = HeaderNames::default();
    let names = HeaderNames {
        limit: r.string("LIMIT_LIMIT_HEADER", &d.limit),
        remaining: r.string("LIMIT_REMAINING_HEADER", &d.remaining),
        reset: r.string("LIMIT_RESET_HEADER", &d.reset),
    };
    ResponseSettings {
        headers: r
            .bool("LIMIT_RESPONSE_HEADERS_ENABLED", false)
            .then_some(names),
        dynamic_metadata: r.bool("RESPONSE_DYNAMIC_METADATA", false),
    }
}

/// The limiter's settings; the key layout and whether increments stop at the limit come from
/// the backend's (Redis; PostgreSQL for the latter), Turnstile's layout elsewhere.
pub(super) fn limiter(r: &Reader<'_>, backend: &Backend) -> LimiterSettings {
    let key_prefix = r.string("CACHE_KEY_PREFIX", "");
    if key_prefix.len() > 64 {
        r.report(err("CACHE_KEY_PREFIX", &key_prefix, "at most 64 bytes"));
    }
    LimiterSettings {
        key_prefix,
        shadow_mode: r.bool("SHADOW_MODE", false),
        quota_mode: r.bool("QUOTA_MODE", false),
        on_store_failure: store_failure(r),
        local_replicas: match r.number("BACKEND_LOCAL_REPLICAS", 0u64, 0, 10_000) {
            0 => None,
            n => std::num::NonZeroU64::new(n),
        },
        local_cache_bytes: r.number("LOCAL_CACHE_SIZE_IN_BYTES", 0u64, 0, 1 << 40),
        key_layout: match backend {
            Backend::Redis(redis) => redis.key_layout,
            _ => KeyLayout::Turnstile,
        },
        stop_increment_when_over_limit: match backend {
            Backend::Redis(redis) => redis.stop_increment_when_over_limit,
            Backend::Postgres(postgres) => postgres.stop_increment_when_over_limit,
            _ => false,
        },
    }
}

/// `BACKEND_FAILURE_MODE` (`unavailable`, `open` or `local`; default `unavailable`), or the
/// reference's `BACKEND_FAIL_OPEN=true` (= `open`); both given and disagreeing is an error.
fn store_failure(r: &Reader<'_>) -> StoreFailure {
    let fail_open = r.bool("BACKEND_FAIL_OPEN", false);
    let Some(named) = r.non_empty("BACKEND_FAILURE_MODE") else {
        return match fail_open {
            true => StoreFailure::Open,
            false => StoreFailure::Unavailable,
        };
    };
    let Some(mode) = StoreFailure::named(&named) else {
        let names = StoreFailure::NAMES.join(", ");
        r.report(err(
            "BACKEND_FAILURE_MODE",
            &named,
            format!("one of {names}"),
        ));
        return StoreFailure::Unavailable;
    };
    if fail_open && mode != StoreFailure::Open {
        r.report(err(
            "BACKEND_FAILURE_MODE",
            &named,
            "BACKEND_FAIL_OPEN=true means BACKEND_FAILURE_MODE=open: set one of them",
        ));
    }
    mode
}
