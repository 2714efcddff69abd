//! A gRPC load generator for `ShouldRateLimit` (tonic client). Prints one JSON line: requests/s,
//! latency percentiles (µs), and OK / OVER_LIMIT / error counts (all errors, and of them
//! `RESOURCE_EXHAUSTED` and `UNAVAILABLE`).
//!
//! Usage: `turnstile-loadgen [--addr HOST:PORT] [--connections N] [--concurrency N]
//! [--duration SECS] [--descriptors N] [--keys N] [--hot-share F] [--hits-addend N]
//! [--domain D] [--key K] [--rate RPS] [--unique] [--bind IP]`
//! `--keys` is the key cardinality (values `v0…v{N-1}`, random), `--hot-share` the fraction of
//! descriptors that use the single value `hot`, `--rate` caps the total request rate (0 = as fast
//! as possible), `--unique` sends every value once (for memory-footprint runs),
//! `--spin` paces by spinning on the runtime thread (best latency when the core is free),
//! `--requests N` stops after N requests, `--timeout-ms N` sends each call with that deadline
//! (`grpc-timeout`, as Envoy does), `--dump-body FILE` writes one gRPC-framed request
//! for h2load's `--data` and exits, `--bind IP` connects from that local address (any of
//! 127/8 on loopback: a distinct peer for the server's fairness), `--peers` with it: connection
//! `i` from that address plus `i` (each connection a peer of its own; the JSON line then also
//! has the worst worker's p99, `worst_p99_us`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tonic::transport::{Channel, Endpoint};
use turnstile::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use turnstile::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

#[derive(Debug, Clone)]
struct Args {
    addr: String,
    connections: usize,
    concurrency: usize,
    duration: f64,
    descriptors: usize,
    keys: u64,
    hot_share: f64,
    hits_addend: u32,
    domain: String,
    key: String,
    rate: f64,
    unique: bool,
    spin: bool,
    dump_body: Option<String>,
    requests: u64,
    timeout_ms: u64,
    bind: Option<std::net::IpAddr>,
    peers: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        addr: "127.0.0.1:8081".into(),
        connections: 4,
        concurrency: 64,
        duration: 10.0,
        descriptors: 1,
        keys: 100_000,
        hot_share: 0.0,
        hits_addend: 0,
        domain: "bench".into(),
        key: "user".into(),
        rate: 0.0,
        unique: false,
        spin: false,
        dump_body: None,
        requests: u64::MAX,
        timeout_ms: 0,
        bind: None,
        peers: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--unique" {
            a.unique = true;
            continue;
        }
        if flag == "--peers" {
            a.peers = true;
            continue;
        }
        if flag == "--spin" {
            a.spin = true;
            continue;
        }
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |_: String| format!("bad value for {flag}: {value}");
        match flag.as_str() {
            "--addr" => a.addr = value.clone(),
            "--connections" => a.connections = value.parse().map_err(|e: _| bad(format!("{e}")))?,
            "--concurrency" => a.concurrency = value.parse().map_err(|e: _| bad(format!("{e}")))?,
            "--duration" => a.duration = value.parse().map_err(|e: _| bad(format!("{e}")))?,
            "--descriptors" => a.descriptors = value.parse().map_err(|e: _| bad(format!("{e}")))?,
            "--keys" => a.keys = value.parse().map_err(|e: _| bad(format!("{e}")))?,
            "--hot-share" => a.hot_share = value.parse().map_err(|e: _| bad(format!("{e}")))?,
            "--hits-addend" => a.hits_addend = value.parse().map_err(|e: _| bad(format!("{e}")))?,
            "--domain" => a.domain = value.clone(),
            "--key" => a.key = value.clone(),
            "--dump-body" => a.dump_body = Some(value.clone()),
            "--requests" => a.requests = value.parse().map_err(|e: _| bad(format!("{e}")))?,
            "--timeout-ms" => a.timeout_ms = value.parse().map_err(|e: _| bad(format!("{e}")))?,
            "--bind" => a.bind = Some(value.parse().map_err(|e: _| bad(format!("{e}")))?),
            "--rate" => a.rate = value.parse().map_err(|e: _| bad(format!("{e}")))?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(a)
}

/// xorshift64*: fast, good enough to pick keys.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    over: AtomicU64,
    errors: AtomicU64,
    /// Of the errors: refused as Turnstile's overload, and blamed on the store.
    resource_exhausted: AtomicU64,
    unavailable: AtomicU64,
    unique: AtomicU64,
    issued: AtomicU64,
}

