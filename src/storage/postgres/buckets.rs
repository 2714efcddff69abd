//! A request's token-bucket steps in one round trip: the schema's `bucket` function, with the
//! ticks passed as text and computed as exact `numeric`s (no 2^53 bound as in Redis's Lua).
//!
//! Must not touch: connections, the schema's definition.

use super::{PostgresStore, signed};
use crate::storage::{StorageError, Take, TokenAnswer, TokenStep};

pub(super) async fn step(
    store: &PostgresStore,
    steps: &[TokenStep],
) -> Result<Vec<TokenAnswer>, StorageError> {
    if steps.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<&str> = steps.iter().map(|s| s.key.as_str()).collect();
    let text = |f: fn(&TokenStep) -> u128| -> Vec<String> {
        steps.iter().map(|s| f(s).to_string()).collect()
    };
    let (nows, intervals, capacities) = (
        text(|s| s.now),
        text(|s| s.interval.get()),
        text(|s| s.capacity.get()),
    );
    let ticks = text(|s| s.ticks_per_milli.get());
    let (mut amounts, mut refunds) = (Vec::new(), Vec::new());
    for s in steps {
        let (n, refund) = match s.take {
            Take::Take(n) => (n, false),
            Take::Refund(n) => (n, true),
        };
        amounts.push(signed(n.min(crate::storage::MAX_DELTA)));
        refunds.push(refund);
    }
    let now = signed(store.inner.clock.now_secs());
    let sql = &store.inner.bucket_sql;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
        &keys,
        &nows,
        &intervals,
        &capacities,
        &amounts,
        &refunds,
        &ticks,
        &now,
    ];
    let row = store.query_one(sql, &params).await?;
    let protocol = |e: String| StorageError::protocol(format!("{}: {e}", store.place()));
    let admitted: Vec<bool> = row.try_get(0).map_err(|e| protocol(e.to_string()))?;
    let tats: Vec<String> = row.try_get(1).map_err(|e| protocol(e.to_string()))?;
    if admitted.len() != steps.len() || tats.len() != steps.len() {
        return Err(protocol("answers do not match the steps".into()));
    }
    admitted
        .into_iter()
        .zip(tats)
        .map(|(admitted, tat)| {
            let tat = tat
                .parse::<u128>()
                .map_err(|e| protocol(format!("bucket state {tat:?}: {e}")))?;
            Ok(TokenAnswer { admitted, tat })
        })
        .collect()
}
