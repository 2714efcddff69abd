//! The limiter as the app wires it: the main store (given, or built from the settings), the
//! per-second and durable stores beside it, each instrumented and traced under its label.
//!
//! Must not touch: listeners, rules, the server.

use std::sync::Arc;

use tokio::task::JoinSet;

use super::{AppError, Store, label, store};
use crate::clock::Clock;
use crate::limiter::Limiter;
use crate::metrics::{Instrumented, Metrics};
use crate::settings::Settings;
use crate::traces::Tracer;

/// What the limiter is wired with besides its settings and stores.
pub(super) struct LimiterParts<'a> {
    pub(super) clock: &'a Arc<dyn Clock>,
    pub(super) metrics: &'a Arc<Metrics>,
    pub(super) tracer: Option<&'a Arc<Tracer>>,
}

/// The limiter over the main store (`given`, or the one the settings name), the per-second
/// and durable stores the settings add, each instrumented (and traced); their background
/// tasks go to `tasks`.
pub(super) async fn limiter(
    settings: &Settings,
    given: Option<Store>,
    parts: LimiterParts<'_>,
    tasks: &mut JoinSet<()>,
) -> Result<Limiter<Instrumented<Store>>, AppError> {
    let LimiterParts {
        clock,
        metrics,
        tracer,
    } = parts;
    let main = match given {
        Some(store) => store,
        None => {
            let (store, store_tasks) = store::build(&settings.backend, clock).await?;
            for task in store_tasks {
                tasks.spawn(task);
            }
            store
        }
    };
    let instrumented = |store: Store, role| {
        let label = label::store_label(&store, settings, role);
        let store = Instrumented::new(store, Arc::clone(metrics));
        match tracer {
            Some(tracer) => store.traced(Arc::clone(tracer), label),
            None => store,
        }
    };
    let mut limiter = Limiter::new(
        instrumented(main, "main"),
        Arc::clone(clock),
        settings.limiter.clone(),
    );
    if let Some(second) = store::per_second(&settings.backend, clock)? {
        limiter = limiter.with_per_second_store(instrumented(second, "per_second"));
    }
    if let Some((durable, durable_tasks, from)) =
        store::durable(settings.postgres_route.as_ref(), clock)?
    {
        tasks.extend(durable_tasks);
        limiter = limiter.with_durable_store(instrumented(durable, "durable"), from);
    }
    Ok(limiter)
}
