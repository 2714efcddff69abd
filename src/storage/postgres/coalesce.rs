//! Adds of concurrent requests in one statement. While the pool's connections are all busy,
//! requests that only add to counters wait here; the next free connection takes every one of
//! them at once (up to [`MAX_KEYS`] keys): adds to one key are summed into one row of the
//! statement, and each request gets the count its own hits produced, as if the hits had been
//! applied one after the other in arrival order (the prior count is the returned count minus
//! the sum, then each request's amount is added in turn). All of them commit in the one
//! transaction, so exactness holds across replicas as for single requests, and PostgreSQL's
//! work per request falls with the load instead of saturating at one statement per request.
//!
//! Must not touch: the general path (refunds, leases, reads), buckets.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use tokio::sync::{Semaphore, mpsc, oneshot};

use super::{Inner, PostgresStore};
use crate::storage::{COUNT_CEILING, StorageError};

/// Keys one statement carries at most.
const MAX_KEYS: usize = 2_048;
/// Requests waiting at most (beyond, a request waits to be queued).
const QUEUE: usize = 8_192;

/// One request's adds: `(key, amount, expires_at)` each, distinct keys.
pub(super) type Adds = Vec<(String, u64, u64)>;

struct Job {
    adds: Adds,
    reply: oneshot::Sender<Result<Vec<u64>, StorageError>>,
}

/// The queue of waiting requests.
pub(super) struct Coalescer {
    tx: mpsc::Sender<Job>,
}

impl Coalescer {
    /// A coalescer running `permits` statements at most at once (the pool's size); its task
    /// ends when the store is dropped.
    pub(super) fn start(inner: Weak<Inner>, permits: usize) -> Coalescer {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(dispatch(
            inner,
            rx,
            Arc::new(Semaphore::new(permits.max(1))),
        ));
        Coalescer { tx }
    }

    /// Queues `adds` and waits for their counts.
    pub(super) async fn add(&self, adds: Adds) -> Result<Vec<u64>, StorageError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Job { adds, reply })
            .await
            .map_err(|_| StorageError::unavailable("PostgreSQL store stopped"))?;
        answer
            .await
            .unwrap_or_else(|_| Err(StorageError::unavailable("PostgreSQL call dropped")))
    }
}

async fn dispatch(inner: Weak<Inner>, mut rx: mpsc::Receiver<Job>, permits: Arc<Semaphore>) {
    loop {
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return;
        };
        let Some(first) = rx.recv().await else {
            return;
        };
        let mut keys = first.adds.len();
        let mut jobs = vec![first];
        while keys < MAX_KEYS {
            match rx.try_recv() {
                Ok(job) => {
                    keys += job.adds.len();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            run(PostgresStore { inner }, jobs).await;
            drop(permit);
        });
    }
}

/// Where one hit of one job sits in a merged row.
struct Part {
    job: usize,
    hit: usize,
    amount: u64,
}

/// One key's hits of a batch: their sum, the latest expiry, and each hit's place.
struct Row {
    sum: u64,
    expires: u64,
    parts: Vec<Part>,
}

async fn run(store: PostgresStore, jobs: Vec<Job>) {
    // One row per key, in key order (the order rows are locked in); each key's parts in
    // arrival order.
    let mut rows: BTreeMap<&str, Row> = BTreeMap::new();
    for (job, j) in jobs.iter().enumerate() {
        for (hit, (key, amount, expires)) in j.adds.iter().enumerate() {
            let row = rows.entry(key.as_str()).or_insert(Row {
                sum: 0,
                expires: *expires,
                parts: Vec::new(),
            });
            row.sum = row.sum.saturating_add(*amount);
            row.expires = row.expires.max(*expires);
            row.parts.push(Part {
                job,
                hit,
                amount: *amount,
            });
        }
    }
    let merged: Vec<(&str, u64, u64)> = rows
        .iter()
        .map(|(k, row)| (*k, row.sum, row.expires))
        .collect();
    let totals = super::counters::adds_statement(&store, &merged).await;
    let mut answers: Vec<Vec<u64>> = jobs.iter().map(|j| vec![0; j.adds.len()]).collect();
    let outcome = totals.map(|totals| {
        for (row, total) in rows.values().zip(totals) {
            let mut running = total.saturating_sub(row.sum);
            for part in &row.parts {
                running = running.saturating_add(part.amount);
                answers[part.job][part.hit] = running.min(COUNT_CEILING);
            }
        }
    });
    for (job, counts) in jobs.into_iter().zip(answers) {
        let _ = job.reply.send(outcome.clone().map(|()| counts));
    }
}
