//! Rules over xDS (`CONFIG_TYPE=GRPC_XDS_SOTW`), as the reference's client takes them: one
//! `AggregatedDiscoveryService/StreamAggregatedResources` stream, state of the world, wildcard
//! subscription to `RateLimitConfig`. Every response is the whole rule set: it is compiled to the
//! side and swapped in whole (ACK with its version), or refused with the reason (NACK: the same
//! nonce, the version in force, `error_detail` naming the resource and the field) while the
//! rules in force keep serving. A response repeating the version in force is ACKed without a
//! reload. The stream is re-made for ever: after a failed connection with exponential backoff
//! (`XDS_CLIENT_BACKOFF_*`), after a stream that was up with
//! `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`; each reconnection sends the version in force,
//! so a control plane that has nothing newer sends nothing new. Responses that arrive faster
//! than rules reload are coalesced (`coalesce`): only the newest is compiled and answered.
//!
//! Must not touch: the decision, storage, listeners.

mod coalesce;
mod connect;
mod convert;
mod reconnect;

pub use connect::{ConnectError, channel};
pub use convert::{TYPE_URL, compile};

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{MetadataKey, MetadataValue};

use crate::config::{ConfigErrors, LoadOptions, Loaded};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::pb::envoy::config::core::v3::{Node, node::UserAgentVersionType};
use crate::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use crate::pb::google::rpc::Status;
use crate::reload::RulesHandle;
use crate::settings::XdsSettings;
use crate::telemetry::LIFECYCLE;
use reconnect::Reconnect;

/// The xDS client and what it updates.
#[derive(Debug)]
pub struct XdsSource {
    /// Where and how to connect.
    pub settings: XdsSettings,
    /// How resources are combined (`MERGE_DOMAIN_CONFIG`, the store's bounds).
    pub options: LoadOptions,
    /// The live rules.
    pub handle: Arc<RulesHandle>,
    /// Config loads and the source's state.
    pub metrics: Arc<Metrics>,
    /// Learns that a configuration is loaded.
    pub health: Arc<Health>,
}

/// How a stream ended.
#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("the xDS stream failed: {0}")]
    Stream(#[from] tonic::Status),
    #[error("the xDS server closed the stream")]
    Closed,
}

/// The version in force, kept across reconnections.
#[derive(Debug, Default)]
struct Accepted {
    version: String,
    first: Option<oneshot::Sender<()>>,
}

impl XdsSource {
    /// Subscribes until the task is dropped; `first` is told when the first rules are in force.
    pub async fn run(self, first: Option<oneshot::Sender<()>>) {
        self.metrics.source.set_xds();
        let mut accepted = Accepted {
            version: String::new(),
            first,
        };
        let mut reconnect = Reconnect::new(self.settings.backoff);
        loop {
            let ended = self.stream(&mut accepted, &mut reconnect).await;
            self.metrics.source.set_connected(false);
            let pause = match &ended {
                Ended::Connect(_) => reconnect.after_failed_connection(),
                Ended::Stream(_) | Ended::Closed => reconnect.after_stream(),
            };
            tracing::warn!(
                server = %self.settings.server,
                error = %ended,
                ?pause,
                "xDS: no stream; the rules in force keep serving, retrying"
            );
            tokio::time::sleep(pause).await;
        }
    }

    /// One connection and stream, until it ends.
    async fn stream(&self, accepted: &mut Accepted, reconnect: &mut Reconnect) -> Ended {
        let channel = match channel(&self.settings).await {
            Ok(channel) => channel,
            Err(e) => return e.into(),
        };
        let mut client = AggregatedDiscoveryServiceClient::new(channel)
            .max_decoding_message_size(self.settings.max_message_bytes)
            .max_encoding_message_size(self.settings.max_message_bytes);
        let (tx, rx) = mpsc::channel(4);
        let subscribe = self.request(&accepted.version, String::new(), None);
        if tx.send(subscribe).await.is_err() {
            return Ended::Closed;
        }
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        for (key, value) in &self.settings.headers {
            if let (Ok(key), Ok(value)) = (
                MetadataKey::from_bytes(key.as_bytes()),
                MetadataValue::try_from(value.as_str()),
            ) {
                request.metadata_mut().insert(key, value);
            }
        }
        let mut responses = match client.stream_aggregated_resources(request).await {
            Ok(responses) => responses.into_inner(),
            Err(status) => return status.into(),
        };
        self.metrics.source.set_connected(true);
        reconnect.connected();
        tracing::info!(target: LIFECYCLE, server = %self.settings.server, node = %self.settings.node_id, "xDS: subscribed to rate limit configurations");
        let mut ready_at = tokio::time::Instant::now();
        loop {
            let response = match responses.message().await {
                Ok(Some(response)) => response,
                Ok(None) => return Ended::Closed,
                Err(status) => return status.into(),
            };
            let response = match coalesce::newest(&mut responses, response, ready_at).await {
                Ok((response, 0)) => response,
                Ok((response, superseded)) => {
                    tracing::debug!(superseded, version = %response.version_info, "xDS: pushes superseded before they were compiled");
                    self.metrics.source.superseded(superseded);
                    response
                }
                Err(None) => return Ended::Closed,
                Err(Some(status)) => return status.into(),
            };
            let reply = self.on_response(response, accepted).await;
            ready_at = tokio::time::Instant::now() + coalesce::MIN_RELOAD_INTERVAL;
            if tx.send(reply).await.is_err() {
                return Ended::Closed;
            }
        }
    }

