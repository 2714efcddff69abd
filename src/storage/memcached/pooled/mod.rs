//! The pooled transport: async-memcached connections in a bb8 pool per server, one command in
//! flight per connection, and the counter operations on them: the meta arithmetic command that
//! creates-or-increments atomically and returns the count after the hit, and the classic
//! `incr` → `add` → `incr` fallback for servers without meta commands. The only place that
//! knows bb8 and async-memcached.

mod commands;

use std::time::Duration;

use async_memcached::{Client, Error};
use bb8::Pool;

use super::transport::{
    Answer, Command, Connections, Sent, StateWrite, StoredState, Transport, TransportError,
};
use crate::storage::Change;
use crate::storage::remote::in_key_order;
pub(in crate::storage::memcached) use commands::Protocol;
use commands::{add, lease, read_state, sub, write_state};

/// Creates pooled connections; the check-out test is off (it costs a round trip per use), and
/// a connection whose operation was cancelled reports itself broken and is dropped.
#[derive(Debug)]
pub(super) struct Manager {
    /// `host:port`; the host is resolved on every connect (IPv4 preferred: the client crate
    /// speaks IPv4 only).
    server: String,
}

impl bb8::ManageConnection for Manager {
    type Connection = Client;
    type Error = Error;

    async fn connect(&self) -> Result<Client, Error> {
        let addr = super::discovery::resolve(&self.server)
            .await
            .map_err(Error::Connect)?;
        Client::new(format!("tcp://{addr}")).await
    }

    async fn is_valid(&self, conn: &mut Client) -> Result<(), Error> {
        conn.version().await.map(|_| ())
    }

    fn has_broken(&self, conn: &mut Client) -> bool {
        conn.is_closed()
    }
}

impl From<Error> for TransportError {
    fn from(err: Error) -> Self {
        match err {
            Error::Connect(e) => TransportError::Connect(e),
            Error::Io(e) => TransportError::Io(e),
            Error::Protocol(status) => TransportError::Protocol(format!("{status:?}")),
            other => TransportError::Io(std::io::Error::other(other.to_string())),
        }
    }
}

/// The pooled transport to one server.
#[derive(Debug)]
pub(super) struct Pooled {
    pool: Pool<Manager>,
    protocol: Protocol,
}

impl Pooled {
    /// A pool of up to `size` connections to `server`, made lazily; checking a connection out
    /// waits at most `timeout`.
    pub(super) fn new(server: String, size: u32, timeout: Duration, protocol: Protocol) -> Self {
        let pool = Pool::builder()
            .max_size(size)
            .min_idle(None)
            .test_on_check_out(false)
            .connection_timeout(timeout)
            .build_unchecked(Manager { server });
        Self { pool, protocol }
    }

    /// A pooled connection. Waiting for a busy pool is Turnstile's own queueing: running out
    /// of time there is overload, not a fault of the server.
    async fn connection(&self) -> Result<bb8::PooledConnection<'_, Manager>, TransportError> {
        self.pool.get().await.map_err(|e| match e {
            bb8::RunError::User(e) => e.into(),
            bb8::RunError::TimedOut => TransportError::Overloaded(
                "no pooled memcached connection became free in time".into(),
            ),
        })
    }

    /// Applies every command, one connection each, all at once (the same counter twice in
    /// order), and returns the count after each, in the commands' order; marks `sent` as each
    /// goes out.
    pub(super) async fn apply<'k, I>(
        &self,
        commands: I,
        sent: &Sent,
    ) -> Result<Vec<u64>, TransportError>
    where
        I: IntoIterator<Item = Command<'k>> + Send,
        I::IntoIter: Send,
    {
        let commands: Vec<Command<'k>> = commands.into_iter().collect();
        in_key_order(&commands, |c| c.key, |c| self.one(c, sent)).await
    }

    async fn one(&self, command: &Command<'_>, sent: &Sent) -> Result<u64, TransportError> {
        let mut conn = self.connection().await?;
        // With a connection in hand, the command goes straight to the server.
        sent.mark(tokio::time::Instant::now());
        let count = match command.change {
            Change::Add(n) => add(&mut conn, self.protocol, command.key, n, command.exptime).await,
            Change::Sub(n) => sub(&mut conn, self.protocol, command.key, n).await,
            Change::Lease(0) => {
                add(&mut conn, self.protocol, command.key, 0, command.exptime).await
            }
            Change::Lease(_) | Change::Release(_) => {
                self.meta_only("a concurrency limit")?;
                lease(&mut conn, command).await
            }
        };
        Ok(count?)
    }

    /// Classic commands cannot set a TTL on update or compare-and-swap here: the algorithms
    /// that need them are refused with a clear error rather than counted wrongly.
    fn meta_only(&self, what: &str) -> Result<(), TransportError> {
        match self.protocol {
            Protocol::Meta => Ok(()),
            Protocol::Classic => Err(TransportError::Protocol(format!(
                "{what} needs memcached meta commands (memcached 1.6 or later); \
                 MEMCACHE_CLASSIC_PROTOCOL=true supports fixed and sliding windows only"
            ))),
        }
    }
}

impl Transport for Pooled {
    async fn read_state(&self, key: &str, sent: &Sent) -> Answer<Option<StoredState>> {
        self.meta_only("a token bucket")?;
        let mut conn = self.connection().await?;
        sent.mark(tokio::time::Instant::now());
        Ok(read_state(&mut conn, key).await?)
    }

    async fn write_state(&self, write: StateWrite<'_>, sent: &Sent) -> Answer<bool> {
        self.meta_only("a token bucket")?;
        let mut conn = self.connection().await?;
        sent.mark(tokio::time::Instant::now());
        Ok(write_state(&mut conn, write).await?)
    }

    async fn probe(&self) -> Result<(), TransportError> {
        let mut conn = self.connection().await?;
        conn.version().await?;
        Ok(())
    }

    fn reset(&self) {
        // Broken connections report themselves (`has_broken`) and are dropped by the pool.
    }

    fn connections(&self) -> Connections {
        let state = self.pool.state();
        Connections {
            open: u64::from(state.connections),
            idle: u64::from(state.idle_connections),
        }
    }
}
