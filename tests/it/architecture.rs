//! The layer table in `src/lib.rs` is the law: every `crate::` path in a module's code (tests
//! excepted) names a module its row allows, and the table itself has no cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// `module → allowed modules` from the table (`None` = every module).
fn table() -> BTreeMap<String, Option<BTreeSet<String>>> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let mut out = BTreeMap::new();
    for line in lib.lines() {
        let cells: Vec<&str> = line
            .trim_start_matches("//!")
            .trim()
            .split('|')
            .map(str::trim)
            .collect();
        // | `module` | owns | may use |
        if cells.len() != 5 || !cells[1].starts_with('`') {
            continue;
        }
        let module = cells[1].trim_matches('`').to_owned();
        let allowed = if cells[3] == "every module" {
            None
        } else {
            Some(
                cells[3]
                    .split(',')
                    .map(|m| m.trim().trim_matches('`').to_owned())
                    .filter(|m| !m.is_empty())
                    .collect(),
            )
        };
        out.insert(module, allowed);
    }
    out
}

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).expect("read_dir").flatten() {
            rust_files(&entry.path(), out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// The crate modules named by `crate::X` in `text`, up to its `#[cfg(test)]` part.
fn uses(text: &str) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut out = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let name: String = code[at + 7..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

#[test]
fn every_module_uses_only_what_its_row_allows() {
    let table = table();
    assert!(table.len() >= 15, "the layer table was not found in lib.rs");
    let mut violations = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(src()).expect("src").flatten().collect();
    entries.sort_by_key(|e| e.path());
    for entry in entries {
        let path = entry.path();
        let module = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let Some(allowed) = table.get(&module) else {
            violations.push(format!("module `{module}` has no row in the lib.rs table"));
            continue;
        };
        let mut files = Vec::new();
        rust_files(&path, &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).expect("read");
            for used in uses(&text) {
                let ok = used == module || allowed.as_ref().is_none_or(|a| a.contains(&used));
                if !ok {
                    violations.push(format!(
                        "{} uses crate::{used}, which the `{module}` row does not allow",
                        file.strip_prefix(src()).unwrap_or(&file).display()
                    ));
                }
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn the_layer_table_has_no_cycle() {
    let table = table();
    // Repeatedly remove modules whose allowed modules are all removed already.
    let mut left: BTreeMap<&String, BTreeSet<&String>> = table
        .iter()
        .filter_map(|(m, a)| a.as_ref().map(|a| (m, a.iter().collect())))
        .collect();
    loop {
        let ready: Vec<&String> = left
            .iter()
            .filter(|(_, deps)| deps.iter().all(|d| !left.contains_key(d)))
            .map(|(m, _)| *m)
            .collect();
        if ready.is_empty() {
            break;
        }
        for m in ready {
            left.remove(m);
        }
    }
    assert!(left.is_empty(), "modules in a cycle: {:?}", left.keys());
}

#[test]
fn the_checker_sees_a_back_edge() {
    let text = "use crate::metrics::Metrics;\nfn f() { crate::app::run(); }\n#[cfg(test)]\nuse crate::config;";
    let found = uses(text);
    assert_eq!(
        found,
        ["app", "metrics"].iter().map(|s| (*s).to_owned()).collect()
    );
}

/// Only the limiter's port applies operations to the stores: no code outside `limiter` and
/// `storage` calls a store's `hit` or `bucket`, except the two wrappers that forward one store's
/// calls to another (`metrics::instrumented`, `app::store`). RLS, RLQS and every caller to come
/// go through `Limiter`, so its routing (`REDIS_PERSECOND`) cannot be bypassed.
#[test]
fn only_the_limiter_reaches_the_stores() {
    let forwarding = [
        PathBuf::from("metrics/instrumented.rs"),
        PathBuf::from("app/store.rs"),
    ];
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut violations = Vec::new();
    for file in files {
        let relative = file.strip_prefix(src()).unwrap_or(&file).to_path_buf();
        let inside = relative.starts_with("limiter") || relative.starts_with("storage");
        if inside || forwarding.contains(&relative) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read");
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for call in [".hit(", ".bucket("] {
            if code.contains(call) {
                violations.push(format!("{} calls a store's `{call}`", relative.display()));
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}
