//! The reference's matching and counting semantics (reference §2.3–§2.4, integration
//! scenario A), on every backend.

use crate::backends::Backend;
use crate::on_every_backend;
use crate::support::{Options, desc, req, req1};
use turnstile::clock::Clock;
use turnstile::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, rate_limit::Unit};

pub const BASIC: &str = r#"
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: { unit: second, requests_per_unit: 5 }
      - key: subkey1
        value: subvalue1
        rate_limit: { unit: second, requests_per_unit: 10 }
  - key: key2
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: key2
    value: value2
    rate_limit: { unit: minute, requests_per_unit: 30 }
  - key: key2
    value: value3
  - key: key3
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: key4
    rate_limit: { unit: DAY, requests_per_unit: 1, name: key4_rate_limit }
  - key: key5
    value: value5
    rate_limit: { unit: day, requests_per_unit: 15 }
    descriptors:
      - key: subkey5
        value: subvalue5
        rate_limit: { unit: day, requests_per_unit: 25 }
  - key: key6
    rate_limit: { unlimited: true }
  - key: key7
    rate_limit: { unit: minute, requests_per_unit: 70 }
    detailed_metric: true
  - key: blocked
    rate_limit: { unit: minute, requests_per_unit: 0 }
  - key: yearly
    rate_limit: { unit: year, requests_per_unit: 2 }
  - key: monthly
    rate_limit: { unit: month, requests_per_unit: 2 }
  - key: weekly
    rate_limit: { unit: week, requests_per_unit: 2 }
"#;

pub const WILDCARD: &str = r#"
domain: wild-domain
descriptors:
  - key: wild
    value: foo*
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: noWild
    value: foo
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: midWild
    value: bar*b
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: multiWild
    value: foo*bar*baz
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit: { unit: minute, requests_per_unit: 20 }
"#;

/// `(requests_per_unit, unit, name)` of status `i`, if a limit applied.
pub fn limit(resp: &RateLimitResponse, i: usize) -> Option<(u32, Unit, String)> {
    resp.statuses[i]
        .current_limit
        .as_ref()
        .map(|l| (l.requests_per_unit, l.unit(), l.name.clone()))
}

fn lim(n: u32, unit: Unit) -> Option<(u32, Unit, String)> {
    Some((n, unit, String::new()))
}

async fn basic_matrix(backend: Backend) {
    let Some(s) = backend
        .start(&[("basic.yaml", BASIC)], Options::default())
        .await
    else {
        return;
    };
    type Case = (
        Vec<(&'static str, &'static str)>,
        Option<(u32, Unit, String)>,
    );
    let cases: Vec<Case> = vec![
        (vec![("key1", "something")], None),
        (vec![("key1", "value1")], None),
        (
            vec![("key1", "value1"), ("subkey1", "something")],
            lim(5, Unit::Second),
        ),
        (
            vec![("key1", "value1"), ("subkey1", "subvalue1")],
            lim(10, Unit::Second),
        ),
        (vec![("key2", "anything")], lim(20, Unit::Minute)),
        (vec![("key2", "value2")], lim(30, Unit::Minute)),
        (vec![("key2", "value3")], None),
        (vec![("key2", "value2"), ("subkey", "subvalue")], None),
        (vec![("key3", "foo")], lim(1, Unit::Hour)),
        (
            vec![("key4", "foo")],
            Some((1, Unit::Day, "key4_rate_limit".to_owned())),
        ),
        (vec![("key5", "value5")], lim(15, Unit::Day)),
        (
            vec![("key5", "value5"), ("subkey5", "subvalue5")],
            lim(25, Unit::Day),
        ),
        (vec![("key5", "value5"), ("subkey5", "subvalue")], None),
        (vec![("key7", "X")], lim(70, Unit::Minute)),
        (vec![("weekly", "w")], lim(2, Unit::Week)),
    ];
    for (entries, want) in cases {
        let resp = s.call(req1("test-domain", &entries)).await;
        assert_eq!(limit(&resp, 0), want, "{entries:?}");
        assert_eq!(resp.statuses[0].code(), Code::Ok, "{entries:?}");
        assert_eq!(resp.overall_code(), Code::Ok);
        if want.is_none() {
            let st = &resp.statuses[0];
            assert_eq!(
                (st.limit_remaining, st.duration_until_reset.is_none()),
                (0, true),
                "{entries:?}"
            );
        }
    }
    let resp = s.call(req1("test-domain", &[("key6", "foo")])).await;
    assert_eq!(
        (limit(&resp, 0), resp.statuses[0].limit_remaining),
        (None, u32::MAX),
        "unlimited"
    );
    let resp = s.call(req1("foo_domain", &[("key2", "x")])).await;
    assert_eq!(
        (resp.overall_code(), limit(&resp, 0)),
        (Code::Ok, None),
        "unknown domain"
    );
}

