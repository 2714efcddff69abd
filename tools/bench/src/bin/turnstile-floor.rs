//! The benchmark floor: a tonic server on the same stack as Turnstile that answers every
//! `ShouldRateLimit` with a constant OK response, doing no work. What it serves per second on a
//! core is the most any tonic rate-limit service can serve there.
//!
//! Usage: `[FLOOR_RUNTIME=default] turnstile-floor [ADDR]` (default `127.0.0.1:18081`); it runs
//! on Turnstile's runtime unless `FLOOR_RUNTIME=default` asks for Tokio's default one.

use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use turnstile::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

#[derive(Debug, Default)]
struct Floor;

#[tonic::async_trait]
impl RateLimitService for Floor {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let statuses = request
            .into_inner()
            .descriptors
            .iter()
            .map(|_| DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            })
            .collect();
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses,
            ..Default::default()
        }))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:18081".into())
        .parse()?;
    // Turnstile's own runtime (LIFO slot off), so the floor is the same stack; with
    // FLOOR_RUNTIME=default, Tokio's default runtime (the floor issue 20 was measured against).
    let runtime = if std::env::var("FLOOR_RUNTIME").is_ok_and(|r| r == "default") {
        tokio::runtime::Runtime::new()?
    } else {
        turnstile::app::runtime::build()?
    };
    runtime.block_on(async move {
        tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .add_service(RateLimitServiceServer::new(Floor))
            .serve(addr)
            .await
    })?;
    Ok(())
}
