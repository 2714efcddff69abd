//! The suite on PostgreSQL (two stores on one schema, as two replicas), plus what only it
//! does: expired rows reused in place and swept in batches, and the schema migrated once by
//! replicas starting together.

use std::sync::Arc;

use turnstile::clock::{Clock, ManualClock};
use turnstile::storage::{Change, CounterStore};

use turnstile::storage::postgres::PostgresStore;

use super::{Fixture, hit};
use crate::support::postgres_server::Postgres;
use crate::support::unique;

/// Two stores on one schema, as two replicas.
async fn fixture() -> Option<Fixture<PostgresStore>> {
    let pg = Postgres::start()?;
    let clock = ManualClock::new(crate::support::T0);
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let (store, schema) = pg.store(&shared);
    let replica = PostgresStore::new(pg.options(&schema), shared).expect("second store");
    Some(Fixture {
        stores: vec![store, replica],
        clock,
        leases: true,
        _server: Box::new(pg),
    })
}

contract_cases!(postgres, super::fixture);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rows_reused_in_place() {
    let Some(pg) = Postgres::start() else { return };
    let clock = ManualClock::new(crate::support::T0);
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let (store, schema) = pg.store(&shared);

    // An expired row is reused in place by the next hit, with the new window's expiry.
    let key = unique("reuse");
    let end = clock.now_secs() + 2;
    store
        .apply_ops(&[hit(&key, Change::Add(5), end)])
        .await
        .expect("hit");
    clock.advance(3);
    assert_eq!(
        store
            .apply_ops(&[hit(&key, Change::READ, end)])
            .await
            .expect("read"),
        vec![0],
        "an expired row reads as missing"
    );
    assert_eq!(
        store
            .apply_ops(&[hit(&key, Change::Add(1), clock.now_secs() + 60)])
            .await
            .expect("hit"),
        vec![1],
        "and is reused from zero"
    );
    let rows = pg.psql(&format!(
        "SELECT count(*) || ':' || max(expires_at) FROM {schema}.counters WHERE key = '{key}'"
    ));
    assert_eq!(rows, format!("1:{}", clock.now_secs() + 60));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_deletes_expired_rows_in_batches_and_keeps_live_ones() {
    let Some(pg) = Postgres::start() else { return };
    let clock = ManualClock::new(crate::support::T0);
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let (store, schema) = pg.store(&shared);
    let end = clock.now_secs() + 5;
    let ended: Vec<_> = (0..12_000)
        .map(|i| hit(&format!("old-{i}"), Change::Add(1), end))
        .collect();
    for chunk in ended.chunks(1_000) {
        store.apply_ops(chunk).await.expect("hits");
    }
    let live: Vec<_> = (0..10)
        .map(|i| hit(&format!("live-{i}"), Change::Add(1), end + 3_600))
        .collect();
    store.apply_ops(&live).await.expect("hits");
    assert_eq!(
        store.sweep_once().await.expect("sweep"),
        0,
        "nothing has ended yet"
    );
    clock.advance(5);
    assert_eq!(
        store.sweep_once().await.expect("sweep"),
        12_000,
        "three batches of at most 5000, until none is left"
    );
    assert_eq!(
        pg.psql(&format!("SELECT count(*) FROM {schema}.counters")),
        "10"
    );
    assert_eq!(
        store.apply_ops(&live[..1]).await.expect("live"),
        vec![2],
        "live rows untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_starting_together_migrate_once() {
    let Some(pg) = Postgres::start() else { return };
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(crate::support::T0));
    let schema = unique("m").replace('-', "_");
    let stores: Vec<_> = (0..4)
        .map(|_| {
            turnstile::storage::postgres::PostgresStore::new(
                pg.options(&schema),
                Arc::clone(&clock),
            )
            .expect("store")
        })
        .collect();
    let mut calls = Vec::new();
    for store in &stores {
        let store = store.clone();
        calls.push(tokio::spawn(async move { store.ready().await }));
    }
    for call in calls {
        call.await.expect("joined").expect("ready after migrating");
    }
    assert_eq!(
        pg.psql(&format!(
            "SELECT string_agg(version::text, ',') FROM {schema}.schema_version"
        )),
        "1",
        "each migration applied once"
    );
    // A schema newer than this build is refused in words and never written to.
    pg.psql(&format!(
        "INSERT INTO {schema}.schema_version (version) VALUES (99)"
    ));
    let fresh = turnstile::storage::postgres::PostgresStore::new(pg.options(&schema), clock)
        .expect("store");
    let error = fresh
        .apply_ops(&[hit("k", Change::Add(1), crate::support::T0 + 60)])
        .await
        .expect_err("newer schema");
    assert!(
        error
            .to_string()
            .contains("schema version 99 is newer than this Turnstile knows (1)"),
        "{error}"
    );
    assert_eq!(
        pg.psql(&format!("SELECT count(*) FROM {schema}.counters")),
        "0"
    );
}
