//! Shared test support: the real service (`App`, the production wiring) on 127.0.0.1:0 over a
//! counter store the test built and a clock it moves, a client, request builders, real
//! memcached processes on free ports (re-exported from `memcached`), and the peer tools
//! (Python grpcio + xds-protos, grpcurl) installed by `scripts/test.sh`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tonic::transport::Channel;
use turnstile::app::{App, Dependencies, Store};
use turnstile::clock::ManualClock;
use turnstile::config::{LoadOptions, parse_files};
use turnstile::limiter::LimiterSettings;
use turnstile::metrics::Metrics;
use turnstile::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor,
};
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use turnstile::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use turnstile::rls::ResponseSettings;
use turnstile::settings::Settings;
use turnstile::storage::memory::MemoryStore;

pub mod certs;
pub mod envoy;
pub mod lifeline;
pub mod memcached;
pub mod postgres_server;
pub mod process;
pub mod proxy;
pub mod redis_server;
pub mod wait;

/// A fixed, mid-window start time used by most tests (1,000,000 s: HOUR window starts 997,200).
pub const T0: u64 = 1_000_000;

/// Options for a test server.
#[derive(Default, Clone)]
pub struct Options {
    pub limiter: LimiterSettings,
    pub response: ResponseSettings,
    pub merge: bool,
    /// The server's transport options (RLQS settings, request deadline, ...).
    pub server: turnstile::server::ServerOptions,
    /// Environment variables the settings are read from (as the process reads its own), before
    /// the fields above are applied.
    pub env: Vec<(&'static str, &'static str)>,
}

impl From<ResponseSettings> for Options {
    fn from(response: ResponseSettings) -> Self {
        Options {
            response,
            ..Default::default()
        }
    }
}

impl From<LimiterSettings> for Options {
    fn from(limiter: LimiterSettings) -> Self {
        Options {
            limiter,
            ..Default::default()
        }
    }
}

/// A running server.
pub struct TestServer {
    pub addr: SocketAddr,
    pub clock: ManualClock,
    pub client: RateLimitServiceClient<Channel>,
    pub metrics: Arc<Metrics>,
    stop: Option<oneshot::Sender<()>>,
    /// The rule directory, removed on drop.
    dir: PathBuf,
}

impl TestServer {
    /// Calls ShouldRateLimit and expects success.
    pub async fn call(&self, request: RateLimitRequest) -> RateLimitResponse {
        self.client
            .clone()
            .should_rate_limit(request)
            .await
            .expect("ShouldRateLimit")
            .into_inner()
    }

    /// Calls ShouldRateLimit and returns the status on failure.
    pub async fn try_call(
        &self,
        request: RateLimitRequest,
    ) -> Result<RateLimitResponse, tonic::Status> {
        self.client
            .clone()
            .should_rate_limit(request)
            .await
            .map(|r| r.into_inner())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Compiles rule files given as `(name, yaml)`.
pub fn rules(files: &[(&str, &str)], merge: bool) -> turnstile::rules::RuleSet {
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
        .collect();
    parse_files(
        &files,
        LoadOptions {
            ignore_dotfiles: false,
            merge_domains: merge,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("rules do not load:\n{e}"))
    .rules
}

/// Starts the service over `store` whose clock is `clock`, through the production wiring
/// (`App::build_with`: settings, rules read from files, the instrumented limiter, the gRPC,
/// HTTP and debug listeners on loopback, RLQS), with `files` as its rule directory.
pub async fn start_with(
    store: impl Into<Store>,
    clock: ManualClock,
    files: &[(&str, &str)],
    options: Options,
) -> TestServer {
    let dir = std::env::temp_dir().join(unique("turnstile-rules"));
    std::fs::create_dir_all(&dir).expect("rules directory");
    for (name, yaml) in files {
        std::fs::write(dir.join(name), yaml).expect("write a rule file");
    }
    let env = options.env.clone();
    let lookup = move |name: &str| {
        env.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    };
    let mut settings = Settings::from_env(&lookup, Some(dir.clone()))
        .unwrap_or_else(|e| panic!("the test's settings: {e}"));
    settings.grpc_host = "127.0.0.1".into();
    settings.grpc_port = 0;
    settings.http_addr = "127.0.0.1:0".into();
    settings.debug_addr = "127.0.0.1:0".into();
    settings.drain = Duration::ZERO;
    settings.limiter = options.limiter;
    settings.response = options.response;
    settings.merge_domains = options.merge;
    settings.grpc_limits = options.server.limits;
    settings.rlqs = options.server.rlqs;
    let deps = Dependencies {
        clock: Arc::new(clock.clone()),
        store: Some(store.into()),
    };
    let app = App::build_with(settings, deps)
        .await
        .unwrap_or_else(|e| panic!("the service does not build: {e}"));
    let addr = app.addresses().grpc.expect("gRPC over TCP");
    let metrics = Arc::clone(&app.state().metrics);
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let stopped = async move {
            let _ = stopped.await;
        };
        app.run_until(stopped, std::future::ready(()))
            .await
            .expect("serve");
    });
    let client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    TestServer {
        addr,
        clock,
        client,
        metrics,
        stop: Some(stop),
        dir,
    }
}

/// Starts a server on the memory store at [`T0`].
pub async fn start_memory(files: &[(&str, &str)], options: Options) -> TestServer {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::new(100_000, Arc::new(clock.clone()));
    start_with(store, clock, files, options).await
}

/// A client of the service on loopback `port`.
pub async fn connect(port: u16) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::connect(format!("http://127.0.0.1:{port}"))
        .await
        .expect("connect")
}

