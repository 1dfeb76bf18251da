"""A web dashboard served by a node (`--dashboard-port`, on 127.0.0.1 unless told): the swarm as this node sees
it (peers, their models, steps and held-out accuracy as each claims, groups given and used, refusals) and this
node's own curves (held-out accuracy and sampled reward over steps).

One self-contained page (no scripts or fonts from elsewhere: a volunteer's machine may be offline) that reads
`/api/status` every few seconds; that JSON is the node's status, the same figures `swarm status` prints. Text
that came from other peers (model names, peer ids) is only ever set as text, never parsed as HTML. The HTTP
server is http.py's (bounded connections, each with a time limit); it serves nothing else.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable

REFRESH_MS = 3000


def finite(value):
    """The snapshot with every non-finite number as null (JSON has no NaN; a browser refuses the whole reply)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


class Dashboard:
    def __init__(self, snapshot: Callable[[], dict], port: int = 0, host: str = "127.0.0.1"):
        """Serves on host:port (0: any free port; `self.port` is the one bound). A taken port is PortInUse."""
        from node.system.process import ensure_port_free

        from .http import HttpServer

        ensure_port_free(host, port, "--dashboard-port")
        page = PAGE.replace("__REFRESH__", str(REFRESH_MS)).encode()
        self.server = HttpServer(
            {"/": lambda: ("text/html; charset=utf-8", page),
             "/api/status": lambda: ("application/json", json.dumps(finite(snapshot())).encode())},
            host, port, "dashboard",
            headers={"Cache-Control": "no-store", "Content-Security-Policy": "default-src 'self'; script-src "
                     "'unsafe-inline'; style-src 'unsafe-inline'"})
        self.port = self.server.port
        self.url = f"http://{host}:{self.port}/"

    def close(self) -> None:
        self.server.close()


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>swarm-node</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body { font: 14px system-ui, sans-serif; margin: 20px; color: #222; background: #fafafa; }
h1 { font-size: 18px; margin: 0 0 4px; } h2 { font-size: 15px; margin: 18px 0 6px; }
.sub { color: #666; font-family: monospace; font-size: 12px; }
.cards { display: flex; flex-wrap: wrap; gap: 8px; margin-top: 10px; }
.card { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; min-width: 110px; }
.card b { display: block; font-size: 18px; } .card span { color: #666; font-size: 12px; }
table { border-collapse: collapse; background: #fff; } td, th { border: 1px solid #ddd; padding: 4px 8px; }
th { background: #f0f0f0; text-align: left; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
svg { background: #fff; border: 1px solid #ddd; border-radius: 6px; }
.legend span { margin-right: 14px; font-size: 12px; } #error { color: #b00; }
</style></head><body>
<h1 id="title">swarm-node</h1><div class="sub" id="peer"></div><div id="error"></div>
<div class="cards" id="cards"></div>
<h2>This node: held-out accuracy and reward</h2>
<svg id="chart" width="720" height="260" role="img" aria-label="curves"></svg>
<div class="legend"><span style="color:#2a9d3a">&#9679; held-out ID accuracy</span>
<span style="color:#d0342c">&#9679; held-out OOD accuracy</span>
<span style="color:#7aa6d6">&#9679; sampled training reward</span></div>
<div id="credit-panel"><h2>Credit: what other peers trained on of ours, from their signed receipts</h2>
<div id="credit"></div></div>
<h2>Rejected records, by reason</h2><div id="rejected"></div>
<h2 id="peers-title">Peers</h2>
<table id="peers"><thead><tr><th>peer</th><th>model</th><th>size</th><th>step</th><th>held-out ID</th>
<th>their groups we used</th><th>our groups they used</th><th>our rows they signed for</th><th>read</th>
<th>standing</th></tr></thead>
<tbody></tbody></table>
<script>
"use strict";
const SVG = "http://www.w3.org/2000/svg";
function el(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls; return e; }
function num(x, d) { return (x === undefined || x === null || x < 0) ? "-" : Number(x).toFixed(d); }
function card(label, value) { const c = el("div", undefined, "card"); c.append(el("b", value), el("span", label));
  return c; }
function size(p) { return p >= 1e9 ? (p / 1e9).toFixed(1) + "B" : p >= 1e6 ? (p / 1e6).toFixed(2) + "M"
  : (p / 1e3).toFixed(0) + "K"; }
function line(svg, points, x, y, color, width, dots) {
  if (!points.length) return;
  const pl = document.createElementNS(SVG, "polyline");
  pl.setAttribute("points", points.map(p => x(p[0]) + "," + y(p[1])).join(" "));
  pl.setAttribute("fill", "none"); pl.setAttribute("stroke", color); pl.setAttribute("stroke-width", width);
  pl.setAttribute("class", "curve"); svg.append(pl);
  if (dots) for (const p of points) { const c = document.createElementNS(SVG, "circle");
    c.setAttribute("cx", x(p[0])); c.setAttribute("cy", y(p[1])); c.setAttribute("r", 3);
    c.setAttribute("fill", color); svg.append(c); }
}
function chart(curves) {
  const svg = document.getElementById("chart"); svg.replaceChildren();
  const W = 720, H = 260, L = 40, B = 24, reward = curves.reward || [], acc = curves.accuracy || [];
  const xs = reward.map(p => p[0]).concat(acc.map(p => p[0])), xmax = Math.max(1, ...xs);
  const x = v => L + (W - L - 10) * v / xmax, y = v => 10 + (H - B - 10) * (1 - v);
  for (const t of [0, 0.25, 0.5, 0.75, 1]) { const g = document.createElementNS(SVG, "line");
    g.setAttribute("x1", L); g.setAttribute("x2", W - 10); g.setAttribute("y1", y(t)); g.setAttribute("y2", y(t));
    g.setAttribute("stroke", "#eee"); svg.append(g); const lab = document.createElementNS(SVG, "text");
    lab.setAttribute("x", 4); lab.setAttribute("y", y(t) + 4); lab.setAttribute("font-size", 11);
    lab.textContent = t.toFixed(2); svg.append(lab); }
  const xl = document.createElementNS(SVG, "text"); xl.setAttribute("x", W - 60); xl.setAttribute("y", H - 6);
  xl.setAttribute("font-size", 11); xl.textContent = "step " + Math.round(xmax); svg.append(xl);
  line(svg, reward, x, y, "#7aa6d6", 1.5, false);
  line(svg, acc.filter(p => p[1] !== null).map(p => [p[0], p[1]]), x, y, "#2a9d3a", 2.5, true);
  line(svg, acc.filter(p => p[2] !== null).map(p => [p[0], p[2]]), x, y, "#d0342c", 2.5, true);
}
function render(s) {
  document.getElementById("title").textContent = "swarm-node " + s.role + (s.model ? ": " + s.model : "");
  document.getElementById("peer").textContent = s.peer_id + "  (up " + Math.round(s.uptime) + " s)" +
    (s.task ? (s.role === "peer" ? "  task " : "  the swarm's task: ") + s.task : "");
  const cards = document.getElementById("cards"); cards.replaceChildren();
  const acc = s.accuracy || {};
  if (s.role === "peer") cards.append(card("steps", s.step), card("reward (last 20 steps)", num(s.reward, 3)),
    card("held-out ID", num(acc["train/greedy"], 3)), card("held-out OOD", num(acc["test/greedy"], 3)),
    card("group size G", s.group_size));
  cards.append(card("peers present", s.peers), card("groups sent", s.groups_out), card("groups used", s.groups_in));
  const c = s.credit || {};
  if (s.role === "peer") cards.append(card("our rows others trained on (signed)", c.rows || 0),
    card("peers that signed for them", c.receivers || 0));
  else cards.append(card("groups / minute", num(s.groups_per_minute, 0)));
  const panel = document.getElementById("credit-panel"); panel.hidden = s.role !== "peer";
  document.getElementById("credit").textContent = (c.rows || 0) + " rows in " + (c.groups || 0) +
    " of our groups, trained on by " + (c.receivers || 0) + (c.receivers === 1 ? " peer" : " peers") +
    ", from " + (c.receipts || 0) + " signed receipts" +
    (c.file && c.receipts ? "; anyone can check them: swarm credit verify " + c.file : "") +
    ". Their announcements say " + s.credited + " groups (" + s.credited_by + " peers; not signed).";
  cards.append(card("distrusted / demoted", s.distrusted + " / " + s.demoted));
  const rej = document.getElementById("rejected"); rej.replaceChildren();
  const reasons = Object.entries(s.rejected || {}).filter(e => e[1] > 0);
  rej.textContent = reasons.length ? reasons.map(e => e[0] + " " + e[1]).join(", ") : "none";
  chart(s.curves || {});
  const body = document.querySelector("#peers tbody"); body.replaceChildren();
  document.getElementById("peers-title").textContent = "Peers (" + s.peer_list.length + "; model, size, step " +
    "and accuracy as each peer claims)";
  for (const p of s.peer_list) { const tr = el("tr");
    tr.append(el("td", p.peer_id.slice(0, 14) + "..."), el("td", p.model || "?"),
      el("td", p.family + " " + size(p.params) + (p.lora ? " LoRA" : "")), el("td", p.step, "n"),
      el("td", num(p.accuracy, 3), "n"), el("td", p.used, "n"), el("td", p.credited, "n"),
      el("td", p.receipted_rows || 0, "n"),
      el("td", Math.round(p.age) + " s ago", "n"),
      el("td", s.role === "bootstrap" ? "" : (p.established ? "established" : "newcomer") +
        (p.failures ? ", " + p.failures + " failed pulls" : "")));
    body.append(tr); }
  document.body.dataset.step = s.step;
}
async function refresh() {
  try { const r = await fetch("/api/status", {cache: "no-store"}); render(await r.json());
    document.getElementById("error").textContent = ""; }
  catch (e) { document.getElementById("error").textContent = "node not answering: " + e; }
}
refresh(); setInterval(refresh, __REFRESH__);
</script></body></html>
"""
