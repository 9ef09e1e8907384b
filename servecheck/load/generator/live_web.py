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
from importlib import resources
from typing import Any

from servecheck.load.generator.live import LiveView

__all__ = ["install", "live_page", "tab_rows"]


def live_page() -> str:
    """The ``/llm`` page: a file the report package ships (``report/pages/live.html``: the page
    is for people, so it lives beside the other pages), read as data, not imported."""
    return resources.files("servecheck.report").joinpath("pages/live.html").read_text("utf-8")


TAB_KEY = "llm"
# Each column holds one kind of value (issue 41: "Value" held the window for the latency rows):
# the window a row is about, a latency row's quantiles, any other row's one number (its unit in
# the metric's name).
_TABLE = [
    {"key": "metric", "title": "Metric"},
    {"key": "window", "title": "Window"},
    {"key": "p50", "title": "p50 ms"},
    {"key": "p95", "title": "p95 ms"},
    {"key": "p99", "title": "p99 ms"},
    {"key": "value", "title": "Value"},
]
_LATENCY = (("ttft", "TTFT"), ("ttfa", "TTFA"), ("itl", "ITL"), ("e2e", "E2E"))
_FIGURES = (
    ("requests_per_s", "requests/s"),
    ("output_tokens_per_s", "output tokens/s"),
    ("in_flight", "in flight (mean)"),
    ("error_ratio", "error ratio"),
)
RUN_SO_FAR = "run so far"


def _row(metric: str, window: str, value: Any = "", **quantiles: Any) -> dict[str, Any]:
    return {
        "metric": metric,
        "window": window,
        **{k: quantiles.get(k, "") for k in ("p50", "p95", "p99")},
        "value": value,
    }


def tab_rows(snap: dict[str, Any]) -> list[dict[str, Any]]:
    """The LLM tab's rows from a snapshot: the last complete window's latency quantiles and
    figures (none before the first), then the run's counts so far."""
    win = snap.get("window")
    tot = snap["totals"]
    rows: list[dict[str, Any]] = []
    if win is not None:
        span = f"{win['start_s']:.0f}-{win['end_s']:.0f} s"
        for m, name in _LATENCY:
            q = win[f"{m}_ms"]
            rows.append(_row(name, span, **{k: q[k] for k in ("p50", "p95", "p99")}))
        rows += [_row(name, span, win[key]) for key, name in _FIGURES]
        rows += [_row(f"errors: {cls}", span, n) for cls, n in win["error_classes"].items()]
    rows.append(_row("requests ok", RUN_SO_FAR, tot["ok"]))
    rows.append(_row("requests failed", RUN_SO_FAR, sum(tot["errors"].values())))
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
    page = live_page()
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
        return Response(page, mimetype="text/html")

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
