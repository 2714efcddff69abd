//! Turnstile's schema in PostgreSQL, owned by the binary: versioned migrations embedded here,
//! applied in order under an advisory lock (replicas starting together apply each once), and
//! a schema newer than this build refused in words and never written to.
//!
//! Tables: `counters` (key, count, expires_at in Unix seconds) and `buckets` (key, TAT as
//! `numeric` ticks, expires_at), each row carrying its expiry, with an index on it for the
//! sweeper. Functions: `hit` (every counter operation of a request, arrays in, counts out) and
//! `bucket` (every GCRA step of a request), each one round trip and one transaction. Rows are
//! taken in a fixed order (counters by key, buckets by the hash their lock uses, then key), so
//! two requests naming the same keys in different orders never deadlock.
//!
//! Must not touch: connections, pooling, error mapping.

/// One migration: its version and its statements (`{s}` is the quoted schema name).
pub(super) struct Migration {
    pub(super) version: i32,
    pub(super) sql: &'static str,
}

/// The migrations, oldest first. Never edit one that has shipped: add the next.
pub(super) const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    sql: V1,
}];

/// The newest schema version this build knows.
pub(super) fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

const V1: &str = r#"
CREATE TABLE {s}.counters (
    key text PRIMARY KEY,
    count bigint NOT NULL,
    expires_at bigint NOT NULL
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02,
        autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
CREATE INDEX counters_expires_at ON {s}.counters (expires_at);

CREATE TABLE {s}.buckets (
    key text PRIMARY KEY,
    tat numeric NOT NULL,
    expires_at bigint NOT NULL
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02,
        autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
CREATE INDEX buckets_expires_at ON {s}.buckets (expires_at);

-- ops: 0 add, 1 sub (refund), 2 lease, 3 release. A row whose expires_at <= now_s is gone:
-- read as missing, and reused (count and expiry reset) by the next add.
CREATE FUNCTION {s}.apply(keys text[], ops smallint[], amounts bigint[], expires bigint[],
                        now_s bigint, ceiling bigint, OUT counts bigint[])
LANGUAGE plpgsql AS $fn$
DECLARE
  i integer;
  v bigint;
BEGIN
  counts := array_fill(0::bigint, ARRAY[cardinality(keys)]);
  FOR i IN SELECT t.ord FROM unnest(keys) WITH ORDINALITY AS t(k, ord) ORDER BY t.k, t.ord LOOP
    v := NULL;
    IF amounts[i] = 0 AND ops[i] IN (0, 2) THEN
      SELECT c.count INTO v FROM {s}.counters c WHERE c.key = keys[i] AND c.expires_at > now_s;
    ELSIF ops[i] IN (0, 2) THEN
      INSERT INTO {s}.counters AS c (key, count, expires_at)
      VALUES (keys[i], LEAST(amounts[i], ceiling), expires[i])
      ON CONFLICT (key) DO UPDATE SET
        count = CASE WHEN c.expires_at <= now_s THEN LEAST(amounts[i], ceiling)
                     ELSE LEAST(c.count + amounts[i], ceiling) END,
        expires_at = CASE WHEN ops[i] = 2 OR c.expires_at <= now_s THEN expires[i]
                          ELSE c.expires_at END
      RETURNING c.count INTO v;
    ELSE
      UPDATE {s}.counters c
      SET count = GREATEST(c.count - amounts[i], 0),
          expires_at = CASE WHEN ops[i] = 3 THEN expires[i] ELSE c.expires_at END
      WHERE c.key = keys[i] AND c.expires_at > now_s
      RETURNING c.count INTO v;
    END IF;
    counts[i] := COALESCE(v, 0);
  END LOOP;
END
$fn$;

-- One GCRA step per key (as storage::bucket::TokenStep::apply): ticks are exact numerics.
CREATE FUNCTION {s}.bucket(keys text[], nows numeric[], intervals numeric[], capacities numeric[],
                           amounts bigint[], refunds boolean[], ticks_per_ms numeric[],
                           now_s bigint, OUT admitted boolean[], OUT tats text[])
LANGUAGE plpgsql AS $fn$
DECLARE
  i integer;
  stored numeric;
  t numeric;
  after numeric;
  fits boolean;
  changed boolean;
BEGIN
  admitted := array_fill(false, ARRAY[cardinality(keys)]);
  tats := array_fill(''::text, ARRAY[cardinality(keys)]);
  FOR i IN SELECT u.ord FROM unnest(keys) WITH ORDINALITY AS u(k, ord)
           ORDER BY hashtext(u.k), u.k, u.ord LOOP
    PERFORM pg_advisory_xact_lock(1953723249, hashtext(keys[i]));
    stored := NULL;
    SELECT b.tat INTO stored FROM {s}.buckets b WHERE b.key = keys[i] AND b.expires_at > now_s;
    t := GREATEST(COALESCE(stored, nows[i]), nows[i]);
    changed := false;
    IF refunds[i] THEN
      after := GREATEST(t - amounts[i] * intervals[i], nows[i]);
      admitted[i] := true;
      changed := stored IS NOT NULL AND stored <> after;
    ELSE
      fits := t + GREATEST(amounts[i], 1) * intervals[i] - nows[i] <= capacities[i] * intervals[i];
      IF fits AND amounts[i] > 0 THEN
        after := t + amounts[i] * intervals[i];
        changed := true;
      ELSE
        after := t;
      END IF;
      admitted[i] := fits;
    END IF;
    tats[i] := after::text;
    IF changed THEN
      INSERT INTO {s}.buckets AS b (key, tat, expires_at)
      VALUES (keys[i], after, ceil(ceil(after / ticks_per_ms[i]) / 1000)::bigint + 1)
      ON CONFLICT (key) DO UPDATE SET tat = EXCLUDED.tat, expires_at = EXCLUDED.expires_at;
    END IF;
  END LOOP;
END
$fn$;
"#;

/// `POSTGRES_MIGRATE`: when the schema is brought up to date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MigrateMode {
    /// At the first connection, under an advisory lock (the default).
    #[default]
    Auto,
    /// Never by the service: it counts only once an operator has run `turnstile migrate`
    /// (until then it is not ready, saying why).
    Check,
    /// Never, and not checked (the operator owns the schema).
    Off,
}

/// What the database holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaState {
    /// The version applied (0: none).
    pub applied: i32,
    /// The version this build needs.
    pub latest: i32,
}

