//! Unit tests of the fair-share arithmetic.
use super::*;

/// Demand `now` in the current window and `before` in the one before.
fn demand(now: u64, before: u64) -> Demand {
    Demand { now, before }
}

fn input() -> ShareInput {
    ShareInput {
        limit: 120,
        used: 0,
        period_ms: 60_000,
        elapsed_ms: 0,
        own_demand: demand(0, 0),
        all_demand: demand(0, 0),
        own_allowed: 0,
        last_demand: 0,
        others_per_own: 0.0,
        own_pace: 0.0,
        min_share: 0.05,
        ttl_seconds: 10,
    }
}

#[test]
fn a_spent_window_denies_until_it_ends() {
    let i = ShareInput {
        used: 130,
        elapsed_ms: 59_001,
        ..input()
    };
    assert_eq!(i.assign(None), Assignment::DenyAll { ttl_seconds: 1 });
}

#[test]
fn the_rate_is_what_is_left_of_the_streams_part_paced_over_the_time_left() {
    // 80 % of the demand: 96 of the window's 120, 48 of them used; 48 left: the new bucket
    // starts with 2, the other 46 over 30 s = 92 per minute.
    let i = ShareInput {
        used: 60,
        elapsed_ms: 30_000,
        own_demand: demand(80, 0),
        all_demand: demand(100, 0),
        own_allowed: 48,
        ..input()
    };
    assert_eq!(
        i.assign(None),
        Assignment::TokenBucket {
            max_tokens: 2,
            tokens_per_fill: 92,
            fill_interval_seconds: 60,
            ttl_seconds: 10
        }
    );
}

#[test]
fn a_stream_behind_its_part_catches_up_and_one_ahead_slows_down() {
    // Half the demand each, 60 of 120 used at half time: the one that got 20 is owed 40
    // (2 at once, 38 over 30 s: 76 a minute), the one that got 40 is owed 20 (36 a minute).
    let behind = ShareInput {
        used: 60,
        elapsed_ms: 30_000,
        own_demand: demand(50, 0),
        all_demand: demand(100, 0),
        own_allowed: 20,
        ..input()
    };
    let ahead = ShareInput {
        own_allowed: 40,
        ..behind
    };
    let rate = |i: ShareInput| match i.assign(None) {
        Assignment::TokenBucket {
            tokens_per_fill, ..
        } => tokens_per_fill,
        other => panic!("a token bucket expected, got {other:?}"),
    };
    assert_eq!((rate(behind), rate(ahead)), (76, 36));
    // Owed more than is left: never more than what remains of the window's budget (10: 2 at
    // once, 8 over 30 s).
    let late = ShareInput {
        used: 110,
        own_allowed: 0,
        ..behind
    };
    assert_eq!(rate(late), 16);
    // Past its part: denied until the window ends (or its next report says otherwise).
    let past = ShareInput {
        own_allowed: 70,
        ..behind
    };
    assert_eq!(past.assign(None), Assignment::DenyAll { ttl_seconds: 30 });
}

#[test]
fn a_quiet_stream_gets_the_floor() {
    let i = ShareInput {
        own_demand: demand(0, 0),
        all_demand: demand(1_000, 0),
        ..input()
    };
    assert!((i.share() - 0.05).abs() < 1e-9);
}

#[test]
fn the_previous_window_counts_by_how_much_of_it_the_span_still_covers() {
    // A quarter into the window: the previous window weighs 3/4.
    let i = ShareInput {
        elapsed_ms: 15_000,
        own_demand: demand(0, 40),
        all_demand: demand(10, 40),
        ..input()
    };
    assert!((i.share() - 30.0 / 40.0).abs() < 1e-9);
}

