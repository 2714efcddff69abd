//! The process's file descriptors, prepared once at start, before the runtime's threads exist:
//! the soft limit of open files raised to the hard limit, and the kernel's descriptor table
//! grown at once to hold every connection the service may accept.
//!
//! Why the table is grown at start: Linux grows a process's descriptor table by doubling when a
//! new descriptor does not fit (at 256, 512, 1,024, 2,048, 4,096, ...), and while other threads
//! share the table it waits for an RCU grace period before it frees the old one. The thread
//! that opened the descriptor waits with it: measured here (`perf trace`, 5,000 peers connecting
//! at 1,000 a second), `accept4` took 8-36 ms at descriptors 256, 512 and 1,024, and the
//! runtime's one worker thread answered nothing meanwhile, so calls on the connections already
//! open missed Envoy's 20 ms deadline at each doubling. A table grown once, while the process
//! has one thread, never waits again (the kernel never shrinks it). Its cost is the table
//! itself: about 8 bytes a descriptor in the kernel (80 KB for the default 10,000 connections).
//!
//! Must not touch: sockets, listeners or anything that serves (it only reserves room).

use std::os::fd::AsFd;

use crate::telemetry::LIFECYCLE;

/// Descriptors beside the connections: listeners, the stores' pools, the rule files' watches,
/// the statsd socket, the log. Generous, since a missing one costs a wait and a spare one 8 B.
const BESIDE_CONNECTIONS: u64 = 1_024;

/// Raises the open files limit and grows the descriptor table to hold `max_connections`
/// connections beside the service's other descriptors (never past the limit). Call it before
/// the runtime is built: once threads share the table, growing it waits as described above.
pub(super) fn prepare(max_connections: usize) {
    let limit = raise_open_files_limit();
    let wanted = u64::try_from(max_connections)
        .unwrap_or(u64::MAX)
        .saturating_add(BESIDE_CONNECTIONS);
    let Some(highest) = limit.map(|limit| limit.min(wanted).saturating_sub(1)) else {
        return;
    };
    match reserve(highest) {
        Ok(()) => tracing::debug!(target: LIFECYCLE, descriptors = highest + 1, "descriptor table"),
        Err(e) => tracing::warn!(
            error = %e,
            descriptors = highest + 1,
            "cannot grow the descriptor table at start (it grows as connections arrive, and \
             each doubling pauses the thread that accepted)"
        ),
    }
}

/// Raises the soft limit of open files to the hard limit, as Go (and so the reference) does at
/// start: every connection is a descriptor, and the usual soft 1024 runs out first. The limit
/// now in force, or `None` if it cannot be read.
fn raise_open_files_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => {
            tracing::info!(target: LIFECYCLE, limit, "open files limit");
            Some(limit)
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open files limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE)
                .ok()
                .map(|(soft, _)| soft)
        }
    }
}

/// Grows the table to hold descriptor `highest`: a duplicate of standard error at the lowest
/// free number from `highest` on, closed again at once (the table keeps its size).
fn reserve(highest: u64) -> std::io::Result<()> {
    let at = i32::try_from(highest).unwrap_or(i32::MAX);
    let stderr = std::io::stderr();
    let spare = rustix::io::fcntl_dupfd_cloexec(stderr.as_fd(), at)?;
    drop(spare);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_grown_to_hold_the_highest_descriptor() {
        let limit = raise_open_files_limit().expect("the open files limit");
        let at = limit.saturating_sub(1).min(3_000);
        reserve(at).expect("a descriptor under the limit");
        let size = std::fs::read_to_string("/proc/self/status")
            .expect("/proc/self/status")
            .lines()
            .find_map(|l| l.strip_prefix("FDSize:").map(|v| v.trim().parse::<u64>()))
            .expect("an FDSize line")
            .expect("a number");
        assert!(size > at, "FDSize {size} holds descriptor {at}");
    }

    #[test]
    fn a_descriptor_past_the_limit_is_an_error_not_a_panic() {
        assert!(reserve(u64::MAX).is_err());
    }
}
