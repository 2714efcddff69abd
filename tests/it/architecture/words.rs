//! The word table in CONTRIBUTING.md, held: a word the table gives one meaning does not name
//! another thing in code. Each rule below is a row's "not" column made checkable: the modules
//! where the word, as a part of an identifier (`snake_case` or `CamelCase`, comments and
//! strings aside), would mean something else.

use std::collections::BTreeSet;
use std::path::Path;

use super::source::{code_of, rust_files, src};

/// A word of the table and the files (paths under `src/`, prefixes) where it must not name
/// anything; `after` lists the words that may stand before it there (`token bucket`), `except`
/// the identifiers there that do mean the table's thing (RLQS's bucket keys in the limiter).
struct Rule {
    words: &'static [&'static str],
    not_in: &'static [&'static str],
    after: &'static [&'static str],
    except: &'static [&'static str],
    why: &'static str,
}

const RULES: &[Rule] = &[
    Rule {
        words: &["bucket", "buckets"],
        not_in: &[
            "limiter/",
            "storage/memory",
            "storage/memcached/",
            "storage/redis/",
            "storage/mod.rs",
            "storage/token_bucket.rs",
            "http/",
        ],
        after: &["token"],
        except: &["bucket_keys"],
        why: "an RLQS bucket; the algorithm and its state are a \"token bucket\" in full",
    },
    Rule {
        words: &["window", "windows"],
        not_in: &["server/admission/", "storage/breaker.rs"],
        after: &[],
        except: &[],
        why: "a limit's window; admission and the breaker measure over a `period`",
    },
    Rule {
        words: &["part", "parts"],
        not_in: &["peers/", "server/", "metrics/peers.rs"],
        after: &[],
        except: &[],
        why: "one server's part of a memcached call; a peer's is its `allotment`",
    },
    Rule {
        words: &["share", "shares"],
        not_in: &["peers/", "server/", "limiter/"],
        after: &[],
        except: &["share_threshold"],
        why: "RLQS's fair share; a replica's of a limit in the outage mode is its `portion`",
    },
    Rule {
        words: &["held"],
        not_in: &["peers/", "server/", "metrics/peers.rs"],
        after: &[],
        except: &[],
        why: "the assignment a data plane holds; bytes kept from hyper are `withheld`",
    },
];

/// The identifiers of `code`, comments, strings and characters skipped.
fn identifiers(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(c) = code[i..].chars().next() {
        let rest = &code[i..];
        let skip = if let Some(after) = rest.strip_prefix("//") {
            2 + after.find('\n').unwrap_or(after.len())
        } else if let Some(after) = rest.strip_prefix("/*") {
            2 + after.find("*/").map_or(after.len(), |e| e + 2)
        } else if let Some(after) = rest.strip_prefix("r#\"") {
            3 + after.find("\"#").map_or(after.len(), |e| e + 2)
        } else if let Some(after) = rest.strip_prefix("r\"") {
            2 + after.find('"').map_or(after.len(), |e| e + 1)
        } else if c == '"' {
            1 + quoted_len(&rest[1..], '"')
        } else if c == '\'' && rest[1..].chars().nth(1) == Some('\'') || rest.starts_with("'\\") {
            1 + quoted_len(&rest[1..], '\'')
        } else if c.is_ascii_alphabetic() || c == '_' {
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            out.push(&rest[..len]);
            len
        } else {
            c.len_utf8()
        };
        i += skip;
    }
    out
}

/// The length of `text` through the unescaped `close` that ends it.
fn quoted_len(text: &str, close: char) -> usize {
    let mut escaped = false;
    for (at, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            _ if c == close => return at + 1,
            _ => {}
        }
    }
    text.len()
}

/// The words of an identifier, lowercased: `refuse_over_part` → refuse, over, part;
/// `TokenBucketState` → token, bucket, state.
fn words_of(identifier: &str) -> Vec<String> {
    let mut out = Vec::new();
    for piece in identifier.split('_').filter(|p| !p.is_empty()) {
        let mut word = String::new();
        let all_caps = piece.chars().all(|c| !c.is_ascii_lowercase());
        for c in piece.chars() {
            if c.is_ascii_uppercase() && !all_caps && !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            word.push(c.to_ascii_lowercase());
        }
        out.push(word);
    }
    out
}

/// Where `text` (a file at `relative`) breaks a rule: `file: identifier (why)`.
fn breaches(relative: &str, text: &str) -> BTreeSet<String> {
    let code = code_of(text);
    let mut out = BTreeSet::new();
    for rule in RULES
        .iter()
        .filter(|r| r.not_in.iter().any(|p| relative.starts_with(p)))
    {
        for identifier in identifiers(&code) {
            if rule.except.contains(&identifier) {
                continue;
            }
            let words = words_of(identifier);
            let bad = words.iter().enumerate().any(|(i, w)| {
                rule.words.contains(&w.as_str())
                    && !(i > 0 && rule.after.contains(&words[i - 1].as_str()))
            });
            if bad {
                out.insert(format!("{relative}: `{identifier}` ({})", rule.why));
            }
        }
    }
    out
}

#[test]
fn identifiers_keep_to_the_word_table() {
    let contributing = std::fs::read_to_string(src().join("../CONTRIBUTING.md")).expect("read");
    for rule in RULES {
        let row = format!("\n| {} |", rule.words[0]);
        assert!(
            contributing.contains(&row),
            "`{}` has no row in the word table",
            rule.words[0]
        );
    }
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut found = BTreeSet::new();
    // Test files are test items, as `#[cfg(test)]` ones are.
    let is_test = |f: &Path| {
        f.file_stem()
            .is_some_and(|s| s == "tests" || s.to_string_lossy().ends_with("_tests"))
    };
    for file in files.into_iter().filter(|f| !is_test(f)) {
        let relative = file.strip_prefix(src()).unwrap_or(Path::new(""));
        let text = std::fs::read_to_string(&file).expect("read");
        found.extend(breaches(&relative.to_string_lossy(), &text));
    }
    let found: Vec<String> = found.into_iter().collect();
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_word_check_reads_identifiers_not_comments() {
    assert_eq!(words_of("refuse_over_part"), ["refuse", "over", "part"]);
    assert_eq!(words_of("TokenBucketState"), ["token", "bucket", "state"]);
    assert_eq!(words_of("RATIO_WINDOW_MS"), ["ratio", "window", "ms"]);
    let text = "// a part\nfn f(part: u32) { let s = \"window\"; g(TokenBucket, bucket_of, b'\"', 'x'); }\n\
                fn g<'a>(x: &'a str) -> char { let _ = r#\"held\"#; '\\'' } // é held";
    let found = breaches("peers/x.rs", text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found.iter().all(|f| f.contains("`part`")), "{found:?}");
    let found = breaches("limiter/x.rs", text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found.iter().all(|f| f.contains("`bucket_of`")), "{found:?}");
    assert!(breaches("quota/x.rs", text).is_empty());
}
