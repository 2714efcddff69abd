//! Unit tests of `fold`.
use super::*;

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
    let split = Split::at(&usage(8, 2, 5_000), 60_000, 70_000);
    assert_eq!(
        split,
        Split {
            allowed: 8,
            demand: 10,
            earlier_demand: 0
        }
    );
    // Unknown elapsed time: all of it in the report's window.
    assert_eq!(Split::at(&usage(8, 2, 0), 60_000, 60_000).demand, 10);
}

#[test]
fn a_report_straddling_a_window_start_counts_its_part_after_it() {
    // 5 s covered, 2 s of them in the new window: 2/5 of 10 allowed, of 20 demand.
    let split = Split::at(&usage(10, 10, 5_000), 60_000, 62_000);
    assert_eq!(
        split,
        Split {
            allowed: 4,
            demand: 8,
            earlier_demand: 12
        }
    );
    // Reported right at the start: all of it before.
    let at_start = Split::at(&usage(10, 10, 5_000), 60_000, 60_000);
    assert_eq!((at_start.allowed, at_start.earlier_demand), (0, 20));
}

#[test]
fn demand_rolls_into_the_previous_window_only_when_windows_follow() {
    let mut t = Tracked::default();
    let s = |demand, earlier_demand| Split {
        allowed: 0,
        demand,
        earlier_demand,
    };
    t.add_demand(60, 0, s(30, 0));
    t.add_demand(60, 60, s(5, 7));
    assert_eq!(t.demand, (5, 37));
    assert_eq!(t.window_end_ms(), Some(120_000));
    // A gap of a window: the old demand is not the previous window's.
    t.add_demand(60, 240, s(1, 0));
    assert_eq!(t.demand, (1, 0));
}

#[test]
fn a_new_window_starts_unused_with_the_demand_last_read() {
    let mut t = Tracked::default();
    t.add_demand(60, 60, Split::at(&usage(3, 1, 0), 60_000, 70_000));
    t.seen_all = 50;
    let before = |period, now| t.carried_over(Window::of(period, now)).demand_before;
    let at_start = t.carried_over(Window::of(60, 120));
    assert_eq!((at_start.used, at_start.demand_now), (0, 0));
    assert_eq!(before(60, 120), 50);
    // Not the window after the tracked one: nothing carried over.
    assert_eq!(before(60, 180), 0);
    assert_eq!(before(30, 120), 0);
}
