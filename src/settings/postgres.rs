//! PostgreSQL's settings (`POSTGRES_*`; Turnstile only, the reference has no PostgreSQL): the
//! connection string as libpq reads it (URI or `key=value`, several hosts, `PGPASSWORD` or a
//! passfile, `sslmode` up to `verify-full` with `sslrootcert` / `sslcert` / `sslkey`,
//! `target_session_attrs`), the pool, the deadline, the schema, migrations, and the routing of
//! long windows (`POSTGRES_FROM_UNIT`).

use std::path::PathBuf;
use std::time::Duration;

use super::SettingsError;
use super::reader::{Reader, STORE_TIMEOUT, err};
use crate::storage::postgres::MigrateMode;
use crate::tls::Verify;

mod conninfo;

use conninfo::{passfile_password, redact, split_libpq_only};

/// How to reach PostgreSQL.
#[derive(Clone)]
pub struct PostgresSettings {
    /// Hosts, ports, database, user, password, `target_session_attrs`, timeouts.
    pub config: tokio_postgres::Config,
    /// `sslmode`, as what TLS checks of the server: `None` for `disable` (also `allow` and
    /// `prefer`: Turnstile does not fall back between the two), `Nothing` for `require`
    /// (encrypted, the server unchecked), `Chain` for `verify-ca` (its certificate chains to
    /// `sslrootcert`), `Full` for `verify-full` (and names the host).
    pub ssl_mode: Option<Verify>,
    /// `sslrootcert`.
    pub ssl_root_cert: Option<PathBuf>,
    /// `sslcert` and `sslkey`.
    pub ssl_client: Option<(PathBuf, PathBuf)>,
    /// `POSTGRES_POOL_SIZE`.
    pub pool_size: usize,
    /// `POSTGRES_TIMEOUT`: the deadline of one request's call.
    pub timeout: Duration,
    /// `POSTGRES_SCHEMA`.
    pub schema: String,
    /// `POSTGRES_MIGRATE`.
    pub migrate: MigrateMode,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, as on Redis (with `BACKEND_TYPE=postgres`).
    pub stop_increment_when_over_limit: bool,
}

impl PartialEq for PostgresSettings {
    fn eq(&self, other: &Self) -> bool {
        format!("{self:?}") == format!("{other:?}")
            && self.config.get_password() == other.config.get_password()
    }
}

impl std::fmt::Debug for PostgresSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("PostgresSettings")
            .field("hosts", &self.config.get_hosts())
            .field("ports", &self.config.get_ports())
            .field("dbname", &self.config.get_dbname())
            .field("user", &self.config.get_user())
            .field("ssl_mode", &self.ssl_mode)
            .field("pool_size", &self.pool_size)
            .field("timeout", &self.timeout)
            .field("schema", &self.schema)
            .field("migrate", &self.migrate)
            .finish_non_exhaustive()
    }
}

/// The connection string's parameters that tokio-postgres does not read; they are taken out
/// and handled here.
const LIBPQ_ONLY: &[&str] = &["sslmode", "sslrootcert", "sslcert", "sslkey", "passfile"];

/// `POSTGRES_URL` and the other `POSTGRES_*` settings.
pub(super) fn postgres(r: &Reader<'_>) -> Result<PostgresSettings, SettingsError> {
    const NAME: &str = "POSTGRES_URL";
    // Read before the connection string, so that their problems are reported with its.
    let schema = r.or(schema(r), String::new());
    let migrate = r.or(migrate(r), MigrateMode::Auto);
    let pool_size = r.number("POSTGRES_POOL_SIZE", 10usize, 1, 10_000);
    let timeout = r.duration("POSTGRES_TIMEOUT", Duration::from_secs(1), STORE_TIMEOUT);
    let stop_increment_when_over_limit = r.bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false);
    let url = r.string(NAME, "");
    if url.trim().is_empty() {
        return Err(err(
            NAME,
            "",
            "required: a libpq connection string or postgres:// URI",
        ));
    }
    let (rest, extra) = split_libpq_only(&url);
    // The value may hold a password: errors show the string without it.
    let shown = redact(&url);
    let mut config: tokio_postgres::Config = rest
        .parse()
        .map_err(|e| err(NAME, &shown, format!("not a connection string: {e}")))?;
    if config.get_hosts().is_empty() {
        return Err(err(NAME, &shown, "names no host"));
    }
    let get = |k: &str| {
        extra
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    let ssl_mode =
        ssl_mode(get("sslmode").as_deref()).map_err(|problem| err(NAME, &shown, problem))?;
    if config.get_password().is_none() {
        let file = get("passfile").or_else(|| (r.env)("PGPASSFILE"));
        if let Some(password) = password(r, file, &config) {
            config.password(password);
        }
    }
    let ssl_client = match (get("sslcert"), get("sslkey")) {
        (Some(c), Some(k)) => Some((PathBuf::from(c), PathBuf::from(k))),
        (None, None) => None,
        _ => return Err(err(NAME, &shown, "sslcert and sslkey go together")),
    };
    Ok(PostgresSettings {
        config,
        ssl_mode,
        ssl_root_cert: get("sslrootcert").map(PathBuf::from),
        ssl_client,
        pool_size,
        timeout,
        schema,
        migrate,
        stop_increment_when_over_limit,
    })
}

