//! Unit tests of `fold`.
use super::*;

/// Demand `now` in the current window and `before` in the one before.
fn demand(now: u64, before: u64) -> Demand {
    Demand { now, before }
}

/// The moment `n` milliseconds after the epoch.
fn ms(n: u64) -> UnixMillis {
    UnixMillis::new(n)
}

fn usage(allowed: u64, denied: u64, elapsed_ms: u64) -> Usage {
    Usage {
        bucket: BucketId::new([("user".to_owned(), "a".to_owned())]).expect("bucket"),
        allowed,
        denied,
        elapsed_ms,
    }
}

#[test]
fn a_report_inside_its_window_counts_whole() {
    let split = WindowParts::at(
        &usage(8, 2, 5_000),
        ms(60_000),
        ms(70_000),
        Coverage::default(),
    );
    assert_eq!(
        split,
        WindowParts {
            allowed: 8,
            demand: 10,
            earlier_demand: 0
        }
    );
    // Unknown elapsed time: all of it in the report's window.
    assert_eq!(
        WindowParts::at(&usage(8, 2, 0), ms(60_000), ms(60_000), Coverage::default()).demand,
        10
    );
}

#[test]
fn a_report_straddling_a_window_start_counts_its_part_after_it() {
    // 5 s covered, 2 s of them in the new window: 2/5 of 10 allowed, of 20 demand.
    let split = WindowParts::at(
        &usage(10, 10, 5_000),
        ms(60_000),
        ms(62_000),
        Coverage::default(),
    );
    assert_eq!(
        split,
        WindowParts {
            allowed: 4,
            demand: 8,
            earlier_demand: 12
        }
    );
    // Reported right at the start: all of it before.
    let at_start = WindowParts::at(
        &usage(10, 10, 5_000),
        ms(60_000),
        ms(60_000),
        Coverage::default(),
    );
    assert_eq!((at_start.allowed, at_start.earlier_demand), (0, 20));
}

#[test]
fn the_time_covered_is_measured_from_the_previous_report_when_envoy_truncated_it() {
    // Envoy says 4 s for a report 4.9 s after its previous one: 2 s of 4.9 are in the new
    // window, not 2 of 4 (10 allowed of 20: 4, not 5; demand 8, not 10).
    let known = Coverage {
        previous_report: Some(ms(57_100)),
        ..Coverage::default()
    };
    let split = WindowParts::at(&usage(10, 10, 4_000), ms(60_000), ms(62_000), known);
    assert_eq!((split.allowed, split.demand), (4, 8));
    // A previous report further back than the truncation explains: the data plane's own word.
    let long_ago = Coverage {
        previous_report: Some(ms(50_000)),
        ..Coverage::default()
    };
    let split = WindowParts::at(&usage(10, 10, 4_000), ms(60_000), ms(62_000), long_ago);
    assert_eq!((split.allowed, split.demand), (5, 10));
}

#[test]
fn extreme_times_and_rates_saturate_instead_of_overflowing() {
    // A client may say its report covers u64::MAX ms; an assignment may refill u32::MAX a
    // second for a year.
    let known = Coverage {
        previous_report: Some(ms(0)),
        since_start: Some(Assignment::TokenBucket {
            max_tokens: u32::MAX,
            tokens_per_fill: u32::MAX,
            fill_interval_seconds: 1,
            ttl_seconds: u64::MAX,
        }),
    };
    let split = WindowParts::at(&usage(10, 10, u64::MAX), ms(60_000), ms(62_000), known);
    assert_eq!(
        (split.allowed, split.demand, split.earlier_demand),
        (0, 0, 20)
    );
    let year_ms = 366 * 86_400_000;
    let huge = known.since_start.and_then(|a| a.admits_at_most(year_ms));
    assert_eq!(huge, Some(u64::from(u32::MAX) + u64::MAX.div_ceil(1_000)));
}

