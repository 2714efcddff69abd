//! Turnstile: a global rate-limit service for Envoy, wire-compatible with envoyproxy/ratelimit.
//!
//! # Data flow
//!
//! ```text
//! gRPC ShouldRateLimit (protobuf)
//!   │ grpc::convert     pb → limiter::Request; validation → INVALID_ARGUMENT
//!   ▼
//! grpc ── reload::RulesHandle::load() ──► Arc<RuleSet>   (one atomic load, no lock)
//!   │
//!   ▼
//! limiter::Limiter::check(&RuleSet, &Request)
//!   │ rules (matcher)   entries → matched Limit (exact > wildcard > key-only)
//!   │ limiter::window   Limit + now → window start, end, time to reset
//!   │ limiter::key      domain + entries + period + window → bounded, safe key
//!   │ storage           ONE batched call: [Hit{key, op, expires_at}] → [count after]
//!   ▼
//! limiter::Verdict → grpc::response → protobuf response (StorageError → UNAVAILABLE)
//! ```
//!
//! # Architecture invariants
//!
//! | module | owns | must not use |
//! |---|---|---|
//! | `rules` | the compiled, immutable rule model and matching | YAML, tonic, pb, storage, tokio |
//! | `config` | YAML text → `RuleSet`, errors with file:line:col | tonic, pb, storage |
//! | `reload` | the live, atomically swapped rule set | pb, storage |
//! | `limiter` | the decision: windows, keys, verdicts | pb, tonic, YAML, memcached crates |
//! | `storage` | counters: the `CounterStore` trait, `memory`, `memcached` | rules, limiter, pb |
//! | `grpc` | the protocol edge (RLS) | YAML, memcached crates |
//! | `http` | `/healthcheck`, `/json`, `/rlconfig`, `/metrics` | YAML, memcached crates |
//! | `metrics` | counters in hits, Prometheus text, statsd sink | pb, YAML, storage crates |
//! | `health` | readiness components (backend, config, shutdown) | everything else |
//! | `tls` | gRPC server TLS/mTLS with certificate reload | business logic |
//! | `settings` | process settings from the environment and flags | everything else |
//! | `server` | the gRPC server: RLS, health, reflection | business logic |
//! | `app` | the process: start-up, listeners, reload, drain | business logic |
//! | `telemetry` | log set-up (text or reference-style JSON) | everything else |

pub mod app;
pub mod clock;
pub mod config;
pub mod grpc;
pub mod health;
pub mod http;
pub mod limiter;
pub mod metrics;
pub mod pb;
pub mod reload;
pub mod rules;
pub mod server;
pub mod settings;
pub mod storage;
pub mod telemetry;
pub mod tls;
