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
