//! Process settings, read once at start-up from the environment (the reference's names and
//! defaults) plus a few command-line flags, and validated. The environment is read through a
//! function so tests inject a map instead of mutating the process environment.
//!
//! Must not touch: anything else in the crate.

use std::path::PathBuf;
use std::time::Duration;

/// A setting with a value we cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting {name}={value:?}: {problem}")]
pub struct SettingsError {
    /// The variable or flag.
    pub name: String,
    /// The rejected value.
    pub value: String,
    /// Why.
    pub problem: String,
}

/// Which counter store to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// In-process (`memory`, the default).
    Memory,
    /// memcached (`memcache`).
    Memcached,
}

/// Every process setting.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `GRPC_HOST`.
    pub grpc_host: String,
    /// `GRPC_PORT`.
    pub grpc_port: u16,
    /// The directory of rule files: `--config-dir`, or
    /// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`.
    pub config_dir: PathBuf,
    /// `RUNTIME_IGNOREDOTFILES`.
    pub ignore_dotfiles: bool,
    /// `MERGE_DOMAIN_CONFIG`.
    pub merge_domains: bool,
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG`: start even when the first load fails.
    pub force_start_without_config: bool,
    /// `BACKEND_TYPE`.
    pub backend: Backend,
    /// `CACHE_KEY_PREFIX`.
    pub key_prefix: String,
    /// `SHADOW_MODE`.
    pub shadow_mode: bool,
    /// `QUOTA_MODE`.
    pub quota_mode: bool,
    /// `RESPONSE_DYNAMIC_METADATA`.
    pub dynamic_metadata: bool,
    /// `LIMIT_RESPONSE_HEADERS_ENABLED`.
    pub response_headers: bool,
    /// `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`.
    pub header_names: [String; 3],
    /// `MEMORY_MAX_KEYS`: the memory store's bound on live counters.
    pub memory_max_keys: usize,
    /// `BACKEND_FAIL_OPEN`: answer OK instead of UNAVAILABLE when the counter store fails.
    pub fail_open: bool,
    /// `MEMCACHE_HOST_PORT` split on commas.
    pub memcache_servers: Vec<String>,
    /// `MEMCACHE_SRV`.
    pub memcache_srv: String,
    /// `MEMCACHE_SRV_REFRESH`.
    pub memcache_srv_refresh: Duration,
    /// `MEMCACHE_MAX_IDLE_CONNS`: connections kept per memcached server.
    pub memcache_pool_size: u32,
    /// `MEMCACHE_TIMEOUT`: the deadline of one memcached operation.
    pub memcache_timeout: Duration,
    /// `EXPIRATION_JITTER_MAX_SECONDS`.
    pub expiration_jitter: u64,
    /// `MEMCACHE_CLASSIC_PROTOCOL`: use `incr`/`add` instead of meta commands (memcached < 1.6).
    pub memcache_classic: bool,
    /// `LOG_LEVEL`.
    pub log_level: String,
    /// `LOG_FORMAT` is `json`.
    pub log_json: bool,
}

struct Reader<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl Reader<'_> {
    fn string(&self, name: &str, default: &str) -> String {
        (self.env)(name).unwrap_or_else(|| default.to_owned())
    }

    fn parsed<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, SettingsError>
    where
        T::Err: std::fmt::Display,
    {
        match (self.env)(name) {
            None => Ok(default),
            Some(v) if v.is_empty() => Ok(default),
            Some(v) => v
                .trim()
                .parse()
                .map_err(|e: T::Err| err(name, &v, e.to_string())),
        }
    }

    /// Go's `strconv.ParseBool`, as the reference's envconfig uses.
    fn bool(&self, name: &str, default: bool) -> Result<bool, SettingsError> {
        match (self.env)(name).as_deref() {
            None | Some("") => Ok(default),
            Some("1" | "t" | "T" | "TRUE" | "true" | "True") => Ok(true),
            Some("0" | "f" | "F" | "FALSE" | "false" | "False") => Ok(false),
            Some(v) => Err(err(name, v, "expected true or false")),
        }
    }

    fn duration(&self, name: &str, default: Duration) -> Result<Duration, SettingsError> {
        match (self.env)(name) {
            None => Ok(default),
            Some(v) if v.is_empty() => Ok(default),
            Some(v) => parse_duration(&v)
                .ok_or_else(|| err(name, &v, "expected a duration such as 500ms, 10s, 1m or 1h")),
        }
    }
}

fn err(name: &str, value: &str, problem: impl Into<String>) -> SettingsError {
    SettingsError {
        name: name.to_owned(),
        value: value.to_owned(),
        problem: problem.into(),
    }
}

/// Parses a Go-style duration made of number+unit parts (`ns`, `us`, `ms`, `s`, `m`, `h`), e.g.
/// `1h30m` or `250ms`. A bare `0` is zero.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += Duration::try_from_secs_f64(number * scale).ok()?;
    }
    (!text.is_empty()).then_some(total)
}

impl Settings {
    /// Reads settings from `env`; `config_dir` (from `--config-dir`) wins over `RUNTIME_*`.
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
        config_dir: Option<PathBuf>,
    ) -> Result<Settings, SettingsError> {
        let r = Reader { env };
        let backend = match r
            .string("BACKEND_TYPE", "memory")
            .to_ascii_lowercase()
            .as_str()
        {
            "" | "memory" => Backend::Memory,
            "memcache" | "memcached" => Backend::Memcached,
            other => {
                return Err(err(
                    "BACKEND_TYPE",
                    other,
                    "expected memory or memcache (redis is not supported)",
                ));
            }
        };
        let config_dir = config_dir.unwrap_or_else(|| {
            let mut dir = PathBuf::from(r.string("RUNTIME_ROOT", "/srv/runtime_data/current"));
            dir.push(r.string("RUNTIME_SUBDIRECTORY", ""));
            dir.push(r.string("RUNTIME_APPDIRECTORY", "config"));
            dir
        });
        let key_prefix = r.string("CACHE_KEY_PREFIX", "");
        if key_prefix.len() > 64 {
            return Err(err("CACHE_KEY_PREFIX", &key_prefix, "at most 64 bytes"));
        }
        let memcache_servers: Vec<String> = r
            .string("MEMCACHE_HOST_PORT", "")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let memcache_srv = r.string("MEMCACHE_SRV", "");
        if backend == Backend::Memcached && memcache_servers.is_empty() == memcache_srv.is_empty() {
            return Err(err(
                "MEMCACHE_HOST_PORT",
                &memcache_servers.join(","),
                "BACKEND_TYPE=memcache needs exactly one of MEMCACHE_HOST_PORT and MEMCACHE_SRV",
            ));
        }
        let log_format = r.string("LOG_FORMAT", "text").to_ascii_lowercase();
        if log_format != "text" && log_format != "json" {
            return Err(err("LOG_FORMAT", &log_format, "expected text or json"));
        }
        let memcache_pool_size = r.parsed("MEMCACHE_MAX_IDLE_CONNS", 8u32)?;
        if memcache_pool_size == 0 {
            return Err(err("MEMCACHE_MAX_IDLE_CONNS", "0", "at least 1"));
        }
        Ok(Settings {
            grpc_host: r.string("GRPC_HOST", "0.0.0.0"),
            grpc_port: r.parsed("GRPC_PORT", 8081)?,
            config_dir,
            ignore_dotfiles: r.bool("RUNTIME_IGNOREDOTFILES", false)?,
            merge_domains: r.bool("MERGE_DOMAIN_CONFIG", false)?,
            force_start_without_config: r.bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false)?,
            backend,
            key_prefix,
            shadow_mode: r.bool("SHADOW_MODE", false)?,
            quota_mode: r.bool("QUOTA_MODE", false)?,
            dynamic_metadata: r.bool("RESPONSE_DYNAMIC_METADATA", false)?,
            response_headers: r.bool("LIMIT_RESPONSE_HEADERS_ENABLED", false)?,
            header_names: [
                r.string("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
                r.string("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
                r.string("LIMIT_RESET_HEADER", "RateLimit-Reset"),
            ],
            memory_max_keys: r.parsed("MEMORY_MAX_KEYS", 1_000_000usize)?,
            fail_open: r.bool("BACKEND_FAIL_OPEN", false)?,
            memcache_servers,
            memcache_srv,
            memcache_srv_refresh: r.duration("MEMCACHE_SRV_REFRESH", Duration::ZERO)?,
            memcache_pool_size,
            memcache_timeout: r.duration("MEMCACHE_TIMEOUT", Duration::from_millis(10))?,
            expiration_jitter: r.parsed("EXPIRATION_JITTER_MAX_SECONDS", 300u64)?,
            memcache_classic: r.bool("MEMCACHE_CLASSIC_PROTOCOL", false)?,
            log_level: r.string("LOG_LEVEL", "WARN"),
            log_json: log_format == "json",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(pairs: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        Settings::from_env(&move |k| map.get(k).cloned(), None)
    }

    #[test]
    fn defaults_match_the_reference() {
        let s = with(&[]).expect("defaults");
        assert_eq!((s.grpc_host.as_str(), s.grpc_port), ("0.0.0.0", 8081));
        assert_eq!(
            s.config_dir,
            PathBuf::from("/srv/runtime_data/current/config")
        );
        assert_eq!(s.backend, Backend::Memory);
        assert_eq!(s.expiration_jitter, 300);
        assert_eq!(s.header_names[0], "RateLimit-Limit");
    }

    #[test]
    fn runtime_directories_compose() {
        let s = with(&[
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ])
        .expect("ok");
        assert_eq!(s.config_dir, PathBuf::from("/data/ratelimit/config"));
    }

    #[test]
    fn bad_values_name_the_setting() {
        let e = with(&[("GRPC_PORT", "80x")]).expect_err("bad port");
        assert_eq!(e.name, "GRPC_PORT");
        let e = with(&[("SHADOW_MODE", "yes")]).expect_err("bad bool");
        assert_eq!(e.name, "SHADOW_MODE");
        let e = with(&[("BACKEND_TYPE", "memcache")]).expect_err("no servers");
        assert_eq!(e.name, "MEMCACHE_HOST_PORT");
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("10"), None);
    }
}
