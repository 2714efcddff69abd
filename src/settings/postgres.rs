//! PostgreSQL's settings (`POSTGRES_*`; Turnstile only, the reference has no PostgreSQL): the
//! connection string as libpq reads it (URI or `key=value`, several hosts, `PGPASSWORD` or a
//! passfile, `sslmode` up to `verify-full` with `sslrootcert` / `sslcert` / `sslkey`,
//! `target_session_attrs`), the pool, the deadline, the schema, migrations, and the routing of
//! long windows (`POSTGRES_FROM_UNIT`).

use std::path::PathBuf;
use std::time::Duration;

use super::SettingsError;
use super::reader::{Reader, STORE_TIMEOUT, err};

/// `sslmode`: what TLS is used and what of the server is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgSslMode {
    /// `disable` (also `allow` and `prefer`: Turnstile does not fall back between the two).
    Disable,
    /// `require`: encrypted, the server unchecked.
    Require,
    /// `verify-ca`: the server's certificate chains to `sslrootcert`.
    VerifyCa,
    /// `verify-full`: and names the host.
    VerifyFull,
}

/// `POSTGRES_MIGRATE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgMigrate {
    /// `auto`: at the first connection.
    Auto,
    /// `check`: counts only once `turnstile migrate` has run.
    Check,
    /// `off`: the operator owns the schema.
    Off,
}

/// How to reach PostgreSQL.
#[derive(Clone)]
pub struct PostgresSettings {
    /// Hosts, ports, database, user, password, `target_session_attrs`, timeouts.
    pub config: tokio_postgres::Config,
    /// `sslmode`.
    pub ssl_mode: PgSslMode,
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
    pub migrate: PgMigrate,
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
    let ssl_mode = match get("sslmode").as_deref() {
        None | Some("disable" | "allow" | "prefer") => PgSslMode::Disable,
        Some("require") => PgSslMode::Require,
        Some("verify-ca") => PgSslMode::VerifyCa,
        Some("verify-full") => PgSslMode::VerifyFull,
        Some(other) => {
            return Err(err(
                NAME,
                &shown,
                format!("sslmode={other}: expected disable, require, verify-ca or verify-full"),
            ));
        }
    };
    if config.get_password().is_none() {
        let from_file = get("passfile")
            .map(PathBuf::from)
            .or_else(|| (r.env)("PGPASSFILE").map(PathBuf::from));
        if let Some(password) = (r.env)("PGPASSWORD").filter(|p| !p.is_empty()) {
            config.password(password);
        } else if let Some(password) = from_file.and_then(|f| passfile_password(&f, &config)) {
            config.password(password);
        }
    }
    let ssl_client = match (get("sslcert"), get("sslkey")) {
        (Some(c), Some(k)) => Some((PathBuf::from(c), PathBuf::from(k))),
        (None, None) => None,
        _ => return Err(err(NAME, &shown, "sslcert and sslkey go together")),
    };
    let schema = r.string("POSTGRES_SCHEMA", "turnstile");
    let valid = schema.len() <= 63
        && schema.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !valid {
        return Err(err(
            "POSTGRES_SCHEMA",
            &schema,
            "a lower-case identifier: letters, digits and _, at most 63 bytes",
        ));
    }
    let migrate = match r
        .string("POSTGRES_MIGRATE", "auto")
        .to_ascii_lowercase()
        .as_str()
    {
        "auto" => PgMigrate::Auto,
        "check" => PgMigrate::Check,
        "off" => PgMigrate::Off,
        other => {
            return Err(err(
                "POSTGRES_MIGRATE",
                other,
                "expected auto, check or off",
            ));
        }
    };
    Ok(PostgresSettings {
        config,
        ssl_mode,
        ssl_root_cert: get("sslrootcert").map(PathBuf::from),
        ssl_client,
        pool_size: r.number("POSTGRES_POOL_SIZE", 10usize, 1, 10_000)?,
        timeout: r.duration("POSTGRES_TIMEOUT", Duration::from_secs(1), STORE_TIMEOUT)?,
        schema,
        migrate,
        stop_increment_when_over_limit: r.bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)?,
    })
}

/// The connection string without the parameters tokio-postgres refuses, and those, as
/// `(key, value)`. Both forms: `postgres://…?a=b&c=d` and `a=b c='d e'`.
fn split_libpq_only(url: &str) -> (String, Vec<(String, String)>) {
    let mut taken = Vec::new();
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((base, query)) = url.split_once('?') else {
            return (url.to_owned(), taken);
        };
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if LIBPQ_ONLY.contains(&k) {
                taken.push((k.to_owned(), percent_decode(v)));
            } else {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return (rest, taken);
    }
    let mut kept = Vec::new();
    for (k, v, raw) in key_values(url) {
        if LIBPQ_ONLY.contains(&k.as_str()) {
            taken.push((k, v));
        } else {
            kept.push(raw);
        }
    }
    (kept.join(" "), taken)
}

/// `key=value` pairs of a libpq string (values may be single-quoted with `\` escapes), each
/// with its raw text.
fn key_values(text: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return out;
        }
        let (mut key, mut value, mut raw) = (String::new(), String::new(), String::new());
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            raw.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == '=') {
            raw.push(chars.next().unwrap_or('='));
        }
        if chars.peek() == Some(&'\'') {
            raw.push('\'');
            chars.next();
            while let Some(c) = chars.next() {
                raw.push(c);
                match c {
                    '\\' => {
                        if let Some(n) = chars.next() {
                            raw.push(n);
                            value.push(n);
                        }
                    }
                    '\'' => break,
                    _ => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                value.push(c);
                raw.push(c);
                chars.next();
            }
        }
        out.push((key, value, raw));
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The connection string with any password replaced by `****`.
fn redact(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://")
        && let Some((userinfo, after)) = rest.split_once('@')
        && let Some((user, _)) = userinfo.split_once(':')
    {
        return format!("{scheme}://{user}:****@{after}");
    }
    key_values(url)
        .into_iter()
        .map(|(k, _, raw)| {
            if k == "password" {
                "password=****".to_owned()
            } else {
                raw
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The password a passfile (`host:port:db:user:password`, `*` for any) gives this connection.
fn passfile_password(file: &std::path::Path, config: &tokio_postgres::Config) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    let host = match config.get_hosts().first()? {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user().unwrap_or_default().to_owned();
    let db = config
        .get_dbname()
        .map_or_else(|| user.clone(), str::to_owned);
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let fields: Vec<&str> = line.splitn(5, ':').collect();
        if let [h, p, d, u, password] = fields[..] {
            let matches = |pattern: &str, value: &str| pattern == "*" || pattern == value;
            if matches(h, &host) && matches(p, &port) && matches(d, &db) && matches(u, &user) {
                return Some(password.to_owned());
            }
        }
    }
    None
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
