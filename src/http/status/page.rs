//! The status page's HTML, rendered on the server from the same [`Snapshot`] that
//! `/debug/status` serves, so that every text part reads without JavaScript; the script then
//! redraws the sections from the JSON every second. Every text written is escaped here.
//!
//! Must not touch: where the data comes from (`snapshot`).

use std::fmt::Write;

use super::snapshot::Snapshot;
use crate::metrics::history::RuleHistory;
use crate::metrics::top::Listed;

/// `text` safe as HTML text and as a quoted attribute value.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The whole page.
pub(super) fn render(s: &Snapshot) -> String {
    let mut out = String::with_capacity(8 * 1024);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>Turnstile status</title><link rel=\"icon\" href=\"/favicon.svg\">\
         <link rel=\"stylesheet\" href=\"/status.css\">\
         <script src=\"/status.js\" defer></script></head><body>\
         <header><h1>Turnstile {}</h1><p id=\"health\">{}</p></header><main>",
        escape(s.version),
        health(s)
    );
    section(&mut out, "top", "Who is limited", &top(s));
    section(
        &mut out,
        "charts",
        "Hits and refusals, last minutes",
        &charts(s),
    );
    section(&mut out, "rules", "Rules in force", &rules(s));
    section(&mut out, "stores", "Stores", &stores(s));
    section(&mut out, "peers", "Peers", &peers(s));
    out.push_str(
        "</main><footer><a href=\"/debug/status\">/debug/status</a> · \
         <a href=\"/debug/top\">/debug/top</a> · <a href=\"/rlconfig\">/rlconfig</a> · \
         <a href=\"/metrics\">/metrics</a> · <a href=\"/healthcheck\">/healthcheck</a> · \
         /counters?domain=D&amp;entry=key=value</footer></body></html>\n",
    );
    out
}

fn section(out: &mut String, id: &str, title: &str, body: &str) {
    let _ = write!(
        out,
        "<section><h2>{title}</h2><div id=\"{id}\">{body}</div></section>"
    );
}

fn health(s: &Snapshot) -> String {
    let mut text = if s.ready {
        "ready".to_owned()
    } else {
        format!("not ready: {}", s.failing.join(", "))
    };
    for note in &s.notes {
        text.push_str("; ");
        text.push_str(note);
    }
    escape(&text)
}

fn top(s: &Snapshot) -> String {
    if s.top.rules.is_empty() {
        return "<p class=\"quiet\">No value refused or near its limit in the last minutes.</p>"
            .to_owned();
    }
    let mut out = String::new();
    for rule in &s.top.rules {
        let _ = write!(
            out,
            "<h3>{} <span class=\"quiet\">{} refused, {} near</span></h3><table><tr><th>descriptor</th><th>kind</th><th>hits</th><th>share</th></tr>",
            escape(&rule.rule),
            rule.refused,
            rule.near
        );
        for (kind, listed) in [
            ("over limit", &rule.over_limit),
            ("near limit", &rule.near_limit),
        ] {
            for value in listed {
                out.push_str(&top_row(kind, value));
            }
        }
        out.push_str("</table>");
    }
    out
}

fn top_row(kind: &str, value: &Listed) -> String {
    let entries: Vec<String> = value
        .descriptor
        .entries
        .iter()
        .map(|[k, v]| format!("{k}={v}"))
        .collect();
    let cut = if value.descriptor.cut { " …" } else { "" };
    format!(
        "<tr><td class=\"value\">{}{cut}</td><td>{kind}</td><td>{} (±{})</td><td>{:.0} %</td></tr>",
        escape(&entries.join(", ")),
        value.count,
        value.error,
        value.share * 100.0
    )
}

fn charts(s: &Snapshot) -> String {
    let shown: Vec<&RuleHistory> = s.history.rules.iter().take(8).collect();
    if shown.is_empty() {
        return "<p class=\"quiet\">No hits counted yet.</p>".to_owned();
    }
    shown.iter().map(|r| chart(r)).collect()
}

/// A rule's hits (bars) and refusals (bars over them) as an SVG of fixed size.
fn chart(rule: &RuleHistory) -> String {
    let peak = rule.hits.iter().copied().max().unwrap_or(0).max(1) as f64;
    let width = 4.0;
    let mut bars = String::new();
    for (i, (hits, refused)) in rule.hits.iter().zip(&rule.refused).enumerate() {
        let x = i as f64 * width;
        let h = 40.0 * *hits as f64 / peak;
        let r = 40.0 * *refused as f64 / peak;
        let _ = write!(
            bars,
            "<rect class=\"hits\" x=\"{x}\" y=\"{:.1}\" width=\"3\" height=\"{h:.1}\"></rect>\
             <rect class=\"refused\" x=\"{x}\" y=\"{:.1}\" width=\"3\" height=\"{r:.1}\"></rect>",
            40.0 - h,
            40.0 - r
        );
    }
    let total: u64 = rule.hits.iter().sum();
    let refused: u64 = rule.refused.iter().sum();
    format!(
        "<figure><svg viewBox=\"0 0 {} 40\" width=\"{}\" height=\"40\" role=\"img\">{bars}</svg>\
         <figcaption>{}: {total} hits, {refused} refused</figcaption></figure>",
        width * 60.0,
        width * 60.0,
        escape(&rule.rule)
    )
}

fn rules(s: &Snapshot) -> String {
    let mut out = format!(
        "<p>From {} <code>{}</code>{}</p><table><tr><th>rule</th><th>limit</th></tr>",
        if s.rules.source == "xds" {
            "the control plane"
        } else {
            "the files under"
        },
        escape(&s.rules.from),
        s.rules
            .xds_version
            .as_deref()
            .map(|v| format!(", version <code>{}</code>", escape(v)))
            .unwrap_or_default()
    );
    for line in &s.rules.limits {
        let shadow = if line.shadow_mode {
            " (shadow mode)"
        } else {
            ""
        };
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}{shadow}</td></tr>",
            escape(&line.rule),
            escape(&line.limit)
        );
    }
    out.push_str("</table>");
    out
}

fn stores(s: &Snapshot) -> String {
    let mut out = String::from("<table><tr><th>store</th><th>breaker</th><th>opened</th></tr>");
    for store in &s.stores {
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=\"{}\">{}</td><td>{}</td></tr>",
            escape(&store.server),
            store.state,
            store.state,
            store.opens
        );
    }
    out.push_str("</table>");
    let local = &s.local_mode;
    let _ = write!(
        out,
        "<p>Local mode: {}; {} decisions made locally, {} hits handed back.</p>",
        if local.deciding_locally.is_empty() {
            "off".to_owned()
        } else {
            format!("deciding locally for {}", local.deciding_locally.join(", "))
        },
        local.local_decisions,
        local.handed_back
    );
    out
}

fn peers(s: &Snapshot) -> String {
    let list = |pairs: &[(&str, u64)]| {
        pairs
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "<p>{} peers active. Shed: {}. Connections closed: {}.</p>",
        s.peers.active,
        list(&s.peers.shed),
        list(&s.peers.closed)
    )
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn hostile_text_is_escaped() {
        assert_eq!(
            escape("<script>alert('1')</script>&\""),
            "&lt;script&gt;alert(&#39;1&#39;)&lt;/script&gt;&amp;&quot;"
        );
    }
}