#[test]
fn the_others_lagging_count_is_topped_up_by_at_most_one_report_of_the_ratio_last_seen() {
    // At the window's start (nothing of it reported), the ratio is the previous window's.
    let start = ShareInput {
        own_demand: demand(0, 240),
        all_demand: demand(0, 1_200),
        ..input()
    };
    assert!((start.others_per_own_now() - 4.0).abs() < 1e-9);
    // 4.5 s into the window, this stream (a fifth of the demand) is the first to report: the
    // others are taken to have asked four times as much meanwhile.
    let first = ShareInput {
        elapsed_ms: 4_500,
        own_demand: demand(18, 240),
        all_demand: demand(18, 1_200),
        last_demand: 18,
        others_per_own: start.others_per_own_now(),
        ..input()
    };
    assert!((first.share() - 0.2).abs() < 1e-9, "{}", first.share());
    assert!((first.others_per_own_now() - 4.0).abs() < 1e-9);
    // Once they have reported more than that, their count is used.
    let counted = ShareInput {
        all_demand: demand(18 + 90, 1_200),
        ..first
    };
    let expected = (18.0 + 240.0 * 0.925) / (108.0 + 1_200.0 * 0.925);
    assert!((counted.share() - expected).abs() < 1e-9);
    // 30 s in, the others' count is one report behind (4 × 20 short): topped up to 4 × 120.
    let lagging = ShareInput {
        elapsed_ms: 30_000,
        own_demand: demand(120, 240),
        all_demand: demand(120 + 400, 1_200),
        last_demand: 20,
        ..first
    };
    let fair = (120.0 + 240.0 * 0.5) / (600.0 + 1_200.0 * 0.5);
    assert!((lagging.share() - fair).abs() < 1e-9, "{}", lagging.share());
    // They have gone (no count this window): only one report's worth is assumed, not 4 × 120.
    let gone = ShareInput {
        all_demand: demand(120, 1_200),
        ..lagging
    };
    let assumed = (120.0 + 240.0 * 0.5) / (120.0 + 80.0 + 1_200.0 * 0.5);
    assert!((gone.share() - assumed).abs() < 1e-9, "{}", gone.share());
    // A bucket that has just appeared in two Envoys (each reported its first request): the
    // other is taken to be as busy as this one until it reports, not absent.
    let created = ShareInput {
        own_demand: demand(1, 0),
        all_demand: demand(2, 0),
        ..input()
    };
    let cold = ShareInput {
        own_demand: demand(18, 0),
        all_demand: demand(19, 0),
        others_per_own: created.others_per_own_now(),
        ..first
    };
    assert!((cold.share() - 0.5).abs() < 1e-9, "{}", cold.share());
    // With no ratio seen (this stream reported first and saw nobody), an other it now sees is
    // taken to be as busy as itself over its latest report (18), not as the one request counted.
    let unknown = ShareInput {
        others_per_own: 0.0,
        ..cold
    };
    assert!(
        (unknown.share() - 18.0 / 37.0).abs() < 1e-9,
        "{}",
        unknown.share()
    );
    // Alone (nobody else counted), it is all of the demand.
    let alone = ShareInput {
        all_demand: demand(18, 0),
        ..unknown
    };
    assert!((alone.share() - 1.0).abs() < 1e-9, "{}", alone.share());
}

#[test]
fn the_held_bucket_is_kept_while_it_ends_the_window_less_than_a_token_ahead_or_half_behind() {
    let held = |tokens_per_fill| Assignment::TokenBucket {
        max_tokens: 2,
        tokens_per_fill,
        fill_interval_seconds: 60,
        ttl_seconds: 10,
    };
    // Half a window left, 100 of this stream's part still to use: 200 a minute.
    let half = ShareInput {
        elapsed_ms: 30_000,
        own_demand: demand(1, 0),
        all_demand: demand(1, 0),
        own_allowed: 20,
        ..input()
    };
    // 201 a minute for 30 s is half a token more: kept (the stream's count slows it later);
    // 199 is half a token less: replaced (a stream behind gets its rate), and so are 198 and
    // 202 (one token less, one more).
    assert_eq!(half.assign(Some(&held(201))), held(201));
    assert_ne!(half.assign(Some(&held(199))), held(199));
    assert_ne!(half.assign(Some(&held(198))), held(198));
    assert_ne!(half.assign(Some(&held(202))), held(202));
    // A second before the window ends, 2 to use (120 a minute): 20 a minute off either way is
    // a third of a token, kept.
    let last = ShareInput {
        elapsed_ms: 59_000,
        own_allowed: 118,
        ..half
    };
    assert_eq!(last.assign(Some(&held(100))), held(100));
    assert_eq!(last.assign(Some(&held(140))), held(140));
    // A deny-all held is always replaced (and the new bucket starts full: its rate paces
    // what is left after its capacity).
    assert_eq!(
        half.assign(Some(&Assignment::DenyAll { ttl_seconds: 10 })),
        Assignment::TokenBucket {
            max_tokens: 4,
            tokens_per_fill: 192,
            fill_interval_seconds: 60,
            ttl_seconds: 10
        }
    );
}
