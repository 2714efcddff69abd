//! Network faults injected on the wire, not by killing processes (issue 12): memcached runs in
//! a network namespace of the test's own behind a veth pair; iptables in that namespace drops
//! 10 % of packets, then all of them (a partition that then heals), and a delaying relay on the
//! host adds 50 ms to every exchange, while callers keep hitting the store. (This machine's
//! kernel has no `netem` qdisc, so latency is added by the relay rather than by `tc`.) Every
//! answer comes within the deadline (plus scheduling slack) and is honest (a count, or a typed
//! error naming memcached); after healing, counting resumes within a second and is exact. Where
//! namespaces are not permitted (not root, no `ip`), the test fails like any missing peer
//! (or skips, printed, with `TURNSTILE_SKIP_MISSING_PEERS=1`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::storage::memcached::{MemcachedOptions, MemcachedStore};
use turnstile::storage::{Change, CounterKey, CounterOp, CounterStore, ErrorKind};

use crate::support::{missing, unique};

mod wire;

use wire::{Netns, delaying_relay};

const DEADLINE: Duration = Duration::from_millis(200);
/// How long a caller waits for an answer (as Envoy's own timeout would) before giving up:
/// the store's deadline and scheduling slack for a machine busy with other tests.
const CALLER_DEADLINE: Duration = Duration::from_millis(350);

#[derive(Debug, Default)]
struct Phase {
    ok: u64,
    timeouts: u64,
    unavailable: u64,
    /// Refused as Turnstile's own overload (its runtime was late), not the store's fault.
    overloaded: u64,
    other: u64,
    /// Calls the caller gave up on: no answer within its own deadline.
    unanswered: u64,
    /// Printed with the phase, never a pass criterion.
    slowest: Duration,
    /// How late a 5 ms timer on the callers' runtime fired at worst, during the phase and the
    /// half second before it (the store's own measure of its runtime looks that far back).
    runtime_late: Duration,
}

impl Phase {
    /// What every phase must show, and what the named one must.
    fn check(&self, name: &str) {
        assert_eq!(self.other, 0, "{name}: only timeouts or unavailability");
        // A call is refused as Turnstile's own overload only when its runtime really ran late
        // (as the store judges it: a tenth of the deadline), as the test's own timer saw too:
        // on a machine busy with other tests a stall can outlast the 150 ms a call under 50 ms
        // of latency has to spare, and the store is then not blamed for it.
        assert!(
            self.overloaded == 0 || self.runtime_late >= DEADLINE / 10,
            "{name}: overload named while the runtime kept up: {self:?}"
        );
        // Every call answered, whatever the fault, before its caller gives up.
        assert_eq!(
            self.unanswered, 0,
            "{name}: calls went unanswered: {self:?}"
        );
        match name {
            "healthy" | "50 ms latency" => {
                assert_eq!(self.timeouts + self.unavailable, 0, "{name}: {self:?}")
            }
            "partition" => assert_eq!(self.ok, 0, "{name}: nothing gets through a partition"),
            // 57 % answered at 10 % loss with a 100 ms deadline (RELIABILITY.md); this test's
            // deadline is twice that.
            _ => assert!(
                3 * self.ok >= self.ok + self.timeouts + self.unavailable,
                "{name}: at least a third of the calls get through: {self:?}"
            ),
        }
    }
}

/// A 5 ms ticker on the current runtime, as the test's independent witness of how late the
/// runtime ran: every lateness over a millisecond, with when it was seen.
fn lateness_probe() -> Arc<std::sync::Mutex<Vec<(Instant, Duration)>>> {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(Duration::from_millis(5));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while Arc::strong_count(&record) > 1 {
            let due = ticks.tick().await;
            let late = due.elapsed();
            if late > Duration::from_millis(1) {
                record.lock().expect("probe").push((Instant::now(), late));
            }
        }
    });
    seen
}

