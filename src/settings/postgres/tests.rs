use std::time::Duration;

use super::super::tests::with;
use super::super::{Backend, SettingsError};
use super::*;

fn postgres(pairs: &[(&str, &str)]) -> Result<PostgresSettings, SettingsError> {
    let mut all = vec![("BACKEND_TYPE", "postgres")];
    all.extend_from_slice(pairs);
    match with(&all)?.backend {
        Backend::Postgres(p) => Ok(*p),
        other => panic!("postgres expected, got {other:?}"),
    }
}

#[test]
fn a_uri_with_libpq_only_parameters_is_taken_apart() {
    let p = postgres(&[(
        "POSTGRES_URL",
        "postgres://rl:s3cret@db1:5433,db2:5434/quotas?sslmode=verify-full&sslrootcert=%2Fca.pem&target_session_attrs=read-write",
    )])
    .expect("uri");
    assert_eq!(p.ssl_mode, Some(Verify::Full));
    assert_eq!(p.ssl_root_cert, Some(PathBuf::from("/ca.pem")));
    assert_eq!(p.config.get_ports(), &[5433, 5434]);
    assert_eq!(p.config.get_dbname(), Some("quotas"));
    assert_eq!(p.config.get_password(), Some(&b"s3cret"[..]));
    assert_eq!(
        p.config.get_target_session_attrs(),
        tokio_postgres::config::TargetSessionAttrs::ReadWrite
    );
    assert_eq!((p.pool_size, p.timeout), (10, Duration::from_secs(1)));
    assert_eq!(
        (p.schema.as_str(), p.migrate),
        ("turnstile", MigrateMode::Auto)
    );
    assert!(
        !format!("{p:?}").contains("s3cret"),
        "the password never reaches a log"
    );
}

#[test]
fn a_key_value_string_pgpassword_and_client_certificates() {
    let p = postgres(&[
        (
            "POSTGRES_URL",
            "host=db port=5432 dbname='my quotas' user=rl sslmode=verify-ca sslcert=/c.pem sslkey=/c.key",
        ),
        ("PGPASSWORD", "from-env"),
    ])
    .expect("key=value");
    assert_eq!(p.ssl_mode, Some(Verify::Chain));
    assert_eq!(
        p.ssl_client,
        Some((PathBuf::from("/c.pem"), PathBuf::from("/c.key")))
    );
    assert_eq!(p.config.get_dbname(), Some("my quotas"));
    assert_eq!(p.config.get_password(), Some(&b"from-env"[..]));
}

#[test]
fn a_passfile_gives_the_password_of_the_matching_line() {
    let file = std::env::temp_dir().join(format!("pgpass-{}", std::process::id()));
    std::fs::write(&file, "# comment\nother:*:*:*:no\ndb:5432:quotas:rl:yes\n").expect("write");
    let url = format!("host=db dbname=quotas user=rl passfile={}", file.display());
    let p = postgres(&[("POSTGRES_URL", &url)]).expect("passfile");
    assert_eq!(p.config.get_password(), Some(&b"yes"[..]));
    let _ = std::fs::remove_file(file);
}

#[test]
fn bad_values_name_the_setting_and_never_show_the_password() {
    let e = postgres(&[]).expect_err("no url");
    assert_eq!(e.name, "POSTGRES_URL");
    let e = postgres(&[(
        "POSTGRES_URL",
        "postgres://rl:s3cret@db/q?sslmode=sometimes",
    )])
    .expect_err("sslmode");
    assert!(e.problem.contains("sslmode=sometimes"), "{e}");
    assert!(!e.to_string().contains("s3cret"), "{e}");
    let e = postgres(&[("POSTGRES_URL", "host=db password=s3cret bogus=1")]).expect_err("bad key");
    assert!(!e.to_string().contains("s3cret"), "{e}");
    for (name, value) in [
        ("POSTGRES_SCHEMA", "Bad-Name"),
        ("POSTGRES_MIGRATE", "sometimes"),
        ("POSTGRES_POOL_SIZE", "0"),
        ("POSTGRES_TIMEOUT", "1ns"),
    ] {
        let e = postgres(&[("POSTGRES_URL", "host=db"), (name, value)]).expect_err(name);
        assert_eq!(e.name, name, "{e}");
    }
}

#[test]
fn long_windows_route_beside_another_backend_only() {
    let s = with(&[("POSTGRES_URL", "host=db"), ("POSTGRES_FROM_UNIT", "Day")]).expect("route");
    let route = s.postgres_route.expect("routed");
    assert_eq!(route.from_unit, "day");
    assert!(matches!(s.backend, Backend::Memory { .. }));
    let e = with(&[
        ("POSTGRES_FROM_UNIT", "fortnight"),
        ("POSTGRES_URL", "host=db"),
    ])
    .expect_err("unit");
    assert_eq!(e.name, "POSTGRES_FROM_UNIT");
    let e = with(&[("POSTGRES_FROM_UNIT", "day")]).expect_err("no url");
    assert_eq!(e.name, "POSTGRES_URL");
    let e = with(&[
        ("BACKEND_TYPE", "postgres"),
        ("POSTGRES_URL", "host=db"),
        ("POSTGRES_FROM_UNIT", "day"),
    ])
    .expect_err("everything is there already");
    assert_eq!(e.name, "POSTGRES_FROM_UNIT");
    assert!(
        with(&[("POSTGRES_URL", "host=db")])
            .expect("unused")
            .postgres_route
            .is_none()
    );
}
