//! The Rate Limit Quota Service: wire compatibility with Envoy's generated code, streams over
//! loopback against the real server (memory and memcached), a deterministic simulation of many
//! Envoys, and real Envoys sharing one global limit through two replicas.

mod bounds;
mod envoy;
mod per_second;
mod replicas;
mod simulation;
pub(crate) mod stream;
mod top;
mod wire;

/// Rules the RLQS tests share: `user` alone (5 a minute), `path: /api` then `user` (10 a
/// minute: a bucket id matches in any order), an unlimited plan and a shadow-mode team.
pub(crate) const RULES: &str = "\
domain: rlqs
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: path
    value: /api
    descriptors:
      - key: user
        rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: plan
    value: free
    rate_limit: { unlimited: true }
  - key: team
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
";
