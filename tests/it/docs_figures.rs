//! The README's performance figures are BENCHMARKS.md's: every bold figure in the README's
//! "Performance" section is a bold figure of BENCHMARKS.md, so the two cannot drift apart.

use std::path::PathBuf;

fn read(name: &str) -> String {
    std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(name)).expect(name)
}

/// The `**bold**` spans of `text`, without their stars and a trailing `×`.
fn bold(text: &str) -> Vec<String> {
    text.split("**")
        .skip(1)
        .step_by(2)
        .map(|s| s.trim_end_matches('×').trim().to_owned())
        .collect()
}

/// The text of the `## title` section of `text`.
fn section<'a>(text: &'a str, title: &str) -> &'a str {
    let start = text
        .find(&format!("\n## {title}\n"))
        .expect("the section is there");
    let body = &text[start + title.len() + 5..];
    body.find("\n## ").map_or(body, |end| &body[..end])
}

#[test]
fn every_performance_figure_in_the_readme_is_one_of_the_benchmarks() {
    let readme = bold(section(&read("README.md"), "Performance"));
    assert!(readme.len() >= 4, "the figures were not found: {readme:?}");
    let benchmarks = bold(&read("BENCHMARKS.md"));
    let missing: Vec<_> = readme.iter().filter(|f| !benchmarks.contains(f)).collect();
    assert!(
        missing.is_empty(),
        "README figures not in BENCHMARKS.md: {missing:?}"
    );
}

#[test]
fn bold_spans_are_read_without_their_stars() {
    assert_eq!(bold("a **1.05×** b **68 MiB** c"), ["1.05", "68 MiB"]);
}