/// `sslmode`, or what belongs there.
fn ssl_mode(mode: Option<&str>) -> Result<Option<Verify>, String> {
    match mode {
        None | Some("disable" | "allow" | "prefer") => Ok(None),
        Some("require") => Ok(Some(Verify::Nothing)),
        Some("verify-ca") => Ok(Some(Verify::Chain)),
        Some("verify-full") => Ok(Some(Verify::Full)),
        Some(other) => Err(format!(
            "sslmode={other}: expected disable, require, verify-ca or verify-full"
        )),
    }
}

/// The password when the connection string has none: `PGPASSWORD`, else the passfile's line
/// for this connection.
fn password(
    r: &Reader<'_>,
    file: Option<String>,
    config: &tokio_postgres::Config,
) -> Option<String> {
    (r.env)("PGPASSWORD")
        .filter(|p| !p.is_empty())
        .or_else(|| passfile_password(&PathBuf::from(file?), config))
}

/// `POSTGRES_SCHEMA`: a lower-case identifier, so it can be quoted into statements.
fn schema(r: &Reader<'_>) -> Result<String, SettingsError> {
    let schema = r.string("POSTGRES_SCHEMA", "turnstile");
    let valid = schema.len() <= 63
        && schema.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if valid {
        Ok(schema)
    } else {
        Err(err(
            "POSTGRES_SCHEMA",
            &schema,
            "a lower-case identifier: letters, digits and _, at most 63 bytes",
        ))
    }
}

/// `POSTGRES_MIGRATE`.
fn migrate(r: &Reader<'_>) -> Result<MigrateMode, SettingsError> {
    match r
        .string("POSTGRES_MIGRATE", "auto")
        .to_ascii_lowercase()
        .as_str()
    {
        "auto" => Ok(MigrateMode::Auto),
        "check" => Ok(MigrateMode::Check),
        "off" => Ok(MigrateMode::Off),
        other => Err(err(
            "POSTGRES_MIGRATE",
            other,
            "expected auto, check or off",
        )),
    }
}

/// Long windows counted in PostgreSQL beside the main store (`POSTGRES_FROM_UNIT`).
#[derive(Debug, Clone, PartialEq)]
pub struct PostgresRoute {
    /// How to reach PostgreSQL.
    pub settings: Box<PostgresSettings>,
    /// The shortest unit counted there, lower-case (`second` … `year`): every limit whose
    /// period is at least one of it.
    pub from_unit: String,
}

/// `POSTGRES_FROM_UNIT` (with `POSTGRES_URL`), beside a backend other than PostgreSQL.
pub(super) fn route(
    r: &Reader<'_>,
    backend: &super::Backend,
) -> Result<Option<PostgresRoute>, SettingsError> {
    const NAME: &str = "POSTGRES_FROM_UNIT";
    let unit = r.string(NAME, "").trim().to_ascii_lowercase();
    if unit.is_empty() {
        return Ok(None);
    }
    const UNITS: [&str; 7] = ["second", "minute", "hour", "day", "week", "month", "year"];
    if !UNITS.contains(&unit.as_str()) {
        return Err(err(
            NAME,
            &unit,
            "one of second, minute, hour, day, week, month, year",
        ));
    }
    if matches!(backend, super::Backend::Postgres(_)) {
        return Err(err(
            NAME,
            &unit,
            "routes long windows away from another backend; with BACKEND_TYPE=postgres every \
             limit is counted in PostgreSQL already",
        ));
    }
    Ok(Some(PostgresRoute {
        settings: Box::new(postgres(r)?),
        from_unit: unit,
    }))
}

#[cfg(test)]
mod tests;
