//! The layer table in `src/lib.rs` is the law: every `crate::` path in a module's code (test
//! items excepted, wherever they stand) names a module its row allows, and every row names only
//! rows above it (the table is ordered by dependency, so it has no cycle).

mod source;
mod words;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use source::{code_of, ident, rust_files, src};

/// The rows of the table in order: `module → allowed modules` (`None` = every module).
fn rows() -> Vec<(String, Option<BTreeSet<String>>)> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let mut out = Vec::new();
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
        out.push((module, allowed));
    }
    out
}

/// `module → allowed modules` from the table.
fn table() -> BTreeMap<String, Option<BTreeSet<String>>> {
    rows().into_iter().collect()
}

/// The crate modules named by `crate::X` in `text`'s code (its test items cut).
fn uses(text: &str) -> BTreeSet<String> {
    let code = code_of(text);
    code.match_indices("crate::")
        .map(|(at, _)| ident(&code[at + 7..]))
        .filter(|name| !name.is_empty())
        .collect()
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

/// Each row names only rows above it: read top down, the table is the order the layers build
/// on one another (and so has no cycle).
#[test]
fn the_layer_table_is_ordered_by_dependency() {
    let rows = rows();
    let mut above = BTreeSet::new();
    let mut reaching_down = Vec::new();
    for (module, allowed) in &rows {
        for used in allowed.iter().flatten() {
            if !above.contains(used) {
                reaching_down.push(format!("`{module}` uses `{used}`, which is not above it"));
            }
        }
        above.insert(module.clone());
    }
    assert!(rows.len() >= 15, "the layer table was not found in lib.rs");
    assert!(reaching_down.is_empty(), "{}", reaching_down.join("\n"));
}

#[test]
fn the_checker_sees_a_back_edge() {
    let text = "use crate::metrics::Metrics;\nfn f() { crate::app::run(); }\n#[cfg(test)]\nuse crate::config;\n#[cfg(test)]\nfn t() { crate::rls::x(); }\nuse crate::pb::Y;";
    let found = uses(text);
    assert_eq!(
        found,
        ["app", "metrics", "pb"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    );
}

/// Only the limiter's port applies operations to the stores: no code outside `storage` and the
/// port itself (`limiter/ops.rs`, `Operations::apply`) calls a store's `apply_ops` or `take_tokens`
/// (not the rest of the limiter either), except the two wrappers that forward one store's calls
/// to another (`metrics::instrumented`, `app::store`). RLS, RLQS and the counters API go
/// through `Operations`, so its routing (`REDIS_PERSECOND`, `POSTGRES_FROM_UNIT`) cannot be
/// bypassed.
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
        let inside = relative.starts_with("storage") || relative == Path::new("limiter/ops.rs");
        if inside || forwarding.contains(&relative) {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(&file).expect("read"));
        for call in [".apply_ops(", ".take_tokens("] {
            if code.contains(call) {
                violations.push(format!("{} calls a store's `{call}`", relative.display()));
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// The sibling modules a module file names in code (`super::X`, or `crate::<its parent>::X`;
/// not in comments and doc links), its test items cut.
/// In a file below a sibling's own (`x/y.rs` of sibling `x`), `super::` is not the parent:
/// only the absolute paths count (`super_is_parent` false).
fn sibling_uses(
    text: &str,
    parent: &str,
    siblings: &BTreeSet<String>,
    super_is_parent: bool,
) -> BTreeSet<String> {
    let code: String = code_of(text)
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let code = code.as_str();
    let mut out = BTreeSet::new();
    let absolute = format!("crate::{parent}::");
    let prefixes: &[&str] = if super_is_parent {
        &["super::", absolute.as_str()]
    } else {
        &[absolute.as_str()]
    };
    for &prefix in prefixes {
        for (at, _) in code.match_indices(prefix) {
            // `super::super::x` is not a sibling; `crate::a::super::` does not occur.
            if prefix == "super::" && code[..at].ends_with("super::") {
                continue;
            }
            let rest = &code[at + prefix.len()..];
            let names: Vec<String> = match rest.strip_prefix('{') {
                // `super::{a, b::C}`: every first segment in the braces.
                Some(inner) => inner
                    .split('}')
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .map(|p| p.trim().split("::").next().unwrap_or("").to_owned())
                    .collect(),
                None => vec![ident(rest)],
            };
            out.extend(names.into_iter().filter(|n| siblings.contains(n)));
        }
    }
    out
}

/// The code files of sibling module `name` in `dir`: `name.rs` or `name/mod.rs` (where
/// `super::` is `dir`'s module) and the files below `name/` (where it is not); test files are
/// left out.
fn module_files(dir: &Path, name: &str) -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    let own = [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ];
    out.extend(
        own.iter()
            .filter(|f| f.is_file())
            .map(|f| (f.clone(), true)),
    );
    let mut below = Vec::new();
    rust_files(&dir.join(name), &mut below);
    let is_test = |f: &Path| {
        f.file_name().is_some_and(|n| n == "tests.rs")
            || f.components().any(|c| c.as_os_str() == "tests")
    };
    below.retain(|f| !own.contains(f) && !is_test(f.strip_prefix(dir).unwrap_or(f)));
    out.extend(below.into_iter().map(|f| (f, false)));
    out
}

/// A cycle in `graph`, if any, as the path around it.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

/// No two files of one module import each other, directly or around a ring: within every
/// directory of `src/`, the sibling modules' uses of one another form no cycle (what one file
/// needs of another goes in a third, or in their parent).
#[test]
fn sibling_files_do_not_import_each_other() {
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    for file in &files {
        if let Some(dir) = file.parent()
            && dir != src()
            && !dirs.contains(&dir.to_path_buf())
        {
            dirs.push(dir.to_path_buf());
        }
    }
    let mut cycles = Vec::new();
    for dir in dirs {
        let parent = dir
            .strip_prefix(src())
            .expect("under src")
            .to_string_lossy()
            .replace('/', "::");
        let siblings: BTreeSet<String> = std::fs::read_dir(&dir)
            .expect("read_dir")
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                match name.strip_suffix(".rs") {
                    Some("mod" | "tests") => None,
                    Some(stem) => Some(stem.to_owned()),
                    None => e.path().is_dir().then_some(name),
                }
            })
            .collect();
        let mut graph = BTreeMap::new();
        for sibling in &siblings {
            let mut named = BTreeSet::new();
            for (file, super_is_parent) in module_files(&dir, sibling) {
                let text = std::fs::read_to_string(&file).expect("read");
                named.extend(sibling_uses(&text, &parent, &siblings, super_is_parent));
            }
            named.remove(sibling);
            graph.insert(sibling.clone(), named);
        }
        if let Some(cycle) = find_cycle(&graph) {
            cycles.push(format!("{parent}: {}", cycle.join(" → ")));
        }
    }
    assert!(cycles.is_empty(), "{}", cycles.join("\n"));
}

#[test]
fn the_cycle_checker_sees_a_ring_and_reads_braces() {
    let siblings: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
    let text = "//! See [`A`](super::a::A).\nuse super::{b::X, other};\nuse crate::m::c;\nuse super::super::a;\n#[cfg(test)]\nuse super::a;";
    assert_eq!(
        sibling_uses(text, "m", &siblings, true),
        ["b", "c"].map(String::from).into()
    );
    let ring: BTreeMap<String, BTreeSet<String>> =
        [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"])]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.into_iter().map(String::from).collect()))
            .collect();
    assert_eq!(
        find_cycle(&ring),
        Some(["a", "b", "c", "a"].map(String::from).to_vec())
    );
    let mut line = ring.clone();
    line.insert("c".into(), BTreeSet::new());
    assert_eq!(find_cycle(&line), None);
}

/// The type names a file declares (`pub`/`pub(crate)`/private `struct` and `enum`), outside its
/// test items.
fn declared_types(text: &str) -> BTreeSet<String> {
    let code = code_of(text);
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let line = line.trim_start();
        let rest = line
            .strip_prefix("pub ")
            .or_else(|| line.strip_prefix("pub(crate) "))
            .or_else(|| line.strip_prefix("pub(super) "))
            .unwrap_or(line);
        let named = ["struct ", "enum "]
            .iter()
            .filter_map(|kind| rest.strip_prefix(kind))
            .map(ident)
            .filter(|name| !name.is_empty());
        out.extend(named);
    }
    out
}

/// A setting's type is declared once: the types the `settings` module declares are declared
/// nowhere else (where a component has its own options type, `settings` builds that one, as
/// it does `MemcachedTransport` and `KeyLayout`, instead of a copy mapped by hand in `app`).
#[test]
fn settings_types_are_not_redeclared_elsewhere() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let read = |f: &PathBuf| std::fs::read_to_string(f).expect("read");
    let in_settings = |f: &PathBuf| f.starts_with(src().join("settings"));
    let settings: BTreeSet<String> = files
        .iter()
        .filter(|f| in_settings(f))
        .flat_map(|f| declared_types(&read(f)))
        .collect();
    assert!(settings.contains("AdaptiveConcurrency"), "{settings:?}");
    let mut twice = Vec::new();
    for file in files.iter().filter(|f| !in_settings(f)) {
        for name in declared_types(&read(file)).intersection(&settings) {
            let relative = file.strip_prefix(src()).unwrap_or(file);
            twice.push(format!("{name} in settings and in {}", relative.display()));
        }
    }
    assert!(twice.is_empty(), "{}", twice.join("\n"));
}
