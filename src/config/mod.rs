//! Rule files → [`RuleSet`]. One loader with three callers: start-up, hot reload and
//! `turnstile check-config`. Parsing (`raw`) is the only place that knows the YAML crate;
//! `compile` turns raw structs into the immutable model and collects every error with file,
//! line, column and path.
//!
//! Must not touch: protobuf types, tonic, storage.

mod compile;
mod error;
mod messages;
mod rate;
mod raw;

pub use error::{ConfigError, ConfigErrors};

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::rules::RuleSet;

/// The largest rule file accepted, in YAML nodes (maps, lists and scalars; a flat descriptor is
/// about eleven): room for well over 100,000 descriptors in one file.
pub(crate) const MAX_NODES: usize = 4_000_000;
/// The deepest nesting accepted (each descriptor level is two: its list and its map).
pub(crate) const MAX_DEPTH: usize = 256;

/// How a set of rule files is combined.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions {
    /// Skip files whose name starts with `.` (`RUNTIME_IGNOREDOTFILES`). Directories whose name
    /// starts with `.` (Kubernetes' `..data`, `..2024_…`) are never entered, so a ConfigMap's
    /// files are not loaded twice.
    pub ignore_dotfiles: bool,
    /// Let several files share a domain (`MERGE_DOMAIN_CONFIG`).
    pub merge_domains: bool,
    /// What the counter store in use can count; a limit beyond it is refused at load.
    pub store: StoreBounds,
}

/// What the counter store in use can count exactly, checked against every limit when rules
/// load, so that a limit the store cannot count is refused in words naming the store (by
/// `check-config` too) instead of failing every call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreBounds {
    /// The store as the operator names it (`BACKEND_TYPE=redis`), for messages.
    pub name: &'static str,
    /// A token bucket's capacity (requests per unit + burst) times its period in milliseconds
    /// must stay below this (`None`: no bound).
    pub bucket_capacity_period_ms: Option<u128>,
    /// The store counts fixed and sliding windows only (memcached's classic commands have no
    /// compare-and-swap here): token buckets and concurrency limits are refused at load.
    pub windows_only: bool,
}

/// A successfully loaded rule set.
#[derive(Debug)]
pub struct Loaded {
    /// The compiled rules.
    pub rules: RuleSet,
    /// Things worth a log line that do not stop the load (ignored keys).
    pub warnings: Vec<String>,
    /// Every use of a key that envoyproxy/ratelimit does not know (it refuses such files), as
    /// `file:line:col: path: ...`, for teams that run both services.
    pub extensions: Vec<String>,
    /// How many files were read.
    pub files: usize,
}

/// The stack of the thread that reads and compiles rule files: both recurse once per nesting
/// level, and the reader's depth limit (`raw::MAX_DEPTH`) must be reachable without
/// overflowing (an ordinary 2 or 8 MiB thread stack is not enough in debug builds).
const LOADER_STACK: usize = 64 * 1024 * 1024;

/// Compiles rule files given as `(origin, text)` pairs, in the order given, on a thread with a
/// stack large enough for the deepest file the reader accepts.
pub fn parse_files(
    files: &[(String, String)],
    options: LoadOptions,
) -> Result<Loaded, ConfigErrors> {
    std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new()
            .name("config-loader".into())
            .stack_size(LOADER_STACK)
            .spawn_scoped(scope, || compile_files(files, options));
        match spawned {
            Ok(loader) => loader.join().unwrap_or_else(|_| {
                Err(ConfigErrors(vec![ConfigError {
                    origin: "(configuration)".into(),
                    line: 0,
                    column: 0,
                    path: String::new(),
                    message: "the loader failed unexpectedly; the previous rules stay".into(),
                }]))
            }),
            // No thread to be had: load on this one (deep files may then fail to load).
            Err(_) => compile_files(files, options),
        }
    })
}

/// [`parse_files`] on the calling thread, for the fuzz target, which calls it from a thread of
/// its own with the loader's stack (`cargo fuzz` sets `cfg(fuzzing)`).
#[cfg(fuzzing)]
pub fn parse_files_on_this_thread(
    files: &[(String, String)],
    options: LoadOptions,
) -> Result<Loaded, ConfigErrors> {
    compile_files(files, options)
}

/// The stack the loader's thread gets (for the fuzz target, which must match it).
#[cfg(fuzzing)]
pub const FUZZ_LOADER_STACK: usize = LOADER_STACK;

fn compile_files(files: &[(String, String)], options: LoadOptions) -> Result<Loaded, ConfigErrors> {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let mut extensions = Vec::new();
    let mut domains = HashMap::new();
    for (origin, text) in files {
        match raw::parse(text) {
            Ok(parsed) => compile::FileCompiler {
                origin,
                store: options.store,
                errors: &mut errors,
                warnings: &mut warnings,
                extensions: &mut extensions,
            }
            .compile(parsed, &mut domains, options.merge_domains),
            Err(err) => errors.push(ConfigError {
                origin: origin.clone(),
                line: err.pos.line,
                column: err.pos.column,
                path: String::new(),
                message: format!("error loading config file: {}", err.message),
            }),
        }
    }
    if errors.is_empty() {
        Ok(Loaded {
            rules: RuleSet::new(domains),
            warnings,
            extensions,
            files: files.len(),
        })
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Loads every rule file under `dir` (recursively, sorted by path).
pub fn load_dir(dir: &Path, options: LoadOptions) -> Result<Loaded, ConfigErrors> {
    let paths = list_files(dir, options).map_err(|e| ConfigErrors(vec![e]))?;
    let mut files = Vec::with_capacity(paths.len());
    let mut errors = Vec::new();
    for path in paths {
        let origin = path.display().to_string();
        match std::fs::read_to_string(&path) {
            Ok(text) => files.push((origin, text)),
            Err(err) => errors.push(io_error(&origin, &err)),
        }
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    parse_files(&files, options)
}

fn io_error(origin: &str, err: &std::io::Error) -> ConfigError {
    ConfigError {
        origin: origin.to_owned(),
        line: 0,
        column: 0,
        path: String::new(),
        message: format!("cannot read: {err}"),
    }
}

fn list_files(dir: &Path, options: LoadOptions) -> Result<Vec<PathBuf>, ConfigError> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    // Directories already read, by their real path: a symbolic link back to one of them is a
    // loop (reading on would load the same files again and again).
    let mut seen = std::collections::HashSet::new();
    while let Some(current) = pending.pop() {
        if let Ok(real) = std::fs::canonicalize(&current)
            && !seen.insert(real.clone())
        {
            return Err(ConfigError {
                origin: current.display().to_string(),
                line: 0,
                column: 0,
                path: String::new(),
                message: format!(
                    "symbolic link loop: this directory is {}, which was already read; \
                     remove the link",
                    real.display()
                ),
            });
        }
        let entries = std::fs::read_dir(&current)
            .map_err(|e| io_error(&current.display().to_string(), &e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_error(&current.display().to_string(), &e))?;
            let path = entry.path();
            let dot = entry.file_name().to_string_lossy().starts_with('.');
            // `metadata` follows symlinks, as a ConfigMap's files are symlinks into `..data`.
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                if !dot {
                    pending.push(path);
                }
            } else if meta.is_file() && !(dot && options.ignore_dotfiles) {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}
