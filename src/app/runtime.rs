//! The Tokio runtime the service runs on: multi-threaded (one worker per core Turnstile may
//! use, `TOKIO_WORKER_THREADS` to override), with Tokio's LIFO slot turned off.
//!
//! Why the LIFO slot is off: with it, a task woken by the running task runs next. When a call's
//! task finishes, it wakes its HTTP/2 connection's task, which then runs at once and writes
//! that one response (a `writev` per 1.5 calls measured under load). Without it, the connection
//! task queues behind the other calls that are ready, and one write carries all their responses
//! (a `writev` per ~32 calls): the no-op floor served 1.5-1.8x the calls per second on one core
//! (BENCHMARKS.md). Turning it off needs `--cfg tokio_unstable` (set in `.cargo/config.toml`);
//! a build without it gets Tokio's default runtime and [`lifo_slot_off`] says so.
//!
//! Must not touch: what runs on the runtime (the app's wiring).

/// The service's runtime.
pub fn build() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    #[cfg(tokio_unstable)]
    builder.disable_lifo_slot();
    builder.build()
}

/// The service's runtime, built once the process's descriptors are prepared for
/// `max_connections` (the open files limit raised and the descriptor table grown, which must
/// happen before the runtime's threads share it: `app::descriptors`).
pub fn build_serving(max_connections: usize) -> std::io::Result<tokio::runtime::Runtime> {
    super::descriptors::prepare(max_connections);
    build()
}

/// Whether [`build`] turns the LIFO slot off (this binary was built with `tokio_unstable`).
pub fn lifo_slot_off() -> bool {
    cfg!(tokio_unstable)
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_build_turns_the_lifo_slot_off() {
        // `.cargo/config.toml` sets the flag; a build that lost it serves ~0.6x the calls.
        assert!(
            super::lifo_slot_off(),
            "built without --cfg tokio_unstable (is RUSTFLAGS set without it?)"
        );
    }
}