/// Paced-load permits: a plain thread sleeps to each send instant (nanosleep resolution, tens of
/// microseconds; Tokio's timer has milliseconds, which would send paced requests in bursts) and
/// hands out one permit per request.
type Permits = Option<Arc<tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<()>>>>;

fn pacer(rate: f64, end: Instant, spin: bool) -> Permits {
    if rate <= 0.0 || spin {
        return None;
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let interval = Duration::from_secs_f64(1.0 / rate);
        let mut next = Instant::now();
        while next < end {
            next += interval;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            if tx.send(()).is_err() {
                return;
            }
        }
    });
    Some(Arc::new(tokio::sync::Mutex::new(rx)))
}

/// How a worker paces its requests (nothing set: as fast as possible).
struct Pacing {
    permits: Permits,
    spin_interval: Option<Duration>,
    /// Where in the interval this worker's slots fall (0..1), so spinning workers are staggered.
    phase: f64,
}

/// One request: `--descriptors` descriptors on `--key` (numbered after the first), each value
/// unique (`--unique`), the hot one (`--hot-share` of the time) or one of `--keys`.
fn build_request(args: &Args, counts: &Counts, rng: &mut Rng) -> RateLimitRequest {
    let descriptors = (0..args.descriptors)
        .map(|d| {
            let value = if args.unique {
                format!("u{}", counts.unique.fetch_add(1, Ordering::Relaxed))
            } else if rng.unit() < args.hot_share {
                "hot".to_owned()
            } else {
                format!("v{}", rng.next() % args.keys.max(1))
            };
            let key = if d == 0 {
                args.key.clone()
            } else {
                format!("{}{d}", args.key)
            };
            RateLimitDescriptor {
                entries: vec![Entry { key, value }],
                ..Default::default()
            }
        })
        .collect();
    RateLimitRequest {
        domain: args.domain.clone(),
        descriptors,
        hits_addend: args.hits_addend,
    }
}

