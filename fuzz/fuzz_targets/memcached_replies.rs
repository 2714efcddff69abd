//! Any bytes as what a memcached server sends back on a pipelined connection: the reply parser
//! reads replies or stops at a broken stream, never panics and never allocates by a length the
//! server claims.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = turnstile::storage::memcached::fuzz_replies(data);
    assert!(parsed <= data.len());
});
