//! An RLQS load generator: many streams (one per simulated Envoy) over a few connections, each
//! reporting every one of its buckets every interval, at a random phase. Prints one JSON line:
//! streams open, buckets, reports/s, report→response latency percentiles (µs), the
//! assignments seen, responses pushed without a report (a window's end), reports left
//! unanswered (the server could not count them), and errors.
//!
//! Usage: `turnstile-rlqs-load [--addr HOST:PORT] [--streams N] [--buckets N]
//! [--interval SECS] [--duration SECS] [--connections N] [--domain D] [--key K]`
//! Bucket ids are `{K: s<stream>b<bucket>}` (a bucket per stream and index).

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use turnstile::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use turnstile::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use turnstile::pb::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaUsageReports};

#[derive(Debug, Clone)]
struct Args {
    addr: String,
    streams: usize,
    buckets: usize,
    interval: f64,
    duration: f64,
    connections: usize,
    domain: String,
    key: String,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        addr: "127.0.0.1:8081".into(),
        streams: 2_000,
        buckets: 20,
        interval: 5.0,
        duration: 30.0,
        connections: 0,
        domain: "rl".into(),
        key: "foo".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = || format!("bad value for {flag}: {value}");
        match flag.as_str() {
            "--addr" => a.addr = value.clone(),
            "--streams" => a.streams = value.parse().map_err(|_| bad())?,
            "--buckets" => a.buckets = value.parse().map_err(|_| bad())?,
            "--interval" => a.interval = value.parse().map_err(|_| bad())?,
            "--duration" => a.duration = value.parse().map_err(|_| bad())?,
            "--connections" => a.connections = value.parse().map_err(|_| bad())?,
            "--domain" => a.domain = value.clone(),
            "--key" => a.key = value.clone(),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.connections == 0 {
        a.connections = a.streams.div_ceil(100).max(1);
    }
    Ok(a)
}

/// What every stream records.
#[derive(Debug, Default)]
struct Tally {
    latencies_us: Vec<u64>,
    actions: u64,
    /// Responses that answered no report (pushed when a window ended).
    pushed: u64,
    /// Reports that got no response before the next one was due.
    unanswered: u64,
    errors: u64,
}

fn report(args: &Args, stream: usize, allowed: u64) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: args.domain.clone(),
        bucket_quota_usages: (0..args.buckets)
            .map(|b| BucketQuotaUsage {
                bucket_id: Some(BucketId {
                    bucket: [(args.key.clone(), format!("s{stream}b{b}"))].into(),
                }),
                time_elapsed: Some(prost_types_duration(args.interval)),
                num_requests_allowed: allowed,
                num_requests_denied: allowed / 10,
            })
            .collect(),
    }
}

fn prost_types_duration(secs: f64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: secs as i64,
        nanos: 0,
    }
}

/// One simulated Envoy: a stream, a report of every bucket every interval until `end`.
async fn envoy(
    args: Arc<Args>,
    channel: Channel,
    stream: usize,
    end: Instant,
    tally: Arc<Mutex<Tally>>,
) {
    let mut client = RateLimitQuotaServiceClient::new(channel);
    let (tx, rx) = mpsc::channel(2);
    let Ok(response) = client
        .stream_rate_limit_quotas(ReceiverStream::new(rx))
        .await
    else {
        tally.lock().map(|mut t| t.errors += 1).ok();
        return;
    };
    let mut inbound = response.into_inner();
    let interval = Duration::from_secs_f64(args.interval);
    // Spread the streams' reports over the interval.
    let phase = interval.mul_f64((stream % 997) as f64 / 997.0);
    tokio::time::sleep(phase).await;
    let mut next = Instant::now();
    // When the last report went out, until its response comes.
    let mut waiting: Option<Instant> = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next.into()) => {
                if waiting.take().is_some() {
                    tally.lock().map(|mut t| t.unanswered += 1).ok();
                }
                if Instant::now() >= end {
                    return;
                }
                if tx.send(report(&args, stream, 40)).await.is_err() {
                    tally.lock().map(|mut t| t.errors += 1).ok();
                    return;
                }
                waiting = Some(Instant::now());
                next += interval;
            }
            answer = inbound.message() => {
                let Ok(Some(answer)) = answer else {
                    tally.lock().map(|mut t| t.errors += 1).ok();
                    return;
                };
                if let Ok(mut t) = tally.lock() {
                    t.actions += answer.bucket_action.len() as u64;
                    match waiting.take() {
                        Some(sent) => t.latencies_us.push(sent.elapsed().as_micros() as u64),
                        None => t.pushed += 1,
                    }
                }
            }
        }
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), String> {
    let args = Arc::new(parse()?);
    let endpoint =
        Endpoint::from_shared(format!("http://{}", args.addr)).map_err(|e| e.to_string())?;
    let mut channels = Vec::new();
    for _ in 0..args.connections {
        channels.push(endpoint.connect().await.map_err(|e| e.to_string())?);
    }
    let tally = Arc::new(Mutex::new(Tally::default()));
    let started = Instant::now();
    let end = started + Duration::from_secs_f64(args.duration);
    let tasks: Vec<_> = (0..args.streams)
        .map(|s| {
            let channel = channels[s % channels.len()].clone();
            tokio::spawn(envoy(
                Arc::clone(&args),
                channel,
                s,
                end,
                Arc::clone(&tally),
            ))
        })
        .collect();
    for task in tasks {
        task.await.map_err(|e| e.to_string())?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let mut tally = tally.lock().map_err(|e| e.to_string())?;
    tally.latencies_us.sort_unstable();
    let reports = tally.latencies_us.len() as f64;
    println!(
        "{{\"streams\":{},\"buckets_per_stream\":{},\"reports\":{},\"reports_per_s\":{:.0},\"buckets_per_s\":{:.0},\"p50_us\":{},\"p99_us\":{},\"p999_us\":{},\"actions\":{},\"pushed\":{},\"unanswered\":{},\"errors\":{},\"seconds\":{:.1}}}",
        args.streams,
        args.buckets,
        reports,
        reports / seconds,
        reports * args.buckets as f64 / seconds,
        percentile(&tally.latencies_us, 0.5),
        percentile(&tally.latencies_us, 0.99),
        percentile(&tally.latencies_us, 0.999),
        tally.actions,
        tally.pushed,
        tally.unanswered,
        tally.errors,
        seconds
    );
    Ok(())
}