    /// Applies or refuses one response; returns its ACK or NACK.
    async fn on_response(
        &self,
        response: DiscoveryResponse,
        accepted: &mut Accepted,
    ) -> DiscoveryRequest {
        if response.type_url != TYPE_URL {
            let why = format!(
                "Turnstile subscribes to {TYPE_URL} only, not {:?}",
                response.type_url
            );
            return self.nack(accepted, response.nonce, why);
        }
        if response.version_info == accepted.version && self.handle.load().is_some() {
            tracing::debug!(version = %response.version_info, "xDS: version in force sent again; nothing to do");
            return self.request(&accepted.version, response.nonce, None);
        }
        match self.compile(response.resources).await {
            Ok(loaded) => {
                crate::reload::announce(&loaded, &self.health);
                self.handle.store(loaded.rules);
                self.metrics.config_loaded(true);
                self.metrics.source.accepted(&response.version_info);
                self.health.set_config_loaded();
                tracing::info!(target: LIFECYCLE, version = %response.version_info, "xDS: rate limit configuration in force");
                accepted.version = response.version_info;
                if let Some(first) = accepted.first.take() {
                    let _ = first.send(());
                }
                self.request(&accepted.version, response.nonce, None)
            }
            Err(errors) => {
                let why = format!(
                    "version {:?} refused, version {:?} stays in force:\n{errors}",
                    response.version_info, accepted.version
                );
                self.nack(accepted, response.nonce, why)
            }
        }
    }

    fn nack(&self, accepted: &Accepted, nonce: String, why: String) -> DiscoveryRequest {
        tracing::error!("xDS: rate limit configuration NACKed: {why}");
        if self.handle.load().is_none() {
            // Nothing in force yet: `/healthcheck` says why rather than "not arrived".
            let first = why.lines().take(2).collect::<Vec<_>>().join(" ");
            self.health.set_rules_refused(Some(first));
        }
        self.metrics.config_loaded(false);
        self.metrics.source.nacked();
        let detail = Status {
            code: tonic::Code::InvalidArgument as i32,
            message: why,
            details: Vec::new(),
        };
        self.request(&accepted.version, nonce, Some(detail))
    }

    /// Compiles on a blocking thread (large rule sets take a while).
    async fn compile(&self, resources: Vec<prost_types::Any>) -> Result<Loaded, ConfigErrors> {
        let options = self.options;
        tokio::task::spawn_blocking(move || compile(&resources, options))
            .await
            .unwrap_or_else(|e| {
                Err(ConfigErrors(vec![crate::config::ConfigError {
                    origin: "xDS response".into(),
                    line: 0,
                    column: 0,
                    path: String::new(),
                    message: format!("the loader failed unexpectedly: {e}"),
                }]))
            })
    }

    /// A request: the subscription, or the ACK (no `error`) / NACK of `nonce`.
    fn request(&self, version: &str, nonce: String, error: Option<Status>) -> DiscoveryRequest {
        DiscoveryRequest {
            version_info: version.to_owned(),
            node: Some(self.node()),
            resource_names: Vec::new(),
            type_url: TYPE_URL.to_owned(),
            response_nonce: nonce,
            error_detail: error,
        }
    }

    fn node(&self) -> Node {
        let fields = self
            .settings
            .node_metadata
            .iter()
            .map(|(k, v)| {
                let value = prost_types::Value {
                    kind: Some(prost_types::value::Kind::StringValue(v.clone())),
                };
                (k.clone(), value)
            })
            .collect();
        Node {
            id: self.settings.node_id.clone(),
            cluster: String::new(),
            metadata: Some(prost_types::Struct { fields }),
            user_agent_name: "turnstile".into(),
            user_agent_version_type: Some(UserAgentVersionType::UserAgentVersion(
                env!("CARGO_PKG_VERSION").into(),
            )),
            client_features: Vec::new(),
        }
    }
}
