//! Turnstile's integration tests: one binary, real gRPC over loopback, real memcached.
#![allow(unreachable_pub, missing_docs, missing_debug_implementations)]

mod backends;
mod modes;
mod semantics;
mod support;
