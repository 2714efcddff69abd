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
//! # Layers
//!
//! Each module may use only the crate modules named in its row (`tests/it/architecture.rs`
//! checks every `crate::` path of every module against this table, and that the table has no
//! cycle). Lower rows never reach up: the decision knows nothing of protocols, metrics observe
//! the decision and the store without being called by them, and only `app` wires everything.
//!
//! | module | owns | may use |
//! |---|---|---|
//! | `clock` | the injected wall clock | |
//! | `settings` | process settings from the environment and flags | |
//! | `telemetry` | log set-up (text or reference-style JSON) | |
//! | `health` | readiness components (backend, config, shutdown) | |
//! | `pb` | the generated protobuf types | |
//! | `rules` | the compiled, immutable rule model and matching | |
//! | `config` | YAML text → `RuleSet`, errors with file:line:col | `rules` |
//! | `storage` | counters: the `CounterStore` trait, `memory`, `memcached` | `clock` |
//! | `limiter` | the decision: windows, keys, verdicts | `clock`, `rules`, `storage` |
//! | `metrics` | counters in hits, Prometheus text, statsd sink, the instrumented store | `limiter`, `rules`, `storage` |
//! | `reload` | the live, atomically swapped rule set and its watcher | `config`, `health`, `metrics`, `rules`, `telemetry` |
//! | `tls` | gRPC server TLS/mTLS with certificate reload | `settings` |
//! | `grpc` | the protocol edge (RLS): conversion, validation, responses | `health`, `limiter`, `metrics`, `pb`, `reload`, `rules`, `settings`, `storage` |
//! | `quota` | RLQS assignments: bucket ids onto rules, reports into counters, fair share | `limiter`, `rules`, `settings`, `storage` |
//! | `rlqs` | the protocol edge (RLQS): streams, conversion, refusals | `grpc`, `metrics`, `pb`, `quota`, `rules`, `settings`, `storage` |
//! | `http` | `/healthcheck`, `/json`, `/rlconfig`, `/metrics` | `grpc`, `pb`, `quota`, `rules`, `storage` |
//! | `server` | the gRPC server: RLS, RLQS, health, reflection, connection limits | `grpc`, `health`, `metrics`, `pb`, `rlqs`, `settings`, `storage`, `tls` |
//! | `app` | the service as one value: build, bind, serve, drain | every module |

pub mod app;
pub mod clock;
pub mod config;
pub mod grpc;
pub mod health;
pub mod http;
pub mod limiter;
pub mod metrics;
pub mod pb;
pub mod quota;
pub mod reload;
pub mod rlqs;
pub mod rules;
pub mod server;
pub mod settings;
pub mod storage;
pub mod telemetry;
pub mod tls;