#[test]
fn allowed_requests_after_a_window_end_are_at_most_what_its_assignment_allowed() {
    // 5 s covered, 2 s of them in the new window; 10 allowed, 10 denied. The bucket pushed
    // when the window ended holds 1 token and refills 30 a minute: at most 2 in 2 s.
    let slow = Coverage {
        since_start: Some(Assignment::TokenBucket {
            max_tokens: 1,
            tokens_per_fill: 30,
            fill_interval_seconds: 60,
            ttl_seconds: 10,
        }),
        ..Coverage::default()
    };
    let split = WindowParts::at(&usage(10, 10, 5_000), ms(60_000), ms(62_000), slow);
    assert_eq!(
        (split.allowed, split.demand, split.earlier_demand),
        (2, 8, 12)
    );
    // Denied since the start: nothing allowed in the new window.
    let denied = Coverage {
        since_start: Some(Assignment::DenyAll { ttl_seconds: 5 }),
        ..Coverage::default()
    };
    assert_eq!(
        WindowParts::at(&usage(10, 10, 5_000), ms(60_000), ms(62_000), denied).allowed,
        0
    );
    // Allow-all says nothing: the even share.
    let open = Coverage {
        since_start: Some(Assignment::AllowAll { ttl_seconds: 5 }),
        ..Coverage::default()
    };
    assert_eq!(
        WindowParts::at(&usage(10, 10, 5_000), ms(60_000), ms(62_000), open).allowed,
        4
    );
}

#[test]
fn demand_rolls_into_the_previous_window_only_when_windows_follow() {
    let mut t = Tracked::default();
    let s = |demand, earlier_demand| WindowParts {
        allowed: 0,
        demand,
        earlier_demand,
    };
    t.add_demand(60, 0, s(30, 0));
    t.add_demand(60, 60, s(5, 7));
    assert_eq!(t.demand, demand(5, 37));
    assert_eq!(t.window_end(), Some(ms(120_000)));
    // A gap of a window: the old demand is not the previous window's.
    t.add_demand(60, 240, s(1, 0));
    assert_eq!(t.demand, demand(1, 0));
}

#[test]
fn a_new_window_starts_unused_with_the_demand_last_read() {
    let mut t = Tracked::default();
    t.add_demand(
        60,
        60,
        WindowParts::at(&usage(3, 1, 0), ms(60_000), ms(70_000), Coverage::default()),
    );
    t.seen_all = 50;
    let before = |period, now| t.carried_over(Window::of(period, now)).demand_before;
    let at_start = t.carried_over(Window::of(60, 120));
    assert_eq!((at_start.used, at_start.demand_now), (0, 0));
    assert_eq!(before(60, 120), 50);
    // Not the window after the tracked one: nothing carried over.
    assert_eq!(before(60, 180), 0);
    assert_eq!(before(30, 120), 0);
}

/// GlobalCounts of the 60 s window at 60 s: the store's `demand_now`, `demand_before` and `used`.
fn counted(demand_now: u64, demand_before: u64, used: u64) -> GlobalCounts {
    GlobalCounts {
        placed: Placed {
            window: Window::of(60, 60),
            split: WindowParts::default(),
        },
        used,
        demand_now,
        demand_before,
    }
}

/// `report`, heard at `at_ms`, counted as the stream's first in the 60 s window from 60 s,
/// with the store's `counts` of that window.
fn count_first_window(t: &mut Tracked, report: &Usage, at_ms: u64, counts: GlobalCounts) {
    t.heard(report, ms(at_ms));
    t.add_demand(
        60,
        60,
        WindowParts::at(report, ms(60_000), ms(at_ms), Coverage::default()),
    );
    t.note_unseen(&counts);
}

/// `report`, heard at `at_ms` in the 60 s window from `start` s, counted as the stream's next
/// report, with the store's `counts` after it.
fn count_next(t: &mut Tracked, report: &Usage, at_ms: u64, start: u64, counts: GlobalCounts) {
    t.heard(report, ms(at_ms));
    let split = WindowParts::at(
        report,
        UnixMillis::from_secs(start),
        ms(at_ms),
        Coverage::default(),
    );
    t.add_demand(60, start, split);
    t.add_unseen(&counts, split.demand + split.earlier_demand);
}

