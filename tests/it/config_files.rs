//! Rule files: every invalid fixture gives its message with file, line and column; every valid
//! file (the shipped examples included) loads; directory loading (merge, dot files, Kubernetes
//! ConfigMap layout); and the `check-config` command of the real binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use turnstile::config::{LoadOptions, load_dir, parse_files};

use crate::support::process::temp_dir;
use turnstile::rules::{MetaValue, PerUnit, Rate, Unit};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config")
}

fn load_one(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).expect("fixture");
    let name = path
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    parse_files(&[(name, text)], LoadOptions::default())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Each invalid fixture and the start of the error it must give: file, line and column, the
/// field, and what belongs there.
const INVALID_FIXTURES: &[(&str, &str)] = &[
    (
        "bad_limit_unit.yaml",
        "bad_limit_unit.yaml:5:13: descriptors[0].rate_limit.unit: invalid rate limit unit 'foo'",
    ),
    (
        "bad_yaml.yaml",
        "bad_yaml.yaml:2:14: error loading config file: unclosed quote",
    ),
    (
        "duplicate_key.yaml",
        "duplicate_key.yaml:6:5: descriptors[1]: duplicate descriptor composite key 'test-domain.key1_value1'",
    ),
    (
        "empty_domain.yaml",
        "empty_domain.yaml:1:1: domain: config file cannot have empty domain",
    ),
    (
        "empty_key.yaml",
        "empty_key.yaml:3:5: descriptors[0]: descriptor has empty key",
    ),
    (
        "misspelled_key.yaml",
        "misspelled_key.yaml:4:5: error loading config file: unknown key 'ratelimit' (did you mean 'rate_limit'?)",
    ),
    (
        "misspelled_key2.yaml",
        "misspelled_key2.yaml:4:33: error loading config file: unknown key 'requestsperunit' (did you mean 'requests_per_unit'?)",
    ),
    (
        "negative_requests.yaml",
        "negative_requests.yaml:4:52: error loading config file: expected a whole number from 0 to 4294967295",
    ),
    (
        "non_map_list.yaml",
        "non_map_list.yaml:2:15: error loading config file: expected a descriptor map (`key`, and optionally `value`, `rate_limit`, `descriptors`, ...), found the text 'a'",
    ),
    (
        "non_string_key.yaml",
        "non_string_key.yaml:1:1: error loading config file: unknown key '0.25': not a rule file key",
    ),
    (
        "descriptors_not_a_list.yaml",
        "descriptors_not_a_list.yaml:2:1: error loading config file: expected a list of descriptor maps, found the text 'a'",
    ),
    (
        "rate_limit_not_a_map.yaml",
        "rate_limit_not_a_map.yaml:4:5: error loading config file: expected a rate_limit map (`unit` and `requests_per_unit`, or `unlimited: true`, ...), found the number 5",
    ),
    (
        "top_level_list.yaml",
        "top_level_list.yaml:1:1: error loading config file: expected a rule file: a map with `domain` and `descriptors`, found a list",
    ),
    (
        "top_level_scalar.yaml",
        "top_level_scalar.yaml:1:1: error loading config file: expected a rule file: a map with `domain` and `descriptors`, found the number 0.25",
    ),
    (
        "replaces_empty.yaml",
        "replaces_empty.yaml:9:11: descriptors[0].rate_limit.replaces[0]: should not have an empty replaces entry",
    ),
    (
        "replaces_self.yaml",
        "replaces_self.yaml:9:11: descriptors[0].rate_limit.replaces[0]: replaces should not contain name of same descriptor",
    ),
    (
        "share_threshold_without_wildcard.yaml",
        "share_threshold_without_wildcard.yaml:5:22: descriptors[0].share_threshold: share_threshold can only be used with wildcard values (containing '*'), but found key 'files_files'",
    ),
    (
        "burst_without_token_bucket.yaml",
        "burst_without_token_bucket.yaml:8:14: descriptors[0].rate_limit.burst: burst applies only to `algorithm: token_bucket` (this limit is sliding_window)",
    ),
    (
        "unit_multiplier_zero.yaml",
        "unit_multiplier_zero.yaml:6:24: descriptors[0].rate_limit.unit_multiplier: unit_multiplier must be at least 1 (the period is unit × unit_multiplier)",
    ),
    (
        "unit_multiplier_absurd.yaml",
        "unit_multiplier_absurd.yaml:6:24: descriptors[0].rate_limit.unit_multiplier: unit_multiplier 11 makes a period longer than 10 years (at most 10 for unit 'year')",
    ),
    (
        "algorithm_misspelled.yaml",
        "algorithm_misspelled.yaml:7:18: descriptors[0].rate_limit.algorithm: unknown algorithm 'sliding-window' (one of fixed_window, sliding_window, token_bucket, concurrency)",
    ),
    (
        "store_failure_unknown.yaml",
        "store_failure_unknown.yaml:7:25: descriptors[0].rate_limit.on_store_failure: unknown store failure mode 'closed' (one of unavailable, open, local)",
    ),
    (
        "store_failure_and_fail_open.yaml",
        "store_failure_and_fail_open.yaml:8:25: descriptors[0].rate_limit.on_store_failure: give either on_store_failure or fail_open, not both (fail_open: true is on_store_failure: open)",
    ),
    (
        "concurrency_unlimited.yaml",
        "concurrency_unlimited.yaml:6:18: descriptors[0].rate_limit.algorithm: an unlimited rate_limit is never counted, so `algorithm` means nothing here (remove it, or remove `unlimited: true`)",
    ),
    (
        "unlimited_with_unit.yaml",
        "unlimited_with_unit.yaml:6:13: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited",
    ),
];

