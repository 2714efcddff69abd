use std::sync::Arc;

use super::{ENTRIES, EPOCH, Kind, MAX_RULES, SHOWN_BYTES, TopLimited};
use crate::clock::ManualClock;

fn at(millis: u64) -> (TopLimited, ManualClock) {
    let clock = ManualClock::new(0);
    clock.set_millis(millis);
    (TopLimited::new(Arc::new(clock.clone())), clock)
}

fn one<'a>(key: &'a str, value: &'a str) -> std::array::IntoIter<(&'a str, &'a str), 1> {
    [(key, value)].into_iter()
}

#[test]
fn the_flooding_value_is_first_beside_a_thousand_others_within_the_bound() {
    let (top, _clock) = at(10 * EPOCH);
    for round in 0..5 {
        for i in 0..1_000 {
            let user = format!("user-{i}");
            top.record("rl.user", one("user", &user), Kind::Over, 1);
        }
        top.record("rl.user", one("user", "mallory"), Kind::Over, 2_000 + round);
    }
    let snapshot = top.snapshot(5);
    let rule = &snapshot.rules[0];
    assert_eq!(rule.rule, "rl.user");
    assert_eq!(rule.refused, 5 * 1_000 + 10_010);
    let first = &rule.over_limit[0];
    assert_eq!(
        first.descriptor.entries,
        vec![["user".to_owned(), "mallory".to_owned()]]
    );
    assert!(first.count >= 10_010, "an upper bound: {first:?}");
    assert!(
        first.count - first.error <= 10_010,
        "within its error: {first:?}"
    );
    assert!(first.error <= rule.refused / ENTRIES as u64, "{first:?}");
    assert!(first.share > 0.6, "{first:?}");
    assert_eq!(rule.over_limit.len(), 5);
}

#[test]
fn epochs_older_than_the_window_are_forgotten_and_near_is_apart() {
    let (top, clock) = at(0);
    top.record("rl.user", one("user", "old"), Kind::Over, 7);
    top.record("rl.user", one("user", "close"), Kind::Near, 3);
    clock.set_millis(2 * EPOCH + 1);
    let rule = &top.snapshot(10).rules[0];
    assert_eq!(
        (rule.refused, rule.near),
        (7, 3),
        "still within three epochs"
    );
    assert_eq!(rule.near_limit[0].descriptor.entries[0][1], "close");
    clock.set_millis(3 * EPOCH);
    top.record("rl.user", one("user", "new"), Kind::Over, 1);
    let rule = &top.snapshot(10).rules[0];
    assert_eq!(rule.refused, 1, "epoch 0 left the window: {rule:?}");
    assert_eq!(rule.over_limit[0].descriptor.entries[0][1], "new");
    clock.set_millis(7 * EPOCH);
    assert!(
        top.snapshot(10).rules.is_empty(),
        "nothing refused in the window"
    );
}

#[test]
fn hostile_and_huge_values_are_kept_whole_up_to_the_shown_bytes() {
    let (top, _clock) = at(0);
    let huge = "é".repeat(1_000);
    top.record("rl.user", one("user", &huge), Kind::Over, 1);
    top.record(
        "rl.user",
        one("user", "<script>alert(1)</script>"),
        Kind::Over,
        2,
    );
    let snapshot = top.snapshot(10);
    let listed = &snapshot.rules[0].over_limit;
    assert_eq!(
        listed[0].descriptor.entries[0][1],
        "<script>alert(1)</script>"
    );
    assert!(!listed[0].descriptor.cut);
    let shown = &listed[1].descriptor;
    assert!(shown.cut);
    assert!(shown.entries[0][1].len() <= SHOWN_BYTES - "user".len());
    assert!(
        shown.entries[0][1].chars().all(|c| c == 'é'),
        "cut at a character boundary"
    );
    let json = serde_json::to_string(&snapshot).expect("json");
    assert!(
        json.contains(r#""<script>alert(1)</script>""#),
        "JSON keeps the text: {json}"
    );
}

#[test]
fn entries_are_told_apart_by_their_boundaries() {
    let (top, _clock) = at(0);
    top.record("rl.a", [("a", "b"), ("c", "d")].into_iter(), Kind::Over, 1);
    top.record("rl.a", [("ab", ""), ("c", "d")].into_iter(), Kind::Over, 1);
    assert_eq!(top.snapshot(10).rules[0].over_limit.len(), 2);
}

#[test]
fn rules_past_the_bound_are_counted_as_untracked() {
    let (top, _clock) = at(0);
    for i in 0..MAX_RULES + 5 {
        top.record(&format!("rl.rule{i}"), one("k", "v"), Kind::Over, 2);
    }
    let snapshot = top.snapshot(1);
    assert_eq!(snapshot.rules.len(), MAX_RULES);
    assert_eq!(snapshot.untracked, 10);
}

#[test]
fn a_value_refused_last_is_listed_when_an_epoch_ends_inside_the_flood() {
    // CI's shape: 1,000 users × 5 refusals with a minute boundary half-way through them, the
    // flooder's 1,995 and, last, a value refused twice. Both epochs' summaries are full, so the
    // merged window holds up to 2 × ENTRIES values; the last one is in the current epoch.
    let (top, clock) = at(10 * EPOCH - 1);
    for i in 0..1_000 {
        if i == 500 {
            clock.set_millis(10 * EPOCH);
        }
        top.record("rl.user", one("user", &format!("user-{i}")), Kind::Over, 5);
    }
    top.record("rl.user", one("user", "mallory"), Kind::Over, 1_995);
    top.record("rl.user", one("user", "last"), Kind::Over, 2);
    let listed = |limit| {
        let snapshot = top.snapshot(limit);
        let rule = &snapshot.rules[0];
        assert_eq!(rule.refused, 5_000 + 1_995 + 2);
        assert!(
            rule.over_limit.len() <= 2 * ENTRIES,
            "{}",
            rule.over_limit.len()
        );
        rule.over_limit
            .iter()
            .any(|v| v.descriptor.entries[0][1] == "last")
    };
    assert!(listed(2 * ENTRIES), "every merged value is listed");
    assert_eq!(
        top.snapshot(1).rules[0].over_limit[0].descriptor.entries[0][1],
        "mallory"
    );
}
