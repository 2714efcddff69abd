//! The scripts' release builds keep `--cfg tokio_unstable` whatever flags the user sets
//! (`scripts/lib/build.sh`): cargo drops `.cargo/config.toml`'s rustflags when RUSTFLAGS,
//! CARGO_BUILD_RUSTFLAGS or CARGO_ENCODED_RUSTFLAGS is set, and a binary without the flag
//! serves ~0.6x the calls per core. Every script that builds goes through the helper.

use std::process::Command;

/// What `keep_tokio_unstable` leaves in `var` when it was set to `value` (`None`: unset).
fn kept(var: &str, value: Option<&str>) -> String {
    let mut sh = Command::new("sh");
    sh.current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("-c")
        .arg(format!(
            ". scripts/lib/build.sh && keep_tokio_unstable 2>/dev/null && printf '%s' \"${{{var}-unset}}\""
        ))
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    if let Some(value) = value {
        sh.env(var, value);
    }
    let out = sh.output().expect("sh runs");
    assert!(out.status.success(), "{var}={value:?}: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn a_build_with_its_own_rustflags_keeps_tokio_unstable() {
    assert_eq!(
        kept("RUSTFLAGS", Some("-C debuginfo=0")),
        "-C debuginfo=0 --cfg tokio_unstable"
    );
    assert_eq!(kept("RUSTFLAGS", Some("")), "--cfg tokio_unstable");
    assert_eq!(
        kept("RUSTFLAGS", Some("--cfg tokio_unstable -C lto")),
        "--cfg tokio_unstable -C lto",
        "kept once, not added twice"
    );
    assert_eq!(
        kept("RUSTFLAGS", None),
        "unset",
        "config.toml's flags apply"
    );
    assert_eq!(
        kept("CARGO_BUILD_RUSTFLAGS", Some("-C debuginfo=0")),
        "-C debuginfo=0 --cfg tokio_unstable"
    );
    assert_eq!(
        kept("CARGO_ENCODED_RUSTFLAGS", Some("-Cdebuginfo=0")),
        "-Cdebuginfo=0\u{1f}--cfg\u{1f}tokio_unstable"
    );
}

#[test]
fn every_script_and_the_image_build_keep_the_flag() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let scripts = std::fs::read_dir(root.join("scripts")).expect("scripts/");
    let mut paths: Vec<_> = scripts.map(|e| e.expect("entry").path()).collect();
    paths.push(root.join("deploy/Dockerfile"));
    let mut building = 0;
    for path in paths {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
            assert!(
                !line.contains("cargo build --release"),
                "{}: builds a release without scripts/lib/build.sh: {line}",
                path.display()
            );
            building += usize::from(line.contains("release_build"));
        }
    }
    assert!(building >= 12, "{building} builds go through the helper");
}
