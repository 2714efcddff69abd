//! The status page in a real headless Chromium (`tests/peers/status_browser.py`, selenium):
//! Turnstile on memcached; the page loads and draws with no console error; within 2 s of a
//! flood it shows the rule over its limit, the flooding value, and a value of
//! `<script>alert(1)</script>` as text; when memcached stops, the store's breaker is shown
//! open. The screenshot it takes is the one in docs/observability.md (when
//! `TURNSTILE_SCREENSHOT` names where to write it).

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdout, Command, Stdio};

use super::RULES;
use crate::process::{Process, rules_root, temp_dir};
use crate::support::{Memcached, missing, peers_venv, req1};

fn next_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).expect("the browser's output");
    line.trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_in_a_real_browser() {
    let Some(venv) = peers_venv() else { return };
    if !std::path::Path::new("/usr/bin/chromedriver").exists() {
        missing("chromium and chromium-driver (Debian packages)");
        return;
    }
    let Some(mut mc) = Memcached::start() else {
        return;
    };
    let root = rules_root(RULES);
    let addr = mc.addr();
    let p = Process::start(
        &root,
        &[("BACKEND_TYPE", "memcache"), ("MEMCACHE_HOST_PORT", &addr)],
    );
    let screenshot = std::env::var("TURNSTILE_SCREENSHOT")
        .unwrap_or_else(|_| temp_dir("status").join("status.png").display().to_string());
    let mut browser = Command::new(venv.join("bin/python"))
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/peers/status_browser.py"
        ))
        .arg(format!("http://127.0.0.1:{}/", p.debug))
        .arg(&screenshot)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let mut to = browser.stdin.take().expect("stdin");
    let mut from = BufReader::new(browser.stdout.take().expect("stdout"));
    assert_eq!(next_line(&mut from), "LOADED");

    // The flood: one user far over its limit, a few others, and a hostile value.
    let mut client = p.client().await;
    for (user, calls) in [
        ("mallory", 40),
        ("ann", 6),
        ("<script>alert(1)</script>", 8),
    ] {
        for _ in 0..calls {
            client
                .should_rate_limit(req1("shop", &[("user", user)]))
                .await
                .expect("a decision");
        }
    }
    writeln!(to, "FLOODED").expect("to the browser");
    assert_eq!(next_line(&mut from), "SEEN");

    // memcached stops; calls keep coming (their failures open the breaker).
    mc.kill();
    writeln!(to, "STOPPED").expect("to the browser");
    let calling = tokio::spawn(async move {
        loop {
            let _ = client
                .should_rate_limit(req1("shop", &[("user", "bob")]))
                .await;
            tokio::task::yield_now().await;
        }
    });
    let open = tokio::task::spawn_blocking(move || next_line(&mut from))
        .await
        .expect("browser output");
    calling.abort();
    assert_eq!(open, "OPEN");
    assert!(browser.wait().expect("browser exit").success());
    assert!(std::fs::metadata(&screenshot).is_ok_and(|m| m.len() > 10_000));
}
