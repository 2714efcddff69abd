//! Any bytes as a rule file: the loader answers rules or errors with a position, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use turnstile::config::{LoadOptions, parse_files};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data).into_owned();
    if let Err(errors) = parse_files(&[("fuzz.yaml".to_owned(), text)], LoadOptions::default()) {
        assert!(!errors.0.is_empty(), "an error list is never empty");
        for e in &errors.0 {
            assert_eq!(e.origin, "fuzz.yaml");
        }
    }
});