#[test]
fn a_bucket_from_elsewhere_brings_its_unseen_demand_at_its_pace() {
    // First heard at 70 s in a report covering the 5 s before (8 allowed, 2 denied: 2 a
    // second): before 65 s this stream saw nothing of a bucket that existed. Its 60 s window
    // began at 60 s: 5 s unseen there (10 requests, 8 allowed), the 60 s before all unseen.
    let mut t = Tracked::default();
    let report = usage(8, 2, 5_000);
    count_first_window(&mut t, &report, 70_000, counted(1_000, 1_000, 1_000));
    // Nothing is added until the next report says what part of the demand is its own.
    assert_eq!((t.demand, t.allowed), (demand(10, 0), 8));
    // Half of every stream's demand since (10 of 20): at most half of the 990 requests beyond
    // its own, and at most its pace over the time before: the pace.
    count_next(&mut t, &report, 75_000, 60, counted(1_020, 1_000, 1_016));
    assert_eq!(t.demand, demand(10 + 10 + 10, 120));
    assert_eq!(t.allowed, 8 + 8 + 8);
    // The next window is seen whole.
    count_next(&mut t, &report, 125_000, 120, counted(10, 2_000, 8));
    assert_eq!((t.demand, t.allowed), (demand(10, 30), 8));
}

#[test]
fn a_bucket_only_seconds_old_when_its_stream_broke_brings_only_its_part() {
    // First heard at 110 s, 4 requests a second over the 5 s before; 45 s of the window before
    // that would be 180 at that pace. The store holds 82 beyond its own; between this report
    // and the next, its 20 are a fifth of every stream's 100: 16 of the 82 were its own (the
    // pace alone took all 82, and the data plane for the maker of the window's demand).
    let mut t = Tracked::default();
    let report = usage(6, 14, 5_000);
    count_first_window(&mut t, &report, 110_000, counted(102, 0, 27));
    count_next(&mut t, &report, 115_000, 60, counted(202, 0, 60));
    assert_eq!(t.demand, demand(20 + 20 + 16, 0));
    // Allowed: a fifth of the 21 beyond its own.
    assert_eq!(t.allowed, 6 + 6 + 4);
    // The next report in the following window (at 123 s, 3 of its 5 s in it): what was
    // unseen is the previous window's. Every stream's demand since: 40 more in the first
    // window (8 of them its own), 60 in this one (12 its own): its part is 20 of 100 again.
    let mut t = Tracked::default();
    count_first_window(&mut t, &report, 118_000, counted(102, 0, 27));
    count_next(&mut t, &report, 123_000, 120, counted(60, 102 + 40, 12));
    assert_eq!(t.demand, demand(12, 20 + 8 + 16));
    assert_eq!(t.allowed, 3);
}

#[test]
fn unseen_demand_is_never_more_than_the_store_holds_beyond_the_streams_own() {
    // The same report; the store holds 4 more requests now (3 allowed) and 50 before, and
    // nobody else asks for anything after it.
    let report = usage(8, 2, 5_000);
    let mut t = Tracked::default();
    count_first_window(&mut t, &report, 70_000, counted(10 + 4, 50, 8 + 3));
    count_next(
        &mut t,
        &report,
        75_000,
        60,
        counted(10 + 4 + 10, 50, 8 + 3 + 8),
    );
    assert_eq!((t.demand, t.allowed), (demand(20 + 4, 50), 16 + 3));
    // A store with nothing but this report: the data plane had no bucket before it.
    let mut t = Tracked::default();
    count_first_window(&mut t, &report, 70_000, counted(10, 0, 8));
    count_next(&mut t, &report, 75_000, 60, counted(20, 0, 16));
    assert_eq!((t.demand, t.allowed), (demand(20, 0), 16));
}

#[test]
fn a_new_bucket_or_one_heard_of_before_has_nothing_unseen() {
    let store = counted(1_000, 1_000, 1_000);
    // A bucket's first report in the data plane covers no time: there was nothing before.
    let mut t = Tracked::default();
    count_first_window(&mut t, &usage(1, 0, 0), 70_000, store);
    count_next(&mut t, &usage(0, 0, 0), 71_000, 60, store);
    assert_eq!((t.demand, t.allowed), (demand(1, 0), 1));
    // Later reports covering time are not the first the stream hears.
    let mut t = Tracked::default();
    let report = usage(8, 2, 5_000);
    t.heard(&usage(1, 0, 0), ms(64_000));
    count_first_window(&mut t, &report, 70_000, store);
    count_next(&mut t, &report, 75_000, 60, counted(1_010, 1_000, 1_008));
    assert_eq!((t.demand, t.allowed), (demand(20, 0), 16));
}
