//! Where the rules come from (`CONFIG_TYPE`) and the settings of the xDS client, with the
//! reference's names and defaults (`CONFIG_GRPC_XDS_*`, `XDS_CLIENT_*`).

use std::path::PathBuf;
use std::time::Duration;

use super::SettingsError;
use super::reader::{Reader, Span, err};

/// The source of the rules (`CONFIG_TYPE`): only one is active.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigSource {
    /// `FILE`: the rule directory, watched.
    File,
    /// `GRPC_XDS_SOTW`: an ADS state-of-the-world stream.
    Xds(Box<XdsSettings>),
}

/// TLS towards the ADS server (`CONFIG_GRPC_XDS_SERVER_USE_TLS=true`). Files are read again at
/// every connection, so certificates that Kubernetes rotates are used from the next one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdsTls {
    /// `CONFIG_GRPC_XDS_CLIENT_TLS_CERT` and `_KEY`: the client certificate (mTLS).
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// `CONFIG_GRPC_XDS_SERVER_TLS_CACERT`: the CA the server's certificate must chain to
    /// (the system's roots when unset).
    pub ca: Option<PathBuf>,
    /// `CONFIG_GRPC_XDS_SERVER_TLS_SAN`: the name the server's certificate must carry, instead
    /// of the host of the server URL.
    pub san: Option<String>,
}

/// Reconnection pacing of the xDS client.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct XdsBackoff {
    /// `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`: the first pause after a failed connection.
    pub initial: Duration,
    /// `XDS_CLIENT_BACKOFF_MAX_INTERVAL`: the longest pause.
    pub max: Duration,
    /// `XDS_CLIENT_BACKOFF_RANDOM_FACTOR`: each pause is spread by up to this part either way.
    pub random_factor: f64,
    /// `XDS_CLIENT_BACKOFF_JITTER`: whether pauses are spread at all.
    pub jitter: bool,
    /// `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`: the pause before subscribing again
    /// after a stream that was up ends.
    pub stream_retry: Duration,
}

/// The xDS client (`CONFIG_TYPE=GRPC_XDS_SOTW`).
#[derive(Debug, Clone, PartialEq)]
pub struct XdsSettings {
    /// `CONFIG_GRPC_XDS_SERVER_URL`: `host:port` of the ADS server.
    pub server: String,
    /// `CONFIG_GRPC_XDS_NODE_ID`.
    pub node_id: String,
    /// `CONFIG_GRPC_XDS_NODE_METADATA` (`k=v,k=v`): string fields of the node's metadata.
    pub node_metadata: Vec<(String, String)>,
    /// `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS` (`k:v,k:v`): gRPC metadata on the stream.
    pub headers: Vec<(String, String)>,
    /// TLS, when `CONFIG_GRPC_XDS_SERVER_USE_TLS=true`.
    pub tls: Option<XdsTls>,
    /// Reconnection pacing.
    pub backoff: XdsBackoff,
    /// `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`: the largest response accepted (4 MiB, gRPC's usual
    /// limit, when unset).
    pub max_message_bytes: usize,
}

/// The largest response accepted when `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES` is unset.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 << 20;

/// A retry pause: from 1 ms to a day.
const PAUSE: Span = Span::within(Duration::from_millis(1), Duration::from_secs(86_400));

pub(super) fn config_source(r: &Reader<'_>) -> Result<ConfigSource, SettingsError> {
    match r
        .string("CONFIG_TYPE", "FILE")
        .trim()
        .to_ascii_uppercase()
        .as_str()
    {
        "" | "FILE" => Ok(ConfigSource::File),
        "GRPC_XDS_SOTW" => Ok(ConfigSource::Xds(Box::new(xds(r)))),
        other => Err(err(
            "CONFIG_TYPE",
            other,
            "expected FILE (rule files) or GRPC_XDS_SOTW (rules over xDS)",
        )),
    }
}

