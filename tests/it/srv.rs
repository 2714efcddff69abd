//! DNS SRV discovery of memcached servers against a fake DNS server on loopback: the initial
//! list, a refresh that follows a change, a failed lookup that keeps the servers, and the real
//! binary counting on discovered servers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::UdpSocket;
use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::storage::memcached::discovery::Resolver;
use turnstile::storage::memcached::{MemcachedOptions, MemcachedStore};
use turnstile::storage::{Change, CounterKey, CounterOp, CounterStore};

use crate::process::{Process, RULES, rules_root};
use crate::support::{Memcached, req1, unique};

type Records = Arc<Mutex<Option<Vec<(String, u16)>>>>;

/// A DNS server answering every SRV question with `records` (`None`: NXDOMAIN); the counter
/// counts the questions it answered.
async fn fake_dns(records: Records) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let addr = socket.local_addr().expect("addr");
    let answered = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&answered);
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            // The header and the question only (a client's EDNS OPT record is dropped).
            let mut end = 12;
            while end < n && buf[end] != 0 {
                end += usize::from(buf[end]) + 1;
            }
            let mut msg = buf[..(end + 5).min(n)].to_vec();
            msg[2] = 0x81;
            msg[6..12].fill(0);
            let current = records.lock().expect("records").clone();
            match current {
                None => msg[3] = 0x83,
                Some(list) => {
                    msg[3] = 0x80;
                    msg[7] = list.len() as u8;
                    for (target, port) in list {
                        msg.extend_from_slice(&[0xC0, 12, 0, 33, 0, 1, 0, 0, 0, 30]);
                        let mut rdata = vec![0, 10, 0, 60];
                        rdata.extend_from_slice(&port.to_be_bytes());
                        for label in target.split('.') {
                            rdata.push(label.len() as u8);
                            rdata.extend_from_slice(label.as_bytes());
                        }
                        rdata.push(0);
                        msg.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
                        msg.extend_from_slice(&rdata);
                    }
                }
            }
            let _ = socket.send_to(&msg, from).await;
            count.fetch_add(1, Ordering::SeqCst);
        }
    });
    (addr, answered)
}

/// A store's options with its servers left to discovery.
fn discovered_options() -> MemcachedOptions {
    MemcachedOptions {
        servers: vec![],
        client: turnstile::storage::memcached::MemcachedClient {
            transport: Default::default(),
            pool_size: 4,
            pipelined_connections: Some(std::num::NonZeroUsize::new(2).expect("2")),
            timeout: Duration::from_millis(500),
            jitter_max_seconds: 0,
        },
        tls: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_refresh_and_failed_lookups() {
    let (Some(mc1), Some(mc2)) = (Memcached::start(), Memcached::start()) else {
        return;
    };
    let records: Records = Arc::new(Mutex::new(Some(vec![("127.0.0.1".into(), mc2.port)])));
    let (dns, questions) = fake_dns(Arc::clone(&records)).await;
    let resolver = Resolver::at(dns).expect("resolver");
    let options = discovered_options();
    let clock = ManualClock::new(SystemClock.now_secs());
    let store = MemcachedStore::discover(
        "_memcache._tcp.mc.test",
        &resolver,
        options.clone(),
        Arc::new(clock.clone()),
    )
    .await
    .expect("discover");
    assert_eq!(store.servers(), vec![format!("127.0.0.1:{}", mc2.port)]);
    let key = CounterKey::checked(unique("srv")).expect("key");
    let hit = |n| CounterOp {
        key: key.clone(),
        change: Change::Add(n),
        expires_at: clock.now_secs() + 60,
    };
    assert_eq!(
        store
            .apply_ops(&[hit(1)])
            .await
            .expect("counts on the discovered server"),
        vec![1]
    );

    let _refresh = tokio::spawn(store.clone().refresh_every(
        "_memcache._tcp.mc.test".into(),
        resolver.clone(),
        Duration::from_millis(100),
    ));
    *records.lock().expect("records") = Some(vec![
        ("127.0.0.1".into(), mc2.port),
        ("127.0.0.1".into(), mc1.port),
    ]);
    let mut want = vec![
        format!("127.0.0.1:{}", mc1.port),
        format!("127.0.0.1:{}", mc2.port),
    ];
    want.sort();
    crate::support::wait::until(
        Duration::from_secs(5),
        "the refresh picked up the new server",
        || store.servers() == want,
    )
    .await;
    // The name disappears: wait until the refresh has asked (and been told NXDOMAIN) at least
    // twice more, then the servers must be unchanged.
    *records.lock().expect("records") = None;
    let asked = questions.load(Ordering::SeqCst);
    crate::support::wait::until(Duration::from_secs(5), "the refresh still asking", || {
        questions.load(Ordering::SeqCst) >= asked + 2
    })
    .await;
    assert_eq!(
        store.servers(),
        want,
        "a failed lookup keeps the current servers"
    );
    let err = MemcachedStore::discover("_none._tcp.mc.test", &resolver, options, Arc::new(clock))
        .await
        .expect_err("NXDOMAIN");
    assert!(err.to_string().contains("_none._tcp.mc.test"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_counts_on_srv_discovered_memcached() {
    let Some(mc) = Memcached::start() else { return };
    let records: Records = Arc::new(Mutex::new(Some(vec![("127.0.0.1".into(), mc.port)])));
    let (dns, _) = fake_dns(records).await;
    let root = rules_root(RULES);
    let dns = dns.to_string();
    let p = Process::start(
        &root,
        &[
            ("BACKEND_TYPE", "memcache"),
            ("MEMCACHE_SRV", "_memcache._tcp.mc.test"),
            ("MEMCACHE_SRV_RESOLVER", &dns),
            ("MEMCACHE_SRV_REFRESH", "1s"),
        ],
    );
    let mut client = p.client().await;
    let user = unique("srv-user");
    let remaining: Vec<u32> = {
        let mut out = Vec::new();
        for _ in 0..3 {
            let resp = client
                .should_rate_limit(req1("ops", &[("user", &user)]))
                .await
                .expect("call")
                .into_inner();
            out.push(resp.statuses[0].limit_remaining);
        }
        out
    };
    assert_eq!(remaining, vec![1, 0, 0]);
    let metrics = p.metrics();
    let server = format!("server=\"127.0.0.1:{}\"", mc.port);
    assert!(
        metrics.contains(&format!("turnstile_memcached_up{{{server}}} 1")),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!("turnstile_memcached_connections{{{server}}}")),
        "{metrics}"
    );
    assert_eq!(
        metrics
            .matches("# TYPE turnstile_memcached_up gauge")
            .count(),
        1
    );
}
