//! PostgreSQL through the service: long windows routed there beside memcached
//! (`POSTGRES_FROM_UNIT`, RLS and RLQS alike), durability across a SIGKILL of Turnstile and an
//! immediate restart of PostgreSQL, exactness over two replicas, and faults.

mod durability;
mod errors;
mod failover;
mod faults;
mod routing;
mod schema;
mod tls;
