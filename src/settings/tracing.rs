//! Settings of OpenTelemetry tracing: the reference's `TRACING_*` and the standard
//! `OTEL_EXPORTER_OTLP_*` / `OTEL_BSP_*` variables (the signal-specific `…_TRACES_…` form wins
//! over the general one, as the OpenTelemetry specification says), all read here so that a
//! bad value is a start-up error naming its variable rather than something the exporter
//! library reads behind our back.

use std::path::PathBuf;
use std::time::Duration;

use super::SettingsError;
use super::reader::{Reader, err};

/// `TRACING_EXPORTER_PROTOCOL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies (`http`, the reference's default): `POST …/v1/traces`.
    Http,
    /// OTLP/gRPC (`grpc`): `opentelemetry.proto.collector.trace.v1.TraceService/Export`.
    Grpc,
}

/// Everything tracing needs; present only with `TRACING_ENABLED=true`.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingSettings {
    /// `TRACING_EXPORTER_PROTOCOL`.
    pub protocol: OtlpProtocol,
    /// `TRACING_SERVICE_NAME` (`service.name`, default `RateLimit`).
    pub service_name: String,
    /// `TRACING_SERVICE_NAMESPACE` (`service.namespace`; left out when empty).
    pub service_namespace: String,
    /// `TRACING_SERVICE_INSTANCE_ID` (`service.instance.id`; a random UUID when empty).
    pub service_instance_id: String,
    /// `TRACING_SAMPLING_RATE`: the share of root calls traced (a caller's sampled flag
    /// decides for calls that carry one); ≥ 1 traces every call, ≤ 0 none.
    pub sampling_rate: f64,
    /// `TRACING_INCLUDE_VALUES`: descriptor values as span attributes (they can be personal
    /// data, so off by default; keys and rule names are always there).
    pub include_values: bool,
    /// Where spans go: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as given, or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (+ `/v1/traces` over HTTP); defaults
    /// `http://localhost:4318/v1/traces` (HTTP) and `http://localhost:4317` (gRPC).
    pub endpoint: String,
    /// `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS` (`k=v,k2=v2`, values percent-decoded).
    pub headers: Vec<(String, String)>,
    /// `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT` in milliseconds (default 10 s).
    pub timeout: Duration,
    /// `OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE`: CA bundle for the collector's certificate
    /// (the system's roots when absent).
    pub ca_file: Option<PathBuf>,
    /// `OTEL_EXPORTER_OTLP_[TRACES_]CLIENT_CERTIFICATE` and `…_CLIENT_KEY` (mTLS).
    pub client_identity: Option<(PathBuf, PathBuf)>,
    /// `OTEL_BSP_MAX_QUEUE_SIZE`: spans waiting for export; past it new spans are dropped
    /// and counted, never waited for.
    pub queue_size: usize,
    /// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (default 128, not the specification's 512: encoding
    /// 512 spans at once builds a ~200 KB request in fresh pages every export, which measured
    /// +3 % to +9 % CPU per call at 1 % sampling against +1 % with 128; BENCHMARKS.md).
    pub batch_size: usize,
    /// `OTEL_BSP_SCHEDULE_DELAY` in milliseconds: how long a span waits for its batch to fill.
    pub schedule_delay: Duration,
}

/// Spans per export unless `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` says otherwise.
const DEFAULT_BATCH: usize = 128;

pub(super) fn tracing(r: &Reader<'_>) -> Option<TracingSettings> {
    if !r.bool("TRACING_ENABLED", false) {
        return None;
    }
    let protocol = match r.string("TRACING_EXPORTER_PROTOCOL", "http").trim() {
        "" | "http" => OtlpProtocol::Http,
        "grpc" => OtlpProtocol::Grpc,
        other => r.or(
            Err(err("TRACING_EXPORTER_PROTOCOL", other, "http or grpc")),
            OtlpProtocol::Http,
        ),
    };
    let sampling_rate: f64 = r.parsed("TRACING_SAMPLING_RATE", 1.0);
    if sampling_rate.is_nan() {
        r.report(err("TRACING_SAMPLING_RATE", "NaN", "a number from 0 to 1"));
    }
    let otel = |name: &str| otlp_var(r, name);
    if let Some((name, value)) = otel("COMPRESSION").filter(|(_, v)| v != "none") {
        r.report(err(
            &name,
            &value,
            "Turnstile sends spans uncompressed; unset it or set none",
        ));
    }
    let (queue_size, batch_size) = batching(r);
    let ms = |set, default_ms| r.or(millis(set, default_ms), Duration::from_millis(default_ms));
    Some(TracingSettings {
        protocol,
        service_name: r.string("TRACING_SERVICE_NAME", "RateLimit"),
        service_namespace: r.string("TRACING_SERVICE_NAMESPACE", ""),
        service_instance_id: r.string("TRACING_SERVICE_INSTANCE_ID", ""),
        sampling_rate,
        include_values: r.bool("TRACING_INCLUDE_VALUES", false),
        endpoint: r.or(endpoint(r, protocol), String::new()),
        headers: match otel("HEADERS") {
            None => Vec::new(),
            Some((name, value)) => r.or(headers(&name, &value), Vec::new()),
        },
        timeout: ms(otel("TIMEOUT"), 10_000),
        ca_file: otel("CERTIFICATE").map(|(_, v)| v.into()),
        client_identity: client_identity(r),
        queue_size,
        batch_size,
        schedule_delay: ms(
            r.non_empty("OTEL_BSP_SCHEDULE_DELAY")
                .map(|v| ("OTEL_BSP_SCHEDULE_DELAY".to_owned(), v)),
            5_000,
        ),
    })
}

