//! Reading `src/` for the architecture checks: the files of a module, identifiers, and a
//! file's code without its test items (every item under `#[cfg(test)]`, wherever it stands,
//! not just a trailing `mod tests`).

use std::path::{Path, PathBuf};

pub(super) fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

pub(super) fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).expect("read_dir").flatten() {
            rust_files(&entry.path(), out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// The identifier `text` starts with (empty when it starts with something else).
pub(super) fn ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// `text` without its `#[cfg(test)]` items: each attribute and the item after it (up to its
/// `;` or the brace that closes its body) are cut; the code around them stays.
pub(super) fn code_of(text: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let item = &rest[at + MARK.len()..];
        rest = &item[item_len(item)..];
    }
    out.push_str(rest);
    out
}

/// The length of the item `text` starts with: through its first `;` outside brackets, or
/// through the `}` that closes its first `{`. Strings, characters and line comments are
/// skipped.
fn item_len(text: &str) -> usize {
    let bytes = text.as_bytes();
    let (mut i, mut depth, mut brackets) = (0, 0usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i += text[i..].find('\n').unwrap_or(text.len() - i);
            }
            b'r' if text[i..].starts_with("r#\"") => {
                i += 3 + text[i + 3..].find("\"#").map_or(text.len(), |e| e + 1);
            }
            b'"' => i = string_end(bytes, i),
            b'\'' if bytes.get(i + 2) == Some(&b'\'') => i += 2,
            b'\'' if bytes.get(i + 1) == Some(&b'\\') => {
                i += 3 + text[i + 3..].find('\'').unwrap_or(text.len() - i - 3);
            }
            b'(' | b'[' => brackets += 1,
            b')' | b']' => brackets = brackets.saturating_sub(1),
            b';' if depth == 0 && brackets == 0 => return i + 1,
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    text.len()
}

/// The position of the `"` that closes the string opened at `open`.
fn string_end(bytes: &[u8], open: usize) -> usize {
    let mut i = open + 1;
    while i < bytes.len() && bytes[i] != b'"' {
        i += if bytes[i] == b'\\' { 2 } else { 1 };
    }
    i
}

#[test]
fn test_items_are_cut_wherever_they_stand_and_the_code_after_them_is_kept() {
    let text = "use crate::a;\n#[cfg(test)]\nfn helper() -> [u8; 2] { let s = \"}\"; // {\n [0; 2] }\n\
                use crate::b;\n#[cfg(test)]\nmod tests;\nuse crate::c;\n#[cfg(test)]\nmod inline {\n\
                use crate::d; const R: &str = r#\"{\"#; const C: [char; 2] = ['{', '\\'']; }\nfn after() { crate::e(); }\n";
    let code = code_of(text);
    for kept in ["crate::a", "crate::b", "crate::c", "crate::e", "fn after"] {
        assert!(code.contains(kept), "{kept} was cut: {code}");
    }
    for cut in ["helper", "mod tests", "crate::d", "inline"] {
        assert!(!code.contains(cut), "{cut} was kept: {code}");
    }
}
