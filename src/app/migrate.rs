//! `turnstile migrate [--check]`: PostgreSQL's schema for operators who apply migrations by hand
//! (`POSTGRES_MIGRATE=check` or `off`). Reads the same `POSTGRES_*` settings as the service
//! (the PostgreSQL of `BACKEND_TYPE=postgres`, or the one `POSTGRES_FROM_UNIT` routes to).
//!
//! Must not touch: serving.

use std::sync::Arc;

use crate::clock::SystemClock;
use crate::settings::{Backend, Settings};
use crate::storage::postgres::PostgresStore;

/// `turnstile migrate [--check]` from the environment `env`: reads the settings, runs
/// [`migrate_cli`] on a runtime of its own, prints the report (errors to stderr) and returns
/// the exit code (64 for a bad setting).
pub fn migrate_main(env: &dyn Fn(&str) -> Option<String>, check: bool) -> u8 {
    let settings = match Settings::from_env(env, None) {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("turnstile: {err}");
            return 64;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("turnstile: starting the runtime: {err}");
            return 1;
        }
    };
    let (report, code) = runtime.block_on(migrate_cli(&settings, check));
    if code == 0 {
        println!("{report}");
    } else {
        eprintln!("turnstile: {report}");
    }
    code
}

/// Runs `migrate` (`check`: only report) with `settings`; the report and the exit code (0: up
/// to date or migrated; 1: `--check` found it behind, or it cannot be used; 64: no PostgreSQL
/// configured).
pub async fn migrate_cli(settings: &Settings, check: bool) -> (String, u8) {
    let postgres = match (&settings.backend, &settings.postgres_route) {
        (Backend::Postgres(s), _) => s.as_ref(),
        (_, Some(route)) => route.settings.as_ref(),
        _ => {
            return (
                "no PostgreSQL is configured: set BACKEND_TYPE=postgres, or POSTGRES_URL with \
                 POSTGRES_FROM_UNIT"
                    .into(),
                64,
            );
        }
    };
    let store = match super::store::postgres_options(postgres)
        .and_then(|options| PostgresStore::new(options, Arc::new(SystemClock)))
    {
        Ok(store) => store,
        Err(e) => return (e.to_string(), 1),
    };
    if check {
        return match store.schema_state().await {
            Ok(state) => {
                let code = u8::from(state.applied != state.latest);
                (format!("schema {:?}: {state}", postgres.schema), code)
            }
            Err(e) => (e.to_string(), 1),
        };
    }
    match store.migrate().await {
        Ok(applied) if applied.is_empty() => (
            format!("schema {:?}: already up to date", postgres.schema),
            0,
        ),
        Ok(applied) => (
            format!("schema {:?}: applied versions {applied:?}", postgres.schema),
            0,
        ),
        Err(e) => (e.to_string(), 1),
    }
}