async fn worker(
    mut client: RateLimitServiceClient<Channel>,
    args: Arc<Args>,
    counts: Arc<Counts>,
    seed: u64,
    end: Instant,
    pacing: Pacing,
) -> Vec<u32> {
    let Pacing {
        permits,
        spin_interval,
        phase,
    } = pacing;
    let mut rng = Rng(seed | 1);
    let mut next = Instant::now() + spin_interval.map_or(Duration::ZERO, |i| i.mul_f64(phase));
    let mut latencies = Vec::with_capacity(100_000);
    while Instant::now() < end && counts.issued.fetch_add(1, Ordering::Relaxed) < args.requests {
        if let Some(permits) = &permits
            && permits.lock().await.recv().await.is_none()
        {
            break;
        }
        if let Some(interval) = spin_interval {
            // `--spin`: keep the runtime thread busy (it never parks, so answers are picked up
            // at once) and start each request at its exact instant.
            next += interval;
            while Instant::now() < next {
                tokio::task::yield_now().await;
            }
        }
        let request = build_request(&args, &counts, &mut rng);
        let started = Instant::now();
        let mut request = tonic::Request::new(request);
        if args.timeout_ms > 0 {
            // Sent as `grpc-timeout`, as Envoy sends its `timeout` (20 ms by default).
            request.set_timeout(Duration::from_millis(args.timeout_ms));
        }
        let result = client.should_rate_limit(request).await;
        latencies.push(u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX));
        match result {
            Ok(r) if r.get_ref().overall_code() == Code::OverLimit => {
                counts.over.fetch_add(1, Ordering::Relaxed)
            }
            Ok(_) => counts.ok.fetch_add(1, Ordering::Relaxed),
            Err(status) => {
                match status.code() {
                    tonic::Code::ResourceExhausted => {
                        counts.resource_exhausted.fetch_add(1, Ordering::Relaxed)
                    }
                    tonic::Code::Unavailable => counts.unavailable.fetch_add(1, Ordering::Relaxed),
                    _ => 0,
                };
                counts.errors.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
    latencies
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Writes one gRPC-framed request (value `v1` for every descriptor) for h2load's `--data`.
fn dump_body(args: &Args, path: &str) -> std::io::Result<()> {
    use prost::Message;
    let descriptors = (0..args.descriptors)
        .map(|d| {
            let key = if d == 0 {
                args.key.clone()
            } else {
                format!("{}{d}", args.key)
            };
            RateLimitDescriptor {
                entries: vec![Entry {
                    key,
                    value: "v1".into(),
                }],
                ..Default::default()
            }
        })
        .collect();
    let message = RateLimitRequest {
        domain: args.domain.clone(),
        descriptors,
        hits_addend: args.hits_addend,
    }
    .encode_to_vec();
    let mut framed = vec![0u8];
    framed.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    framed.extend_from_slice(&message);
    std::fs::write(path, framed)
}

/// Connections from `local` (port chosen by the kernel) to the endpoint's address.
fn bound_connector(
    local: std::net::IpAddr,
) -> impl tower::Service<
    tonic::codegen::http::Uri,
    Response = hyper_util::rt::TokioIo<tokio::net::TcpStream>,
    Error = std::io::Error,
    Future = impl Send,
> + Clone {
    tower::service_fn(move |uri: tonic::codegen::http::Uri| async move {
        let host = uri.host().unwrap_or("127.0.0.1").trim_matches(['[', ']']);
        let port = uri.port_u16().unwrap_or(80);
        let remote: std::net::SocketAddr = format!("{host}:{port}")
            .parse()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{e}")))?;
        let socket = match local {
            std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.bind(std::net::SocketAddr::new(local, 0))?;
        let stream = socket.connect(remote).await?;
        stream.set_nodelay(true)?;
        Ok(hyper_util::rt::TokioIo::new(stream))
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Arc::new(parse()?);
    if let Some(path) = &args.dump_body {
        dump_body(&args, path)?;
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut channels = Vec::new();
        for i in 0..args.connections.max(1) {
            let endpoint = Endpoint::from_shared(format!("http://{}", args.addr))?.tcp_nodelay(true);
            let local = match (args.bind, args.peers) {
                (Some(std::net::IpAddr::V4(base)), true) => {
                    let n = u32::from(base).wrapping_add(u32::try_from(i)?);
                    Some(std::net::IpAddr::V4(n.into()))
                }
                (bind, _) => bind,
            };
            channels.push(match local {
                None => endpoint.connect().await?,
                Some(local) => endpoint.connect_with_connector(bound_connector(local)).await?,
            });
        }
        let counts = Arc::new(Counts::default());
        let started = Instant::now();
        let end = started + Duration::from_secs_f64(args.duration);
        let permits = pacer(args.rate, end, args.spin);
        let spin_interval = (args.spin && args.rate > 0.0).then(|| Duration::from_secs_f64(args.concurrency as f64 / args.rate));
        let mut tasks = Vec::new();
        for i in 0..args.concurrency.max(1) {
            let client = RateLimitServiceClient::new(channels[i % channels.len()].clone());
            tasks.push(tokio::spawn(worker(client, Arc::clone(&args), Arc::clone(&counts), 0x9E37_79B9 * (i as u64 + 1), end, Pacing { permits: permits.clone(), spin_interval, phase: i as f64 / args.concurrency.max(1) as f64 })));
        }
        let mut all = Vec::new();
        let mut worst_p99 = 0;
        for task in tasks {
            let mut mine = task.await?;
            mine.sort_unstable();
            worst_p99 = worst_p99.max(percentile(&mine, 0.99));
            all.extend(mine);
        }
        let elapsed = started.elapsed().as_secs_f64();
        all.sort_unstable();
        let done = all.len() as f64;
        println!(
            "{{\"rps\":{:.0},\"p50_us\":{},\"p90_us\":{},\"p99_us\":{},\"p999_us\":{},\"ok\":{},\"over_limit\":{},\"errors\":{},\"resource_exhausted\":{},\"unavailable\":{},\"requests\":{},\"seconds\":{:.2},\"descriptors\":{},\"concurrency\":{},\"connections\":{},\"worst_p99_us\":{}}}",
            done / elapsed,
            percentile(&all, 0.5),
            percentile(&all, 0.9),
            percentile(&all, 0.99),
            percentile(&all, 0.999),
            counts.ok.load(Ordering::Relaxed),
            counts.over.load(Ordering::Relaxed),
            counts.errors.load(Ordering::Relaxed),
            counts.resource_exhausted.load(Ordering::Relaxed),
            counts.unavailable.load(Ordering::Relaxed),
            all.len(),
            elapsed,
            args.descriptors,
            args.concurrency,
            args.connections,
            worst_p99,
        );
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}
