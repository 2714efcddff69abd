//! Redis's circuit breakers (`storage::breaker`): one for a single server or Sentinel's master,
//! one per node of a cluster. A cluster node's keys are found by their slot (CRC16 of the key or
//! its `{hash tag}`, as Redis computes it) in the slot map Redis gives (`CLUSTER SLOTS`), asked
//! on first use, every 10 s, and at once (at most every 500 ms) after a failure, so that a
//! failover's new master is seen. A key whose node's breaker is open fails at once; every probe
//! is a PING (routed to the node on a cluster) on the side, never a request's call.
//!
//! Must not touch: scripts, what an answer means, the connection's own recovery.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::time::Instant;

use arc_swap::ArcSwap;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use super::connect::Conn;
use crate::storage::breaker::{Admit, Breaker};
use crate::storage::remote::lock;
use crate::storage::{Gauge, StorageError};

/// Failures in a row that open a Redis breaker.
const THRESHOLD: u32 = 3;
/// How old the slot map may grow before it is asked again, and how soon after another ask a
/// failure may ask again (ms).
const SLOTS_EVERY_MS: u64 = 10_000;
const SLOTS_AFTER_FAILURE_MS: u64 = 500;
const SLOTS: u16 = 16_384;

/// Which node serves each slot: ranges `(first, last, "host:port")`, sorted.
type SlotMap = Vec<(u16, u16, String)>;

/// The breakers of one Redis store.
#[derive(Debug)]
pub(super) enum Breakers {
    /// One server, or the master behind Sentinel.
    Server(Arc<Breaker>),
    /// A cluster: a breaker per node.
    Cluster(Nodes),
}

/// A cluster's slot map and its nodes' breakers.
#[derive(Debug)]
pub(super) struct Nodes {
    slots: ArcSwap<SlotMap>,
    breakers: std::sync::Mutex<HashMap<String, Arc<Breaker>>>,
    /// Milliseconds since `epoch` when the slot map was last asked for.
    asked: AtomicU64,
    asking: AtomicBool,
    epoch: Instant,
}

/// What a call on a key may do: go out (and be recorded on this breaker), or fail at once with
/// this error; `probe` when this caller is the period's probe.
pub(super) enum Way {
    Call(Option<Arc<Breaker>>),
    Refused {
        error: StorageError,
        probe: Option<String>,
    },
}

impl Breakers {
    /// A server's breaker, or an empty cluster map.
    pub(super) fn new(name: &str, cluster: bool) -> Breakers {
        match cluster {
            false => Breakers::Server(Arc::new(Breaker::new(name, THRESHOLD))),
            true => Breakers::Cluster(Nodes {
                slots: ArcSwap::from_pointee(Vec::new()),
                breakers: std::sync::Mutex::new(HashMap::new()),
                asked: AtomicU64::new(0),
                asking: AtomicBool::new(false),
                epoch: Instant::now(),
            }),
        }
    }

    /// What a call for `key` may do (the server's breaker; on a cluster, its node's, when the
    /// slot map is known).
    pub(super) fn way(&self, key: &[u8]) -> Way {
        let (breaker, node) = match self {
            Breakers::Server(b) => (Arc::clone(b), None),
            Breakers::Cluster(nodes) => match nodes.node_of(key) {
                Some(node) => (nodes.breaker(&node), Some(node)),
                None => return Way::Call(None),
            },
        };
        match breaker.admit() {
            Admit::Call => Way::Call(Some(breaker)),
            Admit::Probe => Way::Refused {
                error: breaker.refusal(),
                probe: Some(node.unwrap_or_default()),
            },
            Admit::Refuse => Way::Refused {
                error: breaker.refusal(),
                probe: None,
            },
        }
    }

    /// The node serving `key` on a cluster whose slot map is known.
    pub(super) fn node_of(&self, key: &[u8]) -> Option<String> {
        match self {
            Breakers::Server(_) => None,
            Breakers::Cluster(nodes) => nodes.node_of(key),
        }
    }

    /// Every breaker's readings.
    pub(super) fn gauges(&self) -> Vec<Gauge> {
        match self {
            Breakers::Server(b) => vec![b.gauge()],
            Breakers::Cluster(nodes) => lock(&nodes.breakers).values().map(|b| b.gauge()).collect(),
        }
    }

    /// The breaker a probe of `node` records on (`""`: the server's).
    pub(super) fn of(&self, node: &str) -> Option<Arc<Breaker>> {
        match self {
            Breakers::Server(b) => Some(Arc::clone(b)),
            Breakers::Cluster(nodes) => Some(nodes.breaker(node)),
        }
    }

    /// Whether the cluster's slot map should be asked for now (`failed`: a call just failed);
    /// claims the ask.
    pub(super) fn should_ask_slots(&self, failed: bool) -> bool {
        let Breakers::Cluster(nodes) = self else {
            return false;
        };
        let now = nodes.now_ms();
        let asked = nodes.asked.load(Ordering::Acquire);
        let due = match (asked, failed) {
            (0, _) => true,
            (_, true) => now.saturating_sub(asked) >= SLOTS_AFTER_FAILURE_MS,
            (_, false) => now.saturating_sub(asked) >= SLOTS_EVERY_MS,
        };
        due && !nodes.asking.swap(true, Ordering::AcqRel)
    }

