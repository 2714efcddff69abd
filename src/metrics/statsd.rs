//! The statsd and DogStatsD sinks (`USE_STATSD`, `USE_DOG_STATSD`): every flush interval, the
//! increase of every counter since the last flush is sent as a counter over UDP (cadence),
//! with the reference's statsd names (`ratelimit.service.rate_limit.<domain>.<key…>.<stat>`,
//! `ratelimit.service.config_load_success`, …) and `EXTRA_TAGS` as tags (`|#k:v`). DogStatsD
//! also passes each name through the mogrifiers, which turn dotted parts into tags.

use std::collections::HashMap;
use std::net::UdpSocket;
use std::sync::Arc;
use std::time::Duration;

use cadence::{BufferedUdpMetricSink, Counted, StatsdClient};

use super::Metrics;
use super::escape::dogstatsd_tag;
use super::mogrify::Mogrifiers;

/// Why the sink could not start.
#[derive(Debug, thiserror::Error)]
#[error("statsd sink to {addr}: {problem}")]
pub struct StatsdError {
    addr: String,
    problem: String,
}

/// The sink pushing `metrics` to `addr` (`host:port`) every `every`, for as long as the
/// returned future is polled; names pass through `mogrifiers` (none for plain statsd).
pub fn sink(
    metrics: Arc<Metrics>,
    addr: &str,
    every: Duration,
    mogrifiers: Mogrifiers,
) -> Result<impl std::future::Future<Output = ()> + Send + 'static, StatsdError> {
    let fail = |problem: String| StatsdError {
        addr: addr.to_owned(),
        problem,
    };
    let target = std::net::ToSocketAddrs::to_socket_addrs(addr)
        .map_err(|e| fail(e.to_string()))?
        .next()
        .ok_or_else(|| fail("no address".into()))?;
    let bind = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let socket = UdpSocket::bind(bind).map_err(|e| fail(e.to_string()))?;
    socket
        .set_nonblocking(true)
        .map_err(|e| fail(e.to_string()))?;
    let sink = BufferedUdpMetricSink::from(target, socket).map_err(|e| fail(e.to_string()))?;
    let client = StatsdClient::from_sink("", sink);
    Ok(async move {
        let mut sent: HashMap<String, u64> = HashMap::new();
        loop {
            tokio::time::sleep(every).await;
            flush(&metrics, &client, &mogrifiers, &mut sent);
        }
    })
}

fn flush(
    metrics: &Metrics,
    client: &StatsdClient,
    mogrifiers: &Mogrifiers,
    sent: &mut HashMap<String, u64>,
) {
    for (name, value) in metrics.statsd_counters() {
        let before = sent.insert(name.clone(), value).unwrap_or(0);
        let delta = value.saturating_sub(before);
        if delta == 0 {
            continue;
        }
        let delta = i64::try_from(delta).unwrap_or(i64::MAX);
        let (name, tags) = named(metrics, mogrifiers, &name);
        let mut builder = client.count_with_tags(&name, delta);
        for (k, v) in &tags {
            builder = builder.with_tag(k, v);
        }
        if let Err(e) = builder.try_send() {
            tracing::debug!(error = %e, "statsd send failed");
        }
    }
    let _ = client.flush();
}

/// A counter's name through `mogrifiers` and its tags (`EXTRA_TAGS`, then the mogrifier's),
/// each tag escaped here, where the line is composed: a `,` in a value (legal in an HTTP header,
/// so reachable through Envoy) must not start a tag of its own. (The name's segments were
/// escaped where the stats key was built.)
fn named(
    metrics: &Metrics,
    mogrifiers: &Mogrifiers,
    name: &str,
) -> (String, Vec<(String, String)>) {
    let (name, tags) = mogrifiers.apply(name);
    let tags = metrics
        .extra_tags
        .iter()
        .chain(&tags)
        .map(|(k, v)| {
            let (k, v) = (dogstatsd_tag(k, true), dogstatsd_tag(v, false));
            (k.into_owned(), v.into_owned())
        })
        .collect();
    (name, tags)
}

/// Every counter as the sink writes it, one line each (`name:value|c`, then `|#k:v,…` when
/// there are tags), with its total rather than its increase: what a flush sends, as text, for
/// the fuzz target that parses it back.
pub fn lines(metrics: &Metrics, mogrifiers: &Mogrifiers) -> Vec<String> {
    metrics
        .statsd_counters()
        .into_iter()
        .map(|(name, value)| {
            let (name, tags) = named(metrics, mogrifiers, &name);
            let tags: Vec<String> = tags.iter().map(|(k, v)| format!("{k}:{v}")).collect();
            match tags.is_empty() {
                true => format!("{name}:{value}|c"),
                false => format!("{name}:{value}|c|#{}", tags.join(",")),
            }
        })
        .collect()
}
