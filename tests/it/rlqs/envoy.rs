//! Real Envoys (1.40, `deploy/envoy/rlqs.yaml` on loopback) sharing one global limit through
//! two Turnstile replicas (the `turnstile` binary as child processes) on one memcached.
//! Envoy A gets 80 % of the traffic, Envoy B 20 %, 20 requests a second in all against 120 a
//! minute, for two full windows; then replica B is killed (SIGKILL) in the middle of a third
//! window and restarted on its port: Envoy B reconnects and enforcement goes on.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::deploy::envoy;
use crate::envoy_e2e::{start_envoy, wait_for};
use crate::process::{command, http_get, rules_root};
use crate::support::{Memcached, free_port};

const RULES: &str = "domain: rlqs\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 120 }\n";
const LIMIT: u64 = 120;

/// The turnstile binary as a child process on fixed ports, killed on drop.
struct Replica(Child);

impl Replica {
    fn start(root: &std::path::Path, memcached: &str, grpc: u16) -> Replica {
        let http = free_port();
        let env = [
            ("RUNTIME_ROOT", root.display().to_string()),
            ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
            ("GRPC_HOST", "127.0.0.1".into()),
            ("GRPC_PORT", grpc.to_string()),
            ("HOST", "127.0.0.1".into()),
            ("PORT", http.to_string()),
            ("DEBUG_HOST", "127.0.0.1".into()),
            ("DEBUG_PORT", "0".into()),
            ("BACKEND_TYPE", "memcache".into()),
            ("MEMCACHE_HOST_PORT", memcached.to_owned()),
            ("SHUTDOWN_DRAIN_SECONDS", "0".into()),
            ("LOG_LEVEL", "warn".into()),
        ];
        let child = command(&env)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn turnstile");
        wait_for("the replica is healthy", || {
            http_get(http, "/healthcheck").map(|r| r.0) == Some(200)
        });
        Replica(child)
    }

    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `(unix second, status)` of every request one driver sent.
type Log = Arc<Mutex<Vec<(u64, u16)>>>;

/// The status of one `GET /` with `x-user: global`, read from the status line (Envoy keeps a
/// connection it answered locally open for its delayed-close timeout, so nothing waits for
/// the close).
fn status(port: u16) -> u16 {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to envoy");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: example\r\nx-user: global\r\n\r\n")
        .expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n") {
        assert_eq!(stream.read(&mut byte).expect("read"), 1, "a status line");
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status")
}

/// Sends a request to `port` every `every` until `until`, logging each answer.
fn drive(port: u16, every: Duration, until: Instant, log: Log) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut next = Instant::now();
        while Instant::now() < until {
            let status = status(port);
            let at = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            log.lock().expect("log").push((at, status));
            next += every;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
    })
}

/// Admitted and refused requests of `log` in the minute starting at `start`.
fn tally(log: &Log, start: u64) -> (u64, u64) {
    let log = log.lock().expect("log");
    let in_window = log
        .iter()
        .filter(|(at, _)| (start..start + 60).contains(at));
    let admitted = in_window.clone().filter(|(_, s)| *s == 200).count() as u64;
    let refused = in_window.filter(|(_, s)| *s == 429).count() as u64;
    (admitted, refused)
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[test]
fn two_envoys_share_one_global_limit_through_two_replicas() {
    let Some(binary) = envoy() else { return };
    let Some(mc) = Memcached::start() else { return };
    let root = rules_root(RULES);
    let (grpc_a, grpc_b) = (free_port(), free_port());
    let _replica_a = Replica::start(&root, &mc.addr(), grpc_a);
    let mut replica_b = Replica::start(&root, &mc.addr(), grpc_b);
    let (listener_a, listener_b) = (free_port(), free_port());
    let (admin_a, admin_b) = (free_port(), free_port());
    let file = "deploy/envoy/rlqs.yaml";
    let _envoy_a = start_envoy(&binary, file, grpc_a, listener_a, admin_a);
    let _envoy_b = start_envoy(&binary, file, grpc_b, listener_b, admin_b);
    for admin in [admin_a, admin_b] {
        wait_for("Envoy ready", || {
            http_get(admin, "/ready").map(|r| r.0) == Some(200)
        });
    }
    // Start on a window boundary, then two full windows and a third with the kill.
    let first = now_s() / 60 * 60 + 60;
    std::thread::sleep(
        Duration::from_secs(first - now_s()).saturating_sub(Duration::from_millis(500)),
    );
    let until = Instant::now() + Duration::from_secs(180) + Duration::from_millis(500);
    let (log_a, log_b): (Log, Log) = Default::default();
    let a = drive(
        listener_a,
        Duration::from_millis(62),
        until,
        Arc::clone(&log_a),
    );
    let b = drive(
        listener_b,
        Duration::from_millis(250),
        until,
        Arc::clone(&log_b),
    );

    // 15 s into the third window, replica B dies; it is back 5 s later on the same port.
    let kill_at = first + 120 + 15;
    std::thread::sleep(Duration::from_secs(kill_at.saturating_sub(now_s())));
    replica_b.kill();
    std::thread::sleep(Duration::from_secs(5));
    let restarted_at = now_s();
    let _replica_b = Replica::start(&root, &mc.addr(), grpc_b);
    a.join().expect("driver a");
    b.join().expect("driver b");

    println!("RLQS, two Envoys (80 % / 20 % of 20 requests/s), limit {LIMIT} per minute:");
    for w in 0..3 {
        let start = first + w * 60;
        let ((adm_a, ref_a), (adm_b, ref_b)) = (tally(&log_a, start), tally(&log_b, start));
        let total = adm_a + adm_b;
        println!(
            "  window {w}{}: admitted {total} of {} ({:+.1} % of the limit); Envoy A {adm_a} ({:.0} %), Envoy B {adm_b} ({:.0} %)",
            if w == 2 {
                " (replica B killed at 15 s, back at 20 s)"
            } else {
                ""
            },
            total + ref_a + ref_b,
            (total as f64 - LIMIT as f64) * 100.0 / LIMIT as f64,
            adm_a as f64 * 100.0 / total.max(1) as f64,
            adm_b as f64 * 100.0 / total.max(1) as f64,
        );
        if w < 2 {
            assert!(
                total.abs_diff(LIMIT) <= LIMIT / 10,
                "window {w}: {total} admitted"
            );
            // The 20 % Envoy gets at least its demand's share of what the limit allows, give or
            // take one request. Admissions beyond the limit (the other Envoy's, bounded above)
            // are not part of what it is owed.
            assert!(
                (adm_b + 1) as f64 >= 0.2 * total.min(LIMIT) as f64,
                "window {w}: the 20 % Envoy got {adm_b} of {total}"
            );
        } else {
            assert!(
                total <= LIMIT + LIMIT / 4,
                "window {w}: {total} admitted after the kill"
            );
        }
    }
    // After the restart Envoy B is enforced again: some of its requests pass, some are refused.
    let after: Vec<u16> = log_b
        .lock()
        .expect("log")
        .iter()
        .filter(|(at, _)| *at > restarted_at + 2 && *at < first + 180)
        .map(|(_, s)| *s)
        .collect();
    assert!(
        after.contains(&200) && after.contains(&429),
        "Envoy B after the restart: {after:?}"
    );
}
