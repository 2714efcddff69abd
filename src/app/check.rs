//! `turnstile check-config`: load a rule directory and report, without serving.

use crate::config::{self, ConfigErrors, LoadOptions};

/// `turnstile check-config DIR [--merge-domain-config] [--reference] [--rlqs]` from its
/// arguments (after `check-config`): prints the report (or the errors) and returns the exit
/// code; `None` when no directory is given (usage). `env` reads the environment's settings
/// (`BACKEND_TYPE`, `REDIS_URL`, `MEMCACHE_CLASSIC_PROTOCOL`): limits the store they name cannot
/// count are errors, as when the service loads them.
pub fn check_config_cli(args: &[String], env: &dyn Fn(&str) -> Option<String>) -> Option<u8> {
    let flag = |name: &str| args.iter().any(|a| a == name);
    let dir = args.iter().find(|a| !a.starts_with("--"))?;
    let backend = crate::settings::backend_type(env);
    let memcached = matches!(backend.as_str(), "memcache" | "memcached");
    let options = LoadOptions {
        ignore_dotfiles: false,
        merge_domains: flag("--merge-domain-config"),
        store: super::options::store_bounds(
            backend == "redis",
            memcached && crate::settings::memcached_classic_protocol(env),
        ),
    };
    let dir = std::path::Path::new(dir);
    match check_config(dir, options, flag("--reference"), flag("--rlqs")) {
        Ok((report, passed)) => {
            println!("{report}");
            Some(u8::from(!passed))
        }
        Err(errors) => {
            eprintln!("{errors}");
            Some(1)
        }
    }
}

/// `turnstile check-config DIR [--reference] [--rlqs]`: the report, and whether the files pass
/// (they load; with `reference`, also in envoyproxy/ratelimit, i.e. they use no extension).
/// With `rlqs`, the report also says how RLQS serves every limit.
pub fn check_config(
    dir: &std::path::Path,
    options: LoadOptions,
    reference: bool,
    rlqs: bool,
) -> Result<(String, bool), ConfigErrors> {
    config::load_dir(dir, options).map(|loaded| {
        let mut out = String::new();
        for warning in loaded.warnings {
            out.push_str(&format!("warning: {warning}\n"));
        }
        out.push_str("all rate limit configs ok");
        if rlqs {
            let mut lines: Vec<String> = loaded
                .rules
                .limits()
                .into_iter()
                .map(crate::quota::describe)
                .collect();
            lines.sort();
            out.push_str("\nRLQS buckets (bucket id → assignment):");
            for line in lines {
                out.push_str(&format!("\n{line}"));
            }
        }
        if !reference {
            return (out, true);
        }
        if loaded.extensions.is_empty() {
            out.push_str("\nno Turnstile extensions: envoyproxy/ratelimit loads these files too");
            return (out, true);
        }
        out.push_str(&format!(
            "\n{} uses of Turnstile extensions (envoyproxy/ratelimit refuses these files):",
            loaded.extensions.len()
        ));
        for extension in loaded.extensions {
            out.push_str(&format!("\n{extension}"));
        }
        (out, false)
    })
}