#[test]
fn every_invalid_fixture_names_file_line_and_column() {
    let dir = fixtures().join("invalid");
    let mut seen = 0;
    for (file, want) in INVALID_FIXTURES {
        let err = load_one(&dir.join(file)).expect_err(file);
        assert!(err.starts_with(want), "{file}:\n got: {err}\nwant: {want}");
        seen += 1;
    }
    let on_disk = std::fs::read_dir(&dir).expect("dir").count();
    assert_eq!(
        seen + 1,
        on_disk,
        "every fixture has an expectation (several_errors.yaml below)"
    );
}

#[test]
fn all_errors_of_a_file_are_reported_at_once() {
    let err = load_one(&fixtures().join("invalid/several_errors.yaml")).expect_err("invalid");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert!(lines[0].starts_with(
        "several_errors.yaml:4:25: descriptors[0].rate_limit.unit: invalid rate limit unit 'minit'"
    ));
    assert!(
        lines[1].starts_with("several_errors.yaml:5:5: descriptors[1]: descriptor has empty key")
    );
    assert!(lines[2].starts_with(
        "several_errors.yaml:7:42: descriptors[2].rate_limit.unit: should not specify"
    ));
}

#[test]
fn scalars_of_any_type_are_read_as_their_literal_text() {
    let path = fixtures().join("valid/scalars_as_text.yaml");
    let text = std::fs::read_to_string(&path).expect("fixture");
    let loaded = parse_files(
        &[("scalars_as_text.yaml".into(), text)],
        LoadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut keys: Vec<String> = loaded
        .rules
        .limits()
        .iter()
        .map(|l| l.full_key.clone())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        ["12.0x10_on", "12.1e3_010", "12.k_true", "12.meta", "12.y"]
    );
    let named: Vec<Option<&str>> = loaded
        .rules
        .limits()
        .iter()
        .map(|l| l.name.as_deref())
        .collect();
    assert!(named.contains(&Some("1.50")), "{named:?}");
    let meta = loaded
        .rules
        .limits()
        .into_iter()
        .find(|l| l.full_key == "12.meta")
        .and_then(|l| l.metadata.clone());
    let Some(MetaValue::Map(meta)) = meta else {
        panic!("metadata map expected: {meta:?}");
    };
    let meta_keys: Vec<&str> = meta.keys().map(String::as_str).collect();
    for key in ["y", "n", "on", "off", "1", "true"] {
        assert!(meta_keys.contains(&key), "{key} in {meta_keys:?}");
    }
    let empty = parse_files(
        &[("e.yaml".into(), "domain: e\ndescriptors:\n".into())],
        LoadOptions::default(),
    )
    .expect("`descriptors:` with nothing after it loads");
    assert_eq!(empty.rules.domain_count(), 1);
}

