//! Turnstile: a global rate-limit service for Envoy, wire-compatible with envoyproxy/ratelimit.
//!
//! # Data flow
//!
//! ```text
//! a TCP or TLS connection to the one gRPC server (RLS, RLQS, health, reflection)
//!   │ server::incoming  the first hop: connections per peer (caps, idle, age), the door (a
//!   │                   peer's part of the requests open, its gate), HTTP/2 frames followed
//!   ▼
//! gRPC ShouldRateLimit (RLS)                gRPC StreamRateLimitQuotas (RLQS)
//!   │ server::admission  adaptive limit on    │
//!   │ calls in flight (GRPC_ADAPTIVE_…),      │
//!   │ around grpc::routes (by path name)      │
//!   │ rls::service → grpc::unary → decode:    │ rlqs::convert  reports → Usage; bounds and
//!   │ bytes → Request, INVALID_ARGUMENT       │ refusals (INVALID_ARGUMENT / RESOURCE_EXHAUSTED)
//!   │ naming the field                        │
//!   ▼                                         ▼
//! limiter::Limiter::check                   quota::QuotaStream::on_report (fair share)
//!   │ rules          entries → matched Limit (exact > wildcard > key-only)
//!   │ limiter        windows, algorithms, keys → store operations
//!   └──────────────┬──────────────────────────┘
//!                  ▼
//!   limiter::Operations: the one port to the stores (nothing else calls a store; a test
//!   │                checks it). Plan<CounterOp, TokenStep> → queued with a Destination → a
//!   │                typed slot (CountSlot, StepSlot) that reads the answer after one apply
//!   │ routing        Destination: main, per-second (REDIS_PERSECOND: SECOND limits), durable
//!   │                (POSTGRES_FROM_UNIT: long windows → PostgreSQL); one call per store
//!   │ metrics::Instrumented   latency and errors per store call (and a child span when traced)
//!   ▼
//! storage: memory (sharded, expiry index) │ memcached (ring, pipelined meta commands)
//!          │ redis (single, cluster, sentinel; Lua scripts)
//!          │ postgres (durable; one server-side function call per request, owned schema)
//!   ONE batched call per store: [CounterOp{CounterKey, change, expires_at}] → [count after], steps
//!   → answers; a late answer on a busy runtime is overload (storage::lateness)
//!   ▼
//! limiter::Verdict → rls::response (StorageError → UNAVAILABLE / RESOURCE_EXHAUSTED)
//!                  → quota assignments → rlqs::convert → responses on the stream
//! ```
//!
//! Rules come from `reload` (files watched, one atomic swap, the old rules kept on error) or
//! from `xds` (an ADS stream; a push that does not compile is NACKed and the old rules kept);
//! `app` wires the stores, the limiter, the servers and the listeners from `settings`.
//!
//! # Layers
//!
//! Each module may use only the crate modules named in its row, and a row names only rows
//! above it: read top down, the table is the order the layers build on one another
//! (`tests/it/architecture.rs` checks every `crate::` path of every module's code against its
//! row, and the order). So the decision knows nothing of protocols, settings are parsed into
//! the stores' and the limiter's own option types, metrics observe the decision and the store
//! without being called by them, and only `app` wires everything.
//!
//! | module | owns | may use |
//! |---|---|---|
//! | `clock` | the injected wall clock | |
//! | `backoff` | the pauses between retries: exponential schedules, random spread | |
//! | `tls` | all TLS: PEM files and trust roots, every client's configuration (stores, xDS, OTLP), the gRPC server's TLS/mTLS with certificate reload | |
//! | `telemetry` | log set-up (text or reference-style JSON) | |
//! | `health` | readiness components (backend, config, shutdown) | |
//! | `pb` | the generated protobuf types | |
//! | `grpc` | what Turnstile writes in place of tonic's generated server: one unary exchange, the protobuf wire reader, routing by service name | |
//! | `rules` | the compiled, immutable rule model and matching | |
//! | `config` | YAML text → `RuleSet`, errors with file:line:col | `rules` |
//! | `storage` | counters: the `CounterStore` trait (`apply_ops` for `CounterOp`s, `take_tokens` for `TokenStep`s), `memory`, `memcached`, `redis`, `postgres`, `remote`, `breaker`, the one state machine of a failing server (its backoff, on tokio's clock), what the remote stores share (TTL jitter, key order, late answers), and `tls`, their TLS client configuration and handshake | `backoff`, `clock`, `tls` |
//! | `limiter` | the decision (windows, keys, verdicts) and the one port to the stores (routing) | `clock`, `rules`, `storage` |
//! | `settings` | process settings from the environment and flags, built as the components' own option types where they have one | `limiter`, `storage`, `tls` |
//! | `traces` | OpenTelemetry spans: sampling, W3C/B3 parents, OTLP export off the request path | `settings`, `tls` |
//! | `metrics` | counters in hits, Prometheus text, statsd and DogStatsD sinks, the instrumented store (timing, child spans) | `clock`, `limiter`, `rules`, `settings`, `storage`, `traces` |
//! | `peers` | the clients as peers (address or certificate): connections per peer, a peer's part of the decisions in flight, RLQS streams per peer | `metrics` |
//! | `reload` | the live, atomically swapped rule set and its watcher | `config`, `health`, `metrics`, `rules`, `telemetry` |
//! | `rls` | the protocol edge (RLS): conversion, validation, responses, the call's span | `grpc`, `health`, `limiter`, `metrics`, `pb`, `reload`, `rules`, `settings`, `storage`, `traces` |
//! | `quota` | RLQS assignments: bucket ids onto rules, reports into counters, fair share | `clock`, `limiter`, `rules`, `settings`, `storage` |
//! | `rlqs` | the protocol edge (RLQS): streams, conversion, refusals, report spans, a report's turn at its client's gate | `clock`, `rls`, `metrics`, `pb`, `peers`, `quota`, `rules`, `settings`, `storage`, `traces` |
//! | `xds` | rules over xDS: the ADS stream, resources → rules, ACK/NACK, reconnection | `backoff`, `config`, `health`, `metrics`, `pb`, `reload`, `settings`, `telemetry`, `tls` |
//! | `http` | `/healthcheck`, `/json`, `/rlconfig`, `/metrics`, `/counters`, the status page and `/debug/top` | `rls`, `limiter`, `metrics`, `pb`, `peers`, `quota`, `rules`, `storage` |
//! | `server` | the gRPC server: RLS, RLQS, health, reflection, connection limits, the adaptive limit on decisions in flight (`admission`) | `grpc`, `rls`, `health`, `metrics`, `pb`, `peers`, `rlqs`, `settings`, `storage`, `tls` |
//! | `app` | the service as one value: build (with its `Dependencies`: the clock, and a store a test built), bind, serve, drain; the runtime it runs on (LIFO slot off) | every module |

pub mod app;
pub mod backoff;
pub mod clock;
pub mod config;
pub mod grpc;
pub mod health;
pub mod http;
pub mod limiter;
pub mod metrics;
pub mod pb;
pub mod peers;
pub mod quota;
pub mod reload;
pub mod rlqs;
pub mod rls;
pub mod rules;
pub mod server;
pub mod settings;
pub mod storage;
pub mod telemetry;
pub mod tls;
pub mod traces;
pub mod xds;
