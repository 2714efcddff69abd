//! How redis-rs's connections are described from the options: the server's address and
//! credentials, the TLS material in redis-rs's form, and the Sentinel client that names the
//! master (for redis-rs's connection, and for our own pipe, which asks it where to connect).
//!
//! Must not touch: connections once made, commands, what the answers mean.

use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, RedisConnectionInfo, RedisResult};

use super::{RedisOptions, RedisTarget, RedisTlsOptions};

pub(super) fn settings(options: &RedisOptions) -> RedisConnectionInfo {
    let mut info = RedisConnectionInfo::default();
    if let Some(auth) = &options.auth {
        if let Some(user) = &auth.user {
            info = info.set_username(user);
        }
        info = info.set_password(&auth.password);
    }
    info
}

/// redis-rs's form of the TLS material.
pub(super) fn certificates(tls: &RedisTlsOptions) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: tls
            .client
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
        root_cert: tls.root_cert.clone(),
    }
}

/// Verify the server's certificate and name, or (`REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`) not.
pub(super) fn tls_mode(tls: &RedisTlsOptions) -> redis::TlsMode {
    match tls.skip_hostname_verification {
        true => redis::TlsMode::Insecure,
        false => redis::TlsMode::Secure,
    }
}

/// The Sentinel client of a `Sentinel` target, with the sentinels' own credentials.
pub(super) fn sentinel_client(o: &RedisOptions) -> RedisResult<SentinelClient> {
    let RedisTarget::Sentinel {
        master,
        sentinels,
        sentinel_auth,
    } = &o.target
    else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "not a Sentinel target",
        )));
    };
    let mut client = sentinel_builder(o, master, sentinels)?;
    if let Some(auth) = sentinel_auth {
        if let Some(user) = &auth.user {
            client = client.set_client_to_sentinel_username(user);
        }
        client = client.set_client_to_sentinel_password(&auth.password);
    }
    client.build()
}

/// The master the sentinels name now, as the one server our own pipe connects to.
pub(super) async fn sentinels_master(o: &RedisOptions) -> std::io::Result<RedisTarget> {
    let asked = async {
        let mut client = sentinel_client(o)?;
        client.async_get_client().await
    };
    let master = asked.await.map_err(std::io::Error::other)?;
    match master.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            Ok(RedisTarget::Tcp(match host.contains(':') {
                true => format!("[{host}]:{port}"),
                false => format!("{host}:{port}"),
            }))
        }
        ConnectionAddr::Unix(path) => Ok(RedisTarget::Unix(path.display().to_string())),
        other => Err(std::io::Error::other(format!(
            "the sentinels named a master at {other}, an address kind Turnstile does not dial"
        ))),
    }
}

/// A Sentinel client for `master` through `sentinels`, with the master's credentials and, under
/// `REDIS_TLS`, TLS (same certificates) both to the sentinels and to the master they name, as
/// the reference dials both with one TLS configuration.
pub(super) fn sentinel_builder(
    o: &RedisOptions,
    master: &str,
    sentinels: &[String],
) -> RedisResult<SentinelClientBuilder> {
    let addresses = sentinels
        .iter()
        .map(|s| match &o.tls {
            None => tcp(s),
            Some(tls) => host_port(s).map(|(host, port)| ConnectionAddr::TcpTls {
                host,
                port,
                insecure: tls.skip_hostname_verification,
                tls_params: None,
            }),
        })
        .collect::<RedisResult<Vec<_>>>()?;
    let mut builder = SentinelClientBuilder::new(addresses, master, SentinelServerType::Master)?;
    if let Some(auth) = &o.auth {
        if let Some(user) = &auth.user {
            builder = builder.set_client_to_redis_username(user);
        }
        builder = builder.set_client_to_redis_password(&auth.password);
    }
    if let Some(tls) = &o.tls {
        builder = builder
            .set_client_to_sentinel_tls_mode(tls_mode(tls))
            .set_client_to_sentinel_certificates(certificates(tls))
            .set_client_to_redis_tls_mode(tls_mode(tls))
            .set_client_to_redis_certificates(certificates(tls));
    }
    Ok(builder)
}

pub(super) fn tcp(address: &str) -> RedisResult<ConnectionAddr> {
    let (host, port) = host_port(address)?;
    Ok(ConnectionAddr::Tcp(host, port))
}

pub(super) fn host_port(address: &str) -> RedisResult<(String, u16)> {
    let (host, port) = address.rsplit_once(':').ok_or_else(|| {
        redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "expected host:port"))
    })?;
    let port = port.parse().map_err(|_| {
        redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "bad port"))
    })?;
    Ok((host.trim_matches(['[', ']']).to_owned(), port))
}