/// A descriptor from entries.
pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| rate_limit_descriptor::Entry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect(),
        ..Default::default()
    }
}

/// The basic rules' domain `another` with its two descriptors, `key2` and `key3`, both `value`.
pub fn another_pair(value: &str) -> RateLimitRequest {
    req(
        "another",
        vec![desc(&[("key2", value)]), desc(&[("key3", value)])],
    )
}

/// A request for `domain` with descriptors.
pub fn req(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

/// A request with one descriptor.
pub fn req1(domain: &str, entries: &[(&str, &str)]) -> RateLimitRequest {
    req(domain, vec![desc(entries)])
}

/// Waiting on a condition (the one helper, in `wait`).
pub use crate::support::wait::until;

/// A unique string for test isolation on shared memcached.
pub fn unique(tag: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{tag}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Whether a missing peer (memcached, Redis, PostgreSQL, Python, grpcurl, Envoy) may be
/// skipped: only when a developer opts out locally with `TURNSTILE_SKIP_MISSING_PEERS=1`.
/// Everywhere else, CI included, a missing peer fails the test that needs it.
pub fn missing_peers_allowed() -> bool {
    std::env::var("TURNSTILE_SKIP_MISSING_PEERS").is_ok_and(|v| v == "1")
}

/// Reports a missing peer: a failure, or a printed skip when the developer opted out.
pub fn missing(what: &str) {
    assert!(
        missing_peers_allowed(),
        "{what} is required but missing: run ./scripts/test.sh (it installs every peer), or \
         set TURNSTILE_SKIP_MISSING_PEERS=1 to skip the tests that need it"
    );
    eprintln!("SKIPPED: {what} is not installed (TURNSTILE_SKIP_MISSING_PEERS=1)");
}

/// A free loopback port outside the ephemeral range (`ports.rs`): only for peers that cannot
/// bind port 0 and report it (memcached, whose start retries when the port was taken
/// meanwhile, redis-server, and Envoy's bootstrap ports). Turnstile itself always binds port 0.
pub use crate::ports::free_port;

pub use crate::support::memcached::{Memcached, memcached_store, memcached_store_with};

/// The peer virtualenv made by `scripts/test.sh` (`TURNSTILE_PEERS_VENV` or `.venv-peers`).
pub fn peers_venv() -> Option<PathBuf> {
    let dir = std::env::var("TURNSTILE_PEERS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv-peers"));
    dir.join("bin/python").exists().then_some(dir)
}

/// A raw gRPC client on `addr` (any codec: for bytes no generated client would send).
pub async fn raw_grpc(addr: SocketAddr) -> tonic::client::Grpc<Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    grpc
}

/// `message`, whatever its type, sent on `grpc` as a `ShouldRateLimit` request.
pub async fn should_rate_limit_raw<M>(
    grpc: &mut tonic::client::Grpc<Channel>,
    message: M,
) -> Result<turnstile::pb::envoy::service::ratelimit::v3::RateLimitResponse, tonic::Status>
where
    M: prost::Message + Send + Sync + 'static,
{
    use turnstile::pb::envoy::service::ratelimit::v3::RateLimitResponse;
    grpc.ready().await.expect("ready");
    let codec = tonic_prost::ProstCodec::<M, RateLimitResponse>::default();
    grpc.unary(
        tonic::Request::new(message),
        http::uri::PathAndQuery::from_static(
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        ),
        codec,
    )
    .await
    .map(tonic::Response::into_inner)
}
