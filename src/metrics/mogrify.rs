//! DogStatsD mogrifiers (`USE_DOG_STATSD_MOGRIFIERS`): the first whose pattern matches a
//! statsd name rewrites it into a shorter name and tags, `$0`, `$1`, … standing for the match
//! and its groups (a `$n` past the last group stays as written, a group that took no part is
//! empty), as the reference's sink does.

use regex::{Captures, Regex};

use crate::settings::Mogrifier;

/// The compiled mogrifiers, in order.
#[derive(Debug, Default)]
pub struct Mogrifiers(Vec<(Regex, Mogrifier)>);

impl Mogrifiers {
    /// Compiles `list` (each pattern was checked when the settings were read).
    pub fn new(list: &[Mogrifier]) -> Result<Self, regex::Error> {
        list.iter()
            .map(|m| Ok((Regex::new(&m.pattern)?, m.clone())))
            .collect::<Result<Vec<_>, _>>()
            .map(Mogrifiers)
    }

    /// The name to send and the mogrifier's tags (`k:v`, as DogStatsD writes them).
    pub fn apply(&self, name: &str) -> (String, Vec<(String, String)>) {
        for (pattern, m) in &self.0 {
            if let Some(caps) = pattern.captures(name) {
                let tags = m
                    .tags
                    .iter()
                    .map(|(k, v)| (k.clone(), expand(v, &caps)))
                    .collect();
                return (expand(&m.name, &caps), tags);
            }
        }
        (name.to_owned(), Vec::new())
    }
}

/// `template` with every `$<digits>` replaced by that group of `caps`.
fn expand(template: &str, caps: &Captures<'_>) -> String {
    let mut out = String::with_capacity(template.len() + 16);
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let group = after[..digits].parse::<usize>().ok();
        match group.filter(|g| *g < caps.len()) {
            Some(g) => out.push_str(caps.get(g).map_or("", |m| m.as_str())),
            None => out.push_str(&rest[at..at + 1 + digits]),
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mogrifier(tags: &[(&str, &str)]) -> Mogrifiers {
        Mogrifiers::new(&[Mogrifier {
            id: "TAG".into(),
            pattern: r"^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$".into(),
            name: "ratelimit.service.rate_limit.$3".into(),
            tags: tags
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }])
        .expect("pattern")
    }

    #[test]
    fn the_first_match_renames_and_tags() {
        let m = mogrifier(&[("domain", "$1"), ("descriptor", "$2")]);
        let (name, tags) =
            m.apply("ratelimit.service.rate_limit.mongo_cps.database_users.within_limit");
        assert_eq!(name, "ratelimit.service.rate_limit.within_limit");
        assert_eq!(
            tags,
            vec![
                ("domain".to_owned(), "mongo_cps".to_owned()),
                ("descriptor".to_owned(), "database_users".to_owned())
            ]
        );
    }

    #[test]
    fn out_of_range_groups_stay_and_unmatched_names_pass() {
        let m = mogrifier(&[("domain", "$1"), ("descriptor", "$5")]);
        let (_, tags) = m.apply("ratelimit.service.rate_limit.a.b.c");
        assert_eq!(tags[1].1, "$5");
        let (name, tags) = m.apply("ratelimit.service.config_load_success");
        assert_eq!(name, "ratelimit.service.config_load_success");
        assert!(tags.is_empty());
        assert_eq!(Mogrifiers::default().apply("x.y").0, "x.y");
    }
}
