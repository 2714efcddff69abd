//! The gRPC server's connection, stream and request limits, and connection ageing.

use std::path::PathBuf;
use std::time::Duration;

use super::SettingsError;
use super::reader::{LONGEST, Reader, Span, err};

/// Limits of the gRPC server against overload and abuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcLimits {
    /// `GRPC_MAX_CONNECTIONS`: connections open at once; a new one past it is let in by
    /// closing the longest-idle connection of the peer holding the most.
    pub max_connections: usize,
    /// `GRPC_MAX_CONNECTIONS_PER_PEER`: connections open at once from one peer (its address, or
    /// its certificate under mTLS); a new one past it closes the peer's longest idle.
    pub max_connections_per_peer: usize,
    /// `GRPC_MIN_PING_INTERVAL`: a client PING sooner than this after its previous one, with no
    /// call between them, is a strike; the third strike closes the connection with GOAWAY
    /// `ENHANCE_YOUR_CALM`.
    pub min_ping_interval: Duration,
    /// `GRPC_DEFAULT_CALL_TIMEOUT`: how long a `ShouldRateLimit` call without a `grpc-timeout`
    /// may wait for a place under the limit on decisions in flight (Envoy's default timeout).
    pub default_call_timeout: Duration,
    /// `RLQS_MAX_STREAMS_PER_PEER`: RLQS streams one peer may have open at once.
    pub rlqs_streams_per_peer: u32,
    /// `GRPC_FAIR_REQUESTS_OPEN`: requests open (sent whole, not yet answered) that the
    /// clients share while the adaptive limit is off; a client at its equal part is not read
    /// further until it has fewer (with the adaptive limit on: twice the limit).
    pub fair_requests_open: u32,
    /// `GRPC_FAIR_QUEUE_TARGET`: how long a call that arrives may wait behind the requests
    /// the door let in; the door's budget is steered to it under `fair_requests_open` (zero:
    /// the count alone).
    pub fair_queue_target: Duration,
    /// `GRPC_MAX_CONCURRENT_STREAMS`: `SETTINGS_MAX_CONCURRENT_STREAMS` per connection.
    pub max_concurrent_streams: u32,
    /// `GRPC_MAX_REQUESTS_IN_FLIGHT`: across all connections; more are refused at once.
    pub max_requests_in_flight: usize,
    /// `GRPC_REQUEST_TIMEOUT`: deadline of one request, reading its body included.
    pub request_timeout: Duration,
    /// `GRPC_IDLE_TIMEOUT`: a connection with no call open and none started for this long is
    /// closed (PINGs and other frames that are not calls do not count).
    pub idle_timeout: Duration,
    /// `GRPC_HANDSHAKE_TIMEOUT`: a new connection that has not sent the HTTP/2 preface (or
    /// finished its TLS handshake) by then is closed.
    pub handshake_timeout: Duration,
    /// `GRPC_MAX_HEADER_LIST_SIZE`: bytes of request headers accepted.
    pub max_header_list_size: u32,
    /// `GRPC_ADAPTIVE_CONCURRENCY*`: the adaptive limit on decisions in flight.
    pub adaptive: AdaptiveConcurrency,
}

impl Default for GrpcLimits {
    /// The defaults of every `GRPC_*` limit: the one place they are written (the reader and
    /// the server's own defaults both start from here).
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            max_connections_per_peer: 1_000,
            min_ping_interval: Duration::from_secs(10),
            default_call_timeout: Duration::from_millis(20),
            rlqs_streams_per_peer: 1_000,
            fair_requests_open: 1_024,
            fair_queue_target: Duration::from_millis(1),
            max_concurrent_streams: 1_024,
            max_requests_in_flight: 16_384,
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            handshake_timeout: Duration::from_secs(10),
            max_header_list_size: 65_536,
            adaptive: AdaptiveConcurrency::default(),
        }
    }
}

