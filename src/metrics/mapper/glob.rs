//! statsd_exporter's glob matching: a pattern's dot-separated parts against a name's, each `*`
//! standing for one or more characters within its part, and `$n` expansion of what they took.

pub(super) fn glob(pattern: &str) -> Vec<Vec<String>> {
    pattern
        .split('.')
        .map(|part| part.split('*').map(str::to_owned).collect())
        .collect()
}

/// The text each `*` stood for, if `name` matches the glob.
pub(super) fn glob_captures(parts: &[Vec<String>], name: &str) -> Option<Vec<String>> {
    let components: Vec<&str> = name.split('.').collect();
    if components.len() != parts.len() {
        return None;
    }
    let mut captures = Vec::new();
    for (pieces, component) in parts.iter().zip(components) {
        part_captures(pieces, component, &mut captures)?;
    }
    Some(captures)
}

/// Matches one part (`pieces` are the literal texts between its `*`s); each `*` takes one or
/// more characters, the last `*` as few as the rest allows.
fn part_captures(pieces: &[String], component: &str, captures: &mut Vec<String>) -> Option<()> {
    let (first, rest) = pieces.split_first()?;
    let mut remaining = component.strip_prefix(first.as_str())?;
    if rest.is_empty() {
        return remaining.is_empty().then_some(());
    }
    for (i, literal) in rest.iter().enumerate() {
        let last = i + 1 == rest.len();
        let at = if last {
            // The final literal must end the component.
            remaining
                .len()
                .checked_sub(literal.len())
                .filter(|&at| remaining[at..] == **literal)?
        } else {
            remaining.get(1..)?.find(literal.as_str())? + 1
        };
        if at == 0 {
            return None;
        }
        captures.push(remaining[..at].to_owned());
        remaining = &remaining[at + literal.len()..];
    }
    Some(())
}

/// `$1` and `${1}` replaced by the captures (1-based); an unknown one by nothing.
pub(super) fn expand(template: &str, captures: &[String]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut chars = template.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let braced = chars.peek().is_some_and(|(_, c)| *c == '{');
        if braced {
            chars.next();
        }
        let mut digits = String::new();
        while let Some((_, d)) = chars.peek().filter(|(_, d)| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        if braced && chars.peek().is_some_and(|(_, c)| *c == '}') {
            chars.next();
        }
        match digits.parse::<usize>() {
            Ok(n) if n >= 1 => out.push_str(captures.get(n - 1).map_or("", String::as_str)),
            _ if digits.is_empty() && !braced => out.push('$'),
            _ => {}
        }
    }
    out
}
