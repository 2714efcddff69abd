//! Turnstile's integration tests: one binary, real gRPC over loopback, real memcached.
#![allow(unreachable_pub, missing_docs, missing_debug_implementations)]

mod abuse;
mod algorithms;
mod architecture;
mod backends;
mod bad_requests;
mod config_files;
mod counting_edges;
mod deploy;
mod envoy_e2e;
mod envoy_gateway;
mod faults;
mod ipv6;
pub mod lifecycle;
mod memcached_cluster;
mod model;
mod modes;
mod overload;
mod peers;
mod postgres_support;
mod process;
mod readiness_reasons;
mod redis_backend;
mod redis_cluster_down;
mod redis_support;
mod redis_tls;
mod responses;
mod rlqs;
mod robustness;
mod semantics;
mod settings_bounds;
mod srv;
mod statsd_mapping;
mod storage_contract;
mod support;
mod tls;
mod xds;
