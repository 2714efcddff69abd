//! Micro-benchmarks of the request hot path: rule matching, counter-key building, request
//! conversion, and a whole decision over the memory store; and the server's cost of one RLQS
//! report (decode, fold into the store, assign, encode) over the memory store.
//!   cargo bench --bench hot_path

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use turnstile::clock::{ManualClock, UnixMillis};
use turnstile::config::{LoadOptions, parse_files};
use turnstile::limiter::{Limiter, counter_key};
use turnstile::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use turnstile::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use turnstile::rls::request_from_pb;
use turnstile::rules::RuleSet;
use turnstile::storage::memory::MemoryStore;

fn rules() -> RuleSet {
    let text = include_str!("../config/example.yaml").to_owned();
    parse_files(&[("example.yaml".into(), text)], LoadOptions::default())
        .expect("rules")
        .rules
}

fn request(descriptors: usize) -> RateLimitRequest {
    let entries = |i: usize| {
        vec![
            Entry {
                key: "foo".into(),
                value: format!("user-{i}"),
            },
            Entry {
                key: "baz".into(),
                value: "not-so-shady".into(),
            },
        ]
    };
    RateLimitRequest {
        domain: "rl".into(),
        descriptors: (0..descriptors)
            .map(|i| RateLimitDescriptor {
                entries: entries(i),
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

fn matching(c: &mut Criterion) {
    let rules = rules();
    let domain = rules.domain("rl").expect("domain");
    c.bench_function("match exact+key-only, 2 levels", |b| {
        b.iter(|| {
            domain.lookup(black_box([("foo", "user-1"), ("baz", "not-so-shady")]).into_iter())
        })
    });
    c.bench_function("match miss at level 1", |b| {
        b.iter(|| domain.lookup(black_box([("nothing", "x")]).into_iter()))
    });
    c.bench_function("match wildcard (api domain)", |b| {
        let text = include_str!("../config/api.yaml").to_owned();
        let api = parse_files(&[("api.yaml".into(), text)], LoadOptions::default())
            .expect("rules")
            .rules;
        let domain = api.domain("api").expect("api");
        b.iter(|| domain.lookup(black_box([("client_id", "internal-batch-7")]).into_iter()))
    });
}

fn keys(c: &mut Criterion) {
    let entries = [("foo", "user-12345"), ("baz", "not-so-shady")];
    c.bench_function("counter key, plain values", |b| {
        b.iter(|| {
            counter_key(
                black_box("prefix:"),
                "rl",
                black_box(entries).into_iter(),
                60,
                1_796_000_000,
            )
        })
    });
    let long = "x".repeat(300);
    c.bench_function("counter key, long value (hashed)", |b| {
        b.iter(|| {
            counter_key(
                "prefix:",
                "rl",
                black_box([("ua", long.as_str())]).into_iter(),
                60,
                1_796_000_000,
            )
        })
    });
}

fn conversion(c: &mut Criterion) {
    use prost::Message;
    use turnstile::pb::turnstile::wire::v1::LenientRequest;
    use turnstile::rls::decode_request;
    let pb = request(5);
    c.bench_function("request_from_pb, 5 descriptors", |b| {
        b.iter(|| request_from_pb(black_box(&pb)).map(|r| r.descriptors.len()))
    });
    for n in [1, 5] {
        let wire = request(n).encode_to_vec();
        c.bench_function(
            &format!("request from the wire's bytes, {n} descriptor(s)"),
            |b| {
                b.iter(|| {
                    decode_request(black_box(wire.as_slice()))
                        .map(|r| r.validate().map(|r| r.descriptors.len()))
                })
            },
        );
        // prost's generated decoder alone, for comparison (what the server used before).
        c.bench_function(
            &format!("prost LenientRequest::decode, {n} descriptor(s)"),
            |b| {
                b.iter(|| {
                    LenientRequest::decode(black_box(wire.as_slice())).map(|r| r.descriptors.len())
                })
            },
        );
    }
}

/// A limiter over the memory store at a fixed time, and a runtime to drive it.
fn memory_limiter() -> (Limiter<MemoryStore>, tokio::runtime::Runtime) {
    let clock = ManualClock::new(1_796_000_000);
    let store = MemoryStore::new(1_000_000, Arc::new(clock.clone()));
    let limiter = Limiter::new(store, Arc::new(clock), Default::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    (limiter, runtime)
}

fn decision(c: &mut Criterion) {
    let rules = rules();
    let (limiter, runtime) = memory_limiter();
    for n in [1, 5] {
        let pb = request(n);
        let req = request_from_pb(&pb).expect("valid");
        c.bench_function(
            &format!("check over the memory store, {n} descriptor(s)"),
            |b| {
                b.iter(|| {
                    runtime
                        .block_on(limiter.check(&rules, black_box(&req)))
                        .map(|v| v.overall)
                })
            },
        );
    }
}

/// A new key offered to a memory store whose shards are full of live counters (64 shards of
/// `per_shard`): refused, and what that costs as the shards grow.
fn full_memory_store(c: &mut Criterion) {
    use turnstile::storage::{Change, CounterKey, CounterOp, CounterStore};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    for per_shard in [1_000, 10_000] {
        let clock = ManualClock::new(1_796_000_000);
        let store = MemoryStore::new(64 * per_shard, Arc::new(clock));
        let hit = |i: usize| CounterOp {
            key: CounterKey::checked(format!("live-{i}")).expect("key"),
            change: Change::Add(1),
            expires_at: 1_796_000_060,
        };
        let mut i = 0;
        while store.len() < 64 * per_shard && i < 200 * per_shard {
            let _ = runtime.block_on(store.apply_ops(&[hit(i)]));
            i += 1;
        }
        let mut n = 0usize;
        c.bench_function(
            &format!("memory store full ({per_shard} live per shard): a new key"),
            |b| {
                b.iter(|| {
                    n += 1;
                    runtime
                        .block_on(store.apply_ops(black_box(&[hit(usize::MAX - n)])))
                        .is_err()
                })
            },
        );
    }
}

fn rlqs_report(c: &mut Criterion) {
    use turnstile::pb::envoy::service::rate_limit_quota::v3::{
        BucketId, RateLimitQuotaUsageReports, rate_limit_quota_usage_reports::BucketQuotaUsage,
    };
    use turnstile::quota::QuotaStream;
    use turnstile::rlqs::{response_to_pb, usages_from_pb};
    let rules = rules();
    let (limiter, runtime) = memory_limiter();
    for n in [1, 10] {
        let report = RateLimitQuotaUsageReports {
            domain: "rl".into(),
            bucket_quota_usages: (0..n)
                .map(|i| BucketQuotaUsage {
                    bucket_id: Some(BucketId {
                        bucket: [("foo".to_owned(), format!("user{i}"))].into(),
                    }),
                    time_elapsed: Some(prost_types::Duration {
                        seconds: 5,
                        nanos: 0,
                    }),
                    num_requests_allowed: 40,
                    num_requests_denied: 3,
                })
                .collect(),
        };
        let mut stream = QuotaStream::new(Default::default());
        c.bench_function(&format!("RLQS report, {n} bucket(s), memory store"), |b| {
            b.iter(|| {
                let (domain, usages) =
                    usages_from_pb(black_box(report.clone()), 4_096).expect("valid");
                let decided = runtime
                    .block_on(stream.on_report(
                        &domain,
                        usages,
                        &rules,
                        &limiter,
                        UnixMillis::new(1_796_000_000_000),
                    ))
                    .expect("assigned");
                response_to_pb(&decided)
            })
        });
    }
}

/// What tracing adds to a call that carries no trace headers: the parent lookup and the
/// sampling decision (rate 0, 1 %), and at rate 1 a span with an attribute built, ended and
/// queued (the queue is never drained here: past its size, spans are counted and dropped).
fn tracing_unsampled(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let _guard = runtime.enter();
    for (label, rate) in [
        ("rate 0", 0.0),
        ("rate 0.01", 0.01),
        ("rate 1 (a span built, ended, queued)", 1.0),
    ] {
        let settings = turnstile::settings::TracingSettings {
            protocol: turnstile::settings::OtlpProtocol::Grpc,
            service_name: "bench".into(),
            service_namespace: String::new(),
            service_instance_id: "bench".into(),
            sampling_rate: rate,
            include_values: false,
            endpoint: "http://127.0.0.1:9".into(),
            headers: Vec::new(),
            timeout: std::time::Duration::from_secs(1),
            ca_file: None,
            client_identity: None,
            queue_size: 2048,
            batch_size: 512,
            schedule_delay: std::time::Duration::from_secs(5),
        };
        let (tracer, _export) =
            turnstile::traces::Tracer::start(&settings, Default::default()).expect("tracer");
        let mut metadata = tonic::metadata::MetadataMap::new();
        metadata.insert("content-type", "application/grpc".parse().expect("ascii"));
        metadata.insert("te", "trailers".parse().expect("ascii"));
        c.bench_function(
            &format!("tracing: an untraced call's parent and draw, {label}"),
            |b| {
                b.iter(|| {
                    let parent = tracer.parent(black_box(&metadata));
                    tracer
                        .server_span("ShouldRateLimit Execution", &parent)
                        .map(|s| {
                            s.set("ratelimit.domain", "bench");
                            s.end()
                        })
                })
            },
        );
    }
}

criterion_group!(
    benches,
    tracing_unsampled,
    matching,
    keys,
    conversion,
    decision,
    full_memory_store,
    rlqs_report
);
criterion_main!(benches);