    /// Releases the claim of an ask that could not be made (no connection).
    pub(super) fn ask_slots_failed(&self) {
        if let Breakers::Cluster(nodes) = self {
            nodes.asked.store(nodes.now_ms().max(1), Ordering::Release);
            nodes.asking.store(false, Ordering::Release);
        }
    }

    /// Asks `conn` (a cluster connection) for the slot map and keeps it; releases the claim.
    pub(super) async fn ask_slots(&self, conn: &mut Conn) {
        let Breakers::Cluster(nodes) = self else {
            return;
        };
        if let Conn::Cluster(c) = conn {
            let cmd = redis::cmd("CLUSTER").arg("SLOTS").to_owned();
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
            if let Ok(value) = c.route_command(cmd, routing).await
                && let Some(map) = slot_map(&value)
            {
                nodes.slots.store(Arc::new(map));
            }
        }
        nodes.asked.store(nodes.now_ms().max(1), Ordering::Release);
        nodes.asking.store(false, Ordering::Release);
    }
}

/// A PING to `node` (`""`: wherever the connection goes) through `conn`.
pub(super) async fn ping(mut conn: Conn, node: String) -> bool {
    let cmd = redis::cmd("PING").to_owned();
    let answer: redis::RedisResult<redis::Value> = match (&mut conn, node.rsplit_once(':')) {
        (Conn::Cluster(c), Some((host, port))) => {
            let Ok(port) = port.parse() else { return false };
            let node = SingleNodeRoutingInfo::ByAddress {
                host: host.to_owned(),
                port,
            };
            c.route_command(cmd, RoutingInfo::SingleNode(node)).await
        }
        (conn, _) => cmd.query_async(conn).await,
    };
    answer.is_ok()
}

impl Nodes {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn node_of(&self, key: &[u8]) -> Option<String> {
        let slot = slot_of(key);
        let map = self.slots.load();
        let at = map.partition_point(|(_, last, _)| *last < slot);
        map.get(at)
            .filter(|(first, _, _)| *first <= slot)
            .map(|(_, _, node)| node.clone())
    }

    fn breaker(&self, node: &str) -> Arc<Breaker> {
        let mut breakers = lock(&self.breakers);
        if let Some(b) = breakers.get(node) {
            return Arc::clone(b);
        }
        let b = Arc::new(Breaker::new(format!("redis node {node}"), THRESHOLD));
        breakers.insert(node.to_owned(), Arc::clone(&b));
        b
    }
}

/// The slot of `key` as Redis computes it: CRC16 (XMODEM) of its hash tag (the bytes between
/// the first `{` and the next `}`, when not empty) or of the whole key, modulo 16384.
fn slot_of(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(key)) % SLOTS
}

/// `CLUSTER SLOTS`'s answer as sorted ranges (the master of each: its first node entry).
fn slot_map(value: &redis::Value) -> Option<SlotMap> {
    use redis::Value;
    let Value::Array(ranges) = value else {
        return None;
    };
    let mut map = SlotMap::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        let host = match master.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => continue,
        };
        let Some(Value::Int(port)) = master.get(1) else {
            continue;
        };
        let (Ok(first), Ok(last)) = (u16::try_from(*first), u16::try_from(*last)) else {
            continue;
        };
        map.push((first, last, format!("{host}:{port}")));
    }
    map.sort();
    Some(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_s_and_follow_the_hash_tag() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(slot_of(b"foo"), 12_182);
        assert_eq!(slot_of(b"123456789"), 12_739);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_eq!(slot_of(b"foo{}{bar}"), slot_of(b"foo{}{bar}"));
        assert_ne!(
            slot_of(b"foo{}{bar}"),
            slot_of(b"bar"),
            "an empty tag is no tag"
        );
    }

    #[test]
    fn the_slot_map_finds_each_slot_s_master() {
        use redis::Value::{Array, BulkString, Int};
        let node = |host: &str, port| Array(vec![BulkString(host.into()), Int(port)]);
        let answer = Array(vec![
            Array(vec![Int(5461), Int(10922), node("10.0.0.2", 7001)]),
            Array(vec![
                Int(0),
                Int(5460),
                node("10.0.0.1", 7000),
                node("10.0.0.4", 7003),
            ]),
            Array(vec![Int(10923), Int(16383), node("10.0.0.3", 7002)]),
        ]);
        let nodes = match Breakers::new("c", true) {
            Breakers::Cluster(nodes) => nodes,
            Breakers::Server(_) => unreachable!("a cluster"),
        };
        nodes
            .slots
            .store(Arc::new(slot_map(&answer).expect("a map")));
        assert_eq!(nodes.node_of(b"foo").as_deref(), Some("10.0.0.3:7002"));
        assert_eq!(
            nodes.node_of(b"123456789").as_deref(),
            Some("10.0.0.3:7002")
        );
        let low = (0..)
            .map(|i| format!("k{i}"))
            .find(|k| slot_of(k.as_bytes()) < 5461);
        let low = low.expect("a key in the first range");
        assert_eq!(
            nodes.node_of(low.as_bytes()).as_deref(),
            Some("10.0.0.1:7000")
        );
    }
}