/// The adaptive limit on `ShouldRateLimit` decisions in flight (the server's `admission`
/// module): it shrinks while admitted calls take longer than unloaded calls plus the tolerance,
/// and grows back while they do not; calls beyond it wait for a place at most `max_wait`, then
/// are refused with `RESOURCE_EXHAUSTED`. Invariant: `1 <= min <= max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveConcurrency {
    /// `GRPC_ADAPTIVE_CONCURRENCY` (default `false`: every call is admitted, up to
    /// `GRPC_MAX_REQUESTS_IN_FLIGHT`). Off by default because, measured, it trades throughput
    /// at saturation (0.85x without deadlines) for the latency of the calls it admits.
    pub enabled: bool,
    /// `GRPC_ADAPTIVE_CONCURRENCY_MIN`: the limit never goes below this.
    pub min: u32,
    /// `GRPC_ADAPTIVE_CONCURRENCY_MAX`: the limit starts here and never goes above it.
    pub max: u32,
    /// `GRPC_ADAPTIVE_CONCURRENCY_TOLERANCE`: how much longer than an unloaded call an
    /// admitted call may take before the limit shrinks.
    pub tolerance: Duration,
    /// How long a call beyond the limit may wait for a place before it is refused: until
    /// the caller's `grpc-timeout` would pass with the call not yet answered (Envoy sends its
    /// `timeout`, 20 ms by default), and at most `GRPC_ADAPTIVE_CONCURRENCY_MAX_WAIT` when set
    /// (`0`: refused at once). Waiting costs no CPU; a call without a deadline and no
    /// `MAX_WAIT` waits until `GRPC_REQUEST_TIMEOUT`.
    pub max_wait: Option<Duration>,
}

impl Default for AdaptiveConcurrency {
    fn default() -> Self {
        Self {
            enabled: false,
            min: 16,
            max: 4_096,
            tolerance: Duration::from_millis(5),
            max_wait: None,
        }
    }
}

fn adaptive(r: &Reader<'_>) -> Result<AdaptiveConcurrency, SettingsError> {
    let d = AdaptiveConcurrency::default();
    let min = r.number("GRPC_ADAPTIVE_CONCURRENCY_MIN", d.min, 1, 1_000_000);
    let max = r.number(
        "GRPC_ADAPTIVE_CONCURRENCY_MAX",
        d.max.max(min),
        1,
        10_000_000,
    );
    if max < min {
        return Err(super::err(
            "GRPC_ADAPTIVE_CONCURRENCY_MAX",
            &max.to_string(),
            format!("must be at least GRPC_ADAPTIVE_CONCURRENCY_MIN ({min})"),
        ));
    }
    Ok(AdaptiveConcurrency {
        enabled: r.bool("GRPC_ADAPTIVE_CONCURRENCY", d.enabled),
        min,
        max,
        tolerance: r.duration(
            "GRPC_ADAPTIVE_CONCURRENCY_TOLERANCE",
            d.tolerance,
            Span::within(Duration::from_micros(100), Duration::from_secs(10)),
        ),
        max_wait: match r.non_empty("GRPC_ADAPTIVE_CONCURRENCY_MAX_WAIT") {
            None => d.max_wait,
            Some(_) => Some(r.duration(
                "GRPC_ADAPTIVE_CONCURRENCY_MAX_WAIT",
                Duration::ZERO,
                Span::within(Duration::ZERO, Duration::from_secs(10)),
            )),
        },
    })
}

/// `GRPC_MAX_CONNECTION_AGE` and `GRPC_MAX_CONNECTION_AGE_GRACE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionAge {
    /// GOAWAY is sent once a connection is this old, so clients rebalance.
    pub age: Duration,
    /// Then the connection has this long to finish its calls.
    pub grace: Duration,
}

