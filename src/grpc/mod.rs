//! What Turnstile writes itself in place of tonic's generated server, each piece because a
//! measurement showed what tonic's costs on the hot path (CONTRIBUTING.md, "What Turnstile
//! writes itself", lists what each buys, the command that measures it again, and when to
//! retire it):
//!
//! - `unary`: one unary exchange, the request's one message read and the answer written,
//!   without tonic's streaming codec;
//! - `wire`: the protobuf wire format read from a borrowed buffer (the rate-limit request's
//!   decoder, `rls::decode`, is built on it), reading exactly what prost reads;
//! - `routes`: the dispatch by service name, without tonic's axum router.
//!
//! All three answer as tonic does; `tests/it/tonic_contract.rs` sends the same requests, good
//! and bad, to a tonic server and to Turnstile and holds the two answers equal, and
//! `tests/it/wire_decode.rs` holds `wire` to prost. Nothing here knows what a message means.
//!
//! Must not touch: any service's messages or decisions, connections (`server::incoming`).

pub(crate) mod routes;
pub(crate) mod unary;
pub(crate) mod wire;
