// Turnstile's status page: redraws the sections from /debug/status every second. Every text
// goes through textContent (never HTML), so descriptor values stay text.
(function () {
"use strict";

const SVG = "http://www.w3.org/2000/svg";

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function table(head, rows) {
  const t = el("table");
  const tr = el("tr");
  head.forEach((h) => tr.appendChild(el("th", h)));
  t.appendChild(tr);
  rows.forEach((cells) => {
    const row = el("tr");
    cells.forEach((c) => row.appendChild(c instanceof Node ? c : el("td", c)));
    t.appendChild(row);
  });
  return t;
}

function replace(id, nodes) {
  const target = document.getElementById(id);
  if (!target) return;
  target.replaceChildren(...nodes);
}

function health(s) {
  let text = s.ready ? "ready" : "not ready: " + s.failing.join(", ");
  s.notes.forEach((n) => { text += "; " + n; });
  document.getElementById("health").textContent = text;
}

function descriptor(value) {
  const text = value.descriptor.entries.map(([k, v]) => k + "=" + v).join(", ");
  return el("td", text + (value.descriptor.cut ? " …" : ""), "value");
}

function top(s) {
  if (s.top.rules.length === 0) {
    return [el("p", "No value refused or near its limit in the last minutes.", "quiet")];
  }
  const out = [];
  s.top.rules.forEach((rule) => {
    const h = el("h3", rule.rule + " ");
    h.appendChild(el("span", rule.refused + " refused, " + rule.near + " near", "quiet"));
    out.push(h);
    const rows = [];
    [["over limit", rule.over_limit], ["near limit", rule.near_limit]].forEach(([kind, list]) => {
      list.forEach((v) => rows.push([descriptor(v), kind, v.count + " (±" + v.error + ")",
        Math.round(v.share * 100) + " %"]));
    });
    out.push(table(["descriptor", "kind", "hits", "share"], rows));
  });
  return out;
}

function chart(rule) {
  const width = 4;
  const peak = Math.max(1, ...rule.hits);
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 " + width * 60 + " 40");
  svg.setAttribute("width", String(width * 60));
  svg.setAttribute("height", "40");
  svg.setAttribute("role", "img");
  rule.hits.forEach((hits, i) => {
    [["hits", hits], ["refused", rule.refused[i]]].forEach(([cls, n]) => {
      const r = document.createElementNS(SVG, "rect");
      const h = 40 * n / peak;
      r.setAttribute("class", cls);
      r.setAttribute("x", String(i * width));
      r.setAttribute("y", (40 - h).toFixed(1));
      r.setAttribute("width", "3");
      r.setAttribute("height", h.toFixed(1));
      svg.appendChild(r);
    });
  });
  const figure = el("figure");
  figure.appendChild(svg);
  const sum = (xs) => xs.reduce((a, b) => a + b, 0);
  figure.appendChild(el("figcaption",
    rule.rule + ": " + sum(rule.hits) + " hits, " + sum(rule.refused) + " refused"));
  return figure;
}

function charts(s) {
  const shown = s.history.rules.slice(0, 8);
  if (shown.length === 0) return [el("p", "No hits counted yet.", "quiet")];
  return shown.map(chart);
}

function rules(s) {
  const p = el("p", (s.rules.source === "xds" ? "From the control plane " : "From the files under "));
  p.appendChild(el("code", s.rules.from));
  if (s.rules.xds_version) {
    p.appendChild(document.createTextNode(", version "));
    p.appendChild(el("code", s.rules.xds_version));
  }
  const rows = s.rules.limits.map((l) => [l.rule, l.limit + (l.shadow_mode ? " (shadow mode)" : "")]);
  return [p, table(["rule", "limit"], rows)];
}

function stores(s) {
  const rows = s.stores.map((st) => [st.server, el("td", st.state, st.state), st.opens]);
  const local = s.local_mode;
  const mode = local.deciding_locally.length === 0 ? "off"
    : "deciding locally for " + local.deciding_locally.join(", ");
  return [table(["store", "breaker", "opened"], rows),
    el("p", "Local mode: " + mode + "; " + local.local_decisions + " decisions made locally, "
      + local.handed_back + " hits handed back.")];
}

function peers(s) {
  const list = (pairs) => pairs.map(([k, v]) => k + " " + v).join(", ");
  return [el("p", s.peers.active + " peers active. Shed: " + list(s.peers.shed)
    + ". Connections closed: " + list(s.peers.closed) + ".")];
}

function draw(s) {
  health(s);
  replace("top", top(s));
  replace("charts", charts(s));
  replace("rules", rules(s));
  replace("stores", stores(s));
  replace("peers", peers(s));
  document.body.dataset.updated = String(Date.now());
}

async function refresh() {
  try {
    const response = await fetch("/debug/status", { credentials: "same-origin", cache: "no-store" });
    if (response.ok) draw(await response.json());
    else document.getElementById("health").textContent = "status unavailable: HTTP " + response.status;
  } catch (e) {
    document.getElementById("health").textContent = "Turnstile unreachable";
  }
  setTimeout(refresh, 1000);
}

refresh();
})();