pub(super) fn grpc_limits(r: &Reader<'_>) -> GrpcLimits {
    let ms = Duration::from_millis;
    let d = GrpcLimits::default();
    GrpcLimits {
        max_connections: r.number("GRPC_MAX_CONNECTIONS", d.max_connections, 1, 1_000_000),
        max_connections_per_peer: r.number(
            "GRPC_MAX_CONNECTIONS_PER_PEER",
            d.max_connections_per_peer,
            1,
            1_000_000,
        ),
        min_ping_interval: r.duration(
            "GRPC_MIN_PING_INTERVAL",
            d.min_ping_interval,
            Span::within(Duration::ZERO, LONGEST),
        ),
        default_call_timeout: r.duration(
            "GRPC_DEFAULT_CALL_TIMEOUT",
            d.default_call_timeout,
            Span::within(ms(1), LONGEST),
        ),
        rlqs_streams_per_peer: r.number(
            "RLQS_MAX_STREAMS_PER_PEER",
            d.rlqs_streams_per_peer,
            1,
            1_000_000,
        ),
        fair_requests_open: r.number(
            "GRPC_FAIR_REQUESTS_OPEN",
            d.fair_requests_open,
            16,
            10_000_000,
        ),
        fair_queue_target: r.duration(
            "GRPC_FAIR_QUEUE_TARGET",
            d.fair_queue_target,
            Span::within(Duration::ZERO, Duration::from_secs(1)),
        ),
        max_concurrent_streams: r.number(
            "GRPC_MAX_CONCURRENT_STREAMS",
            d.max_concurrent_streams,
            1,
            1_000_000,
        ),
        max_requests_in_flight: r.number(
            "GRPC_MAX_REQUESTS_IN_FLIGHT",
            d.max_requests_in_flight,
            1,
            10_000_000,
        ),
        request_timeout: r.duration(
            "GRPC_REQUEST_TIMEOUT",
            d.request_timeout,
            Span::within(ms(10), LONGEST),
        ),
        idle_timeout: r.duration(
            "GRPC_IDLE_TIMEOUT",
            d.idle_timeout,
            Span::within(ms(100), LONGEST),
        ),
        handshake_timeout: r.duration(
            "GRPC_HANDSHAKE_TIMEOUT",
            d.handshake_timeout,
            Span::within(ms(100), LONGEST),
        ),
        // A call's headers from Envoy (tracing headers included) take about 1 KiB as HTTP/2
        // counts them; less than 4 KiB would refuse ordinary calls with GOAWAY.
        max_header_list_size: r.number(
            "GRPC_MAX_HEADER_LIST_SIZE",
            d.max_header_list_size,
            4_096,
            16 << 20,
        ),
        adaptive: r.or(adaptive(r), d.adaptive),
    }
}

/// gRPC server TLS files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// PEM CA bundle that client certificates must chain to (mTLS), if any.
    pub client_ca: Option<PathBuf>,
    /// `GRPC_CLIENT_TLS_SAN`: a DNS name every client certificate must carry (with
    /// `client_ca` only).
    pub client_san: Option<String>,
}

impl TlsSettings {
    /// The files and names the server's TLS is built from.
    pub fn server_files(&self) -> crate::tls::ServerFiles<'_> {
        crate::tls::ServerFiles {
            cert: &self.cert,
            key: &self.key,
            client_ca: self.client_ca.as_deref(),
            client_san: self.client_san.as_deref(),
        }
    }
}

/// `GRPC_SERVER_USE_TLS` with its files.
pub(super) fn tls(r: &Reader<'_>) -> Result<Option<TlsSettings>, SettingsError> {
    if !r.bool("GRPC_SERVER_USE_TLS", false) {
        return Ok(None);
    }
    let file = |name: &str| -> Result<PathBuf, SettingsError> {
        let value = r.string(name, "");
        if value.is_empty() {
            return Err(err(name, "", "required when GRPC_SERVER_USE_TLS=true"));
        }
        Ok(PathBuf::from(value))
    };
    let client_ca = Some(r.string("GRPC_CLIENT_TLS_CACERT", ""))
        .filter(|s| !s.is_empty())
        .map(PathBuf::from);
    let client_san = r.non_empty("GRPC_CLIENT_TLS_SAN");
    if client_san.is_some() && client_ca.is_none() {
        let san = client_san.clone().unwrap_or_default();
        let problem = "a client certificate is checked only with GRPC_CLIENT_TLS_CACERT: set it";
        r.report(err("GRPC_CLIENT_TLS_SAN", &san, problem));
    }
    let (cert, key) = (file("GRPC_SERVER_TLS_CERT"), file("GRPC_SERVER_TLS_KEY"));
    let cert = r.or(cert.map(Some), None);
    let key = r.or(key.map(Some), None);
    Ok(cert.zip(key).map(|(cert, key)| TlsSettings {
        cert,
        key,
        client_ca,
        client_san,
    }))
}

/// `GRPC_MAX_CONNECTION_AGE` (from 100 ms) and `GRPC_MAX_CONNECTION_AGE_GRACE` (from 0).
pub(super) fn connection_age(r: &Reader<'_>) -> ConnectionAge {
    ConnectionAge {
        age: r.duration(
            "GRPC_MAX_CONNECTION_AGE",
            Duration::from_secs(24 * 3600),
            Span::within(Duration::from_millis(100), LONGEST),
        ),
        grace: r.duration(
            "GRPC_MAX_CONNECTION_AGE_GRACE",
            Duration::from_secs(3600),
            Span::within(Duration::ZERO, LONGEST),
        ),
    }
}
