//! TLS to PostgreSQL as libpq's `sslmode` says, against a real server with `ssl=on`:
//! `verify-full` with the right CA counts; a CA that did not sign the server's certificate is
//! refused (the call answers `UNAVAILABLE` naming PostgreSQL); `require` encrypts without
//! checking; `verify-ca` accepts a certificate for another name that `verify-full` refuses.

use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::process::{Process, rules_root, temp_dir};
use crate::support::certs::{Usage, ca, leaf, leaf_with};
use crate::support::postgres_server::Postgres;
use crate::support::{req1, unique};

const RULES: &str = "\
domain: plans
descriptors:
  - key: api_key
    rate_limit: { unit: month, requests_per_unit: 5 }
";

async fn first_answer(p: &Process) -> Result<Code, tonic::Status> {
    let mut client = p.client().await;
    client
        .should_rate_limit(req1("plans", &[("api_key", &unique("k"))]))
        .await
        .map(|a| a.into_inner().overall_code())
}

fn start(pg: &Postgres, host: &str, query: &str) -> Process {
    let url = format!("postgres://postgres@{host}:{}/postgres?{query}", pg.port);
    let schema = unique("tls").replace('-', "_");
    Process::spawn(
        &rules_root(RULES),
        &[
            ("BACKEND_TYPE", "postgres"),
            ("POSTGRES_URL", &url),
            ("POSTGRES_SCHEMA", &schema),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_require_verify_ca_and_verify_full() {
    let dir = temp_dir("pg-tls");
    ca(&dir, "db");
    leaf(&dir, "db", "server", false);
    ca(&dir, "other");
    // A certificate for another name, signed by the right CA.
    leaf_with(
        &dir,
        "db",
        "elsewhere",
        &["elsewhere.example"],
        &[Usage::Server],
    );
    let Some(pg) = Postgres::start_tls(&dir.join("server.pem"), &dir.join("server.key")) else {
        return;
    };
    verify_full_a_wrong_ca_and_require(&pg, &dir).await;
    drop(pg);
    verify_ca_takes_the_chain_and_verify_full_the_name(&dir).await;
}

/// `sslrootcert` for CA `name` in `dir`.
fn root_cert(dir: &std::path::Path, name: &str) -> String {
    format!(
        "sslrootcert={}",
        dir.join(format!("{name}-ca.pem")).display()
    )
}

/// Against a server certificate for `127.0.0.1` signed by `db`: verify-full counts (and the
/// connection is encrypted), another CA is refused, require checks nothing.
async fn verify_full_a_wrong_ca_and_require(pg: &Postgres, dir: &std::path::Path) {
    let root = |name: &str| root_cert(dir, name);

    let good = start(
        pg,
        "127.0.0.1",
        &format!("sslmode=verify-full&{}", root("db")),
    );
    assert_eq!(
        first_answer(&good).await.expect("counted over TLS"),
        Code::Ok
    );
    assert_ne!(
        pg.psql("SELECT count(*) FROM pg_stat_ssl WHERE ssl"),
        "0",
        "encrypted"
    );

    let wrong = start(
        pg,
        "127.0.0.1",
        &format!("sslmode=verify-full&{}", root("other")),
    );
    let refused = first_answer(&wrong)
        .await
        .expect_err("an unknown CA is refused");
    assert_eq!(refused.code(), tonic::Code::Unavailable);
    assert!(refused.message().contains("PostgreSQL"), "{refused:?}");

    let plain = start(pg, "127.0.0.1", "sslmode=require");
    assert_eq!(
        first_answer(&plain).await.expect("require checks nothing"),
        Code::Ok
    );
}

async fn verify_ca_takes_the_chain_and_verify_full_the_name(dir: &std::path::Path) {
    // The name: `localhost` is in the certificate, `elsewhere.example` is not; reach the
    // server as `localhost` but expect another name through a certificate that lacks it.
    let Some(pg) = Postgres::start_tls(&dir.join("elsewhere.pem"), &dir.join("elsewhere.key"))
    else {
        return;
    };
    let root = |name: &str| root_cert(dir, name);
    let chain_only = start(
        &pg,
        "localhost",
        &format!("sslmode=verify-ca&{}", root("db")),
    );
    assert_eq!(
        first_answer(&chain_only)
            .await
            .expect("verify-ca: the chain only"),
        Code::Ok
    );
    let full = start(
        &pg,
        "localhost",
        &format!("sslmode=verify-full&{}", root("db")),
    );
    let refused = first_answer(&full)
        .await
        .expect_err("verify-full: the name too");
    assert!(refused.message().contains("PostgreSQL"), "{refused:?}");
}
