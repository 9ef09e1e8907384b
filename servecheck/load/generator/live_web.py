"""``servecheck load --web``: the live view inside Locust's own web UI (no second web app).

:func:`install` adds to Locust's Flask app (``environment.web_ui.app``, handed in by
``load/generator/locust_user.py``, so this module needs no locust import):

* an **LLM** tab in Locust's UI (its ``extendedTabs`` / ``extendedTables``: the window's TTFT,
  TTFA, ITL and E2E quantiles, requests and tokens per second, the error classes), filled from
  the ``extended_stats`` that Locust's UI reads with its own ``/stats/requests`` poll;
* ``/llm``: live charts of every slice of the run (SVG drawn by the page, which polls
  ``/llm/live.json`` once a second), linked from Locust's *Download Data* tab;
* ``/llm/live.json``: the :class:`~servecheck.load.generator.live.LiveView` snapshot;
* with ``auth`` (``USER:PASS``), HTTP Basic authentication on every route, Locust's own
  included: what ``--web`` bound beyond loopback requires (checked by the command's spec).
"""

from __future__ import annotations

import base64
import hmac
import json
from typing import Any

from servecheck.load.generator.live import LiveView

__all__ = ["PAGE", "install", "tab_rows"]

TAB_KEY = "llm"
_TABLE = [
    {"key": "metric", "title": "Metric (last complete window)"},
    {"key": "value", "title": "Value"},
    {"key": "p50", "title": "p50 ms"},
    {"key": "p95", "title": "p95 ms"},
    {"key": "p99", "title": "p99 ms"},
]


def tab_rows(snap: dict[str, Any]) -> list[dict[str, Any]]:
    """The LLM tab's rows from a snapshot (an empty table before the first complete window)."""
    win = snap.get("window")
    tot = snap["totals"]
    rows: list[dict[str, Any]] = []
    if win is not None:
        span = f"{win['start_s']:.0f}-{win['end_s']:.0f} s"
        for m, name in (("ttft", "TTFT"), ("ttfa", "TTFA"), ("itl", "ITL"), ("e2e", "E2E")):
            q = win[f"{m}_ms"]
            rows.append({"metric": name, "value": span, **{k: q[k] for k in ("p50", "p95", "p99")}})
        for key, name in (
            ("requests_per_s", "requests/s"),
            ("output_tokens_per_s", "output tokens/s"),
            ("in_flight", "in flight (mean)"),
            ("error_ratio", "error ratio"),
        ):
            rows.append({"metric": name, "value": win[key], "p50": "", "p95": "", "p99": ""})
        for cls, n in win["error_classes"].items():
            rows.append({"metric": f"errors: {cls}", "value": n, "p50": "", "p95": "", "p99": ""})
    rows.append(
        {
            "metric": "run so far: requests ok / failed",
            "value": f"{tot['ok']} / {sum(tot['errors'].values())}",
            "p50": "",
            "p95": "",
            "p99": "",
        }
    )
    return rows


