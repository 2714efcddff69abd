//! Any bytes as a `/json` body: parsed by the proto3 JSON mapping, then validated and converted;
//! bad bodies are errors, and nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use turnstile::http::json_request;
use turnstile::rls::request_from_pb;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = json_request(data) {
        let _ = request_from_pb(&request);
    }
});
