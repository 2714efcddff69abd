use super::*;

fn unavailable() -> Result<(), StorageError> {
    Err(StorageError::unavailable("down"))
}

#[test]
fn opens_after_its_threshold_in_a_row_and_closes_on_a_success() {
    let b = Breaker::new("redis 10.0.0.1:6379", 3);
    b.record(&unavailable());
    b.record(&unavailable());
    assert_eq!(b.admit(), Admit::Call, "two failures do not open it");
    b.record(&unavailable());
    assert!(b.is_open());
    assert_eq!(
        b.admit(),
        Admit::Refuse,
        "refused at once while the wait runs"
    );
    let refusal = b.refusal().to_string();
    assert!(
        refusal.contains("redis 10.0.0.1:6379: circuit breaker open") && refusal.contains("down"),
        "{refusal}"
    );
    assert_eq!(
        b.gauge(),
        Gauge::Breaker {
            server: "redis 10.0.0.1:6379".into(),
            open: true,
            opens: 1,
            probes: 0
        }
    );
    b.record(&Ok(()));
    assert!(!b.is_open());
    assert_eq!(b.admit(), Admit::Call);
}

#[test]
fn a_success_between_failures_starts_the_count_again() {
    let b = Breaker::new("s", 3);
    // Three rounds: nine calls, under the ratio's ten.
    for _ in 0..3 {
        b.record(&unavailable());
        b.record(&unavailable());
        b.record(&Ok(()));
    }
    assert!(!b.is_open(), "never three in a row");
}

#[test]
fn half_of_ten_calls_failing_within_a_second_opens_it() {
    let b = Breaker::new("s", 100);
    for _ in 0..4 {
        b.record(&unavailable());
        b.record(&Ok(()));
    }
    assert!(!b.is_open(), "eight calls are too few for the ratio");
    b.record(&Ok(()));
    b.record(&unavailable());
    assert!(b.is_open(), "five of ten failed");
}

#[test]
fn an_answer_is_a_success_and_turnstile_s_overload_is_neither() {
    let b = Breaker::new("s", 1);
    b.record(&Err::<(), _>(StorageError::overloaded("queue full")));
    b.record(&Err::<(), _>(StorageError::protocol("odd answer")));
    assert!(!b.is_open());
    b.record(&Err::<(), _>(StorageError::timeout("late")));
    assert!(b.is_open());
    b.record(&Err::<(), _>(StorageError::overloaded("queue full")));
    assert!(b.is_open(), "overload does not close it");
}

/// One clock for all of it: on a paused runtime, advancing time ends the ratio's period (the
/// calls before it no longer dilute the failures after it), says how long the breaker has been
/// open, and lets the backoff's probe through. (The ratio's period ran on the system clock
/// before, so a paused test moved the backoff and not the period.)
#[tokio::test(start_paused = true)]
async fn the_ratio_the_open_time_and_the_probe_move_on_one_clock() {
    let b = Breaker::new("s", 100);
    for _ in 0..10 {
        b.record(&Ok(()));
    }
    tokio::time::advance(std::time::Duration::from_millis(1_001)).await;
    for _ in 0..5 {
        b.record(&Ok(()));
        b.record(&unavailable());
    }
    assert!(b.is_open(), "five of the new period's ten failed");
    // The first wait is 50 ms spread by a quarter either way: 37.5 to 62.5 ms, in whole ms.
    tokio::time::advance(std::time::Duration::from_millis(36)).await;
    assert_eq!(b.admit(), Admit::Refuse, "within the shortest spread wait");
    let refusal = b.refusal().to_string();
    assert!(refusal.contains("open for 36 ms"), "{refusal}");
    tokio::time::advance(std::time::Duration::from_millis(27)).await;
    assert_eq!(b.admit(), Admit::Probe, "past the longest spread wait");
    assert_eq!(b.admit(), Admit::Refuse, "one probe a period");
}
