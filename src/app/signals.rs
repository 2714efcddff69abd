//! The process's stop signals: the first SIGTERM or SIGINT starts the drain; a second one (an
//! impatient Ctrl-C on a developer's terminal) cuts the drain short.

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Two futures: the first resolves on the first SIGTERM/SIGINT, the second on the second.
pub(super) fn first_and_second() -> (
    impl Future<Output = ()> + Send + 'static,
    impl Future<Output = ()> + Send + 'static,
) {
    let (count_tx, count_rx) = watch::channel(0u32);
    // Registered here, before the caller announces that it serves, so that no early signal
    // meets the default disposition (which would end the process without a drain).
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    tokio::spawn(async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            tracing::error!("cannot listen for signals; stop the process with SIGKILL");
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => {},
                _ = int.recv() => {},
            }
            count_tx.send_modify(|n| *n += 1);
        }
    });
    let nth = move |n: u32| {
        let mut rx = count_rx.clone();
        async move {
            if rx.wait_for(|seen| *seen >= n).await.is_err() {
                // The listener could not start: never resolve, as no signal will come.
                std::future::pending::<()>().await;
            }
        }
    };
    (nth(1), nth(2))
}