async fn wildcards(backend: Backend) {
    let Some(s) = backend
        .start(&[("wild.yaml", WILDCARD)], Options::default())
        .await
    else {
        return;
    };
    let matched = |entries: Vec<(&'static str, &'static str)>, yes: bool| (entries, yes);
    let cases = vec![
        matched(vec![("wild", "foo1")], true),
        matched(vec![("wild", "foo2")], true),
        matched(vec![("wild", "bar")], false),
        matched(vec![("noWild", "foo1")], false),
        matched(vec![("midWild", "barab")], true),
        matched(vec![("midWild", "bar123b")], true),
        matched(vec![("midWild", "barb")], true),
        matched(vec![("midWild", "bara")], false),
        matched(vec![("midWild", "xbarb")], false),
        matched(vec![("multiWild", "foo123bar456baz")], true),
        matched(vec![("multiWild", "foobarbaz")], true),
        matched(vec![("nestedWild", "val1"), ("wild", "goo2")], true),
        matched(vec![("nestedWild", "val1"), ("wild", "foo2")], false),
    ];
    for (entries, yes) in cases {
        let resp = s.call(req1("wild-domain", &entries)).await;
        assert_eq!(limit(&resp, 0).is_some(), yes, "{entries:?}");
    }
    // Without share_threshold every matching value has its own counter.
    let a = s.call(req1("wild-domain", &[("wild", "fooA")])).await;
    let b = s.call(req1("wild-domain", &[("wild", "fooB")])).await;
    assert_eq!(
        (a.statuses[0].limit_remaining, b.statuses[0].limit_remaining),
        (19, 19)
    );
}

async fn counting_and_reset(backend: Backend) {
    let Some(s) = backend
        .start(&[("basic.yaml", BASIC)], Options::default())
        .await
    else {
        return;
    };
    let now = s.clock.now_secs();
    for i in 0..25u32 {
        let resp = s.call(req1("test-domain", &[("key2", "R")])).await;
        let st = &resp.statuses[0];
        if i < 20 {
            assert_eq!(
                (st.code(), st.limit_remaining),
                (Code::Ok, 19 - i),
                "request {i}"
            );
        } else {
            assert_eq!(
                (st.code(), st.limit_remaining, resp.overall_code()),
                (Code::OverLimit, 0, Code::OverLimit),
                "request {i}"
            );
        }
        assert_eq!(
            st.duration_until_reset.as_ref().map(|d| d.seconds),
            Some(60 - (now % 60) as i64)
        );
    }
    s.clock.advance(60);
    let resp = s.call(req1("test-domain", &[("key2", "R")])).await;
    assert_eq!(
        (resp.statuses[0].code(), resp.statuses[0].limit_remaining),
        (Code::Ok, 19),
        "next window"
    );
}

async fn two_descriptors(backend: Backend) {
    let Some(s) = backend
        .start(&[("basic.yaml", BASIC)], Options::default())
        .await
    else {
        return;
    };
    for i in 0..15u32 {
        let resp = s
            .call(req(
                "test-domain",
                vec![desc(&[("key2", "R2")]), desc(&[("key3", "R2")])],
            ))
            .await;
        assert_eq!(
            (resp.statuses[0].code(), resp.statuses[0].limit_remaining),
            (Code::Ok, 19 - i)
        );
        if i < 1 {
            assert_eq!(
                (resp.statuses[1].code(), resp.overall_code()),
                (Code::Ok, Code::Ok)
            );
        } else {
            assert_eq!(
                (resp.statuses[1].code(), resp.overall_code()),
                (Code::OverLimit, Code::OverLimit)
            );
        }
    }
}