#[test]
fn shipped_examples_and_valid_fixtures_load() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for dir in [root.join("config"), fixtures().join("valid")] {
        let loaded = load_dir(&dir, LoadOptions::default())
            .unwrap_or_else(|e| panic!("{}:\n{e}", dir.display()));
        assert!(loaded.rules.domain_count() > 0, "{}", dir.display());
    }
}

#[test]
fn misplaced_reference_keys_are_ignored_with_a_warning() {
    let text = "domain: d\ndescriptors:\n  - key: k\n    unit: second\n    rate_limit: { unit: minute, requests_per_unit: 1, key: x }\n";
    let loaded = parse_files(&[("f.yaml".into(), text.into())], LoadOptions::default())
        .expect("loads as the reference does");
    assert_eq!(loaded.warnings.len(), 2, "{:?}", loaded.warnings);
    assert!(
        loaded.warnings[0].starts_with("f.yaml:4:11: descriptors[0]: key 'unit'"),
        "{:?}",
        loaded.warnings
    );
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write");
}

#[test]
fn duplicate_domains_fail_unless_merged() {
    let dir = temp_dir("merge");
    write(
        &dir,
        "a.yaml",
        "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: { unit: minute, requests_per_unit: 10 }\n",
    );
    write(
        &dir,
        "b.yaml",
        "domain: d\ndescriptors:\n  - key: k2\n    rate_limit: { unit: minute, requests_per_unit: 20 }\n",
    );
    let err = load_dir(&dir, LoadOptions::default())
        .expect_err("duplicate")
        .to_string();
    assert!(
        err.ends_with("b.yaml:1:9: domain: duplicate domain 'd' in config file"),
        "{err}"
    );
    let merged = load_dir(
        &dir,
        LoadOptions {
            merge_domains: true,
            ..Default::default()
        },
    )
    .expect("merged");
    let domain = merged.rules.domain("d").expect("domain");
    assert_eq!(
        domain.lookup([("k1", "x")].into_iter()).map(|l| l.rate),
        Some(Rate::Limited(PerUnit::fixed(10, Unit::Minute)))
    );
    assert_eq!(
        domain.lookup([("k2", "x")].into_iter()).map(|l| l.rate),
        Some(Rate::Limited(PerUnit::fixed(20, Unit::Minute)))
    );
    write(
        &dir,
        "c.yaml",
        "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n",
    );
    let err = load_dir(
        &dir,
        LoadOptions {
            merge_domains: true,
            ..Default::default()
        },
    )
    .expect_err("dup key")
    .to_string();
    assert!(
        err.contains("c.yaml:3:5: descriptors[0]: duplicate descriptor composite key 'd.k1'"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn dot_files_and_kubernetes_configmap_layout() {
    let dir = temp_dir("configmap");
    let data = dir.join("..2026_11_30_00_00_00.000000001");
    std::fs::create_dir_all(&data).expect("mkdir");
    write(
        &data,
        "config.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n",
    );
    std::os::unix::fs::symlink(&data, dir.join("..data")).expect("symlink");
    std::os::unix::fs::symlink(dir.join("..data/config.yaml"), dir.join("config.yaml"))
        .expect("symlink");
    // The ConfigMap's own files load once, though `..data` holds them too (the reference loads
    // them twice and fails with a duplicate domain unless dot files are ignored).
    let loaded = load_dir(&dir, LoadOptions::default()).expect("loads");
    assert_eq!((loaded.files, loaded.rules.domain_count()), (1, 1));
    write(&dir, ".hidden.yaml", "domain: hidden\n");
    assert_eq!(
        load_dir(&dir, LoadOptions::default())
            .expect("loads")
            .rules
            .domain_count(),
        2
    );
    let ignoring = LoadOptions {
        ignore_dotfiles: true,
        ..Default::default()
    };
    assert_eq!(
        load_dir(&dir, ignoring)
            .expect("loads")
            .rules
            .domain_count(),
        1
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn check_config_reference_lists_every_extension() {
    let bin = env!("CARGO_BIN_EXE_turnstile");
    let dir = temp_dir("reference");
    std::fs::copy(
        fixtures().join("valid/algorithms.yaml"),
        dir.join("algorithms.yaml"),
    )
    .expect("copy");
    let plain = Command::new(bin)
        .arg("check-config")
        .arg(&dir)
        .output()
        .expect("run");
    assert!(plain.status.success(), "the file is valid for Turnstile");
    let out = Command::new(bin)
        .args(["check-config", "--reference"])
        .arg(&dir)
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(1),
        "the reference would refuse the file"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    for want in [
        "algorithms.yaml:8:24: descriptors[0].rate_limit.unit_multiplier: a Turnstile extension; envoyproxy/ratelimit refuses this file (unknown key 'unit_multiplier')",
        "algorithms.yaml:15:18: descriptors[1].rate_limit.algorithm: a Turnstile extension",
        "algorithms.yaml:21:18: descriptors[2].rate_limit.algorithm: a Turnstile extension",
        "algorithms.yaml:22:14: descriptors[2].rate_limit.burst: a Turnstile extension",
        "algorithms.yaml:27:24: descriptors[3].rate_limit.unit_multiplier: a Turnstile extension",
        "algorithms.yaml:29:18: descriptors[3].rate_limit.algorithm: a Turnstile extension",
        "6 uses of Turnstile extensions",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let reference = Command::new(bin)
        .args(["check-config", "--reference"])
        .arg(root.join("config"))
        .output()
        .expect("run");
    assert!(reference.status.success());
    assert!(String::from_utf8_lossy(&reference.stdout).contains("no Turnstile extensions"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn check_config_command() {
    let bin = env!("CARGO_BIN_EXE_turnstile");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let ok = Command::new(bin)
        .args(["check-config"])
        .arg(root.join("config"))
        .output()
        .expect("run");
    assert!(ok.status.success());
    assert_eq!(
        String::from_utf8_lossy(&ok.stdout).trim(),
        "all rate limit configs ok"
    );
    let dir = temp_dir("check");
    std::fs::copy(
        fixtures().join("invalid/bad_limit_unit.yaml"),
        dir.join("bad_limit_unit.yaml"),
    )
    .expect("copy");
    let bad = Command::new(bin)
        .args(["check-config"])
        .arg(&dir)
        .output()
        .expect("run");
    assert_eq!(bad.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("bad_limit_unit.yaml:5:13: descriptors[0].rate_limit.unit: invalid rate limit unit 'foo'"), "{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `domain: d` with `levels` nested descriptors, a limit on the innermost.
fn nested(levels: usize) -> String {
    let mut text = String::from("domain: deep\ndescriptors:\n");
    let mut indent = String::new();
    for i in 0..levels {
        text.push_str(&format!(
            "{indent}  - key: k{i}\n{indent}    descriptors:\n"
        ));
        indent.push_str("    ");
    }
    text.push_str(&format!(
        "{indent}  - key: last\n{indent}    rate_limit: {{ unit: minute, requests_per_unit: 1 }}\n"
    ));
    text
}

#[test]
fn large_and_deep_files_load_and_yaml_bombs_and_several_documents_are_refused_in_words() {
    let load = |name: &str, text: String| {
        parse_files(&[(name.to_owned(), text)], LoadOptions::default()).map_err(|e| e.to_string())
    };
    // 100,000 flat descriptors in one file (the reference loads such files).
    let mut flat = String::from("domain: big\ndescriptors:\n");
    for i in 0..100_000 {
        flat.push_str(&format!(
            "  - key: k{i}\n    rate_limit: {{ unit: minute, requests_per_unit: 1 }}\n"
        ));
    }
    let big = load("big.yaml", flat).expect("100k descriptors load");
    assert_eq!(big.rules.limits().len(), 100_000);
    // 126 nested levels load; 130 are refused, in words.
    assert!(load("deep.yaml", nested(126)).is_ok());
    let err = load("deeper.yaml", nested(130)).expect_err("too deep");
    assert!(
        err.contains("descriptors nest deeper than 127 levels"),
        "{err}"
    );
    // A billion-laughs bomb (in metadata, where any value is allowed) is refused before it
    // expands, in words.
    let mut bomb = String::from(
        "domain: bomb\ndescriptors:\n  - key: k\n    metadata:\n      a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n",
    );
    for i in 1..10 {
        let p = i - 1;
        bomb.push_str(&format!(
            "      a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let err = load("bomb.yaml", bomb).expect_err("bomb");
    assert!(
        err.starts_with("bomb.yaml:") && err.contains("(a guard against YAML bombs)"),
        "{err}"
    );
    // Several documents in one file.
    let err = load(
        "multi.yaml",
        "domain: a\ndescriptors: []\n---\ndomain: b\n".into(),
    )
    .expect_err("two documents");
    assert!(
        err.contains(
            "multi.yaml:4:1: error loading config file: a rule file holds one YAML document"
        ),
        "{err}"
    );
}

#[test]
fn a_symbolic_link_loop_is_named() {
    let dir = temp_dir("loop");
    std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
    write(&dir.join("sub"), "a.yaml", "domain: a\ndescriptors: []\n");
    std::os::unix::fs::symlink("..", dir.join("sub/loop")).expect("symlink");
    let err = load_dir(&dir, LoadOptions::default())
        .expect_err("a loop")
        .to_string();
    assert!(
        err.contains("sub/loop: symbolic link loop") && !err.contains("duplicate domain"),
        "{err}"
    );
}

#[test]
fn check_config_rlqs_says_how_each_limit_is_served() {
    let bin = env!("CARGO_BIN_EXE_turnstile");
    let dir = temp_dir("rlqs-check");
    std::fs::copy(
        fixtures().join("valid/algorithms.yaml"),
        dir.join("algorithms.yaml"),
    )
    .expect("copy");
    std::fs::write(
        dir.join("nested.yaml"),
        "domain: nested\ndescriptors:\n  - key: path\n    value: /api\n    descriptors:\n      - key: user\n        shadow_mode: true\n        rate_limit: { unit: hour, requests_per_unit: 7 }\n  - key: files\n    value: \"pub/*\"\n    rate_limit: { unlimited: true }\n",
    )
    .expect("write");
    let out = Command::new(bin)
        .args(["check-config", "--rlqs"])
        .arg(&dir)
        .output()
        .expect("run");
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.trim(),
        "all rate limit configs ok
RLQS buckets (bucket id → assignment):
algorithms.api_key: bucket {api_key: *} → fair share of 10 per second in fixed windows (configured token_bucket)
algorithms.report: bucket {report: *} → fair share of 100 per 5 minutes in fixed windows
algorithms.upload: bucket {upload: *} → not served by RLQS (reports cannot measure requests in flight): RLQS_UNMATCHED_ACTION
algorithms.user: bucket {user: *} → fair share of 60 per minute in fixed windows (configured sliding_window)
nested.files_pub/*: bucket {files: pub/*} → ALLOW_ALL (unlimited, not counted)
nested.path_/api.user: bucket {path: /api, user: *} → counted as a fair share of 7 per hour in fixed windows, then ALLOW_ALL (shadow or quota mode)"
    );
    let _ = std::fs::remove_dir_all(dir);
}