/// 16 callers hitting fresh keys for `length`.
async fn load(
    store: &MemcachedStore,
    clock: &ManualClock,
    length: Duration,
    probe: &std::sync::Mutex<Vec<(Instant, Duration)>>,
) -> Phase {
    let since = Instant::now() - Duration::from_millis(500);
    let end = Instant::now() + length;
    let mut callers = Vec::new();
    for _ in 0..16 {
        let (store, now) = (store.clone(), clock.now_secs());
        callers.push(tokio::spawn(async move {
            let mut phase = Phase::default();
            while Instant::now() < end {
                let hit = CounterOp {
                    key: CounterKey::checked(unique("fault")).expect("key"),
                    change: Change::Add(1),
                    expires_at: now + 60,
                };
                let started = Instant::now();
                let answer = tokio::time::timeout(CALLER_DEADLINE, store.apply_ops(&[hit])).await;
                phase.slowest = phase.slowest.max(started.elapsed());
                let Ok(result) = answer else {
                    phase.unanswered += 1;
                    continue;
                };
                match result {
                    Ok(_) => phase.ok += 1,
                    Err(e) if e.kind() == ErrorKind::Timeout => {
                        assert!(e.what().contains("memcached"), "{e}");
                        phase.timeouts += 1;
                    }
                    Err(e) if e.kind() == ErrorKind::Unavailable => {
                        assert!(e.what().contains("memcached"), "{e}");
                        phase.unavailable += 1;
                    }
                    Err(e) if e.kind() == ErrorKind::Overloaded => {
                        assert!(e.what().contains("runtime ran"), "{e}");
                        phase.overloaded += 1;
                    }
                    Err(e) => {
                        eprintln!("unexpected: {e}");
                        phase.other += 1;
                    }
                }
                // Each call is its own request in the service: let the others run.
                tokio::task::yield_now().await;
            }
            phase
        }));
    }
    let mut total = Phase::default();
    for caller in callers {
        let p = caller.await.expect("caller");
        total.ok += p.ok;
        total.timeouts += p.timeouts;
        total.unavailable += p.unavailable;
        total.overloaded += p.overloaded;
        total.other += p.other;
        total.unanswered += p.unanswered;
        total.slowest = total.slowest.max(p.slowest);
    }
    let seen = probe.lock().expect("probe");
    total.runtime_late = seen
        .iter()
        .filter(|(at, _)| *at >= since)
        .map(|(_, late)| *late)
        .max()
        .unwrap_or_default();
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_loss_and_a_partition_on_the_wire() {
    if !std::path::Path::new("/usr/bin/memcached").exists() {
        missing("memcached");
        return;
    }
    let Some(mut ns) = Netns::create() else {
        return;
    };
    ns.start_memcached();
    let delay = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let relay = delaying_relay(Arc::clone(&delay)).await;
    let clock = ManualClock::new(SystemClock.now_secs());
    let options = MemcachedOptions {
        servers: vec![relay.to_string()],
        client: turnstile::storage::memcached::MemcachedClient {
            transport: Default::default(),
            pool_size: 4,
            pipelined_connections: Some(std::num::NonZeroUsize::new(2).expect("2")),
            timeout: DEADLINE,
            jitter_max_seconds: 0,
        },
        tls: None,
    };
    let store = MemcachedStore::new(options, Arc::new(clock.clone())).expect("store");
    // (name, added latency in ms each way, share of packets dropped)
    let phases: [(&str, u64, Option<&str>); 4] = [
        ("healthy", 0, None),
        ("50 ms latency", 25, None),
        ("10 % loss", 0, Some("0.1")),
        ("partition", 0, Some("1")),
    ];
    let probe = lateness_probe();
    for (name, ms, drop) in phases {
        delay.store(ms, std::sync::atomic::Ordering::Relaxed);
        ns.drop_packets(drop);
        let phase = load(&store, &clock, Duration::from_secs(2), &probe).await;
        eprintln!("fault {name}: {phase:?}");
        phase.check(name);
    }
    // Heal, and time the recovery.
    ns.drop_packets(None);
    let healed = Instant::now();
    let key = CounterKey::checked(unique("after")).expect("key");
    let hit = |n| CounterOp {
        key: key.clone(),
        change: Change::Add(n),
        expires_at: clock.now_secs() + 60,
    };
    crate::support::wait::until_some(Duration::from_secs(5), "recovery after healing", || async {
        store.apply_ops(&[hit(0)]).await.ok()
    })
    .await;
    eprintln!("recovered {:?} after healing", healed.elapsed());
    // Counting afterwards is exact.
    for _ in 0..100 {
        store.apply_ops(&[hit(1)]).await.expect("hit after healing");
    }
    assert_eq!(store.apply_ops(&[hit(0)]).await, Ok(vec![100]));
}