/// `OTEL_BSP_MAX_QUEUE_SIZE` and `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`: the default batch shrinks
/// to a smaller queue; a batch set larger is an error.
fn batching(r: &Reader<'_>) -> (usize, usize) {
    let queue_size = r.number("OTEL_BSP_MAX_QUEUE_SIZE", 2048usize, 1, 1 << 20);
    let fitting = DEFAULT_BATCH.min(queue_size);
    let batch_size = r.number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", fitting, 1, 1 << 20);
    if batch_size > queue_size {
        r.report(err(
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
            &batch_size.to_string(),
            "at most OTEL_BSP_MAX_QUEUE_SIZE",
        ));
    }
    (queue_size, batch_size.min(queue_size))
}

/// `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE` and `_CLIENT_KEY`, which go together.
fn client_identity(r: &Reader<'_>) -> Option<(PathBuf, PathBuf)> {
    let (cert, key) = (otlp_var(r, "CLIENT_CERTIFICATE"), otlp_var(r, "CLIENT_KEY"));
    let name = |found: &Option<(String, String)>, general: &'static str| {
        found
            .as_ref()
            .map_or(general.to_owned(), |(n, _)| n.clone())
    };
    let (cert_name, key_name) = (
        name(&cert, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"),
        name(&key, "OTEL_EXPORTER_OTLP_CLIENT_KEY"),
    );
    r.identity(
        (&cert_name, cert.map(|(_, v)| v)),
        (&key_name, key.map(|(_, v)| v)),
    )
}

/// `OTEL_EXPORTER_OTLP_TRACES_<name>`, else `OTEL_EXPORTER_OTLP_<name>`: the variable that
/// was set and its value.
fn otlp_var(r: &Reader<'_>, name: &str) -> Option<(String, String)> {
    [
        format!("OTEL_EXPORTER_OTLP_TRACES_{name}"),
        format!("OTEL_EXPORTER_OTLP_{name}"),
    ]
    .into_iter()
    .find_map(|var| r.non_empty(&var).map(|value| (var, value)))
}

fn endpoint(r: &Reader<'_>, protocol: OtlpProtocol) -> Result<String, SettingsError> {
    let (name, url) = match (
        r.non_empty("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        r.non_empty("OTEL_EXPORTER_OTLP_ENDPOINT"),
        protocol,
    ) {
        (Some(url), _, _) => ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url),
        (None, Some(base), OtlpProtocol::Http) => (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("{}/v1/traces", base.trim_end_matches('/')),
        ),
        (None, Some(base), OtlpProtocol::Grpc) => ("OTEL_EXPORTER_OTLP_ENDPOINT", base),
        (None, None, OtlpProtocol::Http) => return Ok("http://localhost:4318/v1/traces".into()),
        (None, None, OtlpProtocol::Grpc) => return Ok("http://localhost:4317".into()),
    };
    let url = url.trim().to_owned();
    match url.parse::<http::Uri>() {
        Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => {
            Ok(url)
        }
        _ => Err(err(
            name,
            &url,
            "a URL with scheme http or https and a host, e.g. http://otel-collector:4318",
        )),
    }
}

/// Whole milliseconds from 1 ms to an hour (`default_ms` when unset).
fn millis(set: Option<(String, String)>, default_ms: u64) -> Result<Duration, SettingsError> {
    let Some((name, value)) = set else {
        return Ok(Duration::from_millis(default_ms));
    };
    match value.trim().parse::<u64>() {
        Ok(ms @ 1..=3_600_000) => Ok(Duration::from_millis(ms)),
        _ => Err(err(
            &name,
            &value,
            "whole milliseconds from 1 to 3600000, e.g. 10000",
        )),
    }
}

/// `k=v,k2=v2` with percent-encoded values, as the OpenTelemetry specification writes headers.
fn headers(name: &str, text: &str) -> Result<Vec<(String, String)>, SettingsError> {
    let mut out = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(err(name, text, "key=value pairs separated by commas"));
        };
        let k = k.trim().to_ascii_lowercase();
        let v = percent_decode(v.trim()).ok_or_else(|| {
            err(
                name,
                text,
                format!("the value of {k} is not valid percent-encoding"),
            )
        })?;
        let valid = http::HeaderName::from_bytes(k.as_bytes()).is_ok()
            && http::HeaderValue::from_str(&v).is_ok();
        if !valid {
            return Err(err(name, text, format!("{k} is not a valid header")));
        }
        out.push((k, v));
    }
    Ok(out)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests;
