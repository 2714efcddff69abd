//! Under mTLS a peer is its client certificate, not its address (issue 39): one certificate
//! over connections from two addresses is one peer, two certificates from one address are two.
//! Seen through `GRPC_MAX_CONNECTIONS_PER_PEER=1`: a second connection of the same peer closes
//! the first (`peer_cap`), one of another peer does not.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{PrivateKeyDer, ServerName};
use tokio_rustls::rustls::ClientConfig;

use crate::process::{Process, RULES, metric, rules_root};
use crate::support::certs::{ca, leaf, mtls_server_env};
use crate::support::until;

/// An HTTP/2 connection over mTLS from `local`, presenting `client`'s certificate; held open
/// until dropped.
async fn mtls_from(
    local: IpAddr,
    port: u16,
    dir: &Path,
    client: &str,
) -> h2::client::SendRequest<bytes::Bytes> {
    let roots = turnstile::tls::roots(Some(&dir.join("one-ca.pem"))).expect("roots");
    let chain =
        turnstile::tls::pem_certificates(&dir.join(format!("{client}.pem"))).expect("chain");
    let key = PrivateKeyDer::from_pem_file(dir.join(format!("{client}.key"))).expect("key");
    let mut config = ClientConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .expect("client certificate");
    config.alpn_protocols = vec![b"h2".to_vec()];
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::new(local, 0)).expect("bind");
    let tcp = socket
        .connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .expect("connect");
    let name = ServerName::try_from("localhost").expect("name");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("TLS handshake");
    let (client, connection) = h2::client::handshake(tls).await.expect("h2");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_mtls_a_peer_is_its_certificate_not_its_address() {
    let dir = std::env::temp_dir().join(crate::support::unique("mtls-peers"));
    std::fs::create_dir_all(&dir).expect("mkdir");
    ca(&dir, "one");
    leaf(&dir, "one", "server", false);
    leaf(&dir, "one", "alice", true);
    leaf(&dir, "one", "bob", true);
    let env = mtls_server_env(&dir, "one", &[("GRPC_MAX_CONNECTIONS_PER_PEER", "1")]);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let p = Process::start(&rules_root(RULES), &env);
    let closed = || {
        metric(
            &p.metrics(),
            "turnstile_grpc_connections_closed_total{reason=\"peer_cap\"",
        )
    };
    let open = || metric(&p.metrics(), "turnstile_grpc_connections_open");
    let here = IpAddr::V4(Ipv4Addr::LOCALHOST);
    // Two certificates from one address: two peers, both connections stay.
    let _alice = mtls_from(here, p.grpc, &dir, "alice").await;
    let _bob = mtls_from(here, p.grpc, &dir, "bob").await;
    until(Duration::from_secs(5), "both connections counted", || {
        open() == Some(2)
    })
    .await;
    assert_eq!(closed(), Some(0), "two certificates are two peers");
    // Alice again from another address: the same peer, over its cap of one.
    let _alice_again = mtls_from(
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
        p.grpc,
        &dir,
        "alice",
    )
    .await;
    until(
        Duration::from_secs(5),
        "alice's first connection closed",
        || closed() == Some(1),
    )
    .await;
}
