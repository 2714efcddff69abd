//! Three `redis-server` processes made one cluster (`redis-cli --cluster create`).

use std::time::Duration;

use super::{RedisProcess, cli};

/// Three masters forming a cluster (no replicas).
pub struct RedisCluster {
    pub nodes: Vec<RedisProcess>,
}

impl RedisCluster {
    /// A cluster whose other nodes keep serving their slots while one is down.
    pub fn start() -> Option<RedisCluster> {
        Self::start_with("no", "2000")
    }

    /// A cluster as Redis configures one by default: with a master down (after
    /// `node_timeout_ms`), every node answers CLUSTERDOWN.
    pub fn start_full_coverage(node_timeout_ms: &str) -> Option<RedisCluster> {
        Self::start_with("yes", node_timeout_ms)
    }

    fn start_with(full_coverage: &str, node_timeout_ms: &str) -> Option<RedisCluster> {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            nodes.push(RedisProcess::spawn(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-require-full-coverage",
                full_coverage,
                "--cluster-node-timeout",
                node_timeout_ms,
            ])?);
        }
        let addrs: Vec<String> = nodes.iter().map(RedisProcess::addr).collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"]);
        cli(nodes[0].port, &args).expect("redis-cli --cluster create");
        crate::support::wait::blocking(Duration::from_secs(20), "cluster_state:ok", || {
            nodes.iter().all(|n| {
                cli(n.port, &["CLUSTER", "INFO"]).is_some_and(|i| i.contains("cluster_state:ok"))
            })
        });
        Some(RedisCluster { nodes })
    }

    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(RedisProcess::addr).collect()
    }
}
