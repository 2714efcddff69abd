//! The open-files limit: raised to the hard limit at start, and running out of descriptors makes
//! the accept loop pause rather than spin.

use super::Binary;
use crate::process::RULES;

/// `line` without the text format's colour codes (ESC `[` … `m`), which it puts between a
/// field's name and its value.
fn without_colours(line: &str) -> String {
    let mut parts = line.split('\u{1b}');
    let first = parts.next().unwrap_or_default().to_owned();
    parts.fold(first, |mut plain, part| {
        plain.push_str(part.split_once('m').map_or(part, |(_, rest)| rest));
        plain
    })
}

#[test]
fn the_open_files_limit_is_raised_and_running_out_does_not_spin() {
    // Soft 256, hard 4096: the service raises the soft limit to the hard one at start.
    let p = Binary::start_under(Some("256:4096"), RULES, &[]);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", p.child.id())).expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_default()
        .to_owned();
    assert!(line.split_whitespace().nth(3) == Some("4096"), "{line}");
    drop(p);

    // Hard 64: connections exhaust the descriptors; the accept loop pauses instead of spinning:
    // each failure waits twice as long as the one before, from 5 ms to the 1 s ceiling, which
    // it reaches within a dozen failures (a loop that did not pause would log failure after
    // failure without ever getting there).
    let mut p = Binary::start_under(Some("64:64"), RULES, &[]);
    let mut held = Vec::new();
    for _ in 0..100 {
        if let Ok(c) = std::net::TcpStream::connect(("127.0.0.1", p.grpc)) {
            held.push(c);
        }
    }
    let mut pauses = Vec::new();
    while pauses.len() < 40 {
        let line = p.wait_for_log("accepting a gRPC connection failed");
        let ceiling = without_colours(&line).contains("pause=1s");
        pauses.push(line);
        if ceiling {
            return;
        }
    }
    panic!("the accept loop never paused 1 s: {}", pauses.join(""));
}
