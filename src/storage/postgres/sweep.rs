//! The sweeper: expired rows deleted in batches (at most `BATCH` rows a statement, each its own
//! short transaction, skipping rows a request holds) until none is left, every round, so the
//! tables and their indexes stay the size of the live counters without a long-running DELETE
//! or leaving the work to VACUUM (the tables' autovacuum thresholds are lowered by the schema,
//! so freed space is reused soon). Rows a request finds expired before the sweeper does are
//! reused by it in place.
//!
//! Must not touch: the request path.

use std::time::Duration;

use super::PostgresStore;

/// Rows one statement deletes at most.
const BATCH: i64 = 5_000;

pub(super) async fn run(store: PostgresStore, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        match once(&store).await {
            Ok(0) => {}
            Ok(deleted) => tracing::debug!(deleted, "expired PostgreSQL rows deleted"),
            Err(e) => tracing::debug!(error = %e, "PostgreSQL sweep skipped"),
        }
    }
}

/// One round over both tables; how many rows it deleted.
pub(super) async fn once(store: &PostgresStore) -> Result<u64, crate::storage::StorageError> {
    let mut deleted = 0;
    for table in ["counters", "buckets"] {
        deleted += sweep(store, table).await?;
    }
    Ok(deleted)
}

/// Deletes `table`'s expired rows, a batch at a time; how many.
async fn sweep(store: &PostgresStore, table: &str) -> Result<u64, crate::storage::StorageError> {
    let sql = format!(
        "DELETE FROM {q}.{table} WHERE key IN (SELECT key FROM {q}.{table} \
         WHERE expires_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
        q = store.inner.quoted
    );
    let mut total = 0;
    loop {
        let now = super::signed(store.inner.clock.now_secs());
        let sql = &sql;
        let n = store
            .within(|client| async move {
                let result = client.execute(sql.as_str(), &[&now, &BATCH]).await;
                (client, result)
            })
            .await?;
        total += n;
        if n < BATCH as u64 {
            return Ok(total);
        }
    }
}
