//! The environment Envoy Gateway's rate-limit Deployment sets, taken as it is: Turnstile started
//! with exactly those variables (only paths and ports made local), rules pushed over xDS by a
//! control plane that speaks TLS 1.3 only and requires the client certificate (the one
//! certificate Envoy Gateway mounts serves both sides), counting in a real redis-server
//! (`BACKEND_TYPE` unset, as Envoy Gateway leaves it), behind a real Envoy that calls it over
//! TLS: the 4th request of a user is 429, and the Prometheus port serves the series Envoy
//! Gateway's mapping names.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls;
use turnstile::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};

use crate::process::{Process, http_get, metric, temp_dir};
use crate::support::certs::{Usage, ca, leaf_with};
use crate::support::envoy::envoy;
use crate::support::envoy::{Envoy, request, wait_for};
use crate::support::free_port;
use crate::support::redis_server::{RedisProcess, cli};
use crate::xds::server::{AdsServer, Shared};
use crate::xds::version_in_force;

/// The route's descriptor as Envoy Gateway writes it: the route's own key and value, then the
/// header's key, limited to 3 per minute.
const ROUTE: &str = "httproute/default/backend/rule/0/match/0/*";

fn rules() -> RateLimitConfig {
    RateLimitConfig {
        name: "default/eg/http".into(),
        domain: "default/eg/http".into(),
        descriptors: vec![RateLimitDescriptor {
            key: ROUTE.into(),
            value: ROUTE.into(),
            descriptors: vec![RateLimitDescriptor {
                key: "x-user-id".into(),
                rate_limit: Some(RateLimitPolicy {
                    unit: RateLimitUnit::Minute as i32,
                    requests_per_unit: 3,
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Envoy Gateway's certificates: its CA (`ca.crt`), the one certificate its rate-limit pods
/// mount (`tls.crt`, server and client), and the control plane's.
fn certificates() -> PathBuf {
    let dir = temp_dir("eg-certs");
    ca(&dir, "eg");
    let service = "envoy-ratelimit.envoy-gateway-system.svc.cluster.local";
    let both = [Usage::Server, Usage::Client];
    leaf_with(&dir, "eg", "tls", &[service, "127.0.0.1"], &both);
    let control_plane = ["envoy-gateway", "127.0.0.1"];
    leaf_with(
        &dir,
        "eg",
        "control-plane",
        &control_plane,
        &[Usage::Server],
    );
    std::fs::rename(dir.join("tls.pem"), dir.join("tls.crt")).expect("tls.crt");
    std::fs::copy(dir.join("eg-ca.pem"), dir.join("ca.crt")).expect("ca.crt");
    dir
}

/// The control plane's TLS: 1.3 only, a client certificate from Envoy Gateway's CA required.
fn control_plane_tls(dir: &Path) -> Arc<rustls::ServerConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(dir.join("ca.crt")).expect("ca") {
        roots.add(cert.expect("ca cert")).expect("root");
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::clone(&provider),
    )
    .build()
    .expect("client verifier");
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(dir.join("control-plane.pem"))
            .expect("cert")
            .collect::<Result<_, _>>()
            .expect("certs");
    let key = PrivateKeyDer::from_pem_file(dir.join("control-plane.key")).expect("key");
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .expect("server certificate");
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

fn start_proxy(binary: &Path, grpc: u16, listener: u16, admin: u16, ca: &Path) -> Envoy {
    let template = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/envoy-gateway-proxy.yaml"),
    )
    .expect("proxy config");
    let text = template
        .replace("ADMIN_PORT", &admin.to_string())
        .replace("LISTENER_PORT", &listener.to_string())
        .replace("BACKEND_PORT", &free_port().to_string())
        .replace("GRPC_PORT", &grpc.to_string())
        .replace("CA_FILE", &ca.display().to_string());
    let config = temp_dir("eg-envoy").join("envoy.yaml");
    std::fs::write(&config, text).expect("write");
    Envoy::spawn(binary, &config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gateways_deployment_environment_behind_a_real_envoy() {
    let Some(binary) = envoy() else { return };
    let Some(redis) = RedisProcess::start() else {
        return;
    };
    let certs = certificates();
    let shared = Shared::default();
    shared.set("1", vec![rules()]);
    let ads = AdsServer::start(
        crate::xds::loopback(),
        shared.clone(),
        Some(control_plane_tls(&certs)),
    );

    let (xds_url, redis_url) = (ads.addr.to_string(), redis.addr());
    let env = EnvoyGatewayEnv::new(&certs, &xds_url, &redis_url);
    let env = env.vars();
    let root = PathBuf::from("/data");
    let turnstile = Process::start(&root, &env);
    crate::support::until(
        std::time::Duration::from_secs(10),
        "the rules arrive over mTLS",
        || version_in_force(&turnstile).as_deref() == Some("1"),
    )
    .await;
    let seen = shared.seen();
    assert_eq!(seen[0].node_id, "envoy-ratelimit");

    let (listener, admin) = (free_port(), free_port());
    let grpc = turnstile.grpc;
    let ca_path = certs.join("ca.crt");
    let statuses = tokio::task::spawn_blocking(move || {
        let _envoy = start_proxy(&binary, grpc, listener, admin, &ca_path);
        wait_for("Envoy ready", || {
            http_get(admin, "/ready").map(|r| r.0) == Some(200)
        });
        (0..5)
            .map(|_| request(listener, "/", &[("x-user-id", "alice")]).0)
            .collect::<Vec<u16>>()
    })
    .await
    .expect("Envoy ran");
    assert_eq!(statuses, vec![200, 200, 200, 429, 429]);

    counted_in_redis_and_named_as_its_dashboards_query(&redis, &turnstile);
    drop(ads);
}

/// The files and addresses of Envoy Gateway's deployment environment, here.
struct EnvoyGatewayEnv {
    crt: String,
    key: String,
    ca_crt: String,
    mapping: String,
    xds_url: String,
    redis_url: String,
}

impl EnvoyGatewayEnv {
    fn new(certs: &std::path::Path, xds_url: &str, redis_url: &str) -> Self {
        let file = |name: &str| certs.join(name).display().to_string();
        EnvoyGatewayEnv {
            crt: file("tls.crt"),
            key: file("tls.key"),
            ca_crt: file("ca.crt"),
            mapping: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/envoy-gateway-statsd-mapping.yaml")
                .display()
                .to_string(),
            xds_url: xds_url.to_owned(),
            redis_url: redis_url.to_owned(),
        }
    }

    /// Envoy Gateway's variables, in its order; only the paths and addresses are local, and
    /// the Prometheus port is any free one (`:0`) instead of `:19001`.
    fn vars(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_IGNOREDOTFILES", "true"),
            ("RUNTIME_WATCH_ROOT", "false"),
            ("LOG_LEVEL", "info"),
            ("USE_STATSD", "false"),
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", &self.xds_url),
            ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", &self.crt),
            ("GRPC_SERVER_TLS_KEY", &self.key),
            ("GRPC_SERVER_TLS_CA_CERT", &self.ca_crt),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", &self.crt),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", &self.key),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", &self.ca_crt),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_ADDR", ":0"),
            ("PROMETHEUS_MAPPER_YAML", &self.mapping),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &self.redis_url),
            ("TRACING_ENABLED", "true"),
            ("TRACING_SERVICE_NAME", "envoy-ratelimit"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
        ]
    }
}

/// The five calls are counted in Redis and named on the Prometheus port as Envoy Gateway's
/// dashboards query them (5 hits, 2 over the limit).
fn counted_in_redis_and_named_as_its_dashboards_query(redis: &RedisProcess, turnstile: &Process) {
    let keys = cli(redis.port, &["DBSIZE"]).expect("redis-cli");
    assert_ne!(keys.trim(), "0", "counted in Redis");
    let (_, text) = http_get(turnstile.prometheus, "/metrics").expect("Prometheus port");
    let key1 = format!("{ROUTE}_{ROUTE}");
    let series = |name: &str| {
        format!("{name}{{domain=\"default/eg/http\",key1=\"{key1}\",key2=\"x-user-id\"}}")
    };
    assert_eq!(
        metric(&text, &series("ratelimit_service_rate_limit_total_hits")),
        Some(5),
        "{text}"
    );
    assert_eq!(
        metric(&text, &series("ratelimit_service_rate_limit_over_limit")),
        Some(2),
        "{text}"
    );
}