fn xds(r: &Reader<'_>) -> XdsSettings {
    let server = r.string("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000");
    r.or(
        super::address::host_port("CONFIG_GRPC_XDS_SERVER_URL", &server, &server),
        (),
    );
    let node_id = r.string("CONFIG_GRPC_XDS_NODE_ID", "default");
    let max = r.number("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", 0usize, 0, 1 << 30);
    XdsSettings {
        server,
        node_id,
        node_metadata: r.or(pairs(r, "CONFIG_GRPC_XDS_NODE_METADATA", '='), Vec::new()),
        headers: r.or(headers(r), Vec::new()),
        tls: r.or(tls(r), None),
        backoff: backoff(r),
        max_message_bytes: if max == 0 {
            DEFAULT_MAX_MESSAGE_BYTES
        } else {
            max
        },
    }
}

/// `k<sep>v,k<sep>v` pairs (empty: none).
fn pairs(r: &Reader<'_>, name: &str, sep: char) -> Result<Vec<(String, String)>, SettingsError> {
    let text = r.string(name, "");
    let mut out = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match pair.split_once(sep) {
            Some((k, v)) if !k.trim().is_empty() => {
                out.push((k.trim().to_owned(), v.trim().to_owned()));
            }
            _ => {
                return Err(err(
                    name,
                    &text,
                    format!("expected key{sep}value pairs separated by commas"),
                ));
            }
        }
    }
    Ok(out)
}

/// Additional headers: names must be valid gRPC metadata keys (lower-case ASCII, digits, `-`,
/// `_`, `.`), values visible ASCII, so that none is dropped silently at connection time.
fn headers(r: &Reader<'_>) -> Result<Vec<(String, String)>, SettingsError> {
    const NAME: &str = "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS";
    let headers = pairs(r, NAME, ':')?;
    for (k, v) in &headers {
        let key = k.to_ascii_lowercase();
        let key_ok = !key.ends_with("-bin")
            && key
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b));
        if !key_ok {
            return Err(err(NAME, k, "not a valid gRPC metadata name"));
        }
        if !v.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(err(NAME, v, "header values must be printable ASCII"));
        }
    }
    Ok(headers
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect())
}

fn tls(r: &Reader<'_>) -> Result<Option<XdsTls>, SettingsError> {
    if !r.bool("CONFIG_GRPC_XDS_SERVER_USE_TLS", false) {
        return Ok(None);
    }
    let path = |name: &str| Some(r.string(name, "")).filter(|s| !s.is_empty());
    let var = |name| (name, path(name));
    let client_cert = r.identity(
        var("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
        var("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
    );
    Ok(Some(XdsTls {
        client_cert,
        ca: path("CONFIG_GRPC_XDS_SERVER_TLS_CACERT").map(PathBuf::from),
        san: path("CONFIG_GRPC_XDS_SERVER_TLS_SAN"),
    }))
}

fn backoff(r: &Reader<'_>) -> XdsBackoff {
    let initial = r.duration(
        "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
        Duration::from_secs(10),
        PAUSE,
    );
    let max = r.duration(
        "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
        Duration::from_secs(60),
        PAUSE,
    );
    if max < initial {
        r.report(err(
            "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
            &format!("{max:?}"),
            format!("must not be shorter than XDS_CLIENT_BACKOFF_INITIAL_INTERVAL ({initial:?})"),
        ));
    }
    let random_factor: f64 = r.parsed("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", 0.5);
    if !(0.0..=1.0).contains(&random_factor) {
        r.report(err(
            "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
            &random_factor.to_string(),
            "between 0 and 1",
        ));
    }
    XdsBackoff {
        initial,
        max,
        random_factor,
        jitter: r.bool("XDS_CLIENT_BACKOFF_JITTER", true),
        stream_retry: r.duration(
            "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
            Duration::from_secs(3),
            PAUSE,
        ),
    }
}
