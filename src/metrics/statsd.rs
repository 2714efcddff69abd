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
        let (name, tags) = mogrifiers.apply(&name);
        let mut builder = client.count_with_tags(&name, delta);
        for (k, v) in metrics.extra_tags.iter().chain(&tags) {
            builder = builder.with_tag(k, v);
        }
        if let Err(e) = builder.try_send() {
            tracing::debug!(error = %e, "statsd send failed");
        }
    }
    let _ = client.flush();
}