async fn zero_blocks_and_long_units_count(backend: Backend) {
    let Some(s) = backend
        .start(&[("basic.yaml", BASIC)], Options::default())
        .await
    else {
        return;
    };
    let resp = s.call(req1("test-domain", &[("blocked", "x")])).await;
    assert_eq!(
        (resp.statuses[0].code(), resp.statuses[0].limit_remaining),
        (Code::OverLimit, 0)
    );
    for key in ["weekly", "monthly", "yearly"] {
        let remaining: Vec<(Code, u32)> = {
            let mut out = Vec::new();
            for _ in 0..3 {
                let resp = s.call(req1("test-domain", &[(key, "v")])).await;
                out.push((resp.statuses[0].code(), resp.statuses[0].limit_remaining));
            }
            out
        };
        assert_eq!(
            remaining,
            vec![(Code::Ok, 1), (Code::Ok, 0), (Code::OverLimit, 0)],
            "{key}"
        );
    }
}

async fn hostile_values_are_counted_separately(backend: Backend) {
    let rules = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: { unit: minute, requests_per_unit: 1 }\n  - key: a_b\n    descriptors:\n      - key: c\n        rate_limit: { unit: minute, requests_per_unit: 1 }\n";
    let Some(s) = backend
        .start(&[("d.yaml", rules)], Options::default())
        .await
    else {
        return;
    };
    let long = "x".repeat(1 << 20);
    let long2 = format!("{}y", "x".repeat((1 << 20) - 1));
    let values = [
        "with space",
        "new\nline",
        "nul\0byte",
        "ünïcødé ☃",
        "tab\there",
        "",
        long.as_str(),
        long2.as_str(),
        "a b N60 v",
    ];
    for value in values {
        let first = s.call(req1("d", &[("k", value)])).await;
        assert_eq!(first.statuses[0].code(), Code::Ok, "first {value:.20?}");
        let second = s.call(req1("d", &[("k", value)])).await;
        assert_eq!(
            second.statuses[0].code(),
            Code::OverLimit,
            "second {value:.20?}"
        );
    }
    // (a, b_c) and (a_b, c) would collide if entries were joined with `_`.
    let one = s.call(req1("d", &[("a", "x"), ("b", "y_c")])).await;
    let two = s.call(req1("d", &[("a_b", "x"), ("c", "y")])).await;
    assert_eq!(
        (one.statuses[0].code(), two.statuses[0].code()),
        (Code::Ok, Code::Ok)
    );
}

async fn many_descriptors_in_one_request(backend: Backend) {
    let Some(s) = backend
        .start(&[("basic.yaml", BASIC)], Options::default())
        .await
    else {
        return;
    };
    let values: Vec<String> = (0..32).map(|i| format!("v{i}")).collect();
    let descriptors = values
        .iter()
        .map(|v| desc(&[("key2", v.as_str())]))
        .collect();
    let resp = s.call(req("test-domain", descriptors)).await;
    assert_eq!(resp.statuses.len(), 32);
    assert!(
        resp.statuses
            .iter()
            .all(|st| st.limit_remaining == 19 && st.code() == Code::Ok)
    );
    let resp = s
        .call(req(
            "test-domain",
            vec![desc(&[("key2", "v3")]), desc(&[("key2", "v3")])],
        ))
        .await;
    let mut remaining: Vec<u32> = resp.statuses.iter().map(|st| st.limit_remaining).collect();
    remaining.sort_unstable();
    assert_eq!(
        remaining,
        vec![17, 18],
        "each hit is counted once, atomically"
    );
}

on_every_backend!(
    basic_matrix,
    wildcards,
    counting_and_reset,
    two_descriptors,
    zero_blocks_and_long_units_count,
    hostile_values_are_counted_separately,
    many_descriptors_in_one_request,
);
