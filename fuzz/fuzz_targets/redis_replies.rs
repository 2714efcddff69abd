//! Any bytes as what a Redis server sends back on Turnstile's own pipelined connection: the
//! reply parser reads replies or stops at a broken stream, never panics, never allocates by a
//! length the server claims, and reads the same replies however the stream is cut by the read
//! buffer (a reply parsed where it lies, or gathered across reads).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = turnstile::storage::redis::fuzz_replies(data);
    assert!(parsed <= data.len());
});