impl std::fmt::Display for SchemaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.applied.cmp(&self.latest) {
            std::cmp::Ordering::Equal => write!(f, "schema version {} (up to date)", self.applied),
            std::cmp::Ordering::Less => write!(
                f,
                "schema version {}, this Turnstile needs {}: run `turnstile migrate` (or set POSTGRES_MIGRATE=auto)",
                self.applied, self.latest
            ),
            std::cmp::Ordering::Greater => write!(
                f,
                "schema version {} is newer than this Turnstile knows ({}): a newer Turnstile \
                 migrated it; this one will not write to it",
                self.applied, self.latest
            ),
        }
    }
}

/// Why the schema cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The database refused or failed a statement.
    #[error("{}", super::said::Said(.0))]
    Database(#[from] tokio_postgres::Error),
    /// The schema is older or newer than this build.
    #[error("{0}")]
    Version(SchemaState),
}

/// The version applied in `quoted` (0 when Turnstile's schema is not there).
pub(super) async fn state(
    client: &tokio_postgres::Client,
    quoted: &str,
) -> Result<SchemaState, SchemaError> {
    let unquoted = quoted.trim_matches('"');
    let exists: bool = client
        .query_one(
            "SELECT to_regclass(format('%I.schema_version', $1::text)) IS NOT NULL",
            &[&unquoted],
        )
        .await?
        .get(0);
    let applied = if exists {
        client
            .query_one(
                &format!("SELECT coalesce(max(version), 0) FROM {quoted}.schema_version"),
                &[],
            )
            .await?
            .get(0)
    } else {
        0
    };
    Ok(SchemaState {
        applied,
        latest: latest(),
    })
}

/// Applies every missing migration, each in the transaction that records it, under a
/// transaction-scoped advisory lock on the schema's name (a replica that waits for it then
/// finds nothing left to do). Refuses a schema newer than this build. The versions applied.
pub(super) async fn migrate(
    client: &mut tokio_postgres::Client,
    schema: &str,
    quoted: &str,
) -> Result<Vec<i32>, SchemaError> {
    let tx = client.transaction().await?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(1953723249, hashtext('turnstile schema ' || $1::text))",
        &[&schema],
    )
    .await?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {quoted};
         CREATE TABLE IF NOT EXISTS {quoted}.schema_version (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now())"
    ))
    .await?;
    let applied: i32 = tx
        .query_one(
            &format!("SELECT coalesce(max(version), 0) FROM {quoted}.schema_version"),
            &[],
        )
        .await?
        .get(0);
    if applied > latest() {
        return Err(SchemaError::Version(SchemaState {
            applied,
            latest: latest(),
        }));
    }
    let mut done = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| m.version > applied) {
        tx.batch_execute(&m.sql.replace("{s}", quoted)).await?;
        tx.execute(
            &format!("INSERT INTO {quoted}.schema_version (version) VALUES ($1)"),
            &[&m.version],
        )
        .await?;
        done.push(m.version);
    }
    tx.commit().await?;
    Ok(done)
}

/// Brings the schema to the state `POSTGRES_MIGRATE` asks for, once per process.
pub(super) async fn prepare(
    client: &mut tokio_postgres::Client,
    options: &super::PostgresOptions,
    quoted: &str,
) -> Result<(), SchemaError> {
    match options.migrate {
        MigrateMode::Off => Ok(()),
        MigrateMode::Check => {
            let now = state(client, quoted).await?;
            if now.applied == now.latest {
                Ok(())
            } else {
                Err(SchemaError::Version(now))
            }
        }
        MigrateMode::Auto => {
            let applied = migrate(client, &options.schema, quoted).await?;
            if !applied.is_empty() {
                tracing::warn!(?applied, schema = %options.schema, "PostgreSQL schema migrated");
            }
            Ok(())
        }
    }
}
