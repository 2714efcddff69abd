//! The two ways commands reach a server: the pooled async-memcached connections (one command in
//! flight per connection) and the pipelined connections (a request's commands for the server in
//! one write). Both return the count after each hit, in order.

use super::Inner;
use super::connection;
use super::pipeline::{self, Reply};
use super::server::Server;
use crate::storage::{Hit, Op};

impl Inner {
    pub(super) async fn pooled(
        &self,
        server: &Server,
        hit: &Hit,
        now: u64,
    ) -> Result<u64, async_memcached::Error> {
        let mut conn = server.pool.get().await.map_err(|e| match e {
            bb8::RunError::User(e) => e,
            bb8::RunError::TimedOut => async_memcached::Error::ConnectionClosed,
        })?;
        match hit.op {
            Op::Add(n) => {
                let exptime = self.exptime(&hit.key, hit.expires_at, now);
                connection::add(&mut conn, self.protocol, &hit.key, n, exptime).await
            }
            Op::Sub(n) => connection::sub(&mut conn, self.protocol, &hit.key, n).await,
        }
    }

    /// All of a request's commands for one server in one pipelined write.
    pub(super) async fn pipelined(
        &self,
        server: &Server,
        hits: &[&Hit],
        now: u64,
    ) -> Result<Vec<u64>, async_memcached::Error> {
        let mut lines = Vec::with_capacity(hits.len() * 64);
        for hit in hits {
            match hit.op {
                Op::Add(n) => {
                    pipeline::push_add(
                        &mut lines,
                        &hit.key,
                        n,
                        self.exptime(&hit.key, hit.expires_at, now),
                    );
                }
                Op::Sub(n) => pipeline::push_sub(&mut lines, &hit.key, n),
            }
        }
        let pipe = server
            .pipeline()
            .await
            .map_err(async_memcached::Error::Connect)?;
        let replies = pipe
            .call(lines, hits.len())
            .await
            .map_err(async_memcached::Error::Io)?;
        replies
            .into_iter()
            .map(|reply| match reply {
                Reply::Value(n) => Ok(n),
                Reply::NotFound => Ok(0),
                Reply::Noop => Err(protocol_error("unexpected MN".into())),
                Reply::Error(e) => Err(protocol_error(e)),
            })
            .collect()
    }
}

pub(super) fn protocol_error(text: String) -> async_memcached::Error {
    async_memcached::Error::Protocol(async_memcached::Status::Error(
        async_memcached::ErrorKind::Protocol(Some(text)),
    ))
}
