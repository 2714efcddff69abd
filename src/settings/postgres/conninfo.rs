//! libpq connection strings, as far as tokio-postgres does not read them: the parameters it
//! refuses (`sslmode` beyond `require`, `sslrootcert`, `sslcert`, `sslkey`, `passfile`) taken
//! out of a URI or a `key=value` string, the passfile's password, and the string with its
//! password hidden for messages.

use std::path::Path;

use super::LIBPQ_ONLY;

/// The connection string without the parameters tokio-postgres refuses, and those, as
/// `(key, value)`. Both forms: `postgres://…?a=b&c=d` and `a=b c='d e'`.
pub(super) fn split_libpq_only(url: &str) -> (String, Vec<(String, String)>) {
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
pub(super) fn redact(url: &str) -> String {
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
pub(super) fn passfile_password(file: &Path, config: &tokio_postgres::Config) -> Option<String> {
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
