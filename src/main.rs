//! The `turnstile` binary: settings → telemetry → serve → exit code. All logic is in the library.
//!
//! Usage: `turnstile [--config-dir DIR]`, `turnstile check-config DIR [--merge-domain-config]
//! [--reference] [--rlqs]` or `turnstile migrate [--check]`.

use std::path::PathBuf;
use std::process::ExitCode;

use turnstile::{app::runtime::build_serving, settings::Settings};

/// mimalloc instead of the system allocator: measured faster on the request path (malloc and
/// memmove were about a quarter of the server's profile); the ratio is in BENCHMARKS.md. Built
/// without transparent huge pages (`no_thp`): with them, every connection's first buffers were
/// backed by 2 MiB pages, 35 KB per idle connection against 19 KB without, at the same
/// throughput (BENCHMARKS.md, "Cost as the work grows").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("check-config") => {
            match turnstile::app::check_config_cli(&args[1..], &|name| std::env::var(name).ok()) {
                Some(code) => ExitCode::from(code),
                None => usage(),
            }
        }
        Some("migrate") => match args.get(1).map(String::as_str) {
            None => migrate(false),
            Some("--check") if args.len() == 2 => migrate(true),
            _ => usage(),
        },
        Some("--config-dir") => match args.get(1) {
            Some(dir) if args.len() == 2 => serve(Some(PathBuf::from(dir))),
            _ => usage(),
        },
        None => serve(None),
        Some(_) => usage(),
    }
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: turnstile [--config-dir DIR] | turnstile check-config DIR [--merge-domain-config] [--reference] [--rlqs] | turnstile migrate [--check]"
    );
    ExitCode::from(64)
}

/// `turnstile migrate [--check]`: PostgreSQL's schema, by hand.
fn migrate(check: bool) -> ExitCode {
    ExitCode::from(turnstile::app::migrate_main(
        &|name| std::env::var(name).ok(),
        check,
    ))
}

fn serve(config_dir: Option<PathBuf>) -> ExitCode {
    let settings = match Settings::from_env(&|name| std::env::var(name).ok(), config_dir) {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("turnstile: {err}");
            return ExitCode::from(64);
        }
    };
    turnstile::telemetry::init(&settings.log_level, settings.log_json);
    let runtime = match build_serving(settings.grpc_limits.max_connections) {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("turnstile: starting the runtime: {err}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(turnstile::app::run(settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("turnstile: {err}");
            ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(1))
        }
    }
}
