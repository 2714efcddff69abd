//! What PostgreSQL says reaches the operator: a refused password, a role without CREATE, a
//! schema no one may create in and a read-only role each give PostgreSQL's SQLSTATE and message
//! (never the password), from the store's own calls and in the service's readiness log.

use std::sync::Arc;

use turnstile::clock::{Clock, SystemClock};
use turnstile::storage::postgres::PostgresStore;

use crate::lifecycle::Binary;
use crate::support::postgres_server::Postgres;
use crate::support::unique;

const PASSWORD: &str = "Pa55-never-shown";

/// The error of migrating `schema` as `user` (with [`PASSWORD`]): it must fail.
async fn refusal(pg: &Postgres, user: &str, password: &str, schema: &str) -> String {
    let mut options = pg.options(schema);
    options.config = pg.url_of(user, password).parse().expect("config");
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let store = PostgresStore::new(options, clock).expect("store");
    store
        .migrate()
        .await
        .expect_err("PostgreSQL refuses it")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_give_postgresqls_sqlstate_and_message_never_the_password() {
    let Some(pg) = Postgres::start() else {
        return;
    };
    pg.role_with_password("pw_user", PASSWORD, "");
    pg.role_with_password("no_create", PASSWORD, "");
    let read_only = "ALTER ROLE read_only SET default_transaction_read_only = on";
    pg.role_with_password("read_only", PASSWORD, read_only);
    let schema = unique("e").replace('-', "_");
    let cases = [
        (
            "pw_user",
            "wrong-one",
            schema.as_str(),
            "28P01",
            "password authentication failed",
        ),
        ("no_create", PASSWORD, &schema, "42501", "permission denied"),
        (
            "read_only",
            PASSWORD,
            &schema,
            "25006",
            "read-only transaction",
        ),
        (
            "postgres",
            PASSWORD,
            "pg_catalog",
            "42939",
            "unacceptable schema name",
        ),
    ];
    for (user, password, schema, sqlstate, message) in cases {
        let said = refusal(&pg, user, password, schema).await;
        assert!(
            said.contains(sqlstate) && said.contains(message),
            "{user} in {schema}: {said}"
        );
        assert!(!said.contains(password), "{said}");
        assert!(!said.contains("db error"), "{said}");
    }
}

#[test]
fn a_refused_password_is_named_in_the_readiness_log() {
    let Some(pg) = Postgres::start() else {
        return;
    };
    pg.role_with_password("pw_user", PASSWORD, "");
    let url = pg.url_of("pw_user", "wrong-one");
    let mut p = Binary::start(&[
        ("BACKEND_TYPE", "postgres"),
        ("POSTGRES_URL", &url),
        ("LOG_LEVEL", "warn"),
    ]);
    let line = p.wait_for_log("counter store readiness changed");
    assert!(
        line.contains("28P01") && line.contains("password authentication failed"),
        "{line}"
    );
    assert!(!line.contains("wrong-one"), "{line}");
}