def _authorised(header: str | None, auth: str) -> bool:
    if not header or not header.startswith("Basic "):
        return False
    try:
        given = base64.b64decode(header[6:], validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return False
    return hmac.compare_digest(given.encode(), auth.encode())


def install(web_ui: Any, view: LiveView, auth: str | None = None) -> None:
    """Hook the live view into Locust's web UI (its ``web_ui`` object: ``app``,
    ``template_args``)."""
    from flask import Response, jsonify, request

    app = web_ui.app
    if auth:

        @app.before_request
        def _basic_auth() -> Any:
            if _authorised(request.headers.get("Authorization"), auth):
                return None
            return Response(
                "servecheck load: the live view needs authentication\n",
                401,
                {"WWW-Authenticate": 'Basic realm="servecheck load"'},
            )

    web_ui.template_args["extendedTabs"] = [{"title": "LLM", "key": TAB_KEY}]
    web_ui.template_args["extendedTables"] = [{"key": TAB_KEY, "structure": _TABLE}]
    web_ui.template_args["extendedCsvFiles"] = [
        {"href": "./llm", "title": "LLM live charts (servecheck: TTFT, TTFA, ITL, E2E per window)"},
        {"href": "./llm/live.json", "title": "LLM live view as JSON (servecheck)"},
    ]

    @app.route("/llm")
    def _llm_page() -> Any:
        return Response(PAGE, mimetype="text/html")

    @app.route("/llm/live.json")
    def _llm_json() -> Any:
        return jsonify(view.snapshot())

    @app.after_request
    def _extend_stats(response: Any) -> Any:
        if request.path.rstrip("/").endswith("/stats/requests") and response.is_json:
            body = response.get_json()
            body["extended_stats"] = [{"key": TAB_KEY, "data": tab_rows(view.snapshot())}]
            response.set_data(json.dumps(body))
        return response


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>servecheck load: live</title>
<style>
body{font-family:system-ui,sans-serif;margin:16px;color:#222;background:#fff}
h1{font-size:18px;margin:0 0 6px} .sub{color:#666;font-size:13px;margin-bottom:10px}
.grid{display:grid;grid-template-columns:repeat(2,560px);gap:14px}
.card{border:1px solid #ddd;border-radius:6px;padding:8px}
.card h2{font-size:14px;margin:0 0 4px} svg{display:block}
table{border-collapse:collapse;font-size:13px;margin-top:10px} td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:right}
.legend span{font-size:12px;margin-right:10px}
</style></head><body>
<h1>servecheck load: live view</h1>
<div class="sub" id="head">waiting for the first requests...</div>
<div class="sub" id="totals" data-requests="0"></div>
<div class="grid" id="charts"></div>
<table id="errors"><thead><tr><th>error class</th><th>last window</th><th>run so far</th></tr></thead><tbody></tbody></table>
<script>
const COLORS=["#1f77b4","#ff7f0e","#d62728"];
const CHARTS=[["ttft","TTFT (ms)"],["ttfa","TTFA (ms)"],["itl","ITL (ms)"],["e2e","E2E (ms)"],
  ["rate","requests/s and output tokens/s"],["err","errors per window"]];
const grid=document.getElementById("charts");
for(const [k,t] of CHARTS){const d=document.createElement("div");d.className="card";
  d.innerHTML=`<h2>${t}</h2><svg id="c-${k}" width="540" height="200"></svg><div class="legend" id="l-${k}"></div>`;grid.appendChild(d);}
function draw(id,xs,series,names){
  const svg=document.getElementById("c-"+id),W=540,H=200,L=50,B=22;
  let ymax=0;for(const s of series)for(const v of s)if(v!=null&&v>ymax)ymax=v;if(!ymax)ymax=1;
  const xmax=Math.max(1,...xs);let h=`<line x1="${L}" y1="${H-B}" x2="${W}" y2="${H-B}" stroke="#999"/>`;
  h+=`<line x1="${L}" y1="0" x2="${L}" y2="${H-B}" stroke="#999"/>`;
  for(let g=0;g<=4;g++){const y=(H-B)*(1-g/4);h+=`<text x="${L-4}" y="${Math.max(y+4,10)}" font-size="10" text-anchor="end">${(ymax*g/4).toPrecision(3)}</text>`;}
  h+=`<text x="${W-2}" y="${H-4}" font-size="10" text-anchor="end">${xmax.toFixed(0)} s</text>`;
  series.forEach((s,j)=>{const pts=[];s.forEach((v,i)=>{if(v!=null)pts.push(`${(L+(W-L)*xs[i]/xmax).toFixed(1)},${((H-B)*(1-v/ymax)).toFixed(1)}`)});
    h+=`<polyline class="line" data-n="${pts.length}" fill="none" stroke="${COLORS[j%3]}" stroke-width="2" points="${pts.join(" ")}"/>`;});
  svg.innerHTML=h;document.getElementById("l-"+id).innerHTML=names.map((n,j)=>`<span style="color:${COLORS[j%3]}">&#9632; ${n}</span>`).join("");
}
async function poll(){
  try{const r=await fetch("./llm/live.json",{cache:"no-store"});const s=await r.json();render(s);}catch(e){document.getElementById("head").textContent="the run has ended (or the view is unreachable): "+e;}
}
function render(s){
  const rows=s.series,xs=rows.map(r=>r.end_s),t=s.totals,w=s.window,info=s.info||{};
  document.getElementById("head").textContent=`run ${info.run_id||""} on ${info.target||""} (${info.model||""}), scenario ${info.scenario||""}: ${s.workers} process(es), window ${s.slice_s||"-"} s`;
  const failed=Object.values(t.errors).reduce((a,b)=>a+b,0);
  const tot=document.getElementById("totals");tot.dataset.requests=t.requests;tot.dataset.windowEnd=w?w.end_s:"";
  tot.dataset.ttftP50=w&&w.ttft_ms.p50!=null?w.ttft_ms.p50:"";
  tot.textContent=`requests ok ${t.ok}, failed ${failed}, in flight ${t.in_flight}, output tokens ${t.output_tokens}`+(w?` | last window ${w.start_s}-${w.end_s} s: TTFT p50 ${w.ttft_ms.p50} ms, ${w.requests_per_s} req/s, ${w.output_tokens_per_s} tok/s`:"");
  for(const m of ["ttft","ttfa","itl","e2e"])draw(m,xs,["p50","p95","p99"].map(q=>rows.map(r=>r[m+"_ms"][q])),["p50","p95","p99"]);
  draw("rate",xs,[rows.map(r=>r.requests_per_s),rows.map(r=>r.output_tokens_per_s)],["requests/s","output tokens/s"]);
  draw("err",xs,[rows.map(r=>r.errors)],["failed requests"]);
  const body=document.querySelector("#errors tbody");const classes=new Set([...Object.keys(t.errors),...Object.keys(w?w.error_classes:{})]);
  body.innerHTML=[...classes].sort().map(c=>`<tr><td>${c}</td><td>${w&&w.error_classes[c]||0}</td><td>${t.errors[c]||0}</td></tr>`).join("");
}
poll();setInterval(poll,1000);
</script></body></html>
"""
