//! How every real component a test starts is stopped, the one way for all of them: when its
//! handle is dropped, and when the test binary exits without dropping it (a panic in another
//! thread, a handle in a static, `kill -9` of the test run). No test run leaves a memcached, a
//! redis-server, a PostgreSQL or an Envoy behind to take a port or memory from the next.
//!
//! A [`Lifeline`] is a small shell holding the read end of a pipe from the test process, with
//! the command that stops the component. Dropped, the handle closes the pipe and waits: the
//! shell runs the command. The test process gone, the kernel closes the pipe: the same. A
//! [`Supervised`] process is a child with a lifeline that signals it; the lifeline always fires
//! before the child is reaped, so its process id cannot have been reused by then.
//!
//! Must not touch: what a component is started with, how a test waits for it to be ready.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};

/// A shell that runs its stop command when this handle is dropped or the test process exits.
#[derive(Debug)]
pub struct Lifeline {
    shell: Child,
    pipe: Option<ChildStdin>,
}

impl Lifeline {
    /// A lifeline that runs `stop` (its program and arguments; not its environment).
    pub fn new(stop: &Command) -> Lifeline {
        // `read` fails at the end of the pipe (fire: run the command); a line disarms it.
        let shell = Command::new("sh")
            .args([
                "-c",
                r#"if read -r _; then exit 0; fi; exec "$@""#,
                "lifeline",
            ])
            .arg(stop.get_program())
            .args(stop.get_args())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the lifeline shell");
        let mut shell = shell;
        let pipe = shell.stdin.take();
        Lifeline { shell, pipe }
    }

    /// A lifeline that sends `signal` (`TERM`, `KILL`, ...) to process `pid`.
    pub fn signal(pid: u32, signal: &str) -> Lifeline {
        let mut kill = Command::new("kill");
        kill.arg(format!("-{signal}")).arg(pid.to_string());
        Lifeline::new(&kill)
    }

    /// Lets the shell go without running its command (the component is gone already).
    pub fn disarm(mut self) {
        if let Some(mut pipe) = self.pipe.take() {
            let _ = pipe.write_all(b"\n");
        }
        let _ = self.shell.wait();
    }
}

impl Drop for Lifeline {
    /// Runs the stop command (unless disarmed) and waits until it has finished.
    fn drop(&mut self) {
        drop(self.pipe.take());
        let _ = self.shell.wait();
    }
}

/// A child process that is stopped with `signal` when dropped or when the test process exits.
#[derive(Debug)]
pub struct Supervised {
    child: Child,
    lifeline: Option<Lifeline>,
}

impl Supervised {
    /// Spawns `command`, to be stopped with `signal` (`TERM`, `KILL`, ...).
    pub fn spawn(command: &mut Command, signal: &str) -> std::io::Result<Supervised> {
        let child = command.spawn()?;
        let lifeline = Some(Lifeline::signal(child.id(), signal));
        Ok(Supervised { child, lifeline })
    }

    /// The process id (the component's own: no wrapper is in between).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited (reaped now; the lifeline is disarmed, as the id is free).
    pub fn has_exited(&mut self) -> bool {
        let exited = self.child.try_wait().ok().flatten().is_some();
        if exited && let Some(lifeline) = self.lifeline.take() {
            lifeline.disarm();
        }
        exited
    }

    /// Stops the process and waits until it has exited; its exit status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        drop(self.lifeline.take());
        self.child.wait().ok()
    }

    /// Waits for the process to exit by itself; its exit status.
    pub fn wait(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.wait().ok();
        if let Some(lifeline) = self.lifeline.take() {
            lifeline.disarm();
        }
        status
    }

    /// The child's standard error, when it was piped (once).
    pub fn take_stderr(&mut self) -> Option<std::process::ChildStderr> {
        self.child.stderr.take()
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    fn sleeper() -> Command {
        let mut sleep = Command::new("sleep");
        sleep.arg("600");
        sleep
    }

    /// The pipe closing (as on drop, and as when the test process dies) runs the stop command;
    /// a disarmed lifeline leaves the process alone.
    #[test]
    fn a_lifeline_stops_its_process_when_its_pipe_closes_and_not_when_disarmed() {
        let mut alone = sleeper().spawn().expect("sleep");
        Lifeline::signal(alone.id(), "TERM").disarm();
        assert_eq!(
            alone.try_wait().expect("status"),
            None,
            "disarmed: still running"
        );

        drop(Lifeline::signal(alone.id(), "TERM"));
        let status = alone.wait().expect("status");
        assert_eq!(
            status.signal(),
            Some(15),
            "fired: stopped by SIGTERM ({status})"
        );
    }

    /// A supervised process is stopped with its signal, and one that exited by itself is seen
    /// to have exited (its lifeline then disarmed, so no later signal reaches its old id).
    #[test]
    fn a_supervised_process_stops_with_its_signal_or_is_seen_to_exit() {
        let mut sleeping = Supervised::spawn(&mut sleeper(), "KILL").expect("sleep");
        assert!(!sleeping.has_exited());
        let status = sleeping.stop().expect("status");
        assert_eq!(status.signal(), Some(9), "{status}");

        let mut done = Supervised::spawn(&mut Command::new("true"), "KILL").expect("true");
        let status = done.wait().expect("status");
        assert!(status.success(), "{status}");
        assert!(
            done.lifeline.is_none(),
            "disarmed once the process was reaped"
        );
    }
}
