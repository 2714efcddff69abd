//! Any bytes as a request's domain, as a descriptor value counted with `detailed_metric` and
//! mogrified into DogStatsD tags, and as an `EXTRA_TAGS` value: every statsd line the sink
//! would send parses back as one metric (one line; a name without `:`, `|` or a control
//! character; a count) with exactly the tags it was given, in order, none of them injected.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use turnstile::clock::ManualClock;
use turnstile::config::{LoadOptions, parse_files};
use turnstile::limiter::{Descriptor, Entry, Limiter, Request};
use turnstile::metrics::Metrics;
use turnstile::metrics::mogrify::Mogrifiers;
use turnstile::rules::RuleSet;
use turnstile::settings::Mogrifier;
use turnstile::storage::memory::MemoryStore;

const RULES: &str = "domain: fz\ndescriptors:\n  - key: k\n    detailed_metric: true\n    rate_limit: { unit: hour, requests_per_unit: 1 }\n";

struct World {
    runtime: tokio::runtime::Runtime,
    rules: RuleSet,
    limiter: Limiter<MemoryStore>,
    mogrifiers: Mogrifiers,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let files = [("fz.yaml".into(), RULES.to_owned())];
        let rules = parse_files(&files, LoadOptions::default())
            .expect("rules")
            .rules;
        let clock = ManualClock::new(1_800_000_000);
        let store = MemoryStore::new(1_000_000, Arc::new(clock.clone()));
        let mogrifier = Mogrifier {
            id: "L".into(),
            pattern: r"^ratelimit\.service\.rate_limit\.([^.]*)\.(.*)\.([^.]*)$".into(),
            name: "ratelimit.service.rate_limit.$3".into(),
            tags: vec![
                ("domain".into(), "$1".into()),
                ("descriptor".into(), "$2".into()),
            ],
        };
        World {
            runtime: tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime"),
            rules,
            limiter: Limiter::new(store, Arc::new(clock), Default::default()),
            mogrifiers: Mogrifiers::new(&[mogrifier]).expect("mogrifier"),
        }
    })
}

fn request<'a>(domain: &'a str, value: &'a str) -> Request<'a> {
    Request {
        domain: domain.into(),
        descriptors: vec![Descriptor {
            entries: vec![Entry {
                key: "k".into(),
                value: value.into(),
            }],
            limit_override: None,
            hits: 1,
            refund: false,
            hits_addend: None,
        }],
        hits_addend: 0,
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let w = world();
    let metrics = Metrics::new(1_000, 0.8, &[("t".into(), text.to_string())]);
    for domain in [text.as_ref(), "fz"] {
        let request = request(domain, &text);
        if let Ok(verdict) = w.runtime.block_on(w.limiter.check(&w.rules, &request)) {
            metrics.record(&request, &verdict);
        }
    }
    for line in turnstile::metrics::statsd::lines(&metrics, &w.mogrifiers) {
        assert!(!line.chars().any(char::is_control), "one line: {line:?}");
        let (name, rest) = line.split_once(':').expect("name:value");
        assert!(!name.contains('|'), "{line:?}");
        let mut sections = rest.split('|');
        let value = sections.next().expect("a value");
        assert!(value.parse::<u64>().is_ok(), "{line:?}");
        assert_eq!(sections.next(), Some("c"), "{line:?}");
        let tags = sections.next().expect("tags: EXTRA_TAGS at least");
        assert_eq!(sections.next(), None, "no further section: {line:?}");
        let keys: Vec<&str> = tags
            .strip_prefix('#')
            .expect("#tags")
            .split(',')
            .map(|t| t.split(':').next().unwrap_or(""))
            .collect();
        assert!(
            keys == ["t"] || keys == ["t", "domain", "descriptor"],
            "only the tags given: {line:?}"
        );
    }
});
